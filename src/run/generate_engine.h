/* The programs `mtf generate` runs (internal to src/run): the cached PREFILL and DECODE of one graph (one
 * model definition, model/transformer.h), or --no-cache's full forward. Collective over the job. */
#ifndef MTF_RUN_GENERATE_ENGINE_H
#define MTF_RUN_GENERATE_ENGINE_H

#include <stdint.h>

#include "ckpt/checkpoint.h"
#include "config/config.h"
#include "model/transformer.h"
#include "run/generate_sample.h"

typedef struct mtf_gen_engine mtf_gen_engine;
struct mtf_gen_engine {
  mtf_graph *g;
  mtf_comm *comm;
  int cached;
  int64_t rows, length, vocab;
  mtf_transformer full, prefill, decode; /* full: --no-cache; prefill and decode: the cached path */
  mtf_plan *full_plan, *prefill_plan, *decode_plan;
  mtf_session *full_s, *prefill_s, *decode_s;
  int32_t *tokens, *positions;
  float *logits, *next; /* --no-cache: all logits, and the rows' next-token logits */
  float *slice;
  int64_t slice_capacity;
  int64_t *window;      /* the first context index of each row's window (cached: what the caches hold) */
  int primed;           /* the caches hold every row's window */
  /* model.architecture encoder_decoder: the rows' prompts, the encoder's input [rows, length] (the context
   * given to mtf_gen_engine_next is then the decoder's: start token and what was generated), and the zero
   * targets and loss weights the full forward of --no-cache takes. */
  int encoder_decoder;
  int32_t *encoder_tokens, *zeros;
};

/* Builds the graph for `rows` rows, the plans and sessions, and the communicator. Collective; fails alike
 * on every rank. Close it even after a failure. */
int mtf_gen_engine_open(mtf_gen_engine *e, const mtf_config *cfg, int64_t rows, int cached, mtf_error *err);
void mtf_gen_engine_close(mtf_gen_engine *e);
/* The variables to restore a checkpoint into. */
mtf_ckpt_model mtf_gen_engine_checkpoint(mtf_gen_engine *e);

/* Encoder-decoder models: row r's prompt (its first model.length tokens) becomes the encoder's input from the
 * next call of mtf_gen_engine_next on (which then runs the encoder again). */
void mtf_gen_engine_set_prompts(mtf_gen_engine *e, int32_t *const *prompt, const int64_t *len);

/* The next-token logits of every row, whose context is context[r][0 .. len[r]) (len[r] >= 1): this rank's
 * slice. Cached: a DECODE step when the caches hold each row's window but its last token (the caller
 * appended one token per row, or none), else a PREFILL of the windows (the last model.length tokens).
 * A failure inside a run ends the job (mtf_run_abort). */
int mtf_gen_engine_next(mtf_gen_engine *e, int32_t *const *context, const int64_t *len, mtf_gen_slice *out,
                        mtf_error *err);

/* Beam search: row r's caches become those of row parent[r] (global rows; a parent must be on r's rank:
 * the caller keeps a prompt's beams on one rank). Not collective. */
int mtf_gen_engine_reorder(mtf_gen_engine *e, const int64_t *parent, mtf_error *err);

#endif
