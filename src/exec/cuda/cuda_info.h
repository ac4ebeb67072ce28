/* What the CUDA side of this build can see: runtime, cuBLAS and NCCL versions and the visible devices.
 * Safe to call on a machine without a GPU or driver (it then says so). */
#ifndef MTF_EXEC_CUDA_INFO_H
#define MTF_EXEC_CUDA_INFO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void mtf_cuda_describe(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
