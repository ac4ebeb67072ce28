/* Learning-rate schedules at chosen steps against their formulas, worked out here; the name parser and
 * the validation messages. */
#include <math.h>

#include "../check.h"
#include "train/schedule.h"

static int near(double got, double want) { return fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)); }

static double rate(mtf_schedule_kind kind, int64_t warmup, int64_t total, int64_t step) {
  mtf_schedule_config cfg = {.kind = kind, .learning_rate = 0.02, .warmup_steps = warmup, .total_steps = total,
                             .min_learning_rate = 0.002};
  return mtf_schedule_learning_rate(&cfg, step);
}

static void check_values(void) {
  const double pi = 3.14159265358979323846;
  CHECK(near(rate(MTF_SCHEDULE_CONSTANT, 10, 100, 1), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_CONSTANT, 10, 100, 1000), 0.02));

  CHECK(near(rate(MTF_SCHEDULE_LINEAR_WARMUP, 10, 0, 1), 0.002));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_WARMUP, 10, 0, 5), 0.01));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_WARMUP, 10, 0, 10), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_WARMUP, 10, 0, 500), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_WARMUP, 0, 0, 1), 0.02));

  /* rsqrt: flat at the peak through warmup, then lr * sqrt(W / t). */
  CHECK(near(rate(MTF_SCHEDULE_RSQRT, 100, 0, 1), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_RSQRT, 100, 0, 100), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_RSQRT, 100, 0, 400), 0.01));
  CHECK(near(rate(MTF_SCHEDULE_RSQRT, 100, 0, 10000), 0.002));
  CHECK(near(rate(MTF_SCHEDULE_RSQRT, 0, 0, 4), 0.01));
  /* Mesh TensorFlow's 0.01 * rsqrt(max(t, 10000)) is rsqrt with lr = 0.01 / sqrt(10000) = 1e-4 as peak. */
  mtf_schedule_config mesh_tf = {.kind = MTF_SCHEDULE_RSQRT, .learning_rate = 1e-4, .warmup_steps = 10000};
  CHECK(near(mtf_schedule_learning_rate(&mesh_tf, 40000), 0.01 / sqrt(40000.0)));

  /* cosine: warmup to the peak over 10 steps, then half a cosine down to min at step 110. */
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 10, 110, 4), 0.008));
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 10, 110, 10), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 10, 110, 35), 0.002 + 0.018 * 0.5 * (1 + cos(pi * 0.25))));
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 10, 110, 60), 0.011));
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 10, 110, 110), 0.002));
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 10, 110, 5000), 0.002));
  CHECK(near(rate(MTF_SCHEDULE_COSINE, 0, 100, 50), 0.011));

  /* linear_decay: warmup, then a straight line to min at step 110. */
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_DECAY, 10, 110, 2), 0.004));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_DECAY, 10, 110, 10), 0.02));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_DECAY, 10, 110, 35), 0.002 + 0.018 * 0.75));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_DECAY, 10, 110, 110), 0.002));
  CHECK(near(rate(MTF_SCHEDULE_LINEAR_DECAY, 10, 110, 111), 0.002));
}

static void check_names_and_validate(void) {
  mtf_error err;
  /* the names messages give, the config's choices text (test_config checks the choices' enum values) */
  const char *names[] = {"constant", "linear_warmup", "rsqrt", "cosine", "linear_decay"};
  for (int k = 0; k < 5; k++) CHECK(strcmp(mtf_schedule_kind_name((mtf_schedule_kind)k), names[k]) == 0);
  CHECK(strcmp(mtf_schedule_kind_name((mtf_schedule_kind)5), "unknown") == 0);

  mtf_schedule_config cfg = {.kind = MTF_SCHEDULE_COSINE, .learning_rate = 0.01, .warmup_steps = 100,
                             .total_steps = 100};
  /* A run that ends with or inside its warmup (a short test of a long config) is valid and said so: the rate
   * rises to its peak at the last step at most, never the minimum a decay reaches. */
  char note[512] = "";
  CHECK(mtf_schedule_validate(&cfg, &err) == MTF_OK);
  CHECK(mtf_schedule_warmup_note(&cfg, note, sizeof note) == 1);
  CHECK_CONTAINS(note, "train.steps (100) ends with the warmup (train.warmup_steps 100)", "rises to 0.01 at the last step",
                 "never decays", "set train.warmup_steps below train.steps");
  CHECK(fabs(mtf_schedule_learning_rate(&cfg, 100) - 0.01) < 1e-12);
  CHECK(fabs(mtf_schedule_learning_rate(&cfg, 50) - 0.005) < 1e-12);
  cfg.total_steps = 50;
  CHECK(mtf_schedule_validate(&cfg, &err) == MTF_OK);
  CHECK(mtf_schedule_warmup_note(&cfg, note, sizeof note) == 1);
  CHECK_CONTAINS(note, "train.steps (50) ends inside the warmup (train.warmup_steps 100)", "rises to 0.005");
  cfg.kind = MTF_SCHEDULE_LINEAR_WARMUP;
  CHECK(mtf_schedule_warmup_note(&cfg, note, sizeof note) == 1);
  cfg.total_steps = 100;
  CHECK(mtf_schedule_warmup_note(&cfg, note, sizeof note) == 0); /* reaches its peak, which is all it does */
  cfg.kind = MTF_SCHEDULE_CONSTANT;
  CHECK(mtf_schedule_warmup_note(&cfg, note, sizeof note) == 0);
  cfg.kind = MTF_SCHEDULE_COSINE;
  cfg.total_steps = 1000;
  CHECK(mtf_schedule_warmup_note(&cfg, note, sizeof note) == 0);
  CHECK(mtf_schedule_validate(&cfg, &err) == MTF_OK);
  cfg.min_learning_rate = 0.1;
  CHECK(mtf_schedule_validate(&cfg, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "min learning rate 0.1 must be between 0 and the learning rate 0.01");
  cfg = (mtf_schedule_config){.kind = MTF_SCHEDULE_RSQRT, .learning_rate = -1};
  CHECK(mtf_schedule_validate(&cfg, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "rsqrt schedule: learning rate -1 must be");
  cfg = (mtf_schedule_config){.kind = MTF_SCHEDULE_LINEAR_WARMUP, .learning_rate = 1, .warmup_steps = -5};
  CHECK(mtf_schedule_validate(&cfg, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "warmup steps -5 must be >= 0");
}

int main(void) {
  check_values();
  check_names_and_validate();
  return check_summary();
}
