/* Helpers shared by the CUDA kernels of the op table (k_*.cu), on top of cuda_kernel.h's conventions:
 * host-side descriptions of a step's shapes passed to kernels by value (walks over an output with each
 * operand's strides by name, rows of a fused op), the device-side counter hash of core/rng (so random
 * masks are bit-for-bit the CPU's), index reads of int32 or integer-valued float ids, and the launch
 * shorthand every kernel file uses. All inside the backend's namespace (MTF_CUDA_BEGIN). Everything here is C++ compiled by nvcc, or by g++ for the emulator. */
#ifndef MTF_EXEC_CUDA_K_COMMON_H
#define MTF_EXEC_CUDA_K_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/cuda_kernel.h"

extern "C" {
#include "core/shape.h"
#include "exec/backend.h"
}

MTF_CUDA_BEGIN

#define K_THREADS MTF_CUDA_THREADS /* threads of a block for the elementwise and row kernels */
#define K_MAX_OPERANDS 3

/* ---- host: shapes as values a kernel can take ---- */

/* An output of `rank` dims walked in order; operand k's element for output index (i_0..) is at
 * sum_d i_d * strides[k][d] (0 where the operand lacks the dim). Rank 0 is a walk of one element. */
typedef struct k_walk {
  int rank;
  int64_t dims[MTF_MAX_RANK];
  int64_t strides[K_MAX_OPERANDS][MTF_MAX_RANK];
} k_walk;

/* Row-major strides of `operand` for each dim of `walked`, matched by name (0 where absent). */
static inline void k_strides_by_name(const mtf_shape *walked, const mtf_shape *operand, int64_t *strides) {
  int64_t own[MTF_MAX_RANK], stride = 1;
  for (int d = operand->rank - 1; d >= 0; d--) {
    own[d] = stride;
    stride *= operand->dims[d].size;
  }
  for (int d = 0; d < walked->rank; d++) {
    int j = mtf_shape_index_of(operand, walked->dims[d].name);
    strides[d] = j >= 0 ? own[j] : 0;
  }
}

static inline k_walk k_walk_make(const mtf_shape *walked, int n, const mtf_shape *const *operands) {
  k_walk w;
  memset(&w, 0, sizeof w);
  w.rank = walked->rank;
  for (int d = 0; d < walked->rank; d++) w.dims[d] = walked->dims[d].size;
  for (int k = 0; k < n; k++) k_strides_by_name(walked, operands[k], w.strides[k]);
  return w;
}

/* Drops size-1 dims and merges neighbouring dims that are contiguous for the output and each of the n
 * operands (the CPU's mtf_walk_coalesce), so a plain elementwise op is a walk of rank 1 and each element
 * costs one division per remaining dim. Only for kernels that do not read an element's index per dim. */
static inline void k_walk_coalesce(k_walk *w, int n) {
  int rank = 0;
  for (int d = 0; d < w->rank; d++) {
    if (w->dims[d] == 1) continue;
    int merge = rank > 0;
    for (int k = 0; k < n && merge; k++) merge = w->strides[k][rank - 1] == w->strides[k][d] * w->dims[d];
    if (merge) {
      w->dims[rank - 1] *= w->dims[d];
      for (int k = 0; k < n; k++) w->strides[k][rank - 1] = w->strides[k][d];
      continue;
    }
    w->dims[rank] = w->dims[d];
    for (int k = 0; k < n; k++) w->strides[k][rank] = w->strides[k][d];
    rank++;
  }
  w->rank = rank; /* 0 when every dim had size 1: one element at offset 0 */
}

/* The rows of a fused op over `dim`: every index of the other dims is a row; the dim has local size `len`
 * and stride `inner` within it (the CPU kernels' rowops.h rows). */
typedef struct k_rows {
  int64_t outer, len, inner, count;
} k_rows;

static inline k_rows k_rows_of(const mtf_shape *s, const char *dim) {
  k_rows r = {1, 1, 1, 1};
  int d = mtf_shape_index_of(s, dim);
  for (int i = 0; i < s->rank; i++) {
    if (i < d) r.outer *= s->dims[i].size;
    if (i > d) r.inner *= s->dims[i].size;
  }
  r.len = d >= 0 ? s->dims[d].size : 1;
  r.count = r.outer * r.inner;
  return r;
}

/* Launch shorthand: kernels run on the compute stream; a launch error returns with its text kept. */
#define K_STREAM(b) mtf_cuda_stream(b)
#define K_DONE(b, name)               \
  do {                                \
    MTF_CUDA_CHECK_LAUNCH((b), name); \
    return MTF_OK;                    \
  } while (0)
/* Blocks for one block per row (grid-stride over rows beyond the cap). */
static inline unsigned k_row_blocks(int64_t rows) {
  return (unsigned)(rows < 1 ? 1 : rows < MTF_CUDA_MAX_BLOCKS ? rows : MTF_CUDA_MAX_BLOCKS);
}

/* ---- device ---- */

__host__ __device__ inline int64_t k_row_base(const k_rows &r, int64_t row) {
  return (row / r.inner) * r.len * r.inner + row % r.inner;
}

/* Operand k's offset of output element e. */
__host__ __device__ inline int64_t k_walk_offset(const k_walk &w, int k, int64_t e) {
  int64_t off = 0;
  for (int d = w.rank - 1; d >= 0; d--) {
    int64_t i = e % w.dims[d];
    e /= w.dims[d];
    off += i * w.strides[k][d];
  }
  return off;
}

/* Element i of an index tensor held as int32 or as floats with integer values (mtf_cpu_index). */
__host__ __device__ inline int64_t k_index(const void *ids, int is_i32, int64_t i) {
  return is_i32 ? (int64_t)((const int32_t *)ids)[i] : (int64_t)rintf(((const float *)ids)[i]);
}

/* core/rng.c's mtf_hash3 and mtf_uniform01, the same integer arithmetic, so masks agree bit for bit. */
__host__ __device__ inline uint64_t k_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__host__ __device__ inline double k_uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = k_mix64(k_mix64(k_mix64(seed + 0x9e3779b97f4a7c15ULL) ^ stream) + index * 0x9e3779b97f4a7c15ULL);
  return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* The kernels' running maximum: `v > m ? v : m`, so a NaN element is skipped (the CPU's mtf_max_step). */
__host__ __device__ inline float k_max_step(float m, float v) { return v > m ? v : m; }

/* The tanh form of gelu and its derivative, and the sigmoid (the op table's definitions). */
#define K_GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define K_GELU_A 0.044715f

__host__ __device__ inline float k_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__host__ __device__ inline float k_gelu(float x) {
  float t = tanhf(K_GELU_C * (x + K_GELU_A * x * x * x));
  return 0.5f * x * (1.0f + t);
}

__host__ __device__ inline float k_gelu_grad(float x) {
  float t = tanhf(K_GELU_C * (x + K_GELU_A * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * K_GELU_C * (1.0f + 3.0f * K_GELU_A * x * x);
}

MTF_CUDA_END

#endif
