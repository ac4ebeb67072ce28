/* Learning-rate schedules, computed on the host from the 1-based step number t and fed to the graph as a
 * scalar input each run (so a schedule change never changes the graph).
 *
 * With lr = learning_rate, min = min_learning_rate, W = warmup_steps, T = total_steps:
 *   constant       lr
 *   linear_warmup  lr * t / W            for t < W,  lr afterwards              (W = 0: no warmup)
 *   rsqrt          lr * sqrt(W / max(t, W))   flat at lr up to W, then decays as 1/sqrt(t) (W = 0 is
 *                  taken as 1: lr / sqrt(t)). Mesh TensorFlow's `learning_rate * rsqrt(max(t, W))` is
 *                  this schedule with lr = learning_rate / sqrt(W); here lr is the peak rate.
 *   cosine         lr * t / W for t < W; then min + (lr - min) * (1 + cos(pi * p)) / 2
 *   linear_decay   lr * t / W for t < W; then min + (lr - min) * (1 - p)
 * where p = min(1, (t - W) / (T - W)) is the fraction of the decay phase done (p = 1 when T <= W), so
 * cosine and linear_decay reach min at t = T and stay there. Steps t < 1 are treated as t = 0 (rate 0
 * during warmup). */
#ifndef MTF_TRAIN_SCHEDULE_H
#define MTF_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "core/error.h"
#include "train/train_kinds.h"

typedef struct mtf_schedule_config {
  mtf_schedule_kind kind;
  double learning_rate;     /* the peak rate */
  int64_t warmup_steps;     /* W; 0 = none */
  int64_t total_steps;      /* T: where cosine and linear_decay reach min_learning_rate */
  double min_learning_rate; /* cosine and linear_decay only */
} mtf_schedule_config;

/* "constant", "linear_warmup", "rsqrt", "cosine", "linear_decay" (the config's train.schedule text); "unknown"
 * for another value. */
const char *mtf_schedule_kind_name(mtf_schedule_kind kind);

/* MTF_OK, or MTF_ERR_INVALID for settings no schedule can follow (negative rates or steps, min_learning_rate
 * above learning_rate). A run that ends inside its warmup is valid (a short test run of a long config): see
 * mtf_schedule_warmup_note. */
int mtf_schedule_validate(const mtf_schedule_config *cfg, mtf_error *err);

/* Where total_steps ends inside the warmup of a schedule that has one (linear_warmup, cosine, linear_decay),
 * writes what the run's rate will do instead and how to get the whole schedule into note and returns 1;
 * else 0. */
int mtf_schedule_warmup_note(const mtf_schedule_config *cfg, char *note, size_t size);

/* The learning rate of step t (1-based), by the formulas above. */
double mtf_schedule_learning_rate(const mtf_schedule_config *cfg, int64_t step);

#endif
