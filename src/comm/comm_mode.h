/* backend.comm: which communicator the collectives on a backend's memory use (exec/device_comm.h). Its own
 * header so the config (which reads it as an enum) and the session options share it. */
#ifndef MTF_COMM_COMM_MODE_H
#define MTF_COMM_COMM_MODE_H

typedef enum mtf_comm_mode {
  MTF_COMM_AUTO = 0, /* NCCL where every rank has a GPU of its own, else MPI through host staging */
  MTF_COMM_NCCL,     /* NCCL, or an error saying why not */
  MTF_COMM_MPI       /* MPI (through host staging on device memory) */
} mtf_comm_mode;

/* "auto", "nccl", "mpi"; "?" for a value outside the enum. */
static inline const char *mtf_comm_mode_name(mtf_comm_mode mode) {
  return mode == MTF_COMM_AUTO ? "auto" : mode == MTF_COMM_NCCL ? "nccl" : mode == MTF_COMM_MPI ? "mpi" : "?";
}

#endif
