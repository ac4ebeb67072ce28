/* Packed sequences in the model: segment inputs, the document mask, the counted loss (see segments.h). */
#include "model/segments.h"

#include <string.h>

int mtf_segments_enabled(const mtf_model_config *model) {
  return model->pack != MTF_PACK_NONE;
}

mtf_segment_inputs mtf_segments_build(mtf_graph *g, const mtf_model_config *model, int64_t batch) {
  mtf_segment_inputs s;
  mtf_shape rows = {0}, scalar = {0};
  mtf_shape_append(&rows, "batch", batch, NULL);
  mtf_shape_append(&rows, "length", model->length, NULL);
  s.segments = mtf_input_int(g, "segments", &rows);
  s.target_segments = mtf_input_int(g, "target_segments", &rows);
  s.positions = mtf_input_int(g, "segment_positions", &rows);
  /* Ids are renumbered per row (1, 2, ... by runs, io/segments.h), so they are small integers that float
   * compares exactly. */
  mtf_tensor query = s.ids = mtf_to_float(g, s.segments);
  mtf_tensor key = mtf_rename(g, query, "length", "memory_length");
  s.same_document = mtf_equal(g, query, key);
  mtf_tensor target = mtf_to_float(g, s.target_segments);
  mtf_shape one = {0};
  /* 1 where input and target are both a document's tokens (padding is 0). */
  mtf_tensor zero = mtf_constant(g, &one, 0.0f);
  s.weights = mtf_multiply(g, mtf_greater(g, target, zero), mtf_greater(g, query, zero));
  if (model->loss_skip_document_start) s.weights = mtf_multiply(g, s.weights, mtf_equal(g, target, query));
  s.count = mtf_reduce_sum(g, s.weights, &scalar);
  return s;
}

mtf_tensor mtf_segments_mask(mtf_graph *g, const mtf_segment_inputs *s, mtf_tensor scores) {
  return mtf_masked_fill(g, scores, s->same_document, -1e9f);
}

mtf_tensor mtf_segments_sum(mtf_graph *g, const mtf_segment_inputs *s, mtf_tensor per_position) {
  mtf_shape scalar = {0};
  return mtf_reduce_sum(g, mtf_multiply(g, per_position, s->weights), &scalar);
}

mtf_tensor mtf_segments_mean(mtf_graph *g, const mtf_segment_inputs *s, mtf_tensor per_position) {
  mtf_shape scalar = {0};
  /* A batch of padding alone counts nothing: divide by 1, not 0. */
  mtf_tensor count = mtf_maximum(g, s->count, mtf_constant(g, &scalar, 1.0f));
  return mtf_divide(g, mtf_segments_sum(g, s, per_position), count);
}
