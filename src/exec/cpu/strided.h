/* Walking a tensor's elements while tracking the matching offsets in other tensors whose dimensions are
 * matched by name (stride 0 where a tensor lacks a dimension). The last dimension is left to the caller's
 * inner loop so that it vectorises. */
#ifndef MTF_EXEC_CPU_STRIDED_H
#define MTF_EXEC_CPU_STRIDED_H

#include <stdint.h>

#include "core/shape.h"
#include "exec/rows.h" /* mtf_strides_by_name */

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

void mtf_walk_init(mtf_walk *w, const mtf_shape *walked, int n, const mtf_shape *const *operands);
/* Drops size-1 dims and merges neighbouring dims that are contiguous for the walked tensor and every operand,
 * so the inner loop is as long as it can be (w.index then counts the merged dims: only for kernels that do
 * not read it). Call right after mtf_walk_init. */
void mtf_walk_coalesce(mtf_walk *w);
/* Advances to the next row (all dims but the last). */
void mtf_walk_next_row(mtf_walk *w);
/* Moves to row `row` (0 <= row < rows), so that a thread can start its share of the rows anywhere. */
void mtf_walk_seek(mtf_walk *w, int64_t row);

/* Runs BODY for each row segment of the walked elements [lo, hi) (a thread's share; it may start and end
 * inside a row): `e` is the walked element the segment starts at, `col` its column and `len` its length;
 * operand k's segment starts at w.offset[k] + col * w.strides[k][w.rank - 1]. Moves w. */
#define MTF_WALK_SEGMENTS(w, lo, hi, BODY)                                                                  \
  do {                                                                                                      \
    mtf_walk_seek(&(w), (lo) / (w).inner);                                                                  \
    for (int64_t e = (lo); e < (hi);) {                                                                     \
      int64_t col = e % (w).inner, len = (w).inner - col < (hi) - e ? (w).inner - col : (hi) - e;           \
      BODY;                                                                                                 \
      e += len;                                                                                             \
      mtf_walk_next_row(&(w));                                                                              \
    }                                                                                                       \
  } while (0)

#endif
