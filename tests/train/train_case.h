/* A tiny training problem for the optimizer tests: variables w_i with the loss
 *   sum_i sum(w_i * c_i) + 0.5 * sum(w_i^2)
 * whose gradient is known in closed form (c_i + w_i), so a test can follow the optimizer step by step with
 * its own arithmetic. c_i are inputs with fixed values (train_case_target). */
#ifndef MTF_TESTS_TRAIN_CASE_H
#define MTF_TESTS_TRAIN_CASE_H

#include "mtf.h"
#include "train/optimizer.h"

#define TRAIN_MAX_VARS 4
#define TRAIN_MAX_STEPS 8

typedef struct train_case {
  mtf_graph *graph;
  int n_vars;
  mtf_shape shapes[TRAIN_MAX_VARS];
  mtf_tensor vars[TRAIN_MAX_VARS], targets[TRAIN_MAX_VARS], grads[TRAIN_MAX_VARS];
  mtf_tensor learning_rate, step, grad_norm, loss;
} train_case;

/* Builds the problem for variables of the given shapes ("rows:3,cols:4") and names, and applies cfg. */
int train_case_build(train_case *tc, const mtf_optimizer_config *cfg, int n, const char *const *names,
                     const char *const *shapes, mtf_error *err);
void train_case_destroy(train_case *tc);

/* Element `index` of c_i: fixed values of both signs and various sizes. */
float train_case_target(int var, int64_t index);
/* The learning rate fed at 1-based step t (a linear-warmup schedule, so it changes between steps). */
double train_case_learning_rate(int64_t step);

/* Every variable after each step, the initial values, and the fetched gradient norms. */
typedef struct train_history {
  int steps, n_vars;
  int64_t sizes[TRAIN_MAX_VARS];
  float *initial[TRAIN_MAX_VARS];
  float *after[TRAIN_MAX_STEPS][TRAIN_MAX_VARS];
  float grad_norm[TRAIN_MAX_STEPS];
} train_history;

/* Runs `steps` steps on the given mesh and layout; MTF_OK or the error of planning or running. */
int train_case_run(const train_case *tc, const mtf_shape *mesh, const mtf_layout_rules *rules, mtf_comm *comm,
                   int steps, train_history *history, mtf_error *err);
void train_history_free(train_history *history);

/* Largest |got - want| over a tensor, relative to the largest |want| (values near zero do not inflate it). */
double relative_error(const float *got, const float *want, int64_t n);

#endif
