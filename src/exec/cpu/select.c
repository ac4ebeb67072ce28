/* CPU kernels of the selection ops (ops/select.c): top-k values and positions (argmax is k = 1 with the dim
 * removed), running sums, where, and the int32 -> float cast. Rows of the selected or scanned dim (whole
 * here: lowering gathers it) go over threads; every output element is computed by one thread in a fixed
 * order, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/rowops.h"
#include "exec/cpu/strided.h"

/* ---- top-k ---- */
typedef struct select_job {
  rows r;          /* of the input over the selected dim */
  int64_t k, out_stride; /* out_stride: of k_dim in the output (the input's inner, or 1 for argmax) */
  const float *in;
  void *out;
  int indices;     /* write int32 positions, not values */
  int failed;      /* out of memory in a chunk */
} select_job;

/* Whether a later entry v ranks before an earlier one u: strictly larger (equal ones keep index order);
 * NaN ranks below every number. */
static inline int later_ranks_before(float v, float u) { return !isnan(v) && (isnan(u) || v > u); }

static void select_chunk(void *p, int64_t lo, int64_t hi) {
  select_job *job = p;
  const rows *r = &job->r;
  int64_t k = job->k;
  int32_t stack[256], *best = k <= 256 ? stack : malloc(sizeof(int32_t) * (size_t)k);
  if (!best) {
    job->failed = 1;
    return;
  }
  for (int64_t row = lo; row < hi; row++) {
    const float *x = job->in + row_base(r, row);
    int64_t n = 0, s = r->inner;
    /* The k best so far, best first: a new entry goes in after every entry it does not beat. */
    for (int64_t j = 0; j < r->len; j++) {
      float v = x[j * s];
      if (n == k && !later_ranks_before(v, x[best[k - 1] * s])) continue;
      int64_t at = n < k ? n++ : k - 1;
      while (at > 0 && later_ranks_before(v, x[best[at - 1] * s])) {
        best[at] = best[at - 1];
        at--;
      }
      best[at] = (int32_t)j;
    }
    int64_t out = (row / r->inner) * k * r->inner + row % r->inner; /* the output row, k_dim in dim's place */
    for (int64_t i = 0; i < k; i++) {
      if (job->indices) ((int32_t *)job->out)[out + i * job->out_stride] = best[i];
      else ((float *)job->out)[out + i * job->out_stride] = x[best[i] * s];
    }
  }
  if (best != stack) free(best);
}

static int k_select(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int argmax = st->params.top_k.k_dim[0] == 0;
  select_job job = {.r = rows_of(&st->in_shape[0], st->params.top_k.dim), .k = argmax ? 1 : st->params.top_k.k,
                    .in = a->in[0], .out = a->out, .indices = st->op == MTF_OP_TOP_K_INDICES};
  job.out_stride = job.r.inner; /* argmax: k 1, never used beyond i = 0 */
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, job.r.count * job.r.len), job.r.count, select_chunk, &job);
  return job.failed ? MTF_ERR_NOMEM : MTF_OK;
}

/* ---- running sums ---- */
typedef struct scan_job {
  rows r;
  int exclusive, reverse;
  const float *in;
  float *out;
} scan_job;

/* Row by row in double (counts of routed tokens stay exact far beyond float's 2^24). */
static void scan_chunk(void *p, int64_t lo, int64_t hi) {
  scan_job *job = p;
  const rows *r = &job->r;
  int64_t s = r->inner;
  for (int64_t row = lo; row < hi; row++) {
    const float *x = job->in + row_base(r, row);
    float *y = job->out + row_base(r, row);
    double sum = 0;
    for (int64_t t = 0; t < r->len; t++) {
      int64_t j = job->reverse ? r->len - 1 - t : t;
      if (job->exclusive) {
        y[j * s] = (float)sum;
        sum += x[j * s];
      } else {
        sum += x[j * s];
        y[j * s] = (float)sum;
      }
    }
  }
}

static int k_cumsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  scan_job job = {.r = rows_of(&st->in_shape[0], st->params.scan.dim), .exclusive = st->params.scan.exclusive,
                  .reverse = st->params.scan.reverse, .in = a->in[0], .out = a->out};
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, job.r.count * job.r.len), job.r.count, scan_chunk, &job);
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
