/* Collectives over groups of mesh axes: what lowering calls to move tensor slices between ranks.
 *
 * An mtf_comm knows the mesh and this rank's coordinate. Every collective takes a set of mesh axes
 * (mtf_axis_set); it runs within this rank's group for that set (the ranks that differ only along those
 * axes), with members ordered row-major over the set's axes, which is also the order in which slices of
 * a split tensor dimension lie. Every rank of a group must make the same calls in the same order.
 *
 * Tensors are contiguous row-major buffers described by (rank, dims). The tensor-aware collectives
 * (allgather, reduce_scatter, alltoall) are written once here on top of block primitives that each
 * communicator backend supplies through mtf_comm_ops: MPI on host memory (mpi_comm.h), and for device
 * memory NCCL (nccl_comm.h) or MPI through host staging (staged_comm.h). */
#ifndef MTF_COMM_COMM_H
#define MTF_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "comm/dtype.h"
#include "core/error.h"
#include "core/mesh.h"

typedef struct mtf_comm mtf_comm;

/* A non-blocking collective in flight, in storage the caller owns: started by mtf_comm_iallreduce and
 * finished by mtf_comm_wait, or by a mtf_comm_test that reports it done. The backend keeps its own handle
 * inside (an MPI_Request; later e.g. a CUDA event). */
typedef struct mtf_comm_request {
  int active; /* started and not yet finished */
  union {
    void *pointer;
    int64_t integer;
    unsigned char bytes[32];
  } handle;
} mtf_comm_request;

typedef enum mtf_collective_kind {
  MTF_COLL_ALLREDUCE,
  MTF_COLL_ALLGATHER,
  MTF_COLL_REDUCE_SCATTER,
  MTF_COLL_ALLTOALL,
  MTF_COLL_PERMUTE,
  MTF_COLL_BROADCAST,
  MTF_COLL_KINDS
} mtf_collective_kind;

const char *mtf_collective_name(mtf_collective_kind kind);

/* Bytes one rank sends in a collective of `kind` over a group of `group_size` ranks, where `bytes` is the
 * size of its input buffer (ring algorithms; used by the statistics here and by the planner). */
double mtf_collective_bytes_sent(mtf_collective_kind kind, int group_size, double bytes);

/* Block primitives of a backend. `axes` selects the group; positions are member indices in the group.
 * Buffers hold `parts` equal blocks in member order where a *_blocks name says so. */
typedef struct mtf_comm_ops {
  const char *name;
  int (*allreduce)(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                   mtf_reduce_op op, mtf_error *err);
  int (*allgather_blocks)(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out_blocks, size_t block_bytes,
                          mtf_error *err);
  int (*reduce_scatter_blocks)(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out,
                               size_t block_count, mtf_dtype dtype, mtf_reduce_op op, mtf_error *err);
  int (*alltoall_blocks)(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out_blocks,
                         size_t block_bytes, mtf_error *err);
  /* Sends `send` to position dest and receives `recv` from position src along one mesh axis; -1 = none. */
  int (*sendrecv)(mtf_comm *comm, int mesh_axis, const void *send, int dest, void *recv, int src, size_t bytes,
                  mtf_error *err);
  int (*broadcast)(mtf_comm *comm, mtf_axis_set axes, void *buf, size_t bytes, int root, mtf_error *err);
  int (*barrier)(mtf_comm *comm, mtf_error *err);
  void (*destroy)(mtf_comm *comm);
  /* Optional (NULL: mtf_comm_iallreduce runs the blocking allreduce and returns a finished request).
   * iallreduce starts the collective and sets req->active; test sets *done and, when done, clears it;
   * wait returns when it is done. */
  int (*iallreduce)(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                    mtf_reduce_op op, mtf_comm_request *req, mtf_error *err);
  int (*test)(mtf_comm *comm, mtf_comm_request *req, int *done, mtf_error *err);
  int (*wait)(mtf_comm *comm, mtf_comm_request *req, mtf_error *err);
} mtf_comm_ops;

typedef struct mtf_comm_stats {
  int64_t calls[MTF_COLL_KINDS];
  int64_t bytes_sent[MTF_COLL_KINDS]; /* by this rank, counting what a ring/pairwise algorithm sends */
} mtf_comm_stats;

struct mtf_comm {
  const mtf_comm_ops *ops;
  mtf_shape mesh;
  int rank; /* row-major rank in the mesh */
  int size;
  int coord[MTF_MAX_MESH_AXES];
  mtf_comm_stats stats;
  /* Buffers are device memory (NCCL, staged MPI): only the block forms, allreduce, broadcast and permutes
   * without zero fill may be called; the tensor forms that repack on the host are refused. */
  int device_memory;
  void *impl;
};

/* Fills the parts of an mtf_comm every backend shares. */
void mtf_comm_init_base(mtf_comm *comm, const mtf_comm_ops *ops, const mtf_shape *mesh, int rank, void *impl);

int mtf_comm_group_size(const mtf_comm *comm, mtf_axis_set axes);
int mtf_comm_group_position(const mtf_comm *comm, mtf_axis_set axes);

/* out = op over the group of in (count elements); in == out is allowed. */
int mtf_comm_allreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                       mtf_reduce_op op, mtf_error *err);

/* The same, without blocking: starts the allreduce and returns; `out` (and `in`) must stay untouched until
 * mtf_comm_wait returns or mtf_comm_test reports it done. Every rank of the group must start its
 * collectives in the same order (blocking and non-blocking alike); requests may finish in any order.
 * MPI makes progress only inside MPI calls (OpenMPI has no progress thread by default): a caller that
 * computes meanwhile calls mtf_comm_test now and then. */
int mtf_comm_iallreduce(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, size_t count, mtf_dtype dtype,
                        mtf_reduce_op op, mtf_comm_request *req, mtf_error *err);
/* Lets a started collective progress; *done = 1 once it has finished (then req is inactive). A request
 * that is not active is done. */
int mtf_comm_test(mtf_comm *comm, mtf_comm_request *req, int *done, mtf_error *err);
/* Blocks until the collective has finished; an inactive request returns at once. */
int mtf_comm_wait(mtf_comm *comm, mtf_comm_request *req, mtf_error *err);

/* Concatenates the members' tensors (each rank x dims) along tensor axis `axis` in member order;
 * out has dims[axis] * group_size there. */
int mtf_comm_allgather(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_dtype dtype, int rank,
                       const int64_t *dims, int axis, mtf_error *err);

/* The members' buffers of block_bytes each, one after another in member order (no repacking; callers that
 * own device memory reorder the blocks themselves). */
int mtf_comm_allgather_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out_blocks, size_t block_bytes,
                              mtf_error *err);

/* Reduces the members' tensors and leaves member p with slice p along `axis` (dims[axis] / group_size;
 * dims[axis] must be divisible by the group size). */
int mtf_comm_reduce_scatter(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_dtype dtype,
                            mtf_reduce_op op, int rank, const int64_t *dims, int axis, mtf_error *err);

/* Block forms of reduce_scatter and alltoall, counted alike (for callers that pack device memory
 * themselves, as the executor does): in_blocks holds group_size blocks in member order. reduce_scatter:
 * member p gets the sum of the members' blocks p (block_count elements). alltoall: member p gets block q of
 * member q as its block q. */
int mtf_comm_reduce_scatter_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out,
                                   size_t block_count, mtf_dtype dtype, mtf_reduce_op op, mtf_error *err);
int mtf_comm_alltoall_blocks(mtf_comm *comm, mtf_axis_set axes, const void *in_blocks, void *out_blocks,
                             size_t block_bytes, mtf_error *err);

/* Splits tensor axis split_axis into group_size slices, sends slice p to member p, and concatenates what
 * arrives along concat_axis in member order: out dims are dims with split_axis / G and concat_axis * G.
 * split_axis == concat_axis is allowed (a transpose of slices). */
int mtf_comm_alltoall(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_dtype dtype, int rank,
                      const int64_t *dims, int split_axis, int concat_axis, mtf_error *err);

/* Along one mesh axis: position j receives the buffer of position source_of[j]; -1 means zeros.
 * Each position may be the source of at most one other. in and out must not overlap. */
int mtf_comm_permute(mtf_comm *comm, int mesh_axis, const void *in, void *out, size_t count, mtf_dtype dtype,
                     const int *source_of, mtf_error *err);

typedef enum mtf_shift_fill { MTF_SHIFT_WRAP = 0, MTF_SHIFT_ZERO = 1 } mtf_shift_fill;

/* Position j receives the buffer of position j - offset (wrapping around, or zeros past the ends). */
int mtf_comm_shift(mtf_comm *comm, int mesh_axis, const void *in, void *out, size_t count, mtf_dtype dtype,
                   int offset, mtf_shift_fill fill, mtf_error *err);

/* Copies buf of member `root` to every member of the group. */
int mtf_comm_broadcast(mtf_comm *comm, mtf_axis_set axes, void *buf, size_t count, mtf_dtype dtype, int root,
                       mtf_error *err);

int mtf_comm_barrier(mtf_comm *comm, mtf_error *err);
void mtf_comm_destroy(mtf_comm *comm);

#endif
