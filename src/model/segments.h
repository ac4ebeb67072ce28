/* Packed sequences in the model (data.pack, io/segments.h): the segment inputs of a TRAIN build, the mask
 * that keeps attention inside a document, positions that restart per document, and the loss over the
 * positions it counts. Uses the public graph API only.
 *
 * Inputs, int32 [batch, length] like tokens (so every layout shards them as it shards the tokens):
 * `segments` (the input token's document, 0 = padding), `target_segments` (the target token's) and
 * `segment_positions` (the input token's position in its document). A position counts in the loss when
 * neither its input nor its target is padding and, with train.loss_skip_document_start, when its target is
 * in the input's document (a document's first token, predicted from the previous document, is left out).
 * The loss is the sum over counted positions divided by their number (at least 1). */
#ifndef MTF_MODEL_SEGMENTS_H
#define MTF_MODEL_SEGMENTS_H

#include "config/config.h"
#include "mtf.h"

typedef struct mtf_segment_inputs {
  mtf_tensor segments, target_segments, positions; /* int32 inputs [batch, length] */
  mtf_tensor ids;                                  /* [batch, length]: segments as float (the fused attention's) */
  mtf_tensor same_document;                        /* [batch, length, memory_length]: 1 where both are one document */
  mtf_tensor weights;                              /* [batch, length]: 1 where the position counts in the loss */
  mtf_tensor count;                                /* scalar: positions counted (sum of weights) */
} mtf_segment_inputs;

/* Whether the model config packs sequences (data.pack is eot or segments). */
int mtf_segments_enabled(const mtf_model_config *model);

/* Adds the inputs and the tensors derived from them for a batch of `batch` rows of model->length. */
mtf_segment_inputs mtf_segments_build(mtf_graph *g, const mtf_model_config *model, int64_t batch);

/* Attention scores [..., length, ..., memory_length] with -1e9 where query and key are in different
 * documents (exp of which is exactly 0 after the softmax's max subtraction). */
mtf_tensor mtf_segments_mask(mtf_graph *g, const mtf_segment_inputs *s, mtf_tensor scores);

/* The sum over counted positions of a per-position value [batch, length] (weighted), and its mean. */
mtf_tensor mtf_segments_sum(mtf_graph *g, const mtf_segment_inputs *s, mtf_tensor per_position);
mtf_tensor mtf_segments_mean(mtf_graph *g, const mtf_segment_inputs *s, mtf_tensor per_position);

#endif
