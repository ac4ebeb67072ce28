/* backend.comm on the cuda backend: which communicator the executor's collectives on device memory use.
 * backend.cu sets b->device_comm to mtf_cuda_device_comm. */
#ifndef MTF_EXEC_CUDA_CUDA_COMM_H
#define MTF_EXEC_CUDA_CUDA_COMM_H

#include "exec/cuda/cuda_kernel.h"

MTF_CUDA_BEGIN

/* Collective over host. mode "nccl": the NCCL communicator on the context's compute and comm streams
 * (an error naming the two ranks and the GPU when ranks share one, which NCCL refuses); "mpi": host
 * through host staging (the backend's download/upload); "auto": nccl unless ranks share a GPU or the build
 * has no NCCL (the emulator), then mpi, with a note on rank 0 when a GPU is shared. */
int mtf_cuda_device_comm(mtf_backend *b, mtf_comm *host, mtf_comm_mode mode, mtf_comm **out, mtf_error *err);

MTF_CUDA_END

#endif
