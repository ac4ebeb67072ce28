#include "exec/cpu/strided.h"

#include <string.h>

void mtf_walk_init(mtf_walk *w, const mtf_shape *walked, int n, const mtf_shape *const *operands) {
  memset(w, 0, sizeof *w);
  w->n = n;
  if (walked->rank == 0) { /* a scalar: one row of one element */
    w->rank = 1;
    w->dims[0] = 1;
  } else {
    w->rank = walked->rank;
    for (int d = 0; d < walked->rank; d++) w->dims[d] = walked->dims[d].size;
    for (int k = 0; k < n; k++) mtf_strides_by_name(walked, operands[k], w->strides[k]);
  }
  w->inner = w->dims[w->rank - 1];
  w->rows = 1;
  for (int d = 0; d + 1 < w->rank; d++) w->rows *= w->dims[d];
}

void mtf_walk_next_row(mtf_walk *w) {
  for (int d = w->rank - 2; d >= 0; d--) {
    w->index[d]++;
    for (int k = 0; k < w->n; k++) w->offset[k] += w->strides[k][d];
    if (w->index[d] < w->dims[d]) return;
    for (int k = 0; k < w->n; k++) w->offset[k] -= w->strides[k][d] * w->dims[d];
    w->index[d] = 0;
  }
}

void mtf_walk_coalesce(mtf_walk *w) {
  int rank = 0;
  for (int d = 0; d < w->rank; d++) {
    if (w->dims[d] == 1) continue;
    int merge = rank > 0;
    for (int k = 0; k < w->n && merge; k++) merge = w->strides[k][rank - 1] == w->strides[k][d] * w->dims[d];
    if (merge) {
      w->dims[rank - 1] *= w->dims[d];
      for (int k = 0; k < w->n; k++) w->strides[k][rank - 1] = w->strides[k][d];
      continue;
    }
    w->dims[rank] = w->dims[d];
    for (int k = 0; k < w->n; k++) w->strides[k][rank] = w->strides[k][d];
    rank++;
  }
  if (rank == 0) { /* every dim had size 1 */
    rank = 1;
    w->dims[0] = 1;
    for (int k = 0; k < w->n; k++) w->strides[k][0] = 0;
  }
  w->rank = rank;
  w->inner = w->dims[rank - 1];
  w->rows = 1;
  for (int d = 0; d + 1 < rank; d++) w->rows *= w->dims[d];
}

void mtf_walk_seek(mtf_walk *w, int64_t row) {
  for (int k = 0; k < w->n; k++) w->offset[k] = 0;
  for (int d = w->rank - 2; d >= 0; d--) {
    w->index[d] = row % w->dims[d];
    row /= w->dims[d];
    for (int k = 0; k < w->n; k++) w->offset[k] += w->index[d] * w->strides[k][d];
  }
}
