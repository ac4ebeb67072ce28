/* Optimizers as graph ops (formulas in optimizer.h). Everything is expressed with the public builder
 * calls, so the engine lowers and shards it like the model: no per-layout code here. */
#include "train/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const mtf_shape scalar_shape = {0};

static const char *const optimizer_names[] = {"adafactor", "adamw", "sgd"}; /* by mtf_optimizer_kind */
enum { OPTIMIZER_KINDS = sizeof optimizer_names / sizeof optimizer_names[0] };

void mtf_optimizer_defaults(mtf_optimizer_kind kind, mtf_optimizer_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = kind;
  cfg->beta1 = kind == MTF_OPT_ADAMW ? 0.9f : 0.0f; /* Adafactor's default has no first moment */
  cfg->beta2 = 0.999f;
  cfg->epsilon = 1e-8f;
  cfg->weight_decay = kind == MTF_OPT_ADAMW ? 0.01f : 0.0f;
  cfg->decay_rate = 0.8f;
  cfg->clipping_threshold = 1.0f;
  cfg->epsilon1 = 1e-30f;
  cfg->epsilon2 = 1e-3f;
  cfg->multiply_by_parameter_scale = 1;
  cfg->min_dim_size_to_factor = 128; /* Mesh TF's default: smaller variables keep a full second moment */
}

const char *mtf_optimizer_kind_name(mtf_optimizer_kind kind) {
  return (int)kind >= 0 && (int)kind < OPTIMIZER_KINDS ? optimizer_names[kind] : "unknown";
}

/* Checks lo <= value < hi (or <= hi when hi_inclusive); NaN fails. */
static int check_range(float value, float lo, float hi, int hi_inclusive, const char *optimizer, const char *what,
                       mtf_error *err) {
  int ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  if (ok) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_INVALID, "%s optimizer: %s is %g, which is outside [%g, %g%s", optimizer, what,
                       (double)value, (double)lo, (double)hi, hi_inclusive ? "]" : ")");
}

int mtf_optimizer_validate(const mtf_optimizer_config *cfg, mtf_error *err) {
  if ((int)cfg->kind < 0 || (int)cfg->kind >= OPTIMIZER_KINDS)
    return mtf_error_set(err, MTF_ERR_INVALID, "optimizer: unknown kind %d (valid: adafactor, adamw, sgd)",
                         (int)cfg->kind);
  const char *name = optimizer_names[cfg->kind];
  MTF_CHECK(check_range(cfg->clip_grad_norm, 0, INFINITY, 1, name, "clip_grad_norm", err));
  switch (cfg->kind) {
    case MTF_OPT_SGD: return check_range(cfg->momentum, 0, 1, 0, name, "momentum", err);
    case MTF_OPT_ADAMW:
      MTF_CHECK(check_range(cfg->beta1, 0, 1, 0, name, "beta1", err));
      MTF_CHECK(check_range(cfg->beta2, 0, 1, 0, name, "beta2", err));
      MTF_CHECK(check_range(cfg->epsilon, 0, INFINITY, 1, name, "epsilon", err));
      return check_range(cfg->weight_decay, 0, INFINITY, 1, name, "weight_decay", err);
    case MTF_OPT_ADAFACTOR:
      MTF_CHECK(check_range(cfg->beta1, 0, 1, 0, name, "beta1", err));
      MTF_CHECK(check_range(cfg->decay_rate, 0, INFINITY, 1, name, "decay_rate", err));
      MTF_CHECK(check_range(cfg->clipping_threshold, 0, INFINITY, 1, name, "clipping_threshold", err));
      MTF_CHECK(check_range(cfg->epsilon1, 0, INFINITY, 1, name, "epsilon1", err));
      MTF_CHECK(check_range(cfg->epsilon2, 0, INFINITY, 1, name, "epsilon2", err));
      if (cfg->min_dim_size_to_factor < 0)
        return mtf_error_set(err, MTF_ERR_INVALID, "adafactor optimizer: min_dim_size_to_factor is %lld, must be >= 0",
                             (long long)cfg->min_dim_size_to_factor);
      return MTF_OK;
  }
  return MTF_OK;
}

/* ---- small graph helpers ---- */

/* sum(x^2) as the contraction of x with itself: one read of x (a dot product in the einsum kernel) instead of
 * a squared copy and a reduction over it; over split dims the engine adds the allreduce. */
static mtf_tensor sum_of_squares(mtf_graph *g, mtf_tensor x) { return mtf_einsum2(g, x, x, &scalar_shape); }

static mtf_tensor rms(mtf_graph *g, mtf_tensor x) {
  double n = (double)mtf_shape_num_elements(mtf_tensor_shape(g, x));
  return mtf_sqrt(g, mtf_scalar_multiply(g, sum_of_squares(g, x), (float)(1.0 / n)));
}

/* max(x, c) = c + relu(x - c): the engine has no maximum op, and this form keeps x's shape. */
static mtf_tensor max_with_constant(mtf_graph *g, mtf_tensor x, float c) {
  return mtf_scalar_add(g, mtf_relu(g, mtf_scalar_add(g, x, -c)), c);
}

/* decay * old + (1 - decay) * (fresh + add), decay a scalar tensor of the step: one fused pass. */
static mtf_tensor moving_average(mtf_graph *g, mtf_tensor old, mtf_tensor fresh, mtf_tensor decay, float add) {
  return mtf_moving_average(g, old, fresh, decay, 0.0f, 1, add);
}

/* A zero-initialised slot variable "<variable>/<slot>" of the given shape. */
static mtf_tensor make_slot(mtf_graph *g, mtf_tensor var, const char *slot, const mtf_shape *shape, mtf_error *err) {
  char name[256];
  snprintf(name, sizeof name, "%s/%s", mtf_tensor_name(g, var), slot);
  mtf_tensor t = mtf_variable(g, name, shape, MTF_INIT_ZEROS, 0.0f);
  if (t == MTF_NO_TENSOR) return MTF_NO_TENSOR;
  if (strcmp(mtf_tensor_name(g, t), name) != 0) {
    mtf_error_set(err, MTF_ERR_INVALID,
                  "optimizer slot '%s' is longer than a tensor name may be (%zu characters): give variable '%s' a "
                  "shorter name",
                  name, strlen(mtf_tensor_name(g, t)), mtf_tensor_name(g, var));
    return MTF_NO_TENSOR;
  }
  return t;
}

/* ---- the optimizers: each returns MTF_OK or an error, and assigns the variable and its slots ---- */

static int apply_sgd(mtf_graph *g, const mtf_optimizer_config *cfg, mtf_tensor w, mtf_tensor grad, mtf_tensor lr,
                     mtf_error *err) {
  mtf_tensor direction = grad;
  if (cfg->momentum > 0) {
    mtf_tensor m = make_slot(g, w, "momentum", mtf_tensor_shape(g, w), err);
    if (m == MTF_NO_TENSOR) return err->code ? err->code : mtf_graph_status(g, err);
    direction = mtf_add(g, mtf_scalar_multiply(g, m, cfg->momentum), grad);
    mtf_assign(g, m, direction);
  }
  return mtf_assign(g, w, mtf_subtract(g, w, mtf_multiply(g, direction, lr)));
}

/* Scalars of the step shared by every variable's update, built once rather than once per variable. */
typedef struct step_scalars {
  mtf_tensor step;  /* the 1-based step t (adamw's bias corrections come from it inside adam_update) */
  mtf_tensor decay; /* adafactor: 1 - t^-decay_rate */
} step_scalars;

/* Three fused passes: each moment (a slot's new value, so a node of its own), then the variable. */
static int apply_adamw(mtf_graph *g, const mtf_optimizer_config *cfg, mtf_tensor w, mtf_tensor grad, mtf_tensor lr,
                       const step_scalars *scalars, mtf_error *err) {
  const mtf_shape shape = *mtf_tensor_shape(g, w); /* a copy: adding the slots may move the graph's nodes */
  mtf_tensor m = make_slot(g, w, "adam_m", &shape, err);
  mtf_tensor v = m == MTF_NO_TENSOR ? MTF_NO_TENSOR : make_slot(g, w, "adam_v", &shape, err);
  if (v == MTF_NO_TENSOR) return err->code ? err->code : mtf_graph_status(g, err);
  mtf_tensor new_m = mtf_moving_average(g, m, grad, MTF_NO_TENSOR, cfg->beta1, 1, 0.0f);
  mtf_tensor new_v = mtf_moving_average(g, v, grad, MTF_NO_TENSOR, cfg->beta2, 2, 0.0f);
  mtf_assign(g, m, new_m);
  mtf_assign(g, v, new_v);
  return mtf_assign(g, w, mtf_adam_update(g, w, new_m, new_v, lr, scalars->step, cfg->beta1, cfg->beta2, cfg->epsilon,
                                          cfg->weight_decay));
}

/* The two dims Adafactor factors over: the two largest, ties going to the earlier dims (Mesh TF sorts the
 * dims by size with a stable sort), returned in shape order as row < col. Returns 0 when the variable
 * keeps an unfactored second moment: fewer than 2 dims, or the second largest below min_size. */
static int factored_dims(const mtf_shape *shape, int64_t min_size, int *row, int *col) {
  if (shape->rank < 2) return 0;
  int first = -1, second = -1; /* largest, second largest */
  for (int i = 0; i < shape->rank; i++) {
    int64_t size = shape->dims[i].size;
    if (first < 0 || size > shape->dims[first].size) {
      second = first;
      first = i;
    } else if (second < 0 || size > shape->dims[second].size) {
      second = i;
    }
  }
  if (shape->dims[second].size < min_size) return 0;
  *row = first < second ? first : second;
  *col = first < second ? second : first;
  return 1;
}

static int apply_adafactor(mtf_graph *g, const mtf_optimizer_config *cfg, mtf_tensor w, mtf_tensor grad,
                           mtf_tensor lr, const step_scalars *scalars, mtf_error *err) {
  const mtf_shape shape = *mtf_tensor_shape(g, w);
  mtf_tensor decay = scalars->decay;
  mtf_tensor row_factor = MTF_NO_TENSOR, col_factor = MTF_NO_TENSOR; /* the update is g row_factor col_factor */
  int row, col;
  if (factored_dims(&shape, cfg->min_dim_size_to_factor, &row, &col)) {
    mtf_shape without_col, without_row, without_both;
    if (mtf_shape_remove(&shape, shape.dims[col].name, &without_col, err) ||
        mtf_shape_remove(&shape, shape.dims[row].name, &without_row, err) ||
        mtf_shape_remove(&without_col, shape.dims[row].name, &without_both, err))
      return err->code;
    mtf_tensor vr = make_slot(g, w, "adafactor_vr", &without_col, err);
    mtf_tensor vc = vr == MTF_NO_TENSOR ? MTF_NO_TENSOR : make_slot(g, w, "adafactor_vc", &without_row, err);
    if (vc == MTF_NO_TENSOR) return err->code ? err->code : mtf_graph_status(g, err);
    /* mean(g^2 + epsilon1) = mean(g^2) + epsilon1: the epsilon goes into the moving average's add. (Contractions
     * of g with itself would not write g^2, but the CPU's einsum is 4x slower at these row and column sums
     * than a square and two reductions.) */
    mtf_tensor grad_squared = mtf_square(g, grad);
    mtf_tensor new_vr = moving_average(g, vr, mtf_reduce_mean(g, grad_squared, &without_col), decay, cfg->epsilon1);
    mtf_tensor new_vc = moving_average(g, vc, mtf_reduce_mean(g, grad_squared, &without_row), decay, cfg->epsilon1);
    mtf_assign(g, vr, new_vr);
    mtf_assign(g, vc, new_vc);
    /* v = vr * vc / mean_row(vr), applied as two rsqrt factors (small tensors) so the update keeps the
     * gradient's dim order. */
    row_factor = mtf_rsqrt(g, mtf_divide(g, new_vr, mtf_reduce_mean(g, new_vr, &without_both)));
    col_factor = mtf_rsqrt(g, new_vc);
  } else {
    mtf_tensor v = make_slot(g, w, "adafactor_v", &shape, err);
    if (v == MTF_NO_TENSOR) return err->code ? err->code : mtf_graph_status(g, err);
    mtf_tensor new_v = mtf_moving_average(g, v, grad, decay, 0.0f, 2, cfg->epsilon1); /* of s = g^2 + epsilon1 */
    mtf_assign(g, v, new_v);
    row_factor = mtf_rsqrt(g, new_v);
  }
  /* The clipping and the step size are scalars: combined first, so the update u = g row_factor col_factor is
   * never written: its squares are summed from g (adafactor_squares) and w - step_size u is one pass
   * (adafactor_update). */
  mtf_tensor step_size = lr;
  if (cfg->multiply_by_parameter_scale)
    step_size = mtf_multiply(g, lr, max_with_constant(g, rms(g, w), cfg->epsilon2));
  if (cfg->clipping_threshold > 0) {
    double n = (double)mtf_shape_num_elements(&shape);
    mtf_tensor update_rms =
        mtf_sqrt(g, mtf_scalar_multiply(g, mtf_adafactor_squares(g, grad, row_factor, col_factor), (float)(1.0 / n)));
    step_size = mtf_divide(
        g, step_size, max_with_constant(g, mtf_scalar_multiply(g, update_rms, 1.0f / cfg->clipping_threshold), 1.0f));
  }
  if (cfg->beta1 <= 0) return mtf_assign(g, w, mtf_adafactor_update(g, w, grad, step_size, row_factor, col_factor));
  mtf_tensor update = mtf_multiply(g, grad, row_factor);
  if (col_factor != MTF_NO_TENSOR) update = mtf_multiply(g, update, col_factor);
  mtf_tensor m = make_slot(g, w, "adafactor_m", &shape, err); /* a first moment: the update is a value of its own */
  if (m == MTF_NO_TENSOR) return err->code ? err->code : mtf_graph_status(g, err);
  mtf_tensor subtrahend = mtf_moving_average(g, m, mtf_multiply(g, update, step_size), MTF_NO_TENSOR, cfg->beta1, 1, 0.0f);
  mtf_assign(g, m, subtrahend);
  return mtf_assign(g, w, mtf_subtract(g, w, subtrahend));
}

/* ---- global gradient norm and the entry point ---- */

/* sqrt of the sum of every gradient element squared: a reduce_sum to a scalar, whose allreduce over split
 * dims the engine adds, so a sharded element is counted once and a replicated one is not counted twice. */
static mtf_tensor global_norm(mtf_graph *g, int n, const mtf_tensor *grads, int policy_sums) {
  if (n == 0) return mtf_constant(g, &scalar_shape, 0.0f);
  mtf_tensor sum = MTF_NO_TENSOR;
  for (int i = 0; i < n; i++) {
    /* the einsum alone: its readers (the adds) outside the policy keep the partial sums float32 */
    mtf_graph_set_policy_sums(g, policy_sums);
    mtf_tensor part = sum_of_squares(g, grads[i]);
    mtf_graph_set_policy_sums(g, 0);
    sum = i == 0 ? part : mtf_add(g, sum, part);
  }
  return mtf_sqrt(g, sum);
}

static int check_scalar(const mtf_graph *g, mtf_tensor t, const char *what, mtf_error *err) {
  const mtf_shape *shape = mtf_tensor_shape(g, t);
  if (!shape) return mtf_error_set(err, MTF_ERR_INVALID, "optimizer: %s (tensor %d) is not a tensor of the graph", what, t);
  if (shape->rank != 0) {
    char s[MTF_SHAPE_STR_MAX];
    return mtf_error_set(err, MTF_ERR_INVALID, "optimizer: %s '%s' has shape %s; it must be a scalar (shape [])", what,
                         mtf_tensor_name(g, t), mtf_shape_format(shape, s, sizeof s));
  }
  return MTF_OK;
}

int mtf_optimizer_apply(mtf_graph *g, const mtf_optimizer_config *cfg, int n, const mtf_tensor *vars,
                        const mtf_tensor *grads, mtf_tensor learning_rate, mtf_tensor step, mtf_tensor *grad_norm,
                        mtf_error *err) {
  mtf_error local;
  if (!err) err = &local;
  mtf_error_clear(err);
  if (grad_norm) *grad_norm = MTF_NO_TENSOR;
  MTF_CHECK(mtf_graph_status(g, err));
  MTF_CHECK(mtf_optimizer_validate(cfg, err));
  MTF_CHECK(check_scalar(g, learning_rate, "learning rate", err));
  MTF_CHECK(check_scalar(g, step, "step", err));
  for (int i = 0; i < n; i++) {
    const mtf_shape *vs = mtf_tensor_shape(g, vars[i]), *gs = mtf_tensor_shape(g, grads[i]);
    if (!vs || !gs)
      return mtf_error_set(err, MTF_ERR_INVALID, "optimizer: variable %d or its gradient is not a tensor of the graph", i);
    if (!mtf_shape_equal(vs, gs)) {
      char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
      return mtf_error_set(err, MTF_ERR_INVALID, "optimizer: gradient '%s' %s does not have the shape of variable '%s' %s",
                           mtf_tensor_name(g, grads[i]), mtf_shape_format(gs, b, sizeof b), mtf_tensor_name(g, vars[i]),
                           mtf_shape_format(vs, a, sizeof a));
    }
  }
  /* lr * (0 * step + 1) is lr exactly, but it makes every optimizer read step: a session refuses inputs its
   * plan does not use, and a training loop should feed the same inputs whatever the optimizer (SGD would
   * otherwise leave step unused). */
  learning_rate = mtf_multiply(g, learning_rate, mtf_scalar_add(g, mtf_scalar_multiply(g, step, 0.0f), 1.0f));
  mtf_tensor norm = MTF_NO_TENSOR, clip_scale = MTF_NO_TENSOR;
  /* A bf16 run without clipping builds the norm after the updates: an adam_update, which reads its gradient,
   * can then sum the squares in the same pass (lower/fuse_moments.c); an fp32 run's plan stays as it was. */
  int norm_last = cfg->policy_sums && cfg->clip_grad_norm <= 0;
  if ((grad_norm && !norm_last) || cfg->clip_grad_norm > 0)
    norm = mtf_set_name(g, global_norm(g, n, grads, cfg->policy_sums), "optimizer/grad_norm");
  if (cfg->clip_grad_norm > 0) {
    /* min(1, c / (norm + 1e-6)) = c / max(norm + 1e-6, c) */
    float c = cfg->clip_grad_norm;
    clip_scale = mtf_divide(g, mtf_constant(g, &scalar_shape, c), max_with_constant(g, mtf_scalar_add(g, norm, 1e-6f), c));
  }
  step_scalars scalars = {step, MTF_NO_TENSOR};
  if (cfg->kind == MTF_OPT_ADAFACTOR) {
    /* mixing = t^-decay_rate = exp(-decay_rate ln t): exactly 1 at t = 1, so the first step sees v = g^2. */
    mtf_tensor mixing = mtf_exp(g, mtf_scalar_multiply(g, mtf_log(g, step), -cfg->decay_rate));
    scalars.decay = mtf_scalar_add(g, mtf_scalar_multiply(g, mixing, -1.0f), 1.0f);
  }
  for (int i = 0; i < n; i++) {
    mtf_tensor grad = clip_scale == MTF_NO_TENSOR ? grads[i] : mtf_multiply(g, grads[i], clip_scale);
    int rc = MTF_OK;
    switch (cfg->kind) {
      case MTF_OPT_SGD: rc = apply_sgd(g, cfg, vars[i], grad, learning_rate, err); break;
      case MTF_OPT_ADAMW: rc = apply_adamw(g, cfg, vars[i], grad, learning_rate, &scalars, err); break;
      case MTF_OPT_ADAFACTOR: rc = apply_adafactor(g, cfg, vars[i], grad, learning_rate, &scalars, err); break;
    }
    if (rc == MTF_OK) rc = mtf_graph_status(g, err);
    if (rc != MTF_OK)
      return mtf_error_prefix(err, "%s update of '%s'", optimizer_names[cfg->kind], mtf_tensor_name(g, vars[i]));
  }
  if (grad_norm && norm_last) norm = mtf_set_name(g, global_norm(g, n, grads, cfg->policy_sums), "optimizer/grad_norm");
  if (grad_norm) *grad_norm = norm;
  return mtf_graph_status(g, err);
}
