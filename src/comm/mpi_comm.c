#include "comm/mpi_comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mpi_impl {
  MPI_Comm world;                            /* our duplicate of the caller's communicator */
  MPI_Comm groups[1u << MTF_MAX_MESH_AXES];  /* indexed by axis set */
} mpi_impl;

static mpi_impl *impl_of(const mtf_comm *comm) { return (mpi_impl *)comm->impl; }

MPI_Comm mtf_comm_mpi_group(const mtf_comm *comm, mtf_axis_set axes) { return impl_of(comm)->groups[axes]; }

static const mtf_comm_ops mpi_ops;

MPI_Comm mtf_comm_mpi_world(const mtf_comm *comm) {
  return comm && comm->ops == &mpi_ops ? impl_of(comm)->world : MPI_COMM_NULL;
}

int mtf_comm_mpi_sum_u64(const mtf_comm *comm, uint64_t *values, int n) {
  MPI_Comm world = mtf_comm_mpi_world(comm);
  if (world == MPI_COMM_NULL) return 0;
  return MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_UINT64_T, MPI_SUM, world) == MPI_SUCCESS ? 0 : -1;
}

static int mpi_failed(int mpi_rc, const char *call, mtf_error *err) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(mpi_rc, text, &len);
  return mtf_error_set(err, MTF_ERR_COMM, "%s failed: %s", call, text);
}

#define MPI_TRY(call)                                                                                       \
  do {                                                                                                      \
    int mpi_rc_ = (call);                                                                                   \
    if (mpi_rc_ != MPI_SUCCESS) return mpi_failed(mpi_rc_, #call, err);                                    \
  } while (0)

static MPI_Datatype mpi_type(mtf_dtype dtype) {
  switch (dtype) {
    case MTF_F32: return MPI_FLOAT;
    case MTF_F64: return MPI_DOUBLE;
    case MTF_I32: return MPI_INT32_T;
    case MTF_BF16: return MPI_UINT16_T; /* moved as bits; sums through bf16_sum_op below */
  }
  return MPI_DATATYPE_NULL;
}

/* A bfloat16 sum (backend.grad_reduce bf16): each pair added in float and rounded back, as the ring's hops do
 * on every transport. MPI_Op_create is local, so the op is made at first use. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  mtf_reduce_into(inout, in, (size_t)*len, MTF_BF16, MTF_REDUCE_SUM);
}

static MPI_Op bf16_sum_op(void) {
  static MPI_Op op = MPI_OP_NULL;
  if (op == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &op);
  return op;
}

static MPI_Op mpi_op_for(mtf_reduce_op op, mtf_dtype dtype);

static MPI_Op mpi_op(mtf_reduce_op op) {
  switch (op) {
    case MTF_REDUCE_SUM: return MPI_SUM;
    case MTF_REDUCE_MAX: return MPI_MAX;
    case MTF_REDUCE_MIN: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

/* comm.c lets only sums of bfloat16 through. */
static MPI_Op mpi_op_for(mtf_reduce_op op, mtf_dtype dtype) { return dtype == MTF_BF16 ? bf16_sum_op() : mpi_op(op); }

/* MPI counts are ints; larger messages need chunking, which no caller needs yet. */
static int int_count(size_t count, const char *what, mtf_error *err) {
  if (count > (size_t)INT_MAX)
    return mtf_error_set(err, MTF_ERR_COMM, "%s of %zu elements exceeds MPI's int count limit (%d)", what, count,
                         INT_MAX);
  return MTF_OK;
}

static int mpi_allreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                         mtf_reduce_op op, mtf_error *err) {
  MTF_CHECK(int_count(count, "allreduce", err));
  const void *send = in == out ? MPI_IN_PLACE : in;
  MPI_TRY(MPI_Allreduce(send, out, (int)count, mpi_type(dtype), mpi_op_for(op, dtype), impl_of(comm)->groups[axes]));
  return MTF_OK;
}

_Static_assert(sizeof(MPI_Request) <= sizeof(((mtf_comm_request *)0)->handle), "an MPI_Request fits a request's handle");

static MPI_Request *request_of(mtf_comm_request *req) { return (MPI_Request *)(void *)req->handle.bytes; }

static int mpi_iallreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                          mtf_reduce_op op, mtf_comm_request *req, mtf_error *err) {
  MTF_CHECK(int_count(count, "allreduce", err));
  const void *send = in == out ? MPI_IN_PLACE : in;
  MPI_TRY(MPI_Iallreduce(send, out, (int)count, mpi_type(dtype), mpi_op_for(op, dtype), impl_of(comm)->groups[axes],
                         request_of(req)));
  req->active = 1;
  return MTF_OK;
}

/* MPI sets the request to MPI_REQUEST_NULL when it completes. Errors of a non-blocking collective come
 * back from Test/Wait with the communicator's error handler (MPI_ERRORS_RETURN, inherited from world). */
static int mpi_test(mtf_comm *comm, mtf_comm_request *req, int *done, mtf_error *err) {
  (void)comm;
  int flag = 0;
  MPI_TRY(MPI_Test(request_of(req), &flag, MPI_STATUS_IGNORE));
  *done = flag != 0;
  if (flag) req->active = 0;
  return MTF_OK;
}

static int mpi_wait(mtf_comm *comm, mtf_comm_request *req, mtf_error *err) {
  (void)comm;
  req->active = 0;
  MPI_TRY(MPI_Wait(request_of(req), MPI_STATUS_IGNORE));
  return MTF_OK;
}

static int mpi_allgather_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out_blocks,
                                size_t block_bytes, mtf_error *err) {
  MTF_CHECK(int_count(block_bytes, "allgather block (bytes)", err));
  MPI_TRY(MPI_Allgather(in, (int)block_bytes, MPI_BYTE, out_blocks, (int)block_bytes, MPI_BYTE,
                        impl_of(comm)->groups[axes]));
  return MTF_OK;
}

static int mpi_reduce_scatter_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out,
                                     size_t block_count, mtf_dtype dtype, mtf_reduce_op op, mtf_error *err) {
  MTF_CHECK(int_count(block_count, "reduce_scatter block", err));
  MPI_TRY(MPI_Reduce_scatter_block(in_blocks, out, (int)block_count, mpi_type(dtype), mpi_op_for(op, dtype),
                                   impl_of(comm)->groups[axes]));
  return MTF_OK;
}

static int mpi_alltoall_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out_blocks,
                               size_t block_bytes, mtf_error *err) {
  MTF_CHECK(int_count(block_bytes, "alltoall block (bytes)", err));
  MPI_TRY(MPI_Alltoall(in_blocks, (int)block_bytes, MPI_BYTE, out_blocks, (int)block_bytes, MPI_BYTE,
                       impl_of(comm)->groups[axes]));
  return MTF_OK;
}

static int mpi_sendrecv(mtf_comm *comm, int mesh_axis, const void *send, int dest, void *recv, int src, size_t bytes,
                        mtf_error *err) {
  MTF_CHECK(int_count(bytes, "permute (bytes)", err));
  /* On the one-axis group, the group position along that axis is the rank. */
  MPI_Comm axis_comm = impl_of(comm)->groups[1u << mesh_axis];
  MPI_TRY(MPI_Sendrecv(send, dest >= 0 ? (int)bytes : 0, MPI_BYTE, dest >= 0 ? dest : MPI_PROC_NULL, 0, recv,
                       src >= 0 ? (int)bytes : 0, MPI_BYTE, src >= 0 ? src : MPI_PROC_NULL, 0, axis_comm,
                       MPI_STATUS_IGNORE));
  return MTF_OK;
}

static int mpi_broadcast(mtf_comm *comm, mtf_axis_set axes, void *buf, size_t bytes, int root, mtf_error *err) {
  MTF_CHECK(int_count(bytes, "broadcast (bytes)", err));
  MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, impl_of(comm)->groups[axes]));
  return MTF_OK;
}

static int mpi_barrier(mtf_comm *comm, mtf_error *err) {
  MPI_TRY(MPI_Barrier(impl_of(comm)->world));
  return MTF_OK;
}

static void mpi_destroy(mtf_comm *comm) {
  mpi_impl *impl = impl_of(comm);
  unsigned subsets = 1u << comm->mesh.rank;
  for (unsigned s = 0; s < subsets; s++)
    if (impl->groups[s] != MPI_COMM_NULL) MPI_Comm_free(&impl->groups[s]);
  if (impl->world != MPI_COMM_NULL) MPI_Comm_free(&impl->world);
  free(impl);
  free(comm);
}

static const mtf_comm_ops mpi_ops = {
    .name = "mpi",
    .allreduce = mpi_allreduce,
    .allgather_blocks = mpi_allgather_blocks,
    .reduce_scatter_blocks = mpi_reduce_scatter_blocks,
    .alltoall_blocks = mpi_alltoall_blocks,
    .sendrecv = mpi_sendrecv,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .destroy = mpi_destroy,
    .iallreduce = mpi_iallreduce,
    .test = mpi_test,
    .wait = mpi_wait,
};

int mtf_comm_mpi_create(MPI_Comm world, const mtf_shape *mesh, mtf_comm **out, mtf_error *err) {
  *out = NULL;
  MTF_CHECK(mtf_mesh_validate(mesh, err));
  int world_size = 0, world_rank = 0;
  MPI_TRY(MPI_Comm_size(world, &world_size));
  MPI_TRY(MPI_Comm_rank(world, &world_rank));
  int mesh_size = mtf_mesh_size(mesh);
  if (world_size != mesh_size) {
    char mesh_text[MTF_SHAPE_STR_MAX];
    mtf_shape_format(mesh, mesh_text, sizeof mesh_text);
    return mtf_error_set(err, MTF_ERR_MESH,
                         "mesh %s needs %d processes but this job has %d: launch it with %d ranks "
                         "(mpiexec -n %d, or srun -n %d), or choose a mesh whose axis sizes multiply to %d",
                         mesh_text, mesh_size, world_size, mesh_size, mesh_size, mesh_size, world_size);
  }

  mpi_impl *impl = calloc(1, sizeof *impl);
  mtf_comm *comm = calloc(1, sizeof *comm);
  if (!impl || !comm) {
    free(impl);
    free(comm);
    return mtf_error_set(err, MTF_ERR_NOMEM, "cannot allocate the communicator");
  }
  for (unsigned s = 0; s < (1u << MTF_MAX_MESH_AXES); s++) impl->groups[s] = MPI_COMM_NULL;
  impl->world = MPI_COMM_NULL;
  mtf_comm_init_base(comm, &mpi_ops, mesh, world_rank, impl);

  int rc = MTF_OK;
  int mpi_rc = MPI_Comm_dup(world, &impl->world);
  if (mpi_rc != MPI_SUCCESS) rc = mpi_failed(mpi_rc, "MPI_Comm_dup", err);
  /* Errors come back as codes so they reach the caller with context, not as an abort inside MPI. */
  if (rc == MTF_OK) MPI_Comm_set_errhandler(impl->world, MPI_ERRORS_RETURN);
  unsigned subsets = 1u << mesh->rank;
  for (unsigned s = 0; s < subsets && rc == MTF_OK; s++) {
    int color = mtf_mesh_group_index(mesh, s, comm->coord);
    int key = mtf_mesh_group_position(mesh, s, comm->coord);
    mpi_rc = MPI_Comm_split(impl->world, color, key, &impl->groups[s]);
    if (mpi_rc != MPI_SUCCESS) rc = mpi_failed(mpi_rc, "MPI_Comm_split", err);
  }
  if (rc != MTF_OK) {
    mpi_destroy(comm);
    return rc;
  }
  *out = comm;
  return MTF_OK;
}
