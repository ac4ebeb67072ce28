/* The CUDA backend's own parts on the emulator (kind "cuda-emu"): its memory operations against the CPU
 * backend's, byte for byte (slice, concat_blocks, split_blocks over every axis, 4-byte and odd element
 * sizes, fill, copy, upload/download) and its cast kernel (float32 <-> bfloat16, the same bits for every input
 * pattern), and its einsum's precisions against a double-precision product:
 *   - fp32: within 1e-6 of the reference (relative to the product's scale);
 *   - bf16 (backend.precision bf16: the graph's matmul dtype, so the einsum gets bfloat16 operands through
 *     casts): within 1e-6 of the product of the bf16-rounded inputs, and NOT within 1e-4 of the exact product
 *     (so the rounding did happen: fp32 would pass the first bound too);
 *   - tf32 (backend.tf32): within 2e-3 of the exact product.
 * Operand orders cover the in-place transposes, packing and an unpacked product, a batch dim and dims summed
 * out of one operand (bfloat16: the GEMM on the operands as they are, or on float32 widened copies). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "comm/world.h"
#include "exec/backend.h"

static uint32_t lcg = 12345;
static float uniform(void) {
  lcg = lcg * 1664525u + 1013904223u;
  return (float)((lcg >> 8) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

static int backend_pair(const mtf_backend_options *emu_options, mtf_backend **cpu, mtf_backend **emu) {
  mtf_error err;
  mtf_backend_options cpu_options = {.kind = "cpu", .threads = 1};
  if (mtf_backend_create(&cpu_options, cpu, &err) || mtf_backend_create(emu_options, emu, &err)) {
    fprintf(stderr, "FAIL backends: %s\n", err.msg);
    return 0;
  }
  return 1;
}

/* Runs one memory operation on both backends from the same bytes and compares the outputs. */
typedef int (*memory_op)(mtf_backend *b, const void *in, void *out, void *arg);

static void compare_op_from(mtf_backend *cpu, mtf_backend *emu, memory_op op, void *arg, const unsigned char *host_in,
                            size_t in_bytes, size_t out_bytes, const char *what) {
  unsigned char *cpu_out = malloc(out_bytes), *emu_out = malloc(out_bytes);
  memset(cpu_out, 0xab, out_bytes);
  void *cin = cpu->mem->allocate(cpu, in_bytes), *cout = cpu->mem->allocate(cpu, out_bytes);
  void *din = emu->mem->allocate(emu, in_bytes), *dout = emu->mem->allocate(emu, out_bytes);
  cpu->mem->upload(cpu, cin, host_in, in_bytes);
  cpu->mem->upload(cpu, cout, cpu_out, out_bytes);
  CHECK(emu->mem->upload(emu, din, host_in, in_bytes) == MTF_OK);
  CHECK(emu->mem->upload(emu, dout, cpu_out, out_bytes) == MTF_OK); /* same untouched bytes in both */
  CHECK(op(cpu, cin, cout, arg) == MTF_OK);
  int rc = op(emu, din, dout, arg);
  CHECK(rc == MTF_OK);
  CHECK(emu->mem->synchronize(emu) == MTF_OK);
  cpu->mem->download(cpu, cpu_out, cout, out_bytes);
  CHECK(emu->mem->download(emu, emu_out, dout, out_bytes) == MTF_OK);
  int same = memcmp(cpu_out, emu_out, out_bytes) == 0;
  if (!same) fprintf(stderr, "FAIL %s: cuda-emu differs from cpu\n", what);
  CHECK(same);
  cpu->mem->release(cpu, cin), cpu->mem->release(cpu, cout);
  emu->mem->release(emu, din), emu->mem->release(emu, dout);
  free(cpu_out), free(emu_out);
}

static void compare_op(mtf_backend *cpu, mtf_backend *emu, memory_op op, void *arg, size_t in_bytes, size_t out_bytes,
                       const char *what) {
  unsigned char *host_in = malloc(in_bytes);
  for (size_t i = 0; i < in_bytes; i++) host_in[i] = (unsigned char)(i * 7 + 3);
  compare_op_from(cpu, emu, op, arg, host_in, in_bytes, out_bytes, what);
  free(host_in);
}

typedef struct blocks_arg {
  size_t elem;
  int rank, axis, parts;
  int64_t dims[4];
} blocks_arg;

static int op_concat(mtf_backend *b, const void *in, void *out, void *arg) {
  blocks_arg *a = arg;
  return b->mem->concat_blocks(b, in, out, a->elem, a->rank, a->dims, a->axis, a->parts);
}
static int op_split(mtf_backend *b, const void *in, void *out, void *arg) {
  blocks_arg *a = arg;
  return b->mem->split_blocks(b, in, out, a->elem, a->rank, a->dims, a->axis, a->parts);
}

typedef struct slice_arg {
  size_t elem;
  mtf_shape in, out;
  int64_t offsets[MTF_MAX_RANK];
} slice_arg;

static int op_slice(mtf_backend *b, const void *in, void *out, void *arg) {
  slice_arg *a = arg;
  return b->mem->slice(b, &a->in, in, &a->out, a->offsets, out, a->elem);
}

static int op_fill_copy(mtf_backend *b, const void *in, void *out, void *arg) {
  int64_t n = *(int64_t *)arg;
  MTF_CHECK(b->mem->copy(b, out, in, (size_t)n * 4));
  return b->mem->fill_f32(b, (float *)out + n / 3, -2.5f, n / 2); /* over part of the copy */
}

/* The cast kernel (MTF_OP_CAST) over n elements; both backends must give the same bits (core/bf16.h's
 * rounding on each) for every kind of input: random float32 bit patterns (NaNs with payloads, subnormals)
 * and the edge cases (ties both ways, overflow to infinity, infinities, signed zeros), and every bfloat16. */
typedef struct cast_arg {
  mtf_dtype from, to;
  int64_t n;
} cast_arg;

static int op_cast(mtf_backend *b, const void *in, void *out, void *arg) {
  cast_arg *c = arg;
  mtf_step st;
  memset(&st, 0, sizeof st);
  st.kind = MTF_STEP_KERNEL;
  st.op = MTF_OP_CAST;
  st.n_in = 1;
  st.in_dtype[0] = c->from;
  st.out_dtype = c->to;
  st.params.cast.to = c->to;
  st.scratch = -1;
  mtf_shape_append(&st.in_shape[0], "x", c->n, NULL);
  st.out_shape = st.in_shape[0];
  mtf_kernel_args a;
  memset(&a, 0, sizeof a);
  a.in[0] = in;
  a.out = out;
  return b->kernels[MTF_OP_CAST](b, &st, &a);
}

static void test_memory(mtf_backend *cpu, mtf_backend *emu) {
  enum { N32 = 4099, N16 = 65536 };
  static const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                                   0xff800000u, 0x80000000u, 0x00000000u, 0x7f800001u, 0xffc00000u, 0x007fffffu,
                                   0x00008000u, 0x00018000u, 0x7f7f8000u};
  uint32_t *f32 = malloc(sizeof(uint32_t) * N32);
  uint16_t *b16 = malloc(sizeof(uint16_t) * N16);
  for (int i = 0; i < N32; i++) {
    lcg = lcg * 1664525u + 1013904223u;
    f32[i] = i < (int)(sizeof edges / sizeof edges[0]) ? edges[i] : lcg ^ (lcg << 13);
  }
  for (int i = 0; i < N16; i++) b16[i] = (uint16_t)i;
  cast_arg to_bf16 = {MTF_F32, MTF_BF16, N32}, to_f32 = {MTF_BF16, MTF_F32, N16};
  compare_op_from(cpu, emu, op_cast, &to_bf16, (const unsigned char *)f32, N32 * 4, N32 * 2,
                  "cast float32 -> bfloat16");
  compare_op_from(cpu, emu, op_cast, &to_f32, (const unsigned char *)b16, N16 * 2, N16 * 4,
                  "cast bfloat16 -> float32");
  free(f32), free(b16);
  const size_t elems[] = {4, 8, 2, 3};
  for (size_t e = 0; e < sizeof elems / sizeof elems[0]; e++) {
    for (int axis = 0; axis < 3; axis++) {
      blocks_arg a = {.elem = elems[e], .rank = 3, .axis = axis, .parts = 3, .dims = {2, 5, 3}};
      size_t one = (size_t)(2 * 5 * 3) * elems[e];
      char what[96];
      snprintf(what, sizeof what, "concat_blocks elem %zu axis %d", elems[e], axis);
      compare_op(cpu, emu, op_concat, &a, one * 3, one * 3, what);
      a.dims[axis] *= 3; /* split: the whole tensor's dims */
      snprintf(what, sizeof what, "split_blocks elem %zu axis %d", elems[e], axis);
      compare_op(cpu, emu, op_split, &a, one * 3, one * 3, what);
    }
    slice_arg s = {.elem = elems[e], .offsets = {1, 0, 2}};
    mtf_shape_parse("a:4,b:3,c:7", "in", &s.in, NULL);
    mtf_shape_parse("x:2,y:3,z:4", "out", &s.out, NULL); /* matched by position, not name */
    char what[64];
    snprintf(what, sizeof what, "slice elem %zu", elems[e]);
    compare_op(cpu, emu, op_slice, &s, (size_t)(4 * 3 * 7) * elems[e], (size_t)(2 * 3 * 4) * elems[e], what);
  }
  int64_t n = 1000;
  compare_op(cpu, emu, op_fill_copy, &n, (size_t)n * 4, (size_t)n * 4, "copy + fill_f32");
}

/* ---- einsum precisions ---- */

static float bf16_round(float f) { /* round to nearest even on the top 16 bits (finite inputs) */
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

typedef struct einsum_case {
  const char *name, *a, *b, *out;
} einsum_case;

/* The whole product in double through a walk over out x k by names (a, b, out given as "n:s,..."). */
static void reference(const mtf_shape *as, const float *a, const mtf_shape *bs, const float *b, const mtf_shape *os,
                      double *out, int round_bf16) {
  mtf_shape all = *os; /* out's dims, then a's and b's others (summed) */
  for (int d = 0; d < as->rank; d++)
    if (mtf_shape_index_of(&all, as->dims[d].name) < 0) all.dims[all.rank++] = as->dims[d];
  for (int d = 0; d < bs->rank; d++)
    if (mtf_shape_index_of(&all, bs->dims[d].name) < 0) all.dims[all.rank++] = bs->dims[d];
  int64_t n_out = mtf_shape_num_elements(os), n_all = mtf_shape_num_elements(&all);
  memset(out, 0, sizeof *out * (size_t)n_out);
  for (int64_t i = 0; i < n_all; i++) {
    int64_t idx[MTF_MAX_RANK], rest = i;
    for (int d = all.rank - 1; d >= 0; d--) idx[d] = rest % all.dims[d].size, rest /= all.dims[d].size;
    int64_t ai = 0, bi = 0, oi = 0;
    for (int d = 0; d < as->rank; d++) ai = ai * as->dims[d].size + idx[mtf_shape_index_of(&all, as->dims[d].name)];
    for (int d = 0; d < bs->rank; d++) bi = bi * bs->dims[d].size + idx[mtf_shape_index_of(&all, bs->dims[d].name)];
    for (int d = 0; d < os->rank; d++) oi = oi * os->dims[d].size + idx[d];
    float x = a[ai], y = b[bi];
    if (round_bf16) x = bf16_round(x), y = bf16_round(y);
    out[oi] += (double)x * (double)y;
  }
}

/* Max |engine - ref| over max |ref|. */
static double run_einsum(const einsum_case *c, const mtf_backend_options *backend, const float *a, const float *b,
                         const double *ref, mtf_comm *comm) {
  mtf_shape as, bs, os;
  mtf_shape_parse(c->a, "a", &as, NULL);
  mtf_shape_parse(c->b, "b", &bs, NULL);
  mtf_shape_parse(c->out, "out", &os, NULL);
  mtf_graph *g = mtf_graph_create(1);
  if (backend->precision == MTF_PRECISION_BF16) mtf_graph_set_matmul_dtype(g, MTF_BF16);
  mtf_tensor ta = mtf_input(g, "a", &as), tb = mtf_input(g, "b", &bs);
  mtf_tensor prod = mtf_einsum2(g, ta, tb, &os);
  mtf_layout_rules rules;
  mtf_error err;
  mtf_layout_rules_parse("", &rules, &err);
  mtf_plan *plan = NULL;
  mtf_session *s = NULL;
  mtf_session_options options = {.backend = backend->kind, .tf32 = backend->tf32, .precision = backend->precision};
  int64_t n = mtf_shape_num_elements(&os);
  float *got = malloc(sizeof *got * (size_t)n);
  double worst = INFINITY;
  if (mtf_plan_create(g, &comm->mesh, &rules, 0, 1, &prod, &plan, &err) == MTF_OK &&
      mtf_session_create(plan, comm, &options, &s, &err) == MTF_OK && mtf_session_set_input(s, ta, a, &err) == MTF_OK &&
      mtf_session_set_input(s, tb, b, &err) == MTF_OK && mtf_session_run(s, &err) == MTF_OK &&
      mtf_session_fetch(s, prod, got, &err) == MTF_OK) {
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) diff = fmax(diff, fabs((double)got[i] - ref[i]));
    worst = diff / (scale > 0 ? scale : 1);
  } else {
    fprintf(stderr, "FAIL %s: %s\n", c->name, err.msg);
  }
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  free(got);
  return worst;
}

static void test_einsum(mtf_comm *comm) {
  static const einsum_case cases[] = {
      {"in place", "m:37,k:53", "k:53,n:29", "m:37,n:29"},
      {"transposed flags", "k:53,m:37", "n:29,k:53", "m:37,n:29"},
      {"batch, packed operands and product", "m:9,e:3,k:40", "k:40,e:3,n:11", "n:11,e:3,m:9"},
      {"batched in place", "e:2,m:17,k:64", "e:2,k:64,n:5", "e:2,m:17,n:5"},
      {"operands in place, product unpacked", "e:3,m:9,k:40", "e:3,k:40,n:11", "n:11,e:3,m:9"},
      {"product [n][m]: operands swapped", "e:2,k:33,m:9", "e:2,k:33,n:13", "e:2,n:13,m:9"},
      {"dims summed out of each operand", "m:7,x:3,k:30", "y:2,k:30,n:5", "m:7,n:5"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const einsum_case *c = &cases[i];
    mtf_shape as, bs, os;
    mtf_shape_parse(c->a, "a", &as, NULL);
    mtf_shape_parse(c->b, "b", &bs, NULL);
    mtf_shape_parse(c->out, "out", &os, NULL);
    int64_t na = mtf_shape_num_elements(&as), nb = mtf_shape_num_elements(&bs), no = mtf_shape_num_elements(&os);
    float *a = malloc(sizeof *a * (size_t)na), *b = malloc(sizeof *b * (size_t)nb);
    for (int64_t j = 0; j < na; j++) a[j] = uniform();
    for (int64_t j = 0; j < nb; j++) b[j] = uniform();
    double *exact = malloc(sizeof *exact * (size_t)no), *rounded = malloc(sizeof *rounded * (size_t)no);
    reference(&as, a, &bs, b, &os, exact, 0);
    reference(&as, a, &bs, b, &os, rounded, 1);
    mtf_backend_options fp32 = {.kind = "cuda-emu"}, bf16 = {.kind = "cuda-emu", .precision = MTF_PRECISION_BF16},
                        tf32 = {.kind = "cuda-emu", .tf32 = 1};
    double e_fp32 = run_einsum(c, &fp32, a, b, exact, comm);
    double e_bf16 = run_einsum(c, &bf16, a, b, rounded, comm);
    double e_bf16_exact = run_einsum(c, &bf16, a, b, exact, comm);
    double e_tf32 = run_einsum(c, &tf32, a, b, exact, comm);
    printf("%-36s fp32 %.2e  bf16 vs rounded inputs %.2e (vs exact %.2e)  tf32 %.2e\n", c->name, e_fp32, e_bf16,
           e_bf16_exact, e_tf32);
    CHECK(e_fp32 < 1e-6);
    CHECK(e_bf16 < 1e-6);
    CHECK(e_bf16_exact > 1e-4 && e_bf16_exact < 5e-2);
    CHECK(e_tf32 < 2e-3);
    free(a), free(b), free(exact), free(rounded);
  }
}

/* A plan larger than the device (a 32 GiB variable on the emulator's 16 GiB GPU): the session is refused at
 * creation, naming the GPU's free and total memory and what lowers the need, as a real GPU's cudaMalloc
 * failure would be (issue 35). */
static void test_out_of_device_memory(mtf_comm *comm) {
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape big;
  mtf_shape_parse("a:8192,b:1048576", "big", &big, NULL);
  mtf_tensor w = mtf_variable(g, "w", &big, MTF_INIT_ZEROS, 0.0f);
  mtf_layout_rules rules;
  mtf_error err;
  mtf_layout_rules_parse("", &rules, &err);
  mtf_plan *plan = NULL;
  mtf_session *s = NULL;
  mtf_session_options options = {.backend = "cuda-emu"};
  int planned = mtf_plan_create(g, &comm->mesh, &rules, 0, 1, &w, &plan, &err) == MTF_OK;
  int rc = planned ? mtf_session_create(plan, comm, &options, &s, &err) : MTF_OK;
  CHECK(planned && rc == MTF_ERR_NOMEM);
  if (rc == MTF_ERR_NOMEM) {
    CHECK_CONTAINS(err.msg, "backend 'cuda' cannot allocate", "the GPU has", "GiB free of 16.00 GiB",
                   "train.microbatches");
    printf("out of device memory: %s\n", err.msg);
  }
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  mtf_world_init(&argc, &argv);
  mtf_backend *cpu = NULL, *emu = NULL;
  mtf_backend_options emu_options = {.kind = "cuda-emu"};
  if (backend_pair(&emu_options, &cpu, &emu)) test_memory(cpu, emu);
  mtf_backend_destroy(cpu);
  mtf_backend_destroy(emu);
  mtf_shape mesh;
  mtf_comm *comm = NULL;
  mtf_error err;
  if (mtf_mesh_parse("m:1", &mesh, &err) || mtf_comm_self_create(&mesh, &comm, &err)) {
    fprintf(stderr, "FAIL comm: %s\n", err.msg);
    return 1;
  }
  test_einsum(comm);
  test_out_of_device_memory(comm);
  mtf_comm_destroy(comm);
  int rc = check_summary();
  mtf_world_finalize();
  return rc;
}
