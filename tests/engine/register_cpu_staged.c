/* Linked into a test program, this makes the kind "cpu-staged" exist before main runs: the cpu backend
 * whose collective steps go through the staged communicator (exec/device_comm.c, what a cuda backend uses
 * for ranks sharing a GPU and backend.comm: mpi) instead of plain MPI on its memory. The backend
 * conformance test on it runs every op's split layouts through the executor's staged collectives. */
#include <string.h>

#include "comm/comm.h"
#include "exec/device_comm.h"

static int staged_device_comm(mtf_backend *b, struct mtf_comm *host, mtf_comm_mode mode, struct mtf_comm **out,
                              mtf_error *err) {
  if (mode == MTF_COMM_NCCL)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.comm: nccl, but backend 'cpu-staged' has no GPU");
  return mtf_backend_staged_comm(b, host, out, err);
}

static int cpu_staged_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  MTF_CHECK(mtf_cpu_backend_create(options->threads, out, err));
  (*out)->name = "cpu-staged";
  (*out)->device_comm = staged_device_comm;
  return MTF_OK;
}

__attribute__((constructor)) static void register_cpu_staged(void) {
  /* the cpu backend's kernels and abilities, its collectives as a device backend's */
  mtf_backend_caps caps = *mtf_backend_capabilities("cpu");
  caps.kind = "cpu-staged";
  caps.host_memory = 0;
  mtf_backend_register(&caps, cpu_staged_create);
}
