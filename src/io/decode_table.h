/* The decode table: token id -> the bytes it stands for (docs/DATA.md, "The decode table").
 *
 * A shard made by an outside tokenizer (tools/prepare_tokenized.py) may carry it on its root group, and a
 * checkpoint copies it into its /tokenizer group, so `mtf generate` prints text for any tokenizer:
 *
 *   decode_offsets  1-D int64 [vocab_size + 1]: id i is bytes [offsets[i], offsets[i+1]) of decode_bytes;
 *                   offsets[0] = 0, non-decreasing, the last one = the length of decode_bytes
 *   decode_bytes    1-D uint8: every token's bytes, concatenated
 *
 * Decoding a sequence concatenates its ids' bytes. Special tokens (end-of-text) and padding ids have no
 * bytes. Every read checks rank, class, width and sizes (files may be hostile): a table that breaks a rule
 * is an error naming the file and the rule, never a crash or a huge allocation. The byte tokenizer needs
 * no table (id b is byte b). */
#ifndef MTF_IO_DECODE_TABLE_H
#define MTF_IO_DECODE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/shard.h"

#define MTF_DECODE_OFFSETS "decode_offsets"
#define MTF_DECODE_BYTES "decode_bytes"
#define MTF_DECODE_MAX_IDS ((int64_t)1 << 24)       /* ids a table may cover */
#define MTF_DECODE_MAX_BYTES ((int64_t)1 << 30)     /* all tokens together */
#define MTF_DECODE_MAX_TOKEN_BYTES ((int64_t)65536) /* one token */

typedef struct mtf_decode_table {
  int64_t count;    /* ids 0..count-1 have an entry (0: no table) */
  int64_t *offsets; /* count + 1 */
  uint8_t *bytes;
  int64_t eot_id;   /* -1 when unknown */
  char tokenizer[MTF_SHARD_TOKENIZER_MAX];
} mtf_decode_table;

/* Checks the two datasets' presence, rank, class, width and sizes at loc (an open HDF5 file or group,
 * hid_t), reading no data. vocab_size is what the table must cover (its offsets hold vocab_size + 1
 * entries); where names the file in messages. *present is 0 when neither dataset exists (not an error),
 * else 1 with *count = vocab_size and *nbytes = the length of decode_bytes. The caller holds
 * mtf_hdf5_lock. */
int mtf_decode_table_probe(int64_t loc, const char *where, int64_t vocab_size, int *present, int64_t *nbytes,
                           mtf_error *err);

/* Probes, then reads and checks the contents (offsets start at 0, never decrease, end at the byte
 * count; no token over MTF_DECODE_MAX_TOKEN_BYTES). *present as in probe; table->count is 0 when
 * absent. The caller holds mtf_hdf5_lock; table->eot_id and tokenizer are left for the caller to fill. */
int mtf_decode_table_read(int64_t loc, const char *where, int64_t vocab_size, int *present, mtf_decode_table *table,
                          mtf_error *err);

/* Reads a shard's table with its tokenizer name and eot_id (takes the lock). table->count is 0 when the
 * shard has none. */
int mtf_shard_read_decode_table(const char *path, mtf_decode_table *table, mtf_error *err);

/* Creates the two datasets at loc and writes them; only `writer` selects data (others take part in a
 * collective write and select nothing). dxpl is a transfer property list (hid_t) or H5P_DEFAULT (0).
 * Returns 0 or -1. The caller holds mtf_hdf5_lock. */
int mtf_decode_table_write(int64_t loc, const mtf_decode_table *table, int writer, int64_t dxpl);

/* The bytes of id (NULL and *size 0 when id is outside the table). */
const uint8_t *mtf_decode_token(const mtf_decode_table *table, int64_t id, size_t *size);

/* Encodes text by greedy longest match over the table (ids without bytes are never used): not the
 * tokenizer's own merges, but every id decodes back to the text. Fails naming the byte offset when a byte
 * has no token. *ids is malloc'ed (*count ids). */
int mtf_decode_table_encode(const mtf_decode_table *table, const char *text, int32_t **ids, int64_t *count,
                            mtf_error *err);

int mtf_decode_table_copy(const mtf_decode_table *from, mtf_decode_table *to, mtf_error *err);
void mtf_decode_table_free(mtf_decode_table *table);

#endif
