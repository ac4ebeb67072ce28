/* mtf's Adafactor (default configuration) against an independent double-precision implementation of Mesh
 * TensorFlow's AdafactorOptimizer, written here from its formulas (mesh_tensorflow/optimize.py):
 *   decay = 1 - t^-0.8 (t the 1-based step)                s = g^2 + 1e-30
 *   factored when the variable has >= 2 dims and its two largest dims (a stable sort by size, so ties go
 *   to the earlier dim) are both >= 128: with d0 the largest and d1 the second,
 *     vr = decay vr + (1 - decay) mean_d0(s),   vc = decay vc + (1 - decay) mean_d1(s)
 *     u  = g / sqrt(vr / mean_d1(vr)) / sqrt(vc)
 *   otherwise  v = decay v + (1 - decay) s,     u = g / sqrt(v)
 *   u /= max(1, rms(u) / 1.0);   w -= lr * max(rms(w), 1e-3) * u
 * The gradients are inputs fed each step (arbitrary values, with rows and columns of very different scales
 * so that factoring matters), so nothing but the optimizer is under test. Variables: a factored [r:160, c:128],
 * an unfactored [m:128, f:48] (a dim below 128), a zero-initialised 1-D [s:96] (parameter scale at its
 * 1e-3 floor), and [a:128, b:136, c:128] whose tie between a and c must factor over b and a.
 * Checks the parameters after step 1 and after each step up to 10 within 1e-5 (relative to the largest
 * parameter), and each step's update w_before - w_after within 1e-3 of the reference's update. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "mtf.h"
#include "train/optimizer.h"

#define N_VARS 4
#define STEPS 10
#define MAX_RANK 3

typedef struct var_spec {
  const char *name, *shape;
  mtf_init init;
  float scale;
} var_spec;

static const var_spec specs[N_VARS] = {
    {"emb/w", "r:160,c:128", MTF_INIT_NORMAL, 0.05f},
    {"mlp/wi", "m:128,f:48", MTF_INIT_NORMAL, 0.1f},
    {"norm/scale", "s:96", MTF_INIT_ZEROS, 0.0f},
    {"attn/w", "a:128,b:136,c:128", MTF_INIT_NORMAL, 0.02f},
};

/* ---- the reference (double precision, any rank up to 3, row-major) ---- */
typedef struct ref_var {
  int rank;
  int64_t dims[MAX_RANK], n;
  int factored, d0, d1; /* d0 the largest dim, d1 the second largest (stable: earlier dim first on ties) */
  double *w, *v, *vr, *vc;
} ref_var;

static void unravel(const ref_var *r, int64_t e, int64_t *idx) {
  for (int d = r->rank - 1; d >= 0; d--) {
    idx[d] = e % r->dims[d];
    e /= r->dims[d];
  }
}

/* The flat index of idx with dim `skip` removed (the index into a slot reduced over that dim). */
static int64_t ravel_without(const ref_var *r, const int64_t *idx, int skip) {
  int64_t flat = 0;
  for (int d = 0; d < r->rank; d++)
    if (d != skip) flat = flat * r->dims[d] + idx[d];
  return flat;
}

/* The same with two dims removed. */
static int64_t ravel_without2(const ref_var *r, const int64_t *idx, int skip_a, int skip_b) {
  int64_t flat = 0;
  for (int d = 0; d < r->rank; d++)
    if (d != skip_a && d != skip_b) flat = flat * r->dims[d] + idx[d];
  return flat;
}

static void ref_init(ref_var *r, const mtf_shape *shape, const float *initial) {
  r->rank = shape->rank;
  r->n = 1;
  for (int d = 0; d < r->rank; d++) r->n *= r->dims[d] = shape->dims[d].size;
  /* The two largest dims by a stable sort on size, descending. */
  int order[MAX_RANK];
  for (int d = 0; d < r->rank; d++) order[d] = d;
  for (int i = 1; i < r->rank; i++)
    for (int j = i; j > 0 && r->dims[order[j]] > r->dims[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  r->factored = r->rank >= 2 && r->dims[order[1]] >= 128;
  r->d0 = r->rank >= 2 ? order[0] : 0;
  r->d1 = r->rank >= 2 ? order[1] : 0;
  r->w = calloc((size_t)r->n, sizeof(double));
  r->v = calloc((size_t)r->n, sizeof(double));
  r->vr = calloc((size_t)r->n, sizeof(double)); /* over-allocated: n / dims[d0] are used */
  r->vc = calloc((size_t)r->n, sizeof(double));
  for (int64_t e = 0; e < r->n; e++) r->w[e] = initial[e];
}

static void ref_free(ref_var *r) { free(r->w), free(r->v), free(r->vr), free(r->vc); }

static double rms(const double *x, int64_t n) {
  double s = 0;
  for (int64_t e = 0; e < n; e++) s += x[e] * x[e];
  return sqrt(s / (double)n);
}

static void ref_step(ref_var *r, const float *grad, double lr, double t) {
  double decay = 1.0 - pow(t, -0.8), mixing = 1.0 - decay;
  double *u = malloc(sizeof(double) * (size_t)r->n);
  int64_t idx[MAX_RANK];
  if (r->factored) {
    int64_t n_vr = r->n / r->dims[r->d0], n_vc = r->n / r->dims[r->d1];
    double *mean_r = calloc((size_t)n_vr, sizeof(double)), *mean_c = calloc((size_t)n_vc, sizeof(double));
    for (int64_t e = 0; e < r->n; e++) {
      double s = (double)grad[e] * grad[e] + 1e-30;
      unravel(r, e, idx);
      mean_r[ravel_without(r, idx, r->d0)] += s / (double)r->dims[r->d0];
      mean_c[ravel_without(r, idx, r->d1)] += s / (double)r->dims[r->d1];
    }
    for (int64_t k = 0; k < n_vr; k++) r->vr[k] = decay * r->vr[k] + mixing * mean_r[k];
    for (int64_t k = 0; k < n_vc; k++) r->vc[k] = decay * r->vc[k] + mixing * mean_c[k];
    /* mean_d1(vr), indexed by the dims other than d0 and d1 (a scalar for a 2-D variable). */
    double *vr_mean = calloc((size_t)(n_vr / r->dims[r->d1]), sizeof(double));
    for (int64_t e = 0; e < r->n; e++) {
      unravel(r, e, idx);
      if (idx[r->d0] == 0) vr_mean[ravel_without2(r, idx, r->d0, r->d1)] += r->vr[ravel_without(r, idx, r->d0)] / (double)r->dims[r->d1];
    }
    for (int64_t e = 0; e < r->n; e++) {
      unravel(r, e, idx);
      double row = r->vr[ravel_without(r, idx, r->d0)] / vr_mean[ravel_without2(r, idx, r->d0, r->d1)];
      double col = r->vc[ravel_without(r, idx, r->d1)];
      u[e] = grad[e] / sqrt(row) / sqrt(col);
    }
    free(vr_mean);
    free(mean_r);
    free(mean_c);
  } else {
    for (int64_t e = 0; e < r->n; e++) {
      r->v[e] = decay * r->v[e] + mixing * ((double)grad[e] * grad[e] + 1e-30);
      u[e] = grad[e] / sqrt(r->v[e]);
    }
  }
  double clip = fmax(1.0, rms(u, r->n) / 1.0);
  double step_size = lr * fmax(rms(r->w, r->n), 1e-3);
  for (int64_t e = 0; e < r->n; e++) r->w[e] -= step_size * u[e] / clip;
  free(u);
}

/* ---- the gradients fed at step t: signs and sizes vary per element, and the scale per index of every
 * dim spans about 3 orders of magnitude, so factored and unfactored moments differ ---- */
static float gradient(const ref_var *r, int var, int64_t e, int t) {
  int64_t idx[MAX_RANK];
  unravel(r, e, idx);
  double scale = 1;
  for (int d = 0; d < r->rank; d++) scale *= exp(2.0 * sin(0.7 * (double)idx[d] + d + var));
  return (float)(scale * sin(0.37 * (double)e + 1.1 * t + 0.5 * var) + 0.1 * scale * cos(0.05 * (double)e * t));
}

static double max_abs_diff(const float *got, const double *want, int64_t n, double *scale) {
  double diff = 0, s = 1e-30;
  for (int64_t e = 0; e < n; e++) {
    diff = fmax(diff, fabs((double)got[e] - want[e]));
    s = fmax(s, fabs(want[e]));
  }
  *scale = s;
  return diff;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mtf_error err;
  mtf_shape one = {0}, scalar = {0};
  mtf_comm *comm;
  if (mtf_comm_mpi_create(MPI_COMM_SELF, &one, &comm, &err)) {
    fprintf(stderr, "communicator: %s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  mtf_graph *g = mtf_graph_create(5);
  mtf_shape shapes[N_VARS];
  mtf_tensor vars[N_VARS], grads[N_VARS];
  for (int i = 0; i < N_VARS; i++) {
    char name[64];
    snprintf(name, sizeof name, "grad_%d", i);
    if (mtf_shape_parse(specs[i].shape, "shape", &shapes[i], &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    vars[i] = mtf_variable(g, specs[i].name, &shapes[i], specs[i].init, specs[i].scale);
    grads[i] = mtf_input(g, name, &shapes[i]);
  }
  mtf_tensor lr = mtf_input(g, "learning_rate", &scalar), step = mtf_input(g, "step", &scalar), norm;
  mtf_optimizer_config cfg;
  mtf_optimizer_defaults(MTF_OPT_ADAFACTOR, &cfg);
  CHECK(cfg.min_dim_size_to_factor == 128 && cfg.decay_rate == 0.8f && cfg.clipping_threshold == 1.0f &&
        cfg.epsilon1 == 1e-30f && cfg.epsilon2 == 1e-3f && cfg.multiply_by_parameter_scale && cfg.beta1 == 0);
  int rc = mtf_optimizer_apply(g, &cfg, N_VARS, vars, grads, lr, step, &norm, &err);
  mtf_plan *plan = NULL;
  mtf_session *session = NULL;
  if (rc == MTF_OK) rc = mtf_plan_create(g, &one, &(mtf_layout_rules){0}, 0, 1, &norm, &plan, &err);
  if (rc == MTF_OK) rc = mtf_session_create(plan, comm, &(mtf_session_options){.poison_freed = 1}, &session, &err);
  if (rc != MTF_OK) {
    fprintf(stderr, "building the optimizer: %s\n", err.msg);
    return 1;
  }
  /* The slots Mesh TF's rule gives: vr/vc for the factored variables, v for the others. */
  const char *factored_slot[N_VARS] = {"emb/w/adafactor_vr", NULL, NULL, "attn/w/adafactor_vr"};
  const char *full_slot[N_VARS] = {NULL, "mlp/wi/adafactor_v", "norm/scale/adafactor_v", NULL};
  for (int i = 0; i < N_VARS; i++) {
    mtf_tensor slot = mtf_find_variable(g, factored_slot[i] ? factored_slot[i] : full_slot[i]);
    CHECK(slot != MTF_NO_TENSOR);
    if (slot == MTF_NO_TENSOR) fprintf(stderr, "%s: no slot %s\n", specs[i].name, factored_slot[i] ? factored_slot[i] : full_slot[i]);
  }
  /* attn/w [a:128, b:136, c:128]: d0 = b, d1 = a (the tie with c goes to the earlier dim), so vr (without
   * d0) is [a, c] and vc (without d1) is [b, c]. */
  mtf_tensor attn_vc = mtf_find_variable(g, "attn/w/adafactor_vc");
  CHECK(attn_vc != MTF_NO_TENSOR);
  if (attn_vc != MTF_NO_TENSOR) {
    char text[MTF_SHAPE_STR_MAX], vr_text[MTF_SHAPE_STR_MAX];
    mtf_shape_format(mtf_tensor_shape(g, attn_vc), text, sizeof text);
    mtf_shape_format(mtf_tensor_shape(g, mtf_find_variable(g, "attn/w/adafactor_vr")), vr_text, sizeof vr_text);
    printf("attn/w [a:128, b:136, c:128]: slots vr %s, vc %s\n", vr_text, text);
    CHECK(strcmp(vr_text, "[a:128, c:128]") == 0);
    CHECK(strcmp(text, "[b:136, c:128]") == 0);
  }

  ref_var ref[N_VARS];
  float *got[N_VARS], *gvals[N_VARS];
  double *before[N_VARS];
  for (int i = 0; i < N_VARS && rc == MTF_OK; i++) {
    int64_t n = mtf_shape_num_elements(&shapes[i]);
    got[i] = malloc(sizeof(float) * (size_t)n);
    gvals[i] = malloc(sizeof(float) * (size_t)n);
    before[i] = malloc(sizeof(double) * (size_t)n);
    rc = mtf_session_fetch(session, vars[i], got[i], &err);
    if (rc == MTF_OK) ref_init(&ref[i], &shapes[i], got[i]);
  }
  double worst_param = 0, worst_update = 0;
  for (int t = 1; t <= STEPS && rc == MTF_OK; t++) {
    float lr_t = (float)(0.1 / sqrt((double)t)), step_t = (float)t;
    rc = mtf_session_set_input(session, lr, &lr_t, &err);
    if (rc == MTF_OK) rc = mtf_session_set_input(session, step, &step_t, &err);
    for (int i = 0; i < N_VARS && rc == MTF_OK; i++) {
      for (int64_t e = 0; e < ref[i].n; e++) gvals[i][e] = gradient(&ref[i], i, e, t);
      rc = mtf_session_set_input(session, grads[i], gvals[i], &err);
    }
    if (rc == MTF_OK) rc = mtf_session_run(session, &err);
    for (int i = 0; i < N_VARS && rc == MTF_OK; i++) {
      for (int64_t e = 0; e < ref[i].n; e++) before[i][e] = ref[i].w[e];
      ref_step(&ref[i], gvals[i], (double)lr_t, t);
      rc = mtf_session_fetch(session, vars[i], got[i], &err);
      if (rc != MTF_OK) break;
      double scale, update_scale = 1e-30, update_diff = 0;
      double param = max_abs_diff(got[i], ref[i].w, ref[i].n, &scale) / scale;
      /* The update, from the reference's previous parameters (equal to the engine's within the check above). */
      for (int64_t e = 0; e < ref[i].n; e++) {
        double want = before[i][e] - ref[i].w[e], have = before[i][e] - (double)got[i][e];
        update_scale = fmax(update_scale, fabs(want));
        update_diff = fmax(update_diff, fabs(have - want));
      }
      double update = update_diff / update_scale;
      if (t == 1 || t == STEPS)
        printf("step %2d  %-11s %-18s parameters: max relative error %.2e; update: %.2e (largest update %.2e)\n",
               t, specs[i].name, specs[i].shape, param, update, update_scale);
      if (param > 1e-5 || update > 1e-3)
        fprintf(stderr, "step %d, %s: parameter error %.3e, update error %.3e\n", t, specs[i].name, param, update);
      worst_param = fmax(worst_param, param);
      worst_update = fmax(worst_update, update);
    }
  }
  CHECK(rc == MTF_OK);
  if (rc != MTF_OK) fprintf(stderr, "running: %s\n", err.msg);
  printf("over %d steps: parameters max relative error %.2e (limit 1e-5), updates %.2e (limit 1e-3)\n", STEPS,
         worst_param, worst_update);
  CHECK(worst_param <= 1e-5);
  CHECK(worst_update <= 1e-3);
  for (int i = 0; i < N_VARS; i++) {
    ref_free(&ref[i]);
    free(got[i]), free(gvals[i]), free(before[i]);
  }
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  mtf_comm_destroy(comm);
  int status = check_summary();
  MPI_Finalize();
  return status;
}
