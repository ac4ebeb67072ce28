/* Evaluation: the mean token loss of the eval shards under the evaluation plan (no dropout), used by `mtf
 * eval` (mtf_eval_run in train.h) and by `mtf train` every train.eval_every steps. */
#ifndef MTF_RUN_EVAL_H
#define MTF_RUN_EVAL_H

#include <stdint.h>

#include "run/setup.h"

/* Collective: the mean token loss of `batches` batches of cfg->data_eval (the same batches every time).
 * With st->dropless (MoE whose evaluation capacity can drop tokens) it also sets st->dropless_loss, the
 * same batches' loss with capacity for every token. */
int mtf_run_evaluate(mtf_run_state *st, int64_t batches, double *loss, int64_t *tokens, mtf_error *err);
/* On rank 0: "eval: loss ..., perplexity ... over N tokens[; dropless loss ...]", or one JSON object
 * (with "dropless_loss" when st->dropless). */
void mtf_run_print_eval(const mtf_run_state *st, double loss, int64_t tokens, int json);

#endif
