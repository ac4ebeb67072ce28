#define _POSIX_C_SOURCE 200809L
/* The emitter on a whole training step: configs/tiny.yaml's transformer (forward with dropout, backward,
 * AdamW or Adafactor update, gradient norm) emitted for a b:2,m:2 mesh of 4 CPU-plugin devices in one process, under a
 * layout splitting batch, heads, d_ff and vocab and one splitting d_model, run for a few steps through the
 * PJRT program layer (variables carried on the devices, dropout differing per step through the random
 * offset), against the cpu backend on one rank (mesh m:1) on the same token batches: the losses must agree
 * within 1e-4 relative, step by step (layout invariance of the engine: same graph, same initial values,
 * same masks).
 *
 *   mpiexec -n 1 test_pjrt_transformer [--steps N] [--config FILE] [--layout TEXT]
 *
 * Exit 77 (ctest SKIP) when no PJRT plugin is installed. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "../train_steps.h"
#include "comm/mpi_comm.h"
#include "exec/pjrt/program.h"
#include "run/program.h"

#define SKIP 77

static const char *optimizer = "adamw";

static int configure(mtf_config *cfg, const char *path, const char *mesh, const char *layout, mtf_error *err) {
  return test_train_configure(cfg, path, mesh, layout, optimizer, "train.batch=8", err);
}

/* Token ids of step s: a fixed function of (step, position), within the vocabulary. */
static void tokens_of(int step, int64_t n, int64_t vocab, int32_t *tokens, int32_t *targets) {
  for (int64_t i = 0; i < n; i++) {
    tokens[i] = (int32_t)((i * 7 + step * 13 + (i * i) % 11) % vocab);
    targets[i] = (int32_t)((i * 5 + step * 3 + 1) % vocab);
  }
}

/* The cpu backend, one rank, mesh m:1: the reference losses. */
static int cpu_losses(const char *path, int steps, double *losses, mtf_error *err) {
  mtf_config cfg;
  MTF_CHECK(configure(&cfg, path, "m:1", "", err));
  mtf_session_options options = {.backend = "cpu"};
  return test_train_steps(&cfg, 0, &options, 1e-2f, tokens_of, steps, losses, err);
}

/* The same steps on pjrt: the program's graph (rank 0's build), the train plan of every mesh rank made as
 * run/program.c makes rank 0's (fetches loss, token_loss, grad_norm; gradient buckets), emitted as one
 * module. */
static int pjrt_losses(mtf_pjrt_runtime *rt, const char *path, const char *mesh, const char *layout, int steps,
                       double *losses, mtf_error *err) {
  mtf_config cfg;
  MTF_CHECK(configure(&cfg, path, mesh, layout, err));
  mtf_program programs[1];
  mtf_plan **plans = NULL;
  int n_ranks = 0, built = 0;
  int rc = mtf_program_build(&cfg, 0, &programs[0], err);
  built = rc == MTF_OK;
  mtf_tensor fetches[3];
  if (rc == MTF_OK) {
    fetches[0] = programs[0].train_model.loss, fetches[1] = programs[0].train_model.token_loss;
    fetches[2] = programs[0].grad_norm;
    mtf_plan_options options = {.allreduce_bucket_bytes = (int64_t)(cfg.train.allreduce_bucket_mb * 1048576.0)};
    rc = mtf_pjrt_plans_create(programs[0].graph, &cfg.mesh_shape, &cfg.layout, 3, fetches, &options, &plans,
                               &n_ranks, err);
  }
  mtf_pjrt_module m = {0};
  mtf_pjrt_program *prog = NULL;
  if (rc == MTF_OK) rc = mtf_pjrt_emit((const mtf_plan *const *)plans, n_ranks, NULL, &m, err);
  if (rc == MTF_OK)
    printf("  %s '%s': module of %zu bytes, %d parameters, %d results, %d gradient buckets\n", mesh, layout, m.length,
           m.n_params, m.n_results, plans[0]->n_buckets);
  if (rc == MTF_OK) rc = mtf_pjrt_program_create(rt, plans, n_ranks, &m, NULL, &prog, err);
  const mtf_program *p = &programs[0];
  int64_t n = (int64_t)cfg.train.batch * cfg.model.length;
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n), *targets = malloc(sizeof(int32_t) * (size_t)n);
  for (int step = 0; rc == MTF_OK && step < steps; step++) {
    float lr = 1e-2f, t = (float)(step + 1), loss;
    tokens_of(step, n, cfg.model.vocab, tokens, targets);
    mtf_pjrt_program_set_random_offset(prog, (uint64_t)step);
    rc = mtf_pjrt_program_set_input(prog, p->learning_rate, &lr, err);
    if (rc == MTF_OK) rc = mtf_pjrt_program_set_input(prog, p->step, &t, err);
    if (rc == MTF_OK) rc = mtf_pjrt_program_set_input(prog, p->train_model.tokens, tokens, err);
    if (rc == MTF_OK) rc = mtf_pjrt_program_set_input(prog, p->train_model.targets, targets, err);
    if (rc == MTF_OK) rc = mtf_pjrt_program_run(prog, err);
    if (rc == MTF_OK) rc = mtf_pjrt_program_fetch(prog, p->train_model.loss, &loss, err);
    losses[step] = loss;
  }
  free(tokens);
  free(targets);
  mtf_pjrt_program_destroy(prog);
  mtf_pjrt_module_free(&m);
  mtf_pjrt_plans_destroy(plans, n_ranks);
  if (built) mtf_program_free(&programs[0]);
  return rc;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int steps = 3;
  const char *config = "configs/tiny.yaml", *extra_layout = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--config") == 0) config = argv[i + 1];
    else if (strcmp(argv[i], "--layout") == 0) extra_layout = argv[i + 1];
  }
  if (steps < 1 || steps > 64) steps = 3;
  char plugin[4096];
  mtf_error err = {0};
  if (mtf_pjrt_resolve_plugin(NULL, plugin, sizeof plugin, &err) != MTF_OK || access(plugin, R_OK) != 0) {
    printf("SKIP: no PJRT plugin installed; bash tools/install-deps.sh --pjrt installs %s\n", MTF_PJRT_CPU_PACKAGE);
    MPI_Finalize();
    return SKIP;
  }
  double want[64], got[64];
  mtf_pjrt_options options = {.plugin_path = plugin, .local_devices = 4};
  mtf_pjrt_runtime *rt = NULL;
  int rc = mtf_pjrt_open(&options, &rt, &err);
  if (rc != MTF_OK) fprintf(stderr, "pjrt: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  const char *layouts[][2] = {{"m:1", ""},
                              {"b:2;m:2", "batch:b;heads:m;d_ff:m;vocab:m"},
                              {"b:2;m:2", "batch:b;d_model:m"}};
  if (extra_layout) layouts[2][1] = extra_layout; /* --layout: another b:2,m:2 layout in place of the last */
  const char *optimizers[] = {"adamw", "adafactor"};
  for (int o = 0; rc == MTF_OK && o < 2; o++) {
  optimizer = optimizers[o];
  rc = cpu_losses(config, steps, want, &err);
  if (rc != MTF_OK) fprintf(stderr, "cpu: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  for (size_t l = 0; rc == MTF_OK && l < sizeof layouts / sizeof layouts[0]; l++) {
    int lrc = pjrt_losses(rt, config, layouts[l][0], layouts[l][1], steps, got, &err);
    if (lrc != MTF_OK) fprintf(stderr, "pjrt %s '%s': %s\n", layouts[l][0], layouts[l][1], err.msg);
    CHECK(lrc == MTF_OK);
    double worst = 0;
    for (int s = 0; lrc == MTF_OK && s < steps; s++) {
      double e = fabs(got[s] - want[s]) / fmax(1e-12, fabs(want[s]));
      if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
      printf("  step %d: cpu %.7f pjrt %.7f\n", s + 1, want[s], got[s]);
    }
    int pass = lrc == MTF_OK && worst <= 1e-4;
    printf("%s pjrt %s %s '%s': %d training steps, largest relative loss difference to cpu %.2e\n",
           pass ? "ok  " : "FAIL", optimizer, layouts[l][0], layouts[l][1], steps, worst);
    CHECK(pass);
  }
  }
  mtf_pjrt_close(rt);
  MPI_Finalize();
  return check_summary();
}
