/* The CUDA backend's kernel table: one registration call per kernel file (backend.cu calls this). */
#include "exec/cuda/cuda_kernel.h"

MTF_CUDA_BEGIN

/* Each k_*.cu / einsum.cu fills the entries of the op kinds it implements. */
void mtf_cuda_register_einsum(mtf_kernel_fn *kernels); /* einsum.cu */
/* -- the op kernels' files (k_*.cu) -- */

void mtf_cuda_register_kernels(mtf_kernel_fn *kernels) {
  (void)kernels;
  /* -- the op kernels' files (k_*.cu) -- */
}

MTF_CUDA_END
