/* CUDA kernels of the fused ops in each phase (softmax, log-softmax, layer/RMS norm, cross-entropy with
 * z-loss and label smoothing) and of the embedding's gather and scatter-add. A fused op's row (every index
 * of the other dims; the dim has local size len and stride inner, mtf_rows) is one block: its threads stride
 * over the row, the row's maximum and sums are block reductions (sums in double, as the CPU's), and the
 * split phases write or read the statistics buffers the CPU kernels do (statistic i of row r at
 * i * rows + r). Rows beyond the grid's cap are taken in a grid-stride loop over rows. */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"

MTF_CUDA_BEGIN

#define ROW_LOOP(row, r) for (int64_t row = blockIdx.x; row < (r).count; row += gridDim.x)
#define ROW_ELEMENTS(j, r) for (int64_t j = threadIdx.x; j < (r).len; j += blockDim.x)

/* A row's maximum and sum of exp(x - max); x from `base`, float32 or bf16-stored (k_load). */
__device__ inline float row_max(const void *x, int bf16, int64_t base, const mtf_rows &r) {
  float m = -INFINITY;
  ROW_ELEMENTS(j, r) m = k_max_step(m, k_load(x, bf16, base + j * r.inner));
  return mtf_block_max(m);
}

__device__ inline double row_sum_exp(const void *x, int bf16, int64_t base, const mtf_rows &r, float max) {
  double s = 0.0;
  ROW_ELEMENTS(j, r) s += (double)expf(k_load(x, bf16, base + j * r.inner) - max);
  return mtf_block_sum_double(s);
}

/* ---- softmax / log-softmax ---- */
__global__ void k_softmax_kernel(mtf_rows r, int phase, int log_form, const float *x, const float *max_in,
                                 const float *sum_in, float *out) {
  ROW_LOOP(row, r) {
    int64_t base = mtf_row_base(&r, row);
    const float *p = x + base;
    float m;
    double sum;
    if (phase == MTF_PHASE_APPLY) {
      m = max_in[row];
      sum = sum_in[row];
    } else {
      m = phase == MTF_PHASE_STATS ? max_in[row] : row_max(x, 0, base, r);
      if (phase == MTF_PHASE_MAX) {
        if (threadIdx.x == 0) out[row] = m;
        continue;
      }
      sum = row_sum_exp(x, 0, base, r, m);
      if (phase == MTF_PHASE_STATS) {
        if (threadIdx.x == 0) out[row] = (float)sum;
        continue;
      }
    }
    float log_sum = (float)log(sum), inv = (float)(1.0 / sum);
    float *q = out + base;
    ROW_ELEMENTS(j, r) {
      float v = p[j * r.inner] - m;
      q[j * r.inner] = log_form ? v - log_sum : expf(v) * inv;
    }
  }
}

static int k_softmax(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_SUM) return mtf_cuda_refuse(b, "softmax: no SUM phase");
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.along.dim);
  const float *max_in = st->phase >= MTF_PHASE_STATS ? (const float *)a->in[1] : NULL;
  const float *sum_in = st->phase == MTF_PHASE_APPLY ? (const float *)a->in[2] : NULL;
  MTF_LAUNCH(k_softmax_kernel, k_row_blocks(r.count), K_THREADS, 0, K_STREAM(b), r, (int)st->phase,
             (int)(st->op == MTF_OP_LOG_SOFTMAX), (const float *)a->in[0], max_in, sum_in, (float *)a->out);
  K_DONE(b, "softmax");
}

/* ---- layer / RMS norm: (x - mean) * rsqrt(mean((x - mean)^2) + eps), mean 0 for RMS; n the dim's global
 * size; all in double as the CPU ---- */
/* The normalised rows (WHOLE, APPLY) go to out as float32 or bf16-stored (out_bf16); statistics as float32. */
__global__ void k_norm_kernel(mtf_rows r, int phase, int layer, double n, float eps, const float *x, const float *in1,
                              const float *in2, void *out_, int out_bf16) {
  float *out = (float *)out_;
  ROW_LOOP(row, r) {
    int64_t base = mtf_row_base(&r, row);
    const float *p = x + base;
    double mean = 0.0, squares = 0.0;
    if (phase == MTF_PHASE_WHOLE || phase == MTF_PHASE_SUM) {
      if (layer || phase == MTF_PHASE_SUM) {
        double s = 0.0;
        ROW_ELEMENTS(j, r) s += p[j * r.inner];
        s = mtf_block_sum_double(s);
        if (phase == MTF_PHASE_SUM) {
          if (threadIdx.x == 0) out[row] = (float)s;
          continue;
        }
        mean = s / n;
      }
    } else if (layer) {
      mean = in1[row] / n;
    }
    if (phase == MTF_PHASE_APPLY) {
      squares = (layer ? in2 : in1)[row];
    } else {
      double q = 0.0;
      ROW_ELEMENTS(j, r) {
        double c = (double)p[j * r.inner] - mean;
        q += c * c;
      }
      squares = mtf_block_sum_double(q);
      if (phase == MTF_PHASE_STATS) {
        if (threadIdx.x == 0) out[row] = (float)squares;
        continue;
      }
    }
    double inv = 1.0 / sqrt(squares / n + eps);
    ROW_ELEMENTS(j, r) k_store(out_, out_bf16, base + j * r.inner, (float)(((double)p[j * r.inner] - mean) * inv));
  }
}

static int k_norm(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_MAX) return mtf_cuda_refuse(b, "norm: no MAX phase");
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.norm.dim);
  int layer = st->op == MTF_OP_LAYER_NORM;
  double n = (double)st->global_dims[mtf_shape_index_of(&st->in_shape[0], st->params.norm.dim)];
  const float *in1 = st->phase >= MTF_PHASE_STATS ? (const float *)a->in[1] : NULL;
  const float *in2 = st->phase == MTF_PHASE_APPLY && layer ? (const float *)a->in[2] : NULL;
  MTF_LAUNCH(k_norm_kernel, k_row_blocks(r.count), K_THREADS, 0, K_STREAM(b), r, (int)st->phase, layer, n,
             st->params.norm.epsilon, (const float *)a->in[0], in1, in2, a->out,
             (st->phase == MTF_PHASE_WHOLE || st->phase == MTF_PHASE_APPLY) && k_out_bf16(st));
  K_DONE(b, "norm");
}

/* ---- cross-entropy: (1 - eps) (lse - x[label]) + eps (lse - sum(x) / vocab) + z lse^2; labels are global
 * ids, this rank holds [dim_offset, dim_offset + len) of the vocab ---- */
typedef struct xent_params {
  double z, eps, vocab;
  int64_t dim_offset;
} xent_params;

__device__ inline float xent_value(const xent_params &x, double lse, double target, double sum_x) {
  double smooth = x.eps != 0.0 ? x.eps * (lse - sum_x / x.vocab) : 0.0;
  return (float)((1.0 - x.eps) * (lse - target) + smooth + x.z * lse * lse);
}

/* WHOLE (in: logits, labels), MAX (in: logits), STATS (in: logits, max, labels); the logits float32 or
 * bf16-stored (x_bf16). */
__global__ void k_xent_kernel(mtf_rows r, int phase, xent_params xp, const void *x, int x_bf16, const float *max_in,
                              const void *labels, int labels_i32, float *out) {
  ROW_LOOP(row, r) {
    int64_t base = mtf_row_base(&r, row);
    float m = phase == MTF_PHASE_STATS ? max_in[row] : row_max(x, x_bf16, base, r);
    if (phase == MTF_PHASE_MAX) {
      if (threadIdx.x == 0) out[row] = m;
      continue;
    }
    double sum = row_sum_exp(x, x_bf16, base, r, m);
    double sum_x = 0.0;
    if (xp.eps != 0.0) {
      double s = 0.0;
      ROW_ELEMENTS(j, r) s += k_load(x, x_bf16, base + j * r.inner);
      sum_x = mtf_block_sum_double(s);
    }
    if (threadIdx.x != 0) continue;
    int64_t local = k_index(labels, labels_i32, row) - xp.dim_offset;
    double target = local >= 0 && local < r.len ? k_load(x, x_bf16, base + local * r.inner) : 0.0;
    if (phase == MTF_PHASE_STATS) {
      out[row] = (float)sum;
      out[r.count + row] = (float)target;
      if (xp.eps != 0.0) out[2 * r.count + row] = (float)sum_x;
    } else {
      out[row] = xent_value(xp, m + log(sum), target, sum_x);
    }
  }
}

/* APPLY: in max [rows], [sum exp, target (, sum x with smoothing)]. */
__global__ void k_xent_apply_kernel(int64_t count, xent_params xp, const float *m, const float *stats, float *out) {
  MTF_GRID_STRIDE(row, count)
  out[row] = xent_value(xp, m[row] + log((double)stats[row]), stats[count + row],
                        xp.eps != 0.0 ? stats[2 * count + row] : 0.0);
}

static xent_params xent_params_of(const mtf_step *st) {
  xent_params xp = {st->params.xent.z_loss, st->params.xent.label_smoothing, (double)st->params.xent.vocab,
                    st->dim_offset};
  return xp;
}

static int k_xent(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  xent_params xp = xent_params_of(st);
  if (st->phase == MTF_PHASE_SUM) return mtf_cuda_refuse(b, "softmax_cross_entropy: no SUM phase");
  if (st->phase == MTF_PHASE_APPLY) {
    int64_t count = mtf_shape_num_elements(&st->out_shape);
    MTF_LAUNCH(k_xent_apply_kernel, mtf_cuda_blocks(count, K_THREADS), K_THREADS, 0, K_STREAM(b), count, xp,
               (const float *)a->in[0], (const float *)a->in[1], (float *)a->out);
    K_DONE(b, "softmax_cross_entropy");
  }
  mtf_rows r = mtf_rows_of(&st->in_shape[0], st->params.xent.dim);
  int li = st->phase == MTF_PHASE_STATS ? 2 : 1;
  const void *labels = st->phase == MTF_PHASE_MAX ? NULL : a->in[li];
  int labels_i32 = st->phase == MTF_PHASE_MAX ? 0 : st->in_dtype[li] == MTF_I32;
  MTF_LAUNCH(k_xent_kernel, k_row_blocks(r.count), K_THREADS, 0, K_STREAM(b), r, (int)st->phase, xp,
             a->in[0], k_in_bf16(st, 0), st->phase == MTF_PHASE_STATS ? (const float *)a->in[1] : NULL, labels,
             labels_i32, (float *)a->out);
  K_DONE(b, "softmax_cross_entropy");
}

/* ---- gather / scatter-add: out[p, j] = table[id_p - offset, j]; table[id_p - offset, j] += rows[p, j]
 * (atomicAdd: ids may repeat). j runs over the table without the vocab dim, in table order. ---- */
typedef struct table_geometry {
  int rank, vocab_dim;
  int64_t dims[MTF_MAX_RANK];
  int64_t len, vstride, n_rest, dim_offset;
} table_geometry;

static table_geometry table_geometry_of(const mtf_shape *table, const char *dim, int64_t dim_offset) {
  table_geometry t;
  memset(&t, 0, sizeof t);
  t.rank = table->rank;
  t.vocab_dim = mtf_shape_index_of(table, dim);
  for (int d = 0; d < table->rank; d++) t.dims[d] = table->dims[d].size;
  t.len = table->dims[t.vocab_dim].size;
  t.vstride = 1;
  for (int d = t.vocab_dim + 1; d < table->rank; d++) t.vstride *= table->dims[d].size;
  t.n_rest = t.len ? mtf_shape_num_elements(table) / t.len : 0;
  t.dim_offset = dim_offset;
  return t;
}

/* Offset in the table of element j of its rows (the table without the vocab dim). */
__device__ inline int64_t table_offset(const table_geometry &t, int64_t j) {
  int64_t offset = 0, stride = 1;
  for (int d = t.rank - 1; d >= 0; d--) {
    if (d != t.vocab_dim) {
      offset += (j % t.dims[d]) * stride;
      j /= t.dims[d];
    }
    stride *= t.dims[d];
  }
  return offset;
}

__global__ void k_gather_kernel(table_geometry t, int64_t n, const float *table, const void *ids, int ids_i32,
                                float *out) {
  MTF_GRID_STRIDE(e, n) {
    int64_t p = e / t.n_rest, j = e % t.n_rest;
    int64_t local = k_index(ids, ids_i32, p) - t.dim_offset;
    out[e] = local >= 0 && local < t.len ? table[local * t.vstride + table_offset(t, j)] : 0.0f;
  }
}

__global__ void k_scatter_add_kernel(table_geometry t, int64_t n, const float *rows, const void *ids, int ids_i32,
                                     float *out) {
  MTF_GRID_STRIDE(e, n) {
    int64_t p = e / t.n_rest, j = e % t.n_rest;
    int64_t local = k_index(ids, ids_i32, p) - t.dim_offset;
    if (local >= 0 && local < t.len) atomicAdd(out + local * t.vstride + table_offset(t, j), rows[e]);
  }
}

static int k_gather(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  table_geometry t = table_geometry_of(&st->in_shape[0], st->params.along.dim, st->dim_offset);
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  if (n == 0 || t.n_rest == 0) return MTF_OK;
  MTF_LAUNCH(k_gather_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), t, n, (const float *)a->in[0],
             a->in[1], (int)(st->in_dtype[1] == MTF_I32), (float *)a->out);
  K_DONE(b, "gather");
}

static int k_scatter_add(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  table_geometry t = table_geometry_of(&st->out_shape, st->params.along.dim, st->dim_offset);
  int rc = mtf_cuda_k_fill(b, (float *)a->out, 0.0f, mtf_shape_num_elements(&st->out_shape));
  if (rc != MTF_OK) return rc;
  int64_t n = mtf_shape_num_elements(&st->in_shape[1]) * t.n_rest;
  if (n == 0) return MTF_OK;
  MTF_LAUNCH(k_scatter_add_kernel, mtf_cuda_blocks(n, K_THREADS), K_THREADS, 0, K_STREAM(b), t, n,
             (const float *)a->in[0], a->in[1], (int)(st->in_dtype[1] == MTF_I32), (float *)a->out);
  K_DONE(b, "scatter_add");
}

void mtf_cuda_register_fused(mtf_kernel_fn *k) {
  k[MTF_OP_SOFTMAX] = k_softmax;
  k[MTF_OP_LOG_SOFTMAX] = k_softmax;
  k[MTF_OP_LAYER_NORM] = k_norm;
  k[MTF_OP_RMS_NORM] = k_norm;
  k[MTF_OP_SOFTMAX_XENT] = k_xent;
  k[MTF_OP_GATHER] = k_gather;
  k[MTF_OP_SCATTER_ADD] = k_scatter_add;
}

MTF_CUDA_END
