/* A dataset: the shards a spec names, and the training windows they hold.
 *
 * The spec is a directory (every *.h5 in it), a glob (`data/fortunes/train-*.h5`) or one file. Shards are
 * taken in sorted path order, so every rank numbers them alike. A shard of n tokens holds
 * floor((n - 1) / T) windows of T + 1 tokens starting at 0, T, 2T, ... (inputs are tokens [s, s+T), targets
 * [s+1, s+T+1)); windows never cross shards. Windows are numbered through the shards in order. */
#ifndef MTF_IO_DATASET_H
#define MTF_IO_DATASET_H

#include <stdint.h>

#include "core/error.h"
#include "io/shard.h"

typedef struct mtf_dataset {
  int count;
  char **paths;
  mtf_shard_meta *meta;
  int64_t *first_window; /* count + 1 entries: shard i holds windows [first_window[i], first_window[i+1]) */
  int64_t length;        /* T */
  int64_t windows;
  int64_t tokens;
  int64_t max_vocab_size; /* the largest vocab_size attribute, or -1 when no shard has one */
} mtf_dataset;

/* Lists and checks every shard (each is opened once to read its metadata). Fails, naming the file, on a
 * missing path, an empty glob, a bad shard, or a shard shorter than T + 1 tokens. */
int mtf_dataset_open(const char *spec, int64_t length, mtf_dataset *out, mtf_error *err);
void mtf_dataset_close(mtf_dataset *dataset);

/* Shard index and first token of window w (0 <= w < windows). */
void mtf_dataset_window(const mtf_dataset *dataset, int64_t w, int *shard, int64_t *start);

#endif
