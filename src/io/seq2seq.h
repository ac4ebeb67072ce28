/* Seq2seq marks of a shard (docs/DATA.md): where each example, and its answer, lie in `tokens`.
 *
 * A marked shard has the integer attribute `seq2seq` = 1 and a dataset `seq2seq_examples`, int64
 * [examples, 3]: row i is (start, answer_start, end) of example i, token offsets in this shard, so that
 * tokens [start, answer_start) are its prompt (up to and including the `=` of mtf data synth's tasks) and
 * [answer_start, end) its answer (ending in the end-of-text id). Examples lie in order, do not overlap and
 * have a prompt and an answer of at least one token each: 0 <= start < answer_start < end <= num_tokens and
 * end_i <= start_{i+1}. An example that mtf data synth's shard size cut in two is in neither shard's marks.
 *
 * The caller holds no HDF5 lock: these functions take mtf_hdf5_lock (io/shard.h) themselves. */
#ifndef MTF_IO_SEQ2SEQ_H
#define MTF_IO_SEQ2SEQ_H

#include <stdint.h>

#include "core/error.h"

#define MTF_SEQ2SEQ_DATASET "seq2seq_examples"

typedef struct mtf_seq2seq_marks {
  int marked;        /* the shard has the attribute seq2seq = 1 */
  int64_t examples;  /* rows of `spans` */
  int64_t *spans;    /* [examples][3]: start, answer_start, end (malloc'd; NULL when unmarked or empty) */
} mtf_seq2seq_marks;

/* Adds the marks to the shard at path (written by mtf_shard_write, with num_tokens tokens). spans holds
 * examples rows of (start, answer_start, end), checked against the rules above first. */
int mtf_seq2seq_mark_shard(const char *path, const int64_t *spans, int64_t examples, int64_t num_tokens,
                           mtf_error *err);

/* Reads and checks the marks of the shard at path (num_tokens tokens): an unmarked shard gives marked 0.
 * A `seq2seq` attribute other than 1, a missing or malformed `seq2seq_examples` (not int64, not
 * [examples, 3], not stored in the file) or spans that break the rules are errors naming the shard. */
int mtf_seq2seq_read_marks(const char *path, int64_t num_tokens, mtf_seq2seq_marks *out, mtf_error *err);
void mtf_seq2seq_marks_free(mtf_seq2seq_marks *marks);

#endif
