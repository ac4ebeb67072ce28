/* The bfloat16 path of the CPU's fused causal attention: steps built under the bf16 matmul policy
 * (params.attention.bf16) on a CPU where oneDNN runs bfloat16 products (AMX, AVX512-BF16). q, k, v and dO are
 * packed as bfloat16; every product has fp32 accumulation and an fp32 result; the softmax, its statistics,
 * the dropout mask and dS = P R dP - P delta are fp32 (fastmath.h's exp), and only the operands of the next
 * product (the weights P, dS) are rounded to bfloat16.
 *
 * Work goes in blocks of R = mtf_attention_block_rows(length) query rows against all memory rows 0 .. end
 * of the block (the ones they may see): one product gives the block's whole rows of scores, so the softmax
 * needs no running rescale, and a product call covers R x length instead of the fp32 path's 64 x 64 tiles
 * (oneDNN's per-call cost is microseconds). Forward: S = Q_i K^T, P = softmax (causal), O_i = P V. Backward
 * per block: S again, P = exp(scale S - lse), dV += (P R)^T dO_i, dP = dO_i V^T, dS = scale (P R dP - P
 * delta), dQ_i = dS K, dK += dS^T Q_i. The scores of a block's rows above the diagonal are computed and then
 * zeroed, at most R / length of the work. */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/bf16.h"
#include "exec/cpu/fastmath.h"
#include "exec/cpu/rowops.h"

typedef mtf_cpu_attention_problem problem;

static int64_t words(int64_t n) { return (n + 1) / 2; }

/* x (float32, or bfloat16 where the plan stores it so: lower/storage.c) -> out [L, D] bfloat16 */
static void pack_bf16(const problem *p, const void *x, mtf_dtype dtype, const mtf_attention_view *v, int64_t b,
                      mtf_bf16 *out) {
  int64_t at = mtf_attention_base(&p->geo, v, b);
  for (int64_t i = 0; i < p->L; i++) {
    mtf_bf16 *dst = out + i * p->D;
    if (dtype == MTF_BF16) {
      const mtf_bf16 *row = (const mtf_bf16 *)x + at + i * v->pos_stride;
      if (v->depth_stride == 1) memcpy(dst, row, sizeof(mtf_bf16) * (size_t)p->D);
      else
        for (int64_t d = 0; d < p->D; d++) dst[d] = row[d * v->depth_stride];
    } else {
      const float *row = (const float *)x + at + i * v->pos_stride;
      for (int64_t d = 0; d < p->D; d++) dst[d] = mtf_bf16_from_float(row[d * v->depth_stride]);
    }
  }
}

/* Rows [i0, i0 + n) of x's problem b from in [n, D]. */
static void store_rows(const problem *p, const float *in, const mtf_attention_view *v, int64_t b, int64_t i0,
                       int64_t n, float *x) {
  float *base = x + mtf_attention_base(&p->geo, v, b);
  for (int64_t i = 0; i < n; i++) {
    float *row = base + (i0 + i) * v->pos_stride;
    const float *src = in + i * p->D;
    for (int64_t d = 0; d < p->D; d++) row[d * v->depth_stride] = src[d];
  }
}

static void round_row(const float *in, int64_t n, mtf_bf16 *out) {
  for (int64_t j = 0; j < n; j++) out[j] = mtf_bf16_from_float(in[j]);
}

static void add_into(float *acc, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

/* sum_d x[d] y[d] (y NULL: sum_d x[d]). */
static float row_dot(const float *x, int64_t x_stride, const float *y, int64_t y_stride, int64_t n) {
  if (y && x_stride == 1 && y_stride == 1) return (float)mtf_row_dot(x, y, n);
  double s = 0.0;
  for (int64_t d = 0; d < n; d++) s += y ? (double)x[d * x_stride] * y[d * y_stride] : x[d * x_stride];
  return (float)s;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Row r of a block: scores (width n_mem, the first `visible` seen) -> softmax weights in fp32, the row's
 * logsumexp returned; dropout applied after the sum, as the fp32 path does. */
static float softmax_row(const problem *p, uint64_t mask_base, int64_t i, float scale, float *row, int64_t visible,
                         int64_t n_mem) {
  for (int64_t j = 0; j < visible; j++) row[j] *= scale;
  float max = mtf_row_max(row, visible);
  for (int64_t j = 0; j < visible; j++) row[j] = mtf_expf(row[j] - max);
  float sum = (float)mtf_row_sum(row, visible);
  for (int64_t j = visible; j < n_mem; j++) row[j] = 0.0f;
  if (p->dropout) mtf_cpu_attention_drop_row(p, mask_base, i, 0, visible, row);
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < visible; j++) row[j] *= inv;
  return max + logf(sum);
}

int mtf_cpu_attention_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  problem p = mtf_cpu_attention_problem_of(st, a);
  mtf_cpu_attention_views v = mtf_cpu_attention_views_of(st, &p);
  const mtf_attention_view vq = v.q, vk = v.k, vo = v.f[0], vl = v.f[1];
  int64_t L = p.L, D = p.D, R = mtf_attention_block_rows(L);
  float *w = a->scratch, *out = a->out, scale = st->params.attention.scale;
  mtf_bf16 *Q = (mtf_bf16 *)w, *K = (mtf_bf16 *)(w + words(L * D)), *V = (mtf_bf16 *)(w + 2 * words(L * D));
  float *S = w + 3 * words(L * D);
  mtf_bf16 *P = (mtf_bf16 *)(S + R * L);
  float *O = S + R * L + words(R * L);
  for (int64_t b = 0; b < p.geo.count; b++) {
    pack_bf16(&p, a->in[0], st->in_dtype[0], &vq, b, Q);
    pack_bf16(&p, a->in[1], st->in_dtype[1], &vk, b, K);
    pack_bf16(&p, a->in[2], st->in_dtype[2], &vk, b, V);
    uint64_t mask_base = p.dropout ? mtf_attention_mask_base(&p.geo, &p.mask, b) : 0;
    float *lse_out = out + mtf_attention_base(&p.geo, &vl, b);
    for (int64_t i0 = 0; i0 < L; i0 += R) {
      int64_t nq = min64(R, L - i0), n_mem = i0 + nq;
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, nq, n_mem, D, 0, 1, Q + i0 * D, K, S));
      for (int64_t r = 0; r < nq; r++) {
        int64_t i = i0 + r;
        float *row = S + r * n_mem, lse = softmax_row(&p, mask_base, i, scale, row, i + 1, n_mem);
        round_row(row, n_mem, P + r * n_mem);
        float *ls = lse_out + i * vl.pos_stride;
        for (int64_t d = 0; d < D; d++) ls[d * vl.depth_stride] = lse;
      }
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, nq, D, n_mem, 0, 0, P, V, O));
      store_rows(&p, O, &vo, b, i0, nq, out);
    }
  }
  return MTF_OK;
}

/* Inputs q, k, v, F = [o | lse], dF = [dO | dlse]; output [dq | dk | dv]. */
int mtf_cpu_attention_grad_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  problem p = mtf_cpu_attention_problem_of(st, a);
  mtf_cpu_attention_views v = mtf_cpu_attention_views_of(st, &p);
  const mtf_attention_view vq = v.q, vk = v.k, *vf = v.f, *vd = v.d, *vg = v.g;
  int64_t L = p.L, D = p.D, R = mtf_attention_block_rows(L), LD = L * D;
  float *w = a->scratch, scale = st->params.attention.scale;
  mtf_bf16 *Q = (mtf_bf16 *)w, *K = (mtf_bf16 *)(w + words(LD)), *V = (mtf_bf16 *)(w + 2 * words(LD)),
           *dO = (mtf_bf16 *)(w + 3 * words(LD));
  float *dQ = w + 4 * words(LD), *dK = dQ + LD, *dV = dK + LD, *T = dV + LD, *lse = T + LD, *delta = lse + L;
  float *Pf = delta + L, *PRf = Pf + R * L, *dP = PRf + R * L;
  mtf_bf16 *PRb = (mtf_bf16 *)(dP + R * L), *dS = (mtf_bf16 *)(dP + R * L + words(R * L));
  const float *F = a->in[3], *dF = a->in[4];
  for (int64_t b = 0; b < p.geo.count; b++) {
    pack_bf16(&p, a->in[0], st->in_dtype[0], &vq, b, Q);
    pack_bf16(&p, a->in[1], st->in_dtype[1], &vk, b, K);
    pack_bf16(&p, a->in[2], st->in_dtype[2], &vk, b, V);
    pack_bf16(&p, dF, MTF_F32, &vd[0], b, dO);
    const float *o = F + mtf_attention_base(&p.geo, &vf[0], b), *ls = F + mtf_attention_base(&p.geo, &vf[1], b);
    const float *dOf = dF + mtf_attention_base(&p.geo, &vd[0], b), *dlse = dF + mtf_attention_base(&p.geo, &vd[1], b);
    for (int64_t i = 0; i < L; i++) /* delta = rowsum(dO o) - rowsum(dlse), from the fp32 values */
      delta[i] = row_dot(dOf + i * vd[0].pos_stride, vd[0].depth_stride, o + i * vf[0].pos_stride,
                         vf[0].depth_stride, D) -
                 row_dot(dlse + i * vd[1].pos_stride, vd[1].depth_stride, NULL, 0, D);
    for (int64_t i = 0; i < L; i++) lse[i] = ls[i * vf[1].pos_stride];
    memset(dK, 0, sizeof(float) * (size_t)(2 * LD)); /* dK, dV; each block writes its own rows of dQ */
    uint64_t mask_base = p.dropout ? mtf_attention_mask_base(&p.geo, &p.mask, b) : 0;
    for (int64_t i0 = 0; i0 < L; i0 += R) {
      int64_t nq = min64(R, L - i0), n_mem = i0 + nq;
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, nq, n_mem, D, 0, 1, Q + i0 * D, K, Pf));
      for (int64_t r = 0; r < nq; r++) {
        int64_t i = i0 + r, visible = i + 1;
        float *row = Pf + r * n_mem, *kept = p.dropout ? PRf + r * n_mem : row, l = lse[i];
        for (int64_t j = 0; j < visible; j++) row[j] = mtf_expf(row[j] * scale - l);
        for (int64_t j = visible; j < n_mem; j++) row[j] = 0.0f;
        if (p.dropout) {
          memcpy(kept, row, sizeof(float) * (size_t)n_mem);
          mtf_cpu_attention_drop_row(&p, mask_base, i, 0, visible, kept);
        }
        round_row(kept, n_mem, PRb + r * n_mem);
      }
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, n_mem, D, nq, 1, 0, PRb, dO + i0 * D, T));
      add_into(dV, T, n_mem * D);
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, nq, n_mem, D, 0, 1, dO + i0 * D, V, dP));
      for (int64_t r = 0; r < nq; r++) {
        const float *row = Pf + r * n_mem, *kept = p.dropout ? PRf + r * n_mem : row, *dp = dP + r * n_mem;
        float dl = delta[i0 + r];
        mtf_bf16 *ds = dS + r * n_mem;
        for (int64_t j = 0; j < n_mem; j++) ds[j] = mtf_bf16_from_float(scale * (kept[j] * dp[j] - row[j] * dl));
      }
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, nq, D, n_mem, 0, 0, dS, K, dQ + i0 * D));
      MTF_CHECK(mtf_cpu_bf16_product(be->threads, n_mem, D, nq, 1, 0, dS, Q + i0 * D, T));
      add_into(dK, T, n_mem * D);
    }
    store_rows(&p, dQ, &vg[0], b, 0, L, a->out);
    store_rows(&p, dK, &vg[1], b, 0, L, a->out);
    store_rows(&p, dV, &vg[2], b, 0, L, a->out);
  }
  return MTF_OK;
}
