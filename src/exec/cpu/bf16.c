/* bfloat16 on the CPU: the cast kernel (core/bf16.h's rounding) and the einsum of two bfloat16 operands with
 * fp32 accumulation and a float32 result. Products go to oneDNN's matmul (AMX tiles on Sapphire Rapids,
 * AVX512-BF16 on Zen 4 / Cooper Lake), whose primitives are made once per shape and kept. Where oneDNN has
 * no bfloat16 instructions to use (an older CPU, or MTF_CPU_BF16=convert), and for the operand orders that
 * need a sum or a transpose first, the operands are widened to float32 and the float32 einsum runs: the same
 * numbers up to the order of the fp32 additions, since a product of two bfloat16 values is exact in fp32. */
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "exec/cpu/parallel.h"
#include "ops/einsum_dims.h"

/* ---- which path, once per process ---- */
static pthread_once_t path_once = PTHREAD_ONCE_INIT;
static int native;        /* oneDNN runs bfloat16 on this CPU */
static char path_text[160];

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "unknown";
  }
}

static void choose_path(void) {
  /* oneDNN 2.6 treats AMX as "initial support": used only when asked for, which this does unless the user
   * capped the ISA through ONEDNN_MAX_CPU_ISA (then oneDNN's own reading of it stands). */
  if (!getenv("ONEDNN_MAX_CPU_ISA") && !getenv("DNNL_MAX_CPU_ISA")) dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_amx);
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const dnnl_version_t *v = dnnl_version();
  const char *forced = getenv("MTF_CPU_BF16");
  int convert = forced && strcmp(forced, "convert") == 0;
  native = !convert && (isa == dnnl_cpu_isa_avx512_core_amx || isa == dnnl_cpu_isa_avx512_core_bf16);
  if (native)
    snprintf(path_text, sizeof path_text, "bf16 matmuls on oneDNN %d.%d.%d, ISA %s", v->major, v->minor, v->patch,
             isa_name(isa));
  else
    snprintf(path_text, sizeof path_text, "bf16 matmuls through conversion to fp32 sgemm (%s; oneDNN %d.%d.%d ISA %s)",
             convert ? "MTF_CPU_BF16=convert" : "this CPU has no bf16 instructions oneDNN uses", v->major, v->minor,
             v->patch, isa_name(isa));
}

const char *mtf_cpu_bf16_path(void) {
  pthread_once(&path_once, choose_path);
  return path_text;
}

/* ---- cast ---- */
typedef struct cast_job {
  const void *in;
  void *out;
  int to_bf16;
} cast_job;

static void cast_chunk(void *ctx, int64_t lo, int64_t hi) {
  const cast_job *j = ctx;
  if (j->to_bf16) {
    const float *in = j->in;
    mtf_bf16 *out = j->out;
    for (int64_t i = lo; i < hi; i++) out[i] = mtf_bf16_from_float(in[i]);
  } else {
    const mtf_bf16 *in = j->in;
    float *out = j->out;
    for (int64_t i = lo; i < hi; i++) out[i] = mtf_float_from_bf16(in[i]);
  }
}

void mtf_cpu_cast(int threads, const void *in, mtf_dtype from, void *out, mtf_dtype to, int64_t n) {
  if (from == to) {
    memmove(out, in, (size_t)n * mtf_dtype_size(to));
    return;
  }
  cast_job job = {in, out, to == MTF_BF16};
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, n), n, cast_chunk, &job);
}

static int k_cast(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  mtf_cpu_cast(b->threads, a->in[0], st->in_dtype[0], a->out, st->out_dtype, mtf_shape_num_elements(&st->out_shape));
  return MTF_OK;
}

/* ---- oneDNN matmul primitives, one per product shape ---- */
typedef struct product_key {
  int64_t batch, m, n, k;
  int64_t a_step, b_step, c_step; /* elements from one problem of the batch to the next; 0: dense */
  int64_t lda, ldb; /* elements from one stored row of a, b to the next; 0: dense (a slice of a longer sum) */
  int ta, tb;
  int c_bf16; /* the result rounded to bfloat16 (a bf16-stored activation), else float32 */
  int sum_into; /* c += the product (oneDNN's sum post-op; float32 c): an einsum step's `accumulate` */
  int threads; /* oneDNN splits the work by the OpenMP threads there are when the primitive is made */
} product_key;

typedef struct product {
  product_key key;
  dnnl_primitive_t primitive;
  dnnl_memory_desc_t a, b, c;
} product;

#define MAX_PRODUCTS 256
static product products[MAX_PRODUCTS];
static int n_products;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_mutex_t products_lock = PTHREAD_MUTEX_INITIALIZER;

static void strided_desc(dnnl_memory_desc_t *md, int64_t batch, int64_t rows, int64_t cols, int transposed,
                         int64_t step, int64_t ld, dnnl_data_type_t type) {
  dnnl_dims_t dims = {batch, rows, cols};
  /* row-major rows x cols, or its transpose stored as cols x rows, stored rows `ld` apart (0: dense);
   * problems `step` apart (0: back to back) */
  if (!ld) ld = transposed ? rows : cols;
  dnnl_dims_t strides = {step ? step : rows * cols, transposed ? 1 : ld, transposed ? ld : 1};
  dnnl_memory_desc_init_by_strides(md, 3, dims, type, strides);
}

static int same_key(const product_key *x, const product_key *y) { /* field by field: the struct has padding */
  return x->batch == y->batch && x->m == y->m && x->n == y->n && x->k == y->k && x->a_step == y->a_step &&
         x->b_step == y->b_step && x->c_step == y->c_step && x->lda == y->lda && x->ldb == y->ldb && x->ta == y->ta && x->tb == y->tb &&
         x->c_bf16 == y->c_bf16 && x->sum_into == y->sum_into && x->threads == y->threads;
}

static const product *find_product(const product_key *key, mtf_error *err) {
  for (int i = 0; i < n_products; i++)
    if (same_key(&products[i].key, key)) return &products[i];
  if (!engine) {
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
      mtf_error_set(err, MTF_ERR_INVALID, "oneDNN: cannot create the CPU engine");
      return NULL;
    }
  }
  if (n_products == MAX_PRODUCTS) { /* a model has a few dozen shapes; a flood of them is not worth keeping */
    for (int i = 0; i < n_products; i++) dnnl_primitive_destroy(products[i].primitive);
    n_products = 0;
  }
  product *p = &products[n_products];
  memset(p, 0, sizeof *p);
  p->key = *key;
  strided_desc(&p->a, key->batch, key->m, key->k, key->ta, key->a_step, key->lda, dnnl_bf16);
  strided_desc(&p->b, key->batch, key->k, key->n, key->tb, key->b_step, key->ldb, dnnl_bf16);
  strided_desc(&p->c, key->batch, key->m, key->n, 0, key->c_step, 0, key->c_bf16 ? dnnl_bf16 : dnnl_f32);
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  dnnl_status_t rc = dnnl_matmul_desc_init(&desc, &p->a, &p->b, NULL, &p->c);
  if (rc == dnnl_success && key->sum_into) {
    rc = dnnl_primitive_attr_create(&attr);
    if (rc == dnnl_success) rc = dnnl_post_ops_create(&post_ops);
    if (rc == dnnl_success) rc = dnnl_post_ops_append_sum(post_ops, 1.0f);
    if (rc == dnnl_success) rc = dnnl_primitive_attr_set_post_ops(attr, post_ops);
  }
  if (rc == dnnl_success) rc = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
  if (rc == dnnl_success) rc = dnnl_primitive_create(&p->primitive, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (post_ops) dnnl_post_ops_destroy(post_ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc != dnnl_success) {
    mtf_error_set(err, MTF_ERR_INVALID, "oneDNN: no bf16 matmul for [%lld] x [%lld, %lld] x [%lld, %lld] (status %d)",
                  (long long)key->batch, (long long)key->m, (long long)key->k, (long long)key->k, (long long)key->n,
                  (int)rc);
    return NULL;
  }
  n_products++;
  return p;
}

/* oneDNN's threads are OpenMP's (Debian builds it so): as many as the rank's, set through libgomp, which
 * libdnnl loaded (looked up rather than linked, so no build needs OpenMP's flags or clang's libomp). */
static void set_onednn_threads(int threads) {
  static void (*set)(int);
  static int looked;
  if (!looked) {
    *(void **)&set = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    looked = 1;
  }
  if (set) set(threads > 0 ? threads : 1);
}

static int onednn_product_whole(int threads, const product_key *shape, const void *a, const void *b, void *c) {
  mtf_error err;
  product_key key = *shape;
  key.threads = threads > 0 ? threads : 1;
  if (key.batch * key.m * key.n == 0) return MTF_OK;
  if (key.k == 0 && key.sum_into) return MTF_OK; /* nothing to add */
  if (key.k == 0) { /* an empty sum: zeros (oneDNN would leave c as it is) */
    memset(c, 0, (key.c_bf16 ? sizeof(mtf_bf16) : sizeof(float)) * (size_t)(key.batch * key.m * key.n));
    return MTF_OK;
  }
  pthread_mutex_lock(&products_lock);
  set_onednn_threads(key.threads); /* before the primitive is made, and for its run */
  const product *p = find_product(&key, &err);
  int rc = MTF_ERR_INVALID;
  if (p) {
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    if (dnnl_memory_create(&ma, &p->a, engine, (void *)a) == dnnl_success &&
        dnnl_memory_create(&mb, &p->b, engine, (void *)b) == dnnl_success &&
        dnnl_memory_create(&mc, &p->c, engine, c) == dnnl_success) {
      dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
      if (dnnl_primitive_execute(p->primitive, stream, 3, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success)
        rc = MTF_OK;
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
  }
  pthread_mutex_unlock(&products_lock);
  return rc;
}

/* A long sum into a float32 result (the logits' input gradient: k = vocab) runs slice by slice of k, each
 * slice added into c by the sum post-op: oneDNN 2.6's AMX kernel reads a [m, k] operand of many thousand
 * columns slower than the same work in slices of MTF_CPU_BF16_K_SLICE (docs/PERFORMANCE.md). The same
 * products, summed in another order in fp32. */
static int64_t k_slice_elements = MTF_CPU_BF16_K_SLICE;

int64_t mtf_cpu_bf16_set_k_slice(int64_t k_slice) {
  int64_t before = k_slice_elements;
  k_slice_elements = k_slice;
  return before;
}

static int onednn_product(int threads, const product_key *shape, const void *a, const void *b, void *c) {
  int64_t k_slice = k_slice_elements;
  if (shape->batch != 1 || shape->c_bf16 || k_slice <= 0 || shape->k < 2 * k_slice)
    return onednn_product_whole(threads, shape, a, b, c);
  const mtf_bf16 *a16 = a, *b16 = b;
  for (int64_t k0 = 0; k0 < shape->k; k0 += k_slice) {
    product_key slice = *shape;
    slice.k = shape->k - k0 < k_slice ? shape->k - k0 : k_slice;
    slice.lda = shape->ta ? shape->m : shape->k; /* a [m, k] row-major, or stored [k, m] */
    slice.ldb = shape->tb ? shape->k : shape->n; /* b [k, n] row-major, or stored [n, k] */
    slice.sum_into = shape->sum_into || k0 > 0;
    const mtf_bf16 *a_at = a16 + (shape->ta ? k0 * shape->m : k0), *b_at = b16 + (shape->tb ? k0 : k0 * shape->n);
    MTF_CHECK(onednn_product_whole(threads, &slice, a_at, b_at, c));
  }
  return MTF_OK;
}

/* ---- the einsum ---- */
static float *widened(int threads, const void *in, int64_t n) {
  float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (out) mtf_cpu_cast(threads, in, MTF_BF16, out, MTF_F32, n);
  return out;
}

static int widened_einsum(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, float *out) {
  float *x = widened(be->threads, a->in[0], mtf_shape_num_elements(&st->in_shape[0]));
  float *y = widened(be->threads, a->in[1], mtf_shape_num_elements(&st->in_shape[1]));
  int rc = x && y ? mtf_cpu_einsum_f32(be->threads, st, x, y, out, a->scratch) : MTF_ERR_NOMEM;
  free(x);
  free(y);
  return rc;
}

/* The product into a float32 result: the scratch and a transpose for the orders oneDNN does not write, or
 * the widened operands. */
static int float_result(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, const mtf_einsum_dims *d,
                        float *out) {
  if (!native || d->a_summed || d->b_summed || d->a_packed || d->b_packed) return widened_einsum(be, st, a, out);
  if (!a->scratch) return MTF_ERR_INVALID;
  float *c = (float *)a->scratch + d->scratch_offset[4];
  product_key key = {.batch = d->nb, .m = d->M, .n = d->N, .k = d->K, .ta = d->a_transposed, .tb = d->b_transposed};
  MTF_CHECK(onednn_product(be->threads, &key, a->in[0], a->in[1], c));
  mtf_shape c_shape = mtf_einsum_concat3(&d->batch, &d->m, &d->n);
  mtf_cpu_reduce_into(be->threads, &c_shape, c, &st->out_shape, out);
  return MTF_OK;
}

static int float_result_of(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, float *out) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  return float_result(be, st, a, &d, out);
}

/* An `accumulate` step on a path with no sum post-op: the product apart, then added into out. */
static int added_into_out(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, const mtf_einsum_dims *d) {
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  float *result = malloc(sizeof(float) * (size_t)(n ? n : 1)), *out = a->out;
  if (!result) return MTF_ERR_NOMEM;
  int rc = float_result(be, st, a, d, result);
  for (int64_t i = 0; rc == MTF_OK && i < n; i++) out[i] += result[i];
  free(result);
  return rc;
}

int mtf_cpu_einsum_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  pthread_once(&path_once, choose_path);
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  int out_bf16 = st->out_dtype == MTF_BF16, sum_into = st->accumulate && !out_bf16;
  if (native && !d.a_summed && !d.b_summed && !d.a_packed && !d.b_packed) {
    if (!d.c_packed) {
      product_key key = {.batch = d.nb, .m = d.M, .n = d.N, .k = d.K, .ta = d.a_transposed, .tb = d.b_transposed,
                         .c_bf16 = out_bf16, .sum_into = sum_into};
      return onednn_product(be->threads, &key, a->in[0], a->in[1], a->out);
    }
    /* out = [batch][n][m] (a weight's gradient, say): the same product with the operands' roles swapped,
     * C^T = B^T A^T, lands in place. */
    if (mtf_einsum_order_is(&st->out_shape, &d.batch, &d.n, &d.m)) {
      product_key key = {.batch = d.nb, .m = d.N, .n = d.M, .k = d.K, .ta = !d.b_transposed, .tb = !d.a_transposed,
                         .c_bf16 = out_bf16, .sum_into = sum_into};
      return onednn_product(be->threads, &key, a->in[1], a->in[0], a->out);
    }
  }
  if (sum_into) return added_into_out(be, st, a, &d);
  if (!out_bf16) return float_result(be, st, a, &d, a->out);
  return mtf_cpu_float_then_round(be, st, a, float_result_of);
}

int mtf_cpu_bf16_product_batch(int threads, int64_t batch, int64_t m, int64_t n, int64_t k, int a_transposed,
                               int b_transposed, const void *a, int64_t a_step, const void *b, int64_t b_step, float *c,
                               int64_t c_step) {
  pthread_once(&path_once, choose_path);
  if (native) {
    product_key key = {.batch = batch, .m = m, .n = n, .k = k, .a_step = a_step, .b_step = b_step, .c_step = c_step,
                       .ta = a_transposed, .tb = b_transposed};
    return onednn_product(threads, &key, a, b, c);
  }
  for (int64_t i = 0; i < batch; i++)
    MTF_CHECK(mtf_cpu_bf16_product(threads, m, n, k, a_transposed, b_transposed, (const mtf_bf16 *)a + i * a_step,
                                   (const mtf_bf16 *)b + i * b_step, c + i * c_step));
  return MTF_OK;
}

int mtf_cpu_bf16_product(int threads, int64_t m, int64_t n, int64_t k, int a_transposed, int b_transposed,
                         const void *a, const void *b, float *c) {
  pthread_once(&path_once, choose_path);
  if (native) {
    product_key key = {.batch = 1, .m = m, .n = n, .k = k, .ta = a_transposed, .tb = b_transposed};
    return onednn_product(threads, &key, a, b, c);
  }
  /* The conversion path: the same products (exact in fp32) summed by sgemm. */
  float *x = widened(threads, a, m * k), *y = widened(threads, b, k * n);
  if (x && y && m * n > 0)
    cblas_sgemm(CblasRowMajor, a_transposed ? CblasTrans : CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, x, a_transposed ? (int)m : (int)k, y, b_transposed ? (int)k : (int)n,
                0.0f, c, (int)n);
  free(x);
  free(y);
  return x && y ? MTF_OK : MTF_ERR_NOMEM;
}

int mtf_cpu_bf16_matmul(int64_t m, int64_t n, int64_t k, const uint16_t *a, const uint16_t *b, float *c, int threads) {
  return mtf_cpu_bf16_product(threads, m, n, k, 0, 0, a, b, c);
}

int mtf_cpu_float_then_round(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a,
                             int (*compute)(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, float *out)) {
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (!out) return MTF_ERR_NOMEM;
  int rc = compute(be, st, a, out);
  if (rc == MTF_OK) mtf_cpu_cast(be->threads, out, MTF_F32, a->out, MTF_BF16, n);
  free(out);
  return rc;
}

void mtf_cpu_register_bf16(mtf_kernel_fn *kernels) { kernels[MTF_OP_CAST] = k_cast; }
