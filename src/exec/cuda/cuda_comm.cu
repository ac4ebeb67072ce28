#include "exec/cuda/cuda_comm.h"

#include <stdio.h>
#include <string.h>

extern "C" {
#include "exec/device_comm.h"
}
/* The emulator has a NCCL too (over MPI, tests/cuda_emu/emu_nccl.cpp), so this path runs in CI. */
#if defined(MTF_HAVE_NCCL) || defined(MTF_CUDA_EMU)
#define MTF_CUDA_COMM_NCCL 1
#include "comm/nccl_comm.h"
#endif

MTF_CUDA_BEGIN

int mtf_cuda_device_comm(mtf_backend *b, mtf_comm *host, mtf_comm_mode mode, mtf_comm **out, mtf_error *err) {
  *out = NULL;
  int nccl_required = mode == MTF_COMM_NCCL;
  if (mode != MTF_COMM_MPI) {
#ifdef MTF_CUDA_COMM_NCCL
    /* Collective and answered alike on every rank, so all take the same branch. */
    int shared = 0;
    char why[320];
    MTF_CHECK(mtf_comm_nccl_gpus_shared(host, &shared, why, sizeof why, err));
    if (!shared) {
      mtf_cuda_context *ctx = mtf_cuda_ctx(b);
      return mtf_comm_nccl_create(host, (void *)ctx->compute, (void *)ctx->comm, out, err);
    }
    if (nccl_required)
      return mtf_error_set(err, MTF_ERR_INVALID, "backend.comm: nccl, but %s: NCCL needs a GPU of its own for every "
                           "rank; give each rank its own GPU (srun --gpus-per-task=1, backend.device), or set "
                           "backend.comm: mpi (or auto) to stage collectives through host memory", why);
    static int noted; /* once per process: a job makes a device communicator per backend instance */
    if (host->rank == 0 && !noted++)
      fprintf(stderr, "mtf: backend.comm auto: %s; collectives go through MPI with device-host staging (NCCL "
              "needs a GPU per rank)\n", why);
#else
    if (nccl_required)
      return mtf_error_set(err, MTF_ERR_INVALID, "backend.comm: nccl, but this build of the cuda backend (built "
                           "without MTF_HAVE_NCCL) has no NCCL; use backend.comm: auto or mpi");
#endif
  }
  return mtf_backend_staged_comm(b, host, out, err);
}

MTF_CUDA_END
