/* The reference for beam search: an exhaustive search over every continuation of a prompt on a tiny
 * model with a tiny vocabulary. Each continuation is either k < max_new tokens other than end-of-text
 * followed by end-of-text (length k + 1), or max_new such tokens; its score is its log-probability over
 * GNMT's length penalty ((5 + length) / 6)^alpha, as generate_beam.h defines. The next-token
 * distributions come from --no-cache's full forward (the training model), every prefix one row of one
 * batch, with the log-softmax in double here: nothing of the cached decode, the on-rank sampler or the
 * beam search is used. Prints the best continuation's ids as a JSON array and its score.
 * usage: exhaustive_beam CONFIG CHECKPOINT PROMPT_IDS MAX_NEW ALPHA EOT [key=value]...  (one rank) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/generate_beam.h"
#include "run/generate_engine.h"

static int64_t power(int64_t b, int64_t e) {
  int64_t p = 1;
  while (e--) p *= b;
  return p;
}

int main(int argc, char **argv) {
  mtf_world_init(&argc, &argv);
  if (argc < 7) {
    fprintf(stderr, "usage: exhaustive_beam CONFIG CHECKPOINT PROMPT_IDS MAX_NEW ALPHA EOT [key=value]...\n");
    return 2;
  }
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  mtf_config_defaults(cfg);
  int rc = mtf_config_load_file(cfg, argv[1], &err);
  for (int i = 7; i < argc && rc == MTF_OK; i++) rc = mtf_config_set(cfg, argv[i], &err);
  if (rc == MTF_OK) rc = mtf_config_validate(cfg, &err);
  int64_t prompt[64], n_prompt = 0, max_new = atoll(argv[4]), eot = atoll(argv[6]);
  double alpha = atof(argv[5]);
  for (char *p = strtok(argv[3], " ,"); p && n_prompt < 64; p = strtok(NULL, " ,")) prompt[n_prompt++] = atoll(p);
  int64_t vocab = cfg->model.vocab, others = vocab - 1; /* tokens other than end-of-text */
  /* Prefixes of 0..max_new-1 tokens other than end-of-text: prefix i of length k is its digits base
   * `others` (digit d is the d-th id skipping eot). */
  int64_t n_prefix = 0;
  for (int64_t k = 0; k < max_new; k++) n_prefix += power(others, k);
  int64_t rows = n_prefix;
  mtf_gen_engine e;
  if (rc == MTF_OK) rc = mtf_gen_engine_open(&e, cfg, rows, 0, &err);
  mtf_ckpt_state state;
  mtf_ckpt_model model = mtf_gen_engine_checkpoint(&e);
  if (rc == MTF_OK) rc = mtf_ckpt_restore(&model, argv[2], 0, &state, NULL, &err);
  if (rc != MTF_OK) {
    fprintf(stderr, "exhaustive_beam: %s\n", err.msg);
    return 1;
  }
  int32_t **context = malloc(sizeof(int32_t *) * (size_t)rows);
  int64_t *len = malloc(sizeof(int64_t) * (size_t)rows), *plen = malloc(sizeof(int64_t) * (size_t)rows);
  int64_t r = 0;
  for (int64_t k = 0; k < max_new; k++)
    for (int64_t i = 0; i < power(others, k); i++, r++) {
      context[r] = malloc(sizeof(int32_t) * (size_t)(n_prompt + k + 1));
      for (int64_t t = 0; t < n_prompt; t++) context[r][t] = (int32_t)prompt[t];
      int64_t code = i;
      for (int64_t t = 0; t < k; t++, code /= others) {
        int64_t d = code % others;
        context[r][n_prompt + t] = (int32_t)(d >= eot && eot >= 0 ? d + 1 : d);
      }
      len[r] = n_prompt + k;
      plen[r] = k;
    }
  mtf_gen_slice s;
  rc = mtf_gen_engine_next(&e, context, len, &s, &err);
  if (rc != MTF_OK) {
    fprintf(stderr, "exhaustive_beam: %s\n", err.msg);
    return 1;
  }
  /* log p(prefix) by walking each prefix's parents; then each continuation's score. */
  double *logp = malloc(sizeof(double) * (size_t)(rows * vocab)), *prefix_lp = malloc(sizeof(double) * (size_t)rows);
  for (r = 0; r < rows; r++) {
    const float *l = s.logits + r * vocab;
    double m = -INFINITY, z = 0;
    for (int64_t v = 0; v < vocab; v++) m = fmax(m, l[v]);
    for (int64_t v = 0; v < vocab; v++) z += exp((double)l[v] - m);
    for (int64_t v = 0; v < vocab; v++) logp[r * vocab + v] = (double)l[v] - m - log(z);
  }
  /* Row of a prefix: find by matching ids (the table is tiny). */
  for (r = 0; r < rows; r++) {
    double acc = 0;
    for (int64_t t = 0; t < plen[r]; t++) {
      int64_t parent = -1;
      for (int64_t q = 0; q < rows && parent < 0; q++)
        if (plen[q] == t && memcmp(context[q], context[r], sizeof(int32_t) * (size_t)(n_prompt + t)) == 0) parent = q;
      acc += logp[parent * vocab + context[r][n_prompt + t]];
    }
    prefix_lp[r] = acc;
  }
  double best = -INFINITY;
  int32_t best_ids[64];
  int64_t best_n = 0;
  for (r = 0; r < rows; r++) {
    if (eot >= 0) { /* the prefix, then end-of-text */
      double sc = (prefix_lp[r] + logp[r * vocab + eot]) / mtf_gen_length_penalty(plen[r] + 1, alpha);
      if (sc > best) {
        best = sc;
        best_n = plen[r];
        memcpy(best_ids, context[r] + n_prompt, sizeof(int32_t) * (size_t)best_n);
      }
    }
    if (plen[r] == max_new - 1) /* max_new tokens, none end-of-text */
      for (int64_t v = 0; v < vocab; v++) {
        if (v == eot) continue;
        double sc = (prefix_lp[r] + logp[r * vocab + v]) / mtf_gen_length_penalty(max_new, alpha);
        if (sc > best) {
          best = sc;
          best_n = max_new;
          memcpy(best_ids, context[r] + n_prompt, sizeof(int32_t) * (size_t)(max_new - 1));
          best_ids[max_new - 1] = (int32_t)v;
        }
      }
  }
  printf("[");
  for (int64_t t = 0; t < n_prompt; t++) printf(t ? ", %lld" : "%lld", (long long)prompt[t]);
  for (int64_t t = 0; t < best_n; t++) printf(", %d", best_ids[t]);
  printf("] %.9g\n", best);
  for (r = 0; r < rows; r++) free(context[r]);
  free(context);
  free(len);
  free(plen);
  free(logp);
  free(prefix_lp);
  mtf_gen_engine_close(&e);
  free(cfg);
  mtf_world_finalize();
  return 0;
}
