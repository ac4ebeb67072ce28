/* Packed sequences' segment inputs from the loader to a session (see packed_rows.h). */
#include "run/packed_rows.h"

#include <stdlib.h>
#include <string.h>

int mtf_packed_rows_alloc(mtf_packed_rows *rows, int packed, int64_t elements, mtf_error *err) {
  memset(rows, 0, sizeof *rows);
  if (!packed) return MTF_OK;
  size_t bytes = sizeof(int32_t) * (size_t)elements;
  rows->segments = malloc(bytes);
  rows->target_segments = malloc(bytes);
  rows->positions = malloc(bytes);
  if (!rows->segments || !rows->target_segments || !rows->positions)
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory for the rows' segment ids");
  return MTF_OK;
}

void mtf_packed_rows_fill(mtf_packed_rows *rows, const mtf_loader *loader) {
  if (rows->segments) mtf_loader_split_segments(loader, rows->segments, rows->target_segments, rows->positions);
}

int mtf_packed_rows_set(mtf_session *s, const mtf_transformer *model, const mtf_packed_rows *rows, int64_t offset,
                        mtf_error *err) {
  if (model->segments == MTF_NO_TENSOR) return MTF_OK;
  if (!rows->segments)
    return mtf_error_set(err, MTF_ERR_INVALID, "the model packs sequences but the loader gave no segment ids");
  MTF_CHECK(mtf_session_set_input_slice_int(s, model->segments, rows->segments + offset, err));
  MTF_CHECK(mtf_session_set_input_slice_int(s, model->target_segments, rows->target_segments + offset, err));
  return mtf_session_set_input_slice_int(s, model->segment_positions, rows->positions + offset, err);
}

void mtf_packed_rows_free(mtf_packed_rows *rows) {
  free(rows->segments);
  free(rows->target_segments);
  free(rows->positions);
  memset(rows, 0, sizeof *rows);
}
