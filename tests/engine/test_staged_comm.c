/* The staged communicator (comm/staged_comm.h, what backend.comm: mpi and ranks sharing a GPU use) against
 * the plain MPI communicator: every collective over every set of mesh axes, on the mesh of argv[1], with
 * the same inputs; results must be bit for bit the plain ones.
 *
 *   mpiexec -n 4 test_staged_comm "b:2,m:2" backend|masked
 *
 * backend: buffers in the cpu backend's memory, staged through its download/upload
 * (exec/device_comm.c's adapter, as a session uses it). masked: "device" pointers are host pointers with
 * their top bits flipped, so any direct access to one (a missed staging copy handing device memory to MPI)
 * faults instead of passing; the copies unmask them. Also: the tensor forms that would repack device memory
 * on the host are refused on every rank alike. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_mpi.h"
#include "comm/mpi_comm.h"
#include "comm/staged_comm.h"
#include "exec/device_comm.h"

static mtf_comm *plain, *staged;
static mtf_backend *backend; /* backend mode */
static int masked;

#define MASK ((uintptr_t)0x5a5a000000000000ull) /* non-canonical on x86-64 and arm64: any access faults */

static void *mask(void *p) { return (void *)((uintptr_t)p ^ MASK); }
static const void *unmask(const void *p) { return (const void *)((uintptr_t)p ^ MASK); }

static int masked_to_host(void *ctx, void *host, const void *device, size_t bytes) {
  (void)ctx;
  memcpy(host, unmask(device), bytes);
  return MTF_OK;
}
static int masked_to_device(void *ctx, void *device, const void *host, size_t bytes) {
  (void)ctx;
  memcpy((void *)unmask(device), host, bytes);
  return MTF_OK;
}

static void *dev_alloc(size_t bytes) {
  if (masked) return mask(calloc(1, bytes + 1));
  return backend->mem->allocate(backend, bytes + 1);
}
static void dev_free(void *p) {
  if (masked) free((void *)unmask(p));
  else backend->mem->release(backend, p);
}
static void dev_put(void *dev, const void *host, size_t bytes) {
  if (masked) masked_to_device(NULL, dev, host, bytes);
  else backend->mem->upload(backend, dev, host, bytes);
}
static void dev_get(void *host, const void *dev, size_t bytes) {
  if (masked) masked_to_host(NULL, host, dev, bytes);
  else backend->mem->download(backend, host, dev, bytes);
}

static double value(int rank, int64_t i) { return (double)(((rank + 3) * 7919 + i * 104729) % 2003) / 7.0 - 140.0; }

static void fill(void *buf, mtf_dtype dtype, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double v = value(plain->rank, i);
    if (dtype == MTF_F32) ((float *)buf)[i] = (float)v;
    if (dtype == MTF_F64) ((double *)buf)[i] = v;
    if (dtype == MTF_I32) ((int32_t *)buf)[i] = (int32_t)(v * 7);
  }
}

/* One collective: `run` on the plain communicator with host buffers and on the staged one with device
 * buffers holding the same input; the outputs must be equal byte for byte. */
typedef int (*collective_fn)(mtf_comm *comm, mtf_axis_set axes, const void *in, void *out, mtf_error *err);

static void compare(const char *what, mtf_axis_set axes, collective_fn run, size_t in_bytes, size_t out_bytes,
                    mtf_dtype dtype, int in_place) {
  size_t elems = in_bytes / mtf_dtype_size(dtype);
  char *in = calloc(1, in_bytes + out_bytes + 1), *want = calloc(1, out_bytes + in_bytes + 1);
  char *got = calloc(1, out_bytes + in_bytes + 1);
  fill(in, dtype, (int64_t)elems);
  memcpy(want, in, in_bytes); /* in place: the input is the output buffer */
  void *d_in = dev_alloc(in_bytes), *d_out = in_place ? d_in : dev_alloc(out_bytes);
  dev_put(d_in, in, in_bytes);
  mtf_error err;
  int rc_plain = run(plain, axes, in_place ? (const void *)want : in, want, &err);
  int rc_staged = run(staged, axes, d_in, d_out, &err);
  if (rc_staged) fprintf(stderr, "%s: %s\n", what, err.msg);
  dev_get(got, d_out, out_bytes);
  CHECK(rc_plain == MTF_OK && rc_staged == MTF_OK);
  int same = memcmp(want, got, out_bytes) == 0;
  if (!same) fprintf(stderr, "rank %d: %s over axis set 0x%x differs from plain MPI\n", plain->rank, what, axes);
  CHECK(same);
  if (!in_place) dev_free(d_out);
  dev_free(d_in);
  free(in);
  free(want);
  free(got);
}

static size_t n_elems = 37; /* odd, so no size is a lucky multiple */
static mtf_dtype cur_dtype;
static mtf_reduce_op cur_op;

static int do_allreduce(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  return mtf_comm_allreduce(c, axes, in, out, n_elems, cur_dtype, cur_op, err);
}
static int do_allgather(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  return mtf_comm_allgather_blocks(c, axes, in, out, n_elems * 4, err);
}
static int do_reduce_scatter(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  return mtf_comm_reduce_scatter_blocks(c, axes, in, out, n_elems, MTF_F32, MTF_REDUCE_SUM, err);
}
static int do_alltoall(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  return mtf_comm_alltoall_blocks(c, axes, in, out, n_elems * 4, err);
}
static int do_broadcast(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  (void)in;
  return mtf_comm_broadcast(c, axes, out, n_elems, MTF_F32, mtf_comm_group_size(c, axes) - 1, err);
}
/* Two non-blocking allreduces in flight, finished in the other order: one by test polling, one by wait. */
static int do_iallreduce(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  (void)in;
  mtf_comm_request a, b;
  size_t half = n_elems / 2;
  char *second = (char *)out + half * 4;
  if (c == staged && masked) second = (char *)mask((char *)unmask(out) + half * 4);
  MTF_CHECK(mtf_comm_iallreduce(c, axes, out, out, half, MTF_F32, MTF_REDUCE_SUM, &a, err));
  MTF_CHECK(mtf_comm_iallreduce(c, axes, second, second, n_elems - half, MTF_F32, MTF_REDUCE_MAX, &b, err));
  int done = 0;
  while (!done) MTF_CHECK(mtf_comm_test(c, &b, &done, err));
  return mtf_comm_wait(c, &a, err);
}
static int cur_axis;
static int do_shift(mtf_comm *c, mtf_axis_set axes, const void *in, void *out, mtf_error *err) {
  (void)axes;
  return mtf_comm_shift(c, cur_axis, in, out, n_elems, MTF_F32, 1, MTF_SHIFT_WRAP, err);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc < 3) {
    fprintf(stderr, "usage: test_staged_comm MESH backend|masked\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  masked = strcmp(argv[2], "masked") == 0;
  mtf_shape mesh;
  mtf_error err;
  if (mtf_mesh_parse(argv[1], &mesh, &err) || mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &plain, &err))
    fail_job("communicator", &err);
  if (masked) {
    mtf_staging staging = {.ctx = NULL, .to_host = masked_to_host, .to_device = masked_to_device};
    if (mtf_comm_staged_create(plain, &staging, &staged, &err)) fail_job("staged communicator", &err);
  } else {
    mtf_backend_options cpu_options = {.kind = "cpu", .threads = 1};
    if (mtf_backend_create(&cpu_options, &backend, &err) || mtf_backend_staged_comm(backend, plain, &staged, &err))
      fail_job("staged communicator", &err);
    /* The session's choice on a host-memory backend: the host communicator itself; nccl refused. */
    mtf_comm *chosen = NULL;
    int owned = 1;
    CHECK(mtf_backend_step_comm(backend, plain, MTF_COMM_MPI, &chosen, &owned, &err) == MTF_OK && chosen == plain && !owned);
    CHECK(mtf_backend_step_comm(backend, plain, MTF_COMM_NCCL, &chosen, &owned, &err) == MTF_ERR_INVALID);
    CHECK_CONTAINS(err.msg, "backend.comm: nccl needs device memory", "use auto or mpi");
    CHECK(mtf_backend_step_comm(backend, plain, (mtf_comm_mode)7, &chosen, &owned, &err) == MTF_ERR_INVALID);
  }
  CHECK(staged->device_memory && !plain->device_memory && staged->size == plain->size && staged->rank == plain->rank);

  unsigned subsets = 1u << mesh.rank;
  for (unsigned s = 0; s < subsets; s++) {
    int g = mtf_comm_group_size(plain, s);
    size_t b = n_elems * 4;
    mtf_dtype dtypes[] = {MTF_F32, MTF_F64, MTF_I32};
    mtf_reduce_op ops[] = {MTF_REDUCE_SUM, MTF_REDUCE_MAX, MTF_REDUCE_MIN};
    for (int d = 0; d < 3; d++) {
      cur_dtype = dtypes[d];
      cur_op = ops[d];
      size_t bytes = n_elems * mtf_dtype_size(cur_dtype);
      compare("allreduce", s, do_allreduce, bytes, bytes, cur_dtype, 0);
      compare("allreduce in place", s, do_allreduce, bytes, bytes, cur_dtype, 1);
    }
    compare("allgather_blocks", s, do_allgather, b, b * (size_t)g, MTF_F32, 0);
    compare("reduce_scatter_blocks", s, do_reduce_scatter, b * (size_t)g, b, MTF_F32, 0);
    compare("alltoall_blocks", s, do_alltoall, b * (size_t)g, b * (size_t)g, MTF_F32, 0);
    compare("broadcast", s, do_broadcast, b, b, MTF_F32, 1);
    compare("iallreduce x2", s, do_iallreduce, b, b, MTF_F32, 1);
  }
  for (cur_axis = 0; cur_axis < mesh.rank; cur_axis++)
    compare("shift (wrap)", 1u << cur_axis, do_shift, n_elems * 4, n_elems * 4, MTF_F32, 0);

  /* Counted like the plain communicator's calls. */
  CHECK(staged->stats.calls[MTF_COLL_ALLREDUCE] == plain->stats.calls[MTF_COLL_ALLREDUCE]);
  CHECK(staged->stats.bytes_sent[MTF_COLL_ALLTOALL] == plain->stats.bytes_sent[MTF_COLL_ALLTOALL]);

  /* Forms that repack on the host: refused, on every rank (no rank is left waiting in MPI). */
  float dummy[8] = {0};
  int64_t dims[2] = {2, 4};
  CHECK(mtf_comm_allgather(staged, 1, dummy, dummy, MTF_F32, 2, dims, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "allgather", "device memory", "block form");
  CHECK(mtf_comm_alltoall(staged, 1, dummy, dummy, MTF_F32, 2, dims, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK(mtf_comm_shift(staged, 0, dummy, dummy, 1, MTF_F32, 1, MTF_SHIFT_ZERO, &err) == MTF_ERR_INVALID);
  CHECK(mtf_comm_barrier(staged, &err) == MTF_OK);

  mtf_comm_destroy(staged);
  mtf_backend_destroy(backend);
  mtf_comm_destroy(plain);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
