/* CPU kernels other than einsum: plain loops over strided walks, innermost dimension contiguous. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"
#include "exec/cpu/strided.h"
#include "graph/graph.h"

int mtf_cpu_einsum(int n_in, const mtf_shape *in_shapes, const float *const *in, const mtf_shape *out_shape,
                   float *out);

static float *cpu_alloc(int64_t elements) {
  size_t bytes = (size_t)(elements > 0 ? elements : 1) * sizeof(float);
  bytes = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, bytes);
}

static void cpu_release(float *p) { free(p); }

static void cpu_reduce_max(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out) {
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

static void cpu_broadcast(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out) {
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

static void cpu_binary(int kind, const mtf_shape *a_shape, const float *a, const mtf_shape *b_shape, const float *b,
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

static void cpu_unary(int kind, float alpha, float beta, int64_t n, const float *in, float *out) {
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

static void cpu_fill(float value, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = value;
}

static void cpu_range(int64_t start, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = (float)(start + i);
}

static void cpu_one_hot(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, int dim_index,
                        int64_t dim_offset, float *out) {
  const mtf_shape *ops[1] = {in_shape};
  mtf_walk w;
  mtf_walk_init(&w, out_shape, 1, ops);
  int last = w.rank - 1;
  int64_t s = w.strides[0][last];
  float *dst = out;
  for (int64_t r = 0; r < w.rows; r++, dst += w.inner, mtf_walk_next_row(&w)) {
    const float *src = in + w.offset[0];
    for (int64_t i = 0; i < w.inner; i++) {
      int64_t position = dim_index == last ? i : w.index[dim_index];
      dst[i] = (int64_t)lrintf(src[i * s]) == dim_offset + position ? 1.0f : 0.0f;
    }
  }
}

static void cpu_random_keep(uint64_t seed, uint64_t key, float keep, const mtf_shape *global_shape,
                            const mtf_shape *out_shape, const int64_t *offsets, float *out) {
  int64_t global_strides[MTF_MAX_RANK], stride = 1;
  for (int d = global_shape->rank - 1; d >= 0; d--) {
    global_strides[d] = stride;
    stride *= global_shape->dims[d].size;
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

static void cpu_slice(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, const int64_t *offsets,
                      float *out) {
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
  float *dst = out;
  for (int64_t r = 0; r < w.rows; r++, dst += w.inner, mtf_walk_next_row(&w)) {
    const float *src = in + base + w.offset[0];
    int64_t s = in_shape->rank ? in_strides[in_shape->rank - 1] : 1;
    for (int64_t i = 0; i < w.inner; i++) dst[i] = src[i * s];
  }
}

static void cpu_copy(int64_t n, const float *in, float *out) {
  if (in != out) memmove(out, in, sizeof(float) * (size_t)n);
}

static const mtf_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .einsum = mtf_cpu_einsum,
    .reduce_max = cpu_reduce_max,
    .broadcast = cpu_broadcast,
    .binary = cpu_binary,
    .unary = cpu_unary,
    .fill = cpu_fill,
    .range = cpu_range,
    .one_hot = cpu_one_hot,
    .random_keep = cpu_random_keep,
    .slice = cpu_slice,
    .copy = cpu_copy,
};

const mtf_backend_ops *mtf_cpu_backend(void) { return &cpu_ops; }

int mtf_cpu_set_threads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
  return openblas_get_num_threads();
}
