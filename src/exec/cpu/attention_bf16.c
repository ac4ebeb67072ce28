/* The bfloat16 path of the CPU's fused causal attention: steps built under the bf16 matmul policy
 * (params.attention.bf16) on a CPU where oneDNN runs bfloat16 products (AMX, AVX512-BF16). q, k, v and dO are
 * packed as bfloat16; every product has fp32 accumulation and an fp32 result; the softmax, its statistics,
 * the dropout mask and dS = P R dP - P delta are fp32 (fastmath.h's exp), and only the operands of the next
 * product (the weights P, dS) are rounded to bfloat16.
 *
 * Work goes in blocks of R = mtf_attention_block_rows(length) query rows against all memory rows 0 .. end
 * of the block (the ones they may see): one product gives the block's whole rows of scores, so the softmax
 * needs no running rescale. Each product call covers a group of G problems (mtf_attention_bf16_group)
 * through oneDNN's batched matmul: its per-call cost is microseconds, comparable with a 128 x 256 x 64
 * product on AMX. G is small (a group's scores stay within 512 KiB, in the core's L2: larger groups,
 * streaming through memory, measured slower). Rows' elementwise work is split over the backend's threads.
 * Forward: S = Q_i K^T, P = softmax (causal), O_i = P V. Backward per block: S again, P = exp(scale S - lse), dV += (P R)^T dO_i, dP = dO_i V^T, dS = scale (P R dP - P
 * delta), dQ_i = dS K, dK += dS^T Q_i. The scores of a block's rows above the diagonal are computed and then
 * zeroed, at most R / length of the work. */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/bf16.h"
#include "exec/cpu/fastmath.h"
#include "exec/cpu/parallel.h"
#include "exec/cpu/rowops.h"

typedef mtf_cpu_attention_problem problem;

static int64_t words(int64_t n) { return (n + 1) / 2; }

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Rows i0 .. i0 + n of problem b of x (float32, or bfloat16 where the plan stores it so: lower/storage.c)
 * -> out [n, D] bfloat16 */
static void pack_bf16(const problem *p, const void *x, mtf_dtype dtype, const mtf_attention_view *v, int64_t b,
                      int64_t i0, int64_t n, mtf_bf16 *out) {
  int64_t at = mtf_attention_base(&p->geo, v, b);
  for (int64_t i = i0; i < i0 + n; i++) {
    mtf_bf16 *dst = out + (i - i0) * p->D;
    if (dtype == MTF_BF16) {
      const mtf_bf16 *row = (const mtf_bf16 *)x + at + i * v->pos_stride;
      if (v->depth_stride == 1) memcpy(dst, row, sizeof(mtf_bf16) * (size_t)p->D);
      else
        for (int64_t d = 0; d < p->D; d++) dst[d] = row[d * v->depth_stride];
    } else {
      const float *row = (const float *)x + at + i * v->pos_stride;
      if (v->depth_stride == 1) /* the usual layout: a loop that vectorises */
        for (int64_t d = 0; d < p->D; d++) dst[d] = mtf_bf16_from_float(row[d]);
      else
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
    if (v->depth_stride == 1) memcpy(row, src, sizeof(float) * (size_t)p->D);
    else
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

/* Row r of a block: scores (width n_mem, the first `visible` seen) -> softmax weights in fp32, the row's
 * logsumexp returned; dropout applied after the sum, as the fp32 path does. */
static float softmax_row(const problem *p, int64_t b, uint64_t mask_base, int64_t i, float scale, float *row,
                         int64_t visible, int64_t n_mem) {
  for (int64_t j = 0; j < visible; j++) row[j] *= scale;
  mtf_cpu_attention_adjust_row(p, b, i, 0, visible, row);
  float max = mtf_row_max(row, visible);
  for (int64_t j = 0; j < visible; j++) row[j] = mtf_expf(row[j] - max);
  float sum = (float)mtf_row_sum(row, visible);
  for (int64_t j = visible; j < n_mem; j++) row[j] = 0.0f;
  if (p->dropout) mtf_cpu_attention_drop_row(p, mask_base, i, 0, visible, row);
  float inv = 1.0f / sum;
  for (int64_t j = 0; j < visible; j++) row[j] *= inv;
  return max + logf(sum);
}

/* oneDNN runs a batched product on AMX only when each operand's problems lie back to back (a dense
 * [batch, rows, cols] array); other strides take a slower generic kernel. So the operands are laid out
 * densely for each block: k and v problem by problem ([n, L, D]) with, for a block that sees a prefix of the
 * memory rows, that prefix copied out ([n, n_mem, D]); q and dO block by block ([block][n, R, D], "block
 * major"), as is the dq the blocks write. */

/* Packs problems b0 .. b0 + n of k or v into [n, L, D] bfloat16. */
static void pack_group(const problem *p, const void *x, mtf_dtype dtype, const mtf_attention_view *v, int64_t b0,
                       int64_t n, mtf_bf16 *out) {
  for (int64_t g = 0; g < n; g++) pack_bf16(p, x, dtype, v, b0 + g, 0, p->L, out + g * p->L * p->D);
}

/* Where row r of block i0 (nq rows) of problem g lies in a block-major array of n problems. */
static int64_t block_major(const problem *p, int64_t n, int64_t i0, int64_t nq, int64_t g, int64_t r) {
  return (n * i0 + g * nq + r) * p->D;
}

/* Packs problems b0 .. b0 + n of q or dO block-major (blocks of R rows) into out. */
static void pack_group_block_major(const problem *p, const void *x, mtf_dtype dtype, const mtf_attention_view *v,
                                   int64_t b0, int64_t n, int64_t R, mtf_bf16 *out) {
  for (int64_t i0 = 0; i0 < p->L; i0 += R) {
    int64_t nq = min64(R, p->L - i0);
    for (int64_t g = 0; g < n; g++) pack_bf16(p, x, dtype, v, b0 + g, i0, nq, out + block_major(p, n, i0, nq, g, 0));
  }
}

/* Memory rows 0 .. n_mem of the [n, L, D] `full`, back to back in `prefix` ([n, n_mem, D]); `full` itself
 * when that is all of it. */
static const mtf_bf16 *memory_prefix(const problem *p, int64_t n, int64_t n_mem, const mtf_bf16 *full,
                                     mtf_bf16 *prefix) {
  if (n_mem == p->L) return full;
  for (int64_t g = 0; g < n; g++)
    memcpy(prefix + g * n_mem * p->D, full + g * p->L * p->D, sizeof(mtf_bf16) * (size_t)(n_mem * p->D));
  return prefix;
}

/* Block i0's rows of the block-major fp32 dq, stored into the output. */
static void store_block_major(const problem *p, const float *in, const mtf_attention_view *v, int64_t b0, int64_t n,
                              int64_t i0, int64_t nq, float *x) {
  for (int64_t g = 0; g < n; g++) store_rows(p, in + block_major(p, n, i0, nq, g, 0), v, b0 + g, i0, nq, x);
}

/* The forward's rows of one block for a group: scores -> weights (rounded into P), lse into the output. */
typedef struct forward_rows {
  const problem *p;
  const mtf_attention_view *vl;
  float *S, *out, scale;
  mtf_bf16 *P;
  int64_t b0, i0, nq, n_mem;
} forward_rows;

static void forward_rows_chunk(void *ctx, int64_t lo, int64_t hi) {
  const forward_rows *f = ctx;
  const problem *p = f->p;
  for (int64_t gr = lo; gr < hi; gr++) {
    int64_t g = gr / f->nq, r = gr % f->nq, b = f->b0 + g, i = f->i0 + r;
    uint64_t mask_base = p->dropout ? mtf_attention_mask_base(&p->geo, &p->mask, b) : 0;
    float *row = f->S + gr * f->n_mem, lse = softmax_row(p, b, mask_base, i, f->scale, row, mtf_attention_visible(p->causal, i, p->L), f->n_mem);
    round_row(row, f->n_mem, f->P + gr * f->n_mem);
    float *ls = f->out + mtf_attention_base(&p->geo, f->vl, b) + i * f->vl->pos_stride;
    for (int64_t d = 0; d < p->D; d++) ls[d * f->vl->depth_stride] = lse;
  }
}

int mtf_cpu_attention_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  problem p = mtf_cpu_attention_problem_of(st, a);
  mtf_cpu_attention_views v = mtf_cpu_attention_views_of(st, &p);
  const mtf_attention_view vq = v.q, vk = v.k, vo = v.f[0], vl = v.f[1];
  int64_t L = p.L, D = p.D, LD = L * D, R = mtf_attention_block_rows(L), G = mtf_attention_bf16_group(p.geo.count, L);
  int64_t GLD = words(G * LD);
  float *w = a->scratch, *out = a->out;
  mtf_bf16 *Q = (mtf_bf16 *)w, *K = (mtf_bf16 *)(w + GLD), *V = (mtf_bf16 *)(w + 2 * GLD),
           *Kpre = (mtf_bf16 *)(w + 3 * GLD), *Vpre = (mtf_bf16 *)(w + 4 * GLD);
  float *S = w + 5 * GLD;
  mtf_bf16 *P = (mtf_bf16 *)(S + G * R * L);
  float *O = S + G * R * L + words(G * R * L);
  for (int64_t b0 = 0; b0 < p.geo.count; b0 += G) {
    int64_t n = min64(G, p.geo.count - b0);
    pack_group_block_major(&p, a->in[0], st->in_dtype[0], &vq, b0, n, R, Q);
    pack_group(&p, a->in[1], st->in_dtype[1], &vk, b0, n, K);
    pack_group(&p, a->in[2], st->in_dtype[2], &vk, b0, n, V);
    for (int64_t i0 = 0; i0 < L; i0 += R) {
      int64_t nq = min64(R, L - i0), n_mem = p.causal ? i0 + nq : L, block = nq * n_mem;
      const mtf_bf16 *Qi = Q + block_major(&p, n, i0, nq, 0, 0), *Km = memory_prefix(&p, n, n_mem, K, Kpre),
                     *Vm = memory_prefix(&p, n, n_mem, V, Vpre);
      MTF_CHECK(mtf_cpu_bf16_product_batch(be->threads, n, nq, n_mem, D, 0, 1, Qi, nq * D, Km, n_mem * D, S, block));
      forward_rows rows = {&p, &vl, S, out, st->params.attention.scale, P, b0, i0, nq, n_mem};
      mtf_cpu_parallel_for(mtf_cpu_threads(be->threads, n * block), n * nq, forward_rows_chunk, &rows);
      MTF_CHECK(mtf_cpu_bf16_product_batch(be->threads, n, nq, D, n_mem, 0, 0, P, block, Vm, n_mem * D, O, nq * D));
      for (int64_t g = 0; g < n; g++) store_rows(&p, O + g * nq * D, &vo, b0 + g, i0, nq, out);
    }
  }
  return MTF_OK;
}

/* The backward's rows of one block for a group: in phase 0 the weights P = exp(scale S - lse) (kept in Pf,
 * dropped in PRf, rounded into PRb); in phase 1 dS = scale (P R dP - P delta) rounded. */
typedef struct backward_rows {
  const problem *p;
  int phase;
  float *Pf, *PRf, *dP, *lse, *delta, scale;
  mtf_bf16 *PRb, *dS;
  int64_t b0, i0, nq, n_mem, L;
} backward_rows;

static void backward_rows_chunk(void *ctx, int64_t lo, int64_t hi) {
  const backward_rows *k = ctx;
  const problem *p = k->p;
  int64_t n_mem = k->n_mem;
  for (int64_t gr = lo; gr < hi; gr++) {
    int64_t g = gr / k->nq, r = gr % k->nq, i = k->i0 + r, visible = mtf_attention_visible(p->causal, i, p->L);
    float *row = k->Pf + gr * n_mem, *kept = p->dropout ? k->PRf + gr * n_mem : row;
    if (k->phase == 0) {
      float l = k->lse[g * k->L + i], scale = k->scale;
      if (p->bias || p->segments) {
        for (int64_t j = 0; j < visible; j++) row[j] *= scale;
        mtf_cpu_attention_adjust_row(p, k->b0 + g, i, 0, visible, row);
        for (int64_t j = 0; j < visible; j++) row[j] = mtf_expf(row[j] - l);
      } else {
        for (int64_t j = 0; j < visible; j++) row[j] = mtf_expf(row[j] * scale - l);
      }
      for (int64_t j = visible; j < n_mem; j++) row[j] = 0.0f;
      if (p->dropout) {
        memcpy(kept, row, sizeof(float) * (size_t)n_mem);
        mtf_cpu_attention_drop_row(p, mtf_attention_mask_base(&p->geo, &p->mask, k->b0 + g), i, 0, visible, kept);
      }
      round_row(kept, n_mem, k->PRb + gr * n_mem);
    } else {
      const float *dp = k->dP + gr * n_mem;
      float dl = k->delta[g * k->L + i], scale = k->scale;
      mtf_bf16 *ds = k->dS + gr * n_mem;
      for (int64_t j = 0; j < n_mem; j++) ds[j] = mtf_bf16_from_float(scale * (kept[j] * dp[j] - row[j] * dl));
    }
  }
}

/* Inputs q, k, v, F = [o | lse], dF = [dO | dlse]; output [dq | dk | dv]. */
int mtf_cpu_attention_grad_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a) {
  problem p = mtf_cpu_attention_problem_of(st, a);
  mtf_cpu_attention_views v = mtf_cpu_attention_views_of(st, &p);
  const mtf_attention_view vq = v.q, vk = v.k, *vf = v.f, *vd = v.d, *vg = v.g;
  int64_t L = p.L, D = p.D, R = mtf_attention_block_rows(L), LD = L * D, G = mtf_attention_bf16_group(p.geo.count, L);
  int64_t GLD = words(G * LD);
  float *w = a->scratch;
  mtf_bf16 *Q = (mtf_bf16 *)w, *K = (mtf_bf16 *)(w + GLD), *V = (mtf_bf16 *)(w + 2 * GLD),
           *Kpre = (mtf_bf16 *)(w + 3 * GLD), *Vpre = (mtf_bf16 *)(w + 4 * GLD), *dO = (mtf_bf16 *)(w + 5 * GLD);
  float *dQ = w + 6 * GLD, *dK = dQ + G * LD, *dV = dK + G * LD, *T = dV + G * LD, *lse = T + G * LD,
        *delta = lse + G * L;
  float *Pf = delta + G * L, *PRf = Pf + G * R * L, *dP = PRf + G * R * L;
  mtf_bf16 *PRb = (mtf_bf16 *)(dP + G * R * L), *dS = (mtf_bf16 *)(dP + G * R * L + words(G * R * L));
  const float *F = a->in[p.in.forward], *dF = a->in[p.in.forward_grad];
  for (int64_t b0 = 0; b0 < p.geo.count; b0 += G) {
    int64_t n = min64(G, p.geo.count - b0);
    pack_group_block_major(&p, a->in[0], st->in_dtype[0], &vq, b0, n, R, Q);
    pack_group_block_major(&p, dF, MTF_F32, &vd[0], b0, n, R, dO);
    pack_group(&p, a->in[1], st->in_dtype[1], &vk, b0, n, K);
    pack_group(&p, a->in[2], st->in_dtype[2], &vk, b0, n, V);
    for (int64_t g = 0; g < n; g++) {
      int64_t b = b0 + g;
      const float *o = F + mtf_attention_base(&p.geo, &vf[0], b), *ls = F + mtf_attention_base(&p.geo, &vf[1], b);
      const float *dOf = dF + mtf_attention_base(&p.geo, &vd[0], b), *dlse = dF + mtf_attention_base(&p.geo, &vd[1], b);
      for (int64_t i = 0; i < L; i++) /* delta = rowsum(dO o) - rowsum(dlse), from the fp32 values */
        delta[g * L + i] = row_dot(dOf + i * vd[0].pos_stride, vd[0].depth_stride, o + i * vf[0].pos_stride,
                                   vf[0].depth_stride, D) -
                           row_dot(dlse + i * vd[1].pos_stride, vd[1].depth_stride, NULL, 0, D);
      for (int64_t i = 0; i < L; i++) lse[g * L + i] = ls[i * vf[1].pos_stride];
    }
    memset(dK, 0, sizeof(float) * (size_t)(2 * G * LD)); /* dK, dV; each block writes its own rows of dQ */
    for (int64_t i0 = 0; i0 < L; i0 += R) {
      int64_t nq = min64(R, L - i0), n_mem = p.causal ? i0 + nq : L, block = nq * n_mem;
      int64_t at = block_major(&p, n, i0, nq, 0, 0);
      const mtf_bf16 *Qi = Q + at, *dOi = dO + at, *Km = memory_prefix(&p, n, n_mem, K, Kpre),
                     *Vm = memory_prefix(&p, n, n_mem, V, Vpre);
      int nt = mtf_cpu_threads(be->threads, n * block);
      backward_rows rows = {&p, 0, Pf, PRf, dP, lse, delta, st->params.attention.scale, PRb, dS, b0, i0, nq, n_mem, L};
      MTF_CHECK(mtf_cpu_bf16_product_batch(be->threads, n, nq, n_mem, D, 0, 1, Qi, nq * D, Km, n_mem * D, Pf, block));
      mtf_cpu_parallel_for(nt, n * nq, backward_rows_chunk, &rows);
      MTF_CHECK(mtf_cpu_bf16_product_batch(be->threads, n, n_mem, D, nq, 1, 0, PRb, block, dOi, nq * D, T, n_mem * D));
      for (int64_t g = 0; g < n; g++) add_into(dV + g * LD, T + g * n_mem * D, n_mem * D);
      MTF_CHECK(mtf_cpu_bf16_product_batch(be->threads, n, nq, n_mem, D, 0, 1, dOi, nq * D, Vm, n_mem * D, dP, block));
      rows.phase = 1;
      mtf_cpu_parallel_for(nt, n * nq, backward_rows_chunk, &rows);
      MTF_CHECK(
          mtf_cpu_bf16_product_batch(be->threads, n, nq, D, n_mem, 0, 0, dS, block, Km, n_mem * D, dQ + at, nq * D));
      MTF_CHECK(mtf_cpu_bf16_product_batch(be->threads, n, n_mem, D, nq, 1, 0, dS, block, Qi, nq * D, T, n_mem * D));
      for (int64_t g = 0; g < n; g++) add_into(dK + g * LD, T + g * n_mem * D, n_mem * D);
      store_block_major(&p, dQ, &vg[0], b0, n, i0, nq, a->out);
    }
    for (int64_t g = 0; g < n; g++) {
      store_rows(&p, dK + g * LD, &vg[1], b0 + g, 0, L, a->out);
      store_rows(&p, dV + g * LD, &vg[2], b0 + g, 0, L, a->out);
    }
  }
  return MTF_OK;
}
