/* Walking a tensor's elements while tracking the matching offsets in other tensors whose dimensions are
 * matched by name (stride 0 where a tensor lacks a dimension). The last dimension is left to the caller's
 * inner loop so that it vectorises. */
#ifndef MTF_EXEC_CPU_STRIDED_H
#define MTF_EXEC_CPU_STRIDED_H

#include <stdint.h>

#include "core/shape.h"

#define MTF_STRIDED_MAX_OPERANDS 3

typedef struct mtf_walk {
  int rank;                 /* of the walked shape (at least 1) */
  int64_t dims[MTF_MAX_RANK];
  int64_t index[MTF_MAX_RANK];
  int n;
  int64_t strides[MTF_STRIDED_MAX_OPERANDS][MTF_MAX_RANK];
  int64_t offset[MTF_STRIDED_MAX_OPERANDS];
  int64_t rows;             /* product of all dims but the last */
  int64_t inner;            /* the last dim */
} mtf_walk;

/* Strides of `operand` (row-major) for each dim of `walked`, matched by name; 0 where absent. */
void mtf_strides_by_name(const mtf_shape *walked, const mtf_shape *operand, int64_t *strides);
void mtf_walk_init(mtf_walk *w, const mtf_shape *walked, int n, const mtf_shape *const *operands);
/* Advances to the next row (all dims but the last). */
void mtf_walk_next_row(mtf_walk *w);

#endif
