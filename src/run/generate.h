/* `mtf generate` (the caller has started the job: mtf_world_init): see generate.c. */
#ifndef MTF_RUN_GENERATE_H
#define MTF_RUN_GENERATE_H

#include <stdint.h>

#include "config/config.h"

typedef struct mtf_generate_options {
  const char *checkpoint; /* a checkpoint file, or NULL for the run directory's latest */
  const char *prompt;     /* text; NULL when prompt_ids is given */
  const char *prompt_ids; /* ids separated by spaces or commas ("15 496 11"), or NULL */
  int print_ids;          /* print token ids instead of text */
  int64_t max_new;
  double temperature;     /* 0 = greedy */
  int64_t top_k;          /* 0 = the whole vocabulary */
  uint64_t seed;
} mtf_generate_options;

/* The most tokens one generate call may produce (its context buffer holds prompt + max_new ids). */
#define MTF_GENERATE_MAX_NEW ((int64_t)1 << 24)

/* Checks options that came from outside: 0 <= max_new <= MTF_GENERATE_MAX_NEW, a finite temperature >= 0,
 * 0 <= top_k <= INT32_MAX. mtf_generate_run checks them too. */
int mtf_generate_check_options(const mtf_generate_options *opts, mtf_error *err);

int mtf_generate_run(const mtf_config *cfg, const mtf_generate_options *opts, mtf_error *err);

#endif
