/* CPU kernels of the fused optimizer ops (ops/optimizer_ops.c): one pass over the local slice, in float,
 * with the per-step scalars (decay, bias corrections) computed once per call. Inputs of one op share the
 * output's local shape (the ops' shape rule), so these are flat loops the compiler can vectorise. */
#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "exec/cpu/rowops.h"
#include "exec/cpu/strided.h"
#include "ops/optimizer_ops.h"

/* out = keep old + (1 - keep) (x^power + add) over n elements (out may be old): the one expression of a moving
 * average, for its own kernel and for an adam_update that runs its slots' moving averages (fuse_moments.c), so
 * both give the same bits. */
static void moving_average_span(int64_t n, const float *old, const float *x, float keep, float add, int power,
                                float *out) {
  const float mix = 1.0f - keep;
  if (power == 2)
    for (int64_t i = 0; i < n; i++) out[i] = keep * old[i] + mix * (x[i] * x[i] + add);
  else
    for (int64_t i = 0; i < n; i++) out[i] = keep * old[i] + mix * (x[i] + add);
}

static int k_moving_average(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  const float keep = st->n_in == 3 ? ((const float *)a->in[2])[0] : st->params.moment.beta;
  moving_average_span(mtf_shape_num_elements(&st->out_shape), a->in[0], a->in[1], keep, st->params.moment.add,
                      st->params.moment.power, a->out);
  return MTF_OK;
}

static int k_adam_update(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  const int64_t n = mtf_shape_num_elements(&st->out_shape);
  const float *w = a->in[0], *m = a->in[1], *v = a->in[2];
  const float lr = ((const float *)a->in[3])[0], step = ((const float *)a->in[4])[0];
  const float inv_c1 = (float)(1.0 / mtf_adam_bias_correction(st->params.adam.beta1, step));
  const float inv_c2 = (float)(1.0 / mtf_adam_bias_correction(st->params.adam.beta2, step));
  const float eps = st->params.adam.epsilon, wd = st->params.adam.weight_decay;
  float *out = a->out;
  mtf_bf16 *copy = a->bf16_copy; /* lower/weight_copies.c: rounded a block at a time, while it is in cache */
  double squares = 0.0;          /* the gradient's, for a fused einsum (squares_out): its blocks in its order */
  _Static_assert(MTF_CPU_BF16_BLOCK % MTF_DOT_BLOCK == 0, "the update's blocks must be whole blocks of the dot");
  for (int64_t i0 = 0; i0 < n; i0 += MTF_CPU_BF16_BLOCK) {
    int64_t end = n - i0 < MTF_CPU_BF16_BLOCK ? n : i0 + MTF_CPU_BF16_BLOCK;
    if (st->fused_moments) { /* the slots' moving averages first (lower/fuse_moments.c), in place */
      const float *g = (const float *)a->moments_grad + i0;
      moving_average_span(end - i0, m + i0, g, st->moments_keep[0], st->moments_add[0], 1, (float *)m + i0);
      moving_average_span(end - i0, v + i0, g, st->moments_keep[1], st->moments_add[1], 2, (float *)v + i0);
      for (int64_t j = 0; a->squares && j < end - i0; j += MTF_DOT_BLOCK)
        squares += mtf_block_dot(g + j, g + j, end - i0 - j < MTF_DOT_BLOCK ? end - i0 - j : MTF_DOT_BLOCK);
    }
    for (int64_t i = i0; i < end; i++) out[i] = w[i] - lr * ((m[i] * inv_c1) / (sqrtf(v[i] * inv_c2) + eps) + wd * w[i]);
    if (copy) mtf_cpu_round(out + i0, copy + i0, end - i0);
  }
  if (a->squares) a->squares[0] = (float)squares;
  return MTF_OK;
}

/* u[i] = g[i] a[i sa] b[i sb] over one row of the walk (b NULL: no second factor); a stride of 0 is a factor
 * constant along the row, hoisted so that the loops vectorise. */
static void adafactor_row(const float *g, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n, float *u) {
  if (sa == 0) {
    const float fa = a[0];
    if (!b)
      for (int64_t i = 0; i < n; i++) u[i] = g[i] * fa;
    else if (sb == 1)
      for (int64_t i = 0; i < n; i++) u[i] = g[i] * fa * b[i];
    else
      for (int64_t i = 0; i < n; i++) u[i] = g[i] * fa * b[i * sb];
    return;
  }
  for (int64_t i = 0; i < n; i++) u[i] = g[i] * a[i * sa];
  if (b)
    for (int64_t i = 0; i < n; i++) u[i] *= b[i * sb];
}

/* adafactor_update: w - step g a b; adafactor_squares: sum (g a b)^2 (double). The factors a (and b) by
 * name over g's shape, a row of the walk at a time through a block of u on the stack. */
static int k_adafactor(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  (void)be;
  const int update = st->op == MTF_OP_ADAFACTOR_UPDATE, gi = update ? 1 : 0, first = update ? 3 : 1;
  const int factors = st->n_in - first;
  const mtf_shape *x = &st->in_shape[gi];
  const mtf_shape *ops[2] = {&st->in_shape[first], &st->in_shape[first + factors - 1]};
  mtf_walk w;
  mtf_walk_init(&w, x, factors, ops);
  mtf_walk_coalesce(&w);
  const float *g = a->in[gi], *fa = a->in[first], *fb = factors == 2 ? a->in[first + 1] : NULL;
  const float *wt = update ? a->in[0] : NULL, step = update ? ((const float *)a->in[2])[0] : 0.0f;
  float *out = a->out, u[1024];
  double sum = 0.0;
  const int last = w.rank - 1;
  const int64_t sa = w.strides[0][last], sb = fb ? w.strides[1][last] : 0;
  for (int64_t row = 0, e = 0; row < w.rows; row++, e += w.inner, mtf_walk_next_row(&w))
    for (int64_t c = 0; c < w.inner; c += 1024) {
      int64_t n = w.inner - c < 1024 ? w.inner - c : 1024;
      adafactor_row(g + e + c, fa + w.offset[0] + c * sa, sa, fb ? fb + w.offset[1] + c * sb : NULL, sb, n, u);
      if (update) {
        for (int64_t i = 0; i < n; i++) out[e + c + i] = wt[e + c + i] - step * u[i];
      } else {
        /* 8 float lanes over a block of at most 1024 (vectorised), blocks summed in double */
        float lanes[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
          for (int j = 0; j < 8; j++) lanes[j] += u[i + j] * u[i + j];
        double block = 0.0;
        for (; i < n; i++) block += (double)u[i] * u[i];
        for (int j = 0; j < 8; j++) block += lanes[j];
        sum += block;
      }
    }
  if (!update) out[0] = (float)sum;
  return MTF_OK;
}

void mtf_cpu_register_optimizer(mtf_kernel_fn *k) {
  k[MTF_OP_MOVING_AVERAGE] = k_moving_average;
  k[MTF_OP_ADAM_UPDATE] = k_adam_update;
  k[MTF_OP_ADAFACTOR_UPDATE] = k_adafactor;
  k[MTF_OP_ADAFACTOR_SQUARES] = k_adafactor;
}
