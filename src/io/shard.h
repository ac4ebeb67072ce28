/* The token shard format (docs/DATA.md): one HDF5 file holding a 1-D dataset `tokens` (uint16 when every
 * id fits, else int32) and the attributes vocab_size, tokenizer, eot_id, num_tokens, format_version on the
 * file's root group. Any tool that writes this (h5py included) makes shards mtf can train on.
 *
 * Writing happens in one process (mtf data prepare/synth). Reading opens a shard read-only with HDF5's
 * default (sec2) driver, so each rank reads on its own, with no collective call.
 *
 * HDF5 in Debian is not built thread-safe, and the loader reads from a background thread: every HDF5
 * call in the process must hold mtf_hdf5_lock() while a loader may be prefetching (the io module does;
 * other modules that touch HDF5 during training must too). */
#ifndef MTF_IO_SHARD_H
#define MTF_IO_SHARD_H

#include <stdint.h>

#include "core/error.h"

#define MTF_SHARD_FORMAT_VERSION 1
#define MTF_SHARD_TOKENIZER_MAX 64

void mtf_hdf5_lock(void);
void mtf_hdf5_unlock(void);

/* What a shard says about itself. Attributes a shard lacks are left at -1 / "" (only `tokens` is
 * required to read a shard). */
typedef struct mtf_shard_meta {
  int64_t vocab_size;
  int64_t eot_id;
  int64_t num_tokens; /* the length of `tokens` (the attribute must agree when present) */
  int64_t format_version;
  char tokenizer[MTF_SHARD_TOKENIZER_MAX];
  int token_bytes; /* 2 (uint16) or 4 (int32) */
  int64_t decode_ids;   /* ids the decode table covers (= vocab_size), 0 when the shard has none */
  int64_t decode_bytes; /* the table's bytes (io/decode_table.h) */
  int has_segments;     /* a checked `segments` dataset of per-token document ids (io/segments.h) */
  /* The file as it was opened (stat): a read after it changed is refused, naming the file. */
  int64_t file_size, file_mtime_sec, file_mtime_nsec, file_ctime_sec, file_ctime_nsec;
} mtf_shard_meta;

/* Writes a whole shard at path (replacing it): tokens are stored as uint16 when vocab_size <= 65536,
 * else int32. Every id must be in [0, vocab_size). */
int mtf_shard_write(const char *path, const int32_t *tokens, int64_t count, int64_t vocab_size, int64_t eot_id,
                    const char *tokenizer, mtf_error *err);

/* An open shard, for reading. */
typedef struct mtf_shard {
  char *path;
  int64_t file; /* hid_t */
  int64_t dataset;
  int64_t segments; /* hid_t of the `segments` dataset, -1 when it has none (io/segments.h) */
  mtf_shard_meta meta;
  int64_t file_space; /* hid_t of the dataset's dataspace, reused by every read */
  uint16_t *narrow;   /* scratch for uint16 reads, widened by hand (HDF5's conversion path is slow) */
  int64_t narrow_capacity;
} mtf_shard;

/* Opens and checks a shard: an HDF5 file, with a 1-D integer `tokens` of uint16 or int32, a
 * format_version this build reads, and a well-formed decode table when it has one (types and sizes; the
 * contents are checked when the table is read, io/decode_table.h). Every failure names the file and says how to fix it. */
int mtf_shard_open(const char *path, mtf_shard *shard, mtf_error *err);
void mtf_shard_close(mtf_shard *shard);

/* Reads tokens [offset, offset + count) as int32 (one hyperslab read). Fails, naming the file, when the
 * file's size, mtime or ctime differ from when it was opened (truncated or rewritten under the reader). When vocab_limit > 0, an id
 * outside [0, vocab_limit) is an error naming the file and the id's offset in it. */
int mtf_shard_read(mtf_shard *shard, int64_t offset, int64_t count, int32_t *out, int64_t vocab_limit,
                   mtf_error *err);

/* Reads a shard's metadata (open, check, close). */
int mtf_shard_stat(const char *path, mtf_shard_meta *meta, mtf_error *err);

#endif
