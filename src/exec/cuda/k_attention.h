/* What the CUDA kernels of fused attention share (k_attention.cu: the CUDA-core kernels and the step setup;
 * k_attention_tc.cu: the tensor-core kernels): a step's problems and views as kernel arguments, and the
 * per-pair arithmetic both compute alike (offsets, dropout factors, bias and segment mask, visibility). */
#ifndef MTF_EXEC_CUDA_K_ATTENTION_H
#define MTF_EXEC_CUDA_K_ATTENTION_H

#include "exec/cuda/k_common.h"

extern "C" {
#include "ops/attention.h"
}

MTF_CUDA_BEGIN

/* ops/attention.h's view, as a kernel argument. */
typedef struct att_view {
  int64_t batch_stride[MTF_MAX_RANK];
  int64_t pos, depth, offset;
} att_view;

/* One step's attention problems: geometry, dropout mask, scale, the optional bias and segment ids. */
typedef struct att_problem {
  int batch_rank;
  int64_t batch_size[MTF_MAX_RANK], mask_global[MTF_MAX_RANK], mask_offset[MTF_MAX_RANK];
  int64_t count, L, D, tiles;
  int T, dropout, bf16, causal;
  int q_bf16, k_bf16, v_bf16; /* q, k, v bf16-stored (step in_dtype, lower/storage.c) */
  uint64_t seed, key;
  float keep, drop_scale, scale;
  const float *bias, *segments; /* float32 always (attention_reads_bf16); NULL where the op has none */
  att_view vb, vs;              /* mtf_attention_bias_view, mtf_attention_segments_view */
} att_problem;

/* Where a backward step's operands live: in q, k, v, F = [o | lse], dF = [dO | dlse]; out [dq | dk | dv]. */
typedef struct att_grad_views {
  att_view q, k, o, lse, dO, dlse, dq, dk, dv;
} att_grad_views;

/* Offset of problem b's (position 0, feature 0) in a view (mtf_attention_base). */
__device__ inline int64_t view_base(const att_problem &p, const att_view &v, int64_t b) {
  int64_t offset = v.offset;
  for (int d = p.batch_rank - 1; d >= 0; d--) {
    offset += (b % p.batch_size[d]) * v.batch_stride[d];
    b /= p.batch_size[d];
  }
  return offset;
}

/* The first mask counter of problem b (mtf_attention_mask_base). */
__device__ inline uint64_t mask_base(const att_problem &p, int64_t b) {
  int64_t index = 0, stride = 1;
  for (int d = p.batch_rank - 1; d >= 0; d--) {
    index += (b % p.batch_size[d] + p.mask_offset[d]) * stride;
    b /= p.batch_size[d];
    stride *= p.mask_global[d];
  }
  return (uint64_t)(index * p.L * p.L);
}

/* The dropout factor of weight (i, j): 1 / keep or 0. */
__device__ inline float drop_factor(const att_problem &p, uint64_t base, int64_t i, int64_t j) {
  return mtf_uniform01(p.seed, p.key, base + (uint64_t)(i * p.L + j)) < (double)p.keep ? p.drop_scale : 0.0f;
}

/* Problem b's part of an optional input (x + its base in view v), NULL where absent. */
__device__ inline const float *extra_of(const att_problem &p, const float *x, const att_view &v, int64_t b) {
  return x ? x + view_base(p, v, b) : NULL;
}

/* Scaled score s of the visible pair (i, j) after the bias and the segment mask, in the CPU's order (bias
 * first: a masked pair is MTF_ATTENTION_MASKED whatever its bias). bias, ids: extra_of's. */
__device__ inline float adjust(const att_problem &p, const float *bias, const float *ids, int64_t i, int64_t j,
                               float s) {
  if (bias) s += bias[i * p.vb.pos + j * p.vb.depth];
  if (ids && ids[i * p.vs.pos] != ids[j * p.vs.pos]) s = MTF_ATTENTION_MASKED;
  return s;
}

/* Whether query row i sees memory row j (causal: j <= i), and how many of the nk memory rows from j0 it sees. */
__device__ inline bool sees(const att_problem &p, int64_t i, int64_t j) { return !p.causal || j <= i; }
__device__ inline int64_t seen(const att_problem &p, int64_t i, int64_t j0, int64_t nk) {
  int64_t n = mtf_attention_visible(p.causal, i, p.L) - j0;
  return n < nk ? n : nk;
}

/* Query rows i0 .. i0 + nq of problem b: their lse and delta = rowsum(dO o) - rowsum(dlse), from the fp32 values. */
__device__ inline void row_statistics(const att_problem &p, const att_grad_views &w, const float *F, const float *dF,
                                      int64_t b, int64_t i0, int64_t nq, float *lse, float *delta) {
  int64_t bo = view_base(p, w.o, b), bl = view_base(p, w.lse, b), bdo = view_base(p, w.dO, b);
  int64_t bdl = view_base(p, w.dlse, b);
  for (int64_t r = threadIdx.x; r < nq; r += blockDim.x) {
    double dsum = 0.0, extra = 0.0;
    for (int64_t d = 0; d < p.D; d++) {
      dsum += (double)dF[bdo + (i0 + r) * w.dO.pos + d * w.dO.depth] * F[bo + (i0 + r) * w.o.pos + d * w.o.depth];
      extra += dF[bdl + (i0 + r) * w.dlse.pos + d * w.dlse.depth];
    }
    lse[r] = F[bl + (i0 + r) * w.lse.pos];
    delta[r] = (float)(dsum - extra);
  }
}

/* The tensor-core kernels (k_attention_tc.cu): for steps under the bf16 policy with a depth they take. */
int mtf_cuda_attention_tc_fits(const att_problem *p);
int mtf_cuda_attention_tc(mtf_backend *b, const att_problem *p, att_view vq, att_view vk, att_view vo, att_view vl,
                          const mtf_kernel_args *a);
/* out zeroed first; bias_grad: the output is the bias's gradient (w's dq, dk, dv unused). */
int mtf_cuda_attention_grad_tc(mtf_backend *b, const att_problem *p, const att_grad_views *w, const float *F,
                               const float *dF, int bias_grad, const mtf_kernel_args *a);

MTF_CUDA_END

#endif
