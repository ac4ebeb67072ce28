/* Fused ops over one named dimension: softmax, log-softmax, layer norm, RMS norm and softmax
 * cross-entropy against integer labels (with z-loss). When that dimension is unsplit each is one kernel;
 * when it is split over a mesh axis, lowering runs them in phases: local statistics, an allreduce of
 * those statistics (max, then sums), then the result. Their gradients are the fused ops of fused_grad.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

static mtf_op_params along(const char *dim) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.along.dim, sizeof p.along.dim, "%s", dim);
  return p;
}

mtf_tensor mtf_softmax(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_op_params p = along(dim);
  return mtf_graph_add_op(g, MTF_OP_SOFTMAX, 1, &x, &p, NULL);
}

mtf_tensor mtf_log_softmax(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_op_params p = along(dim);
  return mtf_graph_add_op(g, MTF_OP_LOG_SOFTMAX, 1, &x, &p, NULL);
}

static mtf_tensor normalize(mtf_graph *g, mtf_op_kind kind, mtf_tensor x, const char *dim, float epsilon) {
  mtf_op_params p = along(dim);
  p.norm.epsilon = epsilon;
  return mtf_graph_add_op(g, kind, 1, &x, &p, NULL);
}

mtf_tensor mtf_rms_norm(mtf_graph *g, mtf_tensor x, const char *dim, mtf_tensor scale, float epsilon) {
  mtf_tensor y = normalize(g, MTF_OP_RMS_NORM, x, dim, epsilon);
  return scale == MTF_NO_TENSOR ? y : mtf_multiply(g, y, scale);
}

mtf_tensor mtf_layer_norm(mtf_graph *g, mtf_tensor x, const char *dim, mtf_tensor scale, mtf_tensor bias,
                          float epsilon) {
  mtf_tensor y = normalize(g, MTF_OP_LAYER_NORM, x, dim, epsilon);
  if (scale != MTF_NO_TENSOR) y = mtf_multiply(g, y, scale);
  if (bias != MTF_NO_TENSOR) y = mtf_add(g, y, bias);
  return y;
}

mtf_tensor mtf_softmax_cross_entropy(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, const char *vocab_dim,
                                     float z_loss) {
  return mtf_softmax_cross_entropy_smoothed(g, logits, labels, vocab_dim, z_loss, 0.0f);
}

mtf_tensor mtf_softmax_cross_entropy_smoothed(mtf_graph *g, mtf_tensor logits, mtf_tensor labels,
                                              const char *vocab_dim, float z_loss, float label_smoothing) {
  mtf_op_params p = along(vocab_dim);
  p.xent.z_loss = z_loss;
  p.xent.label_smoothing = label_smoothing;
  mtf_tensor in[2] = {logits, labels};
  return mtf_graph_add_op(g, MTF_OP_SOFTMAX_XENT, 2, in, &p, NULL);
}

static int along_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0)) return g->error.code;
  if (!mtf_op_needs_dim(g, n, 0, n->params.along.dim, mtf_op(n->kind)->name)) return g->error.code;
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static int xent_infer(mtf_graph *g, mtf_node *n) {
  const char *dim = n->params.xent.dim;
  if (!mtf_op_float_inputs(g, n, 0, 0)) return g->error.code;
  if (!mtf_op_needs_dim(g, n, 0, dim, "softmax_cross_entropy")) return g->error.code;
  mtf_error err;
  mtf_shape rows;
  mtf_shape_remove(&g->nodes[n->inputs[0]].shape, dim, &rows, &err);
  const mtf_shape *labels = &g->nodes[n->inputs[1]].shape;
  if (!mtf_shape_equal(labels, &rows)) {
    char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
    mtf_graph_fail(g, MTF_ERR_INVALID, "softmax_cross_entropy: labels '%s' %s must have the logits' shape without '%s', %s",
                   g->nodes[n->inputs[1]].name, mtf_shape_format(labels, a, sizeof a), dim,
                   mtf_shape_format(&rows, b, sizeof b));
    return g->error.code;
  }
  if (!(n->params.xent.label_smoothing >= 0.0f && n->params.xent.label_smoothing < 1.0f)) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "softmax_cross_entropy: label smoothing %g is outside [0, 1)",
                   (double)n->params.xent.label_smoothing);
    return g->error.code;
  }
  const mtf_shape *ls = &g->nodes[n->inputs[0]].shape;
  n->params.xent.vocab = ls->dims[mtf_shape_index_of(ls, dim)].size;
  n->shape = rows;
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* ---- gradients: one fused op each (fused_grad.c) ---- */
static void softmax_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  const char *dim = n.params.along.dim;
  mtf_tensor y = self;
  mtf_tensor dx = n.kind == MTF_OP_SOFTMAX ? mtf_softmax_grad(ctx->g, y, dy, dim) : mtf_log_softmax_grad(ctx->g, y, dy, dim);
  mtf_grad_accumulate(ctx, n.inputs[0], dx);
}

static void norm_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  mtf_tensor dx = mtf_norm_grad(ctx->g, n.kind, n.inputs[0], dy, n.params.norm.dim, n.params.norm.epsilon);
  mtf_grad_accumulate(ctx, n.inputs[0], dx);
}

static void xent_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  if (!mtf_grad_wanted(ctx, &n, 0)) return;
  mtf_grad_accumulate(ctx, n.inputs[0],
                      mtf_softmax_xent_smoothed_grad(ctx->g, n.inputs[0], n.inputs[1], dy, n.params.xent.dim,
                                                     n.params.xent.z_loss, n.params.xent.label_smoothing));
}

/* ---- lowering ---- */
mtf_shape mtf_op_shape_without(const mtf_shape *s, const char *dim) {
  mtf_shape out;
  if (mtf_shape_remove(s, dim, &out, NULL)) out = *s;
  return out;
}

mtf_shape mtf_op_stats_shape(int k, const mtf_shape *rows) {
  mtf_shape s;
  memset(&s, 0, sizeof s);
  mtf_shape_append(&s, "_stats", k, NULL);
  for (int i = 0; i < rows->rank; i++) mtf_shape_append(&s, rows->dims[i].name, rows->dims[i].size, NULL);
  return s;
}

/* Split dim: a first per-row statistic (max, or sum for layer norm) allreduced, then per-row sums given it
 * allreduced (one [2, rows] buffer for cross-entropy: sum exp, the label's logit; [3, rows] with label
 * smoothing, the sum of the logits too), then the result. Two rounds for layer norm keep its
 * variance a sum of squares about the mean (a one-pass E[x^2] - mean^2 cancels when |mean| >> std). */
static int phased_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  const char *dim = n->params.along.dim;
  int axis = mtf_lowering_split_axis(lw, n->inputs[0], dim);
  if (axis < 0) return mtf_lower_local(lw, node, 0);
  mtf_axis_set group = 1u << axis;
  int xent = n->kind == MTF_OP_SOFTMAX_XENT, rms = n->kind == MTF_OP_RMS_NORM, layer = n->kind == MTF_OP_LAYER_NORM;
  int x, labels = -1, first = -1, stats, out;
  mtf_shape xs, ls;
  MTF_CHECK(mtf_lower_input(lw, node, 0, &x, &xs));
  if (xent) MTF_CHECK(mtf_lower_input(lw, node, 1, &labels, &ls));
  int smoothed = xent && n->params.xent.label_smoothing != 0.0f;
  mtf_shape rows = mtf_op_shape_without(&xs, dim), pair = mtf_op_stats_shape(smoothed ? 3 : 2, &rows);
  mtf_shape out_shape = mtf_lowering_local_shape(lw, node);
  mtf_dtype types[3] = {mtf_lowering_dtype(lw, n->inputs[0]), MTF_F32,
                        xent ? mtf_lowering_dtype(lw, n->inputs[1]) : MTF_F32};
  if (!rms) {
    MTF_CHECK(mtf_lower_phase(lw, node, layer ? MTF_PHASE_SUM : MTF_PHASE_MAX, 1, &x, &xs, types, &rows, &first));
    MTF_CHECK(mtf_lower_allreduce_buffer(lw, node, first, &rows, group, layer ? MTF_REDUCE_SUM : MTF_REDUCE_MAX));
  }
  int stats_in[3] = {x, first, labels};
  mtf_shape stats_shapes[3] = {xs, rows, rows};
  const mtf_shape *stats_shape = xent ? &pair : &rows;
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_STATS, rms ? 1 : xent ? 3 : 2, stats_in, stats_shapes, types,
                            stats_shape, &stats));
  MTF_CHECK(mtf_lower_allreduce_buffer(lw, node, stats, stats_shape, group, MTF_REDUCE_SUM));
  if (xent) {
    int apply_in[2] = {first, stats};
    mtf_shape apply_shapes[2] = {rows, pair};
    const mtf_dtype apply_types[2] = {MTF_F32, MTF_F32}; /* the row max and the statistics */
    MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_APPLY, 2, apply_in, apply_shapes, apply_types, &out_shape, &out));
  } else if (rms) {
    int apply_in[2] = {x, stats};
    mtf_shape apply_shapes[2] = {xs, rows};
    MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_APPLY, 2, apply_in, apply_shapes, types, &out_shape, &out));
  } else {
    int apply_in[3] = {x, first, stats};
    mtf_shape apply_shapes[3] = {xs, rows, rows};
    MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_APPLY, 3, apply_in, apply_shapes, types, &out_shape, &out));
  }
  mtf_lower_set_value(lw, node, out);
  return MTF_OK;
}

static int64_t fused_flops(const mtf_step *s) { return 5 * mtf_shape_num_elements(&s->in_shape[0]); }

/* ---- references (double precision, whole tensors) ---- */
void mtf_ref_rows_init(mtf_ref_rows *w, const mtf_shape *full, const char *dim) {
  memset(w, 0, sizeof *w);
  w->rows = mtf_op_shape_without(full, dim);
  int d = mtf_shape_index_of(full, dim);
  w->size = full->dims[d].size;
  w->stride = 1;
  for (int i = d + 1; i < full->rank; i++) w->stride *= full->dims[i].size;
}

/* Offset in `full` of the row's element 0 along the dim (the dim's index 0). */
int64_t mtf_ref_row_base(const mtf_ref_rows *w, const mtf_shape *full) { return mtf_ref_offset(&w->rows, w->index, full); }

static void softmax_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.along.dim);
  do {
    int64_t base = mtf_ref_row_base(&w, s);
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < w.size; j++) max = fmax(max, a->in[0][base + j * w.stride]);
    for (int64_t j = 0; j < w.size; j++) sum += exp(a->in[0][base + j * w.stride] - max);
    for (int64_t j = 0; j < w.size; j++) {
      double x = a->in[0][base + j * w.stride];
      a->out[base + j * w.stride] = a->n->kind == MTF_OP_SOFTMAX ? exp(x - max) / sum : x - max - log(sum);
    }
  } while (mtf_ref_next(&w.rows, w.index));
}

static void norm_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.norm.dim);
  int layer = a->n->kind == MTF_OP_LAYER_NORM;
  do {
    int64_t base = mtf_ref_row_base(&w, s);
    double mean = 0, var = 0;
    if (layer) {
      for (int64_t j = 0; j < w.size; j++) mean += a->in[0][base + j * w.stride];
      mean /= (double)w.size;
    }
    for (int64_t j = 0; j < w.size; j++) {
      double c = a->in[0][base + j * w.stride] - mean;
      var += c * c;
    }
    double r = 1.0 / sqrt(var / (double)w.size + a->n->params.norm.epsilon);
    for (int64_t j = 0; j < w.size; j++) a->out[base + j * w.stride] = (a->in[0][base + j * w.stride] - mean) * r;
  } while (mtf_ref_next(&w.rows, w.index));
}

static void xent_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.xent.dim);
  do {
    int64_t base = mtf_ref_row_base(&w, s), row = mtf_ref_offset(&w.rows, w.index, &w.rows);
    double max = -INFINITY, sum = 0, target = 0;
    long long label = llround(a->in[1][row]);
    for (int64_t j = 0; j < w.size; j++) max = fmax(max, a->in[0][base + j * w.stride]);
    for (int64_t j = 0; j < w.size; j++) sum += exp(a->in[0][base + j * w.stride] - max);
    if (label >= 0 && label < w.size) target = a->in[0][base + label * w.stride];
    double lse = max + log(sum), eps = a->n->params.xent.label_smoothing, mean = 0;
    for (int64_t j = 0; j < w.size; j++) mean += a->in[0][base + j * w.stride] / (double)w.size;
    a->out[row] = (1 - eps) * (lse - target) + eps * (lse - mean) + a->n->params.xent.z_loss * lse * lse;
  } while (mtf_ref_next(&w.rows, w.index));
}

const mtf_op_def mtf_op_softmax = {"softmax", MTF_DIM_IN_INPUT, along_infer, softmax_gradient, phased_lower,
                                   fused_flops, NULL, softmax_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_log_softmax = {"log_softmax", MTF_DIM_IN_INPUT, along_infer, softmax_gradient, phased_lower,
                                       fused_flops, NULL, softmax_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_layer_norm = {"layer_norm", MTF_DIM_IN_INPUT, along_infer, norm_gradient, phased_lower,
                                      fused_flops, NULL, norm_reference, 0, 0, 1, 0};
const mtf_op_def mtf_op_rms_norm = {"rms_norm", MTF_DIM_IN_INPUT, along_infer, norm_gradient, phased_lower,
                                    fused_flops, NULL, norm_reference, 0, 0, 1, 0};
const mtf_op_def mtf_op_softmax_xent = {"softmax_cross_entropy", MTF_DIM_IN_INPUT, xent_infer, xent_gradient,
                                        phased_lower, fused_flops, NULL, xent_reference, 0, mtf_op_reads_first_bf16, 0, 0};
