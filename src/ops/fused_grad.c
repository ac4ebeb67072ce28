/* Fused gradient ops: the backward of softmax, log-softmax, layer/RMS norm, softmax cross-entropy and
 * gelu as one kernel each (built from primitive ops they took 4-12 passes over attention weights and
 * logits). The norms' scale and bias stay separate multiply/add ops (ops/fused.c), so only d x is fused.
 *
 * When the op's dim is split over a mesh axis, lowering runs phases: per-row local sums (after a max,
 * allreduced, for cross-entropy), one allreduce of all of them, then the result. Values a later phase
 * needs besides the sums (the allreduced max and mean, cross-entropy's dy) ride in the same statistics
 * buffer: the rank holding index 0 of the dim writes them and the others write 0, so the sum is exact.
 *
 * Their own gradients (second derivatives; nothing in mtf needs them today) are the vector-Jacobian
 * products of each op's definition written in primitive ops, so every op here stays differentiable. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

/* ---- builders ---- */
static mtf_tensor add_grad_op(mtf_graph *g, mtf_op_kind kind, int n_in, const mtf_tensor *in, const char *dim) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.along.dim, sizeof p.along.dim, "%s", dim ? dim : "");
  return mtf_graph_add_op(g, kind, n_in, in, &p, NULL);
}

mtf_tensor mtf_softmax_grad(mtf_graph *g, mtf_tensor y, mtf_tensor dy, const char *dim) {
  mtf_tensor in[2] = {y, dy};
  return add_grad_op(g, MTF_OP_SOFTMAX_GRAD, 2, in, dim);
}

mtf_tensor mtf_log_softmax_grad(mtf_graph *g, mtf_tensor y, mtf_tensor dy, const char *dim) {
  mtf_tensor in[2] = {y, dy};
  return add_grad_op(g, MTF_OP_LOG_SOFTMAX_GRAD, 2, in, dim);
}

mtf_tensor mtf_norm_grad(mtf_graph *g, mtf_op_kind forward, mtf_tensor x, mtf_tensor dy, const char *dim, float epsilon) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.norm.dim, sizeof p.norm.dim, "%s", dim);
  p.norm.epsilon = epsilon;
  mtf_tensor in[2] = {x, dy};
  mtf_op_kind kind = forward == MTF_OP_LAYER_NORM ? MTF_OP_LAYER_NORM_GRAD : MTF_OP_RMS_NORM_GRAD;
  return mtf_graph_add_op(g, kind, 2, in, &p, NULL);
}

mtf_tensor mtf_softmax_xent_grad(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, mtf_tensor dy, const char *dim,
                                 float z_loss) {
  return mtf_softmax_xent_smoothed_grad(g, logits, labels, dy, dim, z_loss, 0.0f);
}

mtf_tensor mtf_softmax_xent_smoothed_grad(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, mtf_tensor dy,
                                          const char *dim, float z_loss, float label_smoothing) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.xent.dim, sizeof p.xent.dim, "%s", dim);
  p.xent.z_loss = z_loss;
  p.xent.label_smoothing = label_smoothing;
  mtf_tensor in[3] = {logits, labels, dy};
  return mtf_graph_add_op(g, MTF_OP_SOFTMAX_XENT_GRAD, 3, in, &p, NULL);
}

mtf_tensor mtf_gelu_grad(mtf_graph *g, mtf_tensor x, mtf_tensor dy) {
  mtf_tensor in[2] = {x, dy};
  return add_grad_op(g, MTF_OP_GELU_GRAD, 2, in, NULL);
}

/* ---- shape rules ---- */
/* Input k must have exactly the shape of input `like` (dy: the forward output's shape, dims in order). */
static int same_shape_as(mtf_graph *g, const mtf_node *n, int k, int like, const mtf_shape *want) {
  const mtf_node *t = &g->nodes[n->inputs[k]];
  if (mtf_shape_equal(&t->shape, want)) return 1;
  char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
  mtf_graph_fail(g, MTF_ERR_INVALID, "%s: '%s' %s must have the shape %s of '%s'", mtf_op(n->kind)->name, t->name,
                 mtf_shape_format(&t->shape, a, sizeof a), mtf_shape_format(want, b, sizeof b),
                 g->nodes[n->inputs[like]].name);
  return 0;
}

static int pair_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 1)) return g->error.code;
  if (n->kind != MTF_OP_GELU_GRAD && !mtf_op_needs_dim(g, n, 0, n->params.along.dim, mtf_op(n->kind)->name))
    return g->error.code;
  if (!same_shape_as(g, n, 1, 0, &g->nodes[n->inputs[0]].shape)) return g->error.code;
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static int xent_grad_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0) || !mtf_op_float_inputs(g, n, 2, 2)) return g->error.code;
  if (!mtf_op_needs_dim(g, n, 0, n->params.xent.dim, mtf_op(n->kind)->name)) return g->error.code;
  mtf_shape rows = mtf_op_shape_without(&g->nodes[n->inputs[0]].shape, n->params.xent.dim);
  if (!same_shape_as(g, n, 1, 0, &rows) || !same_shape_as(g, n, 2, 0, &rows)) return g->error.code;
  const mtf_shape *ls = &g->nodes[n->inputs[0]].shape;
  n->params.xent.vocab = ls->dims[mtf_shape_index_of(ls, n->params.xent.dim)].size;
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* ---- definitions in primitive ops (the old backward), for second derivatives ---- */
static mtf_tensor softmax_grad_composite(mtf_graph *g, const mtf_node *n, const mtf_tensor *in) {
  const char *dim = n->params.along.dim;
  mtf_tensor y = in[0], dy = in[1];
  return mtf_multiply(g, y, mtf_subtract(g, dy, mtf_reduce_sum_dim(g, mtf_multiply(g, dy, y), dim)));
}

static mtf_tensor log_softmax_grad_composite(mtf_graph *g, const mtf_node *n, const mtf_tensor *in) {
  mtf_tensor y = in[0], dy = in[1];
  return mtf_subtract(g, dy, mtf_multiply(g, mtf_exp(g, y), mtf_reduce_sum_dim(g, dy, n->params.along.dim)));
}

/* d/dx of y = c * r with r = rsqrt(mean(c^2) + eps): r * (dy - y * mean(dy * y)) [- mean(dy) for layer
 * norm, where c = x - mean(x)]. */
static mtf_tensor norm_grad_composite(mtf_graph *g, const mtf_node *n, const mtf_tensor *in) {
  mtf_tensor x = in[0], dy = in[1];
  mtf_shape rows = mtf_op_shape_without(&g->nodes[x].shape, n->params.norm.dim);
  int layer = n->kind == MTF_OP_LAYER_NORM_GRAD;
  mtf_tensor y = mtf_graph_add_op(g, layer ? MTF_OP_LAYER_NORM : MTF_OP_RMS_NORM, 1, &x, &n->params, NULL);
  mtf_tensor centred = layer ? mtf_subtract(g, x, mtf_reduce_mean(g, x, &rows)) : x;
  mtf_tensor r = mtf_rsqrt(g, mtf_scalar_add(g, mtf_reduce_mean(g, mtf_square(g, centred), &rows), n->params.norm.epsilon));
  mtf_tensor inner = mtf_subtract(g, dy, mtf_multiply(g, y, mtf_reduce_mean(g, mtf_multiply(g, dy, y), &rows)));
  if (layer) inner = mtf_subtract(g, inner, mtf_reduce_mean(g, dy, &rows));
  return mtf_multiply(g, inner, r);
}

/* (softmax * (1 + 2 z lse) - (1 - eps) one_hot(label) - eps / vocab) * dy: d (z lse^2) = 2 z lse softmax,
 * and the smoothing term's target is uniform. */
static mtf_tensor xent_grad_composite(mtf_graph *g, const mtf_node *n, const mtf_tensor *in) {
  mtf_tensor logits = in[0], labels = in[1], dy = in[2];
  const char *dim = n->params.xent.dim;
  mtf_dim vocab = g->nodes[logits].shape.dims[mtf_shape_index_of(&g->nodes[logits].shape, dim)];
  mtf_tensor scale = dy;
  if (n->params.xent.z_loss != 0.0f)
    scale = mtf_multiply(g, dy, mtf_scalar_add(g, mtf_scalar_multiply(g, mtf_logsumexp(g, logits, dim),
                                                                      2.0f * n->params.xent.z_loss), 1.0f));
  float eps = n->params.xent.label_smoothing;
  mtf_tensor target = mtf_one_hot(g, labels, &vocab);
  if (eps != 0.0f)
    target = mtf_scalar_add(g, mtf_scalar_multiply(g, target, 1.0f - eps), eps / (float)vocab.size);
  return mtf_subtract(g, mtf_multiply(g, mtf_softmax(g, logits, dim), scale), mtf_multiply(g, target, dy));
}

#define GELU_A 0.044715
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */

/* dy * gelu'(x) with gelu'(x) = (1 + t) / 2 + x (1 - t^2) c (1 + 3 a x^2) / 2, t = tanh(c (x + a x^3)), in
 * differentiable ops (the unary GELU_GRAD has no derivative of its own). */
static mtf_tensor gelu_grad_composite(mtf_graph *g, const mtf_node *n, const mtf_tensor *in) {
  (void)n;
  mtf_tensor x = in[0], dy = in[1], x2 = mtf_square(g, x);
  mtf_tensor inner = mtf_add(g, x, mtf_scalar_multiply(g, mtf_multiply(g, x2, x), (float)GELU_A));
  mtf_tensor t = mtf_tanh(g, mtf_scalar_multiply(g, inner, (float)GELU_C));
  mtf_tensor slope = mtf_multiply(g, mtf_unary(g, mtf_square(g, t), MTF_UN_AFFINE, -1.0f, 1.0f),
                                  mtf_unary(g, x2, MTF_UN_AFFINE, (float)(3 * GELU_A * GELU_C), (float)GELU_C));
  mtf_tensor half_x_slope = mtf_scalar_multiply(g, mtf_multiply(g, x, slope), 0.5f);
  mtf_tensor d = mtf_add(g, mtf_unary(g, t, MTF_UN_AFFINE, 0.5f, 0.5f), half_x_slope);
  return mtf_multiply(g, dy, d);
}

/* ---- gradients (second derivatives) ---- */
typedef mtf_tensor (*composite_fn)(mtf_graph *g, const mtf_node *n, const mtf_tensor *in);

/* d/d input of sum(composite(inputs) * G), G = dy held constant. The composite is applied to copies of the
 * inputs that are differentiated as leaves: dy usually depends on x, and that path is not a partial
 * derivative of this op. `differentiable`: a bit per input (cross-entropy's labels have none). */
static void composite_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor G, composite_fn composite,
                               unsigned differentiable) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  mtf_tensor leaf[MTF_MAX_OP_INPUTS], wrt[MTF_MAX_OP_INPUTS], grads[MTF_MAX_OP_INPUTS];
  int of[MTF_MAX_OP_INPUTS], n_wrt = 0;
  for (int k = 0; k < n.n_inputs; k++) {
    leaf[k] = n.inputs[k];
    if (!(differentiable & (1u << k)) || !mtf_grad_wanted(ctx, &n, k)) continue;
    mtf_shape shape = g->nodes[n.inputs[k]].shape;
    leaf[k] = mtf_reshape(g, n.inputs[k], &shape);
    of[n_wrt] = k;
    wrt[n_wrt++] = leaf[k];
  }
  if (n_wrt == 0) return;
  mtf_shape scalar = {0};
  mtf_tensor loss = mtf_reduce_sum(g, mtf_multiply(g, composite(g, &n, leaf), G), &scalar);
  if (mtf_gradients(g, loss, n_wrt, wrt, grads) != MTF_OK) return;
  for (int i = 0; i < n_wrt; i++) mtf_grad_accumulate(ctx, n.inputs[of[i]], grads[i]);
}

static void softmax_grad_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  composite_gradient(ctx, self, dy, softmax_grad_composite, 3u);
}
static void log_softmax_grad_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  composite_gradient(ctx, self, dy, log_softmax_grad_composite, 3u);
}
static void norm_grad_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  composite_gradient(ctx, self, dy, norm_grad_composite, 3u);
}
static void xent_grad_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  composite_gradient(ctx, self, dy, xent_grad_composite, 5u);
}
static void gelu_grad_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  composite_gradient(ctx, self, dy, gelu_grad_composite, 3u);
}

/* ---- lowering ---- */
/* Split dim (phase kernels in exec/cpu/fused_grad.c):
 *   softmax / log-softmax grad: STATS(y, dy) -> [rows] dot or sum; allreduce; APPLY(y, dy, sums).
 *   layer norm grad: SUM(x) -> [rows]; allreduce; STATS(x, dy, sum) -> [4, rows] (the sum carried, sum of
 *     squares about the mean, sum dy, sum dy * (x - mean)); allreduce; APPLY(x, dy, stats). RMS norm: no
 *     SUM phase, STATS(x, dy) with a mean of 0. Two rounds for layer norm as in its forward (a one-pass
 *     variance cancels when |mean| >> std).
 *   cross-entropy grad: MAX(logits) -> [rows]; allreduce max; STATS(logits, max, dy) -> [3, rows] (sum
 *     exp, the max carried, dy carried); allreduce; APPLY(logits, labels, stats). */
/* A gradient lowered with its dim split: the node's lowered inputs, the rows' shape, the group of the split axis,
 * and the APPLY phase's inputs that each op's phases fill in (one function per op: the table's `lower`). */
typedef struct split_grad {
  mtf_lowering *lw;
  int node;
  mtf_axis_set group;
  int in[MTF_MAX_OP_INPUTS];
  mtf_shape shapes[MTF_MAX_OP_INPUTS];
  mtf_dtype types[MTF_MAX_OP_INPUTS];
  mtf_shape rows;
  int phase_in[3];
  mtf_shape phase_shapes[3];
  mtf_dtype phase_types[3];
} split_grad;

static int split_grad_lower(mtf_lowering *lw, int node, int (*phases)(split_grad *g)) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  int axis = mtf_lowering_split_axis(lw, n->inputs[0], n->params.along.dim);
  if (axis < 0) return mtf_lower_local(lw, node, 0);
  split_grad g = {.lw = lw, .node = node, .group = 1u << axis};
  for (int k = 0; k < n->n_inputs; k++) {
    MTF_CHECK(mtf_lower_input(lw, node, k, &g.in[k], &g.shapes[k]));
    g.types[k] = mtf_lowering_dtype(lw, n->inputs[k]);
  }
  g.rows = mtf_op_shape_without(&g.shapes[0], n->params.along.dim);
  g.phase_types[0] = g.types[0], g.phase_types[1] = MTF_F32, g.phase_types[2] = MTF_F32;
  MTF_CHECK(phases(&g));
  mtf_shape out_shape = mtf_lowering_local_shape(lw, node);
  int out;
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_APPLY, 3, g.phase_in, g.phase_shapes, g.phase_types, &out_shape, &out));
  mtf_lower_set_value(lw, node, out);
  return MTF_OK;
}

static int softmax_grad_phases(split_grad *g) {
  int stats;
  MTF_CHECK(mtf_lower_phase(g->lw, g->node, MTF_PHASE_STATS, 2, g->in, g->shapes, g->types, &g->rows, &stats));
  MTF_CHECK(mtf_lower_allreduce_buffer(g->lw, g->node, stats, &g->rows, g->group, MTF_REDUCE_SUM));
  g->phase_in[0] = g->in[0], g->phase_in[1] = g->in[1], g->phase_in[2] = stats;
  g->phase_shapes[0] = g->shapes[0], g->phase_shapes[1] = g->shapes[1], g->phase_shapes[2] = g->rows;
  return MTF_OK;
}

static int norm_grad_phases(split_grad *g, int layer) {
  int first, stats;
  mtf_shape four = mtf_op_stats_shape(4, &g->rows);
  g->phase_in[0] = g->in[0], g->phase_in[1] = g->in[1];
  g->phase_shapes[0] = g->shapes[0], g->phase_shapes[1] = g->shapes[1], g->phase_shapes[2] = g->rows;
  if (layer) {
    MTF_CHECK(mtf_lower_phase(g->lw, g->node, MTF_PHASE_SUM, 1, g->in, g->shapes, g->types, &g->rows, &first));
    MTF_CHECK(mtf_lower_allreduce_buffer(g->lw, g->node, first, &g->rows, g->group, MTF_REDUCE_SUM));
    g->phase_in[2] = first;
  }
  MTF_CHECK(mtf_lower_phase(g->lw, g->node, MTF_PHASE_STATS, layer ? 3 : 2, g->phase_in, g->phase_shapes,
                            g->phase_types, &four, &stats));
  MTF_CHECK(mtf_lower_allreduce_buffer(g->lw, g->node, stats, &four, g->group, MTF_REDUCE_SUM));
  g->phase_in[2] = stats, g->phase_shapes[2] = four;
  return MTF_OK;
}

static int layer_norm_grad_phases(split_grad *g) { return norm_grad_phases(g, 1); }
static int rms_norm_grad_phases(split_grad *g) { return norm_grad_phases(g, 0); }

static int xent_grad_phases(split_grad *g) {
  int first, stats;
  mtf_shape three = mtf_op_stats_shape(3, &g->rows);
  MTF_CHECK(mtf_lower_phase(g->lw, g->node, MTF_PHASE_MAX, 1, g->in, g->shapes, g->types, &g->rows, &first));
  MTF_CHECK(mtf_lower_allreduce_buffer(g->lw, g->node, first, &g->rows, g->group, MTF_REDUCE_MAX));
  g->phase_in[0] = g->in[0], g->phase_in[1] = first, g->phase_in[2] = g->in[2];
  g->phase_shapes[0] = g->shapes[0], g->phase_shapes[1] = g->rows, g->phase_shapes[2] = g->shapes[2];
  MTF_CHECK(mtf_lower_phase(g->lw, g->node, MTF_PHASE_STATS, 3, g->phase_in, g->phase_shapes, g->phase_types, &three,
                            &stats));
  MTF_CHECK(mtf_lower_allreduce_buffer(g->lw, g->node, stats, &three, g->group, MTF_REDUCE_SUM));
  g->phase_in[1] = g->in[1], g->phase_in[2] = stats;
  g->phase_shapes[1] = g->shapes[1], g->phase_shapes[2] = three;
  g->phase_types[1] = g->types[1];
  return MTF_OK;
}

static int softmax_grad_lower(mtf_lowering *lw, int node) { return split_grad_lower(lw, node, softmax_grad_phases); }
static int layer_norm_grad_lower(mtf_lowering *lw, int node) {
  return split_grad_lower(lw, node, layer_norm_grad_phases);
}
static int rms_norm_grad_lower(mtf_lowering *lw, int node) { return split_grad_lower(lw, node, rms_norm_grad_phases); }
static int xent_grad_lower(mtf_lowering *lw, int node) { return split_grad_lower(lw, node, xent_grad_phases); }
/* elementwise: never split along a dim of its own */
static int gelu_grad_lower(mtf_lowering *lw, int node) { return mtf_lower_local(lw, node, 0); }

/* Floating-point operations per element of the op's first input, in any phase (exp and tanh count 1). */
static int64_t softmax_grad_flops(const mtf_step *s) { return 4 * mtf_shape_num_elements(&s->in_shape[0]); }
static int64_t norm_grad_flops(const mtf_step *s) { return 10 * mtf_shape_num_elements(&s->in_shape[0]); }
static int64_t xent_grad_flops(const mtf_step *s) { return 6 * mtf_shape_num_elements(&s->in_shape[0]); }
static int64_t gelu_grad_flops(const mtf_step *s) { return 16 * mtf_shape_num_elements(&s->in_shape[0]); }

/* ---- references (double precision, whole tensors) ---- */
static void softmax_grad_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  const double *y = a->in[0], *dy = a->in[1];
  int log_form = a->n->kind == MTF_OP_LOG_SOFTMAX_GRAD;
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.along.dim);
  do {
    int64_t base = mtf_ref_row_base(&w, s);
    double sum = 0;
    for (int64_t j = 0; j < w.size; j++) {
      int64_t e = base + j * w.stride;
      sum += log_form ? dy[e] : dy[e] * y[e];
    }
    for (int64_t j = 0; j < w.size; j++) {
      int64_t e = base + j * w.stride;
      a->out[e] = log_form ? dy[e] - exp(y[e]) * sum : y[e] * (dy[e] - sum);
    }
  } while (mtf_ref_next(&w.rows, w.index));
}

static void norm_grad_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  const double *x = a->in[0], *dy = a->in[1];
  int layer = a->n->kind == MTF_OP_LAYER_NORM_GRAD;
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.norm.dim);
  double n = (double)w.size;
  do {
    int64_t base = mtf_ref_row_base(&w, s);
    double mean = 0, var = 0, mean_dy = 0, mean_dy_y = 0;
    if (layer) {
      for (int64_t j = 0; j < w.size; j++) mean += x[base + j * w.stride] / n;
    }
    for (int64_t j = 0; j < w.size; j++) var += (x[base + j * w.stride] - mean) * (x[base + j * w.stride] - mean) / n;
    double r = 1.0 / sqrt(var + a->n->params.norm.epsilon);
    for (int64_t j = 0; j < w.size; j++) {
      int64_t e = base + j * w.stride;
      mean_dy += dy[e] / n;
      mean_dy_y += dy[e] * (x[e] - mean) * r / n;
    }
    for (int64_t j = 0; j < w.size; j++) {
      int64_t e = base + j * w.stride;
      double y = (x[e] - mean) * r;
      a->out[e] = r * (dy[e] - y * mean_dy_y - (layer ? mean_dy : 0.0));
    }
  } while (mtf_ref_next(&w.rows, w.index));
}

static void xent_grad_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  const double *x = a->in[0];
  double z = a->n->params.xent.z_loss;
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.xent.dim);
  do {
    int64_t base = mtf_ref_row_base(&w, s);
    long long label = llround(a->in[1][mtf_ref_offset(&w.rows, w.index, a->in_shape[1])]);
    double dy = a->in[2][mtf_ref_offset(&w.rows, w.index, a->in_shape[2])];
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < w.size; j++) max = fmax(max, x[base + j * w.stride]);
    for (int64_t j = 0; j < w.size; j++) sum += exp(x[base + j * w.stride] - max);
    double lse = max + log(sum);
    for (int64_t j = 0; j < w.size; j++) {
      int64_t e = base + j * w.stride;
      double eps = a->n->params.xent.label_smoothing;
      a->out[e] = (exp(x[e] - max) / sum * (1.0 + 2.0 * z * lse) - (1 - eps) * (j == label ? 1.0 : 0.0) -
                   eps / (double)w.size) * dy;
    }
  } while (mtf_ref_next(&w.rows, w.index));
}

static void gelu_grad_reference(const mtf_ref_args *a) {
  int64_t count = mtf_shape_num_elements(&a->n->shape);
  for (int64_t e = 0; e < count; e++) a->out[e] = a->in[1][e] * mtf_unary_reference(MTF_UN_GELU_GRAD, 0, 0, a->in[0][e]);
}

const mtf_op_def mtf_op_softmax_grad = {"softmax_grad", MTF_DIM_IN_INPUT, pair_infer, softmax_grad_gradient,
                                        softmax_grad_lower, softmax_grad_flops, NULL, softmax_grad_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_log_softmax_grad = {"log_softmax_grad", MTF_DIM_IN_INPUT, pair_infer, log_softmax_grad_gradient,
                                            softmax_grad_lower, softmax_grad_flops, NULL, softmax_grad_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_layer_norm_grad = {"layer_norm_grad", MTF_DIM_IN_INPUT, pair_infer, norm_grad_gradient,
                                           layer_norm_grad_lower, norm_grad_flops, NULL, norm_grad_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_rms_norm_grad = {"rms_norm_grad", MTF_DIM_IN_INPUT, pair_infer, norm_grad_gradient,
                                         rms_norm_grad_lower, norm_grad_flops, NULL, norm_grad_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_softmax_xent_grad = {"softmax_cross_entropy_grad", MTF_DIM_IN_INPUT, xent_grad_infer,
                                             xent_grad_gradient, xent_grad_lower, xent_grad_flops, NULL,
                                             xent_grad_reference, 0, mtf_op_reads_first_bf16, 1, 1};
/* x, a product's result, and dy, the gradient a product computed (as autocast's backward products give it) */
static int gelu_grad_reads_bf16(const mtf_node *n, int k) {
  (void)n;
  return k < 2;
}

const mtf_op_def mtf_op_gelu_grad = {"gelu_grad", MTF_DIM_NONE, pair_infer, gelu_grad_gradient, gelu_grad_lower,
                                     gelu_grad_flops, NULL, gelu_grad_reference, 0, gelu_grad_reads_bf16, 1, 1};
