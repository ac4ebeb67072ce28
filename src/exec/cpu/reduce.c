/* Sums and maxima over named dims, and transposed copies (a sum over no dim), on the CPU. The input's
 * dims become "axes" with an input and an output stride (0: reduced); size-1 dims are dropped and
 * neighbours contiguous in both merged, so e.g. [batch, length, d] -> [d] is one reduced axis and one kept.
 * Then one of four loops, each splitting only over output elements across threads and reducing each
 * output element in the input's order, so results do not depend on the thread count:
 *   - a permutation whose innermost dim stays innermost: contiguous row copies;
 *   - any other permutation: a cache-blocked transpose of the two innermost dims (einsum's packing);
 *   - innermost dim kept ("columns", a bias gradient): out rows accumulated from contiguous input rows;
 *   - innermost dim reduced ("rows"): contiguous row sums/maxima (rowops.h). */
#include <math.h>
#include <string.h>

#include "exec/cpu/cpu.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/rowops.h"
#include "exec/cpu/strided.h"

typedef struct axes {
  int n;
  int64_t size[MTF_MAX_RANK], in[MTF_MAX_RANK], out[MTF_MAX_RANK]; /* out 0: reduced */
} axes;

/* A position in the index space of some axes, with its input and output offsets. */
typedef struct cursor {
  int64_t idx[MTF_MAX_RANK], in, out;
} cursor;

static int64_t axes_count(const axes *a) {
  int64_t n = 1;
  for (int d = 0; d < a->n; d++) n *= a->size[d];
  return n;
}

static void cursor_seek(const axes *a, cursor *c, int64_t linear) {
  c->in = c->out = 0;
  for (int d = a->n - 1; d >= 0; d--) {
    c->idx[d] = linear % a->size[d];
    linear /= a->size[d];
    c->in += c->idx[d] * a->in[d];
    c->out += c->idx[d] * a->out[d];
  }
}

static void cursor_next(const axes *a, cursor *c) {
  for (int d = a->n - 1; d >= 0; d--) {
    c->in += a->in[d];
    c->out += a->out[d];
    if (++c->idx[d] < a->size[d]) return;
    c->in -= a->in[d] * a->size[d];
    c->out -= a->out[d] * a->size[d];
    c->idx[d] = 0;
  }
}

/* The input's dims as axes (row-major input strides, output strides by name), simplified. */
static void axes_make(const mtf_shape *in_shape, const mtf_shape *out_shape, axes *a) {
  int64_t out_strides[MTF_MAX_RANK], in_strides[MTF_MAX_RANK];
  mtf_strides_by_name(in_shape, out_shape, out_strides);
  mtf_row_major_strides(in_shape, in_strides);
  a->n = 0;
  for (int d = 0; d < in_shape->rank; d++) {
    int64_t size = in_shape->dims[d].size;
    if (size == 1) continue;
    int last = a->n - 1;
    if (last >= 0 && a->in[last] == in_strides[d] * size && a->out[last] == out_strides[d] * size) {
      a->size[last] *= size;
      a->in[last] = in_strides[d];
      a->out[last] = out_strides[d];
      continue;
    }
    a->size[a->n] = size;
    a->in[a->n] = in_strides[d];
    a->out[a->n] = out_strides[d];
    a->n++;
  }
}

/* The axes of `a` whose output stride is (keep = 1) or is not (keep = 0) zero, optionally without the last. */
static axes axes_select(const axes *a, int keep, int without_last) {
  axes s = {0};
  for (int d = 0; d < a->n - (without_last ? 1 : 0); d++)
    if ((a->out[d] != 0) == keep) {
      s.size[s.n] = a->size[d];
      s.in[s.n] = a->in[d];
      s.out[s.n] = a->out[d];
      s.n++;
    }
  return s;
}

/* One reduction's loop state, shared by its chunks; `outer` and `inner` are loop-specific sets of axes. */
typedef struct job {
  axes a, outer, inner;
  const float *in;
  float *out;
  int is_max;
  int64_t len, so, si, count, pieces, ti, to; /* loop-specific sizes and strides */
} job;

/* Permutation, innermost dim unchanged: the input in order, each row's elements contiguous in out. Threads
 * take contiguous ranges of input elements (a range may start or end inside a row). outer: the row axes. */
static void copy_rows_chunk(void *p, int64_t lo, int64_t hi) {
  const job *j = p;
  cursor c;
  cursor_seek(&j->outer, &c, lo / j->len);
  for (int64_t e = lo; e < hi;) {
    int64_t col = e % j->len, n = j->len - col < hi - e ? j->len - col : hi - e;
    memcpy(j->out + c.out + col, j->in + c.in + col, sizeof(float) * (size_t)n);
    e += n;
    cursor_next(&j->outer, &c);
  }
}

static void copy_rows(int threads, job *j) {
  int64_t total = axes_count(&j->a);
  j->outer = j->a;
  j->outer.n = j->a.n - 1;
  j->len = j->a.size[j->a.n - 1];
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, total), total, copy_rows_chunk, j);
}

#define TILE 16 /* floats: one 64-byte cache line */

/* Any other permutation: the input's innermost axis (length len: stride 1 in, `so` out) against the axis
 * innermost in the output (length count: stride `si` in, 1 out), in TILE x TILE blocks through a buffer, so
 * that every cache line of either side is read or written whole at once: with power-of-two strides the
 * lines of a block all map to one cache set, and a direct strided loop would evict them before their next
 * element is used. outer: every other axis, a batch. Units are (batch index, block). */
static void transpose_chunk(void *p, int64_t lo, int64_t hi) {
  const job *j = p;
  int64_t ni = j->len, no = j->count, so = j->so, si = j->si;
  float buf[TILE][TILE];
  for (int64_t u = lo; u < hi; u++) {
    cursor c;
    cursor_seek(&j->outer, &c, u / (j->ti * j->to));
    int64_t i0 = (u / j->to) % j->ti * TILE, o0 = u % j->to * TILE;
    int64_t ni_b = ni - i0 < TILE ? ni - i0 : TILE, no_b = no - o0 < TILE ? no - o0 : TILE;
    const float *src = j->in + c.in + o0 * si + i0;
    float *dst = j->out + c.out + i0 * so + o0;
    for (int64_t o = 0; o < no_b; o++)
      for (int64_t i = 0; i < ni_b; i++) buf[i][o] = src[o * si + i];
    for (int64_t i = 0; i < ni_b; i++)
      for (int64_t o = 0; o < no_b; o++) dst[i * so + o] = buf[i][o];
  }
}

static void transpose(int threads, job *j, int o_axis) {
  const axes *a = &j->a;
  int i_axis = a->n - 1;
  j->outer = (axes){0};
  for (int d = 0; d < a->n; d++)
    if (d != i_axis && d != o_axis) {
      j->outer.size[j->outer.n] = a->size[d];
      j->outer.in[j->outer.n] = a->in[d];
      j->outer.out[j->outer.n] = a->out[d];
      j->outer.n++;
    }
  j->len = a->size[i_axis];
  j->count = a->size[o_axis];
  j->so = a->out[i_axis];
  j->si = a->in[o_axis];
  j->ti = (j->len + TILE - 1) / TILE;
  j->to = (j->count + TILE - 1) / TILE;
  int64_t units = axes_count(&j->outer) * j->ti * j->to;
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, axes_count(a)), units, transpose_chunk, j);
}

/* Innermost axis kept (length len, output stride so): out rows start at the identity, then every reduced
 * index in the input's order adds (or maxes) one contiguous input row in. outer: the other kept axes;
 * inner: the reduced ones. Units are (kept index, piece of the row), so that a reduction to a single row
 * still splits over threads. */
static void reduce_columns_chunk(void *p, int64_t lo, int64_t hi) {
  const job *j = p;
  int64_t so = j->so, n_reduced = axes_count(&j->inner);
  for (int64_t u = lo; u < hi; u++) {
    cursor k, r;
    cursor_seek(&j->outer, &k, u / j->pieces);
    int64_t c0 = j->len * (u % j->pieces) / j->pieces, c1 = j->len * (u % j->pieces + 1) / j->pieces;
    float *dst = j->out + k.out;
    for (int64_t i = c0; i < c1; i++) dst[i * so] = j->is_max ? -INFINITY : 0.0f;
    cursor_seek(&j->inner, &r, 0);
    for (int64_t s = 0; s < n_reduced; s++, cursor_next(&j->inner, &r)) {
      const float *src = j->in + k.in + r.in;
      if (j->is_max && so == 1)
        for (int64_t i = c0; i < c1; i++) dst[i] = mtf_max_step(dst[i], src[i]);
      else if (j->is_max)
        for (int64_t i = c0; i < c1; i++) dst[i * so] = mtf_max_step(dst[i * so], src[i]);
      else if (so == 1)
        for (int64_t i = c0; i < c1; i++) dst[i] += src[i];
      else
        for (int64_t i = c0; i < c1; i++) dst[i * so] += src[i];
    }
  }
}

static void reduce_columns(int threads, job *j) {
  const axes *a = &j->a;
  j->outer = axes_select(a, 1, 1);
  j->inner = axes_select(a, 0, 1);
  j->len = a->size[a->n - 1];
  j->so = a->out[a->n - 1];
  int nt = mtf_cpu_threads(threads, axes_count(a));
  int64_t n_kept = axes_count(&j->outer), row_pieces = (j->len + 15) / 16;
  j->pieces = n_kept >= nt ? 1 : row_pieces < nt ? row_pieces : nt;
  mtf_cpu_parallel_for(nt, n_kept * j->pieces, reduce_columns_chunk, j);
}

/* Innermost axis reduced (length len): each output element is the reduction of contiguous input rows, one
 * per index of the other reduced axes (inner), in order. outer: the kept axes. */
static void reduce_rows_chunk(void *p, int64_t lo, int64_t hi) {
  const job *j = p;
  int64_t n_reduced = axes_count(&j->inner);
  cursor k;
  cursor_seek(&j->outer, &k, lo);
  for (int64_t u = lo; u < hi; u++, cursor_next(&j->outer, &k)) {
    cursor r;
    cursor_seek(&j->inner, &r, 0);
    double sum = 0.0;
    float max = -INFINITY;
    for (int64_t s = 0; s < n_reduced; s++, cursor_next(&j->inner, &r)) {
      const float *src = j->in + k.in + r.in;
      if (j->is_max) max = mtf_max_step(max, mtf_row_max(src, j->len));
      else sum += mtf_row_sum(src, j->len);
    }
    j->out[k.out] = j->is_max ? max : (float)sum;
  }
}

static void reduce_rows(int threads, job *j) {
  const axes *a = &j->a;
  j->outer = axes_select(a, 1, 0);
  j->inner = axes_select(a, 0, 1);
  j->len = a->size[a->n - 1];
  mtf_cpu_parallel_for(mtf_cpu_threads(threads, axes_count(a)), axes_count(&j->outer), reduce_rows_chunk, j);
}

static void reduce(int threads, int is_max, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                   float *out) {
  job j = {.in = in, .out = out, .is_max = is_max};
  axes *a = &j.a;
  axes_make(in_shape, out_shape, a);
  if (a->n == 0) { /* one element */
    out[0] = is_max ? mtf_max_step(-INFINITY, in[0]) : in[0];
    return;
  }
  int reduced = 0, o_axis = -1; /* o_axis: the axis innermost in the output */
  for (int d = 0; d < a->n; d++) {
    reduced += a->out[d] == 0;
    if (a->out[d] == 1) o_axis = d;
  }
  if (!reduced && !is_max && o_axis == a->n - 1) copy_rows(threads, &j);
  else if (!reduced && !is_max && o_axis >= 0) transpose(threads, &j, o_axis);
  else if (a->out[a->n - 1] != 0) reduce_columns(threads, &j);
  else reduce_rows(threads, &j);
}

void mtf_cpu_reduce_into(int threads, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                         float *out) {
  reduce(threads, 0, in_shape, in, out_shape, out);
}

void mtf_cpu_reduce_max(int threads, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                        float *out) {
  reduce(threads, 1, in_shape, in, out_shape, out);
}
