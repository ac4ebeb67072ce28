/* mtf data synth: learnable synthetic tasks in the shard format, as text through the byte tokenizer, so a
 * shard reads back as lines like "qkzv=qkzv" (copy), "qkzv=vzkq" (reverse), "qkzv=kqvz" (sort),
 * "0412+0913=01325" (add: operands of `length` digits, the sum with one more), each example followed by
 * the end-of-text id. The part after '=' is a function of the part before it, so a small model's loss on
 * it falls fast; the tests and the quick demo rely on that. Deterministic in (task, seed): train examples
 * come from one random stream and val examples from another. */
#ifndef MTF_IO_SYNTH_H
#define MTF_IO_SYNTH_H

#include <stdint.h>

#include "core/error.h"

typedef enum mtf_synth_task { MTF_SYNTH_COPY, MTF_SYNTH_REVERSE, MTF_SYNTH_SORT, MTF_SYNTH_ADD } mtf_synth_task;

int mtf_synth_task_parse(const char *text, mtf_synth_task *out, mtf_error *err);

typedef struct mtf_synth_options {
  mtf_synth_task task;
  const char *output_dir;
  int64_t examples;     /* train examples; val gets examples * val_fraction more (at least 1 if > 0) */
  int length;           /* symbols (letters or digits) per operand */
  uint64_t seed;
  int64_t shard_tokens;
  double val_fraction;
  int force;
  /* --pack T: whole examples packed into rows of T tokens with a `segments` dataset, one shard per split
   * (io/packing.h); with one_per_row, one example a row. 0: the plain token stream. */
  int64_t pack;
  int one_per_row;
} mtf_synth_options;

typedef struct mtf_synth_stats {
  int64_t train_examples, val_examples, train_tokens, val_tokens;
  int train_shards, val_shards;
} mtf_synth_stats;

/* Writes one example's text (no end-of-text) into buf (NUL-terminated); returns its length. */
int mtf_synth_example(mtf_synth_task task, int length, uint64_t seed, uint64_t stream, uint64_t index, char *buf,
                      int buf_size);

int mtf_data_synth(const mtf_synth_options *opts, mtf_synth_stats *stats, mtf_error *err);

#endif
