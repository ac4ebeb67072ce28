/* Packed sequences: per-token segment ids (docs/DATA.md, "Packed sequences").
 *
 * A shard may carry, next to `tokens`, a 1-D integer dataset `segments` of the same length: the document
 * each token belongs to, 0 for padding. A document is a run of equal non-zero ids; ids need only differ
 * from their neighbours' (a row's ids are renumbered by runs before they reach the model). Or the loader
 * derives them (data.pack: eot): in each row a document ends at the shard's end-of-text id, which belongs
 * to the document it ends.
 *
 * From a row's T + 1 ids the model gets, for its T positions: the input token's segment, the target
 * token's segment (the id one step on) and the position of the input token in its document (0 at each
 * document's first token): attention stays inside a document, positions restart, and the loss skips
 * targets that are padding (and, optionally, a document's first token). */
#ifndef MTF_IO_SEGMENTS_H
#define MTF_IO_SEGMENTS_H

#include <stdint.h>

#include "core/error.h"
#include "io/pack_mode.h"
#include "io/shard.h"

/* Under mtf_hdf5_lock: looks for `segments` in an open shard file and checks it (1-D, as long as
 * `tokens`, an integer type that fits int32, storage in this file). *dataset is its hid_t, or -1 when the
 * shard has none. Failures name the shard and say how to fix it. */
int mtf_shard_segments_probe(int64_t file, const char *path, int64_t num_tokens, int64_t *dataset, mtf_error *err);

/* Reads segment ids [offset, offset + count) of a shard that has them; a negative id is an error naming
 * the shard and its offset. */
int mtf_shard_read_segments(mtf_shard *shard, int64_t offset, int64_t count, int32_t *out, mtf_error *err);

/* Adds a `segments` dataset (int32, count ids, none negative) to the shard at path (written by
 * mtf_shard_write with as many tokens). */
int mtf_shard_write_segments(const char *path, const int32_t *segments, int64_t count, mtf_error *err);

/* Segment ids of one row from its end-of-text ids: 1 up to and including the first eot, then 2, ... */
void mtf_segments_from_eot(const int32_t *tokens, int64_t count, int64_t eot_id, int32_t *segments);

/* One row's model inputs from its T + 1 segment ids: segments[t] and target_segments[t] (the ids of
 * tokens t and t + 1, renumbered 1, 2, ... by runs, padding 0) and positions[t] (t minus the start of
 * token t's run), each T long. */
void mtf_segments_split_row(const int32_t *row_segments, int64_t length, int32_t *segments,
                            int32_t *target_segments, int32_t *positions);

#endif
