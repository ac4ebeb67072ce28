/* The index geometry of a step's local shapes that every backend's kernels use, in one place: row-major
 * strides of an operand for each dim of a walked tensor (matched by name), the stride of one named dim, and
 * the rows of a fused op over one dim (every index of the other dims is a row; the dim has local size `len`
 * and stride `inner` within it). Row bases are computed on the device too (MTF_HOST_DEVICE). */
#ifndef MTF_EXEC_ROWS_H
#define MTF_EXEC_ROWS_H

#include <stdint.h>

#include "core/host_device.h"
#include "core/shape.h"

typedef struct mtf_rows {
  int64_t outer, len, inner, count; /* count = outer * inner rows */
} mtf_rows;

static inline mtf_rows mtf_rows_of(const mtf_shape *s, const char *dim) {
  mtf_rows r = {1, 1, 1, 1};
  int d = mtf_shape_index_of(s, dim);
  for (int i = 0; i < s->rank; i++) {
    if (i < d) r.outer *= s->dims[i].size;
    if (i > d) r.inner *= s->dims[i].size;
  }
  r.len = d >= 0 ? s->dims[d].size : 1;
  r.count = r.outer * r.inner;
  return r;
}

/* Where row `row` starts: its first element's offset. */
static inline MTF_HOST_DEVICE int64_t mtf_row_base(const mtf_rows *r, int64_t row) {
  return (row / r->inner) * r->len * r->inner + row % r->inner;
}

/* The row-major element strides of s's dims. */
static inline void mtf_row_major_strides(const mtf_shape *s, int64_t *strides) {
  int64_t stride = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= s->dims[d].size;
  }
}

/* Row-major strides of `operand` for each dim of `walked`, matched by name (0 where absent). */
static inline void mtf_strides_by_name(const mtf_shape *walked, const mtf_shape *operand, int64_t *strides) {
  int64_t own[MTF_MAX_RANK];
  mtf_row_major_strides(operand, own);
  for (int d = 0; d < walked->rank; d++) {
    int j = mtf_shape_index_of(operand, walked->dims[d].name);
    strides[d] = j >= 0 ? own[j] : 0;
  }
}

/* The element stride of dim `name` in s (0 when s lacks it). */
static inline int64_t mtf_stride_of(const mtf_shape *s, const char *name) {
  int d = mtf_shape_index_of(s, name);
  if (d < 0) return 0;
  int64_t stride = 1;
  for (int i = d + 1; i < s->rank; i++) stride *= s->dims[i].size;
  return stride;
}

#endif
