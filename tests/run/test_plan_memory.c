/* `mtf plan`'s per-rank memory against what a run allocates: builds the program of a config on every
 * rank of the job (its mesh must match), creates the training session, and compares the bytes the
 * session allocated with the plan's parameters + optimizer state + activation peak (within 10%). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "run/program.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  mtf_config_defaults(cfg);
  int rc = argc >= 2 ? mtf_config_load_file(cfg, argv[1], &err) : mtf_error_set(&err, MTF_ERR_INVALID, "usage: test_plan_memory CONFIG [key=value]...");
  for (int i = 2; i < argc && rc == MTF_OK; i++) rc = mtf_config_set(cfg, argv[i], &err);
  if (rc == MTF_OK) rc = mtf_config_validate(cfg, &err);
  mtf_comm *comm = NULL;
  mtf_program program;
  mtf_session *session = NULL, *apply = NULL;
  if (rc == MTF_OK) rc = mtf_comm_mpi_create(MPI_COMM_WORLD, &cfg->mesh_shape, &comm, &err);
  if (rc == MTF_OK) rc = mtf_program_build(cfg, comm->rank, &program, &err);
  if (rc == MTF_OK) rc = mtf_session_create(program.train_plan, comm, NULL, &session, &err);
  mtf_session_options shared = {.share_variables_with = session};
  if (rc == MTF_OK && program.apply_plan) rc = mtf_session_create(program.apply_plan, comm, &shared, &apply, &err);
  if (rc != MTF_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mtf_program_memory mem;
  mtf_program_memory_of(&program, cfg, &mem);
  int64_t planned = mem.parameters + mem.optimizer_state + mem.accumulators + mem.train_arena + mem.apply_arena;
  int64_t allocated = mtf_session_allocated_bytes(session) + (apply ? mtf_session_allocated_bytes(apply) : 0);
  double ratio = (double)allocated / (double)planned;
  printf("rank %d: planned %.2f MiB (parameters %.2f, optimizer state %.2f, accumulators %.2f, activations %.2f + "
         "%.2f), allocated %.2f MiB, ratio %.4f\n", rank, planned / 1048576.0, mem.parameters / 1048576.0,
         mem.optimizer_state / 1048576.0, mem.accumulators / 1048576.0, mem.train_arena / 1048576.0,
         mem.apply_arena / 1048576.0, allocated / 1048576.0, ratio);
  CHECK(ratio > 0.9 && ratio < 1.1);
  int status = check_mpi_summary();
  mtf_session_destroy(apply);
  mtf_session_destroy(session);
  mtf_program_free(&program);
  mtf_comm_destroy(comm);
  free(cfg);
  MPI_Finalize();
  return status;
}
