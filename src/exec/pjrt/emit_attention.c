/* StableHLO for fused attention and its gradients (exec/cpu/attention.c, ops/attention.c): the unfused
 * formula over [batch, query, memory] scores, which XLA fuses (no tiling here). The causal mask
 * (params.attention.causal) is j <= i. k and v are broadcast along q's dims they lack (grouped key/value
 * heads), so dk and dv come out per query problem, as the op's output holds them (the graph sums them).
 * Dropout of the weights is ops/attention.h's mask from global indices, weight (i, j) of problem b kept when
 * mtf_uniform01(seed, key, base(b) + i L + j) < keep, hashed with the CPU's counter-based RNG in u64 ops
 * (emit_ops.c's e_uniform01), so the masks are the CPU's. The optional bias and segment ids
 * (mtf_attention_inputs_of: after q, k, v) adjust the scaled scores before the causal mask, as the
 * reference's ref_adjust: + bias (broadcast over the batch dims it lacks), then MTF_ATTENTION_MASKED, not
 * -inf, where the query's and the memory's ids differ, so every row keeps a finite max (its diagonal) and
 * those pairs get the weight exp(-1e9 - lse) = 0 as the general path's masked_fill gives them. The gradient
 * recomputes the forward pass from q, k, v as the reference does: dS = P (R dO.v - dO.o + dlse), dq =
 * scale dS k, dk = scale dS^T q, dv = (P R)^T dO; the bias gradient is that raw dS, summed over the batch
 * dims the bias lacks (each rank over its own problems: the lowering marks the sum pending over the axes
 * splitting them). Outputs are stacked along _attn (o, logsumexp along depth) and _attn_grad (dq, dk, dv by
 * position). Under the bf16 policy (params.attention.bf16) the products' operands are rounded to bfloat16
 * where the reference (ops/attention.c) and the cpu and cuda kernels round them: q, k, v, the weights P R,
 * dO, and scale dS (which the products below then take unscaled); sums and softmax stay f32/f64, and the
 * bias gradient's dS is not rounded (it is no product's operand there). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/backend.h"
#include "exec/pjrt/emit_internal.h"
#include "ops/attention.h"

typedef struct att {
  mtf_shape batch;   /* q's dims other than query and depth, in q's order */
  int nb;            /* batch.rank */
  int64_t L, D;
  mtf_shape qn, kn;  /* [batch, query, depth] and [batch, memory, depth] */
  mtf_shape sn;      /* the scores' [batch, query, memory] */
  const char *qd, *md, *dd;
  mtf_attention_inputs in;
} att;

static void att_make(const mtf_step *st, att *a) {
  const mtf_op_params *p = &st->params;
  a->qd = p->attention.dim, a->md = p->attention.memory, a->dd = p->attention.depth;
  const mtf_shape *q = &st->in_shape[0];
  memset(&a->batch, 0, sizeof a->batch);
  for (int d = 0; d < q->rank; d++) {
    const mtf_dim *dim = &q->dims[d];
    if (strcmp(dim->name, a->qd) == 0) a->L = dim->size;
    else if (strcmp(dim->name, a->dd) == 0) a->D = dim->size;
    else a->batch.dims[a->batch.rank++] = *dim;
  }
  a->nb = a->batch.rank;
  a->qn = a->batch;
  mtf_shape_append(&a->qn, a->qd, a->L, NULL);
  mtf_shape_append(&a->qn, a->dd, a->D, NULL);
  a->kn = a->batch;
  mtf_shape_append(&a->kn, a->md, a->L, NULL);
  mtf_shape_append(&a->kn, a->dd, a->D, NULL);
  a->sn = a->batch;
  mtf_shape_append(&a->sn, a->qd, a->L, NULL);
  mtf_shape_append(&a->sn, a->md, a->L, NULL);
  a->in = mtf_attention_inputs_of(p->attention.bias, p->attention.segments, st->op != MTF_OP_ATTENTION);
}

/* dot_general of [batch, x, y] operands over the batch dims, contracting lhs dim nb + cl with rhs dim
 * nb + cr (0: the first dim after the batch, 1: the second). */
static int bdot(h_emitter *E, const att *a, int x, int y, int cl, int cr) {
  int bl[MTF_MAX_RANK], br[MTF_MAX_RANK];
  for (int i = 0; i < a->nb; i++) bl[i] = br[i] = i;
  int lc[1] = {a->nb + cl}, rc[1] = {a->nb + cr};
  return h_dot_general(E, x, y, a->nb, bl, br, 1, lc, rc);
}

/* x as a bf16 product sees it: rounded to bfloat16 (XLA's conversion: nearest even, core/bf16.h's bits) where
 * `bf16`, else as it is. */
static int operand(h_emitter *E, int x, int bf16) { return bf16 ? h_convert(E, h_convert(E, x, H_BF16), H_F32) : x; }

/* The dropout factors R [batch, L, L]: 1 / keep where kept, else 0 (mtf_attention_mask_base's numbering,
 * with mtf_random_extent's microbatch rows). */
static int dropout_factors(h_emitter *E, const mtf_step *st, const att *a) {
  h_shape s = {a->nb + 2, {0}};
  for (int i = 0; i < a->nb; i++) s.d[i] = a->batch.dims[i].size;
  s.d[a->nb] = s.d[a->nb + 1] = a->L;
  /* the bias gradient's output lacks the bias's missing batch dims: its step's offsets are q's */
  const mtf_shape *os = mtf_random_extent_shape(st);
  /* batch index b as in mtf_attention_mask_base: sum over batch dims of (b_d + offset_d) * stride_d */
  int index = h_splat_u64(E, 0, s);
  uint64_t stride = 1;
  for (int d = a->nb - 1; d >= 0; d--) {
    int64_t global_dim;
    int off = e_random_extent(E, st, mtf_shape_index_of(os, a->batch.dims[d].name), &global_dim);
    int pos = h_binop(E, "add", h_iota(E, s, d, H_U64), h_broadcast_scalar(E, h_convert(E, off, H_U64), s));
    index = h_binop(E, "add", index, h_binop(E, "multiply", pos, h_splat_u64(E, stride, s)));
    stride *= (uint64_t)global_dim;
  }
  int LL = h_splat_u64(E, (uint64_t)a->L, s);
  index = h_binop(E, "add", h_binop(E, "multiply", h_binop(E, "add", h_binop(E, "multiply", index, LL), h_iota(E, s, a->nb, H_U64)), LL),
                  h_iota(E, s, a->nb + 1, H_U64));
  int u = e_uniform01(E, st->seed, st->params.attention.key, index);
  float keep = st->params.attention.keep;
  int kept = h_compare(E, "LT", u, h_splat(E, (double)keep, H_F64, s));
  return h_select(E, kept, h_splat(E, 1.0f / keep, H_F32, s), h_splat(E, 0.0, H_F32, s));
}

/* ref_adjust on the scaled scores S [batch, L, L], in its order: the segment mask overrides the bias. */
static int adjust(h_emitter *E, const mtf_step *st, const att *a, int S) {
  if (a->in.bias >= 0)
    S = h_binop(E, "add", S, n_to(E, e_input(E, st, a->in.bias), &st->in_shape[a->in.bias], &a->sn));
  if (a->in.segments >= 0) {
    const mtf_shape *query = &st->in_shape[a->in.segments];
    mtf_shape memory = *query; /* the same ids along the memory dim: self-attention */
    snprintf(memory.dims[mtf_shape_index_of(query, a->qd)].name, MTF_NAME_MAX, "%s", a->md);
    int ids = e_input(E, st, a->in.segments);
    int differ = h_compare(E, "NE", n_to(E, ids, query, &a->sn), n_to(E, ids, &memory, &a->sn));
    S = h_select(E, differ, h_splat(E, MTF_ATTENTION_MASKED, H_F32, h_t(E, S)->s), S);
  }
  return S;
}

/* P [batch, L, L] (causal: zero above the diagonal) and lse [batch, L] of q, k. */
static void probabilities(h_emitter *E, const mtf_step *st, const att *a, int Q, int K, int *P, int *lse) {
  int S = bdot(E, a, Q, K, 1, 1);
  h_shape s = h_t(E, S)->s;
  S = adjust(E, st, a, h_binop(E, "multiply", S, h_splat(E, st->params.attention.scale, H_F32, s)));
  if (st->params.attention.causal) {
    int visible = h_compare(E, "LE", h_iota(E, s, a->nb + 1, H_S64), h_iota(E, s, a->nb, H_S64));
    S = h_select(E, visible, S, h_splat(E, -INFINITY, H_F32, s));
  }
  int max = h_reduce(E, S, 1u << (a->nb + 1), "maximum", -INFINITY);
  int dims[MTF_MAX_RANK];
  for (int i = 0; i <= a->nb; i++) dims[i] = i;
  int S64 = h_convert(E, S, H_F64), max64 = h_convert(E, max, H_F64);
  int sum = h_reduce(E, h_unop(E, "exponential", h_binop(E, "subtract", S64, h_broadcast_in_dim(E, max64, s, dims))),
                     1u << (a->nb + 1), "add", 0.0);
  int l = h_binop(E, "add", max64, h_unop(E, "log", sum));
  *lse = h_convert(E, l, H_F32);
  *P = h_convert(E, h_unop(E, "exponential", h_binop(E, "subtract", S64, h_broadcast_in_dim(E, l, s, dims))), H_F32);
}

/* Stacked parts [batch, L, D] each -> [stack: n, batch, L, D] named, to the step's output. */
static void out_stacked(h_emitter *E, const mtf_step *st, const att *a, const char *stack, const int *parts, int n) {
  mtf_shape named = {0};
  mtf_shape_append(&named, stack, n, NULL);
  for (int i = 0; i < a->qn.rank; i++) named.dims[named.rank++] = a->qn.dims[i];
  h_shape one = h_shape_of(&named);
  one.d[0] = 1;
  int r[3];
  for (int i = 0; i < n; i++) r[i] = h_reshape(E, parts[i], one);
  e_output(E, st, n_to(E, h_concatenate(E, r, n, 0), &named, &st->out_shape));
}

/* grad: 0 the forward op, 1 attention_grad, 2 attention_bias_grad. */
static int attention(h_emitter *E, const mtf_step *st, int grad) {
  att a;
  att_make(st, &a);
  const int bf16 = st->params.attention.bf16;
  int Q = operand(E, n_to(E, e_input(E, st, 0), &st->in_shape[0], &a.qn), bf16);
  int K = operand(E, n_to(E, e_input(E, st, 1), &st->in_shape[1], &a.kn), bf16);
  int V = operand(E, n_to(E, e_input(E, st, 2), &st->in_shape[2], &a.kn), bf16);
  int P, lse;
  probabilities(E, st, &a, Q, K, &P, &lse);
  int dropout = st->params.attention.keep < 1.0f;
  int R = dropout ? dropout_factors(E, st, &a) : -1;
  int PR = operand(E, dropout ? h_binop(E, "multiply", P, R) : P, bf16);
  int O = bdot(E, &a, PR, V, 1, 0); /* [batch, L, D] */
  h_shape qs = h_t(E, O)->s;
  int dims[MTF_MAX_RANK];
  for (int i = 0; i <= a.nb; i++) dims[i] = i;
  if (!grad) {
    int parts[2] = {O, h_broadcast_in_dim(E, lse, qs, dims)};
    out_stacked(E, st, &a, MTF_ATTENTION_STACK, parts, 2);
    return MTF_OK;
  }
  /* dF [_attn:2, ...]: dO and dlse (summed along depth) */
  mtf_shape fn = {0};
  mtf_shape_append(&fn, MTF_ATTENTION_STACK, 2, NULL);
  for (int i = 0; i < a.qn.rank; i++) fn.dims[fn.rank++] = a.qn.dims[i];
  int dF = n_to(E, e_input(E, st, a.in.forward_grad), &st->in_shape[a.in.forward_grad], &fn);
  h_shape fs = h_t(E, dF)->s;
  int64_t s0[MTF_MAX_RANK] = {0}, l0[MTF_MAX_RANK], s1[MTF_MAX_RANK] = {1}, l1[MTF_MAX_RANK];
  for (int i = 0; i < fs.rank; i++) l0[i] = l1[i] = fs.d[i];
  l0[0] = 1;
  int dO = h_reshape(E, h_slice(E, dF, s0, l0), qs);
  int dlse = h_reduce(E, h_reshape(E, h_slice(E, dF, s1, l1), qs), 1u << (a.nb + 1), "add", 0.0);
  int delta = h_reduce(E, h_binop(E, "multiply", dO, O), 1u << (a.nb + 1), "add", 0.0);
  h_shape ss = h_t(E, P)->s;
  int dOr = operand(E, dO, bf16);
  int dp = bdot(E, &a, dOr, V, 1, 1); /* [batch, L, L] */
  if (dropout) dp = h_binop(E, "multiply", dp, R);
  int shift = h_broadcast_in_dim(E, h_binop(E, "subtract", dlse, delta), ss, dims);
  int dS = h_binop(E, "multiply", P, h_binop(E, "add", dp, shift));
  if (grad == 2) {
    e_output(E, st, n_reduce(E, dS, &a.sn, &st->out_shape, "add", 0.0));
    return MTF_OK;
  }
  int dq, dk;
  if (bf16) { /* scale dS rounded once, as the kernels' operand */
    dS = operand(E, h_binop(E, "multiply", h_splat(E, st->params.attention.scale, H_F32, ss), dS), 1);
    dq = bdot(E, &a, dS, K, 1, 0);
    dk = bdot(E, &a, dS, Q, 0, 0);
  } else {
    int scale = h_splat(E, st->params.attention.scale, H_F32, qs);
    dq = h_binop(E, "multiply", scale, bdot(E, &a, dS, K, 1, 0));
    dk = h_binop(E, "multiply", scale, bdot(E, &a, dS, Q, 0, 0));
  }
  int dv = bdot(E, &a, PR, dOr, 0, 0);
  int parts[3] = {dq, dk, dv};
  out_stacked(E, st, &a, MTF_ATTENTION_GRAD_STACK, parts, 3);
  return MTF_OK;
}

static int attention_forward(h_emitter *E, const mtf_step *st) { return attention(E, st, 0); }
static int attention_grad(h_emitter *E, const mtf_step *st) { return attention(E, st, 1); }
static int attention_bias_grad(h_emitter *E, const mtf_step *st) { return attention(E, st, 2); }

void e_ops_attention(e_op_fn *table) {
  table[MTF_OP_ATTENTION] = attention_forward;
  table[MTF_OP_ATTENTION_GRAD] = attention_grad;
  table[MTF_OP_ATTENTION_BIAS_GRAD] = attention_bias_grad;
}
