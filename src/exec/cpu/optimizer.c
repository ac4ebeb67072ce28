/* CPU kernels of the fused optimizer ops (ops/optimizer_ops.c): one pass over the local slice, in float,
 * with the per-step scalars (decay, bias corrections) computed once per call. Inputs of one op share the
 * output's local shape (the ops' shape rule), so these are flat loops the compiler can vectorise. */
#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "ops/optimizer_ops.h"

static int k_moving_average(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  const int64_t n = mtf_shape_num_elements(&st->out_shape);
  const float *old = a->in[0], *x = a->in[1];
  const float keep = st->n_in == 3 ? ((const float *)a->in[2])[0] : st->params.moment.beta, mix = 1.0f - keep;
  const float add = st->params.moment.add;
  float *out = a->out;
  if (st->params.moment.power == 2)
    for (int64_t i = 0; i < n; i++) out[i] = keep * old[i] + mix * (x[i] * x[i] + add);
  else
    for (int64_t i = 0; i < n; i++) out[i] = keep * old[i] + mix * (x[i] + add);
  return MTF_OK;
}

/* lower/fuse_moments.c: m and v (the slots, updated in place) of elements [i0, end) from the gradient, with
 * k_moving_average's expressions, so the same bits as its two passes. */
static void moments_block(const mtf_step *st, const void *grad, float *m, float *v, int64_t i0, int64_t end) {
  const float *x = grad;
  const float keep1 = st->moments_keep[0], mix1 = 1.0f - keep1, add1 = st->moments_add[0];
  const float keep2 = st->moments_keep[1], mix2 = 1.0f - keep2, add2 = st->moments_add[1];
  for (int64_t i = i0; i < end; i++) m[i] = keep1 * m[i] + mix1 * (x[i] + add1);
  for (int64_t i = i0; i < end; i++) v[i] = keep2 * v[i] + mix2 * (x[i] * x[i] + add2);
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
  for (int64_t i0 = 0; i0 < n; i0 += MTF_CPU_BF16_BLOCK) {
    int64_t end = n - i0 < MTF_CPU_BF16_BLOCK ? n : i0 + MTF_CPU_BF16_BLOCK;
    if (st->fused_moments) /* the slots' moving averages first, as k_moving_average computes them */
      moments_block(st, a->moments_grad, (float *)m, (float *)v, i0, end);
    for (int64_t i = i0; i < end; i++) out[i] = w[i] - lr * ((m[i] * inv_c1) / (sqrtf(v[i] * inv_c2) + eps) + wd * w[i]);
    if (copy) mtf_cpu_round(out + i0, copy + i0, end - i0);
  }
  return MTF_OK;
}

void mtf_cpu_register_optimizer(mtf_kernel_fn *k) {
  k[MTF_OP_MOVING_AVERAGE] = k_moving_average;
  k[MTF_OP_ADAM_UPDATE] = k_adam_update;
}
