/* Choosing the next token on rank: each rank reads only its own slice of the next-token logits [batch,
 * vocab] (vocab split over a model axis stays split) and the choice is agreed by a few allreduces of one
 * number per row, so only the chosen ids and their scores cross ranks, never the logits.
 *
 * Greedy picks the largest logit (the smallest id among equal ones). Sampling is Gumbel-max: the id with
 * the largest logit / temperature + G, where G = -log(-log(u)) and u is counter-based noise on (seed, row
 * key, step, global vocabulary index) (core/rng.h). That is an exact draw from softmax(logits /
 * temperature), and it depends on nothing of the mesh or layout, so a seed gives the same text on every
 * mesh. top-k and top-p keep the ids whose logit is at least a threshold found by bisection over the
 * float order of the logits (32 allreduces of one count or mass per row, only when asked for). */
#ifndef MTF_RUN_GENERATE_SAMPLE_H
#define MTF_RUN_GENERATE_SAMPLE_H

#include <stdint.h>

#include "mtf.h"

/* This rank's slice of next-token logits. */
typedef struct mtf_gen_slice {
  const float *logits;     /* [rows, vocab_count], row-major */
  int64_t row_offset, rows; /* global rows held */
  int64_t vocab_offset, vocab_count;
  int64_t total_rows, vocab; /* the whole tensor's */
  int counts;              /* 1 on exactly one rank of the ranks holding this same slice: its sums count */
} mtf_gen_slice;

typedef struct mtf_gen_sampling {
  double temperature; /* 0: greedy */
  int64_t top_k;      /* 0: all */
  double top_p;       /* 1: all */
  uint64_t seed;
} mtf_gen_sampling;

/* The slice of tensor t [batch, vocab] that this rank's plan holds, read out of the session into *buffer
 * (realloc'd as needed). */
int mtf_gen_slice_read(const mtf_session *s, const mtf_plan *plan, mtf_tensor t, const mtf_comm *comm,
                       float **buffer, int64_t *capacity, mtf_gen_slice *out, mtf_error *err);

/* For every global row r: ids[r], the chosen id, and logprobs[r], its log-probability under softmax(logits)
 * (temperature 1, before top-k/top-p). row_keys[r] numbers the row for the noise (the prompt's index, so a
 * padding copy draws what its original does). Collective over every rank of comm. */
int mtf_gen_sample(mtf_comm *comm, const mtf_gen_slice *slice, const mtf_gen_sampling *sampling, int64_t step,
                   const int64_t *row_keys, int32_t *ids, double *logprobs, mtf_error *err);

/* Beam search's candidates: for every row, log_softmax(logits) + base[r]; returns the n best (score, row,
 * id) over all rows of each group of `group` consecutive rows (a prompt's beams), best first, ties to the
 * smaller row then id. out_* hold [total_rows / group][n]. Collective. */
int mtf_gen_top_candidates(mtf_comm *comm, const mtf_gen_slice *slice, const double *base, int64_t group, int n,
                           double *out_score, int64_t *out_row, int32_t *out_id, mtf_error *err);

#endif
