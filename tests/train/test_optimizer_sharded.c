/* The optimizers on a mesh (argv[1]) under layouts that split the variables' dimensions give the same
 * parameters, step after step, and the same gradient norm as on one rank: Adafactor's factored moments
 * are means over split dims, and the global norm must count every element once (a replicated variable
 * not once per replica, a split one not just its local slice). */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "train_case.h"

#define STEPS 4
#define N_VARS 3

static int world_rank;

static void check_layout(const char *what, const train_case *tc, const train_history *reference,
                         const mtf_shape *mesh, mtf_comm *comm, const char *layout_text) {
  mtf_layout_rules rules;
  mtf_error err;
  train_history h;
  if (mtf_layout_rules_parse(layout_text, &rules, &err)) fail_job("layout", &err);
  if (train_case_run(tc, mesh, &rules, comm, STEPS, &h, &err)) fail_job(layout_text, &err);
  double worst = 0, worst_norm = 0;
  for (int t = 0; t < STEPS; t++) {
    worst_norm = fmax(worst_norm, fabs((double)h.grad_norm[t] - reference->grad_norm[t]) / reference->grad_norm[t]);
    for (int i = 0; i < N_VARS; i++) worst = fmax(worst, relative_error(h.after[t][i], reference->after[t][i], h.sizes[i]));
  }
  if (world_rank == 0)
    printf("%-34s %-22s parameters: max relative error %.2e, gradient norm %.2e\n", what, layout_text, worst,
           worst_norm);
  CHECK(worst <= 1e-5);
  CHECK(worst_norm <= 1e-5);
  train_history_free(&h);
}

static void check_optimizer(const char *what, const mtf_optimizer_config *cfg, const mtf_shape *mesh, mtf_comm *comm,
                            mtf_comm *self) {
  /* depth is the smallest dim of w3, so Adafactor factors it over (rows, cols) and averages over depth too. */
  const char *names[N_VARS] = {"layer_000/mlp/w", "layer_000/mlp/bias", "layer_000/attn/w"};
  const char *shapes[N_VARS] = {"rows:4,cols:8", "cols:8", "depth:2,rows:4,cols:8"};
  train_case tc;
  mtf_error err;
  if (train_case_build(&tc, cfg, N_VARS, names, shapes, &err)) fail_job("graph", &err);
  mtf_shape one = {0};
  mtf_layout_rules none = {0};
  train_history reference;
  if (train_case_run(&tc, &one, &none, self, STEPS, &reference, &err)) fail_job("one-rank run", &err);
  CHECK(relative_error(reference.after[STEPS - 1][0], reference.initial[0], reference.sizes[0]) > 1e-2);
  if (cfg->clip_grad_norm > 0) CHECK(reference.grad_norm[0] > cfg->clip_grad_norm);
  const char *axis0 = mesh->dims[0].name, *axis1 = mesh->dims[mesh->rank - 1].name;
  char layout[128];
  const char *single[] = {"rows", "cols", "depth"};
  for (int d = 0; d < 3; d++) {
    snprintf(layout, sizeof layout, "%s:%s", single[d], axis1);
    if (d == 2 && mesh->dims[mesh->rank - 1].size > 2) continue; /* depth:2 cannot be split 4 ways */
    check_layout(what, &tc, &reference, mesh, comm, layout);
  }
  if (mesh->rank == 2) {
    const char *pairs[] = {"rows:%s;cols:%s", "cols:%s;rows:%s", "depth:%s;cols:%s", "depth:%s;rows:%s"};
    for (int p = 0; p < 4; p++) {
      snprintf(layout, sizeof layout, pairs[p], axis0, axis1);
      check_layout(what, &tc, &reference, mesh, comm, layout);
    }
  }
  train_history_free(&reference);
  train_case_destroy(&tc);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  mtf_error err;
  mtf_shape mesh, one = {0};
  if (argc != 2 || mtf_mesh_parse(argv[1], &mesh, &err)) {
    fprintf(stderr, "usage: test_optimizer_sharded MESH\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mtf_comm *comm, *self;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err) || mtf_comm_mpi_create(MPI_COMM_SELF, &one, &self, &err))
    fail_job("communicator", &err);

  mtf_optimizer_config cfg;
  mtf_optimizer_defaults(MTF_OPT_ADAFACTOR, &cfg);
  check_optimizer("adafactor (unfactored: dims below 128)", &cfg, &mesh, comm, self);
  cfg.min_dim_size_to_factor = 0; /* factor these small variables, so sharded vr/vc are tested too */
  check_optimizer("adafactor (factored)", &cfg, &mesh, comm, self);
  cfg.clip_grad_norm = 1.0f;
  check_optimizer("adafactor + gradient clipping", &cfg, &mesh, comm, self);
  mtf_optimizer_defaults(MTF_OPT_ADAMW, &cfg);
  cfg.clip_grad_norm = 2.0f;
  check_optimizer("adamw + gradient clipping", &cfg, &mesh, comm, self);
  mtf_optimizer_defaults(MTF_OPT_SGD, &cfg);
  cfg.momentum = 0.9f;
  cfg.clip_grad_norm = 1.0f;
  check_optimizer("sgd momentum + gradient clipping", &cfg, &mesh, comm, self);

  int status = check_mpi_summary();
  mtf_comm_destroy(comm);
  mtf_comm_destroy(self);
  MPI_Finalize();
  return status;
}
