/* What the backend training tests share: a config with dropout on (so random masks must agree bit for bit)
 * for a mesh, layout and optimizer, and N training steps of a program on one backend, on token batches
 * that a test's own function chooses, returning the loss of every step. */
#ifndef MTF_TESTS_TRAIN_STEPS_H
#define MTF_TESTS_TRAIN_STEPS_H

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "comm/mpi_comm.h"
#include "run/program.h"

typedef void (*test_batch_fn)(int step, int64_t n, int64_t vocab, int32_t *tokens, int32_t *targets);

/* `extra` is one more `key=value` setting, or NULL. */
static inline int test_train_configure(mtf_config *cfg, const char *path, const char *mesh, const char *layout,
                                       const char *optimizer, const char *extra, mtf_error *err) {
  char set_mesh[256], set_layout[512], set_optimizer[128];
  snprintf(set_mesh, sizeof set_mesh, "mesh.shape=%s", mesh);
  snprintf(set_layout, sizeof set_layout, "mesh.layout=%s", layout);
  snprintf(set_optimizer, sizeof set_optimizer, "train.optimizer=%s", optimizer);
  mtf_config_defaults(cfg);
  MTF_CHECK(mtf_config_load_file(cfg, path, err));
  MTF_CHECK(mtf_config_set(cfg, set_mesh, err));
  MTF_CHECK(mtf_config_set(cfg, set_layout, err));
  MTF_CHECK(mtf_config_set(cfg, set_optimizer, err));
  MTF_CHECK(mtf_config_set(cfg, "model.dropout=0.1", err));
  if (extra) MTF_CHECK(mtf_config_set(cfg, extra, err));
  return mtf_config_validate(cfg, err);
}

/* `steps` steps of cfg's train program as rank `rank` of MPI_COMM_WORLD on a session with `options`, at a
 * constant learning rate, the random offset of step s being s (as mtf train sets it). */
static inline int test_train_steps(const mtf_config *cfg, int rank, const mtf_session_options *options, float lr,
                                   test_batch_fn batch, int steps, double *losses, mtf_error *err) {
  mtf_program p;
  mtf_config for_backend = *cfg; /* the plans of the backend that runs them (bf16 storage is cpu's) */
  if (options && options->backend) snprintf(for_backend.backend, sizeof for_backend.backend, "%s", options->backend);
  MTF_CHECK(mtf_program_build(&for_backend, rank, &p, err));
  mtf_comm *comm = NULL;
  mtf_session *s = NULL;
  int rc = mtf_comm_mpi_create(MPI_COMM_WORLD, &cfg->mesh_shape, &comm, err);
  if (rc == MTF_OK) rc = mtf_session_create(p.train_plan, comm, options, &s, err);
  int64_t n = (int64_t)cfg->train.batch * cfg->model.length;
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n), *targets = malloc(sizeof(int32_t) * (size_t)n);
  if (rc == MTF_OK && (!tokens || !targets)) rc = mtf_error_set(err, MTF_ERR_NOMEM, "test: no memory for a batch");
  for (int step = 0; rc == MTF_OK && step < steps; step++) {
    float t = (float)(step + 1), loss = NAN;
    batch(step, n, cfg->model.vocab, tokens, targets);
    mtf_session_set_random_offset(s, (uint64_t)step);
    rc = mtf_session_set_input(s, p.learning_rate, &lr, err);
    if (rc == MTF_OK) rc = mtf_session_set_input(s, p.step, &t, err);
    if (rc == MTF_OK) rc = mtf_session_set_input_int(s, p.train_model.tokens, tokens, err);
    if (rc == MTF_OK) rc = mtf_session_set_input_int(s, p.train_model.targets, targets, err);
    if (rc == MTF_OK) rc = mtf_session_run(s, err);
    if (rc == MTF_OK) rc = mtf_session_fetch(s, p.train_model.loss, &loss, err);
    losses[step] = loss;
  }
  free(tokens);
  free(targets);
  mtf_session_destroy(s);
  mtf_comm_destroy(comm);
  mtf_program_free(&p);
  return rc;
}

#endif
