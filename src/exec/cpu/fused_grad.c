/* CPU kernels of the fused gradient ops (ops/fused_grad.c) in each phase. A "row" is every index of the
 * other dims; the op's dim has local size `len` and stride `inner` within the row. Each row function
 * takes the stride as an argument and is called with a literal 1 when the dim is innermost, so the
 * compiler makes a contiguous copy of it. Sums accumulate in double, elementwise work is in float; exp and
 * gelu' are fastmath.h's (no libm call in a loop: the loops vectorise, and the values are the forward kernels').
 * The split phases' statistics buffers are [k, rows]: statistic i of row r is at i * rows + r. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "exec/cpu/fastmath.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/rowops.h"

/* The rank holding index 0 of the dim writes the values carried through a sum-allreduce; others write 0. */
static inline float carried(const mtf_step *st, float value) { return st->dim_offset == 0 ? value : 0.0f; }

/* ---- softmax / log-softmax: y * (dy - sum(dy * y)), dy - exp(y) * sum(dy) ---- */
static inline double softmax_row_sum(const float *y, const float *dy, int64_t len, int64_t stride, int log_form) {
  double s = 0;
  if (log_form)
    for (int64_t j = 0; j < len; j++) s += dy[j * stride];
  else
    for (int64_t j = 0; j < len; j++) s += (double)dy[j * stride] * y[j * stride];
  return s;
}

static inline void softmax_row_apply(const float *y, const float *dy, float sum, int64_t len, int64_t stride,
                                     int log_form, float *out) {
  if (log_form)
    for (int64_t j = 0; j < len; j++) out[j * stride] = dy[j * stride] - mtf_expf(y[j * stride]) * sum;
  else
    for (int64_t j = 0; j < len; j++) out[j * stride] = y[j * stride] * (dy[j * stride] - sum);
}

static inline void softmax_rows(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t stride) {
  const float *y = a->in[0], *dy = a->in[1];
  float *out = a->out;
  int log_form = st->op == MTF_OP_LOG_SOFTMAX_GRAD;
  for (int64_t row = 0; row < r->count; row++) {
    int64_t b = mtf_row_base(r, row);
    if (st->phase == MTF_PHASE_STATS) {
      out[row] = (float)softmax_row_sum(y + b, dy + b, r->len, stride, log_form);
      continue;
    }
    float sum = st->phase == MTF_PHASE_APPLY ? ((const float *)a->in[2])[row]
                                             : (float)softmax_row_sum(y + b, dy + b, r->len, stride, log_form);
    softmax_row_apply(y + b, dy + b, sum, r->len, stride, log_form, out + b);
  }
}

static int k_softmax_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  if (st->phase != MTF_PHASE_WHOLE && st->phase != MTF_PHASE_STATS && st->phase != MTF_PHASE_APPLY) return MTF_ERR_INVALID;
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.along.dim);
  if (r.inner == 1)
    softmax_rows(st, a, &r, 1);
  else
    softmax_rows(st, a, &r, r.inner);
  return MTF_OK;
}

/* ---- layer / RMS norm: dx = r (dy - c r^2 sum(dy c) / n - sum(dy) / n), c = x - mean (mean 0 for RMS),
 * r = rsqrt(sum(c^2) / n + eps); n is the dim's global size ---- */
typedef struct norm_sums {
  double x, squares, dy, dy_c; /* sum x (carried), sum c^2, sum dy, sum dy c */
} norm_sums;

static inline double norm_row_sum(const float *x, int64_t len, int64_t stride) {
  double s = 0;
  for (int64_t j = 0; j < len; j++) s += x[j * stride];
  return s;
}

static inline norm_sums norm_row_sums(const float *x, const float *dy, double mean, int64_t len, int64_t stride) {
  norm_sums s = {0, 0, 0, 0};
  for (int64_t j = 0; j < len; j++) {
    double c = (double)x[j * stride] - mean, d = dy[j * stride];
    s.squares += c * c;
    s.dy += d;
    s.dy_c += d * c;
  }
  return s;
}

/* The same sums in 16 float lanes (element j in lane j % 16) moved into double every MTF_ROW_BLOCK elements, as
 * rowops.h's sums: for contiguous rows of steps under the bf16 policy (mtf_step.bf16_policy), whose sums may
 * differ from the running double's in the last bits; fp32 runs keep norm_row_sums. GCC's vector type makes the
 * lanes registers (arrays of lanes stayed in memory: 2.6x slower here). */
typedef float norm_lanes __attribute__((vector_size(sizeof(float) * MTF_LANES)));

static inline norm_sums norm_row_sums_lanes(const float *x, const float *dy, double mean, int64_t len) {
  norm_sums s = {0, 0, 0, 0};
  const float m = (float)mean;
  int64_t j = 0;
  while (j + MTF_LANES <= len) {
    norm_lanes sq = {0}, d = {0}, dc = {0};
    int64_t end = j + MTF_ROW_BLOCK < len ? j + MTF_ROW_BLOCK : len;
    for (; j + MTF_LANES <= end; j += MTF_LANES) {
      norm_lanes c, g;
      memcpy(&c, x + j, sizeof c);
      memcpy(&g, dy + j, sizeof g);
      c -= m;
      sq += c * c;
      d += g;
      dc += g * c;
    }
    for (int k = 0; k < MTF_LANES; k++) {
      s.squares += sq[k];
      s.dy += d[k];
      s.dy_c += dc[k];
    }
  }
  for (; j < len; j++) {
    double c = (double)x[j] - mean, g = dy[j];
    s.squares += c * c;
    s.dy += g;
    s.dy_c += g * c;
  }
  return s;
}

static inline norm_sums norm_sums_of(const mtf_step *st, const float *x, const float *dy, double mean, int64_t len,
                                     int64_t stride) {
  if (st->bf16_policy && stride == 1) return norm_row_sums_lanes(x, dy, mean, len);
  return norm_row_sums(x, dy, mean, len, stride);
}

static inline double norm_sum_of(const mtf_step *st, const float *x, int64_t len, int64_t stride) {
  if (st->bf16_policy && stride == 1) return mtf_row_sum(x, len);
  return norm_row_sum(x, len, stride);
}

/* accumulate: out += the gradient (an add fused into the step, lower/fuse_add.c), else out = it */
static inline void norm_row_apply(const float *x, const float *dy, double mean, const norm_sums *s, double n, float eps,
                                  int layer, int accumulate, int64_t len, int64_t stride, float *out) {
  double r = 1.0 / sqrt(s->squares / n + eps);
  float scale = (float)r, slope = (float)(r * r * r * s->dy_c / n), shift = layer ? (float)(r * s->dy / n) : 0.0f;
  float m = (float)mean;
  if (accumulate)
    for (int64_t j = 0; j < len; j++) {
      float g = scale * dy[j * stride] - slope * (x[j * stride] - m) - shift;
      out[j * stride] += g;
    }
  else
    for (int64_t j = 0; j < len; j++) out[j * stride] = scale * dy[j * stride] - slope * (x[j * stride] - m) - shift;
}

static inline void norm_rows(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, double n, int64_t stride) {
  const float *x = a->in[0], *dy = a->in[1];
  float *out = a->out;
  int layer = st->op == MTF_OP_LAYER_NORM_GRAD;
  float eps = st->params.norm.epsilon;
  for (int64_t row = 0; row < r->count; row++) {
    int64_t b = mtf_row_base(r, row);
    switch (st->phase) {
      case MTF_PHASE_WHOLE: {
        double mean = layer ? norm_sum_of(st, x + b, r->len, stride) / n : 0.0;
        norm_sums s = norm_sums_of(st, x + b, dy + b, mean, r->len, stride);
        norm_row_apply(x + b, dy + b, mean, &s, n, eps, layer, st->accumulate, r->len, stride, out + b);
        break;
      }
      case MTF_PHASE_SUM: out[row] = (float)norm_sum_of(st, x + b, r->len, stride); break;
      case MTF_PHASE_STATS: { /* in[2]: the allreduced sum of x (layer norm) */
        float total = layer ? ((const float *)a->in[2])[row] : 0.0f;
        norm_sums s = norm_sums_of(st, x + b, dy + b, total / n, r->len, stride);
        out[row] = carried(st, total);
        out[r->count + row] = (float)s.squares;
        out[2 * r->count + row] = (float)s.dy;
        out[3 * r->count + row] = (float)s.dy_c;
        break;
      }
      case MTF_PHASE_APPLY: {
        const float *stats = a->in[2];
        norm_sums s = {stats[row], stats[r->count + row], stats[2 * r->count + row], stats[3 * r->count + row]};
        norm_row_apply(x + b, dy + b, s.x / n, &s, n, eps, layer, st->accumulate, r->len, stride, out + b);
        break;
      }
      case MTF_PHASE_MAX: break;
    }
  }
}

static int k_norm_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  if (st->phase == MTF_PHASE_MAX) return MTF_ERR_INVALID;
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.norm.dim);
  double n = (double)st->global_dims[mtf_shape_index_of(&st->in_shape[0], st->params.norm.dim)];
  if (r.inner == 1)
    norm_rows(st, a, &r, n, 1);
  else
    norm_rows(st, a, &r, n, r.inner);
  return MTF_OK;
}

/* ---- cross-entropy: dlogits = (softmax(x) (1 + 2 z lse) - one_hot(label)) dy; labels are global ids,
 * this rank holds [dim_offset, dim_offset + len) ---- */
static inline float xent_row_max(const float *x, int64_t len, int64_t stride) {
  if (stride == 1) return mtf_row_max(x, len);
  float m = -INFINITY;
  for (int64_t j = 0; j < len; j++) m = x[j * stride] > m ? x[j * stride] : m;
  return m;
}

/* Writes exp(x - max) to out and returns its sum. */
static inline double xent_row_exp(const float *x, float max, int64_t len, int64_t stride, float *out) {
  if (stride == 1) return mtf_row_exp_sum(x, len, max, out);
  double s = 0;
  for (int64_t j = 0; j < len; j++) {
    float e = mtf_expf(x[j * stride] - max);
    out[j * stride] = e;
    s += e;
  }
  return s;
}

/* The factor of exp(x - max) in the gradient: dy (1 + 2 z lse) / sum (z the z-loss weight). */
static inline float xent_grad_scale(const mtf_step *st, double lse, double sum, float dy) {
  return (float)(dy * (1.0 + 2.0 * st->params.xent.z_loss * lse) / sum);
}

/* out holds exp(x - max): scales it to the gradient and subtracts (1 - eps) dy at the label and eps dy /
 * vocab everywhere (label smoothing eps). */
static inline void xent_row_apply(const mtf_step *st, float max, double sum, float dy, int64_t label, int64_t len,
                                  int64_t stride, float *out) {
  float scale = xent_grad_scale(st, max + log(sum), sum, dy);
  float eps = st->params.xent.label_smoothing;
  if (eps != 0.0f) {
    float uniform = (float)(eps * dy / (double)st->params.xent.vocab);
    for (int64_t j = 0; j < len; j++) out[j * stride] = out[j * stride] * scale - uniform;
  } else {
    for (int64_t j = 0; j < len; j++) out[j * stride] *= scale;
  }
  int64_t local = label - st->dim_offset;
  if (local >= 0 && local < len) out[local * stride] -= (1.0f - eps) * dy;
}

/* The row from the forward's loss (lower/fuse_xent.c: no smoothing, no z-loss, the whole vocab here): its
 * logsumexp is loss + x[label] (the forward's loss is lse - x[label]), so one pass writes exp(x - lse) dy. */
static inline void xent_row_from_loss(const mtf_step *st, float loss, float dy, int64_t label, const float *x,
                                      int64_t len, int64_t stride, float *out) {
  int64_t local = label - st->dim_offset;
  int here = local >= 0 && local < len;
  float lse = (float)((double)loss + (here ? (double)x[local * stride] : 0.0));
  if (stride == 1)
    for (int64_t j = 0; j < len; j++) out[j] = mtf_expf(x[j] - lse) * dy;
  else
    for (int64_t j = 0; j < len; j++) out[j * stride] = mtf_expf(x[j * stride] - lse) * dy;
  if (here) out[local * stride] -= dy;
}

/* The row of a merged forward and gradient (lower/fuse_xent.c: no smoothing, no z-loss, the whole vocab here):
 * the forward's loss, from the same max, float-lane sum and formula as its kernel (fused.c), then the gradient
 * from the exponentials kept in o. */
static inline void xent_row_with_loss(const mtf_step *st, const mtf_kernel_args *a, int64_t row, const float *x,
                                      int64_t len, int64_t stride, float *o) {
  float m = xent_row_max(x, len, stride);
  int64_t label = mtf_cpu_index(a->in[1], st->in_dtype[1], row), local = label - st->dim_offset;
  double target = local >= 0 && local < len ? x[local * stride] : 0.0; /* before o, which may be x, is written */
  double sum;
  if (stride == 1) {
    sum = mtf_row_sum_exp_into(x, len, m, o);
  } else {
    sum = 0; /* as the forward's strided rows: libm's exp in double */
    for (int64_t j = 0; j < len; j++) {
      double e = exp((double)x[j * stride] - m);
      sum += e;
      o[j * stride] = (float)e;
    }
  }
  a->xent_loss_out[row] = mtf_cpu_xent_value(st, m + log(sum), target, 0.0);
  xent_row_apply(st, m, sum, ((const float *)a->in[2])[row], label, len, stride, o);
}

/* One row: x its logits (stride apart), o its gradient's row (WHOLE, APPLY), out the step's output (the
 * per-row statistics of MAX and STATS). */
static inline void xent_row(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t row,
                            const float *x, int64_t stride, float *o, float *out) {
  switch (st->phase) {
    case MTF_PHASE_WHOLE: { /* in: logits, labels, dy */
      if (a->xent_loss_out) {
        xent_row_with_loss(st, a, row, x, r->len, stride, o);
        break;
      }
      if (a->xent_loss) {
        xent_row_from_loss(st, a->xent_loss[row], ((const float *)a->in[2])[row],
                           mtf_cpu_index(a->in[1], st->in_dtype[1], row), x, r->len, stride, o);
        break;
      }
      float m = xent_row_max(x, r->len, stride);
      double sum = xent_row_exp(x, m, r->len, stride, o);
      float dy = ((const float *)a->in[2])[row];
      xent_row_apply(st, m, sum, dy, mtf_cpu_index(a->in[1], st->in_dtype[1], row), r->len, stride, o);
      break;
    }
    case MTF_PHASE_MAX: out[row] = xent_row_max(x, r->len, stride); break;
    case MTF_PHASE_STATS: { /* in: logits, the allreduced max, dy; exp(x - max) is recomputed in APPLY */
      float m = ((const float *)a->in[1])[row];
      double sum = 0;
      if (stride == 1)
        sum = mtf_row_sum_exp(x, r->len, m);
      else
        for (int64_t j = 0; j < r->len; j++) sum += mtf_expf(x[j * stride] - m);
      out[row] = (float)sum;
      out[r->count + row] = carried(st, m);
      out[2 * r->count + row] = carried(st, ((const float *)a->in[2])[row]);
      break;
    }
    case MTF_PHASE_APPLY: { /* in: logits, labels, [sum exp, max, dy] */
      const float *stats = a->in[2];
      float m = stats[r->count + row];
      xent_row_exp(x, m, r->len, stride, o);
      xent_row_apply(st, m, stats[row], stats[2 * r->count + row], mtf_cpu_index(a->in[1], st->in_dtype[1], row),
                     r->len, stride, o);
      break;
    }
    case MTF_PHASE_SUM: break;
  }
}

static inline void xent_rows(const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r, int64_t stride) {
  for (int64_t row = 0; row < r->count; row++) {
    int64_t b = mtf_row_base(r, row);
    xent_row(st, a, r, row, (const float *)a->in[0] + b, stride, (float *)a->out + b, a->out);
  }
}

/* bf16-stored logits or gradient (lower/storage.c): each row widened into fp32, computed there, rounded back;
 * rows split over the threads. */
typedef struct xent_bf16_job {
  const mtf_step *st;
  const mtf_kernel_args *a;
  const mtf_rows *r;
  int failed;
} xent_bf16_job;

/* mtf_row_max of the row widened into out, in the same pass and with the same lanes (so the same value). */
static inline float widen_row_max(const mtf_bf16 *in, float *out, int64_t n) {
  typedef uint16_t bf16x16 __attribute__((vector_size(MTF_LANES * sizeof(uint16_t))));
  typedef uint32_t u32x16 __attribute__((vector_size(MTF_LANES * sizeof(uint32_t))));
  mtf_f32x16 lane;
  for (int k = 0; k < MTF_LANES; k++) lane[k] = -INFINITY;
  int64_t j = 0;
  for (; j + MTF_LANES <= n; j += MTF_LANES) {
    bf16x16 h;
    memcpy(&h, in + j, sizeof h);
    mtf_f32x16 v = (mtf_f32x16)(__builtin_convertvector(h, u32x16) << 16);
    memcpy(out + j, &v, sizeof v);
    MTF_MAX_STEP_F32X16(lane, v);
  }
  float m = -INFINITY;
  for (int k = 0; k < MTF_LANES; k++) m = mtf_max_step(m, lane[k]);
  for (; j < n; j++) m = mtf_max_step(m, out[j] = mtf_float_from_bf16(in[j]));
  return m;
}

/* A merged row (xent_row_with_loss: no smoothing, no z-loss) of contiguous logits into a bfloat16 gradient, in
 * three passes where the general path takes five: the widening finds the max, and the scaling rounds into the
 * output. The same float operations in the same order as xent_row_with_loss, xent_row_apply and the rounding,
 * so the same bits. in is bfloat16 (widened into x) or float32 (read where it is); o is a row of scratch. */
static void xent_row_with_loss_into_bf16(const mtf_step *st, const mtf_kernel_args *a, int64_t row, const void *in,
                                         int in_bf16, float *x, float *o, mtf_bf16 *out, int64_t len) {
  float m;
  if (in_bf16) {
    m = widen_row_max(in, x, len);
  } else {
    x = (float *)in;
    m = mtf_row_max(x, len);
  }
  int64_t label = mtf_cpu_index(a->in[1], st->in_dtype[1], row), local = label - st->dim_offset;
  int here = local >= 0 && local < len;
  double sum = mtf_row_sum_exp_into(x, len, m, o);
  double lse = m + log(sum);
  a->xent_loss_out[row] = mtf_cpu_xent_value(st, lse, here ? x[local] : 0.0, 0.0);
  float dy = ((const float *)a->in[2])[row];
  float scale = xent_grad_scale(st, lse, sum, dy);
  for (int64_t j = 0; j < len; j++) out[j] = mtf_bf16_from_float(o[j] * scale);
  if (here) out[local] = mtf_bf16_from_float(o[local] * scale - 1.0f * dy);
}

static void xent_bf16_chunk(void *ctx, int64_t lo, int64_t hi) {
  xent_bf16_job *job = ctx;
  const mtf_step *st = job->st;
  const mtf_kernel_args *a = job->a;
  const mtf_rows *r = job->r;
  int x_bf16 = st->in_dtype[0] == MTF_BF16, writes = st->phase == MTF_PHASE_WHOLE || st->phase == MTF_PHASE_APPLY;
  int o_bf16 = writes && st->out_dtype == MTF_BF16;
  float *x = malloc(sizeof(float) * (size_t)(2 * r->len + 1)), *o = x + r->len;
  if (!x) {
    job->failed = 1;
    return;
  }
  int64_t s = r->inner;
  int merged_into_bf16 = st->phase == MTF_PHASE_WHOLE && a->xent_loss_out && o_bf16 && s == 1 &&
                         st->params.xent.label_smoothing == 0.0f && st->params.xent.z_loss == 0.0f;
  for (int64_t row = lo; row < hi; row++) {
    int64_t b = mtf_row_base(r, row);
    if (merged_into_bf16) {
      const void *in = x_bf16 ? (const void *)((const mtf_bf16 *)a->in[0] + b) : (const void *)((const float *)a->in[0] + b);
      xent_row_with_loss_into_bf16(st, a, row, in, x_bf16, x, o, (mtf_bf16 *)a->out + b, r->len);
      continue;
    }
    if (x_bf16) mtf_cpu_widen_row((const mtf_bf16 *)a->in[0] + b, s, x, r->len);
    else
      for (int64_t j = 0; j < r->len; j++) x[j] = ((const float *)a->in[0])[b + j * s];
    xent_row(st, a, r, row, x, 1, o, a->out);
    if (!writes) continue;
    if (o_bf16 && s == 1) {
      mtf_cpu_round(o, (mtf_bf16 *)a->out + b, r->len);
      continue;
    }
    for (int64_t j = 0; j < r->len; j++) {
      if (o_bf16) ((mtf_bf16 *)a->out)[b + j * s] = mtf_bf16_from_float(o[j]);
      else ((float *)a->out)[b + j * s] = o[j];
    }
  }
  free(x);
}

static int xent_rows_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, const mtf_rows *r) {
  xent_bf16_job job = {st, a, r, 0};
  mtf_cpu_parallel_for(mtf_cpu_threads(be->threads, r->count * r->len), r->count, xent_bf16_chunk, &job);
  return job.failed ? MTF_ERR_NOMEM : MTF_OK;
}

static int k_xent_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_SUM) return MTF_ERR_INVALID;
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.xent.dim);
  if (st->in_dtype[0] == MTF_BF16 || st->out_dtype == MTF_BF16) return xent_rows_bf16(b, st, a, &r);
  if (r.inner == 1)
    xent_rows(st, a, &r, 1);
  else
    xent_rows(st, a, &r, r.inner);
  return MTF_OK;
}

/* ---- gelu: dy * gelu'(x), the tanh form (as the unary GELU_GRAD) ---- */
typedef struct gelu_grad_args {
  const void *x, *dy;
  void *out;
  int x_bf16, dy_bf16, out_bf16; /* bf16-stored activations (lower/storage.c): fp32 math on blocks */
} gelu_grad_args;

static void gelu_grad_chunk(void *ctx, int64_t lo, int64_t hi) {
  const gelu_grad_args *g = ctx;
  if (!g->x_bf16 && !g->dy_bf16 && !g->out_bf16) {
    const float *x = g->x, *dy = g->dy;
    float *out = g->out;
    for (int64_t i = lo; i < hi; i++) out[i] = dy[i] * mtf_gelu_gradf(x[i]);
    return;
  }
  float xb[MTF_CPU_BF16_BLOCK], db[MTF_CPU_BF16_BLOCK], yb[MTF_CPU_BF16_BLOCK];
  for (int64_t b = lo; b < hi; b += MTF_CPU_BF16_BLOCK) {
    int64_t n = hi - b < MTF_CPU_BF16_BLOCK ? hi - b : MTF_CPU_BF16_BLOCK;
    const float *x = (const float *)g->x + b, *dy = (const float *)g->dy + b;
    if (g->x_bf16) {
      mtf_cpu_widen((const mtf_bf16 *)g->x + b, xb, n);
      x = xb;
    }
    if (g->dy_bf16) {
      mtf_cpu_widen((const mtf_bf16 *)g->dy + b, db, n);
      dy = db;
    }
    float *y = g->out_bf16 ? yb : (float *)g->out + b;
    if (g->x_bf16) /* a bf16 argument: the cheaper form (fastmath.h) */
      for (int64_t i = 0; i < n; i++) y[i] = dy[i] * mtf_gelu_grad_sigmoid_formf(x[i]);
    else
      for (int64_t i = 0; i < n; i++) y[i] = dy[i] * mtf_gelu_gradf(x[i]);
    if (g->out_bf16) mtf_cpu_round(yb, (mtf_bf16 *)g->out + b, n);
  }
}

static int k_gelu_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  gelu_grad_args g = {a->in[0], a->in[1], a->out, st->in_dtype[0] == MTF_BF16, st->in_dtype[1] == MTF_BF16,
                      st->out_dtype == MTF_BF16};
  mtf_cpu_parallel_for(mtf_cpu_threads(b->threads, n), n, gelu_grad_chunk, &g);
  return MTF_OK;
}

void mtf_cpu_register_fused_grad(mtf_kernel_fn *k) {
  k[MTF_OP_SOFTMAX_GRAD] = k_softmax_grad;
  k[MTF_OP_LOG_SOFTMAX_GRAD] = k_softmax_grad;
  k[MTF_OP_LAYER_NORM_GRAD] = k_norm_grad;
  k[MTF_OP_RMS_NORM_GRAD] = k_norm_grad;
  k[MTF_OP_SOFTMAX_XENT_GRAD] = k_xent_grad;
  k[MTF_OP_GELU_GRAD] = k_gelu_grad;
}
