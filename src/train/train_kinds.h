/* The optimizer and the learning-rate schedule a run trains with: the config's train.optimizer and
 * train.schedule choices as enums (config.c turns the YAML text into them at parse time, in the order of their
 * choices there: test_config checks each), read by train/ and run/ without comparing names. */
#ifndef MTF_TRAIN_TRAIN_KINDS_H
#define MTF_TRAIN_TRAIN_KINDS_H

typedef enum mtf_optimizer_kind { MTF_OPT_ADAFACTOR, MTF_OPT_ADAMW, MTF_OPT_SGD } mtf_optimizer_kind;

typedef enum mtf_schedule_kind {
  MTF_SCHEDULE_CONSTANT,
  MTF_SCHEDULE_LINEAR_WARMUP,
  MTF_SCHEDULE_RSQRT,
  MTF_SCHEDULE_COSINE,
  MTF_SCHEDULE_LINEAR_DECAY
} mtf_schedule_kind;

#endif
