/* The training loop: loader -> session -> metrics, with checkpoints, resumption, stop signals and periodic
 * evaluation. Every rank runs the same steps; a failure every rank sees alike (config, layout, data)
 * returns an error on every rank, and a failure inside a collective brings the job down at once
 * (mtf_run_abort), naming the rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/paths.h"
#include "core/units.h"
#include "run/eval.h"
#include "run/metrics.h"
#include "run/mfu.h"
#include "run/packed_rows.h"
#include "run/setup.h"
#include "run/signals.h"
#include "run/train.h"
#include "train/schedule.h"

/* Saves the state after `step` (the loader's cursor is at the next batch). Collective. */
static int save_checkpoint(mtf_run_state *st, mtf_loader *loader, int64_t step, mtf_error *err) {
  mtf_ckpt_model model = mtf_run_checkpoint_model(st, 1);
  mtf_ckpt_state state = {.step = step, .rng_seed = (uint64_t)st->cfg->train.seed, .rng_offset = (uint64_t)step,
                          .cursor = mtf_loader_cursor_get(loader)};
  char dir[MTF_CKPT_PATH_MAX], path[2 * MTF_CKPT_PATH_MAX];
  mtf_run_checkpoint_dir(st->cfg, dir, sizeof dir);
  mtf_ckpt_stats stats;
  MTF_CHECK(mtf_ckpt_save(&model, st->cfg, &state, dir, st->cfg->train.keep_checkpoints, path, sizeof path, &stats, err));
  if (st->rank == 0) {
    char bytes[32], rate[32];
    mtf_format_bytes(stats.bytes, bytes, sizeof bytes);
    mtf_format_rate(stats.bytes, stats.seconds, rate, sizeof rate);
    printf("checkpoint: saved %s (step %lld, %s in %.2f s, %s)\n", path, (long long)step, bytes, stats.seconds, rate);
    fflush(stdout);
  }
  return MTF_OK;
}

static void schedule_of(const mtf_train_config *tc, mtf_schedule_config *schedule) {
  *schedule = (mtf_schedule_config){.learning_rate = tc->learning_rate, .warmup_steps = tc->warmup_steps,
                                    .total_steps = tc->steps, .min_learning_rate = tc->min_learning_rate};
  schedule->kind = tc->schedule;
}

/* A resumed run whose learning-rate schedule is not the checkpoint's (train.steps raised to train on, say):
 * the rate from the next step on follows this config, which for a decaying schedule is a jump. Say so, with
 * both rates, on rank 0; a checkpoint whose config cannot be read is not compared. */
static void warn_schedule_change(const char *path, const mtf_config *cfg, int64_t step) {
  char *text = NULL;
  mtf_error ignored;
  mtf_config *saved = calloc(1, sizeof *saved);
  mtf_schedule_config now, before;
  if (saved && mtf_ckpt_read_config(path, &text, &ignored) == MTF_OK) {
    mtf_config_defaults(saved);
    if (mtf_config_load_text(saved, text, strlen(text), path, &ignored) == MTF_OK) {
      schedule_of(&saved->train, &before);
      schedule_of(&cfg->train, &now);
      double rate_now = mtf_schedule_learning_rate(&now, step + 1), rate_before = mtf_schedule_learning_rate(&before, step + 1);
      int same = now.kind == before.kind && now.learning_rate == before.learning_rate &&
                 now.warmup_steps == before.warmup_steps && now.min_learning_rate == before.min_learning_rate &&
                 (now.total_steps == before.total_steps ||
                  (now.kind != MTF_SCHEDULE_COSINE && now.kind != MTF_SCHEDULE_LINEAR_DECAY));
      char changes[512] = "";
      size_t used = 0;
#define CHANGED(cond, ...) \
  if ((cond) && used < sizeof changes) used += (size_t)snprintf(changes + used, sizeof changes - used, __VA_ARGS__)
      CHANGED(now.kind != before.kind, "%strain.schedule %s -> %s", used ? ", " : "",
              mtf_schedule_kind_name(before.kind), mtf_schedule_kind_name(now.kind));
      CHANGED(now.learning_rate != before.learning_rate, "%strain.learning_rate %g -> %g", used ? ", " : "",
              before.learning_rate, now.learning_rate);
      CHANGED(now.warmup_steps != before.warmup_steps, "%strain.warmup_steps %lld -> %lld", used ? ", " : "",
              (long long)before.warmup_steps, (long long)now.warmup_steps);
      CHANGED(now.total_steps != before.total_steps, "%strain.steps %lld -> %lld", used ? ", " : "",
              (long long)before.total_steps, (long long)now.total_steps);
      CHANGED(now.min_learning_rate != before.min_learning_rate, "%strain.min_learning_rate %g -> %g",
              used ? ", " : "", before.min_learning_rate, now.min_learning_rate);
#undef CHANGED
      if (!same)
        printf("checkpoint: warning: the learning-rate schedule is not the checkpoint's (%s): step %lld runs at "
               "lr %.4g where the checkpoint's schedule gives %.4g, and the rate follows this config's schedule "
               "from there on\n", changes, (long long)(step + 1), rate_now, rate_before);
    }
  }
  free(text);
  free(saved);
}

/* Restores --from PATH or the run directory's latest good checkpoint (none: *steps_done stays 0). */
static int resume(mtf_run_state *st, mtf_loader *loader, const mtf_train_options *options, int64_t *steps_done,
                  char *resumed_from, size_t resumed_size, mtf_error *err) {
  *steps_done = 0;
  if (options && options->fresh) return MTF_OK;
  mtf_ckpt_model model = mtf_run_checkpoint_model(st, 1);
  mtf_ckpt_state state;
  mtf_ckpt_stats stats;
  char path[2 * MTF_CKPT_PATH_MAX];
  int found = 1;
  if (options && options->resume_from) {
    snprintf(path, sizeof path, "%s", options->resume_from);
    MTF_CHECK(mtf_ckpt_restore(&model, path, 1, &state, &stats, err));
  } else {
    char dir[MTF_CKPT_PATH_MAX];
    mtf_run_checkpoint_dir(st->cfg, dir, sizeof dir);
    MTF_CHECK(mtf_ckpt_restore_latest(&model, dir, 1, &state, &found, path, sizeof path, &stats, err));
  }
  if (!found) return MTF_OK;
  /* The cursor is the same on every rank, but restarting the prefetch thread can fail on one alone. */
  int rc = mtf_loader_cursor_set(loader, &state.cursor, err);
  if (rc) mtf_error_prefix(err, "resuming from checkpoint '%s'", path);
  MTF_CHECK(mtf_comm_agree(st->comm, rc, err));
  *steps_done = state.step;
  snprintf(resumed_from, resumed_size, "%s", path);
  if (st->rank == 0) {
    char bytes[32], rate[32];
    mtf_format_bytes(stats.bytes, bytes, sizeof bytes);
    mtf_format_rate(stats.bytes, stats.seconds, rate, sizeof rate);
    printf("checkpoint: resumed from %s at step %lld (%s in %.2f s, %s)\n", path, (long long)state.step, bytes,
           stats.seconds, rate);
    warn_schedule_change(path, st->cfg, state.step);
    if (state.rng_seed != (uint64_t)st->cfg->train.seed)
      printf("checkpoint: warning: it was trained with train.seed %llu, this config has %lld: dropout masks from here "
             "on differ from an uninterrupted run\n", (unsigned long long)state.rng_seed, (long long)st->cfg->train.seed);
    fflush(stdout);
  }
  return MTF_OK;
}

static void print_header(const mtf_run_state *st, const mtf_mfu_peak *peak) {
  if (st->rank != 0) return;
  const mtf_config *cfg = st->cfg;
  mtf_program_memory mem;
  mtf_program_memory_of(&st->program, cfg, &mem);
  char mesh_text[MTF_SHAPE_STR_MAX];
  printf("train: %lld parameters", (long long)st->program.train_model.param_count);
  if (st->program.train_model.n_moe > 0) /* what a token uses: the FLOPs and MFU count these */
    printf(" (%lld active per token: %d MoE layers of %lld experts, top %d)",
           (long long)(st->program.train_model.param_count - mtf_moe_inactive_params(&cfg->model)),
           st->program.train_model.n_moe, (long long)cfg->model.moe.experts, mtf_moe_k(&cfg->model));
  printf(", mesh %s (%d ranks), layout '%s', batch %lld x %lld tokens",
         mtf_shape_format(&cfg->mesh_shape, mesh_text, sizeof mesh_text),
         st->comm->size, cfg->mesh_layout, (long long)cfg->train.batch, (long long)cfg->model.length);
  if (st->program.microbatches > 1)
    printf(" in %d microbatches of %lld", st->program.microbatches,
           (long long)(cfg->train.batch / st->program.microbatches));
  printf("%s\n", cfg->train.recompute != MTF_RECOMPUTE_NONE ? ", recompute: block" : "");
  char peak_text[256];
  mtf_mfu_describe(peak, peak_text, sizeof peak_text);
  printf("train: per rank %.1f MiB activations (planned peak), %.1f MiB variables; MFU against peak %s\n",
         (mem.train_arena + mem.apply_arena) / 1048576.0,
         (mem.parameters + mem.optimizer_state + mem.accumulators) / 1048576.0, peak_text);
  const mtf_plan_stats *stats = mtf_plan_get_stats(st->program.train_plan);
  if (stats->allreduce_buckets > 0)
    printf("train: gradient allreduces in %d non-blocking buckets, overlapped with the backward pass\n",
           stats->allreduce_buckets);
  else if (st->comm->size > 1 && !mtf_run_overlaps_gradients(cfg))
    printf("train: gradient allreduces blocking, one each (train.allreduce_overlap %s%s)\n",
           mtf_config_choice_text("train.allreduce_overlap", (int)cfg->train.allreduce_overlap),
           cfg->train.allreduce_overlap == MTF_OVERLAP_AUTO ? ": every rank on one node, cpu" : "");
  fflush(stdout);
}

/* One optimizer step on this rank's rows of the batch; returns the loss and the gradient norm. With
 * microbatches, microbatch m is the m-th run of rows/N of this rank's rows (mtf_session_set_microbatch
 * numbers them for dropout as rows of the whole batch), its gradients added into the accumulators; then
 * the apply plan updates. A failure here is inside the sessions' collectives, so it ends the job. */
static void train_step(mtf_run_state *st, const mtf_run_batch *batch, int64_t step, float lr, float *loss,
                       float *grad_norm) {
  mtf_error err;
  float step_value = (float)step;
  const mtf_program *p = &st->program;
  int N = p->microbatches;
  mtf_session *update = st->apply ? st->apply : st->train;
  int64_t chunk = batch->rows / N;
  double sum = 0;
  mtf_session_set_random_offset(st->train, (uint64_t)step);
  if (mtf_session_set_input(update, p->learning_rate, &lr, &err) || mtf_session_set_input(update, p->step, &step_value, &err))
    mtf_run_abort("training step", &err);
  for (int m = 0; m < N; m++) {
    float accumulate = m > 0 ? 1.0f : 0.0f, value;
    if ((N > 1 && (mtf_session_set_microbatch(st->train, "batch", m, N, &err) ||
                   mtf_session_set_input(st->train, p->accumulate, &accumulate, &err))) ||
        mtf_run_batch_feed(batch, st->train, &p->train_model, m * chunk, &err) ||
        mtf_session_run(st->train, &err) ||
        mtf_session_fetch(st->train, p->train_model.loss, &value, &err))
      mtf_run_abort("training step", &err);
    sum += value;
  }
  if ((st->apply && mtf_session_run(st->apply, &err)) || mtf_session_fetch(update, p->grad_norm, grad_norm, &err))
    mtf_run_abort("training step", &err);
  *loss = (float)(sum / N);
}

/* The MoE layers' metrics of the last run of the train session. Collective (every rank logs alike). */
static void fetch_moe_metrics(mtf_run_state *st, mtf_step_report *report) {
  const mtf_transformer *model = &st->program.train_model;
  report->n_moe = model->n_moe < MTF_REPORT_MOE ? model->n_moe : MTF_REPORT_MOE;
  for (int i = 0; i < report->n_moe; i++) {
    float dropped, max_load, aux_loss;
    mtf_error err;
    if (mtf_session_fetch(st->train, model->moe[i].dropped, &dropped, &err) ||
        mtf_session_fetch(st->train, model->moe[i].max_load, &max_load, &err) ||
        mtf_session_fetch(st->train, model->moe[i].aux_loss, &aux_loss, &err))
      mtf_run_abort("MoE metrics", &err);
    report->moe[i].layer = model->moe[i].layer;
    report->moe[i].dropped = dropped;
    report->moe[i].max_load = max_load;
    report->moe[i].aux_loss = aux_loss;
  }
}

static int evaluate_and_print(mtf_run_state *st, mtf_error *err) {
  double loss;
  int64_t tokens;
  MTF_CHECK(mtf_run_evaluate(st, st->cfg->train.eval_batches, &loss, &tokens, err));
  mtf_run_print_eval(st, loss, tokens, 0);
  return MTF_OK;
}

/* --fresh: an earlier run's checkpoints go aside (not deleted), so that a restart of this run can never resume
 * that one. Rank 0. */
static int set_aside_checkpoints(const mtf_config *cfg, mtf_error *err) {
  char dir[MTF_CKPT_PATH_MAX], moved_to[MTF_CKPT_PATH_MAX + 64];
  int count = 0;
  mtf_run_checkpoint_dir(cfg, dir, sizeof dir);
  MTF_CHECK(mtf_ckpt_dir_set_aside(dir, moved_to, sizeof moved_to, &count, err));
  if (count > 0)
    printf("train: --fresh: the earlier run's %d checkpoint%s moved to %s (delete it when no longer needed)\n", count,
           count > 1 ? "s" : "", moved_to);
  return MTF_OK;
}

int mtf_train_run(const mtf_config *cfg, const mtf_train_options *options, mtf_error *err) {
  const mtf_train_config *tc = &cfg->train;
  if (!cfg->data_train[0])
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: data.train is empty; set it to the training shards (prepare them "
                         "with 'mtf data prepare' or 'mtf data synth')", cfg->source);
  mtf_schedule_config schedule;
  schedule_of(tc, &schedule);
  /* train.steps 0 (evaluate the initial model) computes no rate, so it needs no schedule that decays. */
  if (tc->steps > 0) MTF_CHECK(mtf_schedule_validate(&schedule, err));
  int rank = mtf_world_rank();
  char warmup_note[512];
  if (rank == 0 && mtf_schedule_warmup_note(&schedule, warmup_note, sizeof warmup_note))
    fprintf(stderr, "mtf train: warning: %s\n", warmup_note);
  /* From here on a warning signal (e.g. during restore) is noted and honoured at the first step boundary,
   * instead of killing the rank without a checkpoint. */
  mtf_signals_handle(1);
  mtf_error_clear(err);
  int rc = rank == 0 ? mtf_make_dirs(cfg->run_dir, "run directory", "set run.dir to a writable place", err) : MTF_OK;
  if (rc == MTF_OK && rank == 0 && options && options->fresh) rc = set_aside_checkpoints(cfg, err);
  rc = mtf_run_agree(rc, err);

  mtf_run_state st;
  memset(&st, 0, sizeof st);
  if (rc == MTF_OK) rc = mtf_run_setup(&st, cfg, 1, err);
  if (rc == MTF_OK) mtf_run_print_backend(st.train, 0);
  mtf_loader *loader = NULL;
  if (rc == MTF_OK) rc = mtf_run_open_loader(&st, cfg->data_train, (uint64_t)tc->seed, (int)tc->prefetch, &loader, err);
  int64_t steps_done = 0, last_saved = -1;
  char resumed_from[2 * MTF_CKPT_PATH_MAX] = "";
  if (rc == MTF_OK) rc = resume(&st, loader, options, &steps_done, resumed_from, sizeof resumed_from, err);
  if (rc == MTF_OK) last_saved = steps_done;
  /* train.steps 0 asks for no training (an evaluation of the restored model); a positive train.steps that the
   * checkpoint has reached is a finished run started again: say so rather than exit 0 having done nothing. */
  if (rc == MTF_OK && tc->steps > 0 && steps_done >= tc->steps) {
    int done_ok = options && options->done_ok;
    char what[3 * MTF_CKPT_PATH_MAX];
    snprintf(what, sizeof what, "nothing to train: the run resumed from %s at step %lld and train.steps is %lld; "
             "raise train.steps (e.g. --set train.steps=%lld) to train on, or start over with --fresh%s",
             resumed_from, (long long)steps_done, (long long)tc->steps, (long long)(steps_done + tc->steps),
             done_ok ? "" : " (--done-ok makes this exit 0)");
    if (!done_ok) rc = mtf_error_set(err, MTF_RUN_NOTHING_TO_TRAIN, "%s", what);
    else if (rank == 0) printf("train: %s\n", what);
  }
  if (rc != MTF_OK) {
    mtf_loader_close(loader);
    mtf_run_teardown(&st);
    mtf_signals_handle(0);
    return rc;
  }
  mtf_error metrics_err;
  FILE *metrics = mtf_metrics_open(cfg, rank, steps_done, &metrics_err);
  if (!metrics && rank == 0) fprintf(stderr, "mtf train: warning: metrics are not written: %s\n", metrics_err.msg);
  double flops_per_token = mtf_transformer_flops_per_token(&cfg->model, st.program.train_model.param_count);
  /* The host's sgemm is the ceiling of the host backends only (cuda: backend.peak_gflops, or none). */
  /* A bf16 run on cpu: the ceiling of its products is the bf16 matmul's, not sgemm's. */
  const mtf_backend_caps *caps = mtf_backend_capabilities(cfg->backend);
  int bf16_threads = caps->host_bf16_matmul && cfg->precision == MTF_NUMBERS_BF16 ? mtf_session_threads(st.train) : 0;
  mtf_mfu_peak peak = mtf_mfu_job_peak(cfg->peak_gflops, caps->host_peak, bf16_threads);
  double job_peak = peak.job;
  print_header(&st, &peak);

  int64_t length = cfg->model.length;
  mtf_run_batch batch;
  rc = mtf_comm_agree(st.comm, mtf_run_batch_alloc(&batch, loader, length, st.program.train_model.segments != MTF_NO_TENSOR,
                                                   err), err);
  double window_start = mtf_now_seconds(), window_comm = 0;
  int64_t window_steps = 0;
  int evaluated_last = 0;
  for (int64_t step = steps_done + 1; step <= tc->steps && rc == MTF_OK; step++) {
    int stop = mtf_signals_agreed_stop();
    if (stop) {
      int interrupted = (stop & MTF_STOP_INTERRUPT) != 0;
      if (rank == 0)
        printf("train: %s; saving a checkpoint after step %lld and stopping%s\n",
               interrupted ? "SIGINT (Ctrl-C)" : "SIGUSR1/SIGTERM", (long long)(step - 1),
               interrupted ? " (Ctrl-C again stops at once, without it)" : "");
      fflush(stdout);
      rc = last_saved == step - 1 ? MTF_OK : save_checkpoint(&st, loader, step - 1, err);
      if (rc == MTF_OK)
        rc = mtf_error_set(err, interrupted ? MTF_RUN_INTERRUPTED : MTF_RUN_PREEMPTED, "stopped by %s after step %lld "
                           "with a checkpoint; run mtf train again to resume", interrupted ? "SIGINT" : "a signal",
                           (long long)(step - 1));
      break;
    }
    rc = mtf_run_batch_next(&batch, loader, err);
    if (rc) break;
    float lr = (float)mtf_schedule_learning_rate(&schedule, step), loss, grad_norm;
    double comm_before = mtf_session_comm_seconds(st.train) + (st.apply ? mtf_session_comm_seconds(st.apply) : 0);
    train_step(&st, &batch, step, lr, &loss, &grad_norm);
    window_comm += mtf_session_comm_seconds(st.train) + (st.apply ? mtf_session_comm_seconds(st.apply) : 0) - comm_before;
    window_steps++;
    if (!isfinite(loss)) {
      rc = mtf_error_set(err, MTF_ERR_INVALID, "loss is %f at step %lld: lower train.learning_rate or set "
                         "train.clip_grad_norm", loss, (long long)step);
      break;
    }
    /* The evaluation of a step comes before its report, so that metrics.jsonl has it on the step's line. */
    int eval_due = cfg->data_eval[0] && (step == tc->steps || (tc->eval_every > 0 && step % tc->eval_every == 0));
    if (step % tc->log_every == 0 || step == tc->steps || eval_due) {
      double seconds = mtf_now_seconds() - window_start;
      mtf_step_report report = {.step = step, .loss = loss, .learning_rate = lr, .grad_norm = grad_norm,
                                .step_ms = 1e3 * seconds / (double)window_steps,
                                .tokens_per_s = (double)(window_steps * tc->batch * length) / seconds,
                                .comm_frac = window_comm / seconds,
                                .eta_s = (double)(tc->steps - step) * seconds / (double)window_steps};
      report.mfu = mtf_mfu(flops_per_token, report.tokens_per_s, job_peak);
      fetch_moe_metrics(&st, &report);
      if (eval_due) {
        rc = mtf_run_evaluate(&st, tc->eval_batches, &report.eval_loss, &report.eval_tokens, err);
        if (rc) break;
        report.has_eval = 1;
        report.has_dropless = st.dropless != NULL;
        report.eval_dropless_loss = st.dropless_loss;
        evaluated_last = step == tc->steps;
      }
      mtf_metrics_report(rank, metrics, &report);
      if (eval_due) mtf_run_print_eval(&st, report.eval_loss, report.eval_tokens, 0);
      window_start = mtf_now_seconds();
      window_comm = 0;
      window_steps = 0;
    }
    if (tc->checkpoint_every > 0 && (step % tc->checkpoint_every == 0 || step == tc->steps)) {
      rc = save_checkpoint(&st, loader, step, err);
      if (rc) break;
      last_saved = step;
    }
  }
  mtf_run_batch_free(&batch);
  mtf_loader_close(loader);
  /* A run with nothing left to train (train.steps reached, or 0) still evaluates. */
  if (rc == MTF_OK && cfg->data_eval[0] && !evaluated_last) rc = evaluate_and_print(&st, err);
  mtf_metrics_close(metrics);
  mtf_run_teardown(&st);
  mtf_signals_handle(0);
  return rc;
}
