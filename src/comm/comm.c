#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

#include "comm/tensor_pack.h"

const char *mtf_collective_name(mtf_collective_kind kind) {
  static const char *names[MTF_COLL_KINDS] = {"allreduce", "allgather", "reduce_scatter",
                                              "alltoall",  "permute",   "broadcast"};
  return kind < MTF_COLL_KINDS ? names[kind] : "?";
}

double mtf_collective_bytes_sent(mtf_collective_kind kind, int group_size, double bytes) {
  double g = group_size;
  switch (kind) {
    case MTF_COLL_ALLREDUCE: return 2.0 * (g - 1) / g * bytes;
    case MTF_COLL_ALLGATHER: return (g - 1) * bytes;
    case MTF_COLL_REDUCE_SCATTER:
    case MTF_COLL_ALLTOALL: return (g - 1) / g * bytes;
    default: return bytes;
  }
}

void mtf_comm_init_base(mtf_comm *comm, const mtf_comm_ops *ops, const mtf_shape *mesh, int rank, void *impl) {
  memset(comm, 0, sizeof *comm);
  comm->ops = ops;
  comm->mesh = *mesh;
  comm->rank = rank;
  comm->size = mtf_mesh_size(mesh);
  mtf_mesh_rank_to_coord(mesh, rank, comm->coord);
  comm->impl = impl;
}

int mtf_comm_group_size(const mtf_comm *comm, mtf_axis_set axes) { return mtf_mesh_group_size(&comm->mesh, axes); }

int mtf_comm_group_position(const mtf_comm *comm, mtf_axis_set axes) {
  return mtf_mesh_group_position(&comm->mesh, axes, comm->coord);
}

static int check_axes(const mtf_comm *comm, mtf_axis_set axes, mtf_error *err) {
  if (axes & ~mtf_mesh_all_axes(&comm->mesh))
    return mtf_error_set(err, MTF_ERR_INVALID, "axis set 0x%x names axes outside the %d-axis mesh", axes,
                         comm->mesh.rank);
  return MTF_OK;
}

static int check_tensor_axis(int rank, int axis, const char *what, mtf_error *err) {
  if (rank < 1 || rank > MTF_MAX_RANK || axis < 0 || axis >= rank)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s axis %d is not an axis of a rank-%d tensor", what, axis, rank);
  return MTF_OK;
}

/* The tensor forms repack blocks in host memory, which a device communicator's buffers are not; the
 * executor packs with its backend and calls the block forms. */
static int check_host_memory(const mtf_comm *comm, const char *what, mtf_error *err) {
  if (comm->device_memory)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: communicator '%s' works on device memory, where this form would "
                         "repack on the host; pack with the backend and call the block form", what, comm->ops->name);
  return MTF_OK;
}

static void count_call(mtf_comm *comm, mtf_collective_kind kind, double bytes_sent) {
  comm->stats.calls[kind]++;
  comm->stats.bytes_sent[kind] += (int64_t)bytes_sent;
}

/* Reductions are of float32, float64 or int32, and sums of bfloat16 (backend.grad_reduce bf16: half the bytes,
 * rounded at every hop). Same arguments on every rank, so every rank refuses alike. */
static int check_reducible(mtf_dtype dtype, mtf_reduce_op op, const char *what, mtf_error *err) {
  if (dtype != MTF_BF16 || op == MTF_REDUCE_SUM) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_INVALID, "%s: only sums of bfloat16 values are supported, not %s", what,
                       mtf_reduce_op_name(op));
}

int mtf_comm_allreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                       mtf_reduce_op op, mtf_error *err) {
  MTF_CHECK(check_reducible(dtype, op, "allreduce", err));
  MTF_CHECK(check_axes(comm, axes, err));
  int g = mtf_comm_group_size(comm, axes);
  count_call(comm, MTF_COLL_ALLREDUCE,
             mtf_collective_bytes_sent(MTF_COLL_ALLREDUCE, g, (double)(count * mtf_dtype_size(dtype))));
  return comm->ops->allreduce(comm, axes, in, out, count, dtype, op, err);
}

int mtf_comm_iallreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                        mtf_reduce_op op, mtf_comm_request *req, mtf_error *err) {
  memset(req, 0, sizeof *req);
  if (!comm->ops->iallreduce) return mtf_comm_allreduce(comm, axes, in, out, count, dtype, op, err);
  MTF_CHECK(check_reducible(dtype, op, "allreduce", err));
  MTF_CHECK(check_axes(comm, axes, err));
  int g = mtf_comm_group_size(comm, axes);
  count_call(comm, MTF_COLL_ALLREDUCE,
             mtf_collective_bytes_sent(MTF_COLL_ALLREDUCE, g, (double)(count * mtf_dtype_size(dtype))));
  return comm->ops->iallreduce(comm, axes, in, out, count, dtype, op, req, err);
}

int mtf_comm_test(mtf_comm *comm, mtf_comm_request *req, int *done, mtf_error *err) {
  *done = 1;
  if (!req->active) return MTF_OK;
  *done = 0;
  return comm->ops->test(comm, req, done, err);
}

int mtf_comm_wait(mtf_comm *comm, mtf_comm_request *req, mtf_error *err) {
  if (!req->active) return MTF_OK;
  return comm->ops->wait(comm, req, err);
}

int mtf_comm_allgather(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_dtype dtype, int rank,
                       const int64_t *dims, int axis, mtf_error *err) {
  MTF_CHECK(check_axes(comm, axes, err));
  MTF_CHECK(check_tensor_axis(rank, axis, "allgather", err));
  if (axis != 0) MTF_CHECK(check_host_memory(comm, "allgather", err));
  int g = mtf_comm_group_size(comm, axes);
  size_t elem = mtf_dtype_size(dtype), block_bytes = (size_t)mtf_dims_count(rank, dims) * elem;
  count_call(comm, MTF_COLL_ALLGATHER, mtf_collective_bytes_sent(MTF_COLL_ALLGATHER, g, (double)block_bytes));
  if (axis == 0) return comm->ops->allgather_blocks(comm, axes, in, out, block_bytes, err);
  void *blocks = malloc(block_bytes * (size_t)g + 1);
  if (!blocks) return mtf_error_set(err, MTF_ERR_NOMEM, "allgather: cannot allocate %zu bytes", block_bytes * g);
  int rc = comm->ops->allgather_blocks(comm, axes, in, blocks, block_bytes, err);
  if (rc == MTF_OK) mtf_pack_concat(blocks, out, elem, rank, dims, axis, g);
  free(blocks);
  return rc;
}

int mtf_comm_allgather_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out_blocks, size_t block_bytes,
                              mtf_error *err) {
  MTF_CHECK(check_axes(comm, axes, err));
  int g = mtf_comm_group_size(comm, axes);
  count_call(comm, MTF_COLL_ALLGATHER, mtf_collective_bytes_sent(MTF_COLL_ALLGATHER, g, (double)block_bytes));
  return comm->ops->allgather_blocks(comm, axes, in, out_blocks, block_bytes, err);
}

int mtf_comm_reduce_scatter(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_dtype dtype,
                            mtf_reduce_op op, int rank, const int64_t *dims, int axis, mtf_error *err) {
  MTF_CHECK(check_axes(comm, axes, err));
  MTF_CHECK(check_tensor_axis(rank, axis, "reduce_scatter", err));
  if (axis != 0) MTF_CHECK(check_host_memory(comm, "reduce_scatter", err));
  int g = mtf_comm_group_size(comm, axes);
  if (dims[axis] % g != 0)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "reduce_scatter: tensor axis %d has size %lld, which the group of %d ranks does not divide",
                         axis, (long long)dims[axis], g);
  size_t elem = mtf_dtype_size(dtype), total = (size_t)mtf_dims_count(rank, dims);
  count_call(comm, MTF_COLL_REDUCE_SCATTER,
             mtf_collective_bytes_sent(MTF_COLL_REDUCE_SCATTER, g, (double)(total * elem)));
  if (axis == 0) return comm->ops->reduce_scatter_blocks(comm, axes, in, out, total / (size_t)g, dtype, op, err);
  void *blocks = malloc(total * elem + 1);
  if (!blocks) return mtf_error_set(err, MTF_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes", total * elem);
  mtf_pack_split(in, blocks, elem, rank, dims, axis, g);
  int rc = comm->ops->reduce_scatter_blocks(comm, axes, blocks, out, total / (size_t)g, dtype, op, err);
  free(blocks);
  return rc;
}

int mtf_comm_reduce_scatter_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out,
                                   size_t block_count, mtf_dtype dtype, mtf_reduce_op op, mtf_error *err) {
  MTF_CHECK(check_reducible(dtype, op, "reduce_scatter", err));
  MTF_CHECK(check_axes(comm, axes, err));
  int g = mtf_comm_group_size(comm, axes);
  count_call(comm, MTF_COLL_REDUCE_SCATTER,
             mtf_collective_bytes_sent(MTF_COLL_REDUCE_SCATTER, g, (double)(block_count * (size_t)g * mtf_dtype_size(dtype))));
  return comm->ops->reduce_scatter_blocks(comm, axes, in_blocks, out, block_count, dtype, op, err);
}

int mtf_comm_alltoall_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out_blocks,
                             size_t block_bytes, mtf_error *err) {
  MTF_CHECK(check_axes(comm, axes, err));
  int g = mtf_comm_group_size(comm, axes);
  count_call(comm, MTF_COLL_ALLTOALL, mtf_collective_bytes_sent(MTF_COLL_ALLTOALL, g, (double)(block_bytes * (size_t)g)));
  return comm->ops->alltoall_blocks(comm, axes, in_blocks, out_blocks, block_bytes, err);
}

int mtf_comm_alltoall(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_dtype dtype, int rank,
                      const int64_t *dims, int split_axis, int concat_axis, mtf_error *err) {
  MTF_CHECK(check_axes(comm, axes, err));
  MTF_CHECK(check_tensor_axis(rank, split_axis, "alltoall split", err));
  MTF_CHECK(check_tensor_axis(rank, concat_axis, "alltoall concat", err));
  MTF_CHECK(check_host_memory(comm, "alltoall", err));
  int g = mtf_comm_group_size(comm, axes);
  if (dims[split_axis] % g != 0)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "alltoall: split axis %d has size %lld, which the group of %d ranks does not divide",
                         split_axis, (long long)dims[split_axis], g);
  size_t elem = mtf_dtype_size(dtype), total_bytes = (size_t)mtf_dims_count(rank, dims) * elem;
  count_call(comm, MTF_COLL_ALLTOALL, mtf_collective_bytes_sent(MTF_COLL_ALLTOALL, g, (double)total_bytes));
  void *send = malloc(total_bytes + 1), *recv = malloc(total_bytes + 1);
  if (!send || !recv) {
    free(send);
    free(recv);
    return mtf_error_set(err, MTF_ERR_NOMEM, "alltoall: cannot allocate 2 x %zu bytes", total_bytes);
  }
  mtf_pack_split(in, send, elem, rank, dims, split_axis, g);
  int rc = comm->ops->alltoall_blocks(comm, axes, send, recv, total_bytes / (size_t)g, err);
  if (rc == MTF_OK) {
    int64_t block_dims[MTF_MAX_RANK];
    memcpy(block_dims, dims, sizeof(int64_t) * (size_t)rank);
    block_dims[split_axis] /= g;
    mtf_pack_concat(recv, out, elem, rank, block_dims, concat_axis, g);
  }
  free(send);
  free(recv);
  return rc;
}

int mtf_comm_permute(mtf_comm *comm, int mesh_axis, const void *in, void *out, size_t count, mtf_dtype dtype,
                     const int *source_of, mtf_error *err) {
  if (mesh_axis < 0 || mesh_axis >= comm->mesh.rank)
    return mtf_error_set(err, MTF_ERR_INVALID, "permute: mesh axis %d is not in the %d-axis mesh", mesh_axis,
                         comm->mesh.rank);
  int n = (int)comm->mesh.dims[mesh_axis].size, me = comm->coord[mesh_axis];
  /* Validate the whole map, not just this rank's part, so that every rank fails alike and none is left
   * waiting for a message. */
  int dest = -1;
  for (int j = 0; j < n; j++) {
    int src = source_of[j];
    if (src < -1 || src >= n)
      return mtf_error_set(err, MTF_ERR_INVALID, "permute: source %d of position %d is outside 0..%d", src, j,
                           n - 1);
    for (int k = 0; k < j; k++)
      if (src >= 0 && source_of[k] == src)
        return mtf_error_set(err, MTF_ERR_INVALID, "permute: position %d is the source of both %d and %d", src,
                             k, j);
    if (src == me) dest = j;
  }
  for (int j = 0; j < n; j++) /* the whole map again, so every rank refuses alike */
    if (source_of[j] < 0) MTF_CHECK(check_host_memory(comm, "permute with zero fill", err));
  size_t bytes = count * mtf_dtype_size(dtype);
  count_call(comm, MTF_COLL_PERMUTE, dest >= 0 && dest != me ? (double)bytes : 0.0);
  int src = source_of[me];
  if (src < 0) memset(out, 0, bytes);
  return comm->ops->sendrecv(comm, mesh_axis, in, dest, src < 0 ? NULL : out, src, bytes, err);
}

int mtf_comm_shift(mtf_comm *comm, int mesh_axis, const void *in, void *out, size_t count, mtf_dtype dtype,
                   int offset, mtf_shift_fill fill, mtf_error *err) {
  if (mesh_axis < 0 || mesh_axis >= comm->mesh.rank)
    return mtf_error_set(err, MTF_ERR_INVALID, "shift: mesh axis %d is not in the %d-axis mesh", mesh_axis,
                         comm->mesh.rank);
  int n = (int)comm->mesh.dims[mesh_axis].size;
  int source_of[4096];
  if (n > (int)(sizeof source_of / sizeof source_of[0]))
    return mtf_error_set(err, MTF_ERR_INVALID, "shift: mesh axis of size %d is too long", n);
  for (int j = 0; j < n; j++) {
    int src = j - offset;
    if (fill == MTF_SHIFT_WRAP)
      source_of[j] = ((src % n) + n) % n;
    else
      source_of[j] = src >= 0 && src < n ? src : -1;
  }
  return mtf_comm_permute(comm, mesh_axis, in, out, count, dtype, source_of, err);
}

int mtf_comm_broadcast(mtf_comm *comm, mtf_axis_set axes, void *buf, size_t count, mtf_dtype dtype, int root,
                       mtf_error *err) {
  MTF_CHECK(check_axes(comm, axes, err));
  int g = mtf_comm_group_size(comm, axes);
  if (root < 0 || root >= g)
    return mtf_error_set(err, MTF_ERR_INVALID, "broadcast: root %d is outside the group of %d", root, g);
  size_t bytes = count * mtf_dtype_size(dtype);
  count_call(comm, MTF_COLL_BROADCAST, mtf_comm_group_position(comm, axes) == root ? (double)bytes : 0.0);
  return comm->ops->broadcast(comm, axes, buf, bytes, root, err);
}

int mtf_comm_barrier(mtf_comm *comm, mtf_error *err) { return comm->ops->barrier(comm, err); }

void mtf_comm_destroy(mtf_comm *comm) {
  if (comm) comm->ops->destroy(comm);
}
