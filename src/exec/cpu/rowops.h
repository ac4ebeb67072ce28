/* Reductions of one contiguous row, written so that they vectorise without -ffast-math: 16 independent
 * lanes (element j goes to lane j % 16; float, or double where float could overflow), combined in a fixed
 * order at the end, so the result depends only on the row, never on threads. Sums move the lanes into a double total every MTF_ROW_BLOCK elements,
 * which keeps long rows (a vocabulary of 50k logits) as accurate as a double sum for all practical
 * purposes. The fused kernels' strided (dim not innermost) paths keep plain double loops. */
#ifndef MTF_EXEC_CPU_ROWOPS_H
#define MTF_EXEC_CPU_ROWOPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/shape.h"
#include "exec/rows.h"
#include "exec/cpu/fastmath.h"


#define MTF_LANES 16
#define MTF_ROW_BLOCK 1024 /* a multiple of MTF_LANES */

/* The running maximum in the kernels' convention: `v > m ? v : m`, so a NaN element is skipped. */
static inline float mtf_max_step(float m, float v) { return v > m ? v : m; }

/* The lanes as one vector (GCC's and Clang's vector extension) where GCC 12 leaves the array form scalar: a
 * running max over 16 lanes becomes 16 scalar maxima. */
typedef float mtf_f32x16 __attribute__((vector_size(MTF_LANES * sizeof(float))));
typedef int32_t mtf_i32x16 __attribute__((vector_size(MTF_LANES * sizeof(int32_t))));

/* m = mtf_max_step(m, v) in every lane (a macro: a function returning a 64-byte vector has an ABI of its own
 * where the build has no AVX-512) */
#define MTF_MAX_STEP_F32X16(m, v)                                                                          \
  do {                                                                                                     \
    mtf_i32x16 greater_ = (v) > (m);                                                                       \
    (m) = (mtf_f32x16)(((mtf_i32x16)(v) & greater_) | ((mtf_i32x16)(m) & ~greater_));                      \
  } while (0)

static inline float mtf_row_max(const float *x, int64_t n) {
  mtf_f32x16 lane, v;
  for (int k = 0; k < MTF_LANES; k++) lane[k] = -INFINITY;
  int64_t j = 0;
  for (; j + MTF_LANES <= n; j += MTF_LANES) {
    memcpy(&v, x + j, sizeof v);
    MTF_MAX_STEP_F32X16(lane, v);
  }
  float m = -INFINITY;
  for (int k = 0; k < MTF_LANES; k++) m = mtf_max_step(m, lane[k]);
  for (; j < n; j++) m = mtf_max_step(m, x[j]);
  return m;
}

/* The body of the sums below: TERM(j) is element j's contribution, LANE the lanes' type. */
#define MTF_ROW_SUM_BODY(n, LANE, TERM)                                                                     \
  double total = 0.0;                                                                                       \
  int64_t j = 0;                                                                                            \
  while (j + MTF_LANES <= (n)) {                                                                            \
    LANE lane[MTF_LANES] = {0};                                                                             \
    int64_t end = j + MTF_ROW_BLOCK < (n) ? j + MTF_ROW_BLOCK : (n);                                        \
    for (; j + MTF_LANES <= end; j += MTF_LANES)                                                            \
      for (int k = 0; k < MTF_LANES; k++) lane[k] += TERM(j + k);                                           \
    LANE block = 0;                                                                                         \
    for (int k = 0; k < MTF_LANES; k++) block += lane[k];                                                   \
    total += block;                                                                                         \
  }                                                                                                         \
  for (; j < (n); j++) total += TERM(j);                                                                    \
  return total

/* sum_j x_j y_j over at most a block, in double lanes (a gradient's squares would overflow float ones). The one
 * dot product of the float32 einsums (einsum.c: a gradient norm, Adafactor's rms) and of an adam_update that sums
 * its gradient's squares in its own pass (lower/fuse_moments.c, a bf16 run's): both take blocks of
 * MTF_DOT_BLOCK elements in order and add the blocks' sums in a double, so both give the same bits. */
#define MTF_DOT_BLOCK 512
static inline double mtf_block_dot(const float *x, const float *y, int64_t n) {
  double lane[MTF_LANES] = {0};
  int64_t j = 0;
  for (; j + MTF_LANES <= n; j += MTF_LANES)
    for (int k = 0; k < MTF_LANES; k++) lane[k] += (double)x[j + k] * (double)y[j + k];
  double s = 0.0;
  for (int k = 0; k < MTF_LANES; k++) s += lane[k];
  for (; j < n; j++) s += (double)x[j] * (double)y[j];
  return s;
}

static inline double mtf_dot_blocked(const float *x, const float *y, int64_t n) {
  double total = 0.0;
  for (int64_t j = 0; j < n; j += MTF_DOT_BLOCK) total += mtf_block_dot(x + j, y + j, n - j < MTF_DOT_BLOCK ? n - j : MTF_DOT_BLOCK);
  return total;
}

/* Plain sums and sums of squares have double lanes: float lanes would overflow where the mean and the
 * result do not (|x| > 1.8e19 squared, 16 x 3e38 summed), and the norms must stay finite there as they
 * were with double loops. */
static inline double mtf_row_sum(const float *x, int64_t n) {
#define TERM(i) ((double)x[i])
  MTF_ROW_SUM_BODY(n, double, TERM);
#undef TERM
}

/* sum_j (x_j - c)^2 */
static inline double mtf_row_sum_squares(const float *x, int64_t n, double c) {
#define TERM(i) (((double)x[i] - c) * ((double)x[i] - c))
  MTF_ROW_SUM_BODY(n, double, TERM);
#undef TERM
}

/* sum_j e^(x_j - m): with m the row's max every term is at most 1, so float lanes cannot overflow. */
static inline double mtf_row_sum_exp(const float *x, int64_t n, float m) {
#define TERM(i) mtf_expf(x[i] - m)
  MTF_ROW_SUM_BODY(n, float, TERM);
#undef TERM
}

/* out_j = exp(x_j - m), returning the sum mtf_row_sum_exp returns (float lanes), bit for bit. */
static inline double mtf_row_sum_exp_into(const float *x, int64_t n, float m, float *out) {
#define TERM(i) (out[i] = mtf_expf(x[i] - m))
  MTF_ROW_SUM_BODY(n, float, TERM);
#undef TERM
}

/* out_j = exp(x_j - m), returning sum_j out_j summed as mtf_row_sum sums out: the same value as those two
 * passes, in one. */
static inline double mtf_row_exp_sum(const float *x, int64_t n, float m, float *out) {
#define TERM(i) ((double)(out[i] = mtf_expf(x[i] - m)))
  MTF_ROW_SUM_BODY(n, double, TERM);
#undef TERM
}

/* sum_j x_j y_j with float lanes (the attention backward pass's rowsum(dO o), whose terms are bounded). */
static inline double mtf_row_dot(const float *x, const float *y, int64_t n) {
#define TERM(i) (x[i] * y[i])
  MTF_ROW_SUM_BODY(n, float, TERM);
#undef TERM
}

#endif
