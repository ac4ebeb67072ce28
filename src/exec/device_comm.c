#include "exec/device_comm.h"

#include "comm/staged_comm.h"

static int download(void *ctx, void *host_dst, const void *device_src, size_t bytes) {
  mtf_backend *b = ctx;
  return b->mem->download(b, host_dst, device_src, bytes);
}

static int upload(void *ctx, void *device_dst, const void *host_src, size_t bytes) {
  mtf_backend *b = ctx;
  return b->mem->upload(b, device_dst, host_src, bytes);
}

int mtf_backend_staged_comm(mtf_backend *b, mtf_comm *host, mtf_comm **out, mtf_error *err) {
  mtf_staging staging = {.ctx = b, .to_host = download, .to_device = upload};
  return mtf_comm_staged_create(host, &staging, out, err);
}

int mtf_backend_step_comm(mtf_backend *b, mtf_comm *host, mtf_comm_mode mode, mtf_comm **out, int *owned,
                          mtf_error *err) {
  *out = host;
  *owned = 0;
  if (mode != MTF_COMM_AUTO && mode != MTF_COMM_NCCL && mode != MTF_COMM_MPI)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.comm: %d is not a mode (auto, nccl or mpi)", (int)mode);
  if (!b->device_comm) {
    if (mode == MTF_COMM_NCCL)
      return mtf_error_set(err, MTF_ERR_INVALID, "backend.comm: nccl needs device memory (backend.kind: cuda); backend "
                           "'%s' computes in host memory and its collectives are MPI's: use auto or mpi", b->name);
    return MTF_OK;
  }
  MTF_CHECK(b->device_comm(b, host, mode, out, err));
  *owned = *out != host;
  return MTF_OK;
}
