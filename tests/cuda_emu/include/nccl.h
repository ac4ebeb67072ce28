/* The CUDA emulator's nccl.h (tests/cuda_emu): version and error strings only. The emulated backend's
 * collectives go through the MPI communicator on (host) memory; a NCCL call here answers that NCCL is not
 * emulated, so code that needs it falls back or reports it. */
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

inline ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
inline const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "NCCL is not emulated (tests/cuda_emu): use the MPI communicator";
}
inline const char *ncclGetLastError(ncclComm_t) { return ncclGetErrorString(ncclInvalidUsage); }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t *, void *) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
inline ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }
inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
inline ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                  cudaStream_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
inline ncclResult_t ncclAllGather(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
inline ncclResult_t ncclReduceScatter(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                      cudaStream_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
inline ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }

#endif
