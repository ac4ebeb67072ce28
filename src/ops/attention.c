/* Fused attention: o = dropout(softmax_memory(q.k * scale + bias, memory position <= query position when
 * causal, same segment)) v, computed by the kernels blockwise with an online softmax (causal: tiles above
 * the diagonal skipped), never
 * materialising the [query, memory] scores; the dropout mask is mtf_dropout's over the general path's
 * weights (ops/attention.h), drawn per tile. Nodes have one output, so the ops stack theirs:
 *   attention       (q, k, v)          -> F [_attn:2, q dims]: F[0] = o, F[1] = each row's logsumexp
 *                                          (repeated along depth), which the backward pass reuses;
 *   attention_grad  (q, k, v, F, dF)   -> G [_attn_grad:3, q dims]: dq, dk, dv in one pass (the scores and
 *                                          probabilities recomputed tile by tile, dS = P (dP - D + dlse));
 *   attention_bias_grad (q, k, v, bias, ..., F, dF) -> d bias: dS summed over the problems that share a
 *                                          bias element (ops/attention.h lists the optional inputs);
 *   take            (x)                -> x's slice at an index of a dim, without that dim.
 * The builder returns take(F, 0), so o is an ordinary tensor; take's gradient puts dy back into its slice
 * of the stack, and F's gradient is one attention_grad node whose three parts are taken out for q, k, v.
 *
 * Lowering: the kernels need the positions and features whole. Dims other than those (batch, heads) may be
 * split: each rank computes its own problems, with no communication. A layout splitting the query or
 * memory positions or the features gathers those inputs whole first and slices the result back to the
 * layout: correct on every layout, but the work along that mesh axis is repeated on each rank of it, so
 * such layouts are better served by the general path (model.fused_attention: false). */
#include "ops/attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/rng.h"
#include "ops/op_def.h"

/* ---- geometry (shared with the kernels) ---- */
void mtf_attention_geometry_make(const mtf_shape *q, const char *query_dim, const char *depth_dim,
                                 mtf_attention_geometry *geo) {
  memset(geo, 0, sizeof *geo);
  geo->count = 1;
  for (int d = 0; d < q->rank; d++) {
    const mtf_dim *dim = &q->dims[d];
    if (strcmp(dim->name, query_dim) == 0) geo->length = dim->size;
    else if (strcmp(dim->name, depth_dim) == 0) geo->depth = dim->size;
    else {
      geo->batch.dims[geo->batch.rank++] = *dim;
      geo->count *= dim->size;
    }
  }
}

mtf_attention_view mtf_attention_view_make(const mtf_attention_geometry *geo, const mtf_shape *s, const char *pos_dim,
                                           const char *depth_dim, const char *stack, int index) {
  mtf_attention_view v;
  memset(&v, 0, sizeof v);
  int64_t stride = 1;
  for (int d = s->rank - 1; d >= 0; d--) {
    const char *name = s->dims[d].name;
    if (strcmp(name, pos_dim) == 0) v.pos_stride = stride;
    else if (strcmp(name, depth_dim) == 0) v.depth_stride = stride;
    else if (stack && strcmp(name, stack) == 0) v.offset = index * stride;
    else v.batch_stride[mtf_shape_index_of(&geo->batch, name)] = stride;
    stride *= s->dims[d].size;
  }
  return v;
}

int64_t mtf_attention_base(const mtf_attention_geometry *geo, const mtf_attention_view *v, int64_t b) {
  int64_t offset = v->offset;
  for (int d = geo->batch.rank - 1; d >= 0; d--) {
    offset += (b % geo->batch.dims[d].size) * v->batch_stride[d];
    b /= geo->batch.dims[d].size;
  }
  return offset;
}

mtf_attention_inputs mtf_attention_inputs_of(int has_bias, int has_segments, int backward) {
  mtf_attention_inputs in = {-1, -1, -1, -1};
  int next = 3;
  if (has_bias) in.bias = next++;
  if (has_segments) in.segments = next++;
  if (backward) {
    in.forward = next++;
    in.forward_grad = next;
  }
  return in;
}

mtf_attention_view mtf_attention_bias_view(const mtf_attention_geometry *geo, const mtf_shape *bias,
                                           const char *query_dim, const char *memory_dim) {
  return mtf_attention_view_make(geo, bias, query_dim, memory_dim, NULL, 0);
}

mtf_attention_view mtf_attention_segments_view(const mtf_attention_geometry *geo, const mtf_shape *segments,
                                               const char *query_dim) {
  return mtf_attention_view_make(geo, segments, query_dim, "", NULL, 0);
}

void mtf_attention_mask_make(const mtf_attention_geometry *geo, const mtf_shape *out_shape, const int64_t *global_dims,
                             const int64_t *offsets, uint64_t seed, uint64_t key, float keep, mtf_attention_mask *mask) {
  memset(mask, 0, sizeof *mask);
  mask->seed = seed;
  mask->key = key;
  mask->keep = keep;
  mask->scale = 1.0f / keep;
  for (int d = 0; d < geo->batch.rank; d++) {
    int j = mtf_shape_index_of(out_shape, geo->batch.dims[d].name);
    mask->global_size[d] = global_dims ? global_dims[j] : geo->batch.dims[d].size;
    mask->offset[d] = offsets ? offsets[j] : 0;
  }
}

uint64_t mtf_attention_mask_base(const mtf_attention_geometry *geo, const mtf_attention_mask *mask, int64_t b) {
  int64_t index = 0, stride = 1;
  for (int d = geo->batch.rank - 1; d >= 0; d--) {
    index += (b % geo->batch.dims[d].size + mask->offset[d]) * stride;
    b /= geo->batch.dims[d].size;
    stride *= mask->global_size[d];
  }
  return (uint64_t)(index * geo->length * geo->length);
}

int64_t mtf_attention_scratch_forward(int64_t length, int64_t depth) {
  return 3 * length * depth + MTF_ATTENTION_TILE * depth + MTF_ATTENTION_TILE * MTF_ATTENTION_TILE;
}

int64_t mtf_attention_scratch_backward(int64_t length, int64_t depth) {
  return 7 * length * depth + 2 * length + 3 * MTF_ATTENTION_TILE * MTF_ATTENTION_TILE;
}

/* Words of n bfloat16 values. */
static int64_t bf16_words(int64_t n) { return (n + 1) / 2; }

int64_t mtf_attention_block_rows(int64_t length) {
  return length < MTF_ATTENTION_BF16_ROWS ? length : MTF_ATTENTION_BF16_ROWS;
}

int64_t mtf_attention_bf16_group(int64_t count, int64_t length) {
  int64_t per_problem = mtf_attention_block_rows(length) * length;
  int64_t group = MTF_ATTENTION_BF16_GROUP_WORDS / (per_problem > 0 ? per_problem : 1);
  if (group > count) group = count;
  return group > 1 ? group : 1;
}

int64_t mtf_attention_scratch_forward_bf16(int64_t count, int64_t length, int64_t depth) {
  int64_t rows = mtf_attention_block_rows(length), g = mtf_attention_bf16_group(count, length);
  return 5 * bf16_words(g * length * depth) + g * rows * length + bf16_words(g * rows * length) + g * rows * depth;
}

int64_t mtf_attention_scratch_backward_bf16(int64_t count, int64_t length, int64_t depth) {
  int64_t rows = mtf_attention_block_rows(length), g = mtf_attention_bf16_group(count, length);
  return 6 * bf16_words(g * length * depth) + 4 * g * length * depth + 2 * g * length + 3 * g * rows * length +
         2 * bf16_words(g * rows * length);
}

/* ---- builders ---- */
mtf_tensor mtf_causal_attention(mtf_graph *g, mtf_tensor q, mtf_tensor k, mtf_tensor v, const char *query_dim,
                                const char *memory_dim, const char *depth_dim, float scale, float dropout_rate,
                                uint64_t dropout_key) {
  mtf_fused_attention_options o = {query_dim, memory_dim, depth_dim, 1, scale, dropout_rate, dropout_key,
                                   MTF_NO_TENSOR, MTF_NO_TENSOR};
  return mtf_fused_attention(g, q, k, v, &o);
}

mtf_tensor mtf_fused_attention(mtf_graph *g, mtf_tensor q, mtf_tensor k, mtf_tensor v,
                               const mtf_fused_attention_options *o) {
  const char *query_dim = o->query_dim, *memory_dim = o->memory_dim, *depth_dim = o->depth_dim;
  float scale = o->scale, dropout_rate = o->dropout_rate;
  uint64_t dropout_key = o->dropout_key;
  mtf_tensor bias = o->bias, segments = o->segments;
  if (!(dropout_rate >= 0.0f && dropout_rate < 1.0f))
    return mtf_graph_fail(g, MTF_ERR_INVALID, "causal_attention: dropout rate %g must be in [0, 1)", (double)dropout_rate);
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.attention.dim, sizeof p.attention.dim, "%s", query_dim);
  snprintf(p.attention.memory, sizeof p.attention.memory, "%s", memory_dim);
  snprintf(p.attention.depth, sizeof p.attention.depth, "%s", depth_dim);
  p.attention.scale = scale;
  p.attention.keep = 1.0f - dropout_rate; /* as mtf_dropout computes it, so the masks are the same */
  p.attention.key = dropout_key;
  p.attention.bf16 = mtf_graph_matmul_dtype(g) == MTF_BF16;
  p.attention.bias = bias != MTF_NO_TENSOR;
  p.attention.segments = segments != MTF_NO_TENSOR;
  p.attention.causal = o->causal != 0;
  mtf_tensor in[5] = {q, k, v};
  int n = 3;
  if (p.attention.bias) in[n++] = bias;
  if (p.attention.segments) in[n++] = segments;
  return mtf_take(g, mtf_graph_add_op(g, MTF_OP_ATTENTION, n, in, &p, NULL), MTF_ATTENTION_STACK, 0);
}

mtf_tensor mtf_take(mtf_graph *g, mtf_tensor x, const char *dim, int index) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.take.dim, sizeof p.take.dim, "%s", dim);
  p.take.index = index;
  return mtf_graph_add_op(g, MTF_OP_TAKE, 1, &x, &p, NULL);
}

/* ---- shape rules ---- */
static int fail_shape(mtf_graph *g, const mtf_node *n, int k, const char *why) {
  char s[MTF_SHAPE_STR_MAX];
  const mtf_node *x = &g->nodes[n->inputs[k]];
  mtf_graph_fail(g, MTF_ERR_INVALID, "%s: '%s' %s %s", mtf_op(n->kind)->name, x->name,
                 mtf_shape_format(&x->shape, s, sizeof s), why);
  return g->error.code;
}

/* [stack:size] followed by q's dims. */
static int stacked_shape(mtf_graph *g, mtf_node *n, const char *stack, int64_t size) {
  mtf_error err;
  const mtf_shape *q = &g->nodes[n->inputs[0]].shape;
  memset(&n->shape, 0, sizeof n->shape);
  int rc = mtf_shape_append(&n->shape, stack, size, &err);
  for (int d = 0; d < q->rank && rc == MTF_OK; d++) rc = mtf_shape_append(&n->shape, q->dims[d].name, q->dims[d].size, &err);
  if (rc) {
    mtf_graph_fail(g, rc, "%s: %s", mtf_op(n->kind)->name, err.msg);
    return rc;
  }
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* The bias: the query and memory dims and q's batch dims only; the segments: the query dim and q's batch dims. */
static int extras_infer(mtf_graph *g, mtf_node *n, const mtf_attention_inputs *in) {
  const char *qd = n->params.attention.dim, *md = n->params.attention.memory, *dd = n->params.attention.depth;
  const mtf_shape *q = &g->nodes[n->inputs[0]].shape;
  char why[200];
  if (in->bias >= 0) {
    const mtf_shape *b = &g->nodes[n->inputs[in->bias]].shape;
    snprintf(why, sizeof why, "(the bias) needs dimensions '%s' and '%s' and otherwise only the query's, at its sizes, "
             "without '%s'", qd, md, dd);
    if (!mtf_shape_has(b, qd) || !mtf_shape_has(b, md)) return fail_shape(g, n, in->bias, why);
    for (int d = 0; d < b->rank; d++) {
      const char *name = strcmp(b->dims[d].name, md) == 0 ? qd : b->dims[d].name;
      int j = mtf_shape_index_of(q, name);
      if (j < 0 || strcmp(name, dd) == 0 || q->dims[j].size != b->dims[d].size) return fail_shape(g, n, in->bias, why);
    }
  }
  if (in->segments >= 0) {
    const mtf_shape *s = &g->nodes[n->inputs[in->segments]].shape;
    snprintf(why, sizeof why, "(the segment ids) needs dimension '%s' and otherwise only the query's, at its sizes, "
             "without '%s'", qd, dd);
    if (!mtf_shape_has(s, qd)) return fail_shape(g, n, in->segments, why);
    for (int d = 0; d < s->rank; d++) {
      int j = mtf_shape_index_of(q, s->dims[d].name);
      if (j < 0 || strcmp(s->dims[d].name, dd) == 0 || q->dims[j].size != s->dims[d].size)
        return fail_shape(g, n, in->segments, why);
    }
  }
  return MTF_OK;
}

static int attention_infer(mtf_graph *g, mtf_node *n) {
  const char *qd = n->params.attention.dim, *md = n->params.attention.memory, *dd = n->params.attention.depth;
  mtf_attention_inputs in = mtf_attention_inputs_of(n->params.attention.bias, n->params.attention.segments,
                                                    n->kind != MTF_OP_ATTENTION);
  MTF_ASSERT(n->n_inputs == (in.forward_grad >= 0 ? in.forward_grad + 1 : 3 + (in.bias >= 0) + (in.segments >= 0)));
  if (!mtf_op_float_inputs(g, n, 0, n->n_inputs - 1)) return g->error.code;
  const mtf_shape *q = &g->nodes[n->inputs[0]].shape, *k = &g->nodes[n->inputs[1]].shape,
                  *v = &g->nodes[n->inputs[2]].shape;
  char why[256];
  snprintf(why, sizeof why, "needs dimensions '%s' and '%s' and no '%s' or '%s'", qd, dd, md, MTF_ATTENTION_STACK);
  if (!mtf_shape_has(q, qd) || !mtf_shape_has(q, dd) || mtf_shape_has(q, md) || mtf_shape_has(q, MTF_ATTENTION_STACK) ||
      mtf_shape_has(q, MTF_ATTENTION_GRAD_STACK))
    return fail_shape(g, n, 0, why);
  /* k: q's dims with the memory dim (of the same size: self-attention) for the query dim, less any of the
   * others it is shared along (grouped key/value heads). */
  snprintf(why, sizeof why, "must have the query's dimensions (some of the others may be missing) with '%s' for "
           "'%s', of the same size, and '%s'", md, qd, dd);
  if (mtf_shape_has(k, qd) || !mtf_shape_has(k, md) || !mtf_shape_has(k, dd)) return fail_shape(g, n, 1, why);
  for (int d = 0; d < k->rank; d++) {
    const char *name = strcmp(k->dims[d].name, md) == 0 ? qd : k->dims[d].name;
    int j = mtf_shape_index_of(q, name);
    if (j < 0 || q->dims[j].size != k->dims[d].size) return fail_shape(g, n, 1, why);
  }
  if (!mtf_shape_equal(v, k)) return fail_shape(g, n, 2, "must have the keys' shape");
  MTF_CHECK(extras_infer(g, n, &in));
  if (n->kind == MTF_OP_ATTENTION) return stacked_shape(g, n, MTF_ATTENTION_STACK, 2);
  /* The gradients: the forward value and its gradient, [_attn:2, q dims]. */
  MTF_CHECK(stacked_shape(g, n, MTF_ATTENTION_GRAD_STACK, 3));
  mtf_shape forward = n->shape;
  snprintf(forward.dims[0].name, MTF_NAME_MAX, "%s", MTF_ATTENTION_STACK);
  forward.dims[0].size = 2;
  for (int i = in.forward; i <= in.forward_grad; i++)
    if (!mtf_shape_equal(&g->nodes[n->inputs[i]].shape, &forward)) return fail_shape(g, n, i, "must have the forward value's shape");
  if (n->kind == MTF_OP_ATTENTION_BIAS_GRAD) {
    if (in.bias < 0) return fail_shape(g, n, 0, "has no bias to take the gradient of");
    n->shape = g->nodes[n->inputs[in.bias]].shape;
  }
  return MTF_OK;
}

static int take_infer(mtf_graph *g, mtf_node *n) {
  const char *dim = n->params.take.dim;
  if (!mtf_op_float_inputs(g, n, 0, 0)) return g->error.code;
  if (!mtf_op_needs_dim(g, n, 0, dim, "take")) return g->error.code;
  const mtf_shape *x = &g->nodes[n->inputs[0]].shape;
  int64_t size = x->dims[mtf_shape_index_of(x, dim)].size;
  if (n->params.take.index < 0 || n->params.take.index >= size) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "take: index %d is outside '%s' of size %lld", n->params.take.index, dim,
                   (long long)size);
    return g->error.code;
  }
  mtf_shape_remove(x, dim, &n->shape, NULL);
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* ---- gradients ---- */
static void attention_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  mtf_attention_inputs at = mtf_attention_inputs_of(n.params.attention.bias, n.params.attention.segments, 1);
  mtf_tensor in[MTF_MAX_OP_INPUTS];
  for (int k = 0; k < n.n_inputs; k++) in[k] = n.inputs[k];
  in[at.forward] = self;
  in[at.forward_grad] = dy;
  int n_in = at.forward_grad + 1, wanted = 0;
  for (int k = 0; k < 3; k++) wanted |= mtf_grad_wanted(ctx, &n, k);
  mtf_tensor grads = wanted ? mtf_graph_add_op(g, MTF_OP_ATTENTION_GRAD, n_in, in, &n.params, NULL) : MTF_NO_TENSOR;
  for (int k = 0; k < 3; k++) {
    if (!mtf_grad_wanted(ctx, &n, k)) continue;
    mtf_tensor part = mtf_take(g, grads, MTF_ATTENTION_GRAD_STACK, k);
    if (k > 0) part = mtf_rename(g, part, n.params.attention.dim, n.params.attention.memory);
    /* k and v shared along dims of q they lack: each problem's part, summed over them */
    const mtf_shape *kv = &g->nodes[n.inputs[k]].shape;
    if (k > 0 && kv->rank < g->nodes[n.inputs[0]].shape.rank) part = mtf_reduce_sum(g, part, kv);
    mtf_grad_accumulate(ctx, n.inputs[k], part);
  }
  /* The segment ids have no gradient (integers made float). */
  if (at.bias >= 0 && mtf_grad_wanted(ctx, &n, at.bias))
    mtf_grad_accumulate(ctx, n.inputs[at.bias], mtf_graph_add_op(g, MTF_OP_ATTENTION_BIAS_GRAD, n_in, in, &n.params, NULL));
}

/* dy in slice `index` of the stack, zeros in the others: dy times the one-hot vector of index. */
static void take_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  const mtf_shape *x = &g->nodes[n.inputs[0]].shape, scalar = {0};
  mtf_dim dim = x->dims[mtf_shape_index_of(x, n.params.take.dim)];
  mtf_tensor hot = mtf_one_hot(g, mtf_constant(g, &scalar, (float)n.params.take.index), &dim);
  mtf_grad_accumulate(ctx, n.inputs[0], mtf_multiply(g, hot, dy));
}

/* ---- lowering ---- */
static int lower_whole(mtf_lowering *lw, int node, int n_dims, const char *const *dims) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  int in[MTF_MAX_OP_INPUTS], out;
  mtf_shape in_shapes[MTF_MAX_OP_INPUTS];
  mtf_dtype in_dtypes[MTF_MAX_OP_INPUTS];
  for (int k = 0; k < n->n_inputs; k++) {
    MTF_CHECK(mtf_lower_input_whole(lw, node, k, n_dims, dims, &in[k], &in_shapes[k]));
    in_dtypes[k] = mtf_lowering_dtype(lw, n->inputs[k]);
  }
  mtf_shape out_shape = mtf_lowering_shape_whole(lw, node, n_dims, dims);
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_WHOLE, n->n_inputs, in, in_shapes, in_dtypes, &out_shape, &out));
  return mtf_lower_set_value_sliced(lw, node, out, &out_shape);
}

static int attention_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  const char *dims[5] = {n->params.attention.dim, n->params.attention.memory, n->params.attention.depth,
                         MTF_ATTENTION_STACK, MTF_ATTENTION_GRAD_STACK};
  return lower_whole(lw, node, 5, dims);
}

/* Each rank sums dS over its own problems: over the axes splitting q's batch dims that the bias lacks, the
 * result is partial sums (summed where the gradient is used, as an einsum's would be). */
static int attention_bias_grad_lower(mtf_lowering *lw, int node) {
  MTF_CHECK(attention_lower(lw, node));
  mtf_lower_extent_of_input0(lw, node); /* the dropout mask's batch dims: q's */
  const mtf_graph *g = mtf_lowering_graph(lw);
  const mtf_node *n = &g->nodes[node];
  const mtf_shape *q = &g->nodes[n->inputs[0]].shape;
  mtf_axis_set pending = 0;
  for (int d = 0; d < q->rank; d++) {
    const char *name = q->dims[d].name;
    if (mtf_shape_has(&n->shape, name) || strcmp(name, n->params.attention.depth) == 0) continue;
    int axis = mtf_lowering_split_axis(lw, n->inputs[0], name);
    if (axis >= 0) pending |= 1u << axis;
  }
  if (pending) mtf_lower_set_pending(lw, node, pending);
  return MTF_OK;
}

static int take_lower(mtf_lowering *lw, int node) {
  const char *dims[1] = {mtf_lowering_graph(lw)->nodes[node].params.take.dim};
  return lower_whole(lw, node, 1, dims);
}

/* ---- FLOPs and scratch: the pairs of the score matrix computed (the causal half, or all) ---- */
static mtf_attention_geometry step_geometry(const mtf_step *s) {
  mtf_attention_geometry geo;
  mtf_attention_geometry_make(&s->in_shape[0], s->params.attention.dim, s->params.attention.depth, &geo);
  return geo;
}

/* Forward per pair: q.k and p v (2 depth each), scale, max, exp, sum. */
static int64_t attention_flops(const mtf_step *s) {
  mtf_attention_geometry geo = step_geometry(s);
  return geo.count * mtf_attention_pairs(s->params.attention.causal, geo.length) * (4 * geo.depth + 4);
}

/* Backward per pair: q.k again, dv, dp, dq, dk (2 depth each), exp and dS; per row D = do.o. */
static int64_t attention_grad_flops(const mtf_step *s) {
  mtf_attention_geometry geo = step_geometry(s);
  int64_t pairs = mtf_attention_pairs(s->params.attention.causal, geo.length);
  return geo.count * (pairs * (10 * geo.depth + 4) + 2 * geo.length * geo.depth);
}

/* Per pair: q.k and dO.v again (2 depth each), exp, dS. */
static int64_t attention_bias_grad_flops(const mtf_step *s) {
  mtf_attention_geometry geo = step_geometry(s);
  int64_t pairs = mtf_attention_pairs(s->params.attention.causal, geo.length);
  return geo.count * (pairs * (4 * geo.depth + 6) + 2 * geo.length * geo.depth);
}

static int64_t attention_scratch(const mtf_step *s) {
  mtf_attention_geometry geo = step_geometry(s);
  int forward = s->op == MTF_OP_ATTENTION;
  int64_t words = forward ? mtf_attention_scratch_forward(geo.length, geo.depth)
                          : mtf_attention_scratch_backward(geo.length, geo.depth);
  if (!s->params.attention.bf16) return words;
  /* A backend may take either path (cuda and pjrt compute these in fp32 for now). */
  int64_t bf16 = forward ? mtf_attention_scratch_forward_bf16(geo.count, geo.length, geo.depth)
                         : mtf_attention_scratch_backward_bf16(geo.count, geo.length, geo.depth);
  return words > bf16 ? words : bf16;
}

/* q, k, v (not the gradient's forward value and its gradient) */
static int attention_reads_bf16(const mtf_node *n, int k) {
  (void)n;
  return k < 3;
}

/* ---- references: the unfused formula in double, whole tensors ---- */
typedef struct ref_problem {
  mtf_attention_geometry geo;
  mtf_attention_view q, k; /* v has k's shape */
  mtf_attention_view bias, segments;
  mtf_attention_inputs in;
  mtf_attention_mask mask;
  int64_t L, D;
  int bf16; /* params.attention.bf16: the kernels' product operands rounded to bfloat16, modelled here */
  double *p, *drop, *o, *lse; /* [L, L] probabilities and dropout factors (0 or 1 / keep), [L, D] output,
                               * [L] logsumexp, of one problem */
} ref_problem;

static int ref_begin(const mtf_ref_args *a, ref_problem *r) {
  const mtf_op_params *pa = &a->n->params;
  mtf_attention_geometry_make(a->in_shape[0], pa->attention.dim, pa->attention.depth, &r->geo);
  r->q = mtf_attention_view_make(&r->geo, a->in_shape[0], pa->attention.dim, pa->attention.depth, NULL, 0);
  r->k = mtf_attention_view_make(&r->geo, a->in_shape[1], pa->attention.memory, pa->attention.depth, NULL, 0);
  r->L = r->geo.length;
  r->D = r->geo.depth;
  r->bf16 = pa->attention.bf16;
  r->in = mtf_attention_inputs_of(pa->attention.bias, pa->attention.segments, a->n->kind != MTF_OP_ATTENTION);
  if (r->in.bias >= 0)
    r->bias = mtf_attention_bias_view(&r->geo, a->in_shape[r->in.bias], pa->attention.dim, pa->attention.memory);
  if (r->in.segments >= 0)
    r->segments = mtf_attention_segments_view(&r->geo, a->in_shape[r->in.segments], pa->attention.dim);
  const mtf_shape *numbered = a->random_shape ? a->random_shape : a->in_shape[0];
  mtf_attention_mask_make(&r->geo, numbered, a->random_dims, a->random_offsets, a->g->seed, pa->attention.key,
                          pa->attention.keep, &r->mask);
  r->p = malloc(sizeof(double) * (size_t)(r->L * r->L + 1));
  r->drop = malloc(sizeof(double) * (size_t)(r->L * r->L + 1));
  r->o = malloc(sizeof(double) * (size_t)(r->L * r->D + 1));
  r->lse = malloc(sizeof(double) * (size_t)(r->L + 1));
  return r->p && r->drop && r->o && r->lse;
}

static void ref_end(ref_problem *r) {
  free(r->p);
  free(r->drop);
  free(r->o);
  free(r->lse);
}

/* An operand of a product as the bf16 kernels see it: rounded to bfloat16 under the bf16 policy. */
static double operand(const ref_problem *r, double x) { return r->bf16 ? (double)mtf_bf16_round((float)x) : x; }

/* Score (i, j) of problem b after the bias and the segment mask (j visible from i). */
static double ref_adjust(const mtf_ref_args *a, const ref_problem *r, int64_t b, int64_t i, int64_t j, double s) {
  if (r->in.bias >= 0)
    s += a->in[r->in.bias][mtf_attention_base(&r->geo, &r->bias, b) + i * r->bias.pos_stride + j * r->bias.depth_stride];
  if (r->in.segments >= 0) {
    const double *ids = a->in[r->in.segments] + mtf_attention_base(&r->geo, &r->segments, b);
    if (ids[i * r->segments.pos_stride] != ids[j * r->segments.pos_stride]) s = MTF_ATTENTION_MASKED;
  }
  return s;
}

/* Problem b: the masked scores' softmax into p (zeros above the diagonal), their logsumexp, the dropout
 * factors, o = (p drop) v. */
static void ref_forward(const mtf_ref_args *a, ref_problem *r, int64_t b) {
  int64_t bq = mtf_attention_base(&r->geo, &r->q, b), bk = mtf_attention_base(&r->geo, &r->k, b);
  const double *q = a->in[0] + bq, *k = a->in[1] + bk, *v = a->in[2] + bk;
  for (int64_t i = 0; i < r->L; i++) {
    double *row = r->p + i * r->L, max = -INFINITY, sum = 0;
    int64_t visible = mtf_attention_visible(a->n->params.attention.causal, i, r->L);
    for (int64_t j = 0; j < visible; j++) {
      double s = 0;
      for (int64_t d = 0; d < r->D; d++)
        s += operand(r, q[i * r->q.pos_stride + d * r->q.depth_stride]) *
             operand(r, k[j * r->k.pos_stride + d * r->k.depth_stride]);
      row[j] = ref_adjust(a, r, b, i, j, s * a->n->params.attention.scale);
      max = fmax(max, row[j]);
    }
    for (int64_t j = 0; j < visible; j++) sum += exp(row[j] - max);
    r->lse[i] = max + log(sum);
    for (int64_t j = 0; j < r->L; j++) row[j] = j < visible ? exp(row[j] - r->lse[i]) : 0.0;
    uint64_t base = mtf_attention_mask_base(&r->geo, &r->mask, b) + (uint64_t)(i * r->L);
    double *drop = r->drop + i * r->L;
    for (int64_t j = 0; j < r->L; j++)
      drop[j] = r->mask.keep >= 1.0f ? 1.0
                : mtf_uniform01(r->mask.seed, r->mask.key, base + (uint64_t)j) < (double)r->mask.keep ? (double)r->mask.scale
                                                                                                    : 0.0;
    for (int64_t d = 0; d < r->D; d++) {
      double acc = 0;
      for (int64_t j = 0; j < visible; j++)
        acc += operand(r, row[j] * drop[j]) * operand(r, v[j * r->k.pos_stride + d * r->k.depth_stride]);
      r->o[i * r->D + d] = acc;
    }
  }
}

static void attention_reference(const mtf_ref_args *a) {
  const mtf_op_params *pa = &a->n->params;
  ref_problem r;
  MTF_ASSERT(ref_begin(a, &r));
  mtf_attention_view vo[2];
  for (int s = 0; s < 2; s++)
    vo[s] = mtf_attention_view_make(&r.geo, &a->n->shape, pa->attention.dim, pa->attention.depth, MTF_ATTENTION_STACK, s);
  for (int64_t b = 0; b < r.geo.count; b++) {
    ref_forward(a, &r, b);
    double *o = a->out + mtf_attention_base(&r.geo, &vo[0], b), *lse = a->out + mtf_attention_base(&r.geo, &vo[1], b);
    for (int64_t i = 0; i < r.L; i++)
      for (int64_t d = 0; d < r.D; d++) {
        o[i * vo[0].pos_stride + d * vo[0].depth_stride] = r.o[i * r.D + d];
        lse[i * vo[1].pos_stride + d * vo[1].depth_stride] = r.lse[i];
      }
  }
  ref_end(&r);
}

/* From q, k, v and the forward value's gradient dF alone (the forward value itself recomputed): with
 * dO = dF[0], dlse_i = sum_d dF[1, i, d] and the dropout factors R, dS_ij = P_ij (R_ij dO_i.v_j - dO_i.o_i
 * + dlse_i); dq = scale dS k, dk = scale dS^T q, dv = (P R)^T dO; d bias = dS summed over the problems that
 * share each bias element. */
static void attention_grad_reference(const mtf_ref_args *a) {
  const mtf_op_params *pa = &a->n->params;
  const char *qd = pa->attention.dim, *dd = pa->attention.depth;
  double scale = pa->attention.scale;
  int bias_grad = a->n->kind == MTF_OP_ATTENTION_BIAS_GRAD;
  ref_problem r;
  MTF_ASSERT(ref_begin(a, &r));
  const int dF = r.in.forward_grad;
  mtf_attention_view vf[2], vg[3];
  for (int s = 0; s < 2; s++) vf[s] = mtf_attention_view_make(&r.geo, a->in_shape[dF], qd, dd, MTF_ATTENTION_STACK, s);
  for (int s = 0; s < 3 && !bias_grad; s++)
    vg[s] = mtf_attention_view_make(&r.geo, &a->n->shape, qd, dd, MTF_ATTENTION_GRAD_STACK, s);
  if (bias_grad) memset(a->out, 0, sizeof(double) * (size_t)mtf_shape_num_elements(&a->n->shape));
  double *ds = malloc(sizeof(double) * (size_t)(r.L * r.L + 1));
  MTF_ASSERT(ds);
  for (int64_t b = 0; b < r.geo.count; b++) {
    ref_forward(a, &r, b);
    const double *q = a->in[0] + mtf_attention_base(&r.geo, &r.q, b), *k = a->in[1] + mtf_attention_base(&r.geo, &r.k, b);
    const double *v = a->in[2] + mtf_attention_base(&r.geo, &r.k, b);
    const double *d_o = a->in[dF] + mtf_attention_base(&r.geo, &vf[0], b), *dlse = a->in[dF] + mtf_attention_base(&r.geo, &vf[1], b);
#define DO(i, d) d_o[(i) * vf[0].pos_stride + (d) * vf[0].depth_stride]
    for (int64_t i = 0; i < r.L; i++) {
      double delta = 0, extra = 0;
      for (int64_t d = 0; d < r.D; d++) {
        delta += DO(i, d) * r.o[i * r.D + d];
        extra += dlse[i * vf[1].pos_stride + d * vf[1].depth_stride];
      }
      for (int64_t j = 0; j < r.L; j++) {
        double dp = 0;
        for (int64_t d = 0; d < r.D; d++)
          dp += operand(&r, DO(i, d)) * operand(&r, v[j * r.k.pos_stride + d * r.k.depth_stride]);
        double raw = r.p[i * r.L + j] * (dp * r.drop[i * r.L + j] - delta + extra);
        if (bias_grad)
          a->out[mtf_attention_base(&r.geo, &r.bias, b) + i * r.bias.pos_stride + j * r.bias.depth_stride] += raw;
        /* scaled here, so that the bf16 kernels' rounded operand scale dS is what is modelled */
        ds[i * r.L + j] = operand(&r, scale * raw);
      }
    }
    if (bias_grad) continue;
    double *g[3];
    for (int s = 0; s < 3; s++) g[s] = a->out + mtf_attention_base(&r.geo, &vg[s], b);
    for (int64_t i = 0; i < r.L; i++)
      for (int64_t d = 0; d < r.D; d++) {
        double dq = 0, dk = 0, dv = 0;
        for (int64_t j = 0; j < r.L; j++) {
          dq += ds[i * r.L + j] * operand(&r, k[j * r.k.pos_stride + d * r.k.depth_stride]);
          dk += ds[j * r.L + i] * operand(&r, q[j * r.q.pos_stride + d * r.q.depth_stride]);
          dv += operand(&r, r.p[j * r.L + i] * r.drop[j * r.L + i]) * operand(&r, DO(j, d));
        }
        int64_t at = i * vg[0].pos_stride + d * vg[0].depth_stride; /* one shape: the same for all three */
        g[0][at] = dq;
        g[1][at] = dk;
        g[2][at] = dv;
      }
#undef DO
  }
  free(ds);
  ref_end(&r);
}

static void take_reference(const mtf_ref_args *a) {
  const mtf_shape *x = a->in_shape[0], *out = &a->n->shape;
  int d = mtf_shape_index_of(x, a->n->params.take.dim);
  int64_t index[MTF_MAX_RANK] = {0}, at[MTF_MAX_RANK];
  do {
    for (int i = 0, j = 0; i < x->rank; i++) at[i] = i == d ? a->n->params.take.index : index[j++];
    a->out[mtf_ref_offset(out, index, out)] = a->in[0][mtf_ref_offset(x, at, x)];
  } while (mtf_ref_next(out, index));
}

static int64_t take_flops(const mtf_step *s) { (void)s; return 0; }

const mtf_op_def mtf_op_attention = {"causal_attention", MTF_DIM_NONE, attention_infer, attention_gradient,
                                     attention_lower, attention_flops, attention_scratch, attention_reference, 0,
                                     attention_reads_bf16, 0, 0};
/* No gradient: the backward pass is not differentiated again. */
const mtf_op_def mtf_op_attention_grad = {"causal_attention_grad", MTF_DIM_NONE, attention_infer, NULL, attention_lower,
                                          attention_grad_flops, attention_scratch, attention_grad_reference, 0,
                                          attention_reads_bf16, 0, 0};
const mtf_op_def mtf_op_attention_bias_grad = {"causal_attention_bias_grad", MTF_DIM_NONE, attention_infer, NULL,
                                               attention_bias_grad_lower, attention_bias_grad_flops, attention_scratch,
                                               attention_grad_reference, 0, attention_reads_bf16, 0, 0};
const mtf_op_def mtf_op_take = {"take", MTF_DIM_NONE, take_infer, take_gradient, take_lower, take_flops, NULL,
                                take_reference, 0, 0, 1, 0};
