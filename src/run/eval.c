/* `mtf eval` and the evaluation pass of `mtf train` (see eval.h). */
#include "run/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "run/packed_rows.h"
#include "run/train.h"

int mtf_run_evaluate(mtf_run_state *st, int64_t batches, double *loss, int64_t *tokens, mtf_error *err) {
  const mtf_config *cfg = st->cfg;
  mtf_loader *loader;
  MTF_CHECK(mtf_run_open_loader(st, cfg->data_eval, (uint64_t)cfg->train.seed + 1, 0, &loader, err));
  int64_t length = cfg->model.length;
  mtf_run_batch batch;
  double sum = 0, dropless_sum = 0, exact_rows = 0, counted_sum = 0, counted = 0;
  const mtf_transformer *model = &st->program.eval_model;
  /* Packed sequences and the encoder-decoder's answers: the loss is the sum over the tokens the loss counts,
   * over all batches, divided by their number (not a mean of batch means: batches count different numbers
   * of tokens). */
  int counted_model = model->loss_count != MTF_NO_TENSOR;
  int rc = mtf_comm_agree(st->comm, mtf_run_batch_alloc(&batch, loader, length, model->segments != MTF_NO_TENSOR,
                                                        err), err);
  for (int64_t b = 0; b < batches && rc == MTF_OK; b++) {
    rc = mtf_run_batch_next(&batch, loader, err);
    if (rc) break;
    /* The evaluation model is built for batch / microbatches rows: this rank's rows in as many runs. */
    int N = st->program.microbatches;
    int64_t chunk = batch.rows / N;
    for (int m = 0; m < N; m++) {
      float value, exact = 0;
      if (mtf_run_batch_feed(&batch, st->eval, model, m * chunk, err) || mtf_session_run(st->eval, err) ||
          mtf_session_fetch(st->eval, model->token_loss, &value, err) ||
          (model->exact_rows != MTF_NO_TENSOR && mtf_session_fetch(st->eval, model->exact_rows, &exact, err)))
        mtf_run_abort("evaluation", err);
      sum += value / N;
      exact_rows += exact;
      float loss_sum, loss_count;
      if (counted_model && (mtf_session_fetch(st->eval, model->loss_sum, &loss_sum, err) ||
                            mtf_session_fetch(st->eval, model->loss_count, &loss_count, err)))
        mtf_run_abort("evaluation", err);
      if (counted_model) {
        counted_sum += loss_sum;
        counted += loss_count;
      }
      const mtf_transformer *dm = &st->program.dropless_model;
      if (st->dropless && (mtf_run_batch_feed(&batch, st->dropless, dm, m * chunk, err) ||
                           mtf_session_run(st->dropless, err) ||
                           mtf_session_fetch(st->dropless, dm->token_loss, &value, err)))
        mtf_run_abort("evaluation (dropless)", err);
      if (st->dropless) dropless_sum += value / N;
    }
  }
  if (rc == MTF_OK) {
    *loss = counted_model ? counted_sum / (counted > 0 ? counted : 1) : sum / (double)batches;
    st->dropless_loss = dropless_sum / (double)batches;
    st->exact_match = model->exact_rows != MTF_NO_TENSOR ? exact_rows / (double)(batches * cfg->train.batch) : -1;
    *tokens = counted_model ? (int64_t)counted : batches * cfg->train.batch * length;
    /* A restored checkpoint's parameters are finite (the restore refuses NaN and Inf), so a non-finite
     * loss here comes from the evaluation itself. Agreed, so every rank returns the same. */
    if (!isfinite(*loss))
      rc = mtf_error_set(err, MTF_ERR_INVALID, "the evaluation loss is %s over %lld tokens of %s: the model's "
                         "parameters are finite, so the forward pass overflowed on this data (check that data.eval "
                         "was made with this model's tokenizer and vocabulary)", isnan(*loss) ? "NaN" : "infinite",
                         (long long)*tokens, cfg->data_eval);
  }
  rc = mtf_comm_agree(st->comm, rc, err);
  mtf_run_batch_free(&batch);
  mtf_loader_close(loader);
  return rc;
}

void mtf_run_print_eval(const mtf_run_state *st, double loss, int64_t tokens, int json) {
  if (st->rank != 0) return;
  int exact = st->exact_match >= 0;
  if (json) {
    printf("{\"loss\": %.6f, \"perplexity\": %.6f, \"tokens\": %lld", loss, exp(loss), (long long)tokens);
    if (st->dropless) printf(", \"dropless_loss\": %.6f", st->dropless_loss);
    if (exact) printf(", \"exact_match\": %.6f", st->exact_match);
    printf("}\n");
  } else {
    printf("eval: loss %.4f, perplexity %.3f over %lld tokens", loss, exp(loss), (long long)tokens);
    if (st->dropless) printf("; dropless loss %.4f (MoE capacity for every token)", st->dropless_loss);
    if (exact) printf("; answers exactly right (teacher-forced argmax) %.2f%%", 100 * st->exact_match);
    printf("\n");
  }
  fflush(stdout);
}

/* The parameters of `checkpoint`, or of the run directory's latest good checkpoint. */
static int restore_for_eval(mtf_run_state *st, const char *checkpoint, mtf_error *err) {
  mtf_ckpt_model model = mtf_run_checkpoint_model(st, 0);
  mtf_ckpt_state state;
  char path[2 * MTF_CKPT_PATH_MAX];
  if (checkpoint) {
    mtf_ckpt_stats stats;
    MTF_CHECK(mtf_ckpt_restore(&model, checkpoint, 0, &state, &stats, err));
  } else {
    char dir[MTF_CKPT_PATH_MAX];
    mtf_run_checkpoint_dir(st->cfg, dir, sizeof dir);
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
  mtf_run_state st;
  int rc = mtf_run_setup(&st, cfg, 0, err);
  double loss = 0;
  int64_t tokens = 0;
  if (rc == MTF_OK) mtf_run_print_backend(st.eval, json);
  if (rc == MTF_OK) rc = restore_for_eval(&st, checkpoint, err);
  if (rc == MTF_OK) rc = mtf_run_evaluate(&st, cfg->train.eval_batches, &loss, &tokens, err);
  if (rc == MTF_OK) mtf_run_print_eval(&st, loss, tokens, json);
  mtf_run_teardown(&st);
  return rc;
}
