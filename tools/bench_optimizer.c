/* AdamW's or Adafactor's update of one variable through the engine: the fused ops (mtf_optimizer_apply:
 * AdamW's moving_average x 2, adam_update; Adafactor's contractions for the second moments, adafactor_squares
 * and adafactor_update) against the same update from unfused elementwise ops (as src/train/optimizer.c built
 * it before the fused ops: AdamW's 15 ops, Adafactor's squared gradient, reductions, products and
 * subtraction, each a pass over the variable), on one rank, in the same process, alternating.
 *
 *   OPENBLAS_NUM_THREADS=1 build/src/mtf_bench_optimizer [ELEMENTS [RUNS [adamw|adafactor]]]
 *
 * ELEMENTS (default 5313024, the small GPT) in one [rows, 256] variable; RUNS (default 20) steps of
 * each, of which the median is printed, with the largest difference of the two results. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/world.h"
#include "core/clock.h"
#include "train/optimizer.h"

static const mtf_shape scalar_shape = {0};

/* 1 - beta^t as the old optimizer computed it: -2h / (1 - h), h = tanh(t ln(beta) / 2). */
static mtf_tensor one_minus_power(mtf_graph *g, mtf_tensor step, float beta) {
  mtf_tensor h = mtf_tanh(g, mtf_scalar_multiply(g, step, (float)(0.5 * log((double)beta))));
  return mtf_divide(g, mtf_scalar_multiply(g, h, -2.0f), mtf_scalar_add(g, mtf_scalar_multiply(g, h, -1.0f), 1.0f));
}

static void unfused_adamw(mtf_graph *g, const mtf_optimizer_config *cfg, mtf_tensor w, mtf_tensor grad, mtf_tensor lr,
                          mtf_tensor step) {
  const mtf_shape *shape = mtf_tensor_shape(g, w);
  mtf_tensor m = mtf_variable(g, "w/adam_m", shape, MTF_INIT_ZEROS, 0.0f);
  mtf_tensor v = mtf_variable(g, "w/adam_v", shape, MTF_INIT_ZEROS, 0.0f);
  mtf_tensor new_m = mtf_add(g, mtf_scalar_multiply(g, m, cfg->beta1), mtf_scalar_multiply(g, grad, 1.0f - cfg->beta1));
  mtf_tensor new_v =
      mtf_add(g, mtf_scalar_multiply(g, v, cfg->beta2), mtf_scalar_multiply(g, mtf_square(g, grad), 1.0f - cfg->beta2));
  mtf_assign(g, m, new_m);
  mtf_assign(g, v, new_v);
  mtf_tensor m_hat = mtf_divide(g, new_m, one_minus_power(g, step, cfg->beta1));
  mtf_tensor v_hat = mtf_divide(g, new_v, one_minus_power(g, step, cfg->beta2));
  mtf_tensor update = mtf_divide(g, m_hat, mtf_scalar_add(g, mtf_sqrt(g, v_hat), cfg->epsilon));
  update = mtf_add(g, update, mtf_scalar_multiply(g, w, cfg->weight_decay));
  mtf_assign(g, w, mtf_subtract(g, w, mtf_multiply(g, update, lr)));
}

static mtf_tensor rms(mtf_graph *g, mtf_tensor x) {
  double n = (double)mtf_shape_num_elements(mtf_tensor_shape(g, x));
  return mtf_sqrt(g, mtf_scalar_multiply(g, mtf_einsum2(g, x, x, &scalar_shape), (float)(1.0 / n)));
}

static mtf_tensor at_least(mtf_graph *g, mtf_tensor x, float c) {
  return mtf_scalar_add(g, mtf_relu(g, mtf_scalar_add(g, x, -c)), c);
}

/* Adafactor's defaults, factored over [rows, cols], as optimizer.c built it before adafactor_update. */
static void unfused_adafactor(mtf_graph *g, const mtf_optimizer_config *cfg, mtf_tensor w, mtf_tensor grad,
                              mtf_tensor lr, mtf_tensor step) {
  const mtf_shape shape = *mtf_tensor_shape(g, w);
  mtf_shape rows, cols, none = {0};
  mtf_shape_remove(&shape, shape.dims[1].name, &rows, NULL);
  mtf_shape_remove(&shape, shape.dims[0].name, &cols, NULL);
  mtf_tensor vr = mtf_variable(g, "w/adafactor_vr", &rows, MTF_INIT_ZEROS, 0.0f);
  mtf_tensor vc = mtf_variable(g, "w/adafactor_vc", &cols, MTF_INIT_ZEROS, 0.0f);
  mtf_tensor mixing = mtf_exp(g, mtf_scalar_multiply(g, mtf_log(g, step), -cfg->decay_rate));
  mtf_tensor decay = mtf_scalar_add(g, mtf_scalar_multiply(g, mixing, -1.0f), 1.0f);
  mtf_tensor squared = mtf_square(g, grad);
  mtf_tensor new_vr = mtf_moving_average(g, vr, mtf_reduce_mean(g, squared, &rows), decay, 0.0f, 1, cfg->epsilon1);
  mtf_tensor new_vc = mtf_moving_average(g, vc, mtf_reduce_mean(g, squared, &cols), decay, 0.0f, 1, cfg->epsilon1);
  mtf_assign(g, vr, new_vr);
  mtf_assign(g, vc, new_vc);
  mtf_tensor row_factor = mtf_rsqrt(g, mtf_divide(g, new_vr, mtf_reduce_mean(g, new_vr, &none)));
  mtf_tensor update = mtf_multiply(g, mtf_multiply(g, grad, row_factor), mtf_rsqrt(g, new_vc));
  mtf_tensor step_size = mtf_multiply(g, lr, at_least(g, rms(g, w), cfg->epsilon2));
  step_size = mtf_divide(g, step_size, at_least(g, mtf_scalar_multiply(g, rms(g, update), 1.0f / cfg->clipping_threshold), 1.0f));
  mtf_assign(g, w, mtf_subtract(g, w, mtf_multiply(g, update, step_size)));
}

typedef struct bench {
  mtf_graph *g;
  mtf_plan *plan;
  mtf_session *session;
  mtf_tensor w, grad, lr, step;
} bench;

static int build(bench *b, int fused, int adafactor, int64_t rows, mtf_comm *comm, mtf_error *err) {
  char text[64];
  snprintf(text, sizeof text, "rows:%lld,cols:256", (long long)rows);
  mtf_shape shape;
  MTF_CHECK(mtf_shape_parse(text, "bench", &shape, err));
  b->g = mtf_graph_create(1);
  b->w = mtf_variable(b->g, "w", &shape, MTF_INIT_NORMAL, 0.02f);
  b->grad = mtf_input(b->g, "grad", &shape);
  b->lr = mtf_input(b->g, "lr", &scalar_shape);
  b->step = mtf_input(b->g, "step", &scalar_shape);
  mtf_optimizer_config cfg;
  mtf_optimizer_defaults(adafactor ? MTF_OPT_ADAFACTOR : MTF_OPT_ADAMW, &cfg);
  if (fused) MTF_CHECK(mtf_optimizer_apply(b->g, &cfg, 1, &b->w, &b->grad, b->lr, b->step, NULL, err));
  else if (adafactor) unfused_adafactor(b->g, &cfg, b->w, b->grad, b->lr, b->step);
  else unfused_adamw(b->g, &cfg, b->w, b->grad, b->lr, b->step);
  MTF_CHECK(mtf_graph_status(b->g, err));
  mtf_layout_rules rules = {0};
  MTF_CHECK(mtf_plan_create(b->g, &comm->mesh, &rules, 0, 1, &b->w, &b->plan, err));
  mtf_session_options options = {0};
  MTF_CHECK(mtf_session_create(b->plan, comm, &options, &b->session, err));
  float *g = malloc(sizeof(float) * (size_t)(rows * 256));
  for (int64_t i = 0; i < rows * 256; i++) g[i] = (float)sin(0.37 * (double)i);
  int rc = mtf_session_set_input(b->session, b->grad, g, err);
  free(g);
  return rc;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  mtf_world_init(&argc, &argv);
  int64_t elements = argc > 1 ? atoll(argv[1]) : 5313024;
  int runs = argc > 2 ? atoi(argv[2]) : 20;
  int adafactor = argc > 3 && strcmp(argv[3], "adafactor") == 0;
  if (argc > 3 && !adafactor && strcmp(argv[3], "adamw") != 0) runs = 0; /* the usage message below */
  int64_t rows = (elements + 255) / 256;
  mtf_shape mesh;
  mtf_comm *comm;
  mtf_error err;
  bench b[2];
  if (rows < 1 || runs < 1 || mtf_mesh_parse("", &mesh, &err) || mtf_comm_world_create(&mesh, &comm, &err) ||
      build(&b[0], 1, adafactor, rows, comm, &err) || build(&b[1], 0, adafactor, rows, comm, &err)) {
    fprintf(stderr, "bench_optimizer: %s\n",
            rows < 1 || runs < 1 ? "usage: mtf_bench_optimizer [ELEMENTS [RUNS [adamw|adafactor]]]" : err.msg);
    return 1;
  }
  double *times[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
  for (int r = 0; r < runs; r++)
    for (int k = 0; k < 2; k++) {
      float lr = 1e-3f, step = (float)(r + 1);
      double start = mtf_now_seconds();
      if (mtf_session_set_input(b[k].session, b[k].lr, &lr, &err) ||
          mtf_session_set_input(b[k].session, b[k].step, &step, &err) || mtf_session_run(b[k].session, &err)) {
        fprintf(stderr, "bench_optimizer: %s\n", err.msg);
        return 1;
      }
      times[k][r] = mtf_now_seconds() - start;
    }
  float *w[2] = {malloc(sizeof(float) * (size_t)(rows * 256)), malloc(sizeof(float) * (size_t)(rows * 256))};
  double worst = 0;
  for (int k = 0; k < 2; k++) mtf_session_fetch(b[k].session, b[k].w, w[k], &err);
  for (int64_t i = 0; i < rows * 256; i++) worst = fmax(worst, fabs((double)w[0][i] - (double)w[1][i]));
  for (int k = 0; k < 2; k++) qsort(times[k], (size_t)runs, sizeof(double), compare_doubles);
  printf("%s step of %lld elements, median of %d: fused %.2f ms, unfused %.2f ms (%.2fx); max |difference| "
         "after %d steps %.2e\n", adafactor ? "Adafactor" : "AdamW", (long long)(rows * 256), runs, 1e3 * times[0][runs / 2], 1e3 * times[1][runs / 2],
         times[1][runs / 2] / times[0][runs / 2], runs, worst);
  for (int k = 0; k < 2; k++) {
    mtf_session_destroy(b[k].session);
    mtf_plan_destroy(b[k].plan);
    mtf_graph_destroy(b[k].g);
    free(times[k]);
    free(w[k]);
  }
  mtf_comm_destroy(comm);
  mtf_world_finalize();
  return 0;
}
