/* CPU kernels for the elementwise, source, broadcast and max-reduction ops: plain loops over strided
 * walks, innermost dimension contiguous. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu.h"
#include "exec/cpu/strided.h"

static void reduce_max(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out) {
  int64_t n_out = mtf_shape_num_elements(out_shape);
  for (int64_t i = 0; i < n_out; i++) out[i] = -INFINITY;
  const mtf_shape *ops[1] = {out_shape};
  mtf_walk w;
  mtf_walk_init(&w, in_shape, 1, ops);
  const float *src = in;
  for (int64_t r = 0; r < w.rows; r++, src += w.inner, mtf_walk_next_row(&w)) {
    float *dst = out + w.offset[0];
    int64_t s = w.strides[0][w.rank - 1];
    for (int64_t i = 0; i < w.inner; i++)
      if (src[i] > dst[i * s]) dst[i * s] = src[i];
  }
}

static void broadcast(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out) {
  const mtf_shape *ops[1] = {in_shape};
  mtf_walk w;
  mtf_walk_init(&w, out_shape, 1, ops);
  float *dst = out;
  for (int64_t r = 0; r < w.rows; r++, dst += w.inner, mtf_walk_next_row(&w)) {
    const float *src = in + w.offset[0];
    int64_t s = w.strides[0][w.rank - 1];
    for (int64_t i = 0; i < w.inner; i++) dst[i] = src[i * s];
  }
}

#define BINARY_LOOP(expr)                                                                                   \
  for (int64_t r = 0; r < w.rows; r++, dst += w.inner, mtf_walk_next_row(&w)) {                             \
    const float *x = a + w.offset[0], *y = b + w.offset[1];                                                 \
    for (int64_t i = 0; i < w.inner; i++) {                                                                 \
      float u = x[i * sa], v = y[i * sb];                                                                   \
      dst[i] = (expr);                                                                                      \
    }                                                                                                       \
  }

static void binary(int kind, const mtf_shape *a_shape, const float *a, const mtf_shape *b_shape, const float *b,
                   const mtf_shape *out_shape, float *out) {
  const mtf_shape *ops[2] = {a_shape, b_shape};
  mtf_walk w;
  mtf_walk_init(&w, out_shape, 2, ops);
  int64_t sa = w.strides[0][w.rank - 1], sb = w.strides[1][w.rank - 1];
  float *dst = out;
  switch ((mtf_binary_kind)kind) {
    case MTF_BIN_ADD: BINARY_LOOP(u + v); break;
    case MTF_BIN_SUB: BINARY_LOOP(u - v); break;
    case MTF_BIN_MUL: BINARY_LOOP(u * v); break;
    case MTF_BIN_DIV: BINARY_LOOP(u / v); break;
    case MTF_BIN_EQUAL: BINARY_LOOP(u == v ? 1.0f : 0.0f); break;
    case MTF_BIN_LESS_EQUAL: BINARY_LOOP(u <= v ? 1.0f : 0.0f); break;
  }
}

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */

static void unary(int kind, float alpha, float beta, int64_t n, const float *in, float *out) {
  switch ((mtf_unary_kind)kind) {
    case MTF_UN_AFFINE: for (int64_t i = 0; i < n; i++) out[i] = alpha * in[i] + beta; break;
    case MTF_UN_EXP: for (int64_t i = 0; i < n; i++) out[i] = expf(in[i]); break;
    case MTF_UN_LOG: for (int64_t i = 0; i < n; i++) out[i] = logf(in[i]); break;
    case MTF_UN_RSQRT: for (int64_t i = 0; i < n; i++) out[i] = 1.0f / sqrtf(in[i]); break;
    case MTF_UN_SQRT: for (int64_t i = 0; i < n; i++) out[i] = sqrtf(in[i]); break;
    case MTF_UN_SQUARE: for (int64_t i = 0; i < n; i++) out[i] = in[i] * in[i]; break;
    case MTF_UN_TANH: for (int64_t i = 0; i < n; i++) out[i] = tanhf(in[i]); break;
    case MTF_UN_SIGMOID: for (int64_t i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-in[i])); break;
    case MTF_UN_RELU: for (int64_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f; break;
    case MTF_UN_STEP: for (int64_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? 1.0f : 0.0f; break;
    case MTF_UN_GELU:
      for (int64_t i = 0; i < n; i++) {
        float x = in[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_C * (x + 0.044715f * x * x * x)));
      }
      break;
    case MTF_UN_GELU_GRAD:
      for (int64_t i = 0; i < n; i++) {
        float x = in[i], t = tanhf(GELU_C * (x + 0.044715f * x * x * x));
        out[i] = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
      }
      break;
  }
}

void mtf_cpu_fill(float value, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = value;
}

static void one_hot(const mtf_shape *in_shape, const void *in, mtf_dtype in_dtype, const mtf_shape *out_shape,
                    int dim_index, int64_t dim_offset, float *out) {
  const mtf_shape *ops[1] = {in_shape};
  mtf_walk w;
  mtf_walk_init(&w, out_shape, 1, ops);
  int last = w.rank - 1;
  int64_t s = w.strides[0][last];
  float *dst = out;
  for (int64_t r = 0; r < w.rows; r++, dst += w.inner, mtf_walk_next_row(&w)) {
    for (int64_t i = 0; i < w.inner; i++) {
      int64_t position = dim_index == last ? i : w.index[dim_index];
      dst[i] = mtf_cpu_index(in, in_dtype, w.offset[0] + i * s) == dim_offset + position ? 1.0f : 0.0f;
    }
  }
}

static void random_keep(uint64_t seed, uint64_t key, float keep, const int64_t *global_dims, const mtf_shape *out_shape,
                        const int64_t *offsets, float *out) {
  int64_t global_strides[MTF_MAX_RANK], stride = 1;
  for (int d = out_shape->rank - 1; d >= 0; d--) {
    global_strides[d] = stride;
    stride *= global_dims[d];
  }
  int64_t n = mtf_shape_num_elements(out_shape), index[MTF_MAX_RANK] = {0};
  for (int64_t e = 0; e < n; e++) {
    int64_t global = 0;
    for (int d = 0; d < out_shape->rank; d++) global += (index[d] + offsets[d]) * global_strides[d];
    out[e] = mtf_uniform01(seed, key, (uint64_t)global) < (double)keep ? 1.0f : 0.0f;
    for (int d = out_shape->rank - 1; d >= 0; d--) {
      if (++index[d] < out_shape->dims[d].size) break;
      index[d] = 0;
    }
  }
}

void mtf_cpu_slice(const mtf_shape *in_shape, const char *in, const mtf_shape *out_shape, const int64_t *offsets,
                   char *out, size_t elem) {
  int64_t in_strides[MTF_MAX_RANK], stride = 1, base = 0;
  for (int d = in_shape->rank - 1; d >= 0; d--) {
    in_strides[d] = stride;
    stride *= in_shape->dims[d].size;
  }
  for (int d = 0; d < in_shape->rank; d++) base += offsets[d] * in_strides[d];
  mtf_walk w;
  mtf_shape positional = *out_shape; /* match in and out by position, not name */
  mtf_walk_init(&w, &positional, 0, NULL);
  for (int d = 0; d < in_shape->rank; d++) w.strides[0][d] = in_strides[d];
  w.n = 1;
  int64_t s = in_shape->rank ? in_strides[in_shape->rank - 1] : 1;
  char *dst = out;
  for (int64_t r = 0; r < w.rows; r++, dst += w.inner * (int64_t)elem, mtf_walk_next_row(&w)) {
    const char *src = in + (base + w.offset[0]) * (int64_t)elem;
    if (s == 1) {
      memcpy(dst, src, (size_t)w.inner * elem);
      continue;
    }
    for (int64_t i = 0; i < w.inner; i++) memcpy(dst + i * (int64_t)elem, src + i * s * (int64_t)elem, elem);
  }
}

/* ---- the kernels of the op table ---- */
#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))

static int k_constant(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  mtf_cpu_fill(st->params.constant.value, mtf_shape_num_elements(&st->out_shape), F(a->out));
  return MTF_OK;
}

static int k_range(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  for (int64_t i = 0; i < n; i++) F(a->out)[i] = (float)(st->offsets[0] + i);
  return MTF_OK;
}

static int k_broadcast(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  broadcast(&st->in_shape[0], CF(a->in[0]), &st->out_shape, F(a->out));
  return MTF_OK;
}

static int k_reduce_max(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  reduce_max(&st->in_shape[0], CF(a->in[0]), &st->out_shape, F(a->out));
  return MTF_OK;
}

static int k_binary(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  binary(st->params.binary.fn, &st->in_shape[0], CF(a->in[0]), &st->in_shape[1], CF(a->in[1]), &st->out_shape,
         F(a->out));
  return MTF_OK;
}

static int k_unary(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  unary(st->params.unary.fn, st->params.unary.alpha, st->params.unary.beta, mtf_shape_num_elements(&st->out_shape),
        CF(a->in[0]), F(a->out));
  return MTF_OK;
}

static int k_one_hot(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  int d = mtf_shape_index_of(&st->out_shape, st->params.along.dim);
  one_hot(&st->in_shape[0], a->in[0], st->in_dtype[0], &st->out_shape, d, st->dim_offset, F(a->out));
  return MTF_OK;
}

static int k_random_keep(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  int64_t offsets[MTF_MAX_RANK], dims[MTF_MAX_RANK];
  mtf_random_extent(st, a, offsets, dims);
  random_keep(st->seed, mtf_run_key(st->params.random.key, a->random_offset), st->params.random.keep, dims,
              &st->out_shape, offsets, F(a->out));
  return MTF_OK;
}

void mtf_cpu_register_elementwise(mtf_kernel_fn *k) {
  k[MTF_OP_CONSTANT] = k_constant;
  k[MTF_OP_RANGE] = k_range;
  k[MTF_OP_BROADCAST] = k_broadcast;
  k[MTF_OP_REDUCE_MAX] = k_reduce_max;
  k[MTF_OP_BINARY] = k_binary;
  k[MTF_OP_UNARY] = k_unary;
  k[MTF_OP_ONE_HOT] = k_one_hot;
  k[MTF_OP_RANDOM_KEEP] = k_random_keep;
}
