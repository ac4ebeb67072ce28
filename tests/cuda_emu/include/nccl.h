/* The CUDA emulator's nccl.h (tests/cuda_emu): NCCL's calls that comm/nccl_comm.c makes, carried out over MPI
 * (emu_nccl.cpp) on the emulator's device memory, which is host memory. So the NCCL communicator's own code
 * runs in CI on 2 and 4 ranks: id exchange, one communicator per set of mesh axes, every collective, group
 * semantics of send/receive, and a rank failing in ncclCommInitRank.
 *
 * What it models, and what it does not:
 *  - Collectives are synchronous, as the emulator's streams are (the stream argument is accepted and unused).
 *  - Buffers must be device memory (cudaMalloc'd), as NCCL needs: host pointers are ncclInvalidArgument.
 *  - A communicator is an MPI communicator made by ncclCommInitRank with MPI_Comm_split over MPI_COMM_WORLD,
 *    which is collective over the whole job: every rank of the job makes its communicators in the same
 *    order, one group per call (nccl_comm.c's creation walks the axis sets in one order on every rank). Real
 *    NCCL needs only the group's members.
 *  - Sums of bfloat16 add each pair in float and round, as the MPI communicator's (mtf_reduce_into), so both
 *    give the same bits; sums of float, double and int are MPI's.
 *  - MTF_EMU_NCCL_FAIL_INIT=R (a world rank) makes that rank's every ncclCommInitRank fail with
 *    ncclSystemError, without joining, as a NCCL that cannot reach its peers would; its peers then wait in
 *    theirs, as real NCCL's do.
 * C++ linkage, as the emulated runtime's (cuda_runtime.h): a program may also link the real NCCL. */
#ifndef MTF_CUDA_EMU_NCCL_H
#define MTF_CUDA_EMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 0
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE 20000
#define NCCL_UNIQUE_ID_BYTES 128

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;
typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef enum { ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
               ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8,
               ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

ncclResult_t ncclGetVersion(int *version);
const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);

/* emulator-only: collective calls made through communicators since the process started (tests check that a
 * run's collectives went through NCCL, not the staged path); C linkage, for the C test programs */
extern "C" long mtf_emu_nccl_calls(void);

#endif
