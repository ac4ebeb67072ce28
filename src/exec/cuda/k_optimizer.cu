/* CUDA kernels of the fused optimizer ops (ops/optimizer_ops.c): one pass over the local slice in float, as
 * the CPU's; an adam_update whose plan fused its slots' moving averages into it (lower/fuse_moments.c) runs
 * them in the same pass. The per-step scalars live in device memory (the decay of a three-input moving average, AdamW's
 * learning rate and step), so each thread reads them; AdamW's bias corrections are computed per block by
 * one thread in double (ops/optimizer_ops.c's mtf_adam_bias_correction: -expm1(t ln beta)) and shared. AdamW also
 * writes the weight's bfloat16 copy where the plan keeps one (lower/weight_copies.c). Adafactor's update is one
 * pass too, and the sum of its squares a block sum per block and one over the blocks (deterministic). */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"

extern "C" {
#include "ops/optimizer_ops.h"
}

MTF_CUDA_BEGIN

/* keep old + (1 - keep) (x^power + add): the one expression of a moving average, for its own kernel and for an
 * adam_update that runs its slots' moving averages (lower/fuse_moments.c), so both give the same bits. */
__device__ inline float k_moving_average_value(float keep, float old, float x, float add, int power) {
  float v = power == 2 ? x * x + add : x + add;
  return keep * old + (1.0f - keep) * v;
}

/* keep: the decay from device memory, or `beta` where the op has no third input. */
__global__ void k_moving_average_apply(int64_t n, const float *old, const float *x, const float *decay, float beta,
                                       float add, int power, float *out) {
  const float keep = decay ? decay[0] : beta;
  MTF_GRID_STRIDE(i, n) out[i] = k_moving_average_value(keep, old[i], x[i], add, power);
}

static int k_moving_average(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  MTF_LAUNCH(k_moving_average_apply, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n,
             (const float *)a->in[0], (const float *)a->in[1], st->n_in == 3 ? (const float *)a->in[2] : NULL,
             st->params.moment.beta, st->params.moment.add, st->params.moment.power, (float *)a->out);
  K_DONE(b, "moving_average");
}

__device__ inline double bias_correction(double beta, double step) { return beta > 0 ? -expm1(step * log(beta)) : 1.0; }

/* copy: NULL, or the weight's bfloat16 working copy (mtf_kernel_args.bf16_copy), written with the update so no
 * product casts the weight again. */
/* Where the plan fused the slots' moving averages into the update (lower/fuse_moments.c): the gradient and each
 * slot's keep and add; m and v are then updated in place first, with k_moving_average_apply's expressions. */
struct fused_moments {
  const float *grad;
  float keep1, add1, keep2, add2;
};

__global__ void k_adam_kernel(int64_t n, const float *w, float *m, float *v, const float *lr_in,
                              const float *step_in, float beta1, float beta2, float eps, float wd, float *out,
                              mtf_bf16 *copy, fused_moments fm) {
  __shared__ float scalars[3]; /* lr, 1 / c1, 1 / c2 */
  if (threadIdx.x == 0) {
    double step = step_in[0];
    scalars[0] = lr_in[0];
    scalars[1] = (float)(1.0 / bias_correction(beta1, step));
    scalars[2] = (float)(1.0 / bias_correction(beta2, step));
  }
  __syncthreads();
  const float lr = scalars[0], inv_c1 = scalars[1], inv_c2 = scalars[2];
  MTF_GRID_STRIDE(i, n) {
    if (fm.grad) {
      m[i] = k_moving_average_value(fm.keep1, m[i], fm.grad[i], fm.add1, 1);
      v[i] = k_moving_average_value(fm.keep2, v[i], fm.grad[i], fm.add2, 2);
    }
    float updated = w[i] - lr * ((m[i] * inv_c1) / (sqrtf(v[i] * inv_c2) + eps) + wd * w[i]);
    out[i] = updated;
    if (copy) copy[i] = mtf_bf16_from_float(updated);
  }
}

static int k_adam_update(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  fused_moments fm = {st->fused_moments ? (const float *)a->moments_grad : NULL, st->moments_keep[0],
                      st->moments_add[0], st->moments_keep[1], st->moments_add[1]};
  MTF_LAUNCH(k_adam_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, (const float *)a->in[0],
             (float *)a->in[1], (float *)a->in[2], (const float *)a->in[3], (const float *)a->in[4],
             st->params.adam.beta1, st->params.adam.beta2, st->params.adam.epsilon, st->params.adam.weight_decay,
             (float *)a->out, (mtf_bf16 *)a->bf16_copy, fm);
  K_DONE(b, "adam_update");
}

/* ---- adafactor_update, adafactor_squares: g a b, the factors by name over g's shape (a k_walk) ---- */
__device__ inline float k_adafactor_term(const k_walk &w, int64_t e, const float *g, const float *fa, const float *fb) {
  float u = g[e] * fa[k_walk_offset(w, 0, e)];
  return fb ? u * fb[k_walk_offset(w, 1, e)] : u;
}

__global__ void k_adafactor_update_kernel(k_walk w, int64_t n, const float *wt, const float *g, const float *step,
                                          const float *fa, const float *fb, float *out) {
  const float s = step[0];
  MTF_GRID_STRIDE(e, n) out[e] = wt[e] - s * k_adafactor_term(w, e, g, fa, fb);
}

/* Each block's sum of squares in double, then one block sums the blocks' in order: no atomics, the same
 * result every run. */
__global__ void k_adafactor_partials_kernel(k_walk w, int64_t n, const float *g, const float *fa, const float *fb,
                                            double *partials) {
  double sum = 0.0;
  MTF_GRID_STRIDE(e, n) {
    float u = k_adafactor_term(w, e, g, fa, fb);
    sum += (double)u * u;
  }
  sum = mtf_block_sum_double(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void k_adafactor_total_kernel(int blocks, const double *partials, float *out) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) sum += partials[i];
  sum = mtf_block_sum_double(sum);
  if (threadIdx.x == 0) out[0] = (float)sum;
}

static int k_adafactor(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const int update = st->op == MTF_OP_ADAFACTOR_UPDATE, gi = update ? 1 : 0, first = update ? 3 : 1;
  const int factors = st->n_in - first;
  const mtf_shape *ops[2] = {&st->in_shape[first], &st->in_shape[first + factors - 1]};
  k_walk w = k_walk_make(&st->in_shape[gi], factors, ops);
  k_walk_coalesce(&w, factors);
  int64_t n = mtf_shape_num_elements(&st->in_shape[gi]);
  const float *g = (const float *)a->in[gi], *fa = (const float *)a->in[first];
  const float *fb = factors == 2 ? (const float *)a->in[first + 1] : NULL;
  if (update) {
    MTF_LAUNCH(k_adafactor_update_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), w, n,
               (const float *)a->in[0], g, (const float *)a->in[2], fa, fb, (float *)a->out);
    K_DONE(b, "adafactor_update");
  }
  unsigned blocks = mtf_cuda_blocks(n, K_THREADS);
  if (blocks > MTF_ADAFACTOR_PARTIALS) blocks = MTF_ADAFACTOR_PARTIALS;
  double *partials = (double *)a->scratch;
  MTF_LAUNCH(k_adafactor_partials_kernel, blocks, K_THREADS, 0, K_STREAM(b), w, n, g, fa, fb, partials);
  MTF_CUDA_CHECK_LAUNCH(b, "adafactor_squares");
  MTF_LAUNCH(k_adafactor_total_kernel, 1, K_THREADS, 0, K_STREAM(b), (int)blocks, (const double *)partials,
             (float *)a->out);
  K_DONE(b, "adafactor_squares");
}

void mtf_cuda_register_optimizer(mtf_kernel_fn *k) {
  k[MTF_OP_MOVING_AVERAGE] = k_moving_average;
  k[MTF_OP_ADAM_UPDATE] = k_adam_update;
  k[MTF_OP_ADAFACTOR_UPDATE] = k_adafactor;
  k[MTF_OP_ADAFACTOR_SQUARES] = k_adafactor;
}

MTF_CUDA_END
