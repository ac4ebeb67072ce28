/* CPU kernels of the selection ops (ops/select.c): top-k values and positions (argmax is k = 1 with the dim
 * removed), running sums (both also in the phases of a split dim), where, and the int32 -> float cast. Rows
 * of the selected or scanned dim go over threads; every output element is computed by one thread in a
 * fixed order, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/rowops.h"
#include "exec/cpu/strided.h"
#include "exec/scan.h"

/* ---- top-k ---- */
/* Whether entry (v, i) ranks before (u, j): larger first, equal ones by position, NaN below every number. */
static inline int ranks_before(float v, int64_t i, float u, int64_t j) {
  if (isnan(v) || isnan(u)) return isnan(v) == isnan(u) ? i < j : !isnan(v);
  return v > u || (v == u && i < j);
}

/* The k best entries seen so far, best first. */
typedef struct best_list {
  int64_t k, n;
  float *value;
  int64_t *index;
} best_list;

static inline void best_offer(best_list *b, float v, int64_t i) {
  if (b->n == b->k && !ranks_before(v, i, b->value[b->k - 1], b->index[b->k - 1])) return;
  int64_t at = b->n < b->k ? b->n++ : b->k - 1;
  for (; at > 0 && ranks_before(v, i, b->value[at - 1], b->index[at - 1]); at--) {
    b->value[at] = b->value[at - 1];
    b->index[at] = b->index[at - 1];
  }
  b->value[at] = v;
  b->index[at] = i;
}

typedef struct select_job {
  const mtf_step *st;
  mtf_rows r;          /* rows of the input over the dim (APPLY: of the candidates) */
  int64_t k;       /* entries kept per row */
  int64_t out_inner; /* stride of k_dim in the output (1 past the dim for argmax: k is 1) */
  int64_t slot, parts; /* STATS: this rank's slot among parts */
  const float *in;
  void *out;
  int failed;      /* out of memory in a chunk */
} select_job;

static void select_chunk(void *p, int64_t lo, int64_t hi) {
  select_job *job = p;
  const mtf_step *st = job->st;
  const mtf_rows *r = &job->r;
  float value_stack[128];
  int64_t index_stack[128];
  best_list b = {job->k, 0, value_stack, index_stack};
  if (job->k > 128) {
    b.value = malloc(sizeof(float) * (size_t)job->k);
    b.index = malloc(sizeof(int64_t) * (size_t)job->k);
  }
  if (!b.value || !b.index) {
    job->failed = 1;
    if (job->k > 128) free(b.value), free(b.index);
    return;
  }
  int64_t count = r->count, stride = r->inner;
  for (int64_t row = lo; row < hi; row++) {
    b.n = 0;
    if (st->phase == MTF_PHASE_APPLY) { /* candidates [_stats: 2C, rows]: C values, then their positions */
      const float *c = job->in;
      int64_t n = r->len / 2;
      for (int64_t j = 0; j < n; j++) best_offer(&b, c[j * count + row], (int64_t)c[(n + j) * count + row]);
    } else {
      const float *x = job->in + mtf_row_base(r, row);
      for (int64_t j = 0; j < r->len; j++) best_offer(&b, x[j * stride], j);
    }
    if (st->phase == MTF_PHASE_STATS) { /* this rank's slot of the zeroed candidates, positions global */
      float *c = job->out;
      int64_t n = job->parts * job->k;
      for (int64_t i = 0; i < job->k; i++) {
        c[(job->slot * job->k + i) * count + row] = b.value[i];
        c[(n + job->slot * job->k + i) * count + row] = (float)(st->dim_offset + b.index[i]);
      }
      continue;
    }
    int64_t out = (row / job->out_inner) * job->k * job->out_inner + row % job->out_inner; /* k_dim in dim's place */
    for (int64_t i = 0; i < job->k; i++) {
      if (st->op == MTF_OP_TOP_K_INDICES) ((int32_t *)job->out)[out + i * job->out_inner] = (int32_t)b.index[i];
      else ((float *)job->out)[out + i * job->out_inner] = b.value[i];
    }
  }
  if (job->k > 128) free(b.value), free(b.index);
}

/* WHOLE: the dim whole in the input. Split dim: STATS selects this rank's candidates into its slot, APPLY
 * the k best of everyone's (ops/select.c). */
static int k_select(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int argmax = st->params.top_k.k_dim[0] == 0;
  int64_t k = argmax ? 1 : st->params.top_k.k;
  select_job job = {.st = st, .k = k, .in = a->in[0], .out = a->out};
  if (st->phase == MTF_PHASE_APPLY) { /* rows: the candidates' trailing dims; len: all 2C of them */
    int64_t s = st->in_shape[0].dims[0].size;
    job.r = (mtf_rows){1, s, mtf_shape_num_elements(&st->in_shape[0]) / s, mtf_shape_num_elements(&st->in_shape[0]) / s};
  } else {
    job.r = mtf_rows_of(&st->in_shape[0], st->params.top_k.dim);
  }
  job.out_inner = argmax ? 1 : mtf_rows_of(&st->out_shape, st->params.top_k.k_dim).inner;
  if (st->phase == MTF_PHASE_STATS) {
    job.k = k < job.r.len ? k : job.r.len;
    job.parts = st->out_shape.dims[0].size / (2 * job.k);
    job.slot = st->dim_offset / job.r.len;
    mtf_cpu_fill_parallel(b->threads, 0.0f, mtf_shape_num_elements(&st->out_shape), a->out);
  }
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, job.r.count * job.r.len), job.r.count, select_chunk, &job);
  return job.failed ? MTF_ERR_NOMEM : MTF_OK;
}

/* ---- running sums ---- */
typedef struct scan_job {
  mtf_scan_spec spec;
  const float *in, *totals;
  float *out;
} scan_job;

static void scan_chunk(void *p, int64_t lo, int64_t hi) {
  const scan_job *job = p;
  for (int64_t row = lo; row < hi; row++) mtf_scan_row(&job->spec, row, job->in, job->totals, job->out);
}

/* WHOLE, or a split dim's STATS and APPLY phases (exec/scan.h). */
static int k_cumsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  scan_job job = {mtf_scan_spec_of(st), a->in[0], st->phase == MTF_PHASE_APPLY ? a->in[1] : NULL, a->out};
  if (job.spec.stats) mtf_cpu_fill_parallel(b->threads, 0.0f, mtf_shape_num_elements(&st->out_shape), a->out);
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, job.spec.r.count * job.spec.r.len), job.spec.r.count, scan_chunk,
                       &job);
  return MTF_OK;
}

/* ---- where ---- */
typedef struct where_job {
  mtf_walk w;
  const void *cond;
  mtf_dtype cond_dtype;
  const float *a, *b;
  float *out;
} where_job;

/* One row segment of where: n elements, operand strides sc, sa, sb along it. */
static void where_segment(const where_job *job, int64_t n, int64_t c0, int64_t sc, const float *x, int64_t sa,
                          const float *y, int64_t sb, float *d) {
  if (job->cond_dtype == MTF_I32) {
    const int32_t *c = (const int32_t *)job->cond + c0;
    for (int64_t i = 0; i < n; i++) d[i] = c[i * sc] != 0 ? x[i * sa] : y[i * sb];
  } else {
    const float *c = (const float *)job->cond + c0;
    for (int64_t i = 0; i < n; i++) d[i] = c[i * sc] != 0.0f ? x[i * sa] : y[i * sb];
  }
}

static void where_chunk(void *p, int64_t lo, int64_t hi) {
  where_job *job = p;
  mtf_walk t = job->w;
  int64_t sc = t.strides[0][t.rank - 1], sa = t.strides[1][t.rank - 1], sb = t.strides[2][t.rank - 1];
  MTF_WALK_SEGMENTS(t, lo, hi,
                    where_segment(job, len, t.offset[0] + col * sc, sc, job->a + t.offset[1] + col * sa, sa,
                                  job->b + t.offset[2] + col * sb, sb, job->out + e));
}

static int k_where(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *ops[3] = {&st->in_shape[0], &st->in_shape[1], &st->in_shape[2]};
  where_job job = {.cond = a->in[0], .cond_dtype = st->in_dtype[0], .a = a->in[1], .b = a->in[2], .out = a->out};
  mtf_walk_init(&job.w, &st->out_shape, 3, ops);
  mtf_walk_coalesce(&job.w);
  int64_t total = job.w.rows * job.w.inner;
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, total), total, where_chunk, &job);
  return MTF_OK;
}

/* ---- int32 -> float ---- */
static int k_to_float(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  float *out = a->out;
  if (st->in_dtype[0] == MTF_F32) memmove(out, a->in[0], sizeof(float) * (size_t)n);
  else
    for (int64_t i = 0; i < n; i++) out[i] = (float)((const int32_t *)a->in[0])[i];
  return MTF_OK;
}

void mtf_cpu_register_select(mtf_kernel_fn *k) {
  k[MTF_OP_TOP_K] = k_select;
  k[MTF_OP_TOP_K_INDICES] = k_select;
  k[MTF_OP_CUMSUM] = k_cumsum;
  k[MTF_OP_WHERE] = k_where;
  k[MTF_OP_TO_FLOAT] = k_to_float;
}
