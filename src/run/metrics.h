/* What `mtf train` reports every train.log_every steps (and at every evaluation): the progress line on
 * stdout and the same figures as one JSON object per line in RUN_DIR/metrics.jsonl (rank 0 only; other
 * ranks do nothing here). A line is
 *   {"step": N, "loss": ..., "lr": ..., "grad_norm": ..., "tokens_per_s": ..., "step_ms": ..., "mfu": ...,
 *    "comm_frac": ..., "eta_s": ...[, "eval_loss": ..., "eval_perplexity": ..., "eval_tokens": N]}
 * with the eval_* fields on the lines of steps where the model was evaluated (every train.eval_every steps
 * and after the last step), the evaluation of the parameters after step N. A model with MoE layers adds
 *   "moe": [{"layer": L, "dropped": ..., "max_load": ..., "aux_loss": ...}, ...]
 * per MoE layer (from the step's last microbatch): the fraction of (token, choice) routings dropped for
 * capacity, the busiest expert's routings over the mean, the unweighted load-balancing loss; and
 * "eval_dropless_loss" next to eval_loss when the evaluation capacity can drop tokens. */
#ifndef MTF_RUN_METRICS_H
#define MTF_RUN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

#define MTF_REPORT_MOE 64 /* MoE layers in a report: the first 64 */

typedef struct mtf_step_report {
  int64_t step;
  double loss, learning_rate, grad_norm;
  double tokens_per_s, step_ms, mfu, comm_frac;
  double eta_s; /* remaining steps x this window's ms/step (evaluations and checkpoints not counted) */
  int has_eval; /* eval_loss and eval_tokens are set: the model was evaluated after this step */
  double eval_loss;
  int64_t eval_tokens;
  int has_dropless;     /* eval_dropless_loss is set (MoE evaluation that can drop tokens) */
  double eval_dropless_loss;
  int n_moe;            /* MoE layers reported (at most MTF_REPORT_MOE) */
  struct {
    int layer;
    double dropped, max_load, aux_loss;
  } moe[MTF_REPORT_MOE];
} mtf_step_report;

/* On rank 0: writes RUN_DIR/config.yaml and opens RUN_DIR/metrics.jsonl keeping only its lines up to
 * `steps_done` (a resumed run logs the steps after its checkpoint again; a run from step 0 starts a new
 * file and keeps the old one as metrics.jsonl.previous until it is replaced). NULL on the other ranks,
 * and on failure (err says why: metrics are then not written, which is a warning, not an error). */
FILE *mtf_metrics_open(const mtf_config *cfg, int rank, int64_t steps_done, mtf_error *err);
/* The progress line, and the metrics line when metrics is not NULL (rank 0 only). */
void mtf_metrics_report(int rank, FILE *metrics, const mtf_step_report *report);
void mtf_metrics_close(FILE *metrics);

#endif
