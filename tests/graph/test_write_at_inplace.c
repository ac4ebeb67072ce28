/* write_at assigned back to its variable (the decode step's cache write), through lowering and the
 * executor: the plan writes into the variable's own storage (the write_at step's output is the variable's
 * buffer, no copy step for the assign), unless something else reads the variable (then the write goes to a
 * new buffer and the assign copies it, so the other reader sees the old value). Over several runs, with
 * positions inside and outside the dim and the value in another dimension order, the variable and a reader
 * of the written tensor equal a double-precision reference kept here, on every layout of the job's mesh
 * (argv[1], one axis): whole, the written dim split (each rank writes its own range), the rows split. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "mtf.h"

enum { B = 2, M = 6, D = 4 };

static mtf_shape shape_of(const char *text) {
  mtf_shape s;
  mtf_error err;
  if (mtf_shape_parse(text, "test", &s, &err)) fail_job("shape", &err);
  return s;
}

/* Copy steps and where the write_at step writes. */
static void check_plan(const mtf_plan *p, int shared) {
  int copies = 0, writes = 0, into_variable = 0;
  for (int i = 0; i < p->n_steps; i++) {
    const mtf_step *s = &p->steps[i];
    copies += s->kind == MTF_STEP_COPY;
    if (s->kind == MTF_STEP_KERNEL && s->op == MTF_OP_WRITE_AT) {
      writes++;
      into_variable = s->out == s->in[0] && p->buffers[s->out].kind == MTF_BUF_VARIABLE;
    }
  }
  CHECK(writes == 1);
  CHECK(copies == (shared ? 1 : 0));
  CHECK(into_variable == !shared);
}

static void run_case(int shared, const char *layout, const mtf_shape *mesh, mtf_comm *comm, int rank) {
  mtf_graph *g = mtf_graph_create(7);
  mtf_shape cache_shape = shape_of("b:2,m:6,d:4"), value_shape = shape_of("d:4,b:2"), rows = shape_of("b:2");
  mtf_shape bd = shape_of("b:2,d:4"), scalar = {0};
  mtf_tensor cache = mtf_variable(g, "cache", &cache_shape, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor value = mtf_input(g, "value", &value_shape);
  mtf_tensor positions = mtf_input_int(g, "positions", &rows);
  mtf_tensor written = mtf_write_at(g, cache, value, positions, "m");
  mtf_tensor fetches[2] = {mtf_reduce_sum(g, written, &bd), MTF_NO_TENSOR};
  if (shared) fetches[1] = mtf_reduce_sum(g, cache, &scalar); /* reads the old cache */
  mtf_assign(g, cache, written);
  mtf_error err;
  mtf_layout_rules rules;
  mtf_plan *plan;
  mtf_session *s;
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err) ||
      mtf_plan_create(g, mesh, &rules, rank, 1 + shared, fetches, &plan, &err) ||
      mtf_session_create(plan, comm, &options, &s, &err))
    fail_job(layout, &err);
  check_plan(plan, shared);

  float cache_now[B * M * D], got[B * M * D], values[D * B], sums[B * D], old_sum;
  double ref[B * M * D];
  if (mtf_session_fetch(s, cache, cache_now, &err)) fail_job("fetch", &err);
  for (int i = 0; i < B * M * D; i++) ref[i] = cache_now[i];
  const int32_t position_runs[3][B] = {{1, 5}, {0, -1}, {6, 1}}; /* -1 and 6: outside m, nothing written */
  double worst = 0;
  for (int run = 0; run < 3; run++) {
    for (int i = 0; i < D * B; i++) values[i] = (float)(run * 10 + i) * 0.25f - 1.0f;
    double old = 0;
    for (int i = 0; i < B * M * D; i++) old += ref[i];
    for (int b = 0; b < B; b++) {
      int at = position_runs[run][b];
      if (at < 0 || at >= M) continue;
      for (int d = 0; d < D; d++) ref[(b * M + at) * D + d] = values[d * B + b];
    }
    if (mtf_session_set_input(s, value, values, &err) ||
        mtf_session_set_input_int(s, positions, position_runs[run], &err) || mtf_session_run(s, &err) ||
        mtf_session_fetch(s, fetches[0], sums, &err) || mtf_session_fetch(s, cache, got, &err) ||
        (shared && mtf_session_fetch(s, fetches[1], &old_sum, &err)))
      fail_job(layout, &err);
    for (int i = 0; i < B * M * D; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
    for (int b = 0; b < B; b++)
      for (int d = 0; d < D; d++) {
        double sum = 0;
        for (int m = 0; m < M; m++) sum += ref[(b * M + m) * D + d];
        worst = fmax(worst, fabs(sums[b * D + d] - sum) / 8);
      }
    if (shared) worst = fmax(worst, fabs(old_sum - old) / 64);
  }
  CHECK(worst < 1e-5);
  if (rank == 0)
    printf("%s %s layout '%s': max error %.2e\n", worst < 1e-5 ? "ok  " : "FAIL", shared ? "shared  " : "in place",
           layout, worst);
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_error err;
  mtf_shape mesh;
  if (argc != 2 || mtf_mesh_parse(argv[1], &mesh, &err)) {
    fprintf(stderr, "usage: test_write_at_inplace MESH (one axis)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mtf_comm *comm;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail_job("communicator", &err);
  const char *axis = mesh.dims[0].name;
  char layouts[4][2 * MTF_NAME_MAX + 4] = {""};
  snprintf(layouts[1], sizeof layouts[1], "m:%s", axis);
  snprintf(layouts[2], sizeof layouts[2], "b:%s", axis);
  snprintf(layouts[3], sizeof layouts[3], "d:%s", axis);
  for (int shared = 0; shared < 2; shared++)
    for (int l = 0; l < 4; l++) {
      int64_t n = mesh.dims[0].size;
      if ((l == 1 && M % n) || (l == 2 && B % n) || (l == 3 && D % n)) continue;
      run_case(shared, layouts[l], &mesh, comm, rank);
    }
  mtf_comm_destroy(comm);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
