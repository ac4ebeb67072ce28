/* The training input: per step, each rank's rows of a global batch of B windows of T + 1 tokens.
 *
 * Order. Epoch e visits the dataset's windows (dataset.h) in the order of a keyed permutation of
 * (seed, e) (rng.h); step k of an epoch takes positions [kB, kB + B) of it, and an epoch ends when fewer
 * than B positions remain (the remainder is dropped). The order depends on nothing else: not the mesh,
 * the rank, the prefetch depth, nor whether the run was resumed.
 *
 * Ownership. The rows a rank owns come from the layout of the tensor [batch:B, length:T] under the layout
 * rules (core/layout.h): a rank holds rows [row_offset, row_offset + local_batch) of every global batch,
 * and ranks that replicate the batch read the same rows. Each row is one HDF5 hyperslab read of T + 1
 * tokens; no rank reads rows it does not own. Splitting `length` is refused: the loader hands out whole
 * sequences.
 *
 * Prefetch. With prefetch >= 1 a background thread reads up to that many batches ahead of the consumer,
 * so reading overlaps compute; 0 reads inside mtf_loader_next. The batches are identical either way.
 * The thread makes HDF5 calls only (under mtf_hdf5_lock, see shard.h) and no MPI calls.
 *
 * Errors. A bad dataset, a token id >= the vocabulary limit, or a failed read is an error naming the file
 * (and the offset). When opts.comm is given, open and every next() are agreement points (agree.h): all
 * ranks return the same error together, so none is left waiting in a later collective. */
#ifndef MTF_IO_LOADER_H
#define MTF_IO_LOADER_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/error.h"
#include "core/layout.h"
#include "io/segments.h"

typedef struct mtf_loader mtf_loader;

typedef struct mtf_loader_options {
  const char *data;      /* a directory of shards, a glob, or one shard file */
  int64_t batch_size;    /* B, the global batch */
  int64_t length;        /* T: each row holds T + 1 tokens (inputs and the targets shifted by one) */
  uint64_t seed;
  int prefetch;          /* batches read ahead by a background thread; 0 = none */
  int64_t vocab_limit;   /* the model's vocabulary: ids must be below it. 0 = the shards' largest vocab_size */
  mtf_comm *comm;        /* optional: every rank learns any rank's error (collective open/next) */
  int seq2seq;           /* rows for an encoder-decoder (below) instead of windows of T + 1 tokens */
  mtf_pack_mode pack;    /* data.pack: segment ids with every row (io/segments.h); NONE: tokens alone */
} mtf_loader_options;

/* Where the stream stands: the next batch is positions [position, position + B) of epoch `epoch`'s order
 * under `seed`. `windows` records the dataset's window count so a restore can detect changed data. */
typedef struct mtf_loader_cursor {
  uint64_t seed;
  int64_t epoch;
  int64_t position;
  int64_t windows;
} mtf_loader_cursor;

/* Opens the dataset and starts prefetching. mesh_rank is this process's row-major rank in mesh (and must
 * equal opts.comm->rank when comm is given). With a comm this is collective. */
int mtf_loader_open(const mtf_loader_options *opts, const mtf_shape *mesh, const mtf_layout_rules *rules,
                    int mesh_rank, mtf_loader **out, mtf_error *err);

int64_t mtf_loader_local_batch(const mtf_loader *loader); /* rows this rank gets per step */
int64_t mtf_loader_row_offset(const mtf_loader *loader);  /* global index of its first row */
int64_t mtf_loader_windows(const mtf_loader *loader);     /* windows in the dataset */
int64_t mtf_loader_steps_per_epoch(const mtf_loader *loader);

/* Seq2seq rows (opts.seq2seq, an encoder-decoder model; docs/DATA.md). When every shard carries seq2seq
 * marks (io/seq2seq.h), the windows are the marked examples, one per row: the encoder input is the
 * prompt, the decoder target the answer (its end-of-text included), the decoder input the answer shifted
 * right behind a start token (the end-of-text id), each cut to T tokens and padded with id 0; the loss
 * weights are 1 on the answer's tokens, 0 on padding. When no shard is marked, the windows are those of
 * T + 1 tokens as always, as a prefix task: the first T / 2 tokens (rounded down) are the prompt, the rest the
 * answer. Some shards marked and some not is an error. */

/* int32 values per row that mtf_loader_next writes: T + 1, or 4 T with seq2seq. */
int64_t mtf_loader_row_ints(const mtf_loader *loader);
/* Whether the rows are of marked examples (1) or the prefix task (0); seq2seq loaders only. */
int mtf_loader_examples_marked(const mtf_loader *loader);

/* A batch as the model's int32 inputs, each [local_batch][T] row-major (this rank's slice of [batch,
 * length]). encoder_tokens and loss_weights are filled by seq2seq loaders only (may be NULL otherwise). */
typedef struct mtf_loader_batch {
  int32_t *tokens, *targets, *encoder_tokens, *loss_weights;
} mtf_loader_batch;

/* Fills tokens[local_batch][mtf_loader_row_ints] with the next batch's rows and advances the cursor. Collective with a
 * comm. After an error the loader stays failed (every later call returns the same error). */
int mtf_loader_next(mtf_loader *loader, int32_t *tokens, mtf_error *err);

/* Splits the rows of one next() call, tokens[local_batch][T + 1], into the model's int32 inputs and
 * targets, each [local_batch][T] (row-major, this rank's slice of [batch, length]): targets are the
 * inputs shifted by one token. Hand them to the session with mtf_session_set_input_slice_int. */
void mtf_loader_split(const mtf_loader *loader, const int32_t *tokens, int32_t *inputs, int32_t *targets);
/* The same for either kind of loader: the rows of one next() call into batch's arrays. */
void mtf_loader_split_batch(const mtf_loader *loader, const int32_t *tokens, const mtf_loader_batch *batch);

/* With opts.pack, the segment inputs of the batch the last mtf_loader_next returned, each [local_batch][T]
 * like inputs: the input and target tokens' segments and the input tokens' positions in their documents
 * (mtf_segments_split_row). */
void mtf_loader_split_segments(const mtf_loader *loader, int32_t *segments, int32_t *target_segments,
                               int32_t *positions);

/* The cursor of the batch the next mtf_loader_next returns. */
mtf_loader_cursor mtf_loader_cursor_get(const mtf_loader *loader);
/* Makes the next batch the one at cursor (discarding prefetched batches). Fails when the cursor does not
 * fit this dataset (a different window count, or a position past the last full batch). */
int mtf_loader_cursor_set(mtf_loader *loader, const mtf_loader_cursor *cursor, mtf_error *err);

/* Seconds the consumer waited in next() and seconds spent reading, since open (for benchmarks). */
void mtf_loader_times(mtf_loader *loader, double *wait_seconds, double *read_seconds);

void mtf_loader_close(mtf_loader *loader);

#endif
