/* The NCCL communicator: collectives on GPU memory between ranks that each own one GPU.
 *
 * One ncclComm_t per set of mesh axes (sets whose groups are the same ranks, because the extra axes have
 * size 1, share one), made once at creation with ncclCommInitRank from a unique id that the group's
 * position 0 makes and the host communicator broadcasts over that set's group. Collectives run on the
 * comm stream: an event recorded on the compute stream orders them after the kernels that wrote their
 * input, and the compute stream waits on an event after them. Blocking calls return when the collective
 * is done (so errors surface at the call and the executor's comm time is real); the non-blocking allreduce
 * returns at once and its request holds an event that test/wait query. Buffers hold blocks in member order
 * as comm.h's block forms say: the executor packs them with the backend's device kernels.
 *
 * Stream handles are passed as void * (cudaStream_t) so that this header needs no CUDA include. Built
 * only with CUDA (MTF_HAVE_NCCL); it uses the host communicator (MPI) for ids, the GPU survey and the
 * barrier, never MPI directly. */
#ifndef MTF_COMM_NCCL_COMM_H
#define MTF_COMM_NCCL_COMM_H

#include <stddef.h>

#include "comm/comm.h"

/* The CUDA emulator (tests/cuda_emu) compiles this communicator again, against its NCCL over MPI: under
 * other names, so that a test program can link it next to the real one of a build that has NCCL. */
#ifdef MTF_CUDA_EMU
#define mtf_comm_nccl_gpus_shared mtf_comm_nccl_emu_gpus_shared
#define mtf_comm_nccl_create mtf_comm_nccl_emu_create
#define mtf_comm_nccl_version mtf_comm_nccl_emu_version
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over host. Whether two ranks of the job use one GPU (same host name and PCI bus id of their
 * current device), which NCCL refuses; when so, `why` names the first two ("ranks 0 and 1 both use GPU
 * 0000:1b:00.0 on node n1"). Every rank returns the same answer (or the same error). */
int mtf_comm_nccl_gpus_shared(mtf_comm *host, int *shared, char *why, size_t why_size, mtf_error *err);

/* Collective over host (an MPI communicator of the mesh, which must outlive the result). The current
 * CUDA device is this rank's. Every rank returns MTF_OK or the same error. */
int mtf_comm_nccl_create(mtf_comm *host, void *compute_stream, void *comm_stream, mtf_comm **out, mtf_error *err);

/* "NCCL 2.28.3" (the library's, not the header's). */
void mtf_comm_nccl_version(char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
