/* `mtf commcheck`: run under mpiexec/srun before a long job to check that the job's ranks form the mesh,
 * that every sub-communicator connects the right ranks, and how fast an allreduce is over each set of
 * mesh axes. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/world.h"
#include "core/clock.h"

static void commcheck_usage(FILE *out) {
  fprintf(out,
          "usage: mpiexec -n N mtf commcheck --mesh SHAPE [--bytes N] [--iters K]\n"
          "\n"
          "Builds the mesh communicators, checks allreduce, allgather and broadcast over every set of mesh\n"
          "axes against the ranks each group must contain, and times an allreduce of --bytes per set.\n"
          "\n"
          "  --mesh SHAPE  mesh axes and sizes, e.g. 'b:2;m:2'; their product must equal the number of ranks\n"
          "  --bytes N     allreduce size for the timing (default 1048576)\n"
          "  --iters K     timed repetitions per axis set (default 5)\n"
          "  -h, --help    show this help\n");
}

/* A collective failed part-way: other ranks may be blocked in it, so the whole job must come down. */
static _Noreturn void abort_job(const mtf_error *err) {
  mtf_world_abort(MTF_EXIT_FAILURE, "commcheck", err);
}

/* Checks the group of axis set `axes` against the ranks the mesh says it holds; returns mismatches. */
static int check_axis_set(mtf_comm *comm, mtf_axis_set axes, mtf_error *err) {
  int group_size = mtf_comm_group_size(comm, axes), failures = 0;
  int *expected = malloc(sizeof(int) * (size_t)group_size);
  int32_t *gathered = malloc(sizeof(int32_t) * (size_t)group_size);
  mtf_mesh_group_ranks(&comm->mesh, axes, comm->rank, expected);

  int32_t sum = comm->rank + 1, expected_sum = 0;
  for (int i = 0; i < group_size; i++) expected_sum += expected[i] + 1;
  if (mtf_comm_allreduce(comm, axes, &sum, &sum, 1, MTF_I32, MTF_REDUCE_SUM, err)) abort_job(err);
  failures += sum != expected_sum;

  int32_t mine = comm->rank;
  int64_t dims[1] = {1};
  if (mtf_comm_allgather(comm, axes, &mine, gathered, MTF_I32, 1, dims, 0, err)) abort_job(err);
  for (int i = 0; i < group_size; i++) failures += gathered[i] != expected[i];

  int32_t root_rank = comm->rank;
  if (mtf_comm_broadcast(comm, axes, &root_rank, 1, MTF_I32, 0, err)) abort_job(err);
  failures += root_rank != expected[0];

  free(expected);
  free(gathered);
  return failures;
}

int mtf_cmd_commcheck(int argc, char **argv) {
  static const struct option options[] = {{"mesh", required_argument, 0, 'm'},
                                          {"bytes", required_argument, 0, 'b'},
                                          {"iters", required_argument, 0, 'i'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
  const char *mesh_text = NULL;
  long bytes = 1 << 20, iters = 5;
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
    char *end = NULL;
    switch (opt) {
      case 'm': mesh_text = optarg; break;
      case 'b':
      case 'i': {
        errno = 0;
        long value = strtol(optarg, &end, 10), most = opt == 'b' ? 1L << 32 : 1L << 20;
        if (*optarg == '\0' || *end != '\0' || errno == ERANGE || value < 1 || value > most) {
          fprintf(stderr, "mtf commcheck: --%s must be an integer from 1 to %ld, not '%s'\n",
                  opt == 'b' ? "bytes" : "iters", most, optarg);
          return MTF_EXIT_USAGE;
        }
        *(opt == 'b' ? &bytes : &iters) = value;
        break;
      }
      case 'h': commcheck_usage(stdout); return MTF_EXIT_OK;
      default: commcheck_usage(stderr); return MTF_EXIT_USAGE;
    }
  }
  if (!mesh_text || optind < argc) {
    fprintf(stderr, "mtf commcheck: %s\n\n", !mesh_text ? "--mesh is required" : "unexpected argument");
    commcheck_usage(stderr);
    return MTF_EXIT_USAGE;
  }

  mtf_error err;
  if (mtf_world_init(&argc, &argv) != MTF_OK) {
    fprintf(stderr, "mtf commcheck: error: MPI could not be started\n");
    return MTF_EXIT_FAILURE;
  }
  int world_rank = mtf_world_rank();
  mtf_shape mesh;
  mtf_comm *comm = NULL;
  /* Every rank sees the same mesh and job size, so every rank fails alike: rank 0 reports, all leave. */
  if (mtf_mesh_parse(mesh_text, &mesh, &err) || mtf_comm_world_create(&mesh, &comm, &err)) {
    if (world_rank == 0) fprintf(stderr, "mtf commcheck: error: %s\n", err.msg);
    mtf_world_finalize();
    return MTF_EXIT_FAILURE;
  }

  char mesh_str[MTF_SHAPE_STR_MAX];
  mtf_shape_format(&mesh, mesh_str, sizeof mesh_str);
  unsigned sets = 1u << mesh.rank;
  if (comm->rank == 0)
    printf("commcheck: mesh %s, %d ranks, %u axis sets, one sub-communicator each per rank\n", mesh_str,
           comm->size, sets);

  size_t count = (size_t)bytes / sizeof(float);
  if (count == 0) count = 1;
  float *buf = calloc(count, sizeof(float));
  int total_failures = 0;
  for (mtf_axis_set axes = 0; axes < sets; axes++) {
    int failures = check_axis_set(comm, axes, &err);
    if (mtf_comm_allreduce(comm, mtf_mesh_all_axes(&mesh), &failures, &failures, 1, MTF_I32, MTF_REDUCE_SUM, &err))
      abort_job(&err);
    total_failures += failures;

    if (mtf_comm_barrier(comm, &err)) abort_job(&err);
    double start = mtf_now_seconds();
    for (long i = 0; i < iters; i++)
      if (mtf_comm_allreduce(comm, axes, buf, buf, count, MTF_F32, MTF_REDUCE_SUM, &err)) abort_job(&err);
    double seconds = (mtf_now_seconds() - start) / (double)iters;
    if (mtf_comm_allreduce(comm, mtf_mesh_all_axes(&mesh), &seconds, &seconds, 1, MTF_F64, MTF_REDUCE_MAX, &err))
      abort_job(&err);
    if (comm->rank == 0 && mtf_comm_group_size(comm, axes) == 1) {
      char axes_text[128];
      printf("  axes %-12s group of 1    %s  (no communication)\n",
             mtf_mesh_axis_set_format(&mesh, axes, axes_text, sizeof axes_text), failures ? "WRONG RANKS" : "ok         ");
    } else if (comm->rank == 0) {
      char axes_text[128];
      printf("  axes %-12s group of %-4d %s  allreduce %zu bytes: %.3f ms (%.2f GB/s algorithm bandwidth)\n",
             mtf_mesh_axis_set_format(&mesh, axes, axes_text, sizeof axes_text), mtf_comm_group_size(comm, axes),
             failures ? "WRONG RANKS" : "ok         ", count * sizeof(float), seconds * 1e3,
             (double)(count * sizeof(float)) / seconds / 1e9);
    }
  }
  free(buf);
  if (comm->rank == 0)
    printf(total_failures ? "commcheck: FAILED: %d mismatches\n" : "commcheck: ok\n", total_failures);
  mtf_comm_destroy(comm);
  mtf_world_finalize();
  return total_failures ? MTF_EXIT_FAILURE : MTF_EXIT_OK;
}
