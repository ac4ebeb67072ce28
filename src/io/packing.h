/* Packed shards: whole documents laid into rows of T tokens with per-token segment ids (io/segments.h),
 * for `mtf data synth --pack T` (docs/DATA.md). Each row holds as many whole documents as fit (or one,
 * with one_per_row), then padding (token 0, segment 0). Documents get ids 1, 2, ... through the shard, so
 * the token one past a row (the last target of a window of T + 1, the next row's first) is never taken
 * for the row's own document. The shard holds rows x T + 1 tokens: exactly `rows` windows of T + 1. */
#ifndef MTF_IO_PACKING_H
#define MTF_IO_PACKING_H

#include <stdint.h>

#include "core/error.h"

typedef struct mtf_packer {
  char path[4096];
  int64_t row_length; /* T */
  int one_per_row;
  int64_t vocab_size, eot_id;
  const char *tokenizer;
  int32_t *tokens, *segments;
  int64_t count, capacity;
  int32_t next_id;
  int64_t documents, rows;
} mtf_packer;

void mtf_packer_init(mtf_packer *p, const char *path, int64_t row_length, int one_per_row, int64_t vocab_size,
                     int64_t eot_id, const char *tokenizer);
/* Adds one document (at most T tokens: a longer one is an error that says so). */
int mtf_packer_push(mtf_packer *p, const int32_t *document, int64_t count, mtf_error *err);
/* Pads the last row, writes the shard with its segments and frees the buffers (also on error). */
int mtf_packer_finish(mtf_packer *p, mtf_error *err);

#endif
