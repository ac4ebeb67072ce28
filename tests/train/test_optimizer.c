/* Each optimizer, run by the engine on one rank for a few steps, against a naive double-precision
 * implementation of the formulas written here (independent of the graph code): parameters after every
 * step and the global gradient norm. Then the configuration and argument errors. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "train_case.h"

#define STEPS 5

/* ---- the reference: variables of 1 or 2 dims; a 2-D variable with both dims >= min_factor is factored
 * over (dim 0, dim 1) ---- */
typedef struct ref_var {
  int64_t rows, cols, n; /* a 1-D variable has rows = 1 */
  int factored;
  double *w, *m, *v, *vr, *vc;
} ref_var;

static double *zeros(int64_t n) { return calloc(n > 0 ? (size_t)n : 1, sizeof(double)); }

static void ref_init(ref_var *r, const mtf_shape *shape, const float *initial, int64_t min_factor) {
  r->factored = shape->rank == 2 && shape->dims[0].size >= min_factor && shape->dims[1].size >= min_factor;
  r->rows = shape->rank == 2 ? shape->dims[0].size : 1;
  r->cols = shape->dims[shape->rank - 1].size;
  r->n = r->rows * r->cols;
  r->w = zeros(r->n), r->m = zeros(r->n), r->v = zeros(r->n), r->vr = zeros(r->rows), r->vc = zeros(r->cols);
  for (int64_t e = 0; e < r->n; e++) r->w[e] = initial[e];
}

static void ref_free(ref_var *r) {
  free(r->w), free(r->m), free(r->v), free(r->vr), free(r->vc);
}

static double ref_rms(const double *x, int64_t n) {
  double s = 0;
  for (int64_t e = 0; e < n; e++) s += x[e] * x[e];
  return sqrt(s / (double)n);
}

static void ref_adafactor(const mtf_optimizer_config *c, ref_var *r, const double *g, double lr, double t) {
  double decay = 1.0 - pow(t, -(double)c->decay_rate), eps1 = c->epsilon1;
  double *u = zeros(r->n);
  if (r->factored) {
    for (int64_t i = 0; i < r->rows; i++) {
      double mean = 0;
      for (int64_t j = 0; j < r->cols; j++) mean += (g[i * r->cols + j] * g[i * r->cols + j] + eps1) / (double)r->cols;
      r->vr[i] = decay * r->vr[i] + (1 - decay) * mean;
    }
    for (int64_t j = 0; j < r->cols; j++) {
      double mean = 0;
      for (int64_t i = 0; i < r->rows; i++) mean += (g[i * r->cols + j] * g[i * r->cols + j] + eps1) / (double)r->rows;
      r->vc[j] = decay * r->vc[j] + (1 - decay) * mean;
    }
    double vr_mean = 0;
    for (int64_t i = 0; i < r->rows; i++) vr_mean += r->vr[i] / (double)r->rows;
    for (int64_t i = 0; i < r->rows; i++)
      for (int64_t j = 0; j < r->cols; j++) u[i * r->cols + j] = g[i * r->cols + j] / sqrt(r->vr[i] * r->vc[j] / vr_mean);
  } else {
    for (int64_t e = 0; e < r->n; e++) {
      r->v[e] = decay * r->v[e] + (1 - decay) * (g[e] * g[e] + eps1);
      u[e] = g[e] / sqrt(r->v[e]);
    }
  }
  double denominator = c->clipping_threshold > 0 ? fmax(1.0, ref_rms(u, r->n) / c->clipping_threshold) : 1.0;
  double step_size = lr * (c->multiply_by_parameter_scale ? fmax((double)c->epsilon2, ref_rms(r->w, r->n)) : 1.0);
  for (int64_t e = 0; e < r->n; e++) {
    double subtrahend = step_size * u[e] / denominator;
    if (c->beta1 > 0) subtrahend = r->m[e] = c->beta1 * r->m[e] + (1 - (double)c->beta1) * subtrahend;
    r->w[e] -= subtrahend;
  }
  free(u);
}

/* One step over all variables; returns the gradient norm before clipping. */
static double ref_step(const mtf_optimizer_config *c, int n, ref_var *vars, double lr, int t) {
  double *grads[TRAIN_MAX_VARS], sum = 0;
  for (int i = 0; i < n; i++) {
    grads[i] = zeros(vars[i].n);
    for (int64_t e = 0; e < vars[i].n; e++) {
      grads[i][e] = (double)train_case_target(i, e) + vars[i].w[e];
      sum += grads[i][e] * grads[i][e];
    }
  }
  double norm = sqrt(sum);
  double scale = c->clip_grad_norm > 0 ? fmin(1.0, c->clip_grad_norm / (norm + 1e-6)) : 1.0;
  for (int i = 0; i < n; i++) {
    ref_var *r = &vars[i];
    double *g = grads[i];
    for (int64_t e = 0; e < r->n; e++) g[e] *= scale;
    if (c->kind == MTF_OPT_ADAFACTOR) {
      ref_adafactor(c, r, g, lr, t);
    } else if (c->kind == MTF_OPT_ADAMW) {
      double b1 = c->beta1, b2 = c->beta2;
      for (int64_t e = 0; e < r->n; e++) {
        r->m[e] = b1 * r->m[e] + (1 - b1) * g[e];
        r->v[e] = b2 * r->v[e] + (1 - b2) * g[e] * g[e];
        double m_hat = r->m[e] / (1 - pow(b1, t)), v_hat = r->v[e] / (1 - pow(b2, t));
        r->w[e] -= lr * (m_hat / (sqrt(v_hat) + c->epsilon) + c->weight_decay * r->w[e]);
      }
    } else {
      for (int64_t e = 0; e < r->n; e++) {
        r->m[e] = c->momentum * r->m[e] + g[e];
        r->w[e] -= lr * (c->momentum > 0 ? r->m[e] : g[e]);
      }
    }
    free(g);
  }
  return norm;
}

/* ---- the engine against the reference ---- */
static mtf_comm *self_comm;

static void check_against_reference(const char *what, const mtf_optimizer_config *cfg, int expect_clipping) {
  const char *names[] = {"layer_000/mlp/w", "layer_000/mlp/bias"};
  const char *shapes[] = {"a:3,b:4", "b:4"};
  train_case tc;
  mtf_error err;
  mtf_shape one = {0};
  mtf_layout_rules none = {0};
  train_history h;
  int rc = train_case_build(&tc, cfg, 2, names, shapes, &err);
  if (rc == MTF_OK) rc = train_case_run(&tc, &one, &none, self_comm, STEPS, &h, &err);
  CHECK(rc == MTF_OK);
  if (rc != MTF_OK) {
    fprintf(stderr, "%s: %s\n", what, err.msg);
    train_case_destroy(&tc);
    return;
  }
  ref_var ref[2];
  for (int i = 0; i < 2; i++) ref_init(&ref[i], &tc.shapes[i], h.initial[i], cfg->min_dim_size_to_factor);
  double worst = 0, worst_norm = 0, first_norm = 0;
  for (int t = 1; t <= STEPS; t++) {
    double norm = ref_step(cfg, 2, ref, (double)(float)train_case_learning_rate(t), t);
    if (t == 1) first_norm = norm;
    worst_norm = fmax(worst_norm, fabs(h.grad_norm[t - 1] - norm) / norm);
    for (int i = 0; i < 2; i++) {
      float want[64];
      for (int64_t e = 0; e < ref[i].n; e++) want[e] = (float)ref[i].w[e];
      worst = fmax(worst, relative_error(h.after[t - 1][i], want, ref[i].n));
    }
  }
  /* The update must have moved the parameters (a test of a no-op would pass the comparison too). */
  CHECK(relative_error(h.after[STEPS - 1][0], h.initial[0], h.sizes[0]) > 1e-2);
  if (expect_clipping) CHECK(first_norm > cfg->clip_grad_norm);
  printf("%-44s parameters: max relative error %.2e, gradient norm: %.2e (step-1 norm %.3f)\n", what, worst,
         worst_norm, first_norm);
  CHECK(worst <= 1e-5);
  CHECK(worst_norm <= 1e-5);
  for (int i = 0; i < 2; i++) ref_free(&ref[i]);
  train_history_free(&h);
  train_case_destroy(&tc);
}

/* ---- configuration and argument errors ---- */
static void check_errors(void) {
  mtf_error err;
  /* the names messages give, the config's choices text (test_config checks the choices' enum values) */
  CHECK(strcmp(mtf_optimizer_kind_name(MTF_OPT_ADAMW), "adamw") == 0);
  CHECK(strcmp(mtf_optimizer_kind_name(MTF_OPT_ADAFACTOR), "adafactor") == 0);
  CHECK(strcmp(mtf_optimizer_kind_name(MTF_OPT_SGD), "sgd") == 0);

  mtf_optimizer_config cfg;
  mtf_optimizer_defaults(MTF_OPT_ADAMW, &cfg);
  cfg.beta2 = 1.0f;
  CHECK(mtf_optimizer_validate(&cfg, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "adamw optimizer: beta2 is 1");
  mtf_optimizer_defaults(MTF_OPT_SGD, &cfg);
  cfg.clip_grad_norm = -1.0f;
  CHECK(mtf_optimizer_validate(&cfg, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "clip_grad_norm is -1");

  /* An invalid config reaches the caller of mtf_optimizer_apply. */
  const char *names[] = {"w"}, *shapes[] = {"a:3,b:4"};
  train_case tc;
  mtf_optimizer_defaults(MTF_OPT_ADAFACTOR, &cfg);
  cfg.decay_rate = -0.8f;
  CHECK(train_case_build(&tc, &cfg, 1, names, shapes, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "adafactor optimizer: decay_rate is -0.8");
  train_case_destroy(&tc);

  /* A slot name the graph would have to truncate. */
  const char *long_name[] = {"a_variable_name_long_enough_that_its_adafactor_slots_do_not_fit"};
  mtf_optimizer_defaults(MTF_OPT_ADAFACTOR, &cfg);
  CHECK(train_case_build(&tc, &cfg, 1, long_name, shapes, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "adafactor update of 'a_variable_name_long", "is longer than a tensor name may be",
                 "give variable");
  train_case_destroy(&tc);

  /* A gradient of the wrong shape, and a learning rate that is not a scalar. */
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape ws, other, scalar = {0};
  mtf_shape_parse("a:3,b:4", "w", &ws, NULL);
  mtf_shape_parse("b:4,a:3", "other", &other, NULL);
  mtf_tensor w = mtf_variable(g, "w", &ws, MTF_INIT_ZEROS, 0), wrong = mtf_input(g, "wrong_grad", &other);
  mtf_tensor lr = mtf_input(g, "lr", &scalar), step = mtf_input(g, "step", &scalar);
  mtf_optimizer_defaults(MTF_OPT_SGD, &cfg);
  CHECK(mtf_optimizer_apply(g, &cfg, 1, &w, &wrong, lr, step, NULL, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "gradient 'wrong_grad' [b:4, a:3] does not have the shape of variable 'w' [a:3, b:4]");
  CHECK(mtf_optimizer_apply(g, &cfg, 1, &w, &w, wrong, step, NULL, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "learning rate 'wrong_grad' has shape [b:4, a:3]; it must be a scalar");
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mtf_error err;
  mtf_shape one = {0};
  if (mtf_comm_mpi_create(MPI_COMM_SELF, &one, &self_comm, &err)) {
    fprintf(stderr, "communicator: %s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  mtf_optimizer_config cfg;
  mtf_optimizer_defaults(MTF_OPT_ADAFACTOR, &cfg);
  check_against_reference("adafactor (defaults: [a:3, b:4] unfactored)", &cfg, 0);
  /* These variables are far below Mesh TF's 128: factor them anyway, so the factored path runs here too
   * (test_adafactor_reference covers the default at full size). */
  cfg.min_dim_size_to_factor = 0;
  check_against_reference("adafactor (factored)", &cfg, 0);
  cfg.clipping_threshold = 0.5f; /* an RMS of about 1 then clips */
  cfg.multiply_by_parameter_scale = 0;
  cfg.beta1 = 0.6f;
  cfg.decay_rate = 0.5f;
  check_against_reference("adafactor (beta1, clip 0.5, no param scale)", &cfg, 0);
  mtf_optimizer_defaults(MTF_OPT_ADAFACTOR, &cfg);
  cfg.min_dim_size_to_factor = 0;
  cfg.clip_grad_norm = 1.0f;
  check_against_reference("adafactor + gradient clipping", &cfg, 1);

  mtf_optimizer_defaults(MTF_OPT_ADAMW, &cfg);
  cfg.weight_decay = 0.1f;
  check_against_reference("adamw (weight decay 0.1)", &cfg, 0);
  cfg.clip_grad_norm = 2.0f;
  check_against_reference("adamw + gradient clipping", &cfg, 1);

  mtf_optimizer_defaults(MTF_OPT_SGD, &cfg);
  check_against_reference("sgd", &cfg, 0);
  cfg.momentum = 0.9f;
  check_against_reference("sgd (momentum 0.9)", &cfg, 0);
  cfg.clip_grad_norm = 0.5f;
  check_against_reference("sgd (momentum 0.9) + gradient clipping", &cfg, 1);

  check_errors();
  mtf_comm_destroy(self_comm);
  MPI_Finalize();
  return check_summary();
}
