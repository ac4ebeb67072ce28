#include "comm/staged_comm.h"

#include <stdlib.h>
#include <string.h>

/* The host buffer of one non-blocking allreduce, from its start until it is waited for. */
typedef struct staged_request {
  int busy;
  void *host;
  size_t capacity;
  void *device_out;
  size_t bytes;
  mtf_comm_request inner; /* the host communicator's request */
} staged_request;

typedef struct staged_impl {
  mtf_comm *host;
  mtf_staging staging;
  void *a, *b; /* staging for blocking calls: input side, output side */
  size_t a_capacity, b_capacity;
  staged_request **requests;
  int n_requests;
} staged_impl;

static staged_impl *impl_of(const mtf_comm *comm) { return (staged_impl *)comm->impl; }

static int grow(void **buf, size_t *capacity, size_t bytes, mtf_error *err) {
  if (bytes <= *capacity) return MTF_OK;
  void *bigger = realloc(*buf, bytes);
  if (!bigger)
    return mtf_error_set(err, MTF_ERR_NOMEM, "staged communicator: cannot allocate %zu bytes of host staging", bytes);
  *buf = bigger;
  *capacity = bytes;
  return MTF_OK;
}

static int to_host(staged_impl *s, void *host, const void *device, size_t bytes, mtf_error *err) {
  int rc = bytes ? s->staging.to_host(s->staging.ctx, host, device, bytes) : MTF_OK;
  if (rc) return mtf_error_set(err, rc, "staged communicator: copying %zu bytes from the device failed", bytes);
  return MTF_OK;
}

static int to_device(staged_impl *s, void *device, const void *host, size_t bytes, mtf_error *err) {
  int rc = bytes ? s->staging.to_device(s->staging.ctx, device, host, bytes) : MTF_OK;
  if (rc) return mtf_error_set(err, rc, "staged communicator: copying %zu bytes to the device failed", bytes);
  return MTF_OK;
}

/* Both staging buffers at least these sizes (one extra byte so that empty calls have a buffer). */
static int stage(staged_impl *s, size_t a_bytes, size_t b_bytes, mtf_error *err) {
  MTF_CHECK(grow(&s->a, &s->a_capacity, a_bytes + 1, err));
  return grow(&s->b, &s->b_capacity, b_bytes + 1, err);
}

static int staged_allreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count,
                            mtf_dtype dtype, mtf_reduce_op op, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  size_t bytes = count * mtf_dtype_size(dtype);
  MTF_CHECK(stage(s, bytes, 0, err));
  MTF_CHECK(to_host(s, s->a, in, bytes, err));
  MTF_CHECK(s->host->ops->allreduce(s->host, axes, s->a, s->a, count, dtype, op, err));
  return to_device(s, out, s->a, bytes, err);
}

static int staged_allgather_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out_blocks,
                                   size_t block_bytes, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  size_t total = block_bytes * (size_t)mtf_comm_group_size(comm, axes);
  MTF_CHECK(stage(s, block_bytes, total, err));
  MTF_CHECK(to_host(s, s->a, in, block_bytes, err));
  MTF_CHECK(s->host->ops->allgather_blocks(s->host, axes, s->a, s->b, block_bytes, err));
  return to_device(s, out_blocks, s->b, total, err);
}

static int staged_reduce_scatter_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out,
                                        size_t block_count, mtf_dtype dtype, mtf_reduce_op op, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  size_t block_bytes = block_count * mtf_dtype_size(dtype);
  size_t total = block_bytes * (size_t)mtf_comm_group_size(comm, axes);
  MTF_CHECK(stage(s, total, block_bytes, err));
  MTF_CHECK(to_host(s, s->a, in_blocks, total, err));
  MTF_CHECK(s->host->ops->reduce_scatter_blocks(s->host, axes, s->a, s->b, block_count, dtype, op, err));
  return to_device(s, out, s->b, block_bytes, err);
}

static int staged_alltoall_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out_blocks,
                                  size_t block_bytes, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  size_t total = block_bytes * (size_t)mtf_comm_group_size(comm, axes);
  MTF_CHECK(stage(s, total, total, err));
  MTF_CHECK(to_host(s, s->a, in_blocks, total, err));
  MTF_CHECK(s->host->ops->alltoall_blocks(s->host, axes, s->a, s->b, block_bytes, err));
  return to_device(s, out_blocks, s->b, total, err);
}

static int staged_sendrecv(mtf_comm *comm, int mesh_axis, const void *send, int dest, void *recv, int src,
                           size_t bytes, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  MTF_CHECK(stage(s, bytes, bytes, err));
  if (dest >= 0) MTF_CHECK(to_host(s, s->a, send, bytes, err));
  MTF_CHECK(s->host->ops->sendrecv(s->host, mesh_axis, s->a, dest, recv ? s->b : NULL, src, bytes, err));
  return recv && src >= 0 ? to_device(s, recv, s->b, bytes, err) : MTF_OK;
}

static int staged_broadcast(mtf_comm *comm, mtf_axis_set axes, void *buf, size_t bytes, int root, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  int is_root = mtf_comm_group_position(comm, axes) == root;
  MTF_CHECK(stage(s, bytes, 0, err));
  if (is_root) MTF_CHECK(to_host(s, s->a, buf, bytes, err));
  MTF_CHECK(s->host->ops->broadcast(s->host, axes, s->a, bytes, root, err));
  return is_root ? MTF_OK : to_device(s, buf, s->a, bytes, err);
}

static int staged_barrier(mtf_comm *comm, mtf_error *err) { return mtf_comm_barrier(impl_of(comm)->host, err); }

/* A free request slot (reused once its allreduce was waited for), grown by one when all are busy. */
static staged_request *free_request(staged_impl *s, mtf_error *err) {
  for (int i = 0; i < s->n_requests; i++)
    if (!s->requests[i]->busy) return s->requests[i];
  staged_request **more = realloc(s->requests, sizeof *more * (size_t)(s->n_requests + 1));
  staged_request *r = calloc(1, sizeof *r);
  if (!more || !r) {
    if (more) s->requests = more;
    free(r);
    mtf_error_set(err, MTF_ERR_NOMEM, "staged communicator: cannot allocate a request");
    return NULL;
  }
  s->requests = more;
  s->requests[s->n_requests++] = r;
  return r;
}

static staged_request *slot_of(mtf_comm_request *req) { return (staged_request *)req->handle.pointer; }

/* The result goes back to the device once the host collective is done; the slot is then free. */
static int finish(staged_impl *s, mtf_comm_request *req, mtf_error *err) {
  staged_request *r = slot_of(req);
  req->active = 0;
  r->busy = 0;
  return to_device(s, r->device_out, r->host, r->bytes, err);
}

static int staged_iallreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count,
                             mtf_dtype dtype, mtf_reduce_op op, mtf_comm_request *req, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  size_t bytes = count * mtf_dtype_size(dtype);
  staged_request *r = free_request(s, err);
  if (!r) return MTF_ERR_NOMEM;
  MTF_CHECK(grow(&r->host, &r->capacity, bytes + 1, err));
  MTF_CHECK(to_host(s, r->host, in, bytes, err));
  r->device_out = out;
  r->bytes = bytes;
  req->handle.pointer = r;
  memset(&r->inner, 0, sizeof r->inner);
  if (!s->host->ops->iallreduce) {
    /* A host communicator without non-blocking collectives: done at once. */
    MTF_CHECK(s->host->ops->allreduce(s->host, axes, r->host, r->host, count, dtype, op, err));
    return to_device(s, out, r->host, bytes, err);
  }
  MTF_CHECK(s->host->ops->iallreduce(s->host, axes, r->host, r->host, count, dtype, op, &r->inner, err));
  r->busy = 1;
  req->active = 1;
  return MTF_OK;
}

static int staged_test(mtf_comm *comm, mtf_comm_request *req, int *done, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  staged_request *r = slot_of(req);
  int inner_done = 1;
  if (r->inner.active) MTF_CHECK(s->host->ops->test(s->host, &r->inner, &inner_done, err));
  *done = inner_done;
  return inner_done ? finish(s, req, err) : MTF_OK;
}

static int staged_wait(mtf_comm *comm, mtf_comm_request *req, mtf_error *err) {
  staged_impl *s = impl_of(comm);
  staged_request *r = slot_of(req);
  int rc = r->inner.active ? s->host->ops->wait(s->host, &r->inner, err) : MTF_OK;
  if (rc) {
    req->active = 0;
    r->busy = 0;
    return rc;
  }
  return finish(s, req, err);
}

static void staged_destroy(mtf_comm *comm) {
  staged_impl *s = impl_of(comm);
  for (int i = 0; i < s->n_requests; i++) {
    free(s->requests[i]->host);
    free(s->requests[i]);
  }
  free(s->requests);
  free(s->a);
  free(s->b);
  free(s);
  free(comm);
}

static const mtf_comm_ops staged_ops = {
    .name = "mpi-staged",
    .allreduce = staged_allreduce,
    .allgather_blocks = staged_allgather_blocks,
    .reduce_scatter_blocks = staged_reduce_scatter_blocks,
    .alltoall_blocks = staged_alltoall_blocks,
    .sendrecv = staged_sendrecv,
    .broadcast = staged_broadcast,
    .barrier = staged_barrier,
    .destroy = staged_destroy,
    .iallreduce = staged_iallreduce,
    .test = staged_test,
    .wait = staged_wait,
};

int mtf_comm_staged_create(mtf_comm *host, const mtf_staging *staging, mtf_comm **out, mtf_error *err) {
  *out = NULL;
  if (!host || !staging || !staging->to_host || !staging->to_device)
    return mtf_error_set(err, MTF_ERR_INVALID, "staged communicator: needs a host communicator and both copies");
  staged_impl *s = calloc(1, sizeof *s);
  mtf_comm *comm = calloc(1, sizeof *comm);
  if (!s || !comm) {
    free(s);
    free(comm);
    return mtf_error_set(err, MTF_ERR_NOMEM, "staged communicator: out of memory");
  }
  s->host = host;
  s->staging = *staging;
  mtf_comm_init_base(comm, &staged_ops, &host->mesh, host->rank, s);
  comm->device_memory = 1;
  *out = comm;
  return MTF_OK;
}
