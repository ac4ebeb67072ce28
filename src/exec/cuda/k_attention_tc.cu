/* Tensor-core kernels of fused attention (ops/attention.c) for steps under the bf16 policy whose depth is a
 * multiple of 16 up to 128 (mtf_cuda_attention_tc_fits): every product of a tile, Q K^T, P V, dO V^T,
 * (P R)^T dO, dS^T Q and dS K, is a warp's 16 x 16 x 16 bfloat16 multiply-accumulate into fp32
 * (nvcuda::wmma, sm_80 and later; the emulator's include/mma.h implements the same calls), and everything
 * between the products, the softmax, its statistics, the bias, the masks and dropout, is fp32 in shared
 * memory, one thread per row or per element, with k_attention.h's helpers: the same arithmetic as the
 * CUDA-core kernels (k_attention.cu), which keep the fp32 policy and the depths these do not take.
 *
 * Tiles are TC = 32 query rows by 32 memory rows, two warps of 16 rows each; operands are packed into
 * shared memory as bfloat16 (rows past the end zero). Rounding: q, k, v, dO as loaded, the weights before
 * P V and (P R)^T dO, and scale dS before the dQ and dK products, as the reference models the bf16 policy.
 * The forward rounds the normalised weights, as the reference and the CPU do, so it takes each row's max
 * and sum in a first pass over the memory tiles (Q K^T twice: 3 products per pair instead of 2); rounding
 * the online softmax's unnormalised weights instead (one pass) measured up to 8.7e-3 from the reference in
 * the conformance cases, above its bf16 bound of 2^-7.
 *
 * Backward without atomics on dQ (FlashAttention-2's split): one kernel per (problem, memory tile) sums
 * dK and dV over the query tiles that see it, one per (problem, query tile) sums dQ over the memory tiles
 * it sees; each recomputes S, P and dP for its pairs (tc_pair), so S and dP are computed twice. The bias
 * gradient (attention_bias_grad) is the dQ kernel without its product: each seen pair's unscaled, unrounded
 * dS atomically added into its bias element (problems along the dims the bias lacks share elements). */
#include <mma.h>

#include "exec/cuda/k_attention.h"

MTF_CUDA_BEGIN

namespace wmma = nvcuda::wmma;

#define TC 32                 /* query rows = memory rows of a tile */
#define TC_THREADS (2 * 32)   /* two warps: rows 0-15 and 16-31 of every product's output */
#define TC_MAX_DEPTH 128

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> tc_acc;

__device__ inline const __nv_bfloat16 *bf(const mtf_bf16 *p) { return reinterpret_cast<const __nv_bfloat16 *>(p); }

/* rows [row0, row0 + n) of a [L, D] operand (float32 or bf16-stored) into tile[TC][D] as bfloat16, zeros below. */
__device__ inline void tc_load(const att_problem &p, const void *x, int x_bf16, const att_view &v, int64_t base,
                               int64_t row0, int64_t n, mtf_bf16 *tile) {
  for (int64_t e = threadIdx.x; e < TC * p.D; e += blockDim.x) {
    int64_t r = e / p.D, d = e % p.D;
    tile[e] = r < n ? mtf_bf16_from_float(k_load(x, x_bf16, base + (row0 + r) * v.pos + d * v.depth)) : 0;
  }
}

/* S[TC][TC] = A B^T for A, B [TC][D]: this warp's 16 rows. */
__device__ inline void tc_a_bt(const mtf_bf16 *A, const mtf_bf16 *B, int64_t D, float *S) {
  const int warp = threadIdx.x / 32;
  for (int c = 0; c < TC; c += 16) {
    tc_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int64_t kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bt;
      wmma::load_matrix_sync(a, bf(A + warp * 16 * D + kk), (unsigned)D);
      wmma::load_matrix_sync(bt, bf(B + c * D + kk), (unsigned)D);
      wmma::mma_sync(acc, a, bt, acc);
    }
    wmma::store_matrix_sync(S + warp * 16 * TC + c, acc, TC, wmma::mem_row_major);
  }
}

/* C[TC][D] += A B for A [TC][TC] (or A^T: `transposed`) and B [TC][D]: this warp's 16 rows of C. */
__device__ inline void tc_acc_ab(const mtf_bf16 *A, int transposed, const mtf_bf16 *B, int64_t D, float *C) {
  const int warp = threadIdx.x / 32;
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    tc_acc acc;
    wmma::load_matrix_sync(acc, C + warp * 16 * D + d0, (unsigned)D, wmma::mem_row_major);
    for (int kk = 0; kk < TC; kk += 16) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
      wmma::load_matrix_sync(b, bf(B + kk * D + d0), (unsigned)D);
      if (transposed) { /* A^T's (row 16 warp + i, col kk + j) is A's (kk + j, 16 warp + i): column-major */
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> a;
        wmma::load_matrix_sync(a, bf(A + kk * TC + warp * 16), TC);
        wmma::mma_sync(acc, a, b, acc);
      } else {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::load_matrix_sync(a, bf(A + warp * 16 * TC + kk), TC);
        wmma::mma_sync(acc, a, b, acc);
      }
    }
    wmma::store_matrix_sync(C + warp * 16 * D + d0, acc, (unsigned)D, wmma::mem_row_major);
  }
}

static size_t forward_bytes(int64_t D) {
  return sizeof(mtf_bf16) * (size_t)(3 * TC * D + TC * TC) + sizeof(float) * (size_t)(TC * TC + TC * D + 2 * TC) +
         sizeof(double) * TC;
}

/* ---- forward: one block per (problem, query tile) ---- */
__global__ void tc_forward_kernel(att_problem p, att_view vq, att_view vk, att_view vo, att_view vl, const void *q,
                                  const void *k, const void *v, float *out) {
  MTF_DYNAMIC_SHARED(unsigned char, shared);
  const int64_t D = p.D, L = p.L, tiles = (L + TC - 1) / TC;
  mtf_bf16 *Qs = (mtf_bf16 *)shared, *Ks = Qs + TC * D, *Vs = Ks + TC * D, *Ps = Vs + TC * D;
  float *S = (float *)(Ps + TC * TC), *O = S + TC * TC, *m = O + TC * D;
  double *l = (double *)(m + 2 * TC);
  for (int64_t unit = blockIdx.x; unit < p.count * tiles; unit += gridDim.x) {
    int64_t b = unit / tiles, i0 = unit % tiles * TC, nq = L - i0 < TC ? L - i0 : TC;
    int64_t bk = view_base(p, vk, b);
    uint64_t mbase = p.dropout ? mask_base(p, b) : 0;
    const float *bias = extra_of(p, p.bias, p.vb, b), *ids = extra_of(p, p.segments, p.vs, b);
    tc_load(p, q, p.q_bf16, vq, view_base(p, vq, b), i0, nq, Qs);
    for (int64_t e = threadIdx.x; e < TC * D; e += blockDim.x) O[e] = 0.0f;
    for (int64_t r = threadIdx.x; r < TC; r += blockDim.x) m[r] = -INFINITY, l[r] = 0.0;
    __syncthreads();
    /* Pass 0 takes each row's max and sum over every tile it sees; pass 1 rounds the normalised weights, as
     * the reference and the CPU do, and accumulates P V. */
    for (int pass = 0; pass < 2; pass++) {
      for (int64_t j0 = 0; j0 < (p.causal ? i0 + nq : L); j0 += TC) {
        int64_t nk = L - j0 < TC ? L - j0 : TC;
        tc_load(p, k, p.k_bf16, vk, bk, j0, nk, Ks);
        if (pass == 1) tc_load(p, v, p.v_bf16, vk, bk, j0, nk, Vs);
        __syncthreads();
        tc_a_bt(Qs, Ks, D, S);
        __syncthreads();
        for (int64_t r = threadIdx.x; r < TC; r += blockDim.x) { /* one thread per row */
          float *row = S + r * TC;
          int64_t n = r < nq ? seen(p, i0 + r, j0, nk) : 0;
          for (int64_t c = 0; c < n; c++) row[c] = adjust(p, bias, ids, i0 + r, j0 + c, p.scale * row[c]);
          if (pass == 0) {
            if (r < nq) mtf_attention_online_softmax_row(row, n, TC, &m[r], &l[r]);
            continue;
          }
          const float inv = r < nq ? (float)(1.0 / l[r]) : 0.0f; /* the CPU's order: exp, dropout, 1 / sum */
          for (int64_t c = 0; c < TC; c++) {
            float w = c < n ? expf(row[c] - m[r]) : 0.0f;
            if (p.dropout && c < n) w *= drop_factor(p, mbase, i0 + r, j0 + c);
            Ps[r * TC + c] = mtf_bf16_from_float(w * inv);
          }
        }
        __syncthreads();
        if (pass == 0) continue;
        tc_acc_ab(Ps, 0, Vs, D, O);
        __syncthreads();
      }
    }
    int64_t bo = view_base(p, vo, b), bl = view_base(p, vl, b);
    for (int64_t e = threadIdx.x; e < nq * D; e += blockDim.x) {
      int64_t r = e / D, d = e % D;
      out[bo + (i0 + r) * vo.pos + d * vo.depth] = O[e];
      out[bl + (i0 + r) * vl.pos + d * vl.depth] = (float)(m[r] + log(l[r]));
    }
    __syncthreads();
  }
}

/* ---- backward ---- */
typedef struct tc_grad_smem {
  mtf_bf16 *Q, *dO, *K, *V, *PR, *dS; /* bf16 operands; PR = P R and dS = scale dS rounded [TC][TC] */
  float *P, *dP, *lse, *delta;         /* P and dP [TC][TC]; per query row */
  float *acc0, *acc1;                  /* [TC][D]: dK and dV, or dQ */
} tc_grad_smem;

static size_t backward_bytes(int64_t D) {
  return sizeof(mtf_bf16) * (size_t)(4 * TC * D + 2 * TC * TC) + sizeof(float) * (size_t)(2 * TC * TC + 2 * TC * D + 2 * TC);
}

__device__ inline tc_grad_smem tc_grad_layout(unsigned char *shared, int64_t D) {
  tc_grad_smem s;
  s.Q = (mtf_bf16 *)shared;
  s.dO = s.Q + TC * D;
  s.K = s.dO + TC * D;
  s.V = s.K + TC * D;
  s.PR = s.V + TC * D;
  s.dS = s.PR + TC * TC;
  s.P = (float *)(s.dS + TC * TC);
  s.dP = s.P + TC * TC;
  s.acc0 = s.dP + TC * TC;
  s.acc1 = s.acc0 + TC * D;
  s.lse = s.acc1 + TC * D;
  s.delta = s.lse + TC;
  return s;
}

/* Query tile i0 (nq rows) of problem b into s.Q, s.dO with its rows' lse and delta = rowsum(dO o) - rowsum(dlse)
 * (from the fp32 values). */
__device__ inline void tc_load_queries(const att_problem &p, const att_grad_views &w, const void *q, const float *F,
                                       const float *dF, int64_t b, int64_t i0, int64_t nq, const tc_grad_smem &s) {
  tc_load(p, q, p.q_bf16, w.q, view_base(p, w.q, b), i0, nq, s.Q);
  tc_load(p, dF, 0, w.dO, view_base(p, w.dO, b), i0, nq, s.dO);
  row_statistics(p, w, F, dF, b, i0, nq, s.lse, s.delta);
}

/* The pairs of query tile i0 and memory tile j0 (operands and row statistics in s): P = exp(S - lse) where
 * seen, PR = P R rounded, dS = scale (P R dP - P delta) rounded; with dbias (problem b's part of the bias
 * gradient), each seen pair's unscaled dS added to its element. */
__device__ inline void tc_pair(const att_problem &p, const tc_grad_smem &s, const float *bias, const float *ids,
                               uint64_t mbase, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float *dbias) {
  tc_a_bt(s.Q, s.K, p.D, s.P);
  tc_a_bt(s.dO, s.V, p.D, s.dP);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < TC * TC; e += blockDim.x) {
    int64_t r = e / TC, c = e % TC, i = i0 + r, j = j0 + c;
    float pv = 0.0f, pr = 0.0f;
    if (r < nq && c < nk && sees(p, i, j)) {
      pv = expf(adjust(p, bias, ids, i, j, p.scale * s.P[e]) - s.lse[r]);
      pr = p.dropout ? pv * drop_factor(p, mbase, i, j) : pv;
      float ds = pr * s.dP[e] - pv * s.delta[r];
      if (dbias) atomicAdd(dbias + i * p.vb.pos + j * p.vb.depth, ds);
      s.dS[e] = mtf_bf16_from_float(p.scale * ds);
    } else {
      s.dS[e] = 0;
    }
    s.P[e] = pv;
    s.PR[e] = mtf_bf16_from_float(pr);
  }
  __syncthreads();
}

/* dK_j, dV_j: one block per (problem, memory tile). */
__global__ void tc_backward_kv_kernel(att_problem p, att_grad_views w, const void *q, const void *k, const void *v,
                                      const float *F, const float *dF, float *out) {
  MTF_DYNAMIC_SHARED(unsigned char, shared);
  const int64_t D = p.D, L = p.L, tiles = (L + TC - 1) / TC;
  tc_grad_smem s = tc_grad_layout(shared, D);
  for (int64_t unit = blockIdx.x; unit < p.count * tiles; unit += gridDim.x) {
    int64_t b = unit / tiles, j0 = unit % tiles * TC, nk = L - j0 < TC ? L - j0 : TC;
    int64_t bk = view_base(p, w.k, b);
    uint64_t mbase = p.dropout ? mask_base(p, b) : 0;
    const float *bias = extra_of(p, p.bias, p.vb, b), *ids = extra_of(p, p.segments, p.vs, b);
    tc_load(p, k, p.k_bf16, w.k, bk, j0, nk, s.K);
    tc_load(p, v, p.v_bf16, w.k, bk, j0, nk, s.V);
    for (int64_t e = threadIdx.x; e < TC * D; e += blockDim.x) s.acc0[e] = s.acc1[e] = 0.0f;
    for (int64_t i0 = p.causal ? j0 : 0; i0 < L; i0 += TC) { /* causal: query tiles at or below the diagonal */
      int64_t nq = L - i0 < TC ? L - i0 : TC;
      tc_load_queries(p, w, q, F, dF, b, i0, nq, s);
      __syncthreads();
      tc_pair(p, s, bias, ids, mbase, i0, nq, j0, nk, NULL);
      tc_acc_ab(s.dS, 1, s.Q, D, s.acc0);  /* dK += (scale dS)^T Q */
      tc_acc_ab(s.PR, 1, s.dO, D, s.acc1); /* dV += (P R)^T dO */
      __syncthreads();
    }
    int64_t bdk = view_base(p, w.dk, b), bdv = view_base(p, w.dv, b);
    for (int64_t e = threadIdx.x; e < nk * D; e += blockDim.x) {
      int64_t c = e / D, d = e % D;
      out[bdk + (j0 + c) * w.dk.pos + d * w.dk.depth] = s.acc0[e];
      out[bdv + (j0 + c) * w.dv.pos + d * w.dv.depth] = s.acc1[e];
    }
    __syncthreads();
  }
}

/* dQ_i, or (dbias) the bias gradient: one block per (problem, query tile). */
__global__ void tc_backward_q_kernel(att_problem p, att_grad_views w, const void *q, const void *k, const void *v,
                                     const float *F, const float *dF, float *out, int bias_grad) {
  MTF_DYNAMIC_SHARED(unsigned char, shared);
  const int64_t D = p.D, L = p.L, tiles = (L + TC - 1) / TC;
  tc_grad_smem s = tc_grad_layout(shared, D);
  for (int64_t unit = blockIdx.x; unit < p.count * tiles; unit += gridDim.x) {
    int64_t b = unit / tiles, i0 = unit % tiles * TC, nq = L - i0 < TC ? L - i0 : TC;
    int64_t bk = view_base(p, w.k, b);
    uint64_t mbase = p.dropout ? mask_base(p, b) : 0;
    const float *bias = extra_of(p, p.bias, p.vb, b), *ids = extra_of(p, p.segments, p.vs, b);
    float *dbias = bias_grad ? out + view_base(p, p.vb, b) : NULL; /* the output has the bias's shape */
    tc_load_queries(p, w, q, F, dF, b, i0, nq, s);
    for (int64_t e = threadIdx.x; e < TC * D; e += blockDim.x) s.acc0[e] = 0.0f;
    for (int64_t j0 = 0; j0 < (p.causal ? i0 + nq : L); j0 += TC) {
      int64_t nk = L - j0 < TC ? L - j0 : TC;
      tc_load(p, k, p.k_bf16, w.k, bk, j0, nk, s.K);
      tc_load(p, v, p.v_bf16, w.k, bk, j0, nk, s.V);
      __syncthreads();
      tc_pair(p, s, bias, ids, mbase, i0, nq, j0, nk, dbias);
      if (!bias_grad) tc_acc_ab(s.dS, 0, s.K, D, s.acc0); /* dQ += (scale dS) K */
      __syncthreads();
    }
    int64_t bdq = view_base(p, w.dq, b);
    for (int64_t e = threadIdx.x; e < nq * D && !bias_grad; e += blockDim.x) {
      int64_t r = e / D, d = e % D;
      out[bdq + (i0 + r) * w.dq.pos + d * w.dq.depth] = s.acc0[e];
    }
    __syncthreads();
  }
}

/* ---- host ---- */
int mtf_cuda_attention_tc_fits(const att_problem *p) {
  return p->bf16 && p->D % 16 == 0 && p->D > 0 && p->D <= TC_MAX_DEPTH;
}

/* Dynamic shared memory above the 48 KiB every kernel may take is granted per kernel. */
static int allow_shared(mtf_backend *b, const void *kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return MTF_OK;
  cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (rc != cudaSuccess)
    return mtf_cuda_refuse(b, "attention (tensor cores): %zu bytes of shared memory per block refused (%s); use "
                              "model.fused_attention: false", bytes, cudaGetErrorString(rc));
  return MTF_OK;
}

int mtf_cuda_attention_tc(mtf_backend *b, const att_problem *p, att_view vq, att_view vk, att_view vo, att_view vl,
                          const mtf_kernel_args *a) {
  int64_t units = p->count * ((p->L + TC - 1) / TC);
  if (units == 0) return MTF_OK;
  size_t bytes = forward_bytes(p->D);
  MTF_CHECK(allow_shared(b, (const void *)tc_forward_kernel, bytes));
  MTF_LAUNCH(tc_forward_kernel, k_row_blocks(units), TC_THREADS, bytes, K_STREAM(b), *p, vq, vk, vo, vl, a->in[0],
             a->in[1], a->in[2], (float *)a->out);
  K_DONE(b, "attention (tensor cores)");
}

int mtf_cuda_attention_grad_tc(mtf_backend *b, const att_problem *p, const att_grad_views *w, const float *F,
                               const float *dF, int bias_grad, const mtf_kernel_args *a) {
  int64_t units = p->count * ((p->L + TC - 1) / TC);
  if (units == 0) return MTF_OK;
  size_t bytes = backward_bytes(p->D);
  MTF_CHECK(allow_shared(b, (const void *)tc_backward_q_kernel, bytes));
  MTF_LAUNCH(tc_backward_q_kernel, k_row_blocks(units), TC_THREADS, bytes, K_STREAM(b), *p, *w, a->in[0], a->in[1],
             a->in[2], F, dF, (float *)a->out, bias_grad);
  MTF_CUDA_CHECK_LAUNCH(b, "attention_grad (tensor cores, dq)");
  if (bias_grad) return MTF_OK;
  MTF_CHECK(allow_shared(b, (const void *)tc_backward_kv_kernel, bytes));
  MTF_LAUNCH(tc_backward_kv_kernel, k_row_blocks(units), TC_THREADS, bytes, K_STREAM(b), *p, *w, a->in[0], a->in[1],
             a->in[2], F, dF, (float *)a->out);
  K_DONE(b, "attention_grad (tensor cores, dk dv)");
}

MTF_CUDA_END
