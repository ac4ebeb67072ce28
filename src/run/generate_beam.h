/* Beam search for `mtf generate --beam N` (internal to src/run), as Mesh TensorFlow's beam_search: each
 * step extends every alive beam of a prompt by every token and keeps the 2N best (cumulative log-prob)
 * candidates over the prompt's beams; those ending in end-of-text become finished hypotheses scored
 * log-prob / lp(length) with GNMT's length penalty lp(len) = ((5 + len) / 6)^alpha (len counts the new
 * tokens, the end-of-text included), the N best others stay alive. A prompt stops early once its best
 * finished score beats its best alive log-prob / lp(max_new) (no alive beam can overtake it: log-probs
 * only fall); at max_new the alive beams are scored as finished. The result is the best finished
 * hypothesis. Candidates are chosen on rank (mtf_gen_top_candidates); the caches follow their beams. */
#ifndef MTF_RUN_GENERATE_BEAM_H
#define MTF_RUN_GENERATE_BEAM_H

#include <stdint.h>

#include "run/generate_engine.h"

/* GNMT's length penalty ((5 + len) / 6)^alpha. */
double mtf_gen_length_penalty(int64_t len, double alpha);

/* e->rows = groups * beam rows; row q * beam + j is beam j of prompt q; context[r] holds the prompt
 * (len[r] tokens, alike over a prompt's rows) with room for max_new more. On return row q * beam holds
 * the best hypothesis of prompt q (without its end-of-text), score[q] its score, and new_logprob[q][i]
 * (max_new entries each) the log-prob of its i-th new token. Collective. */
int mtf_gen_beam_search(mtf_gen_engine *e, int64_t groups, int beam, int64_t max_new, double alpha, int64_t eot,
                        int32_t **context, int64_t *len, double *score, double **new_logprob, mtf_error *err);

#endif
