/* Writes a token stream as numbered shards DIR/PREFIX-00000.h5, PREFIX-00001.h5, ... of at most
 * shard_tokens tokens each (the last one shorter). Used by mtf data prepare and mtf data synth. */
#ifndef MTF_IO_SHARD_SINK_H
#define MTF_IO_SHARD_SINK_H

#include <stdint.h>

#include "core/error.h"
#include "io/shard.h"

#define MTF_DEFAULT_SHARD_TOKENS ((int64_t)1 << 24)

typedef struct mtf_shard_sink {
  const char *dir;
  const char *prefix;
  int64_t shard_tokens;
  int64_t vocab_size;
  int64_t eot_id;
  const char *tokenizer;
  int32_t *buf;
  int64_t fill, capacity;
  int shards;      /* shards written so far */
  int64_t total;   /* tokens pushed so far */
} mtf_shard_sink;

/* Creates dir when missing. Refuses a dir that already holds train-*.h5 or val-*.h5 shards (they would
 * mix with the new ones) unless force, in which case those shards are removed first. */
int mtf_output_dir_prepare(const char *dir, int force, mtf_error *err);

void mtf_shard_sink_init(mtf_shard_sink *sink, const char *dir, const char *prefix, int64_t shard_tokens,
                         int64_t vocab_size, int64_t eot_id, const char *tokenizer);
int mtf_shard_sink_push(mtf_shard_sink *sink, const int32_t *tokens, int64_t count, mtf_error *err);
/* Writes what is buffered as the last shard and frees the buffer (also on error). */
int mtf_shard_sink_finish(mtf_shard_sink *sink, mtf_error *err);
void mtf_shard_sink_free(mtf_shard_sink *sink);

#endif
