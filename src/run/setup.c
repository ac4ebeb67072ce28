/* Communicator, sessions, loader and checkpoint paths shared by train, eval and generate (see setup.h). */
#include "run/setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset.h"
#include "run/node_memory.h"

static mtf_precision precision_of(const mtf_config *cfg) {
  return cfg->precision == MTF_NUMBERS_BF16 ? MTF_PRECISION_BF16 : MTF_PRECISION_FP32;
}

mtf_backend_options mtf_run_backend_options(const mtf_config *cfg) {
  mtf_backend_options o = {.kind = cfg->backend, .threads = (int)cfg->threads, .plugin = cfg->plugin,
                           .local_devices = (int)cfg->local_devices,
                           .device = cfg->device >= 0 ? (int)cfg->device : MTF_DEVICE_FROM_LOCAL_RANK,
                           .tf32 = cfg->tf32, .precision = precision_of(cfg)};
  return o;
}

mtf_session_options mtf_run_session_options(const mtf_config *cfg) {
  mtf_session_options options = {0};
  options.backend = cfg->backend;
  options.threads = mtf_backend_resolve_threads((int)cfg->threads, mtf_world_ranks_on_node());
  options.plugin = cfg->plugin;
  options.local_devices = (int)cfg->local_devices;
  options.device_set = cfg->device >= 0;
  options.device = (int)cfg->device;
  options.tf32 = cfg->tf32;
  options.precision = precision_of(cfg);
  options.comm = cfg->comm;
  return options;
}

void mtf_run_print_backend(const mtf_session *session, int to_stderr) {
  if (mtf_world_rank() != 0 || !session) return;
  FILE *out = to_stderr ? stderr : stdout;
  const mtf_backend_caps *caps = mtf_backend_capabilities(mtf_session_backend(session));
  if (caps && caps->one_program) {
    int threads = mtf_session_threads(session);
    char pool[96] = "";
    if (threads > 0) snprintf(pool, sizeof pool, ", %d host threads (PJRT_NPROC)", threads);
    fprintf(out, "backend: pjrt, %d process x %d devices%s, one compiled program per step\n", mtf_world_size(),
            mtf_session_devices(session), pool);
  }
  else if (caps && caps->gpu)
    fprintf(out, "backend: %s, %d ranks x 1 GPU (the %s: line above names rank 0's), collectives %s\n",
            mtf_session_backend(session), mtf_world_size(), mtf_session_backend(session),
            mtf_session_collectives(session));
  else if (strcmp(mtf_session_collectives(session), "mpi") != 0) /* device memory: say which path */
    fprintf(out, "backend: %s, %d ranks x %d threads, collectives %s\n", mtf_session_backend(session),
            mtf_world_size(), mtf_session_threads(session), mtf_session_collectives(session));
  else
    fprintf(out, "backend: %s, %d ranks x %d threads%s%s\n", mtf_session_backend(session), mtf_world_size(),
            mtf_session_threads(session), mtf_session_bf16_text(session) ? ", " : "",
            mtf_session_bf16_text(session) ? mtf_session_bf16_text(session) : "");
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
  const mtf_backend_caps *caps = mtf_backend_capabilities(cfg->backend);
  long mesh_devices = 1;
  for (int d = 0; d < cfg->mesh_shape.rank; d++) mesh_devices *= cfg->mesh_shape.dims[d].size;
  char desc[4096];
  /* Every rank opens its plugin (looks for its GPU) and checks the same numbers, so all fail alike or none
   * does (a node without GPUs fails on each of its ranks: mtf_run_agree then ends the job with the reason). */
  mtf_backend_options options = mtf_run_backend_options(cfg);
  int rc = mtf_backend_describe(&options, mesh_devices, mtf_world_size(), desc, sizeof desc, err);
  if (mtf_world_rank() == 0 && desc[0]) {
    printf("%s\n", desc);
    fflush(stdout);
  }
  /* pjrt's also refuses more than one process, with its plugin's reason (exec/pjrt/backend.c). */
  if (rc == MTF_OK && cfg->train.microbatches > 1 && !caps->microbatches)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.kind %s: train.microbatches > 1 is not supported yet; use 1",
                         cfg->backend);
  return rc;
}

/* backend pjrt: one process, the mesh's devices through one compiled program per plan (see setup.h). */
static int setup_pjrt(mtf_run_state *st, const mtf_config *cfg, int with_training, mtf_error *err) {
  mtf_config *host = malloc(sizeof *host);
  if (!host) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  *host = *cfg;
  for (int d = 0; d < host->mesh_shape.rank; d++) host->mesh_shape.dims[d].size = 1;
  st->host_mesh = host->mesh_shape;
  int rc = mtf_program_build(host, 0, &st->program, err);
  if (rc == MTF_OK) rc = mtf_comm_world_create(&host->mesh_shape, &st->comm, err);
  free(host);
  int n = 1;
  for (int d = 0; d < cfg->mesh_shape.rank; d++) n *= (int)cfg->mesh_shape.dims[d].size;
  st->device_plans = rc == MTF_OK ? calloc((size_t)n, sizeof *st->device_plans) : NULL;
  if (rc == MTF_OK && !st->device_plans) rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  if (rc == MTF_OK) st->n_devices = n;
  for (int r = 0; rc == MTF_OK && r < n; r++)
    rc = mtf_program_plans_for(&st->program, cfg, &cfg->mesh_shape, &cfg->layout, r, &st->device_plans[r], err);
  mtf_plan **kind = rc == MTF_OK ? malloc(sizeof *kind * (size_t)n * 4) : NULL;
  if (rc == MTF_OK && !kind) rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  mtf_plan **train = kind, **apply = kind + n, **eval = kind + 2 * n, **dropless = kind + 3 * n;
  for (int r = 0; rc == MTF_OK && r < n; r++) {
    train[r] = st->device_plans[r].train;
    apply[r] = st->device_plans[r].apply;
    eval[r] = st->device_plans[r].eval;
    dropless[r] = st->device_plans[r].dropless;
  }
  mtf_session_options options = mtf_run_session_options(cfg);
  if (rc == MTF_OK && with_training)
    rc = mtf_session_create_spmd(st->program.train_plan, train, n, st->comm, &options, &st->train, err);
  options.share_variables_with = st->train;
  if (rc == MTF_OK && with_training && st->program.apply_plan)
    rc = mtf_session_create_spmd(st->program.apply_plan, apply, n, st->comm, &options, &st->apply, err);
  if (rc == MTF_OK) rc = mtf_session_create_spmd(st->program.eval_plan, eval, n, st->comm, &options, &st->eval, err);
  if (rc == MTF_OK && st->program.dropless_plan) {
    options.share_variables_with = st->train ? st->train : st->eval;
    rc = mtf_session_create_spmd(st->program.dropless_plan, dropless, n, st->comm, &options, &st->dropless, err);
  }
  free(kind);
  return rc;
}

int mtf_run_setup(mtf_run_state *st, const mtf_config *cfg, int with_training, mtf_error *err) {
  memset(st, 0, sizeof *st);
  st->cfg = cfg;
  st->rank = mtf_world_rank();
  mtf_error_clear(err);
  mtf_session_options options = mtf_run_session_options(cfg);
  MTF_CHECK(mtf_run_check_backend(cfg, err));
  if (mtf_backend_capabilities(cfg->backend)->one_program) return setup_pjrt(st, cfg, with_training, err);
  /* Layout errors first (every rank builds rank 0's plan, so they are alike everywhere, and more useful than
   * a size mismatch); only running out of memory can fail on one rank, hence the agreement. */
  int rc = mtf_run_agree(mtf_program_build(cfg, 0, &st->program, err), err);
  if (rc == MTF_OK && st->rank != 0) mtf_program_free(&st->program);
  if (rc == MTF_OK) rc = mtf_comm_world_create(&cfg->mesh_shape, &st->comm, err);
  if (rc == MTF_OK && st->rank != 0) rc = mtf_program_build(cfg, st->comm->rank, &st->program, err);
  /* Before anything is allocated: a training job whose planned peak the node cannot hold is refused now, with
   * the figures, rather than killed by the system later (the cpu backend: its arenas are host memory; the
   * estimate is a training run's, so eval and generate are not checked by it). */
  if (rc == MTF_OK && with_training && mtf_backend_capabilities(cfg->backend)->host_memory)
    rc = mtf_run_check_memory_fit(&st->program, cfg, mtf_world_ranks_on_node(), err);
  if (st->comm) rc = mtf_comm_agree(st->comm, rc, err); /* no rank goes on to allocate when one may not */
  if (rc != MTF_OK) return rc;
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
  for (int r = 0; st->device_plans && r < st->n_devices; r++) mtf_program_plans_free(&st->device_plans[r]);
  free(st->device_plans);
  st->device_plans = NULL;
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
                             .comm = st->comm,
                             .seq2seq = cfg->model.architecture == MTF_ARCHITECTURE_ENCODER_DECODER,
                             .pack = cfg->model.pack};
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
  /* pjrt: the loader reads whole batches (the host mesh); the session slices them for the devices. */
  const mtf_shape *mesh = st->device_plans ? &st->host_mesh : &cfg->mesh_shape;
  if (rc == MTF_OK) rc = mtf_loader_open(&opts, mesh, &cfg->layout, st->comm->rank, out, err);
  return rc ? mtf_error_prefix(err, "%s: data", cfg->source) : MTF_OK;
}

int mtf_run_batch_alloc(mtf_run_batch *batch, const mtf_loader *loader, int64_t length, int packed, mtf_error *err) {
  memset(batch, 0, sizeof *batch);
  batch->rows = mtf_loader_local_batch(loader);
  batch->length = length;
  size_t values = (size_t)(batch->rows * length);
  batch->raw = malloc(sizeof(int32_t) * (size_t)(batch->rows * mtf_loader_row_ints(loader)));
  int32_t **arrays[4] = {&batch->inputs.tokens, &batch->inputs.targets, &batch->inputs.encoder_tokens,
                         &batch->inputs.loss_weights};
  int failed = !batch->raw;
  for (int i = 0; i < 4; i++) failed |= (*arrays[i] = malloc(sizeof(int32_t) * values)) == NULL;
  if (!failed && mtf_packed_rows_alloc(&batch->packed, packed, batch->rows * length, err) != MTF_OK) failed = 1;
  if (failed) {
    mtf_run_batch_free(batch);
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory for a batch of %lld rows", (long long)batch->rows);
  }
  return MTF_OK;
}

void mtf_run_batch_free(mtf_run_batch *batch) {
  free(batch->raw);
  free(batch->inputs.tokens);
  free(batch->inputs.targets);
  free(batch->inputs.encoder_tokens);
  free(batch->inputs.loss_weights);
  mtf_packed_rows_free(&batch->packed);
  memset(batch, 0, sizeof *batch);
}

int mtf_run_batch_next(mtf_run_batch *batch, mtf_loader *loader, mtf_error *err) {
  MTF_CHECK(mtf_loader_next(loader, batch->raw, err));
  mtf_loader_split_batch(loader, batch->raw, &batch->inputs);
  mtf_packed_rows_fill(&batch->packed, loader);
  return MTF_OK;
}

int mtf_run_batch_feed(const mtf_run_batch *batch, mtf_session *session, const mtf_transformer *model, int64_t first,
                       mtf_error *err) {
  int64_t offset = first * batch->length;
  MTF_CHECK(mtf_session_set_input_slice_int(session, model->tokens, batch->inputs.tokens + offset, err));
  MTF_CHECK(mtf_session_set_input_slice_int(session, model->targets, batch->inputs.targets + offset, err));
  if (model->encoder_tokens != MTF_NO_TENSOR)
    MTF_CHECK(mtf_session_set_input_slice_int(session, model->encoder_tokens, batch->inputs.encoder_tokens + offset, err));
  if (model->loss_weights != MTF_NO_TENSOR)
    MTF_CHECK(mtf_session_set_input_slice_int(session, model->loss_weights, batch->inputs.loss_weights + offset, err));
  return mtf_packed_rows_set(session, model, &batch->packed, offset, err);
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
