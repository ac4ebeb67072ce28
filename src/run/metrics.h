/* What `mtf train` reports every train.log_every steps: the progress line on stdout and the same figures
 * as one JSON object per line in RUN_DIR/metrics.jsonl (rank 0 only; other ranks do nothing here). */
#ifndef MTF_RUN_METRICS_H
#define MTF_RUN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

typedef struct mtf_step_report {
  int64_t step;
  double loss, learning_rate, grad_norm;
  double tokens_per_s, step_ms, mfu, comm_frac;
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
