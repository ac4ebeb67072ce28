/* mtf data prepare: text files -> token shards. Each input file is one document; the byte tokenizer
 * turns it into ids and appends the end-of-text id. Documents go whole to train or to val: a document
 * goes to val while val holds less than val_fraction of the tokens seen so far (deterministic, in input
 * order). An input is a file, a directory or a glob (expanded with glob(3), sorted; one that matches nothing
 * is an error). Directories are walked in sorted order; inside them hidden entries are left out, symbolic
 * links are followed (to files and to directories), and binary files (a NUL byte in the first 4 KiB, such
 * as strfile's *.dat indexes) and broken links (each named on stderr) are skipped. Every file and directory
 * is taken once, by (st_dev, st_ino): Debian's fortunes has *.u8 links to the same files, read once, and a
 * link cycle is walked once. Files named explicitly are always read, binary or not. */
#ifndef MTF_IO_PREPARE_H
#define MTF_IO_PREPARE_H

#include <stddef.h>
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
  int64_t files, bytes;
  /* What was left out: */
  int64_t binary_files;   /* found in a directory or by a glob with a NUL byte in their first 4 KiB */
  int64_t repeated_files; /* reached again (a link or hard link to a file already listed, an input given twice) */
  int64_t repeated_dirs;  /* reached again (a link cycle, a link to a directory already walked) */
  int64_t broken_links;   /* links whose target cannot be read, each named on stderr */
  int64_t not_files;      /* found entries that are neither files nor directories (FIFOs, sockets, devices) */
  int64_t train_tokens, val_tokens;
  int train_shards, val_shards;
  double seconds;
} mtf_prepare_stats;

int mtf_data_prepare(const mtf_prepare_options *opts, mtf_prepare_stats *stats, mtf_error *err);

/* "1 binary file, 2 broken links" (the nonzero counts of what was left out) or "none", in out. */
const char *mtf_prepare_skipped_text(const mtf_prepare_stats *stats, char *out, size_t size);

#endif
