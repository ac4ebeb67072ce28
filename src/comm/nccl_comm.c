#define _POSIX_C_SOURCE 200809L /* gethostname */
#include "comm/nccl_comm.h"
#include "comm/world.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SETS (1u << MTF_MAX_MESH_AXES)

/* A non-blocking allreduce's completion event, reused once it is done. */
typedef struct nccl_event {
  cudaEvent_t event;
  int busy;
} nccl_event;

typedef struct nccl_impl {
  mtf_comm *host;
  cudaStream_t compute, stream;
  cudaEvent_t inputs_ready, outputs_ready;
  ncclComm_t comms[SETS];  /* per axis set; NULL where the group is this rank alone */
  int owner[SETS];         /* whether comms[s] was made for s (else it is a smaller set's) */
  nccl_event *events;
  int n_events;
} nccl_impl;

static nccl_impl *impl_of(const mtf_comm *comm) { return (nccl_impl *)comm->impl; }

static int cuda_failed(cudaError_t rc, const char *call, mtf_error *err) {
  return mtf_error_set(err, MTF_ERR_COMM, "%s failed: %s (%s)", call, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

static int nccl_failed(ncclResult_t rc, const char *call, ncclComm_t comm, mtf_error *err) {
  const char *detail = ncclGetLastError(comm);
  return mtf_error_set(err, MTF_ERR_COMM, "%s failed: %s%s%s", call, ncclGetErrorString(rc),
                       detail && detail[0] ? ": " : "", detail ? detail : "");
}

#define CUDA_TRY(call)                                                                                       \
  do {                                                                                                       \
    cudaError_t cuda_rc_ = (call);                                                                           \
    if (cuda_rc_ != cudaSuccess) return cuda_failed(cuda_rc_, #call, err);                                   \
  } while (0)

#define NCCL_TRY(call, comm)                                                                                 \
  do {                                                                                                       \
    ncclResult_t nccl_rc_ = (call);                                                                          \
    if (nccl_rc_ != ncclSuccess) return nccl_failed(nccl_rc_, #call, (comm), err);                           \
  } while (0)

static ncclDataType_t nccl_type(mtf_dtype dtype) {
  switch (dtype) {
    case MTF_F32: return ncclFloat32;
    case MTF_F64: return ncclFloat64;
    case MTF_I32: return ncclInt32;
    case MTF_BF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

static ncclRedOp_t nccl_op(mtf_reduce_op op) {
  switch (op) {
    case MTF_REDUCE_SUM: return ncclSum;
    case MTF_REDUCE_MAX: return ncclMax;
    case MTF_REDUCE_MIN: return ncclMin;
  }
  return ncclSum;
}

void mtf_comm_nccl_version(char *buf, size_t size) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) {
    snprintf(buf, size, "NCCL (version unknown)");
    return;
  }
  /* NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch. */
  snprintf(buf, size, "NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
}

/* The comm stream waits for what the compute stream has queued: the collective's inputs. */
static int begin(nccl_impl *s, mtf_error *err) {
  CUDA_TRY(cudaEventRecord(s->inputs_ready, s->compute));
  CUDA_TRY(cudaStreamWaitEvent(s->stream, s->inputs_ready, 0));
  return MTF_OK;
}

/* Later compute waits for the collective; a blocking call also waits here until it is done. */
static int end_blocking(nccl_impl *s, mtf_error *err) {
  CUDA_TRY(cudaEventRecord(s->outputs_ready, s->stream));
  CUDA_TRY(cudaStreamWaitEvent(s->compute, s->outputs_ready, 0));
  CUDA_TRY(cudaStreamSynchronize(s->stream));
  return MTF_OK;
}

static int copy_async(nccl_impl *s, void *dst, const void *src, size_t bytes, mtf_error *err) {
  if (dst != src && bytes) CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream));
  return MTF_OK;
}

static int nccl_allreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count,
                          mtf_dtype dtype, mtf_reduce_op op, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  MTF_CHECK(begin(s, err));
  ncclComm_t c = s->comms[axes];
  if (c) NCCL_TRY(ncclAllReduce(in, out, count, nccl_type(dtype), nccl_op(op), c, s->stream), c);
  else MTF_CHECK(copy_async(s, out, in, count * mtf_dtype_size(dtype), err));
  return end_blocking(s, err);
}

static int nccl_allgather_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out_blocks,
                                 size_t block_bytes, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  MTF_CHECK(begin(s, err));
  ncclComm_t c = s->comms[axes];
  if (c) NCCL_TRY(ncclAllGather(in, out_blocks, block_bytes, ncclChar, c, s->stream), c);
  else MTF_CHECK(copy_async(s, out_blocks, in, block_bytes, err));
  return end_blocking(s, err);
}

static int nccl_reduce_scatter_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out,
                                      size_t block_count, mtf_dtype dtype, mtf_reduce_op op, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  MTF_CHECK(begin(s, err));
  ncclComm_t c = s->comms[axes];
  if (c) NCCL_TRY(ncclReduceScatter(in_blocks, out, block_count, nccl_type(dtype), nccl_op(op), c, s->stream), c);
  else MTF_CHECK(copy_async(s, out, in_blocks, block_count * mtf_dtype_size(dtype), err));
  return end_blocking(s, err);
}

/* Block q to member q and member q's block here as block q: one send and one receive per peer in one
 * NCCL group (NCCL has no alltoall of its own), this rank's own block by a device copy. */
static int nccl_alltoall_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out_blocks,
                                size_t block_bytes, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  MTF_CHECK(begin(s, err));
  ncclComm_t c = s->comms[axes];
  int g = mtf_comm_group_size(comm, axes), me = mtf_comm_group_position(comm, axes);
  const char *send = (const char *)in_blocks;
  char *recv = (char *)out_blocks;
  MTF_CHECK(copy_async(s, recv + (size_t)me * block_bytes, send + (size_t)me * block_bytes, block_bytes, err));
  if (c) {
    NCCL_TRY(ncclGroupStart(), c);
    for (int q = 0; q < g; q++) {
      if (q == me) continue;
      NCCL_TRY(ncclSend(send + (size_t)q * block_bytes, block_bytes, ncclChar, q, c, s->stream), c);
      NCCL_TRY(ncclRecv(recv + (size_t)q * block_bytes, block_bytes, ncclChar, q, c, s->stream), c);
    }
    NCCL_TRY(ncclGroupEnd(), c);
  }
  return end_blocking(s, err);
}

static int nccl_sendrecv(mtf_comm *comm, int mesh_axis, const void *send, int dest, void *recv, int src,
                         size_t bytes, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  mtf_axis_set axes = 1u << mesh_axis;
  int me = mtf_comm_group_position(comm, axes);
  ncclComm_t c = s->comms[axes];
  MTF_CHECK(begin(s, err));
  if (dest == me && src == me) {
    MTF_CHECK(copy_async(s, recv, send, bytes, err));
  } else if (c) {
    NCCL_TRY(ncclGroupStart(), c);
    if (dest >= 0) NCCL_TRY(ncclSend(send, bytes, ncclChar, dest, c, s->stream), c);
    if (src >= 0 && recv) NCCL_TRY(ncclRecv(recv, bytes, ncclChar, src, c, s->stream), c);
    NCCL_TRY(ncclGroupEnd(), c);
  }
  return end_blocking(s, err);
}

static int nccl_broadcast(mtf_comm *comm, mtf_axis_set axes, void *buf, size_t bytes, int root, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  ncclComm_t c = s->comms[axes];
  if (!c) return MTF_OK;
  MTF_CHECK(begin(s, err));
  NCCL_TRY(ncclBroadcast(buf, buf, bytes, ncclChar, root, c, s->stream), c);
  return end_blocking(s, err);
}

static int nccl_barrier(mtf_comm *comm, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  CUDA_TRY(cudaStreamSynchronize(s->stream));
  return mtf_comm_barrier(s->host, err);
}

static int free_event(nccl_impl *s, mtf_error *err) {
  for (int i = 0; i < s->n_events; i++)
    if (!s->events[i].busy) return i;
  nccl_event *more = (nccl_event *)realloc(s->events, sizeof *more * (size_t)(s->n_events + 1));
  if (!more) return -mtf_error_set(err, MTF_ERR_NOMEM, "nccl: cannot allocate a request");
  s->events = more;
  cudaError_t rc = cudaEventCreateWithFlags(&more[s->n_events].event, cudaEventDisableTiming);
  if (rc != cudaSuccess) return -cuda_failed(rc, "cudaEventCreateWithFlags", err);
  more[s->n_events].busy = 0;
  return s->n_events++;
}

static int nccl_iallreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count,
                           mtf_dtype dtype, mtf_reduce_op op, mtf_comm_request *req, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  int e = free_event(s, err);
  if (e < 0) return -e;
  MTF_CHECK(begin(s, err));
  ncclComm_t c = s->comms[axes];
  if (c) NCCL_TRY(ncclAllReduce(in, out, count, nccl_type(dtype), nccl_op(op), c, s->stream), c);
  else MTF_CHECK(copy_async(s, out, in, count * mtf_dtype_size(dtype), err));
  CUDA_TRY(cudaEventRecord(s->events[e].event, s->stream));
  /* Kernels queued after the wait read the result: the compute stream is ordered after it on the device
   * once test or wait reports it done (the host has then seen the event). */
  s->events[e].busy = 1;
  req->handle.integer = e;
  req->active = 1;
  return MTF_OK;
}

static int nccl_test(mtf_comm *comm, mtf_comm_request *req, int *done, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  nccl_event *ev = &s->events[req->handle.integer];
  cudaError_t rc = cudaEventQuery(ev->event);
  if (rc == cudaErrorNotReady) {
    *done = 0;
    return MTF_OK;
  }
  ev->busy = 0;
  req->active = 0;
  *done = 1;
  if (rc != cudaSuccess) return cuda_failed(rc, "cudaEventQuery (non-blocking allreduce)", err);
  return MTF_OK;
}

static int nccl_wait(mtf_comm *comm, mtf_comm_request *req, mtf_error *err) {
  nccl_impl *s = impl_of(comm);
  nccl_event *ev = &s->events[req->handle.integer];
  ev->busy = 0;
  req->active = 0;
  CUDA_TRY(cudaEventSynchronize(ev->event));
  return MTF_OK;
}

static void nccl_destroy(mtf_comm *comm) {
  nccl_impl *s = impl_of(comm);
  if (s->stream) cudaStreamSynchronize(s->stream);
  for (unsigned set = 0; set < SETS; set++)
    if (s->owner[set] && s->comms[set]) ncclCommDestroy(s->comms[set]);
  for (int i = 0; i < s->n_events; i++) cudaEventDestroy(s->events[i].event);
  free(s->events);
  if (s->inputs_ready) cudaEventDestroy(s->inputs_ready);
  if (s->outputs_ready) cudaEventDestroy(s->outputs_ready);
  free(s);
  free(comm);
}

static const mtf_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .allgather_blocks = nccl_allgather_blocks,
    .reduce_scatter_blocks = nccl_reduce_scatter_blocks,
    .alltoall_blocks = nccl_alltoall_blocks,
    .sendrecv = nccl_sendrecv,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
    .iallreduce = nccl_iallreduce,
    .test = nccl_test,
    .wait = nccl_wait,
};

/* This rank's GPU as "host/PCI bus id", or its failure as text (compared like a name: never equal). */
#define GPU_KEY 192
static void gpu_key(char *key, int rank) {
  char host[96] = "?", bus[32] = "?";
  int device = -1;
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess)
    snprintf(bus, sizeof bus, "unknown-%d", rank); /* unique: cannot be found shared */
  snprintf(key, GPU_KEY, "%s\n%s", host, bus);
}

int mtf_comm_nccl_gpus_shared(mtf_comm *host, int *shared, char *why, size_t why_size, mtf_error *err) {
  *shared = 0;
  if (why_size) why[0] = 0;
  mtf_axis_set all = mtf_mesh_all_axes(&host->mesh);
  char mine[GPU_KEY] = {0};
  gpu_key(mine, host->rank);
  char *keys = (char *)calloc((size_t)host->size, GPU_KEY);
  if (!keys) return mtf_error_set(err, MTF_ERR_NOMEM, "nccl: cannot allocate the GPU survey");
  int rc = host->ops->allgather_blocks(host, all, mine, keys, GPU_KEY, err);
  /* Members of the all-axes group lie in mesh rank order. */
  for (int a = 0; a < host->size && rc == MTF_OK && !*shared; a++)
    for (int b = a + 1; b < host->size && !*shared; b++)
      if (strcmp(keys + (size_t)a * GPU_KEY, keys + (size_t)b * GPU_KEY) == 0) {
        const char *key = keys + (size_t)a * GPU_KEY, *nl = strchr(key, '\n');
        snprintf(why, why_size, "ranks %d and %d both use GPU %s on node %.*s", a, b, nl ? nl + 1 : key,
                 nl ? (int)(nl - key) : 0, key);
        *shared = 1;
      }
  free(keys);
  return rc;
}

/* What position 0 of a group sends the others: its status and the group's NCCL id. */
typedef struct id_message {
  int status;
  ncclUniqueId id;
} id_message;

/* One NCCL communicator for axis set `set`: position 0 makes the id, the host broadcasts it over the
 * set's group, every member joins. A member whose ncclCommInitRank fails ends the job: its peers wait inside
 * theirs for it (NCCL's bootstrap has no timeout), where no later agreement over the host could reach them. */
static int make_group(nccl_impl *s, mtf_comm *comm, mtf_axis_set set, mtf_error *err) {
  int g = mtf_comm_group_size(comm, set), me = mtf_comm_group_position(comm, set);
  id_message msg;
  memset(&msg, 0, sizeof msg);
  if (me == 0) msg.status = ncclGetUniqueId(&msg.id) == ncclSuccess ? 0 : 1;
  MTF_CHECK(s->host->ops->broadcast(s->host, set, &msg, sizeof msg, 0, err));
  if (msg.status)
    return mtf_error_set(err, MTF_ERR_COMM, "nccl: ncclGetUniqueId failed on position 0 of the group of axis set 0x%x",
                         set);
  ncclResult_t rc = ncclCommInitRank(&s->comms[set], g, msg.id, me);
  if (rc != ncclSuccess) {
    nccl_failed(rc, "ncclCommInitRank", NULL, err);
    mtf_error_prefix(err, "nccl: the communicator of axis set 0x%x (position %d of %d)", set, me, g);
    mtf_world_abort(1, "backend.comm nccl", err);
  }
  s->owner[set] = 1;
  return MTF_OK;
}

/* The set without its axes of size 1: the same group of ranks. */
static mtf_axis_set canonical(const mtf_shape *mesh, mtf_axis_set set) {
  for (int a = 0; a < mesh->rank; a++)
    if (mesh->dims[a].size == 1) set &= ~(1u << a);
  return set;
}

int mtf_comm_nccl_create(mtf_comm *host, void *compute_stream, void *comm_stream, mtf_comm **out, mtf_error *err) {
  *out = NULL;
  nccl_impl *s = (nccl_impl *)calloc(1, sizeof *s);
  mtf_comm *comm = (mtf_comm *)calloc(1, sizeof *comm);
  if (!s || !comm) {
    free(s);
    free(comm);
    return mtf_error_set(err, MTF_ERR_NOMEM, "nccl: out of memory");
  }
  s->host = host;
  s->compute = (cudaStream_t)compute_stream;
  s->stream = (cudaStream_t)comm_stream;
  mtf_comm_init_base(comm, &nccl_ops, &host->mesh, host->rank, s);
  comm->device_memory = 1;
  int rc = MTF_OK;
  cudaError_t cuda_rc = cudaEventCreateWithFlags(&s->inputs_ready, cudaEventDisableTiming);
  if (cuda_rc == cudaSuccess) cuda_rc = cudaEventCreateWithFlags(&s->outputs_ready, cudaEventDisableTiming);
  if (cuda_rc != cudaSuccess) rc = cuda_failed(cuda_rc, "cudaEventCreateWithFlags", err);
  /* Every rank walks the sets in the same order, so each InitRank finds its peers. */
  unsigned subsets = 1u << host->mesh.rank;
  for (unsigned set = 1; set < subsets && rc == MTF_OK; set++) {
    mtf_axis_set canon = canonical(&host->mesh, set);
    if (mtf_comm_group_size(comm, set) == 1) continue;
    if (canon != set) {
      s->comms[set] = s->comms[canon]; /* made already: canon < set */
      continue;
    }
    rc = make_group(s, comm, set, err);
  }
  /* A failure on one rank must not leave the others with a half-made communicator. */
  int status = rc, worst = rc;
  if (host->ops->allreduce(host, mtf_mesh_all_axes(&host->mesh), &status, &worst, 1, MTF_I32, MTF_REDUCE_MAX, err) ==
          MTF_OK &&
      worst != MTF_OK && rc == MTF_OK)
    rc = mtf_error_set(err, worst, "nccl: another rank failed to create its communicators");
  if (rc != MTF_OK) {
    nccl_destroy(comm);
    return rc;
  }
  *out = comm;
  return MTF_OK;
}
