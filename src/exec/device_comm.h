/* The communicator a session's collective steps use on its backend's memory (backend.comm).
 *
 * A backend whose memory the host addresses (cpu) uses the job's host communicator directly. A device
 * backend (cuda) supplies `device_comm`: NCCL where every rank has a GPU of its own, else, or with
 * `backend.comm: mpi`, the host communicator through host staging (comm/staged_comm.h) with the
 * backend's download and upload as the copies. */
#ifndef MTF_EXEC_DEVICE_COMM_H
#define MTF_EXEC_DEVICE_COMM_H

#include "comm/comm.h"
#include "comm/comm_mode.h"
#include "exec/backend.h"

/* host, staged through b's memory copies: collectives on b's memory run by host's (not collective). */
int mtf_backend_staged_comm(mtf_backend *b, mtf_comm *host, mtf_comm **out, mtf_error *err);

/* The communicator for collectives on b's memory, for backend.comm `mode`. Collective over host when b
 * has a device communicator (every rank of the mesh calls it in the same order). *owned = 1 when the
 * caller must destroy *out; otherwise *out is host. */
int mtf_backend_step_comm(mtf_backend *b, mtf_comm *host, mtf_comm_mode mode, mtf_comm **out, int *owned,
                          mtf_error *err);

#endif
