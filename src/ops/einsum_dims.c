#include "ops/einsum_dims.h"

#include <string.h>

static void append(mtf_shape *s, const mtf_dim *d) { s->dims[s->rank++] = *d; }

int mtf_einsum_order_is(const mtf_shape *a, const mtf_shape *x, const mtf_shape *y, const mtf_shape *z) {
  const mtf_shape *parts[3] = {x, y, z};
  int pos = 0;
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < parts[p]->rank; i++, pos++)
      if (pos >= a->rank || strcmp(a->dims[pos].name, parts[p]->dims[i].name) != 0) return 0;
  return pos == a->rank;
}

mtf_shape mtf_einsum_concat3(const mtf_shape *x, const mtf_shape *y, const mtf_shape *z) {
  mtf_shape s;
  memset(&s, 0, sizeof s);
  const mtf_shape *parts[3] = {x, y, z};
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < parts[p]->rank; i++) append(&s, &parts[p]->dims[i]);
  return s;
}

/* An operand in place (maybe transposed) or packed. */
static void placement(const mtf_shape *shape, const mtf_shape *batch, const mtf_shape *outer, const mtf_shape *inner,
                      int *packed, int *transposed) {
  *packed = *transposed = 0;
  if (mtf_einsum_order_is(shape, batch, outer, inner)) return;
  if (mtf_einsum_order_is(shape, batch, inner, outer)) {
    *transposed = 1;
    return;
  }
  *packed = 1;
}

void mtf_einsum_dims_make(const mtf_shape *a, const mtf_shape *b, const mtf_shape *out, mtf_einsum_dims *d) {
  memset(d, 0, sizeof *d);
  for (int i = 0; i < out->rank; i++) {
    const mtf_dim *x = &out->dims[i];
    int in_a = mtf_shape_has(a, x->name), in_b = mtf_shape_has(b, x->name);
    if (in_a && in_b) append(&d->batch, x);
    else if (in_a) append(&d->m, x);
    else append(&d->n, x);
  }
  for (int i = 0; i < a->rank; i++) {
    const mtf_dim *x = &a->dims[i];
    if (mtf_shape_has(b, x->name) && !mtf_shape_has(out, x->name)) append(&d->k, x);
    if (mtf_shape_has(b, x->name) || mtf_shape_has(out, x->name)) append(&d->a_kept, x);
  }
  for (int i = 0; i < b->rank; i++) {
    const mtf_dim *x = &b->dims[i];
    if (mtf_shape_has(a, x->name) || mtf_shape_has(out, x->name)) append(&d->b_kept, x);
  }
  d->a_summed = d->a_kept.rank != a->rank;
  d->b_summed = d->b_kept.rank != b->rank;
  placement(&d->a_kept, &d->batch, &d->m, &d->k, &d->a_packed, &d->a_transposed);
  placement(&d->b_kept, &d->batch, &d->k, &d->n, &d->b_packed, &d->b_transposed);
  d->c_packed = !mtf_einsum_order_is(out, &d->batch, &d->m, &d->n);
  d->nb = mtf_shape_num_elements(&d->batch);
  d->M = mtf_shape_num_elements(&d->m);
  d->N = mtf_shape_num_elements(&d->n);
  d->K = mtf_shape_num_elements(&d->k);
  int64_t sizes[5] = {d->a_summed ? mtf_shape_num_elements(&d->a_kept) : 0,
                      d->b_summed ? mtf_shape_num_elements(&d->b_kept) : 0,
                      d->a_packed ? d->nb * d->M * d->K : 0, d->b_packed ? d->nb * d->K * d->N : 0,
                      d->c_packed ? d->nb * d->M * d->N : 0};
  int64_t offset = 0;
  for (int i = 0; i < 5; i++) {
    d->scratch_offset[i] = offset;
    offset += (sizes[i] + 15) / 16 * 16; /* 64-byte aligned parts */
  }
  d->scratch_elements = offset;
}
