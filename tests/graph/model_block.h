/* A small two-layer attention + feed-forward language-model block with a loss, built with the public
 * API and using every op; shared by the engine tests. Dimension sizes are multiples of 4 so that any
 * one of them can be split over a mesh axis of size 2 or 4. */
#ifndef MTF_TESTS_MODEL_BLOCK_H
#define MTF_TESTS_MODEL_BLOCK_H

#include "mtf.h"

#define BLOCK_VARS 32

typedef struct model_block {
  mtf_graph *graph;
  mtf_tensor ids, labels;  /* inputs [batch, length] */
  mtf_tensor loss, logits;
  int n_vars;
  mtf_tensor vars[BLOCK_VARS], grads[BLOCK_VARS];
} model_block;

/* dropout_rate 0 disables dropout. Returns MTF_OK or the graph's error. */
int model_block_build(model_block *m, float dropout_rate, mtf_error *err);
/* Deterministic token ids and labels, [batch, length] row-major. */
void model_block_inputs(const model_block *m, float *ids, float *labels);

#endif
