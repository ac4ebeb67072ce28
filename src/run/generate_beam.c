/* Beam search: see generate_beam.h. */
#include "run/generate_beam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double mtf_gen_length_penalty(int64_t len, double alpha) { return pow((5.0 + (double)len) / 6.0, alpha); }

/* A hypothesis of one prompt: its new tokens and their log-probs. */
typedef struct hyp {
  int32_t *ids;
  double *lp;
  int64_t n;
  double score; /* normalised (finished) */
} hyp;

int mtf_gen_beam_search(mtf_gen_engine *e, int64_t groups, int beam, int64_t max_new, double alpha, int64_t eot,
                        int32_t **context, int64_t *len, double *score, double **new_logprob, mtf_error *err) {
  int64_t rows = groups * beam, n_cand = 2 * (int64_t)beam, start = len[0];
  int rc = MTF_OK;
  int32_t **caller = malloc(sizeof(int32_t *) * (size_t)rows); /* the caller's buffers, which stay its own */
  double *base = malloc(sizeof(double) * (size_t)rows), *cs = malloc(sizeof(double) * (size_t)(groups * n_cand));
  int64_t *crow = malloc(sizeof(int64_t) * (size_t)(groups * n_cand)), *parent = malloc(sizeof(int64_t) * (size_t)rows);
  int32_t *cid = malloc(sizeof(int32_t) * (size_t)(groups * n_cand));
  int32_t **next_ctx = calloc((size_t)rows, sizeof(int32_t *));
  double **lp = calloc((size_t)rows, sizeof(double *)), **next_lp = calloc((size_t)rows, sizeof(double *));
  int64_t *next_len = malloc(sizeof(int64_t) * (size_t)rows);
  hyp *best = calloc((size_t)groups, sizeof(hyp)); /* the best finished hypothesis of each prompt */
  int *done = calloc((size_t)groups, sizeof(int));
  for (int64_t r = 0; r < rows && caller; r++) caller[r] = context[r];
  int ok = caller && base && cs && crow && parent && cid && next_ctx && lp && next_lp && next_len && best && done;
  for (int64_t r = 0; r < rows && ok; r++) {
    next_ctx[r] = malloc(sizeof(int32_t) * (size_t)(len[r] + max_new + 1));
    lp[r] = malloc(sizeof(double) * (size_t)(max_new + 1));
    next_lp[r] = malloc(sizeof(double) * (size_t)(max_new + 1));
    ok = next_ctx[r] && lp[r] && next_lp[r];
  }
  for (int64_t q = 0; q < groups && ok; q++) {
    best[q].ids = malloc(sizeof(int32_t) * (size_t)(max_new + 1));
    best[q].lp = malloc(sizeof(double) * (size_t)(max_new + 1));
    best[q].score = -INFINITY;
    ok = best[q].ids && best[q].lp;
  }
  if (!ok) rc = mtf_error_set(err, MTF_ERR_NOMEM, "generate: out of memory for the beams");
  /* At the start a prompt's beams are one hypothesis: only beam 0 extends it. */
  for (int64_t r = 0; r < rows && rc == MTF_OK; r++) base[r] = r % beam == 0 ? 0.0 : -INFINITY;
  for (int64_t step = 0; step < max_new && rc == MTF_OK; step++) {
    int active = 0;
    for (int64_t q = 0; q < groups; q++) active |= !done[q];
    if (!active) break;
    mtf_gen_slice slice;
    rc = mtf_gen_engine_next(e, context, len, &slice, err);
    if (rc == MTF_OK) rc = mtf_gen_top_candidates(e->comm, &slice, base, beam, (int)n_cand, cs, crow, cid, err);
    if (rc != MTF_OK) break;
    double last_penalty = mtf_gen_length_penalty(max_new, alpha);
    for (int64_t q = 0; q < groups; q++) {
      int64_t taken = 0;
      for (int64_t k = 0; k < n_cand && !done[q]; k++) {
        double s = cs[q * n_cand + k];
        int64_t r = crow[q * n_cand + k];
        int32_t id = cid[q * n_cand + k];
        if (!(s > -INFINITY)) break;
        double token_lp = s - base[r];
        if (id == eot) { /* finished: the alive beam's tokens, scored with the end-of-text counted */
          double normalised = s / mtf_gen_length_penalty(step + 1, alpha);
          if (normalised > best[q].score) {
            best[q].score = normalised;
            best[q].n = step;
            memcpy(best[q].ids, context[r] + start, sizeof(int32_t) * (size_t)step);
            memcpy(best[q].lp, lp[r], sizeof(double) * (size_t)step);
          }
          continue;
        }
        if (taken == beam) continue;
        int64_t to = q * beam + taken++;
        parent[to] = r;
        memcpy(next_ctx[to], context[r], sizeof(int32_t) * (size_t)len[r]);
        next_ctx[to][len[r]] = id;
        next_len[to] = len[r] + 1;
        memcpy(next_lp[to], lp[r], sizeof(double) * (size_t)step);
        next_lp[to][step] = token_lp;
        base[to] = s;
      }
      for (int64_t j = taken; j < beam; j++) {
        /* Fewer alive beams than `beam` (end-of-text took the rest), or a prompt that is done: a dead
         * beam (-inf, never extended) copies the first alive one; a done prompt's rows stay as they are. */
        int64_t to = q * beam + j;
        int copy_first = taken > 0;
        parent[to] = copy_first ? parent[q * beam] : to;
        int64_t n = copy_first ? next_len[q * beam] : len[to];
        memcpy(next_ctx[to], copy_first ? next_ctx[q * beam] : context[to], sizeof(int32_t) * (size_t)n);
        next_len[to] = n;
        memcpy(next_lp[to], copy_first ? next_lp[q * beam] : lp[to], sizeof(double) * (size_t)(max_new + 1));
        if (copy_first) base[to] = -INFINITY;
      }
      if (done[q]) continue;
      /* Early stop: no alive beam can beat the best finished one. */
      if (taken == 0 || best[q].score >= base[q * beam] / last_penalty) done[q] = 1;
    }
    /* The new beams become the rows; the caches follow their parents. */
    for (int64_t r = 0; r < rows; r++) {
      int32_t *t = context[r];
      context[r] = next_ctx[r];
      next_ctx[r] = t;
      double *l = lp[r];
      lp[r] = next_lp[r];
      next_lp[r] = l;
      len[r] = next_len[r];
    }
    rc = mtf_gen_engine_reorder(e, parent, err);
    /* At max_new the alive beams are scored as finished. */
    for (int64_t q = 0; q < groups && rc == MTF_OK && step + 1 == max_new; q++)
      for (int j = 0; j < beam && !done[q]; j++) {
        int64_t r = q * beam + j;
        double normalised = base[r] / mtf_gen_length_penalty(max_new, alpha);
        if (base[r] > -INFINITY && normalised > best[q].score) {
          best[q].score = normalised;
          best[q].n = max_new;
          memcpy(best[q].ids, context[r] + start, sizeof(int32_t) * (size_t)max_new);
          memcpy(best[q].lp, lp[r], sizeof(double) * (size_t)max_new);
        }
      }
  }
  /* Back into the caller's buffers (the swaps above may have left them in next_ctx). */
  for (int64_t r = 0; r < rows && next_ctx && lp && next_lp; r++) {
    if (ok && context[r] != caller[r]) {
      memcpy(caller[r], context[r], sizeof(int32_t) * (size_t)len[r]);
      next_ctx[r] = context[r];
      context[r] = caller[r];
    }
    free(next_ctx[r]);
    free(lp[r]);
    free(next_lp[r]);
  }
  for (int64_t q = 0; q < groups && rc == MTF_OK; q++) {
    int64_t r = q * beam;
    memcpy(context[r] + start, best[q].ids, sizeof(int32_t) * (size_t)best[q].n);
    len[r] = start + best[q].n;
    score[q] = best[q].score;
    memcpy(new_logprob[q], best[q].lp, sizeof(double) * (size_t)best[q].n);
  }
  for (int64_t q = 0; q < groups && best; q++) {
    free(best[q].ids);
    free(best[q].lp);
  }
  free(caller);
  free(base);
  free(cs);
  free(crow);
  free(parent);
  free(cid);
  free(next_ctx);
  free(lp);
  free(next_lp);
  free(next_len);
  free(best);
  free(done);
  return rc;
}
