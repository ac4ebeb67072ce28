/* Communicator, sessions, loader and checkpoint paths shared by train, eval and generate (see setup.h). */
#include "run/setup.h"

#include <stdio.h>
#include <string.h>

#include "io/dataset.h"

mtf_session_options mtf_run_session_options(const mtf_config *cfg) {
  mtf_session_options options = {0};
  options.backend = cfg->backend;
  options.threads = mtf_backend_resolve_threads((int)cfg->threads, mtf_world_ranks_on_node());
  return options;
}

void mtf_run_print_backend(const mtf_session *session, int to_stderr) {
  if (mtf_world_rank() != 0 || !session) return;
  FILE *out = to_stderr ? stderr : stdout;
  fprintf(out, "backend: %s, %d ranks x %d threads\n", mtf_session_backend(session), mtf_world_size(),
          mtf_session_threads(session));
  fflush(out);
}

int mtf_run_agree(int rc, mtf_error *err) {
  mtf_error own = *err;
  int agreed = mtf_world_agree(rc, err);
  if (rc != MTF_OK) *err = own;
  return rc != MTF_OK ? rc : agreed;
}

int mtf_run_check_backend(const mtf_config *cfg, mtf_error *err) {
  /* The same config on every rank: an unknown backend fails everywhere alike, before anything is built. */
  MTF_CHECK(mtf_backend_check(cfg->backend, err));
  if (strcmp(cfg->backend, "pjrt") != 0) return MTF_OK;
  long mesh_devices = 1;
  for (int d = 0; d < cfg->mesh_shape.rank; d++) mesh_devices *= cfg->mesh_shape.dims[d].size;
  char desc[4096];
  /* Every rank opens its plugin and checks the same numbers, so all fail alike or none does. */
  int rc = mtf_backend_describe(cfg->backend, cfg->plugin, (int)cfg->local_devices, mesh_devices, mtf_world_size(),
                                desc, sizeof desc, err);
  if (mtf_world_rank() == 0 && desc[0]) {
    printf("%s\n", desc);
    fflush(stdout);
  }
  if (rc != MTF_OK) return rc;
  return mtf_error_set(err, MTF_ERR_INVALID,
                       "backend.kind pjrt: the plugin and devices are usable, but running a model on them (one "
                       "compiled program per step) is not built yet (issue 13); use backend.kind cpu");
}

int mtf_run_setup(mtf_run_state *st, const mtf_config *cfg, int with_training, mtf_error *err) {
  memset(st, 0, sizeof *st);
  st->cfg = cfg;
  st->rank = mtf_world_rank();
  mtf_error_clear(err);
  mtf_session_options options = mtf_run_session_options(cfg);
  MTF_CHECK(mtf_run_check_backend(cfg, err));
  /* Layout errors first (every rank builds rank 0's plan, so they are alike everywhere, and more useful than
   * a size mismatch); only running out of memory can fail on one rank, hence the agreement. */
  int rc = mtf_run_agree(mtf_program_build(cfg, 0, &st->program, err), err);
  if (rc == MTF_OK && st->rank != 0) mtf_program_free(&st->program);
  if (rc == MTF_OK) rc = mtf_comm_world_create(&cfg->mesh_shape, &st->comm, err);
  if (rc == MTF_OK && st->rank != 0) rc = mtf_program_build(cfg, st->comm->rank, &st->program, err);
  if (rc == MTF_OK && with_training) rc = mtf_session_create(st->program.train_plan, st->comm, &options, &st->train, err);
  options.share_variables_with = st->train;
  if (rc == MTF_OK && with_training && st->program.apply_plan)
    rc = mtf_session_create(st->program.apply_plan, st->comm, &options, &st->apply, err);
  if (rc == MTF_OK) rc = mtf_session_create(st->program.eval_plan, st->comm, &options, &st->eval, err);
  if (rc == MTF_OK && st->program.dropless_plan) {
    options.share_variables_with = st->train ? st->train : st->eval;
    rc = mtf_session_create(st->program.dropless_plan, st->comm, &options, &st->dropless, err);
  }
  /* Building a rank's plan and allocating its memory can fail on one rank alone (out of memory): agree,
   * so that no rank goes on into a collective the failed one will never join. */
  if (st->comm) rc = mtf_comm_agree(st->comm, rc, err);
  return rc;
}

void mtf_run_teardown(mtf_run_state *st) {
  mtf_session_destroy(st->dropless); /* the sessions that share the train (or eval) session's variables first */
  mtf_session_destroy(st->eval);
  mtf_session_destroy(st->apply);
  mtf_session_destroy(st->train);
  mtf_program_free(&st->program);
  if (st->comm) mtf_comm_destroy(st->comm);
  st->eval = st->apply = st->train = NULL;
  st->comm = NULL;
}

int mtf_run_open_loader(const mtf_run_state *st, const char *data, uint64_t seed, int prefetch, mtf_loader **out,
                        mtf_error *err) {
  const mtf_config *cfg = st->cfg;
  mtf_loader_options opts = {.data = data,
                             .batch_size = cfg->train.batch,
                             .length = cfg->model.length,
                             .seed = seed,
                             .prefetch = prefetch,
                             .vocab_limit = cfg->model.vocab,
                             .comm = st->comm};
  /* A model smaller than the shards' vocabulary is an error now, not at the first large id (which may be
   * hours into training). Every rank reads the same shard attributes, so all fail alike. */
  mtf_dataset dataset;
  int rc = mtf_dataset_open(data, cfg->model.length, &dataset, err);
  if (rc == MTF_OK) {
    if (dataset.max_vocab_size > cfg->model.vocab)
      rc = mtf_error_set(err, MTF_ERR_INVALID,
                         "model.vocab %lld is smaller than the shards' vocab_size %lld: token id %lld would be outside "
                         "the model's vocabulary; set model.vocab to at least %lld",
                         (long long)cfg->model.vocab, (long long)dataset.max_vocab_size,
                         (long long)dataset.max_vocab_size - 1, (long long)dataset.max_vocab_size);
    mtf_dataset_close(&dataset);
  }
  if (rc == MTF_OK) rc = mtf_loader_open(&opts, &cfg->mesh_shape, &cfg->layout, st->comm->rank, out, err);
  return rc ? mtf_error_prefix(err, "%s: data", cfg->source) : MTF_OK;
}

mtf_ckpt_model mtf_run_checkpoint_model(mtf_run_state *st, int training) {
  /* Training: the plan and session that hold the optimizer slots too (with microbatches, the apply ones). */
  mtf_session *train = st->apply ? st->apply : st->train;
  mtf_ckpt_model model = {st->program.graph, training ? mtf_program_state_plan(&st->program) : st->program.eval_plan,
                          training ? train : st->eval, st->comm, st->program.train_model.params,
                          st->program.train_model.n_params};
  return model;
}

void mtf_run_checkpoint_dir(const mtf_config *cfg, char *dir, size_t size) {
  snprintf(dir, size, "%s/checkpoints", cfg->run_dir);
}

_Noreturn void mtf_run_abort(const char *what, const mtf_error *err) { mtf_world_abort(1, what, err); }
