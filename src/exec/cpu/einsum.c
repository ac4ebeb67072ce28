/* Einsum on the CPU. Two operands become a batched matrix product for cblas_sgemm:
 *   batch dims (in A, B and out), m dims (A and out), n dims (B and out), k dims (A and B, summed).
 * An operand already in [batch][m][k] or [batch][k][m] order (B: [batch][k][n] or [batch][n][k]) is used in
 * place through sgemm's transpose flags; otherwise it is first copied into that order. Dims that only one
 * operand has and the output lacks are summed out of it first. One operand is a strided sum. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/cpu/strided.h"

/* out = sum of `in` over its dims absent from out (or a transposed copy). */
static void reduce_into(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out) {
  memset(out, 0, sizeof(float) * (size_t)mtf_shape_num_elements(out_shape));
  const mtf_shape *ops[1] = {out_shape};
  mtf_walk w;
  mtf_walk_init(&w, in_shape, 1, ops);
  int64_t s = w.strides[0][w.rank - 1];
  const float *src = in;
  for (int64_t r = 0; r < w.rows; r++, src += w.inner, mtf_walk_next_row(&w)) {
    float *dst = out + w.offset[0];
    if (s == 0) {
      float acc = 0.0f;
      for (int64_t i = 0; i < w.inner; i++) acc += src[i];
      dst[0] += acc;
    } else {
      for (int64_t i = 0; i < w.inner; i++) dst[i * s] += src[i];
    }
  }
}

static void append(mtf_shape *s, const mtf_dim *d) { s->dims[s->rank++] = *d; }

/* Name order of `a` equals the concatenation x ++ y ++ z? */
static int order_is(const mtf_shape *a, const mtf_shape *x, const mtf_shape *y, const mtf_shape *z) {
  const mtf_shape *parts[3] = {x, y, z};
  int pos = 0;
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < parts[p]->rank; i++, pos++)
      if (pos >= a->rank || strcmp(a->dims[pos].name, parts[p]->dims[i].name) != 0) return 0;
  return pos == a->rank;
}

static mtf_shape concat3(const mtf_shape *x, const mtf_shape *y, const mtf_shape *z) {
  mtf_shape s;
  memset(&s, 0, sizeof s);
  const mtf_shape *parts[3] = {x, y, z};
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < parts[p]->rank; i++) append(&s, &parts[p]->dims[i]);
  return s;
}

/* Returns the operand ready for sgemm: in place (setting *transposed) or a packed copy in *scratch. */
static const float *prepare(const mtf_shape *shape, const float *data, const mtf_shape *batch, const mtf_shape *outer,
                            const mtf_shape *inner, int *transposed, float **scratch) {
  *scratch = NULL;
  *transposed = 0;
  if (order_is(shape, batch, outer, inner)) return data;
  if (order_is(shape, batch, inner, outer)) {
    *transposed = 1;
    return data;
  }
  mtf_shape packed = concat3(batch, outer, inner);
  *scratch = malloc(sizeof(float) * (size_t)mtf_shape_num_elements(&packed) + 1);
  if (!*scratch) return NULL;
  reduce_into(shape, data, &packed, *scratch); /* a pure transpose: no dim is summed */
  return *scratch;
}

int mtf_cpu_einsum(int n_in, const mtf_shape *in_shapes, const float *const *in, const mtf_shape *out_shape,
                   float *out) {
  if (n_in == 1) {
    reduce_into(&in_shapes[0], in[0], out_shape, out);
    return MTF_OK;
  }
  const mtf_shape *a_shape = &in_shapes[0], *b_shape = &in_shapes[1];
  mtf_shape batch, m, n, k, a_kept, b_kept;
  memset(&batch, 0, sizeof batch);
  m = n = k = a_kept = b_kept = batch;
  for (int i = 0; i < out_shape->rank; i++) {
    const mtf_dim *d = &out_shape->dims[i];
    int in_a = mtf_shape_has(a_shape, d->name), in_b = mtf_shape_has(b_shape, d->name);
    if (in_a && in_b) append(&batch, d);
    else if (in_a) append(&m, d);
    else append(&n, d);
  }
  for (int i = 0; i < a_shape->rank; i++) {
    const mtf_dim *d = &a_shape->dims[i];
    if (mtf_shape_has(b_shape, d->name) && !mtf_shape_has(out_shape, d->name)) append(&k, d);
    if (mtf_shape_has(b_shape, d->name) || mtf_shape_has(out_shape, d->name)) append(&a_kept, d);
  }
  for (int i = 0; i < b_shape->rank; i++) {
    const mtf_dim *d = &b_shape->dims[i];
    if (mtf_shape_has(a_shape, d->name) || mtf_shape_has(out_shape, d->name)) append(&b_kept, d);
  }
  /* Sum away dims that only one operand has. */
  const float *a = in[0], *b = in[1];
  float *a_summed = NULL, *b_summed = NULL;
  if (a_kept.rank != a_shape->rank) {
    a_summed = malloc(sizeof(float) * (size_t)mtf_shape_num_elements(&a_kept) + 1);
    if (!a_summed) return MTF_ERR_NOMEM;
    reduce_into(a_shape, a, &a_kept, a_summed);
    a = a_summed;
    a_shape = &a_kept;
  }
  if (b_kept.rank != b_shape->rank) {
    b_summed = malloc(sizeof(float) * (size_t)mtf_shape_num_elements(&b_kept) + 1);
    if (!b_summed) {
      free(a_summed);
      return MTF_ERR_NOMEM;
    }
    reduce_into(b_shape, b, &b_kept, b_summed);
    b = b_summed;
    b_shape = &b_kept;
  }
  int ta, tb;
  float *a_packed, *b_packed;
  const float *ap = prepare(a_shape, a, &batch, &m, &k, &ta, &a_packed);
  const float *bp = prepare(b_shape, b, &batch, &k, &n, &tb, &b_packed);
  int64_t nb = mtf_shape_num_elements(&batch), M = mtf_shape_num_elements(&m), N = mtf_shape_num_elements(&n),
          K = mtf_shape_num_elements(&k);
  mtf_shape c_shape = concat3(&batch, &m, &n);
  int direct = order_is(out_shape, &batch, &m, &n);
  float *c = direct ? out : malloc(sizeof(float) * (size_t)(nb * M * N) + 1);
  if (!ap || !bp || !c) {
    if (!direct) free(c);
    free(a_packed);
    free(b_packed);
    free(a_summed);
    free(b_summed);
    return MTF_ERR_NOMEM;
  }
  for (int64_t i = 0; i < nb; i++)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                1.0f, ap + i * M * K, ta ? (int)M : (int)K, bp + i * K * N, tb ? (int)K : (int)N, 0.0f,
                c + i * M * N, (int)N);
  if (!direct) {
    reduce_into(&c_shape, c, out_shape, out);
    free(c);
  }
  free(a_packed);
  free(b_packed);
  free(a_summed);
  free(b_summed);
  return MTF_OK;
}
