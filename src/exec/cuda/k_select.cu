/* CUDA kernels of the selection ops (ops/select.c): top-k values and positions (argmax is k = 1 with the dim
 * removed) and running sums, both also in the phases of a split dim (the CPU kernels' buffers: candidates
 * [_stats: 2C, rows] = C values then their global positions; totals [parts, rows]).
 *
 * Top-k: one block per row, k passes; pass i finds, by a block reduction over (value, position) pairs, the
 * best entry that ranks after pass i-1's: the CPU's order (larger first, equal ones by position, NaN below
 * every number), so the same entries in the same order, with no per-row buffer.
 * Cumsum: one thread per row, in double as the CPU (counts of routed tokens stay exact past 2^24). */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"
#include "exec/scan.h"

MTF_CUDA_BEGIN

/* Whether entry (v, i) ranks before (u, j); i < 0 is "no entry", after everything. */
__device__ inline bool ranks_before(float v, int64_t i, float u, int64_t j) {
  if (i < 0) return false;
  if (j < 0) return true;
  if (isnan(v) || isnan(u)) return isnan(v) == isnan(u) ? i < j : !isnan(v);
  return v > u || (v == u && i < j);
}

typedef struct select_params {
  mtf_rows r;          /* rows of the input over the dim (APPLY: of the candidates) */
  int phase, indices;
  int64_t k, out_inner;
  int64_t slot, parts, dim_offset; /* STATS: this rank's slot among parts */
} select_params;

__global__ void k_select_kernel(select_params sp, const float *in, void *out) {
  __shared__ float values[K_THREADS];
  __shared__ int64_t positions[K_THREADS];
  const mtf_rows &r = sp.r;
  int64_t count = r.count;
  for (int64_t row = blockIdx.x; row < count; row += gridDim.x) {
    const float *x = in + mtf_row_base(&r, row);
    int64_t n = sp.phase == MTF_PHASE_APPLY ? r.len / 2 : r.len;
    float prev_v = 0.0f;
    int64_t prev_i = -1;
    for (int64_t pass = 0; pass < sp.k; pass++) {
      float best_v = 0.0f;
      int64_t best_i = -1;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v;
        int64_t i;
        if (sp.phase == MTF_PHASE_APPLY) {
          v = in[j * count + row];
          i = (int64_t)in[(n + j) * count + row];
        } else {
          v = x[j * r.inner];
          i = j;
        }
        if (prev_i >= 0 && !ranks_before(prev_v, prev_i, v, i)) continue; /* taken by an earlier pass */
        if (ranks_before(v, i, best_v, best_i)) best_v = v, best_i = i;
      }
      unsigned t = threadIdx.x;
      values[t] = best_v;
      positions[t] = best_i;
      __syncthreads();
      for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (t < s && ranks_before(values[t + s], positions[t + s], values[t], positions[t])) {
          values[t] = values[t + s];
          positions[t] = positions[t + s];
        }
        __syncthreads();
      }
      prev_v = values[0];
      prev_i = positions[0];
      __syncthreads();
      if (t != 0) continue;
      if (sp.phase == MTF_PHASE_STATS) { /* this rank's slot of the zeroed candidates, positions global */
        float *c = (float *)out;
        int64_t total = sp.parts * sp.k;
        c[(sp.slot * sp.k + pass) * count + row] = prev_v;
        c[(total + sp.slot * sp.k + pass) * count + row] = (float)(sp.dim_offset + prev_i);
        continue;
      }
      int64_t o = (row / sp.out_inner) * sp.k * sp.out_inner + row % sp.out_inner + pass * sp.out_inner;
      if (sp.indices) ((int32_t *)out)[o] = (int32_t)prev_i;
      else ((float *)out)[o] = prev_v;
    }
  }
}

static int k_select(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int argmax = st->params.top_k.k_dim[0] == 0;
  select_params sp;
  memset(&sp, 0, sizeof sp);
  sp.phase = (int)st->phase;
  sp.indices = st->op == MTF_OP_TOP_K_INDICES;
  sp.k = argmax ? 1 : st->params.top_k.k;
  sp.dim_offset = st->dim_offset;
  if (st->phase == MTF_PHASE_APPLY) { /* rows: the candidates' trailing dims; len: all 2C of them */
    int64_t s = st->in_shape[0].dims[0].size, rest = mtf_shape_num_elements(&st->in_shape[0]) / s;
    sp.r.outer = 1;
    sp.r.len = s;
    sp.r.inner = rest;
    sp.r.count = rest;
  } else {
    sp.r = mtf_rows_of(&st->in_shape[0], st->params.top_k.dim);
  }
  sp.out_inner = argmax ? 1 : mtf_rows_of(&st->out_shape, st->params.top_k.k_dim).inner;
  if (st->phase == MTF_PHASE_STATS) {
    sp.k = sp.k < sp.r.len ? sp.k : sp.r.len;
    sp.parts = st->out_shape.dims[0].size / (2 * sp.k);
    sp.slot = st->dim_offset / sp.r.len;
    int rc = mtf_cuda_k_fill(b, (float *)a->out, 0.0f, mtf_shape_num_elements(&st->out_shape));
    if (rc != MTF_OK) return rc;
  }
  if (sp.r.count == 0) return MTF_OK;
  MTF_LAUNCH(k_select_kernel, k_row_blocks(sp.r.count), K_THREADS, 0, K_STREAM(b), sp, (const float *)a->in[0], a->out);
  K_DONE(b, "top_k");
}

/* ---- running sums ---- */
__global__ void k_scan_kernel(mtf_scan_spec sp, const float *in, const float *totals, float *out) {
  MTF_GRID_STRIDE(row, sp.r.count) mtf_scan_row(&sp, row, in, totals, out);
}

static int k_cumsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  mtf_scan_spec sp = mtf_scan_spec_of(st);
  if (sp.stats) {
    int rc = mtf_cuda_k_fill(b, (float *)a->out, 0.0f, mtf_shape_num_elements(&st->out_shape));
    if (rc != MTF_OK) return rc;
  }
  const float *totals = st->phase == MTF_PHASE_APPLY ? (const float *)a->in[1] : NULL;
  MTF_LAUNCH(k_scan_kernel, mtf_cuda_blocks(sp.r.count, K_THREADS), K_THREADS, 0, K_STREAM(b), sp,
             (const float *)a->in[0], totals, (float *)a->out);
  K_DONE(b, "cumsum");
}

void mtf_cuda_register_select(mtf_kernel_fn *k) {
  k[MTF_OP_TOP_K] = k_select;
  k[MTF_OP_TOP_K_INDICES] = k_select;
  k[MTF_OP_CUMSUM] = k_cumsum;
}

MTF_CUDA_END
