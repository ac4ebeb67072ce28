/* `mtf generate` (the caller has started the job: mtf_world_init): see generate.c. */
#ifndef MTF_RUN_GENERATE_H
#define MTF_RUN_GENERATE_H

#include <stdint.h>

#include "config/config.h"

#define MTF_GENERATE_MAX_PROMPTS 4096

typedef struct mtf_generate_options {
  const char *checkpoint; /* a checkpoint file, or NULL for the run directory's latest */
  const char *prompts[MTF_GENERATE_MAX_PROMPTS]; /* --prompt, repeated: text (JSON arrays of ids with json_ids) */
  int n_prompts;
  const char *prompts_file; /* --prompts FILE: one prompt per line, after the --prompt ones */
  const char *prompt_ids;   /* ids separated by spaces or commas ("15 496 11"), or NULL */
  int print_ids;          /* --ids: prompts and output as JSON arrays of ids, one line per prompt */
  const char *vocab_file; /* --vocab FILE: one token per line */
  int64_t max_new;
  double temperature;     /* 0 = greedy */
  int64_t top_k;          /* 0 = the whole vocabulary */
  double top_p;           /* 1 = the whole vocabulary */
  uint64_t seed;
  int no_cache;           /* --no-cache: re-run the whole window per token (the reference) */
  int stream;             /* --stream: print each token as it is produced (one prompt) */
  int json;               /* --json: one JSON object per prompt (ids, log-probs, timings) */
  int beam;               /* --beam N (0 or 1: none) */
  double length_penalty;  /* --length-penalty ALPHA: GNMT's ((5 + len) / 6)^alpha */
} mtf_generate_options;

/* The most tokens one generate call may produce (its context buffer holds prompt + max_new ids). */
#define MTF_GENERATE_MAX_NEW ((int64_t)1 << 24)

/* Checks options that came from outside: 0 <= max_new <= MTF_GENERATE_MAX_NEW, a finite temperature >= 0,
 * 0 <= top_k <= INT32_MAX, 0 < top_p <= 1, 0 <= beam <= 64. mtf_generate_run checks them too. */
int mtf_generate_check_options(const mtf_generate_options *opts, mtf_error *err);

int mtf_generate_run(const mtf_config *cfg, const mtf_generate_options *opts, mtf_error *err);

#endif
