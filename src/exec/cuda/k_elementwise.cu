/* CUDA kernels of the elementwise, source and structural ops: constant, range, broadcast, binary, unary,
 * one_hot, random_keep (core/rng's counter hash over global indices, as the CPU), masked_fill, where,
 * to_float, take and cast (float32 <-> bfloat16 by core/bf16.h's rounding, so the bits are the CPU's; binary,
 * unary and take also write bf16-stored values, unary reads them: k_load / k_store). One
 * thread per output element in grid-stride loops; operands are read through a k_walk (strides by name), so
 * broadcasting by name is the same code as the plain case. Reshape, rename and
 * stop_gradient have no kernel: lowering aliases their buffers. */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"

extern "C" {
#include "core/bf16.h"
}

MTF_CUDA_BEGIN

/* ---- device functions of the unary and binary kinds (the CPU kernels' expressions) ---- */

__device__ inline float k_unary_value(int kind, float alpha, float beta, float x) {
  switch (kind) {
    case MTF_UN_AFFINE: return alpha * x + beta;
    case MTF_UN_EXP: return expf(x);
    case MTF_UN_LOG: return logf(x);
    case MTF_UN_RSQRT: return 1.0f / sqrtf(x);
    case MTF_UN_SQRT: return sqrtf(x);
    case MTF_UN_SQUARE: return x * x;
    case MTF_UN_TANH: return tanhf(x);
    case MTF_UN_SIGMOID: return k_sigmoid(x);
    case MTF_UN_RELU: return x > 0.0f ? x : 0.0f;
    case MTF_UN_STEP: return x > 0.0f ? 1.0f : 0.0f;
    case MTF_UN_GELU: return k_gelu(x);
    case MTF_UN_GELU_GRAD: return k_gelu_grad(x);
    case MTF_UN_SWISH: return x * k_sigmoid(x);
    case MTF_UN_SWISH_GRAD: {
      float s = k_sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    /* In double, as the CPU: rotary angles reach model.length radians. */
    case MTF_UN_SIN: return (float)sin((double)x);
    case MTF_UN_COS: return (float)cos((double)x);
  }
  return x;
}

__device__ inline float k_binary_value(int kind, float u, float v) {
  switch (kind) {
    case MTF_BIN_ADD: return u + v;
    case MTF_BIN_SUB: return u - v;
    case MTF_BIN_MUL: return u * v;
    case MTF_BIN_DIV: return u / v;
    case MTF_BIN_EQUAL: return u == v ? 1.0f : 0.0f;
    case MTF_BIN_LESS_EQUAL: return u <= v ? 1.0f : 0.0f;
    case MTF_BIN_GREATER: return u > v ? 1.0f : 0.0f;
    case MTF_BIN_LESS: return u < v ? 1.0f : 0.0f;
    case MTF_BIN_MAXIMUM: return u >= v ? u : v;
    case MTF_BIN_MINIMUM: return u <= v ? u : v;
  }
  return u;
}

/* ---- kernels ----
 * In place (an output that is also an input) is allowed where a kernel reads element e before writing it, as
 * these do; the vec4 forms read their four elements before writing them too.
 * Kernels that walk operands by index are templates on the index type I: uint32_t when the output has fewer
 * than 2^31 elements (K_INDEXED picks it; every operand is then smaller too), so that the divisions of the
 * walk are 32-bit ones, a few instructions instead of tens; int64_t beyond. */
#define K_INDEXED(kernel, n) ((n) < ((int64_t)1 << 31) ? kernel<uint32_t> : kernel<int64_t>)
#define K_INDEX_LOOP(I, e, n) for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < (I)(n); e += (I)blockDim.x * gridDim.x)

/* Operand k's offset of element e in the index type of e. */
__device__ inline int64_t k_offset(const k_walk &w, int k, int64_t e) { return k_walk_offset(w, k, e); }
__device__ inline uint32_t k_offset(const k_walk &w, int k, uint32_t e) { return k_walk_offset32(w, k, e); }

__global__ void k_fill_kernel(float value, int64_t n, float *out) {
  MTF_GRID_STRIDE(i, n) out[i] = value;
}

__global__ void k_range_kernel(int64_t start, int64_t n, float *out) {
  MTF_GRID_STRIDE(i, n) out[i] = (float)(start + i);
}

template <typename I> __global__ void k_broadcast_kernel(k_walk w, int64_t n, const float *in, float *out) {
  K_INDEX_LOOP(I, e, n) out[e] = in[k_offset(w, 0, e)];
}

/* out_bf16 / in_bf16: a bf16-stored output or argument (lower/storage.c), fp32 math either way. The general
 * walk (64-bit index arithmetic, any size) and, chosen by k_binary, its cheaper forms: a walk in 32-bit
 * arithmetic below 2^31 elements, operands laid out as the output (no walk), and those four floats at a time. */
template <typename I>
__global__ void k_binary_kernel(k_walk w, int64_t n, int kind, const float *x, const float *y, void *out, int out_bf16) {
  K_INDEX_LOOP(I, e, n) k_store(out, out_bf16, e, k_binary_value(kind, x[k_offset(w, 0, e)], y[k_offset(w, 1, e)]));
}

__global__ void k_binary_flat_kernel(int64_t n, int kind, const float *x, const float *y, void *out, int out_bf16) {
  MTF_GRID_STRIDE(e, n) k_store(out, out_bf16, e, k_binary_value(kind, x[e], y[e]));
}

__global__ void k_binary_vec4_kernel(int64_t n4, int kind, const float4 *x, const float4 *y, float4 *out) {
  MTF_GRID_STRIDE(e, n4) {
    float4 u = x[e], v = y[e];
    out[e] = make_float4(k_binary_value(kind, u.x, v.x), k_binary_value(kind, u.y, v.y),
                         k_binary_value(kind, u.z, v.z), k_binary_value(kind, u.w, v.w));
  }
}

__global__ void k_unary_kernel(int64_t n, int kind, float alpha, float beta, const void *in, int in_bf16, void *out,
                               int out_bf16) {
  MTF_GRID_STRIDE(e, n) k_store(out, out_bf16, e, k_unary_value(kind, alpha, beta, k_load(in, in_bf16, e)));
}

/* float32 in and out, four at a time (k_unary chooses it where k_vec4_ok). */
__global__ void k_unary_vec4_kernel(int64_t n4, int kind, float alpha, float beta, const float4 *in, float4 *out) {
  MTF_GRID_STRIDE(e, n4) {
    float4 x = in[e];
    out[e] = make_float4(k_unary_value(kind, alpha, beta, x.x), k_unary_value(kind, alpha, beta, x.y),
                         k_unary_value(kind, alpha, beta, x.z), k_unary_value(kind, alpha, beta, x.w));
  }
}

/* out[e] = 1 where the id at e (the input has every output dim but the one-hot dim) is that dim's global
 * index of e. */
template <typename I>
__global__ void k_one_hot_kernel(k_walk w, int64_t n, int dim_index, int64_t dim_offset, const void *ids, int is_i32,
                                 float *out) {
  K_INDEX_LOOP(I, e, n) {
    I rest = e, position = 0;
    for (int d = w.rank - 1; d >= 0; d--) {
      if (d == dim_index) position = rest % (I)w.dims[d];
      rest /= (I)w.dims[d];
    }
    out[e] = k_index(ids, is_i32, k_offset(w, 0, e)) == dim_offset + (int64_t)position ? 1.0f : 0.0f;
  }
}

/* Element e's global index: its local index plus the slice's offsets, over the global dims (row-major);
 * w.strides[0] holds the global strides. */
typedef struct k_random_extent {
  int64_t offsets[MTF_MAX_RANK];
} k_random_extent;

template <typename I>
__global__ void k_random_keep_kernel(k_walk w, k_random_extent x, int64_t n, uint64_t seed, uint64_t key, double keep,
                                     float *out) {
  K_INDEX_LOOP(I, e, n) {
    I rest = e;
    int64_t global = 0; /* the whole tensor's index: 64-bit even when the slice's is not */
    for (int d = w.rank - 1; d >= 0; d--) {
      global += ((int64_t)(rest % (I)w.dims[d]) + x.offsets[d]) * w.strides[0][d];
      rest /= (I)w.dims[d];
    }
    out[e] = mtf_uniform01(seed, key, (uint64_t)global) < keep ? 1.0f : 0.0f;
  }
}

template <typename I>
__global__ void k_masked_fill_kernel(k_walk w, int64_t n, const float *x, const float *mask, float fill, float *out) {
  K_INDEX_LOOP(I, e, n) out[e] = mask[k_offset(w, 1, e)] != 0.0f ? x[k_offset(w, 0, e)] : fill;
}

template <typename I>
__global__ void k_where_kernel(k_walk w, int64_t n, const void *cond, int cond_i32, const float *a, const float *b,
                               float *out) {
  K_INDEX_LOOP(I, e, n) {
    I c = k_offset(w, 0, e);
    int take_a = cond_i32 ? ((const int32_t *)cond)[c] != 0 : ((const float *)cond)[c] != 0.0f;
    out[e] = take_a ? a[k_offset(w, 1, e)] : b[k_offset(w, 2, e)];
  }
}

__global__ void k_to_float_kernel(int64_t n, const void *in, int is_i32, float *out) {
  MTF_GRID_STRIDE(e, n) out[e] = is_i32 ? (float)((const int32_t *)in)[e] : ((const float *)in)[e];
}

/* [outer, size, inner] -> [outer, inner] at `index` of the middle dim. */
template <typename I>
__global__ void k_take_kernel(int64_t n, int64_t inner, int64_t size, int64_t index, const float *in, void *out,
                              int out_bf16) {
  const I inner_i = (I)inner; /* the input is size times larger than n: the I range holds only the division */
  K_INDEX_LOOP(I, e, n) k_store(out, out_bf16, e, in[((int64_t)(e / inner_i) * size + index) * inner + (int64_t)(e % inner_i)]);
}

__global__ void k_to_bf16_kernel(int64_t n, const float *in, mtf_bf16 *out) {
  MTF_GRID_STRIDE(e, n) out[e] = mtf_bf16_from_float(in[e]);
}

__global__ void k_from_bf16_kernel(int64_t n, const mtf_bf16 *in, float *out) {
  MTF_GRID_STRIDE(e, n) out[e] = mtf_float_from_bf16(in[e]);
}

/* ---- the kernels of the op table ---- */

static inline int64_t count_of(const mtf_shape *s) { return mtf_shape_num_elements(s); }

int mtf_cuda_k_fill(mtf_backend *b, float *out, float value, int64_t n) {
  MTF_LAUNCH(k_fill_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), value, n, out);
  K_DONE(b, "fill");
}

static int k_constant(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  return mtf_cuda_k_fill(b, (float *)a->out, st->params.constant.value, count_of(&st->out_shape));
}

static int k_range(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(k_range_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), st->offsets[0], n, (float *)a->out);
  K_DONE(b, "range");
}

static int k_broadcast(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[1] = {&st->in_shape[0]};
  k_walk w = k_walk_make(&st->out_shape, 1, ops);
  k_walk_coalesce(&w, 1);
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(K_INDEXED(k_broadcast_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b),
             w, n, (const float *)a->in[0],
             (float *)a->out);
  K_DONE(b, "broadcast");
}

static int k_binary(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[2] = {&st->in_shape[0], &st->in_shape[1]};
  k_walk w = k_walk_make(&st->out_shape, 2, ops);
  k_walk_coalesce(&w, 2);
  int64_t n = count_of(&st->out_shape);
  int kind = (int)st->params.binary.fn, out_bf16 = k_out_bf16(st);
  const float *x = (const float *)a->in[0], *y = (const float *)a->in[1];
  if (k_walk_flat(&w, 0) && k_walk_flat(&w, 1)) {
    if (!out_bf16 && k_vec4_ok(x, n) && k_vec4_ok(y, n) && k_vec4_ok(a->out, n))
      MTF_LAUNCH(k_binary_vec4_kernel, mtf_cuda_blocks(n / 4, K_THREADS), K_THREADS, 0, K_STREAM(b), n / 4, kind,
                 (const float4 *)x, (const float4 *)y, (float4 *)a->out);
    else
      MTF_LAUNCH(k_binary_flat_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, kind, x, y, a->out,
                 out_bf16);
  } else {
    MTF_LAUNCH(K_INDEXED(k_binary_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), w, n, kind, x,
               y, a->out, out_bf16);
  }
  K_DONE(b, "binary");
}

static int k_unary(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = count_of(&st->out_shape);
  if (!k_in_bf16(st, 0) && !k_out_bf16(st) && k_vec4_ok(a->in[0], n) && k_vec4_ok(a->out, n))
    MTF_LAUNCH(k_unary_vec4_kernel, mtf_cuda_blocks(n / 4, K_THREADS), K_THREADS, 0, K_STREAM(b), n / 4,
               (int)st->params.unary.fn, st->params.unary.alpha, st->params.unary.beta, (const float4 *)a->in[0],
               (float4 *)a->out);
  else
    MTF_LAUNCH(k_unary_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, (int)st->params.unary.fn,
               st->params.unary.alpha, st->params.unary.beta, a->in[0], k_in_bf16(st, 0), a->out, k_out_bf16(st));
  K_DONE(b, "unary");
}

static int k_one_hot(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[1] = {&st->in_shape[0]};
  k_walk w = k_walk_make(&st->out_shape, 1, ops);
  int64_t n = count_of(&st->out_shape);
  int d = mtf_shape_index_of(&st->out_shape, st->params.along.dim);
  MTF_LAUNCH(K_INDEXED(k_one_hot_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b),
             w, n, d, st->dim_offset, a->in[0],
             (int)(st->in_dtype[0] == MTF_I32), (float *)a->out);
  K_DONE(b, "one_hot");
}

static int k_random_keep(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t offsets[MTF_MAX_RANK], dims[MTF_MAX_RANK];
  mtf_random_extent(st, a, offsets, dims);
  k_walk w;
  memset(&w, 0, sizeof w);
  k_random_extent x;
  memset(&x, 0, sizeof x);
  w.rank = st->out_shape.rank;
  int64_t stride = 1;
  for (int d = w.rank - 1; d >= 0; d--) {
    w.dims[d] = st->out_shape.dims[d].size;
    w.strides[0][d] = stride;
    stride *= dims[d];
    x.offsets[d] = offsets[d];
  }
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(K_INDEXED(k_random_keep_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b),
             w, x, n, st->seed,
             mtf_run_key(st->params.random.key, a->random_offset), (double)st->params.random.keep, (float *)a->out);
  K_DONE(b, "random_keep");
}

static int k_masked_fill(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[2] = {&st->in_shape[0], &st->in_shape[1]};
  k_walk w = k_walk_make(&st->out_shape, 2, ops);
  k_walk_coalesce(&w, 2);
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(K_INDEXED(k_masked_fill_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b),
             w, n, (const float *)a->in[0],
             (const float *)a->in[1], st->params.fill.value, (float *)a->out);
  K_DONE(b, "masked_fill");
}

static int k_where(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[3] = {&st->in_shape[0], &st->in_shape[1], &st->in_shape[2]};
  k_walk w = k_walk_make(&st->out_shape, 3, ops);
  k_walk_coalesce(&w, 3);
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(K_INDEXED(k_where_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), w, n, a->in[0],
             (int)(st->in_dtype[0] == MTF_I32), (const float *)a->in[1], (const float *)a->in[2], (float *)a->out);
  K_DONE(b, "where");
}

static int k_to_float(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(k_to_float_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, a->in[0],
             (int)(st->in_dtype[0] == MTF_I32), (float *)a->out);
  K_DONE(b, "to_float");
}

static int k_take(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *x = &st->in_shape[0];
  int d = mtf_shape_index_of(x, st->params.take.dim);
  if (d < 0) return MTF_ERR_INVALID;
  int64_t inner = 1;
  for (int i = d + 1; i < x->rank; i++) inner *= x->dims[i].size;
  int64_t n = count_of(&st->out_shape);
  MTF_LAUNCH(K_INDEXED(k_take_kernel, n), mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b),
             n, inner, x->dims[d].size,
             (int64_t)st->params.take.index, (const float *)a->in[0], a->out, k_out_bf16(st));
  K_DONE(b, "take");
}

int mtf_cuda_k_cast(mtf_backend *b, const void *in, mtf_dtype from, void *out, mtf_dtype to, int64_t n) {
  if (n <= 0) return MTF_OK;
  if (from == to) {
    MTF_CUDA_CHECK(b, cudaMemcpyAsync(out, in, (size_t)n * mtf_dtype_size(to), cudaMemcpyDeviceToDevice, K_STREAM(b)));
    return MTF_OK;
  }
  if (from == MTF_F32 && to == MTF_BF16) {
    MTF_LAUNCH(k_to_bf16_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, (const float *)in,
               (mtf_bf16 *)out);
    K_DONE(b, "cast to bfloat16");
  }
  if (from == MTF_BF16 && to == MTF_F32) {
    MTF_LAUNCH(k_from_bf16_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, (const mtf_bf16 *)in,
               (float *)out);
    K_DONE(b, "cast to float32");
  }
  return mtf_cuda_refuse(b, "cast: %s -> %s is not a cast the CUDA backend has (float32 <-> bfloat16)",
                         mtf_dtype_name(from), mtf_dtype_name(to));
}

static int k_cast(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  return mtf_cuda_k_cast(b, a->in[0], st->in_dtype[0], a->out, st->out_dtype, count_of(&st->out_shape));
}

void mtf_cuda_register_elementwise(mtf_kernel_fn *k) {
  k[MTF_OP_CONSTANT] = k_constant;
  k[MTF_OP_RANGE] = k_range;
  k[MTF_OP_BROADCAST] = k_broadcast;
  k[MTF_OP_BINARY] = k_binary;
  k[MTF_OP_UNARY] = k_unary;
  k[MTF_OP_ONE_HOT] = k_one_hot;
  k[MTF_OP_RANDOM_KEEP] = k_random_keep;
  k[MTF_OP_MASKED_FILL] = k_masked_fill;
  k[MTF_OP_WHERE] = k_where;
  k[MTF_OP_TO_FLOAT] = k_to_float;
  k[MTF_OP_TAKE] = k_take;
  k[MTF_OP_CAST] = k_cast;
}

MTF_CUDA_END
