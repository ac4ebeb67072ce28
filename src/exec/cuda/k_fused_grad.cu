/* CUDA kernels of the fused gradient ops (ops/fused_grad.c) in each phase, the CPU kernels' formulas: a
 * row (mtf_rows) is one block, its sums block reductions in double, the elementwise work in float. The split
 * phases' statistics buffers are [k, rows]: statistic i of row r at i * rows + r; the rank holding index 0
 * of the dim writes the values carried through the sum-allreduce, the others 0. */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"

MTF_CUDA_BEGIN

#define ROW_LOOP(row, r) for (int64_t row = blockIdx.x; row < (r).count; row += gridDim.x)
#define ROW_ELEMENTS(j, r) for (int64_t j = threadIdx.x; j < (r).len; j += blockDim.x)

/* ---- softmax / log-softmax: y * (dy - sum(dy * y)), dy - exp(y) * sum(dy); in: y, dy (, sum: APPLY) ---- */
__global__ void k_softmax_grad_kernel(mtf_rows r, int phase, int log_form, const float *y, const float *dy,
                                      const float *sum_in, float *out) {
  ROW_LOOP(row, r) {
    int64_t b = mtf_row_base(&r, row);
    float sum;
    if (phase == MTF_PHASE_APPLY) {
      sum = sum_in[row];
    } else {
      double s = 0.0;
      ROW_ELEMENTS(j, r) {
        int64_t i = b + j * r.inner;
        s += log_form ? (double)dy[i] : (double)dy[i] * y[i];
      }
      s = mtf_block_sum_double(s);
      if (phase == MTF_PHASE_STATS) {
        if (threadIdx.x == 0) out[row] = (float)s;
        continue;
      }
      sum = (float)s;
    }
    ROW_ELEMENTS(j, r) {
      int64_t i = b + j * r.inner;
      out[i] = log_form ? dy[i] - expf(y[i]) * sum : y[i] * (dy[i] - sum);
    }
  }
}

static int k_softmax_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase != MTF_PHASE_WHOLE && st->phase != MTF_PHASE_STATS && st->phase != MTF_PHASE_APPLY)
    return mtf_cuda_refuse(b, "softmax_grad: phase %d", (int)st->phase);
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.along.dim);
  MTF_LAUNCH(k_softmax_grad_kernel, k_row_blocks(r.count), K_THREADS, 0, K_STREAM(b), r, (int)st->phase,
             (int)(st->op == MTF_OP_LOG_SOFTMAX_GRAD), (const float *)a->in[0], (const float *)a->in[1],
             st->phase == MTF_PHASE_APPLY ? (const float *)a->in[2] : (const float *)NULL, (float *)a->out);
  K_DONE(b, "softmax_grad");
}

/* ---- layer / RMS norm: dx = r (dy - c r^2 sum(dy c) / n - sum(dy) / n), c = x - mean (0 for RMS),
 * r = rsqrt(sum(c^2) / n + eps); in: x, dy (, sum x: STATS; statistics: APPLY) ---- */
__global__ void k_norm_grad_kernel(mtf_rows r, int phase, int layer, double n, float eps, int carries, const float *x,
                                   const float *dy, const float *in2, float *out) {
  ROW_LOOP(row, r) {
    int64_t b = mtf_row_base(&r, row);
    double sum_x = 0.0, squares, sum_dy, sum_dy_c;
    if (phase == MTF_PHASE_APPLY) {
      sum_x = in2[row];
      squares = in2[r.count + row];
      sum_dy = in2[2 * r.count + row];
      sum_dy_c = in2[3 * r.count + row];
    } else {
      if (phase == MTF_PHASE_SUM || (phase == MTF_PHASE_WHOLE && layer)) {
        double s = 0.0;
        ROW_ELEMENTS(j, r) s += x[b + j * r.inner];
        sum_x = mtf_block_sum_double(s);
        if (phase == MTF_PHASE_SUM) {
          if (threadIdx.x == 0) out[row] = (float)sum_x;
          continue;
        }
      }
      float total = phase == MTF_PHASE_STATS && layer ? in2[row] : 0.0f;
      double mean = phase == MTF_PHASE_STATS ? total / n : sum_x / n;
      double q = 0.0, d = 0.0, dc = 0.0;
      ROW_ELEMENTS(j, r) {
        int64_t i = b + j * r.inner;
        double c = (double)x[i] - mean, g = dy[i];
        q += c * c;
        d += g;
        dc += g * c;
      }
      squares = mtf_block_sum_double(q);
      sum_dy = mtf_block_sum_double(d);
      sum_dy_c = mtf_block_sum_double(dc);
      if (phase == MTF_PHASE_STATS) {
        if (threadIdx.x == 0) {
          out[row] = carries ? total : 0.0f;
          out[r.count + row] = (float)squares;
          out[2 * r.count + row] = (float)sum_dy;
          out[3 * r.count + row] = (float)sum_dy_c;
        }
        continue;
      }
    }
    double mean = sum_x / n;
    double rs = 1.0 / sqrt(squares / n + eps);
    float scale = (float)rs, slope = (float)(rs * rs * rs * sum_dy_c / n), shift = layer ? (float)(rs * sum_dy / n) : 0.0f;
    float m = (float)mean;
    ROW_ELEMENTS(j, r) {
      int64_t i = b + j * r.inner;
      out[i] = scale * dy[i] - slope * (x[i] - m) - shift;
    }
  }
}

static int k_norm_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_MAX) return mtf_cuda_refuse(b, "norm_grad: no MAX phase");
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.norm.dim);
  double n = (double)st->global_dims[mtf_shape_index_of(&st->in_shape[0], st->params.norm.dim)];
  int layer = st->op == MTF_OP_LAYER_NORM_GRAD;
  const float *in2 = st->phase >= MTF_PHASE_STATS ? (const float *)a->in[2] : NULL;
  MTF_LAUNCH(k_norm_grad_kernel, k_row_blocks(r.count), K_THREADS, 0, K_STREAM(b), r, (int)st->phase, layer, n,
             st->params.norm.epsilon, (int)(st->dim_offset == 0), (const float *)a->in[0], (const float *)a->in[1],
             in2, (float *)a->out);
  K_DONE(b, "norm_grad");
}

/* ---- cross-entropy: dlogits = (softmax(x) (1 + 2 z lse) - (1 - eps) one_hot(label) - eps / vocab) dy ----
 * WHOLE in: logits, labels, dy. MAX in: logits. STATS in: logits, max, dy. APPLY in: logits, labels,
 * [sum exp, max, dy]. */
typedef struct xent_grad_params {
  float z, eps;
  double vocab;
  int64_t dim_offset;
  int carries;
} xent_grad_params;

/* The logits float32 or bf16-stored (x_bf16), dlogits too (out_bf16: WHOLE and APPLY write them); out may be
 * x's buffer (the op table's overwrites_input): each element is read before its thread writes it. */
__global__ void k_xent_grad_kernel(mtf_rows r, int phase, xent_grad_params xp, const void *x, int x_bf16,
                                   const void *labels, int labels_i32, const float *in1, const float *in2, void *out_,
                                   int out_bf16) {
  float *out = (float *)out_;
  ROW_LOOP(row, r) {
    int64_t b = mtf_row_base(&r, row);
    float m, dy;
    double sum;
    if (phase == MTF_PHASE_APPLY) {
      sum = in2[row];
      m = in2[r.count + row];
      dy = in2[2 * r.count + row];
    } else {
      if (phase == MTF_PHASE_STATS) {
        m = in1[row];
      } else {
        float mx = -INFINITY;
        ROW_ELEMENTS(j, r) mx = k_max_step(mx, k_load(x, x_bf16, b + j * r.inner));
        m = mtf_block_max(mx);
        if (phase == MTF_PHASE_MAX) {
          if (threadIdx.x == 0) out[row] = m;
          continue;
        }
      }
      double s = 0.0;
      ROW_ELEMENTS(j, r) s += (double)expf(k_load(x, x_bf16, b + j * r.inner) - m);
      sum = mtf_block_sum_double(s);
      if (phase == MTF_PHASE_STATS) {
        if (threadIdx.x == 0) {
          out[row] = (float)sum;
          out[r.count + row] = xp.carries ? m : 0.0f;
          out[2 * r.count + row] = xp.carries ? in2[row] : 0.0f;
        }
        continue;
      }
      dy = in2[row];
    }
    double lse = m + log(sum);
    float scale = (float)(dy * (1.0 + 2.0 * xp.z * lse) / sum);
    float uniform = xp.eps != 0.0f ? (float)(xp.eps * dy / xp.vocab) : 0.0f;
    int64_t local = k_index(labels, labels_i32, row) - xp.dim_offset;
    ROW_ELEMENTS(j, r) {
      int64_t i = b + j * r.inner;
      float v = expf(k_load(x, x_bf16, i) - m) * scale;
      if (xp.eps != 0.0f) v -= uniform;
      if (j == local) v -= (1.0f - xp.eps) * dy;
      k_store(out_, out_bf16, i, v);
    }
  }
}

static int k_xent_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_SUM) return mtf_cuda_refuse(b, "softmax_cross_entropy_grad: no SUM phase");
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.xent.dim);
  xent_grad_params xp = {st->params.xent.z_loss, st->params.xent.label_smoothing, (double)st->params.xent.vocab,
                         st->dim_offset, st->dim_offset == 0};
  int has_labels = st->phase == MTF_PHASE_WHOLE || st->phase == MTF_PHASE_APPLY;
  const void *labels = has_labels ? a->in[1] : NULL;
  int labels_i32 = has_labels ? st->in_dtype[1] == MTF_I32 : 0;
  const float *in1 = st->phase == MTF_PHASE_STATS ? (const float *)a->in[1] : NULL;
  const float *in2 = st->phase == MTF_PHASE_MAX ? NULL : (const float *)a->in[2];
  MTF_LAUNCH(k_xent_grad_kernel, k_row_blocks(r.count), K_THREADS, 0, K_STREAM(b), r, (int)st->phase, xp,
             a->in[0], k_in_bf16(st, 0), labels, labels_i32, in1, in2, a->out,
             (st->phase == MTF_PHASE_WHOLE || st->phase == MTF_PHASE_APPLY) && k_out_bf16(st));
  K_DONE(b, "softmax_cross_entropy_grad");
}

/* ---- gelu: dy * gelu'(x), the tanh form; x, dy and the result each float32 or bf16-stored ---- */
__global__ void k_gelu_grad_kernel(int64_t n, const void *x, int x_bf16, const void *dy, int dy_bf16, void *out,
                                   int out_bf16) {
  MTF_GRID_STRIDE(i, n) k_store(out, out_bf16, i, k_load(dy, dy_bf16, i) * k_gelu_grad(k_load(x, x_bf16, i)));
}

static int k_gelu_grad_op(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  MTF_LAUNCH(k_gelu_grad_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), n, a->in[0],
             k_in_bf16(st, 0), a->in[1], k_in_bf16(st, 1), a->out, k_out_bf16(st));
  K_DONE(b, "gelu_grad");
}

void mtf_cuda_register_fused_grad(mtf_kernel_fn *k) {
  k[MTF_OP_SOFTMAX_GRAD] = k_softmax_grad;
  k[MTF_OP_LOG_SOFTMAX_GRAD] = k_softmax_grad;
  k[MTF_OP_LAYER_NORM_GRAD] = k_norm_grad;
  k[MTF_OP_RMS_NORM_GRAD] = k_norm_grad;
  k[MTF_OP_SOFTMAX_XENT_GRAD] = k_xent_grad;
  k[MTF_OP_GELU_GRAD] = k_gelu_grad_op;
}

MTF_CUDA_END
