/* Fused optimizer updates: each is one elementwise pass per variable where the unfused form was 5-15 ops,
 * each a full pass over the variable's memory.
 *
 * A graph node has one output, so AdamW's step is three nodes, each assigned by the optimizer:
 *   m' = moving_average(m, g; beta1, power 1)          slot adam_m
 *   v' = moving_average(v, g; beta2, power 2)          slot adam_v
 *   w' = adam_update(w, m', v', lr, step)              the variable
 * The moments are their own nodes because they are values of their own (the slots' new contents); the
 * update reads them instead of recomputing them. Adafactor uses moving_average for its second moments (full
 * or factored, decay a scalar tensor of the step) and its first moment, and two ops of its own over the full
 * variable: adafactor_squares, the sum of the update's squares for its RMS (clipping), read from g and the
 * factors without writing the update, and adafactor_update, w - step_size g a b in one pass (in place).
 *
 * The learning rate and the step are scalar tensors (fed each run); the constants of the optimizer are
 * parameters. The bias corrections 1 - beta^t are computed in double from the step inside the op, so no
 * per-step graph scalars are needed.
 *
 * Neither op has a gradient: optimizer updates are built after mtf_gradients and never lie between a loss
 * and the tensors differentiated, so differentiating through one is a bug, reported as an error.
 * Lowering is local (each rank updates its own slice; the scalar inputs are replicated), with no
 * communication beyond summing a partial gradient first. */
#include <math.h>
#include <string.h>

#include "ops/op_def.h"
#include "ops/optimizer_ops.h"

static const char *const no_gradient_message =
    "%s '%s' has no gradient: it is an optimizer update, built after mtf_gradients; a loss must not depend on it";

static void no_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  (void)dy;
  mtf_graph *g = ctx->g;
  mtf_graph_fail(g, MTF_ERR_INVALID, no_gradient_message, mtf_op(g->nodes[self].kind)->name, g->nodes[self].name);
}

/* Fails unless input k of n has the shape of input 0 (same dims in the same order). */
static int same_as_first(mtf_graph *g, const mtf_node *n, int k) {
  const mtf_node *x = &g->nodes[n->inputs[k]], *first = &g->nodes[n->inputs[0]];
  if (mtf_shape_equal(&x->shape, &first->shape)) return 1;
  char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
  mtf_graph_fail(g, MTF_ERR_INVALID, "%s: '%s' %s must have the shape of '%s' %s", mtf_op(n->kind)->name, x->name,
                 mtf_shape_format(&x->shape, a, sizeof a), first->name, mtf_shape_format(&first->shape, b, sizeof b));
  return 0;
}

static int is_scalar(mtf_graph *g, const mtf_node *n, int k, const char *what) {
  const mtf_node *x = &g->nodes[n->inputs[k]];
  if (x->shape.rank == 0) return 1;
  char s[MTF_SHAPE_STR_MAX];
  mtf_graph_fail(g, MTF_ERR_INVALID, "%s: %s '%s' has shape %s; it must be a scalar (shape [])", mtf_op(n->kind)->name,
                 what, x->name, mtf_shape_format(&x->shape, s, sizeof s));
  return 0;
}

/* The updated slot or weight over the old one (moving_average's input 0, adam_update's w). */
static int in_place_lower(mtf_lowering *lw, int node) { return mtf_lower_local_in_place(lw, node, 0); }

/* ---- moving_average ---- */

mtf_tensor mtf_moving_average(mtf_graph *g, mtf_tensor old, mtf_tensor x, mtf_tensor decay, float beta, int power,
                              float add) {
  mtf_op_params p = {.moment = {beta, add, power}};
  mtf_tensor in[3] = {old, x, decay};
  return mtf_graph_add_op(g, MTF_OP_MOVING_AVERAGE, decay == MTF_NO_TENSOR ? 2 : 3, in, &p, NULL);
}

static int moving_average_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 2) || !same_as_first(g, n, 1)) return g->error.code;
  if (n->n_inputs == 3 && !is_scalar(g, n, 2, "the decay")) return g->error.code;
  if (n->params.moment.power != 1 && n->params.moment.power != 2) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "moving_average: power is %d; it must be 1 or 2", n->params.moment.power);
    return g->error.code;
  }
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* d * old + (1 - d) * (x^p + add): 2 multiplies and 2 adds, one more multiply for the square. */
static int64_t moving_average_flops(const mtf_step *s) {
  return (4 + (s->params.moment.power == 2)) * mtf_shape_num_elements(&s->out_shape);
}

static void moving_average_reference(const mtf_ref_args *a) {
  int64_t n = mtf_shape_num_elements(&a->n->shape);
  double d = a->n->n_inputs == 3 ? a->in[2][0] : (double)a->n->params.moment.beta, add = a->n->params.moment.add;
  for (int64_t e = 0; e < n; e++) {
    double x = a->in[1][e];
    a->out[e] = d * a->in[0][e] + (1 - d) * ((a->n->params.moment.power == 2 ? x * x : x) + add);
  }
}

const mtf_op_def mtf_op_moving_average = {"moving_average", MTF_DIM_NONE, moving_average_infer, no_gradient, in_place_lower,
                                          moving_average_flops, NULL, moving_average_reference, 0, 0, 0, 0};

/* ---- adam_update ---- */

mtf_tensor mtf_adam_update(mtf_graph *g, mtf_tensor w, mtf_tensor m, mtf_tensor v, mtf_tensor lr, mtf_tensor step,
                           float beta1, float beta2, float epsilon, float weight_decay) {
  mtf_op_params p = {.adam = {beta1, beta2, epsilon, weight_decay}};
  mtf_tensor in[5] = {w, m, v, lr, step};
  return mtf_graph_add_op(g, MTF_OP_ADAM_UPDATE, 5, in, &p, NULL);
}

static int adam_update_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 4) || !same_as_first(g, n, 1) || !same_as_first(g, n, 2) ||
      !is_scalar(g, n, 3, "the learning rate") || !is_scalar(g, n, 4, "the step"))
    return g->error.code;
  const float b1 = n->params.adam.beta1, b2 = n->params.adam.beta2;
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "adam_update: beta1 %g and beta2 %g must lie in [0, 1)", (double)b1, (double)b2);
    return g->error.code;
  }
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

double mtf_adam_bias_correction(double beta, double step) {
  /* 1 - beta^t as -expm1(t ln beta): exact where beta^t is near 1 (beta2 0.999 at t = 1). beta 0 means no
   * averaging, so nothing to correct (and ln 0 is -inf). */
  return beta > 0 ? -expm1(step * log(beta)) : 1.0;
}

/* m/c1, v/c2, sqrt, + eps, divide, wd * w, add, * lr, subtract. */
static int64_t adam_update_flops(const mtf_step *s) { return 9 * mtf_shape_num_elements(&s->out_shape); }

static void adam_update_reference(const mtf_ref_args *a) {
  int64_t n = mtf_shape_num_elements(&a->n->shape);
  double lr = a->in[3][0], t = a->in[4][0];
  double c1 = mtf_adam_bias_correction(a->n->params.adam.beta1, t);
  double c2 = mtf_adam_bias_correction(a->n->params.adam.beta2, t);
  double eps = a->n->params.adam.epsilon, wd = a->n->params.adam.weight_decay;
  for (int64_t e = 0; e < n; e++) {
    double w = a->in[0][e], m = a->in[1][e], v = a->in[2][e];
    a->out[e] = w - lr * ((m / c1) / (sqrt(v / c2) + eps) + wd * w);
  }
}

const mtf_op_def mtf_op_adam_update = {"adam_update", MTF_DIM_NONE, adam_update_infer, no_gradient, in_place_lower,
                                       adam_update_flops, NULL, adam_update_reference, 0, 0, 0, 0};

/* ---- adafactor_update, adafactor_squares ---- */

mtf_tensor mtf_adafactor_update(mtf_graph *g, mtf_tensor w, mtf_tensor grad, mtf_tensor step_size, mtf_tensor a,
                                mtf_tensor b) {
  mtf_op_params p = {0};
  mtf_tensor in[5] = {w, grad, step_size, a, b};
  return mtf_graph_add_op(g, MTF_OP_ADAFACTOR_UPDATE, b == MTF_NO_TENSOR ? 4 : 5, in, &p, NULL);
}

mtf_tensor mtf_adafactor_squares(mtf_graph *g, mtf_tensor grad, mtf_tensor a, mtf_tensor b) {
  mtf_op_params p = {0};
  mtf_tensor in[3] = {grad, a, b};
  return mtf_graph_add_op(g, MTF_OP_ADAFACTOR_SQUARES, b == MTF_NO_TENSOR ? 2 : 3, in, &p, NULL);
}

/* Input k of n: some of input `of`'s dims at their sizes (a factor broadcast over the others). */
static int factor_of(mtf_graph *g, const mtf_node *n, int k, int of) {
  const mtf_shape *f = &g->nodes[n->inputs[k]].shape, *x = &g->nodes[n->inputs[of]].shape;
  for (int d = 0; d < f->rank; d++) {
    int j = mtf_shape_index_of(x, f->dims[d].name);
    if (j >= 0 && x->dims[j].size == f->dims[d].size) continue;
    char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
    mtf_graph_fail(g, MTF_ERR_INVALID, "%s: factor '%s' %s must have only dims of '%s' %s, at their sizes",
                   mtf_op(n->kind)->name, g->nodes[n->inputs[k]].name, mtf_shape_format(f, a, sizeof a),
                   g->nodes[n->inputs[of]].name, mtf_shape_format(x, b, sizeof b));
    return 0;
  }
  return 1;
}

static int adafactor_update_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, n->n_inputs - 1) || !same_as_first(g, n, 1) ||
      !is_scalar(g, n, 2, "the step size") || !factor_of(g, n, 3, 0) || (n->n_inputs == 5 && !factor_of(g, n, 4, 0)))
    return g->error.code;
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static int adafactor_squares_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, n->n_inputs - 1) || !factor_of(g, n, 1, 0) ||
      (n->n_inputs == 3 && !factor_of(g, n, 2, 0)))
    return g->error.code;
  memset(&n->shape, 0, sizeof n->shape);
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* Each rank sums its slice of g: partial over the axes that split g (replicated along the others). */
static int adafactor_squares_lower(mtf_lowering *lw, int node) {
  MTF_CHECK(mtf_lower_local(lw, node, 0));
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  const mtf_shape *x = &mtf_lowering_graph(lw)->nodes[n->inputs[0]].shape;
  mtf_axis_set axes = 0;
  for (int d = 0; d < x->rank; d++) {
    int axis = mtf_lowering_split_axis(lw, n->inputs[0], x->dims[d].name);
    if (axis >= 0) axes |= 1u << axis;
  }
  if (axes) mtf_lower_set_pending(lw, node, axes);
  return MTF_OK;
}

/* g a b (2 multiplies; 1 with one factor), then times the step size and subtracted, or squared and summed. */
static int64_t adafactor_flops(const mtf_step *s) {
  int factors = s->n_in - (s->op == MTF_OP_ADAFACTOR_UPDATE ? 3 : 1);
  return (factors + 2) * mtf_shape_num_elements(&s->in_shape[0]); /* w or g: the same shape */
}

/* The CUDA kernel of adafactor_squares sums per block first: MTF_ADAFACTOR_PARTIALS doubles. */
static int64_t adafactor_squares_scratch(const mtf_step *s) {
  (void)s;
  return 2 * MTF_ADAFACTOR_PARTIALS;
}

/* Element `index` of g a b: g is input `g`, its factors the inputs from `factor` on (broadcast by name). */
static double adafactor_term(const mtf_ref_args *a, int g, int factor, const int64_t *index) {
  const mtf_shape *x = a->in_shape[g];
  double u = a->in[g][mtf_ref_offset(x, index, x)];
  for (int k = factor; k < a->n->n_inputs; k++) u *= a->in[k][mtf_ref_offset(x, index, a->in_shape[k])];
  return u;
}

/* Inputs w, g, step_size, a [, b]. */
static void adafactor_update_reference(const mtf_ref_args *a) {
  const mtf_shape *x = a->in_shape[0];
  double step = a->in[2][0];
  int64_t index[MTF_MAX_RANK] = {0};
  do {
    int64_t e = mtf_ref_offset(x, index, x);
    a->out[e] = a->in[0][e] - step * adafactor_term(a, 1, 3, index);
  } while (x->rank > 0 && mtf_ref_next(x, index));
}

/* Inputs g, a [, b]. */
static void adafactor_squares_reference(const mtf_ref_args *a) {
  const mtf_shape *x = a->in_shape[0];
  int64_t index[MTF_MAX_RANK] = {0};
  double sum = 0;
  do {
    double u = adafactor_term(a, 0, 1, index);
    sum += u * u;
  } while (x->rank > 0 && mtf_ref_next(x, index));
  a->out[0] = sum;
}

const mtf_op_def mtf_op_adafactor_update = {"adafactor_update", MTF_DIM_NONE, adafactor_update_infer, no_gradient,
                                            in_place_lower, adafactor_flops, NULL, adafactor_update_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_adafactor_squares = {"adafactor_squares", MTF_DIM_NONE, adafactor_squares_infer, no_gradient,
                                             adafactor_squares_lower, adafactor_flops, adafactor_squares_scratch,
                                             adafactor_squares_reference,
                                             0, 0, 0, 0};
