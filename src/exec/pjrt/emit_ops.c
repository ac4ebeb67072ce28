/* StableHLO for the elementwise, source, contraction, embedding, structural and optimizer ops, matching the
 * CPU kernels (exec/cpu/kernels.c, einsum.c, reduce.c, fused.c's gather/scatter-add and masked fill,
 * select.c's where/to_float, optimizer.c, write_at.c, attention.c's take, bf16.c's cast and bfloat16
 * einsum): operands matched to the output by dim name; random_keep hashes with the CPU backend's
 * counter-based RNG (core/rng.c) in 64-bit integer ops, so masks are bit for bit the CPU's. */
#include <math.h>
#include <string.h>

#include "core/rng.h"
#include "exec/backend.h"
#include "exec/pjrt/emit_internal.h"
#include "ops/einsum_dims.h"

static const h_shape SCALAR = {0, {0}};

static int fconst(h_emitter *E, double v, int like) { return h_splat(E, v, h_t(E, like)->e, h_t(E, like)->s); }

/* where(p, 1, 0) as f32 */
static int as_float01(h_emitter *E, int pred) {
  h_shape s = h_t(E, pred)->s;
  return h_select(E, pred, h_splat(E, 1.0, H_F32, s), h_splat(E, 0.0, H_F32, s));
}

static int gelu_tanh(h_emitter *E, int x) { /* tanh(C (x + A x^3)) in float, as fastmath.h's */
  int x3 = h_binop(E, "multiply", h_binop(E, "multiply", x, x), x);
  int inner = h_binop(E, "add", x, h_binop(E, "multiply", fconst(E, 0.044715f, x), x3));
  return h_unop(E, "tanh", h_binop(E, "multiply", fconst(E, 0.7978845608028654f, x), inner));
}

static int gelu_grad(h_emitter *E, int x) {
  int t = gelu_tanh(E, x);
  int half = fconst(E, 0.5, x), one = fconst(E, 1.0, x);
  int a = h_binop(E, "multiply", half, h_binop(E, "add", one, t));
  int one_minus_t2 = h_binop(E, "subtract", one, h_binop(E, "multiply", t, t));
  int poly = h_binop(E, "add", one,
                     h_binop(E, "multiply", fconst(E, 3.0f * 0.044715f, x), h_binop(E, "multiply", x, x)));
  int b = h_binop(E, "multiply", h_binop(E, "multiply", h_binop(E, "multiply", half, x), one_minus_t2),
                  h_binop(E, "multiply", fconst(E, 0.7978845608028654f, x), poly));
  return h_binop(E, "add", a, b);
}

int e_unary_fn(h_emitter *E, mtf_unary_kind fn, float alpha, float beta, int x) {
  int zero = fconst(E, 0.0, x), one = fconst(E, 1.0, x);
  switch (fn) {
    case MTF_UN_AFFINE: return h_binop(E, "add", h_binop(E, "multiply", fconst(E, alpha, x), x), fconst(E, beta, x));
    case MTF_UN_EXP: return h_unop(E, "exponential", x);
    case MTF_UN_LOG: return h_unop(E, "log", x);
    case MTF_UN_RSQRT: return h_binop(E, "divide", one, h_unop(E, "sqrt", x));
    case MTF_UN_SQRT: return h_unop(E, "sqrt", x);
    case MTF_UN_SQUARE: return h_binop(E, "multiply", x, x);
    case MTF_UN_TANH: return h_unop(E, "tanh", x);
    case MTF_UN_SIGMOID: return h_unop(E, "logistic", x);
    case MTF_UN_RELU: return h_select(E, h_compare(E, "GT", x, zero), x, zero);
    case MTF_UN_STEP: return h_select(E, h_compare(E, "GT", x, zero), one, zero);
    case MTF_UN_GELU:
      return h_binop(E, "multiply", h_binop(E, "multiply", fconst(E, 0.5, x), x), h_binop(E, "add", one, gelu_tanh(E, x)));
    case MTF_UN_GELU_GRAD: return gelu_grad(E, x);
    case MTF_UN_SIN: return h_convert(E, h_unop(E, "sine", h_convert(E, x, H_F64)), H_F32); /* in double, as the CPU */
    case MTF_UN_COS: return h_convert(E, h_unop(E, "cosine", h_convert(E, x, H_F64)), H_F32);
    case MTF_UN_SWISH: return h_binop(E, "multiply", x, h_unop(E, "logistic", x));
    case MTF_UN_SWISH_GRAD: {
      int s = h_unop(E, "logistic", x);
      return h_binop(E, "multiply", s, h_binop(E, "add", one, h_binop(E, "multiply", x, h_binop(E, "subtract", one, s))));
    }
  }
  return x;
}

static int binary(h_emitter *E, mtf_binary_kind fn, int u, int v) {
  switch (fn) {
    case MTF_BIN_ADD: return h_binop(E, "add", u, v);
    case MTF_BIN_SUB: return h_binop(E, "subtract", u, v);
    case MTF_BIN_MUL: return h_binop(E, "multiply", u, v);
    case MTF_BIN_DIV: return h_binop(E, "divide", u, v);
    case MTF_BIN_EQUAL: return as_float01(E, h_compare(E, "EQ", u, v));
    case MTF_BIN_LESS_EQUAL: return as_float01(E, h_compare(E, "LE", u, v));
    case MTF_BIN_GREATER: return as_float01(E, h_compare(E, "GT", u, v));
    case MTF_BIN_LESS: return as_float01(E, h_compare(E, "LT", u, v));
    case MTF_BIN_MAXIMUM: return h_select(E, h_compare(E, "GE", u, v), u, v);
    case MTF_BIN_MINIMUM: return h_select(E, h_compare(E, "LE", u, v), u, v);
  }
  return u;
}

/* Two-operand einsum: lonely dims summed, then dot_general over batch (in a, b, out) and contracted (a, b)
 * dims, then the result [batch, a free, b free] transposed to the output's order. bf16 operands go to the
 * dot_general as they are, with an f32 result, where the emit options say so (bf16_dots: GPU and TPU plugins);
 * otherwise, and where a lonely dim must be summed first, they are converted to f32 and summed and multiplied
 * in f32 (exact products, fp32 accumulation: the numbers of cuBLAS's and oneDNN's bf16 GEMMs up to the order
 * of the additions, and of the CPU's widened einsum). The XLA CPU plugin compiles a bf16 x bf16 = f32
 * dot_general and then fails at run time once the product is large enough to go to its Eigen kernel
 * ("Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32"; small ones are emitted inline and
 * work: the conformance test's --bf16-dots runs them). */
static int einsum2(h_emitter *E, const mtf_step *st) {
  const mtf_shape *as = &st->in_shape[0], *bs = &st->in_shape[1], *os = &st->out_shape;
  int a = e_input(E, st, 0), b = e_input(E, st, 1);
  mtf_shape ak = {0}, bk = {0};
  for (int d = 0; d < as->rank; d++)
    if (mtf_shape_index_of(bs, as->dims[d].name) >= 0 || mtf_shape_index_of(os, as->dims[d].name) >= 0)
      ak.dims[ak.rank++] = as->dims[d];
  for (int d = 0; d < bs->rank; d++)
    if (mtf_shape_index_of(as, bs->dims[d].name) >= 0 || mtf_shape_index_of(os, bs->dims[d].name) >= 0)
      bk.dims[bk.rank++] = bs->dims[d];
  int bf16_dot = E->options.bf16_dots && h_t(E, a)->e == H_BF16 && h_t(E, b)->e == H_BF16 && ak.rank == as->rank &&
                 bk.rank == bs->rank; /* a lonely dim is summed in f32 first */
  if (!bf16_dot) {
    a = h_convert(E, a, H_F32);
    b = h_convert(E, b, H_F32);
  }
  if (ak.rank != as->rank) a = n_reduce(E, a, as, &ak, "add", 0.0);
  if (bk.rank != bs->rank) b = n_reduce(E, b, bs, &bk, "add", 0.0);
  int ab[MTF_MAX_RANK], bb[MTF_MAX_RANK], ac[MTF_MAX_RANK], bc[MTF_MAX_RANK], nb = 0, nc = 0;
  mtf_shape result = {0};
  for (int d = 0; d < ak.rank; d++) {
    int j = mtf_shape_index_of(&bk, ak.dims[d].name);
    if (j < 0) continue;
    if (mtf_shape_index_of(os, ak.dims[d].name) >= 0) {
      ab[nb] = d, bb[nb++] = j;
      result.dims[result.rank++] = ak.dims[d];
    } else {
      ac[nc] = d, bc[nc++] = j;
    }
  }
  for (int d = 0; d < ak.rank; d++)
    if (mtf_shape_index_of(&bk, ak.dims[d].name) < 0) result.dims[result.rank++] = ak.dims[d];
  for (int d = 0; d < bk.rank; d++)
    if (mtf_shape_index_of(&ak, bk.dims[d].name) < 0) result.dims[result.rank++] = bk.dims[d];
  int r = h_dot_general(E, a, b, nb, ab, bb, nc, ac, bc);
  return n_to(E, r, &result, os);
}

/* SplitMix64's finaliser on u64 values (core/rng.c's mtf_mix64). */
static int mix64(h_emitter *E, int z) {
  h_shape s = h_t(E, z)->s;
  z = h_binop(E, "xor", z, h_binop(E, "shift_right_logical", z, h_splat_u64(E, 30, s)));
  z = h_binop(E, "multiply", z, h_splat_u64(E, 0xbf58476d1ce4e5b9ULL, s));
  z = h_binop(E, "xor", z, h_binop(E, "shift_right_logical", z, h_splat_u64(E, 27, s)));
  z = h_binop(E, "multiply", z, h_splat_u64(E, 0x94d049bb133111ebULL, s));
  return h_binop(E, "xor", z, h_binop(E, "shift_right_logical", z, h_splat_u64(E, 31, s)));
}

static int bitcast(h_emitter *E, int a, h_elem e) {
  int id = h_new(E, h_t(E, a)->s, e);
  char t1[160], t2[160];
  h_printf(E, "    %%v%d = \"stablehlo.bitcast_convert\"(%%v%d) : (%s) -> %s\n", id, a, h_type_text(h_t(E, a), t1),
           h_type_text(h_t(E, id), t2));
  return id;
}

/* The RANDOM_OFFSET parameter (s32 words lo, hi) as one u64 scalar. */
static int random_offset(h_emitter *E) {
  int words = h_convert(E, bitcast(E, E->random_offset, H_U32), H_U64);
  int64_t lo0 = 0, lo1 = 1, hi1 = 2;
  int lo = h_reshape(E, h_slice(E, words, &lo0, &lo1), SCALAR);
  int hi = h_reshape(E, h_slice(E, words, &lo1, &hi1), SCALAR);
  return h_binop(E, "or", lo, h_binop(E, "shift_left", hi, h_splat_u64(E, 32, SCALAR)));
}

static int64_t get_offset(const mtf_step *st, void *arg) { return st->offsets[*(int *)arg]; }
static int64_t get_dim_offset(const mtf_step *st, void *arg) {
  (void)arg;
  return st->dim_offset;
}

static int rank_offset(h_emitter *E, int d) {
  int64_t v[1024];
  e_rank_values(E, get_offset, &d, v);
  return h_rank_int(E, v);
}

int e_rank_dim_offset(h_emitter *E) {
  int64_t v[1024];
  e_rank_values(E, get_dim_offset, NULL, v);
  return h_rank_int(E, v);
}

int e_uniform01(h_emitter *E, uint64_t seed, uint64_t key, int index) {
  const uint64_t G = 0x9e3779b97f4a7c15ULL;
  h_shape s = h_t(E, index)->s;
  /* mtf_hash3(seed, stream, i) = mix(mix(mix(seed + G) ^ stream) + i G), stream = mtf_run_key(key, offset) */
  int stream = h_binop(E, "add", h_splat_u64(E, key, SCALAR), h_binop(E, "multiply", random_offset(E), h_splat_u64(E, G, SCALAR)));
  int K = mix64(E, h_binop(E, "xor", h_splat_u64(E, mtf_mix64(seed + G), SCALAR), stream));
  int z = h_binop(E, "add", h_broadcast_scalar(E, K, s), h_binop(E, "multiply", index, h_splat_u64(E, G, s)));
  int bits = h_binop(E, "shift_right_logical", mix64(E, z), h_splat_u64(E, 11, s));
  /* ((h >> 11) + 0.5) * 2^-53 in f64, the same roundings as mtf_uniform01 */
  return h_binop(E, "multiply", h_binop(E, "add", h_convert(E, bits, H_F64), h_splat(E, 0.5, H_F64, s)),
                 h_splat(E, 1.0 / 9007199254740992.0, H_F64, s));
}

int e_random_extent(h_emitter *E, const mtf_step *st, int d, int64_t *global_dim) {
  const mtf_shape *shape = mtf_random_extent_shape(st);
  int M = E->options.microbatches;
  int off = rank_offset(E, d);
  *global_dim = st->global_dims[d];
  if (d != mtf_random_microbatch_dim(shape, E->options.microbatch_dim, M)) return off;
  *global_dim *= M;
  int m = h_convert(E, E->microbatch, H_S64);
  return h_binop(E, "add", h_binop(E, "multiply", off, h_splat(E, (double)M, H_S64, SCALAR)),
                 h_binop(E, "multiply", m, h_splat(E, (double)shape->dims[d].size, H_S64, SCALAR)));
}

/* mtf_uniform01(seed, run key, global index) < keep, elementwise, as the CPU's random_keep with
 * mtf_random_extent's numbering (microbatches included). */
static int random_keep(h_emitter *E, const mtf_step *st) {
  const mtf_shape *os = &st->out_shape;
  h_shape s = h_shape_of(os);
  int offset[MTF_MAX_RANK];
  uint64_t strides[MTF_MAX_RANK], stride = 1;
  for (int d = os->rank - 1; d >= 0; d--) {
    int64_t global_dim;
    offset[d] = e_random_extent(E, st, d, &global_dim);
    strides[d] = stride;
    stride *= (uint64_t)global_dim;
  }
  int index = h_splat_u64(E, 0, s);
  for (int d = 0; d < os->rank; d++) {
    int pos = h_binop(E, "add", h_iota(E, s, d, H_U64), h_broadcast_scalar(E, h_convert(E, offset[d], H_U64), s));
    index = h_binop(E, "add", index, h_binop(E, "multiply", pos, h_splat_u64(E, strides[d], s)));
  }
  int u = e_uniform01(E, st->seed, st->params.random.key, index);
  return as_float01(E, h_compare(E, "LT", u, h_splat(E, (double)st->params.random.keep, H_F64, s)));
}

/* iota along out's dim d plus the rank's dim_offset, as s64, broadcast over out. */
static int positions_along(h_emitter *E, const mtf_shape *os, int d) {
  h_shape s = h_shape_of(os);
  return h_binop(E, "add", h_iota(E, s, d, H_S64), h_broadcast_scalar(E, e_rank_dim_offset(E), s));
}

/* gather (scatter 0) and scatter-add (1): rows [ids, table without vocab, in table order]. */
static int embedding(h_emitter *E, const mtf_step *st, int scatter) {
  const mtf_shape *table = scatter ? &st->out_shape : &st->in_shape[0];
  const char *dim = st->params.along.dim;
  int v = mtf_shape_index_of(table, dim);
  int64_t len = table->dims[v].size, n_ids = mtf_shape_num_elements(&st->in_shape[1]);
  mtf_shape rest = {0}, first = {0};
  first.dims[first.rank++] = table->dims[v];
  for (int d = 0; d < table->rank; d++)
    if (d != v) {
      rest.dims[rest.rank++] = table->dims[d];
      first.dims[first.rank++] = table->dims[d];
    }
  h_shape ids_shape = {1, {n_ids}}, idx_shape = {2, {n_ids, 1}};
  int ids = h_binop(E, "subtract", h_reshape(E, h_as_index(E, e_input(E, st, 1)), ids_shape),
                    h_broadcast_scalar(E, e_rank_dim_offset(E), ids_shape));
  int zero = h_splat(E, 0.0, H_S64, ids_shape), last = h_splat(E, (double)(len - 1), H_S64, ids_shape);
  int inside = h_binop(E, "and", h_compare(E, "GE", ids, zero), h_compare(E, "LE", ids, last));
  int clamped = h_reshape(E, h_binop(E, "maximum", h_binop(E, "minimum", ids, last), zero), idx_shape);
  h_shape rows = {1 + rest.rank, {n_ids}};
  for (int d = 0; d < rest.rank; d++) rows.d[1 + d] = rest.dims[d].size;
  int dims[MTF_MAX_RANK] = {0};
  int mask = h_broadcast_in_dim(E, inside, rows, dims);
  char t1[160], t2[160], t3[160];
  if (!scatter) {
    int tab = n_to(E, e_input(E, st, 0), table, &first);
    int id = h_new(E, rows, H_F32);
    h_printf(E, "    %%v%d = \"stablehlo.gather\"(%%v%d, %%v%d) {dimension_numbers = #stablehlo.gather<offset_dims = [", id,
             tab, clamped);
    for (int d = 0; d < rest.rank; d++) h_printf(E, "%s%d", d ? ", " : "", 1 + d);
    h_printf(E, "], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, "
             "slice_sizes = array<i64: 1");
    for (int d = 0; d < rest.rank; d++) h_printf(E, ", %lld", (long long)rest.dims[d].size);
    h_printf(E, ">} : (%s, %s) -> %s\n", h_type_text(h_t(E, tab), t1), h_type_text(h_t(E, clamped), t2),
             h_type_text(h_t(E, id), t3));
    return h_select(E, mask, id, h_splat(E, 0.0, H_F32, rows));
  }
  int updates = h_select(E, mask, h_reshape(E, e_input(E, st, 0), rows), h_splat(E, 0.0, H_F32, rows));
  int zeros = h_splat(E, 0.0, H_F32, h_shape_of(&first));
  int id = h_new(E, h_shape_of(&first), H_F32), x = h_new(E, SCALAR, H_F32), y = h_new(E, SCALAR, H_F32),
      s = h_new(E, SCALAR, H_F32);
  h_printf(E, "    %%v%d = \"stablehlo.scatter\"(%%v%d, %%v%d, %%v%d) ({\n    ^bb0(%%v%d: tensor<f32>, %%v%d: tensor<f32>):\n", id,
           zeros, clamped, updates, x, y);
  h_printf(E, "      %%v%d = \"stablehlo.add\"(%%v%d, %%v%d) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n", s, x, y);
  h_printf(E, "      \"stablehlo.return\"(%%v%d) : (tensor<f32>) -> ()\n    }) {indices_are_sorted = false, "
           "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [", s);
  for (int d = 0; d < rest.rank; d++) h_printf(E, "%s%d", d ? ", " : "", 1 + d);
  h_printf(E, "], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
           "unique_indices = false} : (%s, %s, %s) -> %s\n", h_type_text(h_t(E, zeros), t1),
           h_type_text(h_t(E, clamped), t2), h_type_text(h_t(E, updates), t3), t1);
  return n_to(E, id, &first, table);
}

/* 1 - beta^t as -expm1(t ln beta) in f64 (mtf_adam_bias_correction); beta 0: 1. */
static int bias_correction(h_emitter *E, double beta, int step) {
  if (!(beta > 0)) return h_splat(E, 1.0, H_F64, SCALAR);
  int t = h_convert(E, step, H_F64);
  return h_unop(E, "negate", h_unop(E, "exponential_minus_one", h_binop(E, "multiply", t, h_splat(E, log(beta), H_F64, SCALAR))));
}

static int adam_update(h_emitter *E, const mtf_step *st) {
  int w = e_input(E, st, 0), m = e_input(E, st, 1), v = e_input(E, st, 2);
  int lr = h_reshape(E, e_input(E, st, 3), SCALAR), step = h_reshape(E, e_input(E, st, 4), SCALAR);
  h_shape s = h_shape_of(&st->out_shape);
  int one = h_splat(E, 1.0, H_F64, SCALAR);
  int inv_c1 = h_convert(E, h_binop(E, "divide", one, bias_correction(E, st->params.adam.beta1, step)), H_F32);
  int inv_c2 = h_convert(E, h_binop(E, "divide", one, bias_correction(E, st->params.adam.beta2, step)), H_F32);
  int mc = h_binop(E, "multiply", m, h_broadcast_scalar(E, inv_c1, s));
  int vc = h_unop(E, "sqrt", h_binop(E, "multiply", v, h_broadcast_scalar(E, inv_c2, s)));
  int upd = h_binop(E, "divide", mc, h_binop(E, "add", vc, h_splat(E, st->params.adam.epsilon, H_F32, s)));
  upd = h_binop(E, "add", upd, h_binop(E, "multiply", h_splat(E, st->params.adam.weight_decay, H_F32, s), w));
  return h_binop(E, "subtract", w, h_binop(E, "multiply", h_broadcast_scalar(E, lr, s), upd));
}

static int moving_average(h_emitter *E, const mtf_step *st) {
  int old = e_input(E, st, 0), x = e_input(E, st, 1);
  h_shape s = h_shape_of(&st->out_shape);
  int keep = st->n_in == 3 ? h_reshape(E, e_input(E, st, 2), SCALAR) : h_splat(E, st->params.moment.beta, H_F32, SCALAR);
  int mix = h_binop(E, "subtract", h_splat(E, 1.0, H_F32, SCALAR), keep);
  int term = st->params.moment.power == 2 ? h_binop(E, "multiply", x, x) : x;
  term = h_binop(E, "add", term, h_splat(E, st->params.moment.add, H_F32, s));
  return h_binop(E, "add", h_binop(E, "multiply", h_broadcast_scalar(E, keep, s), old),
                 h_binop(E, "multiply", h_broadcast_scalar(E, mix, s), term));
}

/* adafactor_update: w - step g a b; adafactor_squares: sum (g a b)^2; the factors broadcast by name. */
static int adafactor(h_emitter *E, const mtf_step *st) {
  const int update = st->op == MTF_OP_ADAFACTOR_UPDATE, gi = update ? 1 : 0, first = update ? 3 : 1;
  const mtf_shape *xs = &st->in_shape[gi];
  int u = e_input(E, st, gi);
  for (int k = first; k < st->n_in; k++) u = h_binop(E, "multiply", u, n_to(E, e_input(E, st, k), &st->in_shape[k], xs));
  if (!update) return n_reduce(E, h_binop(E, "multiply", u, u), xs, &st->out_shape, "add", 0.0);
  int step = h_reshape(E, e_input(E, st, 2), SCALAR);
  return h_binop(E, "subtract", e_input(E, st, 0), h_binop(E, "multiply", h_broadcast_scalar(E, step, h_shape_of(xs)), u));
}

/* ---- one emitter per op kind (e_ops_elementwise fills their entries of the table) ---- */
/* The step's result r recorded; every emitter of this file ends here. */
static int out(h_emitter *E, const mtf_step *st, int r) {
  e_output(E, st, r);
  return MTF_OK;
}

static int op_constant(h_emitter *E, const mtf_step *st) {
  return out(E, st, h_splat(E, st->params.constant.value, H_F32, h_shape_of(&st->out_shape)));
}

static int op_range(h_emitter *E, const mtf_step *st) {
  h_shape s = h_shape_of(&st->out_shape);
  int off = rank_offset(E, 0);
  return out(E, st, h_convert(E, h_binop(E, "add", h_iota(E, s, 0, H_S64), h_broadcast_scalar(E, off, s)), H_F32));
}

static int op_broadcast(h_emitter *E, const mtf_step *st) {
  return out(E, st, n_to(E, e_input(E, st, 0), &st->in_shape[0], &st->out_shape));
}

static int op_reduce_max(h_emitter *E, const mtf_step *st) { /* NaN skipped; -inf when all are */
  int x = e_input(E, st, 0);
  x = h_select(E, h_compare(E, "NE", x, x), h_splat(E, -INFINITY, H_F32, h_t(E, x)->s), x);
  return out(E, st, n_reduce(E, x, &st->in_shape[0], &st->out_shape, "maximum", -INFINITY));
}

static int op_binary(h_emitter *E, const mtf_step *st) {
  const mtf_shape *os = &st->out_shape;
  return out(E, st, binary(E, st->params.binary.fn, n_to(E, e_input(E, st, 0), &st->in_shape[0], os),
                           n_to(E, e_input(E, st, 1), &st->in_shape[1], os)));
}

static int op_unary(h_emitter *E, const mtf_step *st) {
  return out(E, st, e_unary_fn(E, st->params.unary.fn, st->params.unary.alpha, st->params.unary.beta, e_input(E, st, 0)));
}

static int op_one_hot(h_emitter *E, const mtf_step *st) {
  const mtf_shape *os = &st->out_shape;
  int d = mtf_shape_index_of(os, st->params.along.dim);
  int ids = n_to(E, h_as_index(E, e_input(E, st, 0)), &st->in_shape[0], os);
  return out(E, st, as_float01(E, h_compare(E, "EQ", ids, positions_along(E, os, d))));
}

static int op_random_keep(h_emitter *E, const mtf_step *st) { return out(E, st, random_keep(E, st)); }

static int op_einsum(h_emitter *E, const mtf_step *st) {
  return out(E, st, st->n_in == 1 ? n_reduce(E, e_input(E, st, 0), &st->in_shape[0], &st->out_shape, "add", 0.0)
                                  : einsum2(E, st));
}

static int op_masked_fill(h_emitter *E, const mtf_step *st) {
  const mtf_shape *os = &st->out_shape;
  int x = n_to(E, e_input(E, st, 0), &st->in_shape[0], os), m = n_to(E, e_input(E, st, 1), &st->in_shape[1], os);
  return out(E, st, h_select(E, h_compare(E, "NE", m, fconst(E, 0.0, m)), x,
                             h_splat(E, st->params.fill.value, H_F32, h_shape_of(os))));
}

static int op_gather(h_emitter *E, const mtf_step *st) { return out(E, st, embedding(E, st, 0)); }
static int op_scatter_add(h_emitter *E, const mtf_step *st) { return out(E, st, embedding(E, st, 1)); }

static int op_take(h_emitter *E, const mtf_step *st) {
  const mtf_shape *xs = &st->in_shape[0];
  int d = mtf_shape_index_of(xs, st->params.take.dim);
  int64_t start[MTF_MAX_RANK], limit[MTF_MAX_RANK];
  for (int i = 0; i < xs->rank; i++) start[i] = 0, limit[i] = xs->dims[i].size;
  start[d] = st->params.take.index, limit[d] = start[d] + 1;
  return out(E, st, h_slice(E, e_input(E, st, 0), start, limit));
}

static int op_to_float(h_emitter *E, const mtf_step *st) { return out(E, st, h_convert(E, e_input(E, st, 0), H_F32)); }

static int op_cast(h_emitter *E, const mtf_step *st) {
  return out(E, st, h_convert(E, e_input(E, st, 0), h_elem_of(st->params.cast.to)));
}

static int op_where(h_emitter *E, const mtf_step *st) {
  const mtf_shape *os = &st->out_shape;
  int c = n_to(E, e_input(E, st, 0), &st->in_shape[0], os);
  int a = n_to(E, e_input(E, st, 1), &st->in_shape[1], os), b = n_to(E, e_input(E, st, 2), &st->in_shape[2], os);
  return out(E, st, h_select(E, h_compare(E, "NE", c, h_splat(E, 0.0, h_t(E, c)->e, h_shape_of(os))), a, b));
}

static int op_moving_average(h_emitter *E, const mtf_step *st) { return out(E, st, moving_average(E, st)); }
static int op_adam_update(h_emitter *E, const mtf_step *st) { return out(E, st, adam_update(E, st)); }
static int op_adafactor(h_emitter *E, const mtf_step *st) { return out(E, st, adafactor(E, st)); }

static int op_write_at(h_emitter *E, const mtf_step *st) {
  const mtf_shape *os = &st->out_shape;
  int d = mtf_shape_index_of(os, st->params.along.dim);
  int x = e_input(E, st, 0), v = n_to(E, e_input(E, st, 1), &st->in_shape[1], os);
  int p = n_to(E, h_as_index(E, e_input(E, st, 2)), &st->in_shape[2], os);
  return out(E, st, h_select(E, h_compare(E, "EQ", p, positions_along(E, os, d)), v, x));
}

static int op_gelu_grad(h_emitter *E, const mtf_step *st) {
  return out(E, st, h_binop(E, "multiply", e_input(E, st, 1), gelu_grad(E, e_input(E, st, 0))));
}

void e_ops_elementwise(e_op_fn *table) {
  table[MTF_OP_CONSTANT] = op_constant;
  table[MTF_OP_RANGE] = op_range;
  table[MTF_OP_BROADCAST] = op_broadcast;
  table[MTF_OP_REDUCE_MAX] = op_reduce_max;
  table[MTF_OP_BINARY] = op_binary;
  table[MTF_OP_UNARY] = op_unary;
  table[MTF_OP_ONE_HOT] = op_one_hot;
  table[MTF_OP_RANDOM_KEEP] = op_random_keep;
  table[MTF_OP_EINSUM] = op_einsum;
  table[MTF_OP_MASKED_FILL] = op_masked_fill;
  table[MTF_OP_GATHER] = op_gather;
  table[MTF_OP_SCATTER_ADD] = op_scatter_add;
  table[MTF_OP_TAKE] = op_take;
  table[MTF_OP_TO_FLOAT] = op_to_float;
  table[MTF_OP_CAST] = op_cast;
  table[MTF_OP_WHERE] = op_where;
  table[MTF_OP_MOVING_AVERAGE] = op_moving_average;
  table[MTF_OP_ADAM_UPDATE] = op_adam_update;
  table[MTF_OP_ADAFACTOR_UPDATE] = op_adafactor;
  table[MTF_OP_ADAFACTOR_SQUARES] = op_adafactor;
  table[MTF_OP_WRITE_AT] = op_write_at;
  table[MTF_OP_GELU_GRAD] = op_gelu_grad;
}
