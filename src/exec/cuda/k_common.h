/* Helpers shared by the CUDA kernels of the op table (k_*.cu), on top of cuda_kernel.h's conventions:
 * host-side descriptions of a step's shapes passed to kernels by value (walks over an output with each
 * operand's strides by name; the rows of a fused op and the strides come from exec/rows.h and the random
 * masks' counter hash from core/rng.h, the same definitions the CPU kernels use), index reads of int32 or
 * integer-valued float ids, and the launch shorthand every kernel file uses. All inside the backend's
 * namespace (MTF_CUDA_BEGIN). Everything here is C++ compiled by nvcc, or by g++ for the emulator. */
#ifndef MTF_EXEC_CUDA_K_COMMON_H
#define MTF_EXEC_CUDA_K_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/cuda_kernel.h"

extern "C" {
#include "core/bf16.h"
#include "core/rng.h"
#include "core/shape.h"
#include "exec/rows.h"
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

static inline k_walk k_walk_make(const mtf_shape *walked, int n, const mtf_shape *const *operands) {
  k_walk w;
  memset(&w, 0, sizeof w);
  w.rank = walked->rank;
  for (int d = 0; d < walked->rank; d++) w.dims[d] = walked->dims[d].size;
  for (int k = 0; k < n; k++) mtf_strides_by_name(walked, operands[k], w.strides[k]);
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

/* The same in 32-bit arithmetic, for walks whose element count (and so every operand's offset: an operand is
 * at most as large as the walk) is below 2^31: a 64-bit division costs tens of instructions per element. */
__host__ __device__ inline uint32_t k_walk_offset32(const k_walk &w, int k, uint32_t e) {
  uint32_t off = 0;
  for (int d = w.rank - 1; d >= 0; d--) {
    uint32_t size = (uint32_t)w.dims[d];
    off += (e % size) * (uint32_t)w.strides[k][d];
    e /= size;
  }
  return off;
}

/* After k_walk_coalesce: operand k is laid out as the walk (element e at offset e). */
static inline int k_walk_flat(const k_walk *w, int k) { return w->rank == 0 || (w->rank == 1 && w->strides[k][0] == 1); }

/* Four floats at a time: p 16-byte aligned and n a multiple of 4 (arena buffers start on 256 bytes). */
static inline int k_vec4_ok(const void *p, int64_t n) { return n % 4 == 0 && ((uintptr_t)p & 15u) == 0; }

/* Element i of an index tensor held as int32 or as floats with integer values (mtf_cpu_index). */
__host__ __device__ inline int64_t k_index(const void *ids, int is_i32, int64_t i) {
  return is_i32 ? (int64_t)((const int32_t *)ids)[i] : (int64_t)rintf(((const float *)ids)[i]);
}

/* Element i of a float32 tensor, or of a bfloat16-stored one (bf16: the step's dtype is MTF_BF16, lower/storage.c),
 * as a float: the kernels' math is fp32 either way. */
__host__ __device__ inline float k_load(const void *p, int bf16, int64_t i) {
  return bf16 ? mtf_float_from_bf16(((const mtf_bf16 *)p)[i]) : ((const float *)p)[i];
}
/* v into element i, rounded to bfloat16 (core/bf16.h, the CPU's bits) where the value is bf16-stored. */
__host__ __device__ inline void k_store(void *p, int bf16, int64_t i, float v) {
  if (bf16) ((mtf_bf16 *)p)[i] = mtf_bf16_from_float(v);
  else ((float *)p)[i] = v;
}
/* Whether a step's input k or output is bf16-stored. */
static inline int k_in_bf16(const mtf_step *st, int k) { return st->in_dtype[k] == MTF_BF16; }
static inline int k_out_bf16(const mtf_step *st) { return st->out_dtype == MTF_BF16; }

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
