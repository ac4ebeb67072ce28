/* Learning-rate schedules (formulas in schedule.h). Host-side doubles: the result is fed to the graph. */
#include "train/schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const schedule_names[] = {"constant", "linear_warmup", "rsqrt", "cosine", "linear_decay"};
enum { SCHEDULE_KINDS = sizeof schedule_names / sizeof schedule_names[0] };

const char *mtf_schedule_kind_name(mtf_schedule_kind kind) {
  return (int)kind >= 0 && (int)kind < SCHEDULE_KINDS ? schedule_names[kind] : "unknown";
}

int mtf_schedule_validate(const mtf_schedule_config *cfg, mtf_error *err) {
  const char *name = mtf_schedule_kind_name(cfg->kind);
  if ((int)cfg->kind < 0 || (int)cfg->kind >= SCHEDULE_KINDS)
    return mtf_error_set(err, MTF_ERR_INVALID, "learning-rate schedule: unknown kind %d", (int)cfg->kind);
  if (!(cfg->learning_rate >= 0) || !isfinite(cfg->learning_rate))
    return mtf_error_set(err, MTF_ERR_INVALID, "%s schedule: learning rate %g must be a finite number >= 0", name,
                         cfg->learning_rate);
  if (cfg->warmup_steps < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s schedule: warmup steps %lld must be >= 0", name,
                         (long long)cfg->warmup_steps);
  if (cfg->kind == MTF_SCHEDULE_COSINE || cfg->kind == MTF_SCHEDULE_LINEAR_DECAY) {
    if (!(cfg->min_learning_rate >= 0) || cfg->min_learning_rate > cfg->learning_rate)
      return mtf_error_set(err, MTF_ERR_INVALID,
                           "%s schedule: min learning rate %g must be between 0 and the learning rate %g", name,
                           cfg->min_learning_rate, cfg->learning_rate);
  }
  return MTF_OK;
}

int mtf_schedule_warmup_note(const mtf_schedule_config *cfg, char *note, size_t size) {
  int decays = cfg->kind == MTF_SCHEDULE_COSINE || cfg->kind == MTF_SCHEDULE_LINEAR_DECAY;
  int64_t total = cfg->total_steps, warmup = cfg->warmup_steps;
  if (total <= 0 || !(decays ? total <= warmup : cfg->kind == MTF_SCHEDULE_LINEAR_WARMUP && total < warmup)) return 0;
  snprintf(note, size,
           "train.steps (%lld) ends %s the warmup (train.warmup_steps %lld): the %s schedule's rate rises to %.3g at "
           "the last step (its peak is %.3g)%s; set train.warmup_steps below train.steps for the whole schedule",
           (long long)total, total == warmup ? "with" : "inside", (long long)warmup, mtf_schedule_kind_name(cfg->kind),
           mtf_schedule_learning_rate(cfg, total), cfg->learning_rate, decays ? " and never decays" : "");
  return 1;
}

/* Fraction of the decay phase (after warmup, up to total_steps) done at step t, in [0, 1]. */
static double decay_progress(const mtf_schedule_config *cfg, double t) {
  double span = (double)(cfg->total_steps - cfg->warmup_steps);
  if (span <= 0) return 0.0; /* the run ends with its warmup: the decay never starts */
  double p = (t - (double)cfg->warmup_steps) / span;
  return p < 0 ? 0 : (p > 1 ? 1 : p);
}

double mtf_schedule_learning_rate(const mtf_schedule_config *cfg, int64_t step) {
  double lr = cfg->learning_rate, min = cfg->min_learning_rate;
  double t = step < 0 ? 0.0 : (double)step, warmup = (double)cfg->warmup_steps;
  int in_warmup = warmup > 0 && t < warmup;
  switch (cfg->kind) {
    case MTF_SCHEDULE_CONSTANT: return lr;
    case MTF_SCHEDULE_LINEAR_WARMUP: return in_warmup ? lr * t / warmup : lr;
    case MTF_SCHEDULE_RSQRT: {
      double w = warmup > 1 ? warmup : 1.0;
      return lr * sqrt(w / (t > w ? t : w));
    }
    case MTF_SCHEDULE_COSINE:
      if (in_warmup) return lr * t / warmup;
      return min + (lr - min) * 0.5 * (1.0 + cos(3.14159265358979323846 * decay_progress(cfg, t)));
    case MTF_SCHEDULE_LINEAR_DECAY:
      if (in_warmup) return lr * t / warmup;
      return min + (lr - min) * (1.0 - decay_progress(cfg, t));
  }
  return lr;
}
