/* The CPU backend's parts: host memory, OpenBLAS, one kernel per op of the table (kernels.c for the
 * elementwise ops, reduce.c for sums, maxima and transposes, einsum.c, fused.c for the fused ops and the
 * embedding). Kernels run on b->threads threads (parallel.h) with fastmath.h's exp and tanh. */
#ifndef MTF_EXEC_CPU_CPU_H
#define MTF_EXEC_CPU_CPU_H

#include <math.h>

#include "exec/backend.h"

void mtf_cpu_register_elementwise(mtf_kernel_fn *kernels);
void mtf_cpu_register_einsum(mtf_kernel_fn *kernels);
void mtf_cpu_register_fused(mtf_kernel_fn *kernels);
void mtf_cpu_register_fused_grad(mtf_kernel_fn *kernels); /* fused_grad.c */
void mtf_cpu_register_optimizer(mtf_kernel_fn *kernels); /* optimizer.c */
void mtf_cpu_register_select(mtf_kernel_fn *kernels); /* select.c */
void mtf_cpu_register_write_at(mtf_kernel_fn *kernels); /* write_at.c */

/* One row's cross-entropy from its logsumexp, the label's logit and (label smoothing) the sum of its logits:
 * the forward kernel's formula (fused.c), which a merged gradient (fused_grad.c) uses for the same bits. */
float mtf_cpu_xent_value(const struct mtf_step *st, double lse, double target, double sum_x);
void mtf_cpu_fill(float value, int64_t n, float *out);
void mtf_cpu_fill_parallel(int threads, float value, int64_t n, float *out);
void mtf_cpu_slice(const mtf_shape *in_shape, const char *in, const mtf_shape *out_shape, const int64_t *offsets,
                   char *out, size_t elem);
/* out = the sum (the max) of `in` over its dims absent from out, or a transposed copy (reduce.c), on up to
 * `threads` threads. The max skips NaN elements (-inf if all are). */
void mtf_cpu_reduce_into(int threads, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                         float *out);
void mtf_cpu_reduce_max(int threads, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                        float *out);

/* Element i of an index tensor held as int32 or as floats with integer values. */
static inline int64_t mtf_cpu_index(const void *ids, mtf_dtype dtype, int64_t i) {
  return dtype == MTF_I32 ? (int64_t)((const int32_t *)ids)[i] : (int64_t)lrintf(((const float *)ids)[i]);
}

#endif
