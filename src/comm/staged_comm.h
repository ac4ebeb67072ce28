/* Collectives on memory the host cannot address (a GPU's), run by a host communicator through staging:
 * each call copies its input into a host buffer, runs the host communicator's collective there, and copies
 * the result back. It serves ranks that share one GPU (NCCL refuses two ranks on one device) and
 * `backend.comm: mpi`, so multi-rank runs work on a single GPU. src/comm knows no backend: the two copies
 * are callbacks (the executor passes its backend's download and upload, exec/device_comm.c).
 *
 * Host staging buffers grow to the largest call seen and are then reused: after the first step nothing is
 * allocated. A non-blocking allreduce stages into a buffer of its own until it is waited for. */
#ifndef MTF_COMM_STAGED_COMM_H
#define MTF_COMM_STAGED_COMM_H

#include "comm/comm.h"

typedef struct mtf_staging {
  void *ctx;
  /* Both return MTF_OK or an error code; they must be complete when they return (synchronous copies). */
  int (*to_host)(void *ctx, void *host_dst, const void *device_src, size_t bytes);
  int (*to_device)(void *ctx, void *device_dst, const void *host_src, size_t bytes);
} mtf_staging;

/* A communicator with host's mesh and rank whose buffers are device memory reached through `staging`.
 * host must outlive it (it is not destroyed with it). Not collective: no communicator is created. */
int mtf_comm_staged_create(mtf_comm *host, const mtf_staging *staging, mtf_comm **out, mtf_error *err);

#endif
