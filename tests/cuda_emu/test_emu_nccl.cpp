/* The NCCL communicator (src/comm/nccl_comm.c) on the emulator's NCCL over MPI, against the MPI communicator,
 * on the mesh given as argv[1]: for every set of mesh axes and every dtype, allreduce (sum, max, min; in
 * place and not; blocking, and non-blocking finished by wait and by test), allgather, reduce-scatter,
 * alltoall, broadcast and the shift along each axis give the same bytes through both. Inputs are random
 * floats whose sums round, so an order of reduction other than MPI's shows as a difference.
 *
 * Each process has a GPU of its own (MTF_EMU_GPUS=per-process, set here before any CUDA call), so the
 * communicator is NCCL's, not the staging one. With --expect-init-failure the job was started with
 * MTF_EMU_NCCL_FAIL_INIT=R: rank R's ncclCommInitRank fails while its peers wait in theirs, and creation must
 * end the whole job (the ctest runs that under `timeout 10` and checks the exit status and the reason). */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_runtime.h"
#include "nccl.h"

extern "C" {
#include "check_mpi.h"
#include "comm/dtype.h"
#include "comm/mpi_comm.h"
#include "comm/nccl_comm.h"
#include "core/bf16.h"
#include "core/mesh.h"
}

static mtf_comm *mpi, *nccl;
static int world_rank;
static uint64_t seed = 1;

static void run_ok(int rc, const mtf_error *err, const char *what) {
  if (rc != MTF_OK) fail_job(what, err);
}

/* Random values of `dtype`, different on every rank and call. */
static std::vector<char> random_bytes(mtf_dtype dtype, size_t count) {
  std::vector<char> out(count * mtf_dtype_size(dtype));
  for (size_t i = 0; i < count; i++) {
    double u = (double)((seed = seed * 6364136223846793005ull + 1442695040888963407ull + (uint64_t)world_rank) >> 11) /
               9007199254740992.0;
    double v = (u - 0.5) * 200.0;
    switch (dtype) {
      case MTF_F32: ((float *)out.data())[i] = (float)v; break;
      case MTF_F64: ((double *)out.data())[i] = v; break;
      case MTF_I32: ((int32_t *)out.data())[i] = (int32_t)(v * 1000.0); break;
      case MTF_BF16: ((mtf_bf16 *)out.data())[i] = mtf_bf16_from_float((float)v); break;
    }
  }
  return out;
}

/* A device copy of host bytes, freed by the caller. */
static void *to_device(const std::vector<char> &host) {
  void *d = NULL;
  if (cudaMalloc(&d, host.size() ? host.size() : 1) != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaMalloc failed\n", world_rank);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (!host.empty()) cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice);
  return d;
}

static std::vector<char> to_host(const void *d, size_t bytes) {
  std::vector<char> h(bytes);
  if (bytes) cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
  return h;
}

static int same(const std::vector<char> &a, const std::vector<char> &b, const char *what, mtf_axis_set axes,
                mtf_dtype dtype) {
  int ok = a.size() == b.size() && memcmp(a.data(), b.data(), a.size()) == 0;
  if (!ok)
    fprintf(stderr, "rank %d: %s over axis set 0x%x in %s: NCCL and MPI differ\n", world_rank, what, axes,
            mtf_dtype_name(dtype));
  return ok;
}

static void test_allreduce(mtf_axis_set axes, mtf_dtype dtype, mtf_reduce_op op, size_t count) {
  mtf_error err;
  std::vector<char> in = random_bytes(dtype, count), want(in.size());
  run_ok(mtf_comm_allreduce(mpi, axes, in.data(), want.data(), count, dtype, op, &err), &err, "MPI allreduce");
  void *d_in = to_device(in), *d_out = to_device(std::vector<char>(in.size()));
  run_ok(mtf_comm_allreduce(nccl, axes, d_in, d_out, count, dtype, op, &err), &err, "NCCL allreduce");
  CHECK(same(to_host(d_out, in.size()), want, "allreduce", axes, dtype));
  /* in place */
  run_ok(mtf_comm_allreduce(nccl, axes, d_in, d_in, count, dtype, op, &err), &err, "NCCL allreduce in place");
  CHECK(same(to_host(d_in, in.size()), want, "allreduce in place", axes, dtype));
  if (op == MTF_REDUCE_SUM) { /* non-blocking: finished by wait, then by polling test */
    for (int by_test = 0; by_test < 2; by_test++) {
      cudaMemcpy(d_in, in.data(), in.size(), cudaMemcpyHostToDevice);
      mtf_comm_request req;
      memset(&req, 0, sizeof req);
      run_ok(mtf_comm_iallreduce(nccl, axes, d_in, d_in, count, dtype, op, &req, &err), &err, "NCCL iallreduce");
      int done = 0;
      if (by_test)
        while (!done) run_ok(mtf_comm_test(nccl, &req, &done, &err), &err, "NCCL test");
      else
        run_ok(mtf_comm_wait(nccl, &req, &err), &err, "NCCL wait");
      CHECK(!req.active);
      CHECK(same(to_host(d_in, in.size()), want, by_test ? "iallreduce + test" : "iallreduce + wait", axes, dtype));
    }
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

static void test_blocks(mtf_axis_set axes, mtf_dtype dtype) {
  mtf_error err;
  int g = mtf_comm_group_size(mpi, axes);
  size_t count = 37, bytes = count * mtf_dtype_size(dtype);
  /* allgather: each member's block in member order */
  std::vector<char> mine = random_bytes(dtype, count), want(bytes * (size_t)g);
  run_ok(mtf_comm_allgather_blocks(mpi, axes, mine.data(), want.data(), bytes, &err), &err, "MPI allgather");
  void *d_mine = to_device(mine), *d_all = to_device(std::vector<char>(want.size()));
  run_ok(mtf_comm_allgather_blocks(nccl, axes, d_mine, d_all, bytes, &err), &err, "NCCL allgather");
  CHECK(same(to_host(d_all, want.size()), want, "allgather", axes, dtype));
  /* alltoall: block q to member q */
  std::vector<char> blocks = random_bytes(dtype, count * (size_t)g), want_a2a(blocks.size());
  run_ok(mtf_comm_alltoall_blocks(mpi, axes, blocks.data(), want_a2a.data(), bytes, &err), &err, "MPI alltoall");
  void *d_blocks = to_device(blocks), *d_a2a = to_device(std::vector<char>(blocks.size()));
  run_ok(mtf_comm_alltoall_blocks(nccl, axes, d_blocks, d_a2a, bytes, &err), &err, "NCCL alltoall");
  CHECK(same(to_host(d_a2a, blocks.size()), want_a2a, "alltoall", axes, dtype));
  /* reduce-scatter: the sum of every member's block q to member q (sums only for bfloat16) */
  std::vector<char> want_rs(bytes);
  run_ok(mtf_comm_reduce_scatter_blocks(mpi, axes, blocks.data(), want_rs.data(), count, dtype, MTF_REDUCE_SUM, &err),
         &err, "MPI reduce-scatter");
  void *d_rs = to_device(std::vector<char>(bytes));
  run_ok(mtf_comm_reduce_scatter_blocks(nccl, axes, d_blocks, d_rs, count, dtype, MTF_REDUCE_SUM, &err), &err,
         "NCCL reduce-scatter");
  CHECK(same(to_host(d_rs, bytes), want_rs, "reduce-scatter", axes, dtype));
  /* broadcast from the group's last member */
  std::vector<char> want_b = mine;
  run_ok(mtf_comm_broadcast(mpi, axes, want_b.data(), count, dtype, g - 1, &err), &err, "MPI broadcast");
  run_ok(mtf_comm_broadcast(nccl, axes, d_mine, count, dtype, g - 1, &err), &err, "NCCL broadcast");
  CHECK(same(to_host(d_mine, bytes), want_b, "broadcast", axes, dtype));
  cudaFree(d_mine);
  cudaFree(d_all);
  cudaFree(d_blocks);
  cudaFree(d_a2a);
  cudaFree(d_rs);
}

/* A shift along one axis by one position, wrapping (sendrecv: to the next member, from the previous). */
static void test_shift(int axis) {
  const mtf_shift_fill fill = MTF_SHIFT_WRAP;
  mtf_error err;
  size_t count = 29;
  std::vector<char> in = random_bytes(MTF_F32, count), want(in.size(), 1);
  run_ok(mtf_comm_shift(mpi, axis, in.data(), want.data(), count, MTF_F32, 1, fill, &err), &err, "MPI shift");
  void *d_in = to_device(in), *d_out = to_device(std::vector<char>(in.size(), 1));
  run_ok(mtf_comm_shift(nccl, axis, d_in, d_out, count, MTF_F32, 1, fill, &err), &err, "NCCL shift");
  CHECK(same(to_host(d_out, in.size()), want, "shift", 1u << axis, MTF_F32));
  cudaFree(d_in);
  cudaFree(d_out);
}

int main(int argc, char **argv) {
  setenv("MTF_EMU_GPUS", "per-process", 1);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int expect_init_failure = argc == 3 && strcmp(argv[2], "--expect-init-failure") == 0;
  mtf_shape mesh;
  mtf_error err;
  if (argc < 2 || mtf_mesh_parse(argv[1], &mesh, &err) != MTF_OK) {
    if (world_rank == 0) fprintf(stderr, "usage: test_emu_nccl MESH [--expect-init-failure]\n");
    MPI_Finalize();
    return 2;
  }
  seed += (uint64_t)world_rank * 977;
  run_ok(mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &mpi, &err), &err, "MPI communicator");
  int shared = 1;
  char why[320];
  run_ok(mtf_comm_nccl_gpus_shared(mpi, &shared, why, sizeof why, &err), &err, "GPU survey");
  CHECK(!shared);
  long calls_before = mtf_emu_nccl_calls();
  int rc = mtf_comm_nccl_create(mpi, NULL, NULL, &nccl, &err);
  if (expect_init_failure) { /* creation must have ended the job: reaching here on any rank is the failure */
    fprintf(stderr, "rank %d: nccl creation returned (%d: %s) instead of ending the job\n", world_rank, rc,
            rc ? err.msg : "ok");
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  run_ok(rc, &err, "NCCL communicator");
  CHECK(strcmp(nccl->ops->name, "nccl") == 0 && nccl->device_memory);

  mtf_dtype dtypes[] = {MTF_F32, MTF_F64, MTF_I32, MTF_BF16};
  for (mtf_axis_set axes = 0; axes <= mtf_mesh_all_axes(&mesh); axes++) {
    for (mtf_dtype dtype : dtypes) {
      size_t counts[] = {1, 1000};
      for (size_t count : counts) {
        test_allreduce(axes, dtype, MTF_REDUCE_SUM, count);
        if (dtype != MTF_BF16) { /* comm.c lets only sums of bfloat16 through */
          test_allreduce(axes, dtype, MTF_REDUCE_MAX, count);
          test_allreduce(axes, dtype, MTF_REDUCE_MIN, count);
        }
      }
      test_blocks(axes, dtype);
    }
  }
  for (int axis = 0; axis < mesh.rank; axis++) test_shift(axis); /* zero fill is host repacking, refused here */
  /* The collectives over groups of more than one went through NCCL calls, not the staging copies. */
  int groups_of_many = 0;
  for (mtf_axis_set axes = 1; axes <= mtf_mesh_all_axes(&mesh); axes++) groups_of_many |= mtf_comm_group_size(mpi, axes) > 1;
  CHECK(!groups_of_many || mtf_emu_nccl_calls() > calls_before);
  run_ok(mtf_comm_barrier(nccl, &err), &err, "NCCL barrier");
  mtf_comm_destroy(nccl);
  mtf_comm_destroy(mpi);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
