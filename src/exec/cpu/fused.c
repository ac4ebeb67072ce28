/* CPU kernels of the fused ops (softmax, log-softmax, layer/RMS norm, cross-entropy) in each phase, the
 * masked fill, and the embedding's gather and scatter-add. A "row" is every index of the other dims; the
 * op's dim has local size `len` and stride `inner` within the row. Rows run on the backend's threads, one
 * row per thread; row sums end in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/rowops.h"
#include "exec/cpu/strided.h"

/* One row of a fused op in the step's phase; rows write disjoint outputs, so they split over threads. */
typedef void (*row_fn)(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t row, float *out);

typedef struct rows_job {
  const mtf_step *st;
  const mtf_kernel_args *a;
  mtf_rows r;
  row_fn fn;
} rows_job;

static void rows_chunk(void *p, int64_t lo, int64_t hi) {
  rows_job *job = p;
  for (int64_t row = lo; row < hi; row++) job->fn(job->st, job->a, &job->r, row, job->a->out);
}

static void run_rows(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a, const char *dim, row_fn fn) {
  rows_job job = {st, a, mtf_rows_of(&st->in_shape[0], dim), fn};
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, job.r.count * job.r.len), job.r.count, rows_chunk, &job);
}

/* The row reductions: contiguous rows (the op's dim innermost, inner == 1, the common case) by rowops.h's
 * vectorised loops; strided rows by plain loops with double sums (the reference path). */
static float row_max(const float *x, const mtf_rows *r, int64_t row) {
  const float *p = x + mtf_row_base(r, row);
  if (r->inner == 1) return mtf_row_max(p, r->len);
  float m = -INFINITY;
  for (int64_t j = 0; j < r->len; j++) m = mtf_max_step(m, p[j * r->inner]);
  return m;
}

static double row_sum_exp(const float *x, const mtf_rows *r, int64_t row, float max) {
  const float *p = x + mtf_row_base(r, row);
  if (r->inner == 1) return mtf_row_sum_exp(p, r->len, max);
  double s = 0;
  for (int64_t j = 0; j < r->len; j++) s += exp((double)p[j * r->inner] - max);
  return s;
}

static void softmax_apply(const float *x, const mtf_rows *r, int64_t row, float max, double sum, int log_form, float *y) {
  const float *p = x + mtf_row_base(r, row);
  float *q = y + mtf_row_base(r, row);
  double log_sum = log(sum);
  if (r->inner == 1) {
    float ls = (float)log_sum, inv = (float)(1.0 / sum);
    if (log_form)
      for (int64_t j = 0; j < r->len; j++) q[j] = (p[j] - max) - ls;
    else
      for (int64_t j = 0; j < r->len; j++) q[j] = mtf_expf(p[j] - max) * inv;
    return;
  }
  for (int64_t j = 0; j < r->len; j++) {
    double v = (double)p[j * r->inner] - max;
    q[j * r->inner] = (float)(log_form ? v - log_sum : exp(v) / sum);
  }
}

/* One row of softmax / log-softmax in `phase` (checked by the caller). */
static void softmax_row(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t row, float *out) {
  const float *x = a->in[0];
  int log_form = st->op == MTF_OP_LOG_SOFTMAX;
  switch (st->phase) {
    case MTF_PHASE_WHOLE: {
      float m = row_max(x, r, row);
      softmax_apply(x, r, row, m, row_sum_exp(x, r, row, m), log_form, out);
      break;
    }
    case MTF_PHASE_MAX: out[row] = row_max(x, r, row); break;
    case MTF_PHASE_STATS: out[row] = (float)row_sum_exp(x, r, row, ((const float *)a->in[1])[row]); break;
    case MTF_PHASE_APPLY:
      softmax_apply(x, r, row, ((const float *)a->in[1])[row], ((const float *)a->in[2])[row], log_form, out);
      break;
    case MTF_PHASE_SUM: break;
  }
}

static int k_softmax(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_SUM) return MTF_ERR_INVALID;
  run_rows(b, st, a, st->params.along.dim, softmax_row);
  return MTF_OK;
}

/* Norms: y = (x - mean) * rsqrt(mean((x - mean)^2) + eps), mean 0 for RMS. Split: the row sum (layer
 * norm), then the sum of squares about the mean, then the result; all in double, as huge activations (a
 * diverged run) must give the same non-finite loss downstream as with double loops. */
static double row_sum(const float *x, const mtf_rows *r, int64_t row) {
  const float *p = x + mtf_row_base(r, row);
  if (r->inner == 1) return mtf_row_sum(p, r->len);
  double a = 0;
  for (int64_t j = 0; j < r->len; j++) a += p[j * r->inner];
  return a;
}

static double row_squares(const float *x, const mtf_rows *r, int64_t row, double mean) {
  const float *p = x + mtf_row_base(r, row);
  if (r->inner == 1) return mtf_row_sum_squares(p, r->len, mean);
  double q = 0;
  for (int64_t j = 0; j < r->len; j++) {
    double c = (double)p[j * r->inner] - mean;
    q += c * c;
  }
  return q;
}

static void norm_apply(const mtf_step *st, const float *x, const mtf_rows *r, int64_t row, double mean, double squares,
                       double n, float *y) {
  double inv = 1.0 / sqrt(squares / n + st->params.norm.epsilon);
  const float *p = x + mtf_row_base(r, row);
  if (st->out_dtype == MTF_BF16) { /* a bf16-stored output (lower/storage.c) */
    mtf_bf16 *q = (mtf_bf16 *)y + mtf_row_base(r, row);
    for (int64_t j = 0; j < r->len; j++)
      q[j * r->inner] = mtf_bf16_from_float((float)(((double)p[j * r->inner] - mean) * inv));
    return;
  }
  float *q = y + mtf_row_base(r, row);
  if (r->inner == 1) { /* the same expression, as its own loop so that it vectorises */
    for (int64_t j = 0; j < r->len; j++) q[j] = (float)(((double)p[j] - mean) * inv);
    return;
  }
  for (int64_t j = 0; j < r->len; j++) q[j * r->inner] = (float)(((double)p[j * r->inner] - mean) * inv);
}

static void norm_row(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t row, float *out) {
  int layer = st->op == MTF_OP_LAYER_NORM;
  double n = (double)st->global_dims[mtf_shape_index_of(&st->in_shape[0], st->params.norm.dim)];
  const float *x = a->in[0];
  double mean = 0;
  switch (st->phase) {
    case MTF_PHASE_WHOLE:
      if (layer) mean = row_sum(x, r, row) / n;
      norm_apply(st, x, r, row, mean, row_squares(x, r, row, mean), n, out);
      break;
    case MTF_PHASE_SUM: out[row] = (float)row_sum(x, r, row); break;
    case MTF_PHASE_STATS:
      if (layer) mean = ((const float *)a->in[1])[row] / n;
      out[row] = (float)row_squares(x, r, row, mean);
      break;
    case MTF_PHASE_APPLY: {
      if (layer) mean = ((const float *)a->in[1])[row] / n;
      const float *squares = a->in[layer ? 2 : 1];
      norm_apply(st, x, r, row, mean, squares[row], n, out);
      break;
    }
    case MTF_PHASE_MAX: break;
  }
}

static int k_norm(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_MAX) return MTF_ERR_INVALID;
  run_rows(b, st, a, st->params.norm.dim, norm_row);
  return MTF_OK;
}

/* Cross-entropy: loss = (1 - eps) (lse - x[label]) + eps (lse - sum(x) / vocab) + z * lse^2; labels are
 * global ids, this rank holds [dim_offset, dim_offset + len) of the vocab. */
float mtf_cpu_xent_value(const mtf_step *st, double lse, double target, double sum_x) {
  double eps = st->params.xent.label_smoothing, z = st->params.xent.z_loss;
  double smooth = eps != 0.0 ? eps * (lse - sum_x / (double)st->params.xent.vocab) : 0.0;
  return (float)((1.0 - eps) * (lse - target) + smooth + z * lse * lse);
}

static double row_sum_x(const float *x, const mtf_rows *r, int64_t row) {
  const float *p = x + mtf_row_base(r, row);
  double s = 0;
  for (int64_t j = 0; j < r->len; j++) s += p[j * r->inner];
  return s;
}

/* One row of the loss in MAX, STATS or WHOLE: x the logits with r's geometry (row `row`), and out the step's
 * output; for bf16-stored logits r is one contiguous row and `row` numbers the step's rows (labels, out). */
static void xent_row_at(const mtf_step *st, const mtf_kernel_args *a, const float *x, const mtf_rows *r, int64_t at,
                        int64_t row, int64_t rows, float *out) {
  if (st->phase == MTF_PHASE_MAX) {
    out[row] = row_max(x, r, at);
    return;
  }
  const void *labels = a->in[st->phase == MTF_PHASE_STATS ? 2 : 1];
  mtf_dtype label_type = st->in_dtype[st->phase == MTF_PHASE_STATS ? 2 : 1];
  float m = st->phase == MTF_PHASE_STATS ? ((const float *)a->in[1])[row] : row_max(x, r, at);
  double sum = row_sum_exp(x, r, at, m);
  int64_t local = mtf_cpu_index(labels, label_type, row) - st->dim_offset;
  double target = local >= 0 && local < r->len ? x[mtf_row_base(r, at) + local * r->inner] : 0.0;
  int smoothed = st->params.xent.label_smoothing != 0.0f;
  double sum_x = smoothed ? row_sum_x(x, r, at) : 0.0;
  if (st->phase == MTF_PHASE_STATS) {
    out[row] = (float)sum;
    out[rows + row] = (float)target;
    if (smoothed) out[2 * rows + row] = (float)sum_x;
  } else {
    out[row] = mtf_cpu_xent_value(st, m + log(sum), target, sum_x);
  }
}

static void xent_row(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t row, float *out) {
  xent_row_at(st, a, a->in[0], r, row, row, r->count, out);
}

/* bf16-stored logits (lower/storage.c): each row widened into fp32 first, rows split over the threads. */
typedef struct xent_bf16_job {
  const mtf_step *st;
  const mtf_kernel_args *a;
  mtf_rows r;
  int failed;
} xent_bf16_job;

static void xent_bf16_chunk(void *ctx, int64_t lo, int64_t hi) {
  xent_bf16_job *job = ctx;
  const mtf_rows *r = &job->r;
  mtf_rows one = {1, r->len, 1, 1}; /* one contiguous row */
  float *x = malloc(sizeof(float) * (size_t)(r->len + 1));
  if (!x) {
    job->failed = 1;
    return;
  }
  for (int64_t row = lo; row < hi; row++) {
    const mtf_bf16 *p = (const mtf_bf16 *)job->a->in[0] + mtf_row_base(r, row);
    mtf_cpu_widen_row(p, r->inner, x, r->len);
    xent_row_at(job->st, job->a, x, &one, 0, row, r->count, job->a->out);
  }
  free(x);
}

static int xent_rows_bf16(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  xent_bf16_job job = {st, a, mtf_rows_of(&st->in_shape[0], st->params.xent.dim), 0};
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, job.r.count * job.r.len), job.r.count, xent_bf16_chunk, &job);
  return job.failed ? MTF_ERR_NOMEM : MTF_OK;
}

static int k_xent(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  float *out = a->out;
  if (st->phase == MTF_PHASE_APPLY) { /* in: max [rows], [sum exp, target (, sum x with smoothing)] */
    const float *m = a->in[0], *stats = a->in[1];
    int64_t count = mtf_shape_num_elements(&st->out_shape);
    int smoothed = st->params.xent.label_smoothing != 0.0f;
    for (int64_t row = 0; row < count; row++)
      out[row] = mtf_cpu_xent_value(st, m[row] + log((double)stats[row]), stats[count + row],
                            smoothed ? stats[2 * count + row] : 0.0);
    return MTF_OK;
  }
  if (st->in_dtype[0] == MTF_BF16) return xent_rows_bf16(b, st, a);
  run_rows(b, st, a, st->params.xent.dim, xent_row);
  return MTF_OK;
}

static void masked_fill_segment(int64_t n, const float *x, int64_t sx, const float *mask, int64_t sm, float fill,
                                float *d) {
  if (sx == 1 && sm == 1)
    for (int64_t i = 0; i < n; i++) d[i] = mask[i] != 0.0f ? x[i] : fill;
  else if (sx == 1 && sm == 0)
    for (int64_t i = 0; i < n; i++) d[i] = mask[0] != 0.0f ? x[i] : fill;
  else
    for (int64_t i = 0; i < n; i++) d[i] = mask[i * sm] != 0.0f ? x[i * sx] : fill;
}

typedef struct masked_fill_job {
  mtf_walk w;
  const float *x, *mask;
  float fill, *out;
} masked_fill_job;

static void masked_fill_chunk(void *p, int64_t lo, int64_t hi) {
  masked_fill_job *job = p;
  mtf_walk t = job->w;
  int64_t sx = t.strides[0][t.rank - 1], sm = t.strides[1][t.rank - 1];
  MTF_WALK_SEGMENTS(t, lo, hi,
                    masked_fill_segment(len, job->x + t.offset[0] + col * sx, sx, job->mask + t.offset[1] + col * sm,
                                        sm, job->fill, job->out + e));
}

static int k_masked_fill(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[2] = {&st->in_shape[0], &st->in_shape[1]};
  masked_fill_job job = {.x = a->in[0], .mask = a->in[1], .fill = st->params.fill.value, .out = a->out};
  mtf_walk_init(&job.w, &st->out_shape, 2, ops);
  mtf_walk_coalesce(&job.w);
  int64_t total = job.w.rows * job.w.inner;
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, total), total, masked_fill_chunk, &job);
  return MTF_OK;
}

/* Offset in `table` of element j of `rest` (table without the vocab dim, in table order). */
static int64_t table_offset(const mtf_shape *table, int vocab_dim, int64_t j) {
  int64_t offset = 0, stride = 1;
  for (int d = table->rank - 1; d >= 0; d--) {
    if (d != vocab_dim) {
      int64_t size = table->dims[d].size;
      offset += (j % size) * stride;
      j /= size;
    }
    stride *= table->dims[d].size;
  }
  return offset;
}

/* gather: out[p, j] = table[id_p - offset, j]; scatter-add: table[id_p - offset, j] += rows[p, j]. Threads
 * split the ids (gather) or the table's rows (scatter-add: each thread scans every id in order and adds
 * those in its rows, so a row hit by several ids sums them in id order on any thread count). */
static void gather_or_scatter(const mtf_step *st, const mtf_kernel_args *a, int scatter, int64_t lo, int64_t hi) {
  const mtf_shape *table = scatter ? &st->out_shape : &st->in_shape[0];
  int v = mtf_shape_index_of(table, st->params.along.dim);
  int64_t len = table->dims[v].size, vstride = 1;
  for (int d = v + 1; d < table->rank; d++) vstride *= table->dims[d].size;
  int64_t n_ids = mtf_shape_num_elements(&st->in_shape[1]), n_rest = mtf_shape_num_elements(table) / (len ? len : 1);
  int contiguous = v == 0; /* rows of the table are whole rows of the output */
  float *out = a->out;
  for (int64_t p = scatter ? 0 : lo; p < (scatter ? n_ids : hi); p++) {
    int64_t local = mtf_cpu_index(a->in[1], st->in_dtype[1], p) - st->dim_offset;
    int inside = local >= 0 && local < len;
    if (scatter) {
      if (!inside || local < lo || local >= hi) continue;
      const float *src = (const float *)a->in[0] + p * n_rest;
      float *row = out + local * vstride;
      if (contiguous)
        for (int64_t j = 0; j < n_rest; j++) row[j] += src[j];
      else
        for (int64_t j = 0; j < n_rest; j++) row[table_offset(table, v, j)] += src[j];
      continue;
    }
    float *dst = out + p * n_rest;
    if (!inside) {
      mtf_cpu_fill(0.0f, n_rest, dst);
      continue;
    }
    const float *row = (const float *)a->in[0] + local * vstride;
    if (contiguous)
      memcpy(dst, row, sizeof(float) * (size_t)n_rest);
    else
      for (int64_t j = 0; j < n_rest; j++) dst[j] = row[table_offset(table, v, j)];
  }
}

typedef struct embedding_job {
  const mtf_step *st;
  const mtf_kernel_args *a;
  int scatter;
} embedding_job;

static void embedding_chunk(void *p, int64_t lo, int64_t hi) {
  embedding_job *job = p;
  gather_or_scatter(job->st, job->a, job->scatter, lo, hi);
}

static int embedding(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a, int scatter) {
  const mtf_shape *table = scatter ? &st->out_shape : &st->in_shape[0];
  int v = mtf_shape_index_of(table, st->params.along.dim);
  int64_t units = scatter ? table->dims[v].size : mtf_shape_num_elements(&st->in_shape[1]);
  int64_t elements = scatter ? mtf_shape_num_elements(table) : mtf_shape_num_elements(&st->out_shape);
  if (scatter && a->scatter_base) { /* lower/fuse_scatter.c: into the other term of the sum (or over it) */
    if (a->scatter_base != a->out) memcpy(a->out, a->scatter_base, sizeof(float) * (size_t)mtf_shape_num_elements(table));
  } else if (scatter) {
    mtf_cpu_fill_parallel(b->threads, 0.0f, mtf_shape_num_elements(table), a->out);
  }
  embedding_job job = {st, a, scatter};
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, elements), units, embedding_chunk, &job);
  return MTF_OK;
}

static int k_gather(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) { return embedding(b, st, a, 0); }

static int k_scatter_add(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  return embedding(b, st, a, 1);
}

void mtf_cpu_register_fused(mtf_kernel_fn *k) {
  k[MTF_OP_SOFTMAX] = k_softmax;
  k[MTF_OP_LOG_SOFTMAX] = k_softmax;
  k[MTF_OP_LAYER_NORM] = k_norm;
  k[MTF_OP_RMS_NORM] = k_norm;
  k[MTF_OP_SOFTMAX_XENT] = k_xent;
  k[MTF_OP_MASKED_FILL] = k_masked_fill;
  k[MTF_OP_GATHER] = k_gather;
  k[MTF_OP_SCATTER_ADD] = k_scatter_add;
}
