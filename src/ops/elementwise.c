/* Elementwise ops and constant-like sources: unary functions, binary ops with broadcasting by name,
 * masked fill, constants, ranges, broadcasts and random keep masks. Each runs locally on slices. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

/* ---- unary ---- */
mtf_tensor mtf_unary(mtf_graph *g, mtf_tensor x, mtf_unary_kind kind, float a, float b) {
  mtf_op_params p = {.unary = {kind, a, b}};
  return mtf_graph_add_op(g, MTF_OP_UNARY, 1, &x, &p, NULL);
}

mtf_tensor mtf_scalar_add(mtf_graph *g, mtf_tensor x, float c) { return mtf_unary(g, x, MTF_UN_AFFINE, 1.0f, c); }
mtf_tensor mtf_scalar_multiply(mtf_graph *g, mtf_tensor x, float c) { return mtf_unary(g, x, MTF_UN_AFFINE, c, 0.0f); }
mtf_tensor mtf_exp(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_EXP, 0, 0); }
mtf_tensor mtf_log(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_LOG, 0, 0); }
mtf_tensor mtf_rsqrt(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_RSQRT, 0, 0); }
mtf_tensor mtf_sqrt(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SQRT, 0, 0); }
mtf_tensor mtf_square(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SQUARE, 0, 0); }
mtf_tensor mtf_tanh(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_TANH, 0, 0); }
mtf_tensor mtf_sigmoid(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SIGMOID, 0, 0); }
mtf_tensor mtf_relu(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_RELU, 0, 0); }
mtf_tensor mtf_gelu(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_GELU, 0, 0); }
mtf_tensor mtf_swish(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SWISH, 0, 0); }
mtf_tensor mtf_sin(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SIN, 0, 0); }
mtf_tensor mtf_cos(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_COS, 0, 0); }

static int same_shape_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0)) return g->error.code;
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static void unary_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  mtf_tensor x = n.inputs[0], y = self, d = MTF_NO_TENSOR;
  switch (n.params.unary.fn) {
    case MTF_UN_AFFINE: d = mtf_scalar_multiply(g, dy, n.params.unary.alpha); break;
    case MTF_UN_EXP: d = mtf_multiply(g, dy, y); break;
    case MTF_UN_LOG: d = mtf_divide(g, dy, x); break;
    case MTF_UN_RSQRT: /* d x^-1/2 = -1/2 y^3 */
      d = mtf_multiply(g, dy, mtf_scalar_multiply(g, mtf_multiply(g, y, mtf_square(g, y)), -0.5f));
      break;
    case MTF_UN_SQRT: d = mtf_scalar_multiply(g, mtf_divide(g, dy, y), 0.5f); break;
    case MTF_UN_SQUARE: d = mtf_multiply(g, dy, mtf_scalar_multiply(g, x, 2.0f)); break;
    case MTF_UN_TANH: d = mtf_multiply(g, dy, mtf_unary(g, mtf_square(g, y), MTF_UN_AFFINE, -1.0f, 1.0f)); break;
    case MTF_UN_SIGMOID:
      d = mtf_multiply(g, dy, mtf_multiply(g, y, mtf_unary(g, y, MTF_UN_AFFINE, -1.0f, 1.0f)));
      break;
    case MTF_UN_RELU: d = mtf_multiply(g, dy, mtf_unary(g, x, MTF_UN_STEP, 0, 0)); break;
    case MTF_UN_GELU: d = mtf_gelu_grad(g, x, dy); break; /* one fused op (ops/fused_grad.c) */
    case MTF_UN_SWISH: d = mtf_multiply(g, dy, mtf_unary(g, x, MTF_UN_SWISH_GRAD, 0, 0)); break;
    case MTF_UN_SIN: d = mtf_multiply(g, dy, mtf_cos(g, x)); break;
    case MTF_UN_COS: d = mtf_multiply(g, dy, mtf_scalar_multiply(g, mtf_sin(g, x), -1.0f)); break;
    case MTF_UN_STEP:
    case MTF_UN_GELU_GRAD:
    case MTF_UN_SWISH_GRAD: break; /* piecewise constant / only used inside gradients */
  }
  mtf_grad_accumulate(ctx, x, d);
}

static int unary_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  /* Scaling a partial sum keeps it partial: one allreduce later instead of one now. */
  int scaling = n->params.unary.fn == MTF_UN_AFFINE && n->params.unary.beta == 0.0f;
  return mtf_lower_local(lw, node, scaling);
}

double mtf_unary_reference(mtf_unary_kind fn, double a, double b, double x) {
  const double c = sqrt(2.0 / 3.14159265358979323846);
  switch (fn) {
    case MTF_UN_AFFINE: return a * x + b;
    case MTF_UN_EXP: return exp(x);
    case MTF_UN_LOG: return log(x);
    case MTF_UN_RSQRT: return 1.0 / sqrt(x);
    case MTF_UN_SQRT: return sqrt(x);
    case MTF_UN_SQUARE: return x * x;
    case MTF_UN_TANH: return tanh(x);
    case MTF_UN_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case MTF_UN_RELU: return x > 0 ? x : 0;
    case MTF_UN_STEP: return x > 0 ? 1 : 0;
    case MTF_UN_GELU: return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
    case MTF_UN_GELU_GRAD: {
      double t = tanh(c * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
    }
    case MTF_UN_SWISH: return x / (1.0 + exp(-x));
    case MTF_UN_SIN: return sin(x);
    case MTF_UN_COS: return cos(x);
    case MTF_UN_SWISH_GRAD: {
      double s = 1.0 / (1.0 + exp(-x));
      return s * (1.0 + x * (1.0 - s));
    }
  }
  return NAN;
}

static void unary_reference(const mtf_ref_args *a) {
  int64_t n = mtf_shape_num_elements(&a->n->shape);
  for (int64_t e = 0; e < n; e++)
    a->out[e] = mtf_unary_reference(a->n->params.unary.fn, a->n->params.unary.alpha, a->n->params.unary.beta, a->in[0][e]);
}

/* The feed-forward activations and their gradients' factors read a bf16-stored argument (a product's result,
 * lower/storage.c); the other functions (a sine's angle, exp, log, powers) keep float32 arguments. */
static int unary_reads_bf16(const mtf_node *n, int k) {
  mtf_unary_kind fn = n->params.unary.fn;
  return k == 0 && (fn == MTF_UN_GELU || fn == MTF_UN_RELU || fn == MTF_UN_SWISH || fn == MTF_UN_STEP ||
                    fn == MTF_UN_SWISH_GRAD);
}

const mtf_op_def mtf_op_unary = {"unary", MTF_DIM_NONE, same_shape_infer, unary_gradient, unary_lower, mtf_op_flops_elements, NULL,
                                 unary_reference, 0, unary_reads_bf16, 1, 0};

/* ---- binary ---- */
mtf_tensor mtf_binary(mtf_graph *g, mtf_tensor x, mtf_tensor y, mtf_binary_kind kind) {
  mtf_op_params p = {.binary = {kind}};
  mtf_tensor in[2] = {x, y};
  return mtf_graph_add_op(g, MTF_OP_BINARY, 2, in, &p, NULL);
}

mtf_tensor mtf_add(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_ADD); }
mtf_tensor mtf_subtract(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_SUB); }
mtf_tensor mtf_multiply(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_MUL); }
mtf_tensor mtf_divide(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_DIV); }
mtf_tensor mtf_equal(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_EQUAL); }
mtf_tensor mtf_less_equal(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_LESS_EQUAL); }

static int union_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 1)) return g->error.code;
  n->dtype = MTF_F32;
  return mtf_op_union_shape(g, &g->nodes[n->inputs[0]].shape, &g->nodes[n->inputs[1]].shape, &n->shape,
                            "elementwise op") ? MTF_OK : g->error.code;
}

static void binary_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  mtf_tensor a = n.inputs[0], b = n.inputs[1];
  int want_a = mtf_grad_wanted(ctx, &n, 0), want_b = mtf_grad_wanted(ctx, &n, 1);
  switch (n.params.binary.fn) {
    case MTF_BIN_ADD:
      if (want_a) mtf_grad_accumulate(ctx, a, dy);
      if (want_b) mtf_grad_accumulate(ctx, b, dy);
      break;
    case MTF_BIN_SUB:
      if (want_a) mtf_grad_accumulate(ctx, a, dy);
      if (want_b) mtf_grad_accumulate(ctx, b, mtf_scalar_multiply(g, dy, -1.0f));
      break;
    case MTF_BIN_MUL:
      if (want_a) mtf_grad_accumulate(ctx, a, mtf_multiply(g, dy, b));
      if (want_b) mtf_grad_accumulate(ctx, b, mtf_multiply(g, dy, a));
      break;
    case MTF_BIN_DIV:
      if (want_a) mtf_grad_accumulate(ctx, a, mtf_divide(g, dy, b));
      if (want_b) mtf_grad_accumulate(ctx, b, mtf_scalar_multiply(g, mtf_divide(g, mtf_multiply(g, dy, self), b), -1.0f));
      break;
    /* The larger (smaller) operand gets dy, a on ties: masks a >= b and b > a (a <= b and b < a). */
    case MTF_BIN_MAXIMUM:
      if (want_a) mtf_grad_accumulate(ctx, a, mtf_multiply(g, dy, mtf_less_equal(g, b, a)));
      if (want_b) mtf_grad_accumulate(ctx, b, mtf_multiply(g, dy, mtf_less(g, a, b)));
      break;
    case MTF_BIN_MINIMUM:
      if (want_a) mtf_grad_accumulate(ctx, a, mtf_multiply(g, dy, mtf_less_equal(g, a, b)));
      if (want_b) mtf_grad_accumulate(ctx, b, mtf_multiply(g, dy, mtf_less(g, b, a)));
      break;
    case MTF_BIN_EQUAL:
    case MTF_BIN_LESS_EQUAL:
    case MTF_BIN_GREATER:
    case MTF_BIN_LESS: break;
  }
}

static int binary_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  /* Sums and differences of partial sums over the same axes stay partial: one allreduce later. */
  mtf_axis_set pa = mtf_lowering_pending(lw, n->inputs[0]), pb = mtf_lowering_pending(lw, n->inputs[1]);
  int linear = n->params.binary.fn == MTF_BIN_ADD || n->params.binary.fn == MTF_BIN_SUB;
  return mtf_lower_local(lw, node, linear && pa != 0 && pa == pb);
}

static double binary_value(mtf_binary_kind fn, double u, double v) {
  switch (fn) {
    case MTF_BIN_ADD: return u + v;
    case MTF_BIN_SUB: return u - v;
    case MTF_BIN_MUL: return u * v;
    case MTF_BIN_DIV: return u / v;
    case MTF_BIN_EQUAL: return u == v;
    case MTF_BIN_LESS_EQUAL: return u <= v;
    case MTF_BIN_GREATER: return u > v;
    case MTF_BIN_LESS: return u < v;
    case MTF_BIN_MAXIMUM: return u >= v ? u : v;
    case MTF_BIN_MINIMUM: return u <= v ? u : v;
  }
  return NAN;
}

static void binary_reference(const mtf_ref_args *a) {
  const mtf_shape *s = &a->n->shape;
  int64_t index[MTF_MAX_RANK] = {0};
  do {
    double u = a->in[0][mtf_ref_offset(s, index, a->in_shape[0])], v = a->in[1][mtf_ref_offset(s, index, a->in_shape[1])];
    a->out[mtf_ref_offset(s, index, s)] = binary_value(a->n->params.binary.fn, u, v);
  } while (mtf_ref_next(s, index));
}

const mtf_op_def mtf_op_binary = {"binary", MTF_DIM_NONE, union_infer, binary_gradient, binary_lower, mtf_op_flops_elements, NULL,
                                  binary_reference, 0, 0, 1, 0};

/* ---- masked fill ---- */
mtf_tensor mtf_masked_fill(mtf_graph *g, mtf_tensor x, mtf_tensor mask, float fill) {
  mtf_op_params p = {.fill = {fill}};
  mtf_tensor in[2] = {x, mask};
  return mtf_graph_add_op(g, MTF_OP_MASKED_FILL, 2, in, &p, NULL);
}

mtf_tensor mtf_causal_mask(mtf_graph *g, mtf_tensor x, const char *query_dim, const char *memory_dim) {
  if (!mtf_graph_check(g, x, "causal_mask")) return MTF_NO_TENSOR;
  const mtf_shape *s = &g->nodes[x].shape;
  int q = mtf_shape_index_of(s, query_dim), m = mtf_shape_index_of(s, memory_dim);
  if (q < 0 || m < 0) {
    char text[MTF_SHAPE_STR_MAX];
    return mtf_graph_fail(g, MTF_ERR_INVALID, "causal_mask of '%s' %s: no dimension '%s'", g->nodes[x].name,
                          mtf_shape_format(s, text, sizeof text), q < 0 ? query_dim : memory_dim);
  }
  mtf_dim qd = s->dims[q], md = s->dims[m];
  mtf_tensor allowed = mtf_less_equal(g, mtf_range(g, &md), mtf_range(g, &qd)); /* [memory, query] */
  return mtf_masked_fill(g, x, allowed, -1e9f);
}

static int masked_fill_infer(mtf_graph *g, mtf_node *n) {
  const mtf_shape *x = &g->nodes[n->inputs[0]].shape, *mask = &g->nodes[n->inputs[1]].shape;
  if (!mtf_op_float_inputs(g, n, 0, 1)) return g->error.code;
  if (!mtf_op_dims_within(g, mask, x, "masked_fill", "mask")) return g->error.code;
  n->shape = *x;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static void masked_fill_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  if (mtf_grad_wanted(ctx, &n, 0)) mtf_grad_accumulate(ctx, n.inputs[0], mtf_multiply(ctx->g, dy, n.inputs[1]));
}

static int local_lower(mtf_lowering *lw, int node) { return mtf_lower_local(lw, node, 0); }

static void masked_fill_reference(const mtf_ref_args *a) {
  const mtf_shape *s = &a->n->shape;
  int64_t index[MTF_MAX_RANK] = {0};
  do {
    int64_t o = mtf_ref_offset(s, index, s);
    a->out[o] = a->in[1][mtf_ref_offset(s, index, a->in_shape[1])] != 0 ? a->in[0][o] : a->n->params.fill.value;
  } while (mtf_ref_next(s, index));
}

const mtf_op_def mtf_op_masked_fill = {"masked_fill", MTF_DIM_NONE, masked_fill_infer, masked_fill_gradient, local_lower,
                                       mtf_op_flops_elements, NULL, masked_fill_reference, 0, 0, 0, 0};

/* ---- constants, ranges, broadcasts, random masks ---- */
static int source_infer(mtf_graph *g, mtf_node *n) {
  (void)g;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static void constant_reference(const mtf_ref_args *a) {
  int64_t n = mtf_shape_num_elements(&a->n->shape);
  for (int64_t e = 0; e < n; e++) a->out[e] = a->n->params.constant.value;
}

const mtf_op_def mtf_op_constant = {"constant", MTF_DIM_NONE, source_infer, NULL, local_lower, mtf_op_flops_elements, NULL, constant_reference, 0, 0, 0, 0};

static void range_reference(const mtf_ref_args *a) {
  int64_t n = mtf_shape_num_elements(&a->n->shape);
  for (int64_t e = 0; e < n; e++) a->out[e] = (double)e;
}

const mtf_op_def mtf_op_range = {"range", MTF_DIM_NONE, source_infer, NULL, local_lower, mtf_op_flops_elements, NULL, range_reference, 0, 0, 0, 0};

mtf_tensor mtf_constant(mtf_graph *g, const mtf_shape *shape, float value) {
  mtf_op_params p = {.constant = {value}};
  return mtf_graph_add_op(g, MTF_OP_CONSTANT, 0, NULL, &p, shape);
}

mtf_tensor mtf_range(mtf_graph *g, const mtf_dim *dim) {
  mtf_shape shape = {0};
  shape.rank = 1;
  shape.dims[0] = *dim;
  return mtf_graph_add_op(g, MTF_OP_RANGE, 0, NULL, NULL, &shape);
}

mtf_tensor mtf_broadcast(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  return mtf_graph_add_op(g, MTF_OP_BROADCAST, 1, &x, NULL, output_shape);
}

static int broadcast_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0)) return g->error.code;
  n->dtype = MTF_F32;
  return mtf_op_dims_within(g, &g->nodes[n->inputs[0]].shape, &n->shape, "broadcast", "input") ? MTF_OK
                                                                                                 : g->error.code;
}

static void broadcast_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_grad_accumulate(ctx, ctx->g->nodes[self].inputs[0], dy);
}

static void broadcast_reference(const mtf_ref_args *a) {
  const mtf_shape *s = &a->n->shape;
  int64_t index[MTF_MAX_RANK] = {0};
  do a->out[mtf_ref_offset(s, index, s)] = a->in[0][mtf_ref_offset(s, index, a->in_shape[0])];
  while (mtf_ref_next(s, index));
}

const mtf_op_def mtf_op_broadcast = {"broadcast", MTF_DIM_NONE, broadcast_infer, broadcast_gradient, local_lower, mtf_op_flops_elements, NULL,
                                     broadcast_reference, 0, 0, 0, 0};

mtf_tensor mtf_random_keep(mtf_graph *g, const mtf_shape *shape, float keep, uint64_t key) {
  mtf_op_params p = {.random = {keep, key}};
  return mtf_graph_add_op(g, MTF_OP_RANDOM_KEEP, 0, NULL, &p, shape);
}

static void random_reference(const mtf_ref_args *a) {
  const mtf_shape *s = &a->n->shape;
  int64_t n = mtf_shape_num_elements(s), index[MTF_MAX_RANK] = {0};
  for (int64_t e = 0; e < n; e++, mtf_ref_next(s, index)) {
    int64_t at = e; /* the element's row-major index in the whole tensor */
    if (a->random_offsets) {
      at = 0;
      for (int d = 0; d < s->rank; d++) at = at * a->random_dims[d] + a->random_offsets[d] + index[d];
    }
    a->out[e] = mtf_uniform01(a->g->seed, a->n->params.random.key, (uint64_t)at) < (double)a->n->params.random.keep;
  }
}

const mtf_op_def mtf_op_random_keep = {"random", MTF_DIM_NONE, source_infer, NULL, local_lower, mtf_op_flops_elements, NULL, random_reference, 0, 0, 0, 0};

mtf_tensor mtf_dropout(mtf_graph *g, mtf_tensor x, float rate, uint64_t key) {
  if (!mtf_graph_check(g, x, "dropout")) return MTF_NO_TENSOR;
  if (rate <= 0.0f) return x;
  if (rate >= 1.0f) return mtf_graph_fail(g, MTF_ERR_INVALID, "dropout rate %g must be below 1", (double)rate);
  mtf_shape shape = g->nodes[x].shape;
  mtf_tensor keep = mtf_random_keep(g, &shape, 1.0f - rate, key);
  return mtf_multiply(g, x, mtf_scalar_multiply(g, keep, 1.0f / (1.0f - rate)));
}
