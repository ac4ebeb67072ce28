/* The emulator's NCCL (include/nccl.h says what it models): each ncclComm_t is an MPI communicator of the
 * group's members in NCCL rank order; collectives are the MPI calls the MPI communicator (comm/mpi_comm.c)
 * makes for the same work, with the same datatypes and reduction, so the two give the same bits. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "nccl.h"

extern "C" {
#include "comm/dtype.h"
}

struct ncclComm {
  MPI_Comm mpi;
  int rank, nranks;
};

namespace {

char last_error[256];
long calls;
int group_depth;

/* A send or receive queued between ncclGroupStart and ncclGroupEnd. */
struct pending {
  int send;
  void *buf;
  size_t bytes;
  int peer;
  ncclComm_t comm;
};
std::vector<pending> queued;

/* The id: a magic, the world rank of the group's position 0 (the colour that splits the world) and a count. */
struct id_body {
  char magic[8];
  int creator;
  long serial;
};
const char id_magic[8] = "mtfemu1";

ncclResult_t fail(ncclResult_t rc, const char *fmt, const char *detail) {
  snprintf(last_error, sizeof last_error, fmt, detail);
  return rc;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

/* The MPI datatype of a reduction; bfloat16 travels as its bits (reduced by bf16_sum). */
MPI_Datatype reduce_type(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclInt32: return MPI_INT32_T;
    case ncclBfloat16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
  }
}

void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *) {
  mtf_reduce_into(inout, in, (size_t)*len, MTF_BF16, MTF_REDUCE_SUM);
}

MPI_Op reduce_op(ncclRedOp_t op, ncclDataType_t t) {
  if (t == ncclBfloat16) {
    static MPI_Op bf16 = MPI_OP_NULL;
    if (op != ncclSum) return MPI_OP_NULL;
    if (bf16 == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &bf16);
    return bf16;
  }
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

/* NCCL works on device memory only. */
ncclResult_t check_device(const void *p, size_t bytes, const char *what) {
  if (bytes && !mtf_emu_is_device(p, bytes)) return fail(ncclInvalidArgument, "%s: not device memory (cudaMalloc)", what);
  return ncclSuccess;
}

ncclResult_t check_comm(ncclComm_t comm, const char *what) {
  if (!comm) return fail(ncclInvalidArgument, "%s: null communicator", what);
  calls++;
  return ncclSuccess;
}

ncclResult_t mpi_result(int rc, const char *what) {
  return rc == MPI_SUCCESS ? ncclSuccess : fail(ncclSystemError, "%s: the MPI call failed", what);
}

int fits_int(size_t n) { return n <= (size_t)INT32_MAX; }

}  // namespace

extern "C" long mtf_emu_nccl_calls(void) { return calls; }

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (emulated NCCL)";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    default: return "NCCL error (emulated NCCL)";
  }
}

const char *ncclGetLastError(ncclComm_t) { return last_error; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static long serial;
  id_body body;
  memcpy(body.magic, id_magic, sizeof body.magic);
  body.creator = world_rank();
  body.serial = ++serial;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &body, sizeof body);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  *comm = NULL;
  const char *inject = getenv("MTF_EMU_NCCL_FAIL_INIT");
  if (inject && inject[0] && atoi(inject) == world_rank())
    return fail(ncclSystemError, "ncclCommInitRank: %s", "cannot reach the group's peers (MTF_EMU_NCCL_FAIL_INIT)");
  id_body body;
  memcpy(&body, id.internal, sizeof body);
  if (memcmp(body.magic, id_magic, sizeof body.magic) != 0 || body.creator < 0)
    return fail(ncclInvalidArgument, "ncclCommInitRank: %s", "the id was not made by ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: %s", "rank outside [0, nranks)");
  MPI_Comm split;
  if (MPI_Comm_split(MPI_COMM_WORLD, body.creator, rank, &split) != MPI_SUCCESS)
    return fail(ncclSystemError, "ncclCommInitRank: %s", "MPI_Comm_split failed");
  int size = 0;
  MPI_Comm_size(split, &size);
  if (size != nranks) {
    MPI_Comm_free(&split);
    return fail(ncclInvalidUsage, "ncclCommInitRank: %s", "the ranks given this id are not nranks");
  }
  *comm = new ncclComm{split, rank, nranks};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

/* The group's sends and receives, posted together as NCCL launches them: no order between them deadlocks. */
ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: %s", "no ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<MPI_Request> requests(queued.size());
  int rc = MPI_SUCCESS;
  for (size_t i = 0; i < queued.size() && rc == MPI_SUCCESS; i++) {
    const pending &p = queued[i];
    rc = p.send ? MPI_Isend(p.buf, (int)p.bytes, MPI_BYTE, p.peer, 0, p.comm->mpi, &requests[i])
                : MPI_Irecv(p.buf, (int)p.bytes, MPI_BYTE, p.peer, 0, p.comm->mpi, &requests[i]);
    if (rc != MPI_SUCCESS) requests.resize(i);
  }
  if (!requests.empty()) {
    int waited = MPI_Waitall((int)requests.size(), requests.data(), MPI_STATUSES_IGNORE);
    if (rc == MPI_SUCCESS) rc = waited;
  }
  queued.clear();
  return mpi_result(rc, "ncclGroupEnd (sends and receives)");
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  ncclResult_t rc = check_comm(comm, "ncclAllReduce");
  size_t bytes = count * type_size(type);
  if (rc == ncclSuccess) rc = check_device(send, bytes, "ncclAllReduce send buffer");
  if (rc == ncclSuccess) rc = check_device(recv, bytes, "ncclAllReduce receive buffer");
  if (rc != ncclSuccess) return rc;
  MPI_Datatype t = reduce_type(type);
  MPI_Op o = reduce_op(op, type);
  if (t == MPI_DATATYPE_NULL || o == MPI_OP_NULL || !fits_int(count))
    return fail(ncclInvalidArgument, "ncclAllReduce: %s", "datatype, operation or count the emulator does not model");
  return mpi_result(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, o, comm->mpi),
                    "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  ncclResult_t rc = check_comm(comm, "ncclBroadcast");
  size_t bytes = count * type_size(type);
  if (rc == ncclSuccess) rc = check_device(recv, bytes, "ncclBroadcast buffer");
  if (rc != ncclSuccess) return rc;
  if (!fits_int(bytes)) return fail(ncclInvalidArgument, "ncclBroadcast: %s", "count too large for the emulator");
  if (comm->rank == root && send != recv) memcpy(recv, send, bytes);
  return mpi_result(MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, comm->mpi), "ncclBroadcast");
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  ncclResult_t rc = check_comm(comm, "ncclAllGather");
  size_t bytes = send_count * type_size(type);
  if (rc == ncclSuccess) rc = check_device(send, bytes, "ncclAllGather send buffer");
  if (rc == ncclSuccess) rc = check_device(recv, bytes * (size_t)comm->nranks, "ncclAllGather receive buffer");
  if (rc != ncclSuccess) return rc;
  if (!fits_int(bytes)) return fail(ncclInvalidArgument, "ncclAllGather: %s", "count too large for the emulator");
  return mpi_result(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->mpi), "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t) {
  ncclResult_t rc = check_comm(comm, "ncclReduceScatter");
  size_t bytes = recv_count * type_size(type);
  if (rc == ncclSuccess) rc = check_device(send, bytes * (size_t)comm->nranks, "ncclReduceScatter send buffer");
  if (rc == ncclSuccess) rc = check_device(recv, bytes, "ncclReduceScatter receive buffer");
  if (rc != ncclSuccess) return rc;
  MPI_Datatype t = reduce_type(type);
  MPI_Op o = reduce_op(op, type);
  if (t == MPI_DATATYPE_NULL || o == MPI_OP_NULL || !fits_int(recv_count))
    return fail(ncclInvalidArgument, "ncclReduceScatter: %s", "datatype, operation or count the emulator does not model");
  return mpi_result(MPI_Reduce_scatter_block(send, recv, (int)recv_count, t, o, comm->mpi), "ncclReduceScatter");
}

static ncclResult_t point_to_point(int send, void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                   const char *what) {
  ncclResult_t rc = check_comm(comm, what);
  size_t bytes = count * type_size(type);
  if (rc == ncclSuccess) rc = check_device(buf, bytes, what);
  if (rc != ncclSuccess) return rc;
  if (peer < 0 || peer >= comm->nranks || !fits_int(bytes))
    return fail(ncclInvalidArgument, "%s: peer outside the communicator, or count too large", what);
  queued.push_back(pending{send, buf, bytes, peer, comm});
  if (group_depth > 0) return ncclSuccess;
  group_depth = 1; /* outside a group: this one operation, at once */
  return ncclGroupEnd();
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  return point_to_point(1, const_cast<void *>(send), count, type, peer, comm, "ncclSend");
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  return point_to_point(0, recv, count, type, peer, comm, "ncclRecv");
}
