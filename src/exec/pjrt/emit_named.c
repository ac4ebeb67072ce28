/* Named shapes over the op helpers: the CPU kernels match an operand's dims to the output's by name
 * (strides by name), so here an operand is transposed into the output's order and broadcast along the
 * dims it lacks; reductions drop the dims the output lacks. */
#include <string.h>

#include "exec/pjrt/emit_internal.h"

int n_to(h_emitter *E, int x, const mtf_shape *from, const mtf_shape *to) {
  /* from's dims sorted by their position in `to` */
  int pos[MTF_MAX_RANK], perm[MTF_MAX_RANK], dims[MTF_MAX_RANK];
  for (int d = 0; d < from->rank; d++) pos[d] = mtf_shape_index_of(to, from->dims[d].name);
  for (int i = 0; i < from->rank; i++) perm[i] = i;
  for (int i = 1; i < from->rank; i++)
    for (int j = i; j > 0 && pos[perm[j - 1]] > pos[perm[j]]; j--) {
      int t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  x = h_reshape(E, x, h_shape_of(from));
  x = h_transpose(E, x, perm);
  for (int i = 0; i < from->rank; i++) dims[i] = pos[perm[i]];
  return h_broadcast_in_dim(E, x, h_shape_of(to), dims);
}

int n_reduce(h_emitter *E, int x, const mtf_shape *from, const mtf_shape *to, const char *op, double init) {
  unsigned dims = 0;
  mtf_shape kept = {0};
  for (int d = 0; d < from->rank; d++) {
    if (mtf_shape_index_of(to, from->dims[d].name) < 0) dims |= 1u << d;
    else kept.dims[kept.rank++] = from->dims[d];
  }
  x = h_reduce(E, h_reshape(E, x, h_shape_of(from)), dims, op, init);
  x = h_reshape(E, x, h_shape_of(&kept));
  return n_to(E, x, &kept, to);
}

int n_dim_last(h_emitter *E, int x, const mtf_shape *from, const char *dim, mtf_shape *rows_shape) {
  int d = mtf_shape_index_of(from, dim), perm[MTF_MAX_RANK], n = 0;
  mtf_shape rows = {0};
  for (int i = 0; i < from->rank; i++)
    if (i != d) {
      perm[n++] = i;
      rows.dims[rows.rank++] = from->dims[i];
    }
  perm[n++] = d;
  if (rows_shape) *rows_shape = rows;
  return h_transpose(E, h_reshape(E, x, h_shape_of(from)), perm);
}

int n_dim_back(h_emitter *E, int x, const mtf_shape *to, const char *dim) {
  int d = mtf_shape_index_of(to, dim), perm[MTF_MAX_RANK];
  /* x is [to without dim, dim]: to's dim i < d is x's i, d is x's last, i > d is x's i - 1 */
  for (int i = 0; i < to->rank; i++) perm[i] = i < d ? i : i == d ? to->rank - 1 : i - 1;
  return h_transpose(E, x, perm);
}

int h_as_index(h_emitter *E, int x) {
  h_elem e = h_t(E, x)->e;
  if (e == H_F32 || e == H_F64) x = h_unop(E, "round_nearest_even", x);
  return h_convert(E, x, H_S64);
}
