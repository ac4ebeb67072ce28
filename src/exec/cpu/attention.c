/* CPU kernels of fused causal attention (ops/attention.c) and of take. One problem (an index of the batch
 * dims: batch, heads) at a time: its q, k, v rows are packed into [length, depth] scratch, then processed
 * in TILE x TILE blocks of query rows x memory rows with cblas_sgemm; blocks wholly above the diagonal are
 * never computed.
 *
 * Forward (per block of query rows): the online softmax keeps each row's running max m and sum l (double);
 * a new block of scores rescales the accumulator by exp(m_old - m_new). o = acc / l, lse = m + log l.
 * Backward (per block of memory rows j, then the query blocks i >= j): P = exp(S - lse) from the forward
 * pass's logsumexp, dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P (dP - delta) with delta = rowsum(dO o) - dlse,
 * dQ_i += scale dS K_j, dK_j += scale dS^T Q_i: five products per block, no [length, length] buffer.
 * Dropout of the weights (ops/attention.h's mask, recomputed per block from global indices): the forward
 * pass sums the kept and dropped probabilities into l but accumulates only the kept ones, scaled; the
 * backward pass uses P R (R: 0 or 1 / keep) for dV and dS = P R dP - P delta.
 * A bias is added to the scaled scores, and pairs of different segments get MTF_ATTENTION_MASKED, before the
 * softmax (mtf_cpu_attention_adjust_row). The bias gradient (attention_bias_grad) runs the backward pass's
 * P and dS alone and sums dS into the bias's elements, in fp32 under either policy.
 * Under the bf16 policy (params.attention.bf16) attention_bf16.c runs instead. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "core/rng.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/bf16.h"
#include "ops/attention.h"

enum { TILE = MTF_ATTENTION_TILE };

typedef mtf_cpu_attention_problem problem;

problem mtf_cpu_attention_problem_of(const mtf_step *st, const mtf_kernel_args *a) {
  problem p;
  const mtf_op_params *pa = &st->params;
  mtf_attention_geometry_make(&st->in_shape[0], pa->attention.dim, pa->attention.depth, &p.geo);
  int64_t offsets[MTF_MAX_RANK], global_dims[MTF_MAX_RANK]; /* microbatches number rows of the whole batch */
  mtf_random_extent(st, a, offsets, global_dims);
  mtf_attention_mask_make(&p.geo, mtf_random_extent_shape(st), global_dims, offsets, st->seed,
                          mtf_run_key(pa->attention.key, a->random_offset), pa->attention.keep, &p.mask);
  p.dropout = pa->attention.keep < 1.0f;
  p.causal = pa->attention.causal;
  p.L = p.geo.length;
  p.D = p.geo.depth;
  p.in = mtf_attention_inputs_of(pa->attention.bias, pa->attention.segments, st->op != MTF_OP_ATTENTION);
  p.bias = p.in.bias >= 0 ? a->in[p.in.bias] : NULL;
  p.segments = p.in.segments >= 0 ? a->in[p.in.segments] : NULL;
  if (p.bias) p.bias_view = mtf_attention_bias_view(&p.geo, &st->in_shape[p.in.bias], pa->attention.dim, pa->attention.memory);
  if (p.segments) p.segments_view = mtf_attention_segments_view(&p.geo, &st->in_shape[p.in.segments], pa->attention.dim);
  return p;
}

void mtf_cpu_attention_adjust_row(const problem *p, int64_t b, int64_t i, int64_t j0, int64_t n, float *row) {
  if (p->bias) {
    const float *bias = p->bias + mtf_attention_base(&p->geo, &p->bias_view, b) + i * p->bias_view.pos_stride +
                        j0 * p->bias_view.depth_stride;
    int64_t stride = p->bias_view.depth_stride;
    for (int64_t j = 0; j < n; j++) row[j] += bias[j * stride];
  }
  if (p->segments) {
    const float *ids = p->segments + mtf_attention_base(&p->geo, &p->segments_view, b);
    int64_t stride = p->segments_view.pos_stride;
    float own = ids[i * stride];
    for (int64_t j = 0; j < n; j++)
      if (ids[(j0 + j) * stride] != own) row[j] = MTF_ATTENTION_MASKED;
  }
}

mtf_cpu_attention_views mtf_cpu_attention_views_of(const mtf_step *st, const problem *p) {
  const char *qd = st->params.attention.dim, *md = st->params.attention.memory, *dd = st->params.attention.depth;
  int backward = st->op != MTF_OP_ATTENTION;
  mtf_cpu_attention_views v;
  memset(&v, 0, sizeof v);
  v.q = mtf_attention_view_make(&p->geo, &st->in_shape[0], qd, dd, NULL, 0);
  v.k = mtf_attention_view_make(&p->geo, &st->in_shape[1], md, dd, NULL, 0);
  for (int s = 0; s < 2; s++)
    v.f[s] = mtf_attention_view_make(&p->geo, backward ? &st->in_shape[p->in.forward] : &st->out_shape, qd, dd,
                                     MTF_ATTENTION_STACK, s);
  for (int s = 0; s < 2 && backward; s++)
    v.d[s] = mtf_attention_view_make(&p->geo, &st->in_shape[p->in.forward_grad], qd, dd, MTF_ATTENTION_STACK, s);
  for (int s = 0; s < 3 && st->op == MTF_OP_ATTENTION_GRAD; s++)
    v.g[s] = mtf_attention_view_make(&p->geo, &st->out_shape, qd, dd, MTF_ATTENTION_GRAD_STACK, s);
  return v;
}

void mtf_cpu_attention_drop_row(const problem *p, uint64_t base, int64_t i, int64_t j0, int64_t n, float *row) {
  uint64_t at = base + (uint64_t)(i * p->L + j0);
  for (int64_t j = 0; j < n; j++)
    row[j] = mtf_uniform01(p->mask.seed, p->mask.key, at + (uint64_t)j) < (double)p->mask.keep ? row[j] * p->mask.scale : 0.0f;
}

static void pack(const problem *p, const float *x, const mtf_attention_view *v, int64_t b, float *out) {
  const float *base = x + mtf_attention_base(&p->geo, v, b);
  for (int64_t i = 0; i < p->L; i++) {
    const float *row = base + i * v->pos_stride;
    float *dst = out + i * p->D;
    if (v->depth_stride == 1) memcpy(dst, row, sizeof(float) * (size_t)p->D);
    else
      for (int64_t d = 0; d < p->D; d++) dst[d] = row[d * v->depth_stride];
  }
}

/* pack of an operand float32 or bfloat16-stored (the bias gradient's q, k, v under the bf16 policy). */
static void pack_typed(const problem *p, const void *x, mtf_dtype dtype, const mtf_attention_view *v, int64_t b,
                       float *out) {
  if (dtype != MTF_BF16) {
    pack(p, x, v, b, out);
    return;
  }
  const mtf_bf16 *base = (const mtf_bf16 *)x + mtf_attention_base(&p->geo, v, b);
  for (int64_t i = 0; i < p->L; i++)
    for (int64_t d = 0; d < p->D; d++) out[i * p->D + d] = mtf_float_from_bf16(base[i * v->pos_stride + d * v->depth_stride]);
}

static void unpack(const problem *p, const float *in, const mtf_attention_view *v, int64_t b, float *x) {
  float *base = x + mtf_attention_base(&p->geo, v, b);
  for (int64_t i = 0; i < p->L; i++) {
    float *row = base + i * v->pos_stride;
    const float *src = in + i * p->D;
    if (v->depth_stride == 1) memcpy(row, src, sizeof(float) * (size_t)p->D);
    else
      for (int64_t d = 0; d < p->D; d++) row[d * v->depth_stride] = src[d];
  }
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Columns of a score block (memory rows j0..) that query row i may see. */
static inline int64_t visible(const problem *p, int64_t i, int64_t j0, int64_t nk) {
  return p->causal ? min64(nk, i - j0 + 1) : nk;
}

static void forward_problem(const problem *p, int64_t b, const float *Q, const float *K, const float *V, float scale,
                            float *acc, float *S, float *out, const mtf_attention_view *vo, float *lse_out,
                            const mtf_attention_view *vl) {
  int64_t L = p->L, D = p->D;
  uint64_t mask_base = p->dropout ? mtf_attention_mask_base(&p->geo, &p->mask, b) : 0;
  for (int64_t i0 = 0; i0 < L; i0 += TILE) {
    int64_t nq = min64(TILE, L - i0);
    float m[TILE];
    double l[TILE];
    for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0;
    memset(acc, 0, sizeof(float) * (size_t)(nq * D));
    for (int64_t j0 = 0; j0 < (p->causal ? i0 + nq : L); j0 += TILE) {
      int64_t nk = min64(TILE, L - j0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)D, scale, Q + i0 * D, (int)D,
                  K + j0 * D, (int)D, 0.0f, S, TILE);
      for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * TILE;
        int64_t n = visible(p, i0 + r, j0, nk);
        mtf_cpu_attention_adjust_row(p, b, i0 + r, j0, n, row);
        float correction = mtf_attention_online_softmax_row(row, n, nk, &m[r], &l[r]);
        if (p->dropout) mtf_cpu_attention_drop_row(p, mask_base, i0 + r, j0, n, row);
        if (correction != 1.0f)
          for (int64_t d = 0; d < D; d++) acc[r * D + d] *= correction;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)D, (int)nk, 1.0f, S, TILE, V + j0 * D,
                  (int)D, 1.0f, acc, (int)D);
    }
    for (int64_t r = 0; r < nq; r++) {
      float inv = (float)(1.0 / l[r]), lse = (float)(m[r] + log(l[r]));
      float *o = out + (i0 + r) * vo->pos_stride, *ls = lse_out + (i0 + r) * vl->pos_stride;
      for (int64_t d = 0; d < D; d++) {
        o[d * vo->depth_stride] = acc[r * D + d] * inv;
        ls[d * vl->depth_stride] = lse;
      }
    }
  }
}

static int k_attention(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->params.attention.bf16) return mtf_cpu_attention_bf16(be, st, a);
  problem p = mtf_cpu_attention_problem_of(st, a);
  mtf_cpu_attention_views v = mtf_cpu_attention_views_of(st, &p);
  const mtf_attention_view vq = v.q, vk = v.k, vo = v.f[0], vl = v.f[1];
  float *Q = a->scratch, *K = Q + p.L * p.D, *V = K + p.L * p.D, *acc = V + p.L * p.D, *S = acc + TILE * p.D;
  for (int64_t b = 0; b < p.geo.count; b++) {
    pack(&p, a->in[0], &vq, b, Q);
    pack(&p, a->in[1], &vk, b, K);
    pack(&p, a->in[2], &vk, b, V);
    float *out = a->out;
    forward_problem(&p, b, Q, K, V, st->params.attention.scale, acc, S, out + mtf_attention_base(&p.geo, &vo, b), &vo,
                    out + mtf_attention_base(&p.geo, &vl, b), &vl);
  }
  return MTF_OK;
}

typedef struct grad_buffers {
  float *Q, *K, *V, *dO, *dQ, *dK, *dV, *lse, *delta, *P, *dP, *PR;
} grad_buffers;

/* dQ, dK, dV of problem b; with dbias (the bias gradient's output), dS summed into it instead. */
static void backward_problem(const problem *p, int64_t b, const grad_buffers *w, float scale, float *dbias) {
  int64_t L = p->L, D = p->D;
  uint64_t mask_base = p->dropout ? mtf_attention_mask_base(&p->geo, &p->mask, b) : 0;
  /* Without dropout P R is P. */
  const float *PR = p->dropout ? w->PR : w->P;
  memset(w->dQ, 0, sizeof(float) * (size_t)(3 * L * D)); /* dQ, dK, dV are adjacent */
  for (int64_t j0 = 0; j0 < L; j0 += TILE) {
    int64_t nk = min64(TILE, L - j0);
    for (int64_t i0 = p->causal ? j0 : 0; i0 < L; i0 += TILE) { /* causal: query blocks at or below the diagonal */
      int64_t nq = min64(TILE, L - i0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)D, scale, w->Q + i0 * D, (int)D,
                  w->K + j0 * D, (int)D, 0.0f, w->P, TILE);
      for (int64_t r = 0; r < nq; r++) {
        float *row = w->P + r * TILE, lse = w->lse[i0 + r];
        int64_t n = visible(p, i0 + r, j0, nk);
        mtf_cpu_attention_adjust_row(p, b, i0 + r, j0, n, row);
        for (int64_t j = 0; j < n; j++) row[j] = expf(row[j] - lse);
        for (int64_t j = n; j < nk; j++) row[j] = 0.0f;
        if (p->dropout) {
          memcpy(w->PR + r * TILE, row, sizeof(float) * (size_t)nk);
          mtf_cpu_attention_drop_row(p, mask_base, i0 + r, j0, n, w->PR + r * TILE);
        }
      }
      if (!dbias)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)D, (int)nq, 1.0f, PR, TILE, w->dO + i0 * D,
                    (int)D, 1.0f, w->dV + j0 * D, (int)D);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)D, 1.0f, w->dO + i0 * D, (int)D,
                  w->V + j0 * D, (int)D, 0.0f, w->dP, TILE);
      for (int64_t r = 0; r < nq; r++) {
        const float *prow = w->P + r * TILE, *prrow = PR + r * TILE;
        float *drow = w->dP + r * TILE, delta = w->delta[i0 + r];
        for (int64_t j = 0; j < nk; j++) drow[j] = prrow[j] * drow[j] - prow[j] * delta;
      }
      if (dbias) {
        for (int64_t r = 0; r < nq; r++) {
          float *out = dbias + mtf_attention_base(&p->geo, &p->bias_view, b) + (i0 + r) * p->bias_view.pos_stride +
                       j0 * p->bias_view.depth_stride;
          for (int64_t j = 0; j < visible(p, i0 + r, j0, nk); j++) out[j * p->bias_view.depth_stride] += w->dP[r * TILE + j];
        }
        continue;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)D, (int)nk, scale, w->dP, TILE,
                  w->K + j0 * D, (int)D, 1.0f, w->dQ + i0 * D, (int)D);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)D, (int)nq, scale, w->dP, TILE,
                  w->Q + i0 * D, (int)D, 1.0f, w->dK + j0 * D, (int)D);
    }
  }
}

/* Inputs q, k, v (bias, segments), F = [o | lse], dF = [dO | dlse]; output [dq | dk | dv], or the bias's
 * gradient. */
static int k_attention_grad(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  int bias_grad = st->op == MTF_OP_ATTENTION_BIAS_GRAD;
  if (st->params.attention.bf16 && !bias_grad) return mtf_cpu_attention_grad_bf16(be, st, a);
  problem p = mtf_cpu_attention_problem_of(st, a);
  mtf_cpu_attention_views v = mtf_cpu_attention_views_of(st, &p);
  const mtf_attention_view vq = v.q, vk = v.k, *vf = v.f, *vd = v.d, *vg = v.g;
  int64_t LD = p.L * p.D;
  float *base = a->scratch;
  grad_buffers w = {base, base + LD, base + 2 * LD, base + 3 * LD, base + 4 * LD, base + 5 * LD, base + 6 * LD,
                    base + 7 * LD, base + 7 * LD + p.L, base + 7 * LD + 2 * p.L, base + 7 * LD + 2 * p.L + TILE * TILE,
                    base + 7 * LD + 2 * p.L + 2 * TILE * TILE};
  const float *F = a->in[p.in.forward], *dF = a->in[p.in.forward_grad];
  if (bias_grad) memset(a->out, 0, sizeof(float) * (size_t)mtf_shape_num_elements(&st->out_shape));
  for (int64_t b = 0; b < p.geo.count; b++) {
    pack_typed(&p, a->in[0], st->in_dtype[0], &vq, b, w.Q);
    pack_typed(&p, a->in[1], st->in_dtype[1], &vk, b, w.K);
    pack_typed(&p, a->in[2], st->in_dtype[2], &vk, b, w.V);
    pack(&p, dF, &vd[0], b, w.dO);
    const float *o = F + mtf_attention_base(&p.geo, &vf[0], b), *lse = F + mtf_attention_base(&p.geo, &vf[1], b);
    const float *dlse = dF + mtf_attention_base(&p.geo, &vd[1], b);
    for (int64_t i = 0; i < p.L; i++) {
      double dot = 0, extra = 0;
      for (int64_t d = 0; d < p.D; d++) {
        dot += (double)w.dO[i * p.D + d] * o[i * vf[0].pos_stride + d * vf[0].depth_stride];
        extra += dlse[i * vd[1].pos_stride + d * vd[1].depth_stride];
      }
      w.lse[i] = lse[i * vf[1].pos_stride];
      w.delta[i] = (float)(dot - extra);
    }
    /* Under the bf16 policy the bias gradient models the bf16 path's products: the same rounded operands
     * (delta, above, from the fp32 dO as there). */
    for (int64_t e = 0; bias_grad && st->params.attention.bf16 && e < 4 * p.L * p.D; e++) w.Q[e] = mtf_bf16_round(w.Q[e]);
    backward_problem(&p, b, &w, st->params.attention.scale, bias_grad ? a->out : NULL);
    if (bias_grad) continue;
    unpack(&p, w.dQ, &vg[0], b, a->out);
    unpack(&p, w.dK, &vg[1], b, a->out);
    unpack(&p, w.dV, &vg[2], b, a->out);
  }
  return MTF_OK;
}


/* out = x at index along the dim: [outer, size, inner] -> [outer, inner]. */
static int k_take(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  (void)be;
  const mtf_shape *x = &st->in_shape[0];
  int d = mtf_shape_index_of(x, st->params.take.dim);
  int64_t outer = 1, inner = 1, size = x->dims[d].size;
  for (int i = 0; i < x->rank; i++) {
    if (i < d) outer *= x->dims[i].size;
    if (i > d) inner *= x->dims[i].size;
  }
  const float *in = a->in[0];
  if (st->out_dtype == MTF_BF16) { /* a bf16-stored value (lower/storage.c) */
    mtf_bf16 *out = a->out;
    for (int64_t o = 0; o < outer; o++)
      mtf_cpu_round(in + (o * size + st->params.take.index) * inner, out + o * inner, inner);
    return MTF_OK;
  }
  float *out = a->out;
  for (int64_t o = 0; o < outer; o++)
    memcpy(out + o * inner, in + (o * size + st->params.take.index) * inner, sizeof(float) * (size_t)inner);
  return MTF_OK;
}

void mtf_cpu_register_attention(mtf_kernel_fn *kernels) {
  kernels[MTF_OP_ATTENTION] = k_attention;
  kernels[MTF_OP_ATTENTION_GRAD] = k_attention_grad;
  kernels[MTF_OP_ATTENTION_BIAS_GRAD] = k_attention_grad;
  kernels[MTF_OP_TAKE] = k_take;
}
