/* How a two-operand einsum becomes a batched matrix product, decided from local shapes alone, so that
 * lowering can size the kernel's scratch in the arena and every backend runs the same decomposition:
 *   batch dims (in A, B and out), m dims (A and out), n dims (B and out), k dims (A and B, summed).
 * Dims only one operand has and the output lacks are summed out of it first. An operand already in
 * [batch][m][k] or [batch][k][m] order (B: [batch][k][n] or [batch][n][k]) is used in place with a
 * transpose flag; otherwise it is packed into that order. */
#ifndef MTF_OPS_EINSUM_DIMS_H
#define MTF_OPS_EINSUM_DIMS_H

#include "core/shape.h"

typedef struct mtf_einsum_dims {
  mtf_shape batch, m, n, k;
  mtf_shape a_kept, b_kept;        /* operands after summing their lonely dims */
  int a_summed, b_summed;          /* whether that sum is needed */
  int a_packed, b_packed, c_packed;/* whether the operand / the product needs a reordered copy */
  int a_transposed, b_transposed;  /* transpose flags for the in-place cases */
  int64_t nb, M, N, K;
  /* Scratch layout, in elements: [a_summed | b_summed | a_packed | b_packed | c] */
  int64_t scratch_offset[5], scratch_elements;
} mtf_einsum_dims;

void mtf_einsum_dims_make(const mtf_shape *a, const mtf_shape *b, const mtf_shape *out, mtf_einsum_dims *d);
/* Whether a's dim names, in order, are x ++ y ++ z. */
int mtf_einsum_order_is(const mtf_shape *a, const mtf_shape *x, const mtf_shape *y, const mtf_shape *z);
mtf_shape mtf_einsum_concat3(const mtf_shape *x, const mtf_shape *y, const mtf_shape *z);

#endif
