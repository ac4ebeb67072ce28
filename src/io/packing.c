/* Packed shards for mtf data synth --pack (see packing.h). */
#include "io/packing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/segments.h"
#include "io/shard.h"

void mtf_packer_init(mtf_packer *p, const char *path, int64_t row_length, int one_per_row, int64_t vocab_size,
                     int64_t eot_id, const char *tokenizer) {
  memset(p, 0, sizeof *p);
  snprintf(p->path, sizeof p->path, "%s", path);
  p->row_length = row_length;
  p->one_per_row = one_per_row;
  p->vocab_size = vocab_size;
  p->eot_id = eot_id;
  p->tokenizer = tokenizer;
  p->next_id = 1;
}

static int reserve(mtf_packer *p, int64_t more, mtf_error *err) {
  if (p->count + more <= p->capacity) return MTF_OK;
  int64_t capacity = p->capacity ? p->capacity : 4096;
  while (capacity < p->count + more) capacity *= 2;
  int32_t *tokens = realloc(p->tokens, sizeof(int32_t) * (size_t)capacity);
  if (tokens) p->tokens = tokens;
  int32_t *segments = tokens ? realloc(p->segments, sizeof(int32_t) * (size_t)capacity) : NULL;
  if (segments) p->segments = segments;
  if (!tokens || !segments) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory packing '%s'", p->path);
  p->capacity = capacity;
  return MTF_OK;
}

/* Pads the current row to T tokens. */
static int close_row(mtf_packer *p, mtf_error *err) {
  int64_t used = p->count % p->row_length;
  if (used == 0) return MTF_OK;
  MTF_CHECK(reserve(p, p->row_length - used, err));
  for (int64_t i = used; i < p->row_length; i++, p->count++) p->tokens[p->count] = p->segments[p->count] = 0;
  return MTF_OK;
}

int mtf_packer_push(mtf_packer *p, const int32_t *document, int64_t count, mtf_error *err) {
  if (count > p->row_length)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "a document of %lld tokens does not fit a packed row of %lld: use --pack of at least %lld "
                         "(or shorter examples)",
                         (long long)count, (long long)p->row_length, (long long)count);
  int64_t used = p->count % p->row_length;
  if (used > 0 && (p->one_per_row || used + count > p->row_length)) MTF_CHECK(close_row(p, err));
  if (p->count % p->row_length == 0) p->rows++;
  MTF_CHECK(reserve(p, count, err));
  memcpy(p->tokens + p->count, document, sizeof(int32_t) * (size_t)count);
  for (int64_t i = 0; i < count; i++) p->segments[p->count + i] = p->next_id;
  p->count += count;
  p->next_id++;
  p->documents++;
  return MTF_OK;
}

int mtf_packer_finish(mtf_packer *p, mtf_error *err) {
  int rc = close_row(p, err);
  /* One token past the last row: the last window's last target (padding). */
  if (rc == MTF_OK) rc = reserve(p, 1, err);
  if (rc == MTF_OK) {
    p->tokens[p->count] = p->segments[p->count] = 0;
    p->count++;
    rc = mtf_shard_write(p->path, p->tokens, p->count, p->vocab_size, p->eot_id, p->tokenizer, err);
  }
  if (rc == MTF_OK) rc = mtf_shard_write_segments(p->path, p->segments, p->count, err);
  free(p->tokens);
  free(p->segments);
  p->tokens = p->segments = NULL;
  p->capacity = 0;
  return rc;
}
