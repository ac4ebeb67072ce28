/* CPU kernels for the elementwise, source and broadcast ops (the max reduction is reduce.c's): strided
 * walks over the output with neighbouring dims merged, contiguous and broadcast rows as their own
 * vectorised loops, threads over contiguous ranges of output elements (parallel.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "exec/cpu/fastmath.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/strided.h"

/* A walk over the output with up to two operands, split over threads by ranges of output elements. */
typedef struct walk_job {
  mtf_walk w;
  const float *in[2];
  float *out;
  mtf_bf16 *out_bf16; /* instead of out: a bf16-stored result (lower/storage.c), fp32 math */
  int kind;
  float value;
} walk_job;

/* Broadcast: the output walked with the input's strides by name; rows are copies or fills. */
static void broadcast_chunk(void *p, int64_t lo, int64_t hi) {
  walk_job *job = p;
  mtf_walk t = job->w;
  int64_t s = t.strides[0][t.rank - 1];
  MTF_WALK_SEGMENTS(t, lo, hi, {
    const float *src = job->in[0] + t.offset[0] + col * s;
    float *dst = job->out + e;
    if (s == 1) memcpy(dst, src, sizeof(float) * (size_t)len);
    else if (s == 0) mtf_cpu_fill(src[0], len, dst);
    else for (int64_t i = 0; i < len; i++) dst[i] = src[i * s];
  });
}

static void broadcast(int threads, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                      float *out) {
  const mtf_shape *ops[1] = {in_shape};
  walk_job job = {.in = {in, NULL}, .out = out};
  mtf_walk_init(&job.w, out_shape, 1, ops);
  mtf_walk_coalesce(&job.w);
  int64_t total = job.w.rows * job.w.inner;
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, total), total, broadcast_chunk, &job);
}

/* One row segment of a binary op, operand strides sx, sy along it. The contiguous and broadcast (stride 0)
 * cases are their own loops so that they vectorise; every case computes the same expression. */
#define BINARY_CASE(kind, expr)                                                                             \
  case kind:                                                                                                \
    if (sx == 1 && sy == 1) {                                                                               \
      for (int64_t i = 0; i < n; i++) {                                                                     \
        float u = x[i], v = y[i];                                                                           \
        d[i] = (expr);                                                                                      \
      }                                                                                                     \
    } else if (sx == 1 && sy == 0) {                                                                        \
      float v = y[0];                                                                                       \
      for (int64_t i = 0; i < n; i++) {                                                                     \
        float u = x[i];                                                                                     \
        d[i] = (expr);                                                                                      \
      }                                                                                                     \
    } else if (sx == 0 && sy == 1) {                                                                        \
      float u = x[0];                                                                                       \
      for (int64_t i = 0; i < n; i++) {                                                                     \
        float v = y[i];                                                                                     \
        d[i] = (expr);                                                                                      \
      }                                                                                                     \
    } else {                                                                                                \
      for (int64_t i = 0; i < n; i++) {                                                                     \
        float u = x[i * sx], v = y[i * sy];                                                                 \
        d[i] = (expr);                                                                                      \
      }                                                                                                     \
    }                                                                                                       \
    break;

static void binary_segment(mtf_binary_kind kind, int64_t n, const float *x, int64_t sx, const float *y, int64_t sy,
                           float *d) {
  switch (kind) {
    BINARY_CASE(MTF_BIN_ADD, u + v)
    BINARY_CASE(MTF_BIN_SUB, u - v)
    BINARY_CASE(MTF_BIN_MUL, u * v)
    BINARY_CASE(MTF_BIN_DIV, u / v)
    BINARY_CASE(MTF_BIN_EQUAL, u == v ? 1.0f : 0.0f)
    BINARY_CASE(MTF_BIN_LESS_EQUAL, u <= v ? 1.0f : 0.0f)
    BINARY_CASE(MTF_BIN_GREATER, u > v ? 1.0f : 0.0f)
    BINARY_CASE(MTF_BIN_LESS, u < v ? 1.0f : 0.0f)
    BINARY_CASE(MTF_BIN_MAXIMUM, u >= v ? u : v)
    BINARY_CASE(MTF_BIN_MINIMUM, u <= v ? u : v)
  }
}

/* The same segment rounded into bfloat16, a block at a time. */
static void binary_segment_bf16(mtf_binary_kind kind, int64_t n, const float *x, int64_t sx, const float *y,
                                int64_t sy, mtf_bf16 *d) {
  float block[MTF_CPU_BF16_BLOCK];
  for (int64_t i = 0; i < n; i += MTF_CPU_BF16_BLOCK) {
    int64_t m = n - i < MTF_CPU_BF16_BLOCK ? n - i : MTF_CPU_BF16_BLOCK;
    binary_segment(kind, m, x + i * sx, sx, y + i * sy, sy, block);
    mtf_cpu_round(block, d + i, m);
  }
}

static void binary_chunk(void *p, int64_t lo, int64_t hi) {
  walk_job *job = p;
  mtf_walk t = job->w;
  int64_t sa = t.strides[0][t.rank - 1], sb = t.strides[1][t.rank - 1];
  if (job->out_bf16) {
    MTF_WALK_SEGMENTS(t, lo, hi,
                      binary_segment_bf16((mtf_binary_kind)job->kind, len, job->in[0] + t.offset[0] + col * sa, sa,
                                          job->in[1] + t.offset[1] + col * sb, sb, job->out_bf16 + e));
    return;
  }
  MTF_WALK_SEGMENTS(t, lo, hi,
                    binary_segment((mtf_binary_kind)job->kind, len, job->in[0] + t.offset[0] + col * sa, sa,
                                   job->in[1] + t.offset[1] + col * sb, sb, job->out + e));
}

static void binary(int threads, int kind, const mtf_shape *a_shape, const float *a, const mtf_shape *b_shape,
                   const float *b, const mtf_shape *out_shape, void *out, int out_bf16) {
  const mtf_shape *ops[2] = {a_shape, b_shape};
  walk_job job = {.in = {a, b}, .out = out_bf16 ? NULL : out, .out_bf16 = out_bf16 ? out : NULL, .kind = kind};
  mtf_walk_init(&job.w, out_shape, 2, ops);
  mtf_walk_coalesce(&job.w);
  int64_t total = job.w.rows * job.w.inner;
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, total), total, binary_chunk, &job);
}

/* Elements [0, n) of a unary op; the transcendental functions are fastmath.h's, so each loop vectorises. */
static void unary_range(mtf_unary_kind kind, float alpha, float beta, int64_t n, const float *in, float *out) {
  switch (kind) {
    case MTF_UN_AFFINE: for (int64_t i = 0; i < n; i++) out[i] = alpha * in[i] + beta; break;
    case MTF_UN_EXP: for (int64_t i = 0; i < n; i++) out[i] = mtf_expf(in[i]); break;
    case MTF_UN_LOG: for (int64_t i = 0; i < n; i++) out[i] = logf(in[i]); break;
    case MTF_UN_RSQRT: for (int64_t i = 0; i < n; i++) out[i] = 1.0f / sqrtf(in[i]); break;
    case MTF_UN_SQRT: for (int64_t i = 0; i < n; i++) out[i] = sqrtf(in[i]); break;
    case MTF_UN_SQUARE: for (int64_t i = 0; i < n; i++) out[i] = in[i] * in[i]; break;
    case MTF_UN_TANH: for (int64_t i = 0; i < n; i++) out[i] = mtf_tanhf(in[i]); break;
    case MTF_UN_SIGMOID: for (int64_t i = 0; i < n; i++) out[i] = mtf_sigmoidf(in[i]); break;
    case MTF_UN_RELU: for (int64_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f; break;
    case MTF_UN_STEP: for (int64_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? 1.0f : 0.0f; break;
    case MTF_UN_GELU: for (int64_t i = 0; i < n; i++) out[i] = mtf_geluf(in[i]); break;
    case MTF_UN_GELU_GRAD: for (int64_t i = 0; i < n; i++) out[i] = mtf_gelu_gradf(in[i]); break;
    case MTF_UN_SWISH: for (int64_t i = 0; i < n; i++) out[i] = in[i] * mtf_sigmoidf(in[i]); break;
    /* In double: rotary angles reach model.length radians, where sinf's argument reduction is the weak part. */
    case MTF_UN_SIN: for (int64_t i = 0; i < n; i++) out[i] = (float)sin((double)in[i]); break;
    case MTF_UN_COS: for (int64_t i = 0; i < n; i++) out[i] = (float)cos((double)in[i]); break;
    case MTF_UN_SWISH_GRAD:
      for (int64_t i = 0; i < n; i++) {
        float s = mtf_sigmoidf(in[i]);
        out[i] = s * (1.0f + in[i] * (1.0f - s));
      }
      break;
  }
}

typedef struct unary_job {
  int kind;
  float alpha, beta;
  const void *in;
  void *out;
  int in_bf16, out_bf16; /* bf16-stored activations (lower/storage.c): fp32 math on blocks */
} unary_job;

static void unary_chunk(void *p, int64_t lo, int64_t hi) {
  unary_job *job = p;
  if (!job->in_bf16 && !job->out_bf16) {
    unary_range((mtf_unary_kind)job->kind, job->alpha, job->beta, hi - lo, (const float *)job->in + lo,
                (float *)job->out + lo);
    return;
  }
  float x[MTF_CPU_BF16_BLOCK], y[MTF_CPU_BF16_BLOCK];
  for (int64_t b = lo; b < hi; b += MTF_CPU_BF16_BLOCK) {
    int64_t n = hi - b < MTF_CPU_BF16_BLOCK ? hi - b : MTF_CPU_BF16_BLOCK;
    const float *in = (const float *)job->in + b;
    if (job->in_bf16) {
      mtf_cpu_widen((const mtf_bf16 *)job->in + b, x, n);
      in = x;
    }
    float *out = job->out_bf16 ? y : (float *)job->out + b;
    if (job->kind == MTF_UN_GELU && job->in_bf16) /* a bf16 argument: the cheaper form (fastmath.h) */
      for (int64_t i = 0; i < n; i++) out[i] = mtf_gelu_sigmoid_formf(in[i]);
    else
      unary_range((mtf_unary_kind)job->kind, job->alpha, job->beta, n, in, out);
    if (job->out_bf16) mtf_cpu_round(y, (mtf_bf16 *)job->out + b, n);
  }
}

static void unary(int threads, int kind, float alpha, float beta, int64_t n, const void *in, int in_bf16, void *out,
                  int out_bf16) {
  unary_job job = {kind, alpha, beta, in, out, in_bf16, out_bf16};
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, n), n, unary_chunk, &job);
}

void mtf_cpu_fill(float value, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = value;
}

static void fill_chunk(void *p, int64_t lo, int64_t hi) {
  walk_job *job = p;
  mtf_cpu_fill(job->value, hi - lo, job->out + lo);
}

void mtf_cpu_fill_parallel(int threads, float value, int64_t n, float *out) {
  walk_job job = {.out = out, .value = value};
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, n), n, fill_chunk, &job);
}

/* Rows of the output over threads (w.index is read, so the walk is not coalesced). */
typedef struct one_hot_job {
  mtf_walk w;
  const void *in;
  mtf_dtype in_dtype;
  int dim_index;
  int64_t dim_offset;
  float *out;
} one_hot_job;

static void one_hot_chunk(void *p, int64_t lo, int64_t hi) {
  one_hot_job *job = p;
  mtf_walk t = job->w;
  int last = t.rank - 1;
  int64_t s = t.strides[0][last];
  mtf_walk_seek(&t, lo);
  for (int64_t r = lo; r < hi; r++, mtf_walk_next_row(&t)) {
    float *dst = job->out + r * t.inner;
    if (job->dim_index == last && s == 0) { /* the row is the one-hot dim, its index is the row's: one 1 */
      int64_t position = mtf_cpu_index(job->in, job->in_dtype, t.offset[0]) - job->dim_offset;
      mtf_cpu_fill(0.0f, t.inner, dst);
      if (position >= 0 && position < t.inner) dst[position] = 1.0f;
      continue;
    }
    for (int64_t i = 0; i < t.inner; i++) {
      int64_t position = job->dim_index == last ? i : t.index[job->dim_index];
      dst[i] = mtf_cpu_index(job->in, job->in_dtype, t.offset[0] + i * s) == job->dim_offset + position ? 1.0f : 0.0f;
    }
  }
}

static void one_hot(int threads, const mtf_shape *in_shape, const void *in, mtf_dtype in_dtype,
                    const mtf_shape *out_shape, int dim_index, int64_t dim_offset, float *out) {
  const mtf_shape *ops[1] = {in_shape};
  one_hot_job job = {.in = in, .in_dtype = in_dtype, .dim_index = dim_index, .dim_offset = dim_offset, .out = out};
  mtf_walk_init(&job.w, out_shape, 1, ops);
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, job.w.rows * job.w.inner), job.w.rows, one_hot_chunk, &job);
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
  mtf_cpu_fill_parallel(b->threads, st->params.constant.value, mtf_shape_num_elements(&st->out_shape), F(a->out));
  return MTF_OK;
}

static int k_range(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  for (int64_t i = 0; i < n; i++) F(a->out)[i] = (float)(st->offsets[0] + i);
  return MTF_OK;
}

static int k_broadcast(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  broadcast(b->threads, &st->in_shape[0], CF(a->in[0]), &st->out_shape, F(a->out));
  return MTF_OK;
}

static int k_reduce_max(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  mtf_cpu_reduce_max(b->threads, &st->in_shape[0], CF(a->in[0]), &st->out_shape, F(a->out));
  return MTF_OK;
}

static int k_binary(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  binary(b->threads, st->params.binary.fn, &st->in_shape[0], CF(a->in[0]), &st->in_shape[1], CF(a->in[1]),
         &st->out_shape, a->out, st->out_dtype == MTF_BF16);
  return MTF_OK;
}

static int k_unary(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  unary(b->threads, st->params.unary.fn, st->params.unary.alpha, st->params.unary.beta,
        mtf_shape_num_elements(&st->out_shape), a->in[0], st->in_dtype[0] == MTF_BF16, a->out,
        st->out_dtype == MTF_BF16);
  return MTF_OK;
}

static int k_one_hot(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int d = mtf_shape_index_of(&st->out_shape, st->params.along.dim);
  one_hot(b->threads, &st->in_shape[0], a->in[0], st->in_dtype[0], &st->out_shape, d, st->dim_offset, F(a->out));
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
