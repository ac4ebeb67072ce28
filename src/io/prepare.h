/* mtf data prepare: text files -> token shards. Each input file is one document; the byte tokenizer
 * turns it into ids and appends the end-of-text id. Documents go whole to train or to val: a document
 * goes to val while val holds less than val_fraction of the tokens seen so far (deterministic, in input
 * order). Directories are walked in sorted order; inside them hidden entries, symbolic links (Debian's
 * fortunes has *.u8 links to the same files) and binary files (a NUL byte in the first 4 KiB, such as
 * strfile's *.dat indexes) are skipped. Files named explicitly are always read. */
#ifndef MTF_IO_PREPARE_H
#define MTF_IO_PREPARE_H

#include <stdint.h>

#include "core/error.h"

typedef struct mtf_prepare_options {
  const char *const *inputs;
  int input_count;
  const char *output_dir;
  const char *tokenizer; /* "bytes" */
  int64_t shard_tokens;
  double val_fraction;
  int force;    /* replace shards already in output_dir */
  int progress; /* print a progress line to stderr about once a second */
} mtf_prepare_options;

typedef struct mtf_prepare_stats {
  int64_t files, skipped, bytes;
  int64_t train_tokens, val_tokens;
  int train_shards, val_shards;
  double seconds;
} mtf_prepare_stats;

int mtf_data_prepare(const mtf_prepare_options *opts, mtf_prepare_stats *stats, mtf_error *err);

#endif
