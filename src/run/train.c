/* The training and evaluation loops: loader -> session -> metrics. Every rank runs the same steps; a
 * failure every rank sees alike (config, layout, data) returns an error on every rank, and a failure
 * inside a collective brings the job down with MPI_Abort. */
#define _POSIX_C_SOURCE 200809L
#include "run/train.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/checkpoint.h"
#include "comm/mpi_comm.h"
#include "core/paths.h"
#include "comm/agree.h"
#include "io/loader.h"
#include "run/program.h"
#include "train/schedule.h"

/* Bits: STOP_CLEAN (SIGINT) stops after the step; STOP_CHECKPOINT (SIGUSR1, SIGTERM) saves first. */
enum { STOP_CLEAN = 1, STOP_CHECKPOINT = 2 };
static volatile sig_atomic_t stop_requested;

static void request_stop(int signal_number);

/* Installs (or, with install 0, removes) the stop handlers; each blocks the others while it runs, so the
 * flag's read-modify-write cannot be interrupted by a second signal. */
static void handle_stop_signals(int install) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = install ? request_stop : SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaddset(&action.sa_mask, SIGUSR1);
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGUSR1, &action, NULL);
}

static void request_stop(int signal_number) {
  stop_requested |= signal_number == SIGINT ? STOP_CLEAN : STOP_CHECKPOINT;
}

static _Noreturn void abort_job(int rank, const char *what, const mtf_error *err) {
  fprintf(stderr, "mtf: rank %d: %s: %s\n", rank, what, err->msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* A measured ceiling for MFU: sgemm GFLOP/s of this rank's BLAS threads on a 512^3 product. */
static double measure_peak_flops(void) {
  const int n = 512;
  float *a = calloc((size_t)n * n, sizeof(float)), *b = calloc((size_t)n * n, sizeof(float)),
        *c = calloc((size_t)n * n, sizeof(float));
  double best = 0;
  for (int r = 0; r < 4 && a && b && c; r++) {
    double start = MPI_Wtime();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double flops = 2.0 * n * n * n / (MPI_Wtime() - start);
    if (flops > best) best = flops;
  }
  free(a);
  free(b);
  free(c);
  return best;
}

/* Splits loader rows [rows][T + 1] into inputs and targets [rows][T] as floats. */
static void split_rows(const int32_t *rows, int64_t count, int64_t length, float *inputs, float *targets) {
  for (int64_t r = 0; r < count; r++)
    for (int64_t t = 0; t < length; t++) {
      inputs[r * length + t] = (float)rows[r * (length + 1) + t];
      targets[r * length + t] = (float)rows[r * (length + 1) + t + 1];
    }
}

typedef struct run_state {
  const mtf_config *cfg;
  mtf_comm *comm;
  mtf_program program;
  mtf_session *train, *eval;
  int rank;
} run_state;

/* Same config and mesh on every rank, so these fail alike everywhere. */
static int setup(run_state *st, const mtf_config *cfg, int with_training, mtf_error *err) {
  memset(st, 0, sizeof *st);
  st->cfg = cfg;
  MPI_Comm_rank(MPI_COMM_WORLD, &st->rank);
  /* Layout errors first (they are the same for every rank, and more useful than a size mismatch). */
  int rc = mtf_program_build(cfg, 0, &st->program, err);
  if (rc == MTF_OK && st->rank != 0) mtf_program_free(&st->program);
  if (rc == MTF_OK) rc = mtf_comm_mpi_create(MPI_COMM_WORLD, &cfg->mesh_shape, &st->comm, err);
  if (rc == MTF_OK && st->rank != 0) rc = mtf_program_build(cfg, st->comm->rank, &st->program, err);
  if (rc == MTF_OK && with_training) rc = mtf_session_create(st->program.train_plan, st->comm, NULL, &st->train, err);
  if (rc == MTF_OK) {
    mtf_session_options share = {.share_variables_with = st->train};
    rc = mtf_session_create(st->program.eval_plan, st->comm, &share, &st->eval, err);
  }
  /* Building a rank's plan and allocating its memory can fail on one rank alone (out of memory): agree,
   * so that no rank goes on into a collective the failed one will never join. */
  if (st->comm) rc = mtf_comm_agree(st->comm, rc, err);
  return rc;
}

static void teardown(run_state *st) {
  mtf_session_destroy(st->eval);
  mtf_session_destroy(st->train);
  mtf_program_free(&st->program);
  if (st->comm) mtf_comm_destroy(st->comm);
}

static int open_loader(const run_state *st, const char *data, uint64_t seed, int prefetch, mtf_loader **out,
                       mtf_error *err) {
  const mtf_config *cfg = st->cfg;
  mtf_loader_options opts = {.data = data,
                             .batch_size = cfg->train.batch,
                             .length = cfg->model.length,
                             .seed = seed,
                             .prefetch = prefetch,
                             .vocab_limit = cfg->model.vocab,
                             .comm = st->comm};
  int rc = mtf_loader_open(&opts, &cfg->mesh_shape, &cfg->layout, st->comm->rank, out, err);
  return rc ? mtf_error_prefix(err, "%s: data", cfg->source) : MTF_OK;
}

/* Mean token loss of `batches` batches of the eval shards (the same batches every time). */
static int evaluate(run_state *st, int64_t batches, double *loss, int64_t *tokens, mtf_error *err) {
  const mtf_config *cfg = st->cfg;
  mtf_loader *loader;
  MTF_CHECK(open_loader(st, cfg->data_eval, (uint64_t)cfg->train.seed + 1, 0, &loader, err));
  int64_t rows = mtf_loader_local_batch(loader), length = cfg->model.length;
  int32_t *raw = malloc(sizeof(int32_t) * (size_t)(rows * (length + 1)));
  float *inputs = malloc(sizeof(float) * (size_t)(rows * length)), *targets = malloc(sizeof(float) * (size_t)(rows * length));
  double sum = 0;
  int rc = !raw || !inputs || !targets ? mtf_error_set(err, MTF_ERR_NOMEM, "evaluation: out of memory") : MTF_OK;
  rc = mtf_comm_agree(st->comm, rc, err);
  for (int64_t b = 0; b < batches && rc == MTF_OK; b++) {
    rc = mtf_loader_next(loader, raw, err);
    if (rc) break;
    split_rows(raw, rows, length, inputs, targets);
    float value;
    if (mtf_session_set_input_slice(st->eval, st->program.eval_model.tokens, inputs, err) ||
        mtf_session_set_input_slice(st->eval, st->program.eval_model.targets, targets, err) ||
        mtf_session_run(st->eval, err) || mtf_session_fetch(st->eval, st->program.eval_model.token_loss, &value, err))
      abort_job(st->rank, "evaluation", err);
    sum += value;
  }
  if (rc == MTF_OK) {
    *loss = sum / (double)batches;
    *tokens = batches * cfg->train.batch * length;
  }
  free(raw);
  free(inputs);
  free(targets);
  mtf_loader_close(loader);
  return rc;
}

static void print_eval(const run_state *st, double loss, int64_t tokens, int json) {
  if (st->rank != 0) return;
  if (json)
    printf("{\"loss\": %.6f, \"perplexity\": %.6f, \"tokens\": %lld}\n", loss, exp(loss), (long long)tokens);
  else
    printf("eval: loss %.4f, perplexity %.3f over %lld tokens\n", loss, exp(loss), (long long)tokens);
  fflush(stdout);
}

static mtf_ckpt_model checkpoint_model(run_state *st, int training) {
  mtf_ckpt_model model = {st->program.graph, training ? st->program.train_plan : st->program.eval_plan,
                          training ? st->train : st->eval, st->comm, st->program.train_model.params,
                          st->program.train_model.n_params};
  return model;
}

static void checkpoint_dir(const mtf_config *cfg, char *dir, size_t size) {
  snprintf(dir, size, "%s/checkpoints", cfg->run_dir);
}

/* The parameters of `checkpoint`, or of the run directory's latest good checkpoint. */
static int restore_for_eval(run_state *st, const char *checkpoint, mtf_error *err) {
  mtf_ckpt_model model = checkpoint_model(st, 0);
  mtf_ckpt_state state;
  char path[2 * MTF_CKPT_PATH_MAX];
  if (checkpoint) {
    mtf_ckpt_stats stats;
    MTF_CHECK(mtf_ckpt_restore(&model, checkpoint, 0, &state, &stats, err));
  } else {
    char dir[MTF_CKPT_PATH_MAX];
    checkpoint_dir(st->cfg, dir, sizeof dir);
    int found;
    MTF_CHECK(mtf_ckpt_restore_latest(&model, dir, 0, &state, &found, path, sizeof path, NULL, err));
    if (!found)
      return mtf_error_set(err, MTF_ERR_INVALID, "no checkpoint in '%s' to evaluate: train with "
                           "train.checkpoint_every > 0, or name one with --checkpoint PATH", dir);
    checkpoint = path;
  }
  /* stderr, so that --json keeps stdout to the one JSON object. */
  if (st->rank == 0) fprintf(stderr, "eval: checkpoint %s (step %lld)\n", checkpoint, (long long)state.step);
  return MTF_OK;
}

int mtf_eval_run(const mtf_config *cfg, int json, const char *checkpoint, mtf_error *err) {
  if (!cfg->data_eval[0])
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: data.eval is empty; set it to the evaluation shards (a directory or glob)",
                         cfg->source);
  run_state st;
  int rc = setup(&st, cfg, 0, err);
  double loss = 0;
  int64_t tokens = 0;
  if (rc == MTF_OK) rc = restore_for_eval(&st, checkpoint, err);
  if (rc == MTF_OK) rc = evaluate(&st, cfg->train.eval_batches, &loss, &tokens, err);
  if (rc == MTF_OK) print_eval(&st, loss, tokens, json);
  teardown(&st);
  return rc;
}

/* Keeps only the lines of metrics.jsonl up to `steps_done`: a run that resumes from a checkpoint logs the
 * steps after it again, and a run from step 0 starts a new file (the old one is kept as
 * metrics.jsonl.previous). */
static FILE *open_metrics(const run_state *st, int64_t steps_done, mtf_error *err) {
  if (st->rank != 0) return NULL;
  char path[MTF_CONFIG_PATH + 32], kept[MTF_CONFIG_PATH + 48];
  snprintf(path, sizeof path, "%s/config.yaml", st->cfg->run_dir);
  FILE *f = fopen(path, "w");
  if (f) {
    mtf_config_print(st->cfg, f);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/metrics.jsonl", st->cfg->run_dir);
  snprintf(kept, sizeof kept, "%s.previous", path);
  if (rename(path, kept) != 0 && errno != ENOENT) {
    mtf_error_set(err, MTF_ERR_IO, "cannot rename '%s': %s", path, strerror(errno));
    return NULL;
  }
  FILE *metrics = fopen(path, "w");
  if (!metrics) {
    mtf_error_set(err, MTF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  FILE *old = steps_done > 0 ? fopen(kept, "r") : NULL;
  char line[1024];
  long long step;
  while (old && fgets(line, sizeof line, old))
    if (sscanf(line, "{\"step\": %lld", &step) == 1 && step <= steps_done) fputs(line, metrics);
  if (old) {
    fclose(old);
    remove(kept);
  }
  fflush(metrics);
  return metrics;
}

/* Saves the state after `step` (the loader's cursor is at the next batch). Collective. */
static int save_checkpoint(run_state *st, mtf_loader *loader, int64_t step, mtf_error *err) {
  mtf_ckpt_model model = checkpoint_model(st, 1);
  mtf_ckpt_state state = {.step = step, .rng_seed = (uint64_t)st->cfg->train.seed, .rng_offset = (uint64_t)step,
                          .cursor = mtf_loader_cursor_get(loader)};
  char dir[MTF_CKPT_PATH_MAX], path[2 * MTF_CKPT_PATH_MAX];
  checkpoint_dir(st->cfg, dir, sizeof dir);
  mtf_ckpt_stats stats;
  MTF_CHECK(mtf_ckpt_save(&model, st->cfg, &state, dir, st->cfg->train.keep_checkpoints, path, sizeof path, &stats, err));
  if (st->rank == 0) {
    printf("checkpoint: saved %s (step %lld, %.1f MB in %.2f s, %.0f MB/s)\n", path, (long long)step, stats.bytes / 1e6,
           stats.seconds, stats.seconds > 0 ? stats.bytes / 1e6 / stats.seconds : 0.0);
    fflush(stdout);
  }
  return MTF_OK;
}

/* Restores --from PATH or the run directory's latest good checkpoint (none: *steps_done stays 0). */
static int resume(run_state *st, mtf_loader *loader, const mtf_train_options *options, int64_t *steps_done,
                  mtf_error *err) {
  *steps_done = 0;
  if (options && options->fresh) return MTF_OK;
  mtf_ckpt_model model = checkpoint_model(st, 1);
  mtf_ckpt_state state;
  mtf_ckpt_stats stats;
  char path[2 * MTF_CKPT_PATH_MAX];
  int found = 1;
  if (options && options->resume_from) {
    snprintf(path, sizeof path, "%s", options->resume_from);
    MTF_CHECK(mtf_ckpt_restore(&model, path, 1, &state, &stats, err));
  } else {
    char dir[MTF_CKPT_PATH_MAX];
    checkpoint_dir(st->cfg, dir, sizeof dir);
    MTF_CHECK(mtf_ckpt_restore_latest(&model, dir, 1, &state, &found, path, sizeof path, &stats, err));
  }
  if (!found) return MTF_OK;
  if (mtf_loader_cursor_set(loader, &state.cursor, err))
    return mtf_error_prefix(err, "resuming from checkpoint '%s'", path);
  *steps_done = state.step;
  if (st->rank == 0) {
    printf("checkpoint: resumed from %s at step %lld (%.1f MB in %.2f s, %.0f MB/s)\n", path, (long long)state.step,
           stats.bytes / 1e6, stats.seconds, stats.seconds > 0 ? stats.bytes / 1e6 / stats.seconds : 0.0);
    if (state.rng_seed != (uint64_t)st->cfg->train.seed)
      printf("checkpoint: warning: it was trained with train.seed %llu, this config has %lld: dropout masks from here "
             "on differ from an uninterrupted run\n", (unsigned long long)state.rng_seed, (long long)st->cfg->train.seed);
    fflush(stdout);
  }
  return MTF_OK;
}

int mtf_train_run(const mtf_config *cfg, const mtf_train_options *options, mtf_error *err) {
  const mtf_train_config *tc = &cfg->train;
  if (!cfg->data_train[0])
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: data.train is empty; set it to the training shards (prepare them "
                         "with 'mtf data prepare' or 'mtf data synth')", cfg->source);
  mtf_schedule_config schedule = {.learning_rate = tc->learning_rate, .warmup_steps = tc->warmup_steps,
                                  .total_steps = tc->steps, .min_learning_rate = tc->min_learning_rate};
  MTF_CHECK(mtf_schedule_parse_kind(tc->schedule, &schedule.kind, err));
  MTF_CHECK(mtf_schedule_validate(&schedule, err));
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  /* From here on a warning signal (e.g. during restore) is noted and honoured at the first step boundary,
   * instead of killing the rank without a checkpoint. */
  handle_stop_signals(1);
  int dir_rc = rank == 0 ? mtf_make_dirs(cfg->run_dir, "run directory", "set run.dir to a writable place", err) : MTF_OK;
  MPI_Bcast(&dir_rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (dir_rc) return rank == 0 ? dir_rc : mtf_error_set(err, dir_rc, "rank 0 could not create the run directory");

  run_state st;
  int rc = setup(&st, cfg, 1, err);
  mtf_loader *loader = NULL;
  if (rc == MTF_OK) rc = open_loader(&st, cfg->data_train, (uint64_t)tc->seed, (int)tc->prefetch, &loader, err);
  int64_t steps_done = 0, last_saved = -1;
  if (rc == MTF_OK) rc = resume(&st, loader, options, &steps_done, err);
  if (rc == MTF_OK) last_saved = steps_done;
  if (rc != MTF_OK) {
    mtf_loader_close(loader);
    teardown(&st);
    return rc;
  }
  mtf_error metrics_err;
  FILE *metrics = open_metrics(&st, steps_done, &metrics_err);
  if (!metrics && rank == 0) fprintf(stderr, "mtf train: warning: metrics are not written: %s\n", metrics_err.msg);
  const mtf_plan_stats *stats = mtf_plan_get_stats(st.program.train_plan);
  double flops_per_token = mtf_transformer_flops_per_token(&cfg->model, st.program.train_model.param_count);
  double peak = measure_peak_flops(), total_peak = peak;
  MPI_Allreduce(&peak, &total_peak, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    char mesh_text[MTF_SHAPE_STR_MAX];
    printf("train: %lld parameters, mesh %s (%d ranks), layout '%s', batch %lld x %lld tokens\n",
           (long long)st.program.train_model.param_count, mtf_shape_format(&cfg->mesh_shape, mesh_text, sizeof mesh_text),
           st.comm->size, cfg->mesh_layout, (long long)tc->batch, (long long)cfg->model.length);
    printf("train: per rank %.1f MiB activations (planned peak), %.1f MiB variables; peak for MFU %.1f GFLOP/s "
           "(measured: cblas_sgemm 512^3 on each rank at start-up, summed)\n",
           stats->peak_bytes / 1048576.0, stats->variable_bytes / 1048576.0, total_peak / 1e9);
    fflush(stdout);
  }

  int64_t rows = mtf_loader_local_batch(loader), length = cfg->model.length;
  int32_t *raw = malloc(sizeof(int32_t) * (size_t)(rows * (length + 1)));
  float *inputs = malloc(sizeof(float) * (size_t)(rows * length)), *targets = malloc(sizeof(float) * (size_t)(rows * length));
  rc = mtf_comm_agree(st.comm, !raw || !inputs || !targets ? mtf_error_set(err, MTF_ERR_NOMEM, "training: out of memory")
                                                         : MTF_OK, err);
  double window_start = MPI_Wtime(), window_comm = 0, loss_value = 0;
  int64_t step = 0, window_steps = 0;
  for (step = steps_done + 1; step <= tc->steps && rc == MTF_OK; step++) {
    int stop = stop_requested, any_stop = 0;
    MPI_Allreduce(&stop, &any_stop, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    if (any_stop & STOP_CHECKPOINT) {
      if (rank == 0) printf("train: SIGUSR1/SIGTERM; saving a checkpoint after step %lld and stopping\n", (long long)(step - 1));
      rc = last_saved == step - 1 ? MTF_OK : save_checkpoint(&st, loader, step - 1, err);
      if (rc == MTF_OK)
        rc = mtf_error_set(err, MTF_RUN_PREEMPTED, "stopped by a signal after step %lld with a checkpoint; run mtf "
                           "train again to resume", (long long)(step - 1));
      break;
    }
    if (any_stop) {
      if (rank == 0) printf("train: interrupted; stopping cleanly after step %lld\n", (long long)(step - 1));
      rc = mtf_error_set(err, MTF_RUN_INTERRUPTED, "interrupted after step %lld", (long long)(step - 1));
      break;
    }
    rc = mtf_loader_next(loader, raw, err);
    if (rc) break;
    split_rows(raw, rows, length, inputs, targets);
    float lr = (float)mtf_schedule_learning_rate(&schedule, step), step_value = (float)step, values[3];
    double comm_before = mtf_session_comm_seconds(st.train);
    mtf_session_set_random_offset(st.train, (uint64_t)step);
    if (mtf_session_set_input_slice(st.train, st.program.train_model.tokens, inputs, err) ||
        mtf_session_set_input_slice(st.train, st.program.train_model.targets, targets, err) ||
        mtf_session_set_input(st.train, st.program.learning_rate, &lr, err) ||
        mtf_session_set_input(st.train, st.program.step, &step_value, err) || mtf_session_run(st.train, err) ||
        mtf_session_fetch(st.train, st.program.train_model.loss, &values[0], err) ||
        mtf_session_fetch(st.train, st.program.grad_norm, &values[2], err))
      abort_job(rank, "training step", err);
    window_comm += mtf_session_comm_seconds(st.train) - comm_before;
    window_steps++;
    loss_value = values[0];
    if (!isfinite(loss_value)) {
      rc = mtf_error_set(err, MTF_ERR_INVALID, "loss is %f at step %lld: lower train.learning_rate or set "
                         "train.clip_grad_norm", loss_value, (long long)step);
      break;
    }
    if (step % tc->log_every == 0 || step == tc->steps) {
      double now = MPI_Wtime(), seconds = now - window_start, step_ms = 1e3 * seconds / (double)window_steps;
      double tokens_per_s = (double)(window_steps * tc->batch * length) / seconds;
      double mfu = total_peak > 0 ? flops_per_token * tokens_per_s / total_peak : 0;
      double comm_frac = window_comm / seconds;
      if (rank == 0) {
        printf("step %6lld  loss %.4f  lr %.3e  grad_norm %.3f  %8.0f tok/s  %7.1f ms/step  MFU %5.1f%%  comm %4.1f%%\n",
               (long long)step, loss_value, lr, values[2], tokens_per_s, step_ms, 100 * mfu, 100 * comm_frac);
        fflush(stdout);
        if (metrics) {
          fprintf(metrics,
                  "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.6g, "
                  "\"step_ms\": %.6g, \"mfu\": %.6g, \"comm_frac\": %.6g}\n",
                  (long long)step, loss_value, lr, values[2], tokens_per_s, step_ms, mfu, comm_frac);
          fflush(metrics);
        }
      }
      window_start = MPI_Wtime();
      window_comm = 0;
      window_steps = 0;
    }
    if (tc->checkpoint_every > 0 && (step % tc->checkpoint_every == 0 || step == tc->steps)) {
      rc = save_checkpoint(&st, loader, step, err);
      if (rc) break;
      last_saved = step;
    }
    if (cfg->data_eval[0] && tc->eval_every > 0 && step % tc->eval_every == 0 && step < tc->steps) {
      double loss;
      int64_t tokens;
      rc = evaluate(&st, tc->eval_batches, &loss, &tokens, err);
      if (rc == MTF_OK) print_eval(&st, loss, tokens, 0);
    }
  }
  free(raw);
  free(inputs);
  free(targets);
  mtf_loader_close(loader);
  if (rc == MTF_OK && cfg->data_eval[0]) {
    double loss;
    int64_t tokens;
    rc = evaluate(&st, tc->eval_batches, &loss, &tokens, err);
    if (rc == MTF_OK) print_eval(&st, loss, tokens, 0);
  }
  if (metrics) fclose(metrics);
  teardown(&st);
  handle_stop_signals(0);
  return rc;
}
