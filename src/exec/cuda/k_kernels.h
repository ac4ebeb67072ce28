/* The CUDA kernels of the op table (k_*.cu), as register.cu and einsum.cu see them: one registration call
 * per kernel file, and the device routines other CUDA files reuse. C++ linkage in the backend's namespace
 * (cuda_kernel.h). */
#ifndef MTF_EXEC_CUDA_K_KERNELS_H
#define MTF_EXEC_CUDA_K_KERNELS_H

#include "exec/cuda/cuda_kernel.h"

MTF_CUDA_BEGIN

void mtf_cuda_register_elementwise(mtf_kernel_fn *kernels); /* k_elementwise.cu */
void mtf_cuda_register_reduce(mtf_kernel_fn *kernels);      /* k_reduce.cu: reduce_max */
void mtf_cuda_register_fused(mtf_kernel_fn *kernels);       /* k_fused.cu */
void mtf_cuda_register_fused_grad(mtf_kernel_fn *kernels);  /* k_fused_grad.cu */
void mtf_cuda_register_optimizer(mtf_kernel_fn *kernels);   /* k_optimizer.cu */
void mtf_cuda_register_select(mtf_kernel_fn *kernels);      /* k_select.cu: top_k, top_k_indices, cumsum */
void mtf_cuda_register_write_at(mtf_kernel_fn *kernels);    /* k_write_at.cu */
void mtf_cuda_register_attention(mtf_kernel_fn *kernels);   /* k_attention.cu: attention and its gradients */

/* out = the sum of `in` over its dims absent from out, or a transposed copy (dims matched by name), on the
 * compute stream (k_reduce.cu); out float32, or rounded to bfloat16 where out_bf16. */
int mtf_cuda_reduce_into(mtf_backend *b, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                         void *out, int out_bf16);
/* out[0, n) = value on the compute stream (k_elementwise.cu). */
int mtf_cuda_k_fill(mtf_backend *b, float *out, float value, int64_t n);
/* n elements of `in` (dtype from) into out as dtype to: float32 <-> bfloat16 by core/bf16.h's rounding, or a
 * copy when the dtypes are the same, on the compute stream (k_elementwise.cu; the cast op's kernel). */
int mtf_cuda_k_cast(mtf_backend *b, const void *in, mtf_dtype from, void *out, mtf_dtype to, int64_t n);

MTF_CUDA_END

#endif
