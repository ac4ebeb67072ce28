/* The CUDA backend's kernel table: one registration call per kernel file (backend.cu calls this). */
#include "exec/cuda/cuda_kernel.h"
#include "exec/cuda/k_kernels.h"

MTF_CUDA_BEGIN

/* Each k_*.cu / einsum.cu fills the entries of the op kinds it implements. */
void mtf_cuda_register_einsum(mtf_kernel_fn *kernels); /* einsum.cu */
/* -- the op kernels' files (k_*.cu) -- */

void mtf_cuda_register_kernels(mtf_kernel_fn *kernels) {
  mtf_cuda_register_einsum(kernels);
  /* -- the op kernels' files (k_*.cu) -- */
  mtf_cuda_register_elementwise(kernels);
  mtf_cuda_register_reduce(kernels);
  mtf_cuda_register_fused(kernels);
  mtf_cuda_register_fused_grad(kernels);
  mtf_cuda_register_optimizer(kernels);
  mtf_cuda_register_select(kernels);
  mtf_cuda_register_write_at(kernels);
  mtf_cuda_register_attention(kernels);
}

MTF_CUDA_END
