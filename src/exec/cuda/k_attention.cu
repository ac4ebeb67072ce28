/* CUDA kernels of fused attention (ops/attention.c), flash-style: tiles of T query rows x T memory rows in
 * shared memory, no [length, length] buffer; when causal (params.attention.causal) tiles wholly above the
 * diagonal are never computed, otherwise every pair is. T is the largest power of two <= 32 whose tiles fit
 * the 48 KiB of static shared memory every GPU grants without opting in (pick_tile); operands are read in
 * place through ops/attention.h's views (any dim order; k and v shared along q's dims they lack have batch
 * stride 0 there, and their per-problem gradients are summed by the graph).
 *
 * Forward: one block per (problem, query tile). The online softmax keeps each row's running max m (float)
 * and sum l (double, as the CPU); a new tile of scores rescales the accumulator by exp(m_old - m_new).
 * o = acc / l, lse = m + log l (stored along depth, as the CPU's F[1]); under bf16 see below.
 * Backward, two kernels, so that no row of dQ is summed by atomics (FlashAttention-2's split): per (problem,
 * memory tile j) over the query tiles i >= j (causal; else all of them), and per (problem, query tile i) over
 * the memory tiles it sees, each recomputing for its pairs (pair_gradients) P = exp(S - lse) from the forward
 * pass's logsumexp, dP = dO_i V_j^T and dS = P R dP - P delta with delta = rowsum(dO o) - rowsum(dlse); the
 * first sums dV_j += (P R)^T dO_i and dK_j += scale dS^T Q_i, the second dQ_i += scale dS K_j, each in shared
 * memory and written once.
 * Dropout (R: 0 or 1 / keep) is ops/attention.h's mask, recomputed from global indices per tile with
 * core/rng's hash: the forward pass sums kept and dropped probabilities into l and accumulates only the
 * kept ones, scaled, exactly as the CPU kernel.
 * The optional bias (float32, any subset of q's batch dims) is added to each visible pair's scaled score, and
 * pairs of different segments (ids float32, per query position) then get MTF_ATTENTION_MASKED (adjust, in
 * mtf_cpu_attention_adjust_row's order), in the forward and backward kernels alike, so that the backward
 * pass's P = exp(S - lse) is the forward pass's softmax. The bias gradient (attention_bias_grad) is the
 * dQ kernel with dbias: the same P and dS, each visible pair's dS (unscaled: the bias is added after
 * the scale; never rounded, as the CPU's) atomically added into its bias element (the problems along the
 * dims the bias lacks share elements), and no dV, dK, dQ products; its output is zeroed first.
 * Under the bf16 policy (params.attention.bf16) the product operands are rounded to bfloat16 as the CPU's bf16
 * path (and the reference) round them: q, k, v, dO as loaded, (P R)^T dO's weights, scale dS before dS K and
 * dS^T Q, and the normalised weights of P V, which is why the forward takes the rows' max and sum in a first
 * pass over the memory tiles there (twice the score products); delta stays from the fp32 dO, and sums stay
 * fp32 (the tiles are CUDA-core products, not tensor cores yet). */
#include "core/bf16.h"
#include "exec/cuda/k_attention.h"
#include "exec/cuda/k_kernels.h"

MTF_CUDA_BEGIN

#define MAX_TILE 32
#define SHARED_LIMIT (48 * 1024)


static att_view att_view_of(const mtf_attention_view &v) {
  att_view a;
  memset(&a, 0, sizeof a);
  for (int d = 0; d < MTF_MAX_RANK; d++) a.batch_stride[d] = v.batch_stride[d];
  a.pos = v.pos_stride;
  a.depth = v.depth_stride;
  a.offset = v.offset;
  return a;
}

static att_view view_of(const mtf_attention_geometry *geo, const mtf_shape *s, const char *pos, const char *depth,
                        const char *stack, int index) {
  return att_view_of(mtf_attention_view_make(geo, s, pos, depth, stack, index));
}

static size_t forward_bytes(int64_t T, int64_t D) {
  return sizeof(double) * (size_t)T + sizeof(float) * (size_t)(4 * T * D + T * T + 2 * T);
}

static size_t backward_bytes(int64_t T, int64_t D) { return sizeof(float) * (size_t)(6 * T * D + 3 * T * T + 2 * T); }

/* The largest tile whose shared memory fits; 0 when even T = 1 does not (depth too large). */
static int pick_tile(int64_t D, int backward) {
  for (int T = MAX_TILE; T >= 1; T /= 2)
    if ((backward ? backward_bytes(T, D) : forward_bytes(T, D)) <= SHARED_LIMIT) return T;
  return 0;
}

/* With the step's input indices in *in (F and dF after the optional inputs in the backward ops). */
static int problem_of(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a, int backward,
                      mtf_attention_geometry *geo, att_problem *p, mtf_attention_inputs *in) {
  const mtf_op_params *pa = &st->params;
  mtf_attention_geometry_make(&st->in_shape[0], pa->attention.dim, pa->attention.depth, geo);
  int64_t offsets[MTF_MAX_RANK], global_dims[MTF_MAX_RANK]; /* microbatches number rows of the whole batch */
  mtf_random_extent(st, a, offsets, global_dims);
  mtf_attention_mask mask;
  mtf_attention_mask_make(geo, mtf_random_extent_shape(st), global_dims, offsets, st->seed,
                          mtf_run_key(pa->attention.key, a->random_offset), pa->attention.keep, &mask);
  memset(p, 0, sizeof *p);
  p->batch_rank = geo->batch.rank;
  for (int d = 0; d < geo->batch.rank; d++) {
    p->batch_size[d] = geo->batch.dims[d].size;
    p->mask_global[d] = mask.global_size[d];
    p->mask_offset[d] = mask.offset[d];
  }
  p->count = geo->count;
  p->L = geo->length;
  p->D = geo->depth;
  p->T = pick_tile(p->D, backward);
  if (p->T == 0)
    return mtf_cuda_refuse(b, "causal attention: depth %lld is too large for the fused kernel's tiles in 48 KiB of "
                              "shared memory; use model.fused_attention: false",
                           (long long)p->D);
  p->tiles = (p->L + p->T - 1) / p->T;
  p->dropout = pa->attention.keep < 1.0f;
  p->causal = pa->attention.causal;
  p->seed = mask.seed;
  p->key = mask.key;
  p->keep = mask.keep;
  p->drop_scale = mask.scale;
  p->scale = pa->attention.scale;
  p->bf16 = pa->attention.bf16;
  p->q_bf16 = k_in_bf16(st, 0);
  p->k_bf16 = k_in_bf16(st, 1);
  p->v_bf16 = k_in_bf16(st, 2);
  *in = mtf_attention_inputs_of(pa->attention.bias, pa->attention.segments, backward);
  if (in->bias >= 0) {
    p->bias = (const float *)a->in[in->bias];
    p->vb = att_view_of(mtf_attention_bias_view(geo, &st->in_shape[in->bias], pa->attention.dim, pa->attention.memory));
  }
  if (in->segments >= 0) {
    p->segments = (const float *)a->in[in->segments];
    p->vs = att_view_of(mtf_attention_segments_view(geo, &st->in_shape[in->segments], pa->attention.dim));
  }
  return MTF_OK;
}

/* A product operand: rounded to bfloat16 under the bf16 policy. */
__device__ inline float operand(const att_problem &p, float x) { return p.bf16 ? mtf_bf16_round(x) : x; }

/* rows [row0, row0 + n) of a [L, D] operand, float32 or bf16-stored (x_bf16), into tile[n][D]. */
__device__ inline void load_tile(const att_problem &p, const void *x, int x_bf16, const att_view &v, int64_t base,
                                 int64_t row0, int64_t n, int64_t D, float *tile) {
  for (int64_t e = threadIdx.x; e < n * D; e += blockDim.x) {
    int64_t r = e / D, d = e % D;
    tile[e] = operand(p, k_load(x, x_bf16, base + (row0 + r) * v.pos + d * v.depth));
  }
}

__device__ inline float dot(const float *a, const float *b, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

/* ---- forward: in q, k, v; out F = [o | lse] ---- */
__global__ void k_attention_kernel(att_problem p, att_view vq, att_view vk, att_view vo, att_view vl, const void *q,
                                   const void *k, const void *v, float *out) {
  MTF_DYNAMIC_SHARED(unsigned char, shared);
  const int64_t T = p.T, D = p.D, L = p.L;
  double *l = (double *)shared;
  float *Q = (float *)(l + T), *K = Q + T * D, *V = K + T * D, *acc = V + T * D, *S = acc + T * D;
  float *m = S + T * T, *correction = m + T;
  for (int64_t unit = blockIdx.x; unit < p.count * p.tiles; unit += gridDim.x) {
    int64_t b = unit / p.tiles, i0 = unit % p.tiles * T, nq = L - i0 < T ? L - i0 : T;
    int64_t bq = view_base(p, vq, b), bk = view_base(p, vk, b);
    uint64_t mbase = p.dropout ? mask_base(p, b) : 0;
    const float *bias = extra_of(p, p.bias, p.vb, b), *ids = extra_of(p, p.segments, p.vs, b);
    load_tile(p, q, p.q_bf16, vq, bq, i0, nq, D, Q);
    for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x) acc[e] = 0.0f;
    for (int64_t r = threadIdx.x; r < T; r += blockDim.x) m[r] = -INFINITY, l[r] = 0.0;
    __syncthreads();
    /* Under bf16 a first pass takes each row's max and sum, so that the second rounds the weights normalised,
     * as the CPU and the reference do (an unnormalised weight rounds elsewhere: up to an ulp per weight). */
    for (int pass = p.bf16 ? 0 : 1; pass < 2; pass++) {
      for (int64_t j0 = 0; j0 < (p.causal ? i0 + nq : L); j0 += T) { /* causal: tiles up to the diagonal */
        int64_t nk = L - j0 < T ? L - j0 : T;
        load_tile(p, k, p.k_bf16, vk, bk, j0, nk, D, K);
        if (pass == 1) load_tile(p, v, p.v_bf16, vk, bk, j0, nk, D, V);
        __syncthreads();
        for (int64_t e = threadIdx.x; e < nq * T; e += blockDim.x) {
          int64_t r = e / T, c = e % T;
          S[e] = c < nk && sees(p, i0 + r, j0 + c)
                     ? adjust(p, bias, ids, i0 + r, j0 + c, p.scale * dot(Q + r * D, K + c * D, D))
                     : -INFINITY;
        }
        __syncthreads();
        for (int64_t r = threadIdx.x; r < nq; r += blockDim.x) { /* one thread per row: the softmax */
          float *row = S + r * T;
          int64_t n = seen(p, i0 + r, j0, nk);
          if (p.bf16 && pass == 1) { /* m and l are the row's final max and sum */
            for (int64_t c = 0; c < T; c++) row[c] = c < n ? expf(row[c] - m[r]) : 0.0f;
            correction[r] = 1.0f;
          } else {
            correction[r] = mtf_attention_online_softmax_row(row, n, T, &m[r], &l[r]);
            if (pass == 0) continue;
          }
          if (p.dropout)
            for (int64_t c = 0; c < n; c++) row[c] *= drop_factor(p, mbase, i0 + r, j0 + c);
          const float inv = p.bf16 ? 1.0f / (float)l[r] : 1.0f; /* the CPU's order: exp, dropout, 1 / sum */
          for (int64_t c = 0; c < n && p.bf16; c++) row[c] = mtf_bf16_round(row[c] * inv);
        }
        __syncthreads();
        for (int64_t e = threadIdx.x; e < nq * D && pass == 1; e += blockDim.x) {
          int64_t r = e / D, d = e % D;
          float s = 0.0f;
          for (int64_t c = 0; c < nk; c++) s += S[r * T + c] * V[c * D + d];
          acc[e] = acc[e] * correction[r] + s;
        }
        __syncthreads();
      }
    }
    int64_t bo = view_base(p, vo, b), bl = view_base(p, vl, b);
    for (int64_t e = threadIdx.x; e < nq * D; e += blockDim.x) {
      int64_t r = e / D, d = e % D;
      out[bo + (i0 + r) * vo.pos + d * vo.depth] = p.bf16 ? acc[e] : acc[e] * (float)(1.0 / l[r]);
      out[bl + (i0 + r) * vl.pos + d * vl.depth] = (float)(m[r] + log(l[r]));
    }
    __syncthreads();
  }
}

static int k_attention(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  mtf_attention_geometry geo;
  att_problem p;
  mtf_attention_inputs in;
  int rc = problem_of(b, st, a, 0, &geo, &p, &in);
  if (rc != MTF_OK) return rc;
  const char *qd = st->params.attention.dim, *md = st->params.attention.memory, *dd = st->params.attention.depth;
  att_view vq = view_of(&geo, &st->in_shape[0], qd, dd, NULL, 0), vk = view_of(&geo, &st->in_shape[1], md, dd, NULL, 0);
  att_view vo = view_of(&geo, &st->out_shape, qd, dd, MTF_ATTENTION_STACK, 0);
  att_view vl = view_of(&geo, &st->out_shape, qd, dd, MTF_ATTENTION_STACK, 1);
  if (mtf_cuda_attention_tc_fits(&p)) return mtf_cuda_attention_tc(b, &p, vq, vk, vo, vl, a);
  int64_t units = p.count * p.tiles;
  if (units == 0 || p.D == 0) return MTF_OK;
  MTF_LAUNCH(k_attention_kernel, k_row_blocks(units), K_THREADS, forward_bytes(p.T, p.D), K_STREAM(b), p, vq, vk, vo,
             vl, a->in[0], a->in[1], a->in[2], (float *)a->out);
  K_DONE(b, "attention");
}

/* ---- backward: in q, k, v [, bias] [, segments], F = [o | lse], dF = [dO | dlse]; out G = [dq | dk | dv], or
 * (out NULL) dbias, the bias's gradient; either zeroed first ---- */

/* The pairs of query tile i0 (Q, dO, lse, delta) and memory tile j0 (K, V): P = exp(S - lse) where seen, PR = P R,
 * and dS = P R dP - P delta into dP (under bf16 scaled and rounded here: the products then take scale 1); with
 * db (problem b's part of the bias gradient), each seen pair's dS added to its element. */
__device__ inline void pair_gradients(const att_problem &p, const float *Q, const float *dO, const float *K,
                                      const float *V, const float *lse, const float *delta, const float *bias,
                                      const float *ids, uint64_t mbase, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                                      float *P, float *PR, float *dP, float *db) {
  const int64_t T = p.T, D = p.D;
  for (int64_t e = threadIdx.x; e < nq * T; e += blockDim.x) {
    int64_t r = e / T, c = e % T;
    int visible = c < nk && sees(p, i0 + r, j0 + c);
    float pv = visible ? expf(adjust(p, bias, ids, i0 + r, j0 + c, p.scale * dot(Q + r * D, K + c * D, D)) - lse[r])
                       : 0.0f;
    P[e] = pv;
    PR[e] = p.dropout && visible ? pv * drop_factor(p, mbase, i0 + r, j0 + c) : pv;
    dP[e] = c < nk ? dot(dO + r * D, V + c * D, D) : 0.0f;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < nq * T; e += blockDim.x) {
    int64_t r = e / T, c = e % T;
    float ds = PR[e] * dP[e] - P[e] * delta[r];
    if (db && c < nk && sees(p, i0 + r, j0 + c)) atomicAdd(db + (i0 + r) * p.vb.pos + (j0 + c) * p.vb.depth, ds);
    dP[e] = p.bf16 ? mtf_bf16_round(p.scale * ds) : ds;
  }
  __syncthreads();
}

/* dK_j and dV_j: one block per (problem, memory tile j), over the query tiles that see it. */
__global__ void k_attention_grad_kv_kernel(att_problem p, att_grad_views w, const void *q, const void *k, const void *v,
                                           const float *F, const float *dF, float *out) {
  MTF_DYNAMIC_SHARED(unsigned char, shared);
  const int64_t T = p.T, D = p.D, L = p.L;
  float *K = (float *)shared, *V = K + T * D, *dK = V + T * D, *dV = dK + T * D, *Q = dV + T * D, *dO = Q + T * D;
  float *P = dO + T * D, *PR = P + T * T, *dP = PR + T * T, *lse = dP + T * T, *delta = lse + T;
  const float ds_scale = p.bf16 ? 1.0f : p.scale;
  for (int64_t unit = blockIdx.x; unit < p.count * p.tiles; unit += gridDim.x) {
    int64_t b = unit / p.tiles, j0 = unit % p.tiles * T, nk = L - j0 < T ? L - j0 : T;
    int64_t bq = view_base(p, w.q, b), bk = view_base(p, w.k, b), bdo = view_base(p, w.dO, b);
    uint64_t mbase = p.dropout ? mask_base(p, b) : 0;
    const float *bias = extra_of(p, p.bias, p.vb, b), *ids = extra_of(p, p.segments, p.vs, b);
    load_tile(p, k, p.k_bf16, w.k, bk, j0, nk, D, K);
    load_tile(p, v, p.v_bf16, w.k, bk, j0, nk, D, V);
    for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x) dK[e] = dV[e] = 0.0f;
    __syncthreads();
    for (int64_t i0 = p.causal ? j0 : 0; i0 < L; i0 += T) { /* causal: query tiles at or below the diagonal */
      int64_t nq = L - i0 < T ? L - i0 : T;
      load_tile(p, q, p.q_bf16, w.q, bq, i0, nq, D, Q);
      load_tile(p, dF, 0, w.dO, bdo, i0, nq, D, dO);
      row_statistics(p, w, F, dF, b, i0, nq, lse, delta);
      __syncthreads();
      pair_gradients(p, Q, dO, K, V, lse, delta, bias, ids, mbase, i0, nq, j0, nk, P, PR, dP, NULL);
      for (int64_t e = threadIdx.x; e < nk * D; e += blockDim.x) { /* this memory tile's rows */
        int64_t c = e / D, d = e % D;
        float sv = 0.0f, sk = 0.0f;
        for (int64_t r = 0; r < nq; r++) {
          sv += operand(p, PR[r * T + c]) * dO[r * D + d];
          sk += dP[r * T + c] * Q[r * D + d];
        }
        dV[e] += sv;
        dK[e] += ds_scale * sk;
      }
      __syncthreads();
    }
    int64_t bdk = view_base(p, w.dk, b), bdv = view_base(p, w.dv, b);
    for (int64_t e = threadIdx.x; e < nk * D; e += blockDim.x) {
      int64_t c = e / D, d = e % D;
      out[bdk + (j0 + c) * w.dk.pos + d * w.dk.depth] = dK[e];
      out[bdv + (j0 + c) * w.dv.pos + d * w.dv.depth] = dV[e];
    }
    __syncthreads();
  }
}

/* dQ_i, or (dbias) the bias gradient: one block per (problem, query tile i), over the memory tiles it sees, so
 * each dQ row is written once (no atomics; the bias gradient adds across the problems that share its
 * elements). */
__global__ void k_attention_grad_q_kernel(att_problem p, att_grad_views w, const void *q, const void *k, const void *v,
                                          const float *F, const float *dF, float *out, float *dbias) {
  MTF_DYNAMIC_SHARED(unsigned char, shared);
  const int64_t T = p.T, D = p.D, L = p.L;
  float *Q = (float *)shared, *dO = Q + T * D, *K = dO + T * D, *V = K + T * D, *dQ = V + T * D;
  float *P = dQ + T * D + T * D, *PR = P + T * T, *dP = PR + T * T, *lse = dP + T * T, *delta = lse + T;
  const float ds_scale = p.bf16 ? 1.0f : p.scale;
  for (int64_t unit = blockIdx.x; unit < p.count * p.tiles; unit += gridDim.x) {
    int64_t b = unit / p.tiles, i0 = unit % p.tiles * T, nq = L - i0 < T ? L - i0 : T;
    int64_t bk = view_base(p, w.k, b);
    uint64_t mbase = p.dropout ? mask_base(p, b) : 0;
    const float *bias = extra_of(p, p.bias, p.vb, b), *ids = extra_of(p, p.segments, p.vs, b);
    float *db = dbias ? dbias + view_base(p, p.vb, b) : NULL;
    load_tile(p, q, p.q_bf16, w.q, view_base(p, w.q, b), i0, nq, D, Q);
    load_tile(p, dF, 0, w.dO, view_base(p, w.dO, b), i0, nq, D, dO);
    row_statistics(p, w, F, dF, b, i0, nq, lse, delta);
    for (int64_t e = threadIdx.x; e < T * D; e += blockDim.x) dQ[e] = 0.0f;
    for (int64_t j0 = 0; j0 < (p.causal ? i0 + nq : L); j0 += T) {
      int64_t nk = L - j0 < T ? L - j0 : T;
      load_tile(p, k, p.k_bf16, w.k, bk, j0, nk, D, K);
      load_tile(p, v, p.v_bf16, w.k, bk, j0, nk, D, V);
      __syncthreads();
      pair_gradients(p, Q, dO, K, V, lse, delta, bias, ids, mbase, i0, nq, j0, nk, P, PR, dP, db);
      for (int64_t e = threadIdx.x; e < nq * D && !db; e += blockDim.x) {
        int64_t r = e / D, d = e % D;
        float s = 0.0f;
        for (int64_t c = 0; c < nk; c++) s += dP[r * T + c] * K[c * D + d];
        dQ[e] += ds_scale * s;
      }
      __syncthreads();
    }
    int64_t bdq = view_base(p, w.dq, b);
    for (int64_t e = threadIdx.x; e < nq * D && !db; e += blockDim.x) {
      int64_t r = e / D, d = e % D;
      out[bdq + (i0 + r) * w.dq.pos + d * w.dq.depth] = dQ[e];
    }
    __syncthreads();
  }
}

static int k_attention_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  mtf_attention_geometry geo;
  att_problem p;
  mtf_attention_inputs in;
  int rc = problem_of(b, st, a, 1, &geo, &p, &in);
  if (rc != MTF_OK) return rc;
  int bias_grad = st->op == MTF_OP_ATTENTION_BIAS_GRAD;
  const char *qd = st->params.attention.dim, *md = st->params.attention.memory, *dd = st->params.attention.depth;
  att_grad_views w;
  memset(&w, 0, sizeof w);
  w.q = view_of(&geo, &st->in_shape[0], qd, dd, NULL, 0);
  w.k = view_of(&geo, &st->in_shape[1], md, dd, NULL, 0);
  w.o = view_of(&geo, &st->in_shape[in.forward], qd, dd, MTF_ATTENTION_STACK, 0);
  w.lse = view_of(&geo, &st->in_shape[in.forward], qd, dd, MTF_ATTENTION_STACK, 1);
  w.dO = view_of(&geo, &st->in_shape[in.forward_grad], qd, dd, MTF_ATTENTION_STACK, 0);
  w.dlse = view_of(&geo, &st->in_shape[in.forward_grad], qd, dd, MTF_ATTENTION_STACK, 1);
  if (!bias_grad) { /* the bias gradient's output is the bias's shape, not the stack's */
    w.dq = view_of(&geo, &st->out_shape, qd, dd, MTF_ATTENTION_GRAD_STACK, 0);
    w.dk = view_of(&geo, &st->out_shape, qd, dd, MTF_ATTENTION_GRAD_STACK, 1);
    w.dv = view_of(&geo, &st->out_shape, qd, dd, MTF_ATTENTION_GRAD_STACK, 2);
  }
  rc = mtf_cuda_k_fill(b, (float *)a->out, 0.0f, mtf_shape_num_elements(&st->out_shape));
  if (rc != MTF_OK) return rc;
  const float *F = (const float *)a->in[in.forward], *dF = (const float *)a->in[in.forward_grad];
  if (mtf_cuda_attention_tc_fits(&p)) return mtf_cuda_attention_grad_tc(b, &p, &w, F, dF, bias_grad, a);
  int64_t units = p.count * p.tiles;
  if (units == 0 || p.D == 0) return MTF_OK;
  size_t bytes = backward_bytes(p.T, p.D);
  MTF_LAUNCH(k_attention_grad_q_kernel, k_row_blocks(units), K_THREADS, bytes, K_STREAM(b), p, w, a->in[0], a->in[1],
             a->in[2], F, dF, bias_grad ? NULL : (float *)a->out, bias_grad ? (float *)a->out : NULL);
  if (bias_grad) K_DONE(b, "attention_bias_grad");
  MTF_CUDA_CHECK_LAUNCH(b, "attention_grad (dq)");
  MTF_LAUNCH(k_attention_grad_kv_kernel, k_row_blocks(units), K_THREADS, bytes, K_STREAM(b), p, w, a->in[0], a->in[1],
             a->in[2], F, dF, (float *)a->out);
  K_DONE(b, "attention_grad (dk, dv)");
}

void mtf_cuda_register_attention(mtf_kernel_fn *k) {
  k[MTF_OP_ATTENTION] = k_attention;
  k[MTF_OP_ATTENTION_GRAD] = k_attention_grad;
  k[MTF_OP_ATTENTION_BIAS_GRAD] = k_attention_grad;
}

MTF_CUDA_END
