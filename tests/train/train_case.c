/* The optimizer tests' training problem (see train_case.h). */
#include "train_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/schedule.h"

int train_case_build(train_case *tc, const mtf_optimizer_config *cfg, int n, const char *const *names,
                     const char *const *shapes, mtf_error *err) {
  memset(tc, 0, sizeof *tc);
  tc->graph = mtf_graph_create(77);
  tc->n_vars = n;
  mtf_graph *g = tc->graph;
  mtf_shape scalar = {0};
  mtf_tensor loss = MTF_NO_TENSOR;
  for (int i = 0; i < n; i++) {
    if (mtf_shape_parse(shapes[i], "variable shape", &tc->shapes[i], err)) return err->code;
    char target_name[80];
    snprintf(target_name, sizeof target_name, "target_%d", i);
    tc->vars[i] = mtf_variable(g, names[i], &tc->shapes[i], MTF_INIT_NORMAL, 1.0f);
    tc->targets[i] = mtf_input(g, target_name, &tc->shapes[i]);
    mtf_tensor w = tc->vars[i];
    mtf_tensor term = mtf_add(g, mtf_reduce_sum(g, mtf_multiply(g, w, tc->targets[i]), &scalar),
                              mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, w), &scalar), 0.5f));
    loss = i == 0 ? term : mtf_add(g, loss, term);
  }
  tc->loss = loss;
  tc->learning_rate = mtf_input(g, "learning_rate", &scalar);
  tc->step = mtf_input(g, "step", &scalar);
  if (mtf_gradients(g, loss, n, tc->vars, tc->grads) || mtf_graph_status(g, err)) return mtf_graph_status(g, err);
  return mtf_optimizer_apply(g, cfg, n, tc->vars, tc->grads, tc->learning_rate, tc->step, &tc->grad_norm, err);
}

void train_case_destroy(train_case *tc) { mtf_graph_destroy(tc->graph); }

float train_case_target(int var, int64_t index) {
  return (float)(1.5 * sin(0.9 * (double)index + 1.3 * var + 0.4) + 0.25 * (double)((index + var) % 3) - 0.2);
}

double train_case_learning_rate(int64_t step) {
  mtf_schedule_config schedule = {.kind = MTF_SCHEDULE_LINEAR_WARMUP, .learning_rate = 0.1, .warmup_steps = 3};
  return mtf_schedule_learning_rate(&schedule, step);
}

int train_case_run(const train_case *tc, const mtf_shape *mesh, const mtf_layout_rules *rules, mtf_comm *comm,
                   int steps, train_history *history, mtf_error *err) {
  memset(history, 0, sizeof *history);
  history->steps = steps;
  history->n_vars = tc->n_vars;
  mtf_plan *plan;
  mtf_session *session;
  mtf_tensor fetches[] = {tc->loss, tc->grad_norm};
  MTF_CHECK(mtf_plan_create(tc->graph, mesh, rules, comm->rank, 2, fetches, &plan, err));
  mtf_session_options options = {.poison_freed = 1};
  int rc = mtf_session_create(plan, comm, &options, &session, err);
  if (rc) {
    mtf_plan_destroy(plan);
    return rc;
  }
  for (int i = 0; i < tc->n_vars && rc == MTF_OK; i++) {
    int64_t size = history->sizes[i] = mtf_shape_num_elements(&tc->shapes[i]);
    float *target = malloc(sizeof(float) * (size_t)size);
    for (int64_t e = 0; e < size; e++) target[e] = train_case_target(i, e);
    history->initial[i] = malloc(sizeof(float) * (size_t)size);
    rc = mtf_session_set_input(session, tc->targets[i], target, err);
    if (rc == MTF_OK) rc = mtf_session_fetch(session, tc->vars[i], history->initial[i], err);
    free(target);
  }
  for (int t = 1; t <= steps && rc == MTF_OK; t++) {
    float lr = (float)train_case_learning_rate(t), step = (float)t;
    rc = mtf_session_set_input(session, tc->learning_rate, &lr, err);
    /* Fed for every optimizer, SGD included: the API promises that every optimizer reads it. */
    if (rc == MTF_OK) rc = mtf_session_set_input(session, tc->step, &step, err);
    if (rc == MTF_OK) rc = mtf_session_run(session, err);
    if (rc == MTF_OK) rc = mtf_session_fetch(session, tc->grad_norm, &history->grad_norm[t - 1], err);
    for (int i = 0; i < tc->n_vars && rc == MTF_OK; i++) {
      history->after[t - 1][i] = malloc(sizeof(float) * (size_t)history->sizes[i]);
      rc = mtf_session_fetch(session, tc->vars[i], history->after[t - 1][i], err);
    }
  }
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  return rc;
}

void train_history_free(train_history *history) {
  for (int i = 0; i < TRAIN_MAX_VARS; i++) {
    free(history->initial[i]);
    for (int t = 0; t < TRAIN_MAX_STEPS; t++) free(history->after[t][i]);
  }
  memset(history, 0, sizeof *history);
}

double relative_error(const float *got, const float *want, int64_t n) {
  double scale = 1e-30, diff = 0;
  for (int64_t e = 0; e < n; e++) {
    scale = fmax(scale, fabs((double)want[e]));
    diff = fmax(diff, fabs((double)got[e] - (double)want[e]));
  }
  return diff / scale;
}
