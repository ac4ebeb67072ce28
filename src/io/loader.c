/* The loader: batch order, per-rank rows, the prefetch thread and the cursor (see loader.h). */
#define _GNU_SOURCE
#include "io/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/agree.h"
#include "core/clock.h"
#include "io/dataset.h"
#include "io/seq2seq.h"
#include "core/rng.h"

#define MAX_OPEN_SHARDS 64 /* file handles kept open; older ones are closed when more are needed */
#define MAX_PREFETCH 64

typedef struct batch_slot {
  int32_t *tokens;
  int32_t *segments; /* with opts.pack: the rows' segment ids, T + 1 a row */
  int rc;
  mtf_error err;
  mtf_loader_cursor after; /* the cursor once this batch is consumed */
} batch_slot;

struct mtf_loader {
  mtf_loader_options opts;
  mtf_dataset dataset;
  int64_t vocab_limit;
  int64_t local_batch, row_offset, row_tokens; /* row_tokens: int32 values per row in a batch buffer */
  /* Seq2seq (opts.seq2seq): marked examples, or the prefix task over windows. examples[i] = (shard,
   * start, answer_start, end); `scratch` holds one example's tokens while a row is built. */
  int marked;
  int64_t n_examples, eot_id;
  int64_t *examples;
  int32_t *scratch;

  /* Read side (the prefetch thread, or the caller when prefetch is 0): open shard handles. */
  mtf_shard *shards;
  int64_t *last_used;
  int64_t use_clock;
  int open_count;

  /* Consumer side. */
  mtf_loader_cursor cursor;
  int32_t *segments; /* with opts.pack: the segment ids of the batch next() returned last */
  int failed;
  mtf_error failure;
  double wait_seconds, read_seconds;

  /* The prefetch ring: `filled` batches from index `head` on are ready. */
  batch_slot *slots;
  int depth, head, filled;
  mtf_loader_cursor producer_cursor;
  int stop, thread_running;
  pthread_t thread;
  pthread_mutex_t mutex;
  pthread_cond_t changed;
};

static int get_shard(mtf_loader *loader, int index, mtf_shard **out, mtf_error *err) {
  mtf_shard *shard = &loader->shards[index];
  if (!shard->path) {
    if (loader->open_count == MAX_OPEN_SHARDS) {
      int oldest = -1;
      for (int i = 0; i < loader->dataset.count; i++)
        if (loader->shards[i].path && (oldest < 0 || loader->last_used[i] < loader->last_used[oldest])) oldest = i;
      mtf_shard_close(&loader->shards[oldest]);
      loader->open_count--;
    }
    MTF_CHECK(mtf_shard_open(loader->dataset.paths[index], shard, err));
    /* The windows were counted from the file as listed: one changed since then is refused. */
    const mtf_shard_meta *listed = &loader->dataset.meta[index];
    if (shard->meta.file_size != listed->file_size || shard->meta.file_mtime_sec != listed->file_mtime_sec ||
        shard->meta.file_mtime_nsec != listed->file_mtime_nsec || shard->meta.num_tokens != listed->num_tokens) {
      int rc = mtf_error_set(err, MTF_ERR_IO,
                             "shard '%s' changed since it was opened (was %lld bytes, now %lld, or rewritten): a "
                             "shard must not be modified while it is read; restart once it is written",
                             loader->dataset.paths[index], (long long)listed->file_size,
                             (long long)shard->meta.file_size);
      mtf_shard_close(shard);
      return rc;
    }
    loader->open_count++;
  }
  loader->last_used[index] = ++loader->use_clock;
  *out = shard;
  return MTF_OK;
}

static void advance(mtf_loader_cursor *cursor, int64_t batch_size) {
  cursor->position += batch_size;
  if (cursor->position + batch_size > cursor->windows) {
    cursor->epoch++;
    cursor->position = 0;
  }
}

/* One seq2seq row (loader.h) into row[4 T]: encoder input, decoder input, targets, loss weights. */
static int read_seq2seq_row(mtf_loader *loader, int64_t window, int32_t *row, mtf_error *err) {
  int64_t T = loader->opts.length, start, answer, end;
  int shard_index;
  if (loader->marked) {
    const int64_t *e = loader->examples + 4 * window;
    shard_index = (int)e[0];
    start = e[1], answer = e[2], end = e[3];
  } else { /* the prefix task over a window of T + 1 tokens */
    mtf_dataset_window(&loader->dataset, window, &shard_index, &start);
    answer = start + T / 2, end = start + T + 1;
  }
  int64_t prompt = answer - start < T ? answer - start : T, reply = end - answer < T ? end - answer : T;
  mtf_shard *shard = NULL;
  MTF_CHECK(get_shard(loader, shard_index, &shard, err));
  int32_t *scratch = loader->scratch;
  MTF_CHECK(mtf_shard_read(shard, start, prompt, scratch, loader->vocab_limit, err));
  MTF_CHECK(mtf_shard_read(shard, answer, reply, scratch + T, loader->vocab_limit, err));
  int32_t *encoder = row, *decoder = row + T, *targets = row + 2 * T, *weights = row + 3 * T;
  int32_t start_id = loader->eot_id >= 0 ? (int32_t)loader->eot_id : 0;
  for (int64_t i = 0; i < T; i++) {
    encoder[i] = i < prompt ? scratch[i] : 0;
    targets[i] = i < reply ? scratch[T + i] : 0;
    weights[i] = i < reply;
    decoder[i] = i == 0 ? start_id : i < reply ? scratch[T + i - 1] : 0;
  }
  return MTF_OK;
}

/* Reads this rank's rows of the batch at *cursor into tokens and advances *cursor. */
static int read_batch(mtf_loader *loader, mtf_loader_cursor *cursor, int32_t *tokens, int32_t *segments,
                      double *seconds, mtf_error *err) {
  double start = mtf_now_seconds();
  mtf_permutation order = mtf_permutation_make((uint64_t)cursor->windows, cursor->seed, (uint64_t)cursor->epoch);
  int rc = MTF_OK;
  for (int64_t r = 0; rc == MTF_OK && r < loader->local_batch; r++) {
    uint64_t position = (uint64_t)(cursor->position + loader->row_offset + r);
    int64_t window = (int64_t)mtf_permutation_at(&order, position), token_start = 0;
    int shard_index = 0;
    if (!loader->marked) mtf_dataset_window(&loader->dataset, window, &shard_index, &token_start);
    if (loader->opts.seq2seq) {
      rc = read_seq2seq_row(loader, window, tokens + r * loader->row_tokens, err);
      continue;
    }
    mtf_shard *shard = NULL;
    rc = get_shard(loader, shard_index, &shard, err);
    int32_t *row = tokens + r * loader->row_tokens;
    if (rc == MTF_OK) rc = mtf_shard_read(shard, token_start, loader->row_tokens, row, loader->vocab_limit, err);
    if (rc == MTF_OK && loader->opts.pack == MTF_PACK_SEGMENTS)
      rc = mtf_shard_read_segments(shard, token_start, loader->row_tokens, segments + r * loader->row_tokens, err);
    if (rc == MTF_OK && loader->opts.pack == MTF_PACK_EOT)
      mtf_segments_from_eot(row, loader->row_tokens, shard->meta.eot_id, segments + r * loader->row_tokens);
  }
  if (rc == MTF_OK) advance(cursor, loader->opts.batch_size);
  *seconds = mtf_now_seconds() - start;
  return rc;
}

static void *prefetch_main(void *arg) {
  mtf_loader *loader = arg;
  pthread_mutex_lock(&loader->mutex);
  while (!loader->stop) {
    if (loader->filled == loader->depth) {
      pthread_cond_wait(&loader->changed, &loader->mutex);
      continue;
    }
    batch_slot *slot = &loader->slots[(loader->head + loader->filled) % loader->depth];
    mtf_loader_cursor cursor = loader->producer_cursor;
    pthread_mutex_unlock(&loader->mutex);
    mtf_error_clear(&slot->err);
    double seconds;
    int rc = read_batch(loader, &cursor, slot->tokens, slot->segments, &seconds, &slot->err);
    pthread_mutex_lock(&loader->mutex);
    loader->read_seconds += seconds;
    slot->rc = rc;
    slot->after = cursor;
    loader->producer_cursor = cursor;
    loader->filled++;
    pthread_cond_broadcast(&loader->changed);
    if (rc != MTF_OK) break; /* the consumer reports it; nothing after a failed batch is read */
  }
  pthread_mutex_unlock(&loader->mutex);
  return NULL;
}

static int start_prefetch(mtf_loader *loader, mtf_error *err) {
  if (loader->depth == 0) return MTF_OK;
  loader->head = loader->filled = 0;
  loader->stop = 0;
  loader->producer_cursor = loader->cursor;
  if (pthread_create(&loader->thread, NULL, prefetch_main, loader) != 0)
    return mtf_error_set(err, MTF_ERR_NOMEM, "cannot start the data prefetch thread (set prefetch to 0?)");
  loader->thread_running = 1;
  return MTF_OK;
}

static void stop_prefetch(mtf_loader *loader) {
  if (!loader->thread_running) return;
  pthread_mutex_lock(&loader->mutex);
  loader->stop = 1;
  pthread_cond_broadcast(&loader->changed);
  pthread_mutex_unlock(&loader->mutex);
  pthread_join(loader->thread, NULL);
  loader->thread_running = 0;
}

/* Seq2seq: every shard's marks, gathered into loader->examples; or none at all (the prefix task). */
static int open_seq2seq(mtf_loader *loader, mtf_error *err) {
  const mtf_dataset *data = &loader->dataset;
  loader->eot_id = data->count > 0 ? data->meta[0].eot_id : -1;
  loader->scratch = malloc(sizeof(int32_t) * 2 * (size_t)loader->opts.length);
  if (!loader->scratch) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory opening the loader");
  int first_marked = -1, first_unmarked = -1;
  for (int i = 0; i < data->count; i++) {
    mtf_seq2seq_marks marks;
    MTF_CHECK(mtf_seq2seq_read_marks(data->paths[i], data->meta[i].num_tokens, &marks, err));
    if (!marks.marked) {
      if (first_unmarked < 0) first_unmarked = i;
      continue;
    }
    if (first_marked < 0) first_marked = i;
    int64_t *grown = realloc(loader->examples, sizeof(int64_t) * 4 * (size_t)(loader->n_examples + marks.examples + 1));
    if (!grown) {
      mtf_seq2seq_marks_free(&marks);
      return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory for the seq2seq marks of '%s'", loader->opts.data);
    }
    loader->examples = grown;
    for (int64_t e = 0; e < marks.examples; e++) {
      int64_t *row = loader->examples + 4 * loader->n_examples++;
      row[0] = i;
      memcpy(row + 1, marks.spans + 3 * e, 3 * sizeof(int64_t));
    }
    mtf_seq2seq_marks_free(&marks);
  }
  if (first_marked >= 0 && first_unmarked >= 0)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "data '%s' mixes shards with seq2seq marks ('%s') and without ('%s'): an encoder-decoder "
                         "trains on marked examples or on the prefix task of plain text, not both; use one kind",
                         loader->opts.data, data->paths[first_marked], data->paths[first_unmarked]);
  loader->marked = first_marked >= 0;
  return MTF_OK;
}

/* data.pack against what the shards hold: segments need a `segments` dataset in every shard, eot an
 * end-of-text id. */
static int check_pack(const mtf_loader *loader, mtf_error *err) {
  const mtf_dataset *data = &loader->dataset;
  for (int i = 0; i < data->count; i++) {
    if (loader->opts.pack == MTF_PACK_SEGMENTS && !data->meta[i].has_segments)
      return mtf_error_set(err, MTF_ERR_INVALID,
                           "shard '%s' has no dataset 'segments', but data.pack is segments: add per-token segment "
                           "ids (mtf data synth --pack, docs/DATA.md), or set data.pack: eot or none",
                           data->paths[i]);
    if (loader->opts.pack == MTF_PACK_EOT && data->meta[i].eot_id < 0)
      return mtf_error_set(err, MTF_ERR_INVALID,
                           "shard '%s' has no end-of-text id (attribute eot_id), but data.pack is eot, which splits "
                           "rows into documents at it: set the shard's eot_id, or set data.pack: none",
                           data->paths[i]);
  }
  return MTF_OK;
}

/* Everything in open that a single rank can check or fail at. */
static int open_local(mtf_loader *loader, const mtf_loader_options *opts, const mtf_shape *mesh,
                      const mtf_layout_rules *rules, int mesh_rank, mtf_error *err) {
  if (!opts->data || !opts->data[0]) return mtf_error_set(err, MTF_ERR_INVALID, "no data given (a directory, glob or shard)");
  if (opts->batch_size < 1 || opts->length < 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "batch size and sequence length must be at least 1 (got %lld, %lld)",
                         (long long)opts->batch_size, (long long)opts->length);
  if (opts->prefetch < 0 || opts->prefetch > MAX_PREFETCH)
    return mtf_error_set(err, MTF_ERR_INVALID, "prefetch depth must be in [0, %d], not %d", MAX_PREFETCH,
                         opts->prefetch);
  if (mesh_rank < 0 || mesh_rank >= mtf_mesh_size(mesh) || (opts->comm && opts->comm->rank != mesh_rank))
    return mtf_error_set(err, MTF_ERR_INVALID, "loader: rank %d is not this process's rank in the mesh", mesh_rank);

  mtf_shape shape = {0};
  MTF_CHECK(mtf_shape_append(&shape, "batch", opts->batch_size, err));
  MTF_CHECK(mtf_shape_append(&shape, "length", opts->length, err));
  mtf_tensor_layout layout;
  MTF_CHECK(mtf_tensor_layout_make(rules, mesh, "inputs", &shape, &layout, err));
  if (layout.mesh_axis[1] >= 0)
    return mtf_error_set(err, MTF_ERR_LAYOUT,
                         "the data loader hands out whole sequences, but the layout splits 'length' over mesh axis "
                         "'%s': drop the layout rule 'length:%s'",
                         mesh->dims[layout.mesh_axis[1]].name, mesh->dims[layout.mesh_axis[1]].name);
  mtf_shape slice = mtf_layout_slice_shape(&layout, mesh);
  int coord[MTF_MAX_MESH_AXES];
  int64_t offset[MTF_MAX_RANK];
  mtf_mesh_rank_to_coord(mesh, mesh_rank, coord);
  mtf_layout_slice_offset(&layout, mesh, coord, offset);
  loader->local_batch = slice.dims[0].size;
  loader->row_offset = offset[0];
  loader->row_tokens = opts->length + 1;

  MTF_CHECK(mtf_dataset_open(opts->data, opts->length, &loader->dataset, err));
  mtf_dataset *data = &loader->dataset;
  if (opts->seq2seq) {
    loader->row_tokens = 4 * opts->length;
    MTF_CHECK(open_seq2seq(loader, err));
  }
  int64_t windows = loader->marked ? loader->n_examples : data->windows;
  if (windows < opts->batch_size)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "data '%s' holds %lld %s in %d shards, fewer than one batch of %lld: "
                         "add data, or use a smaller batch or a shorter sequence length",
                         opts->data, (long long)windows, loader->marked ? "seq2seq examples" : "windows",
                         data->count, (long long)opts->batch_size);
  MTF_CHECK(check_pack(loader, err));
  loader->vocab_limit = opts->vocab_limit > 0 ? opts->vocab_limit : (data->max_vocab_size > 0 ? data->max_vocab_size : 0);
  loader->cursor = (mtf_loader_cursor){opts->seed, 0, 0, windows};

  loader->shards = calloc((size_t)data->count, sizeof(mtf_shard));
  loader->last_used = calloc((size_t)data->count, sizeof(int64_t));
  loader->depth = opts->prefetch;
  loader->slots = calloc((size_t)(loader->depth ? loader->depth : 1), sizeof(batch_slot));
  if (!loader->shards || !loader->last_used || !loader->slots)
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory opening the loader");
  size_t batch_bytes = sizeof(int32_t) * (size_t)(loader->local_batch * loader->row_tokens);
  if (opts->pack != MTF_PACK_NONE && !(loader->segments = malloc(batch_bytes)))
    return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory opening the loader");
  for (int i = 0; i < loader->depth; i++) {
    loader->slots[i].tokens = malloc(batch_bytes);
    if (opts->pack != MTF_PACK_NONE) loader->slots[i].segments = malloc(batch_bytes);
    if (!loader->slots[i].tokens || (opts->pack != MTF_PACK_NONE && !loader->slots[i].segments))
      return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory for %d prefetched batches", loader->depth);
  }
  return start_prefetch(loader, err);
}

int mtf_loader_open(const mtf_loader_options *opts, const mtf_shape *mesh, const mtf_layout_rules *rules,
                    int mesh_rank, mtf_loader **out, mtf_error *err) {
  *out = NULL;
  mtf_loader *loader = calloc(1, sizeof *loader);
  int rc = loader ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "out of memory opening the loader");
  if (loader) {
    loader->opts = *opts;
    pthread_mutex_init(&loader->mutex, NULL);
    pthread_cond_init(&loader->changed, NULL);
    rc = open_local(loader, opts, mesh, rules, mesh_rank, err);
  }
  rc = mtf_comm_agree(opts->comm, rc, err);
  if (rc != MTF_OK) {
    if (loader) mtf_loader_close(loader);
    return rc;
  }
  *out = loader;
  return MTF_OK;
}

int64_t mtf_loader_local_batch(const mtf_loader *loader) { return loader->local_batch; }
int64_t mtf_loader_row_offset(const mtf_loader *loader) { return loader->row_offset; }
int64_t mtf_loader_windows(const mtf_loader *loader) { return loader->cursor.windows; }
int64_t mtf_loader_steps_per_epoch(const mtf_loader *loader) {
  return loader->cursor.windows / loader->opts.batch_size;
}
int64_t mtf_loader_row_ints(const mtf_loader *loader) { return loader->row_tokens; }
int mtf_loader_examples_marked(const mtf_loader *loader) { return loader->marked; }

int mtf_loader_next(mtf_loader *loader, int32_t *tokens, mtf_error *err) {
  if (loader->failed) {
    if (err) *err = loader->failure;
    return loader->failure.code;
  }
  mtf_error local;
  mtf_error_clear(&local);
  mtf_loader_cursor after = loader->cursor;
  int rc;
  double start = mtf_now_seconds();
  if (loader->depth == 0) {
    double seconds;
    rc = read_batch(loader, &after, tokens, loader->segments, &seconds, &local);
    loader->read_seconds += seconds;
  } else {
    pthread_mutex_lock(&loader->mutex);
    while (loader->filled == 0) pthread_cond_wait(&loader->changed, &loader->mutex);
    batch_slot *slot = &loader->slots[loader->head];
    pthread_mutex_unlock(&loader->mutex);
    /* The slot is ours until head moves: the producer only writes slots past the filled ones. */
    rc = slot->rc;
    if (rc == MTF_OK)
      memcpy(tokens, slot->tokens, sizeof(int32_t) * (size_t)(loader->local_batch * loader->row_tokens));
    if (rc == MTF_OK && loader->segments)
      memcpy(loader->segments, slot->segments, sizeof(int32_t) * (size_t)(loader->local_batch * loader->row_tokens));
    else if (rc != MTF_OK)
      local = slot->err;
    after = slot->after;
    pthread_mutex_lock(&loader->mutex);
    loader->head = (loader->head + 1) % loader->depth;
    loader->filled--;
    pthread_cond_broadcast(&loader->changed);
    pthread_mutex_unlock(&loader->mutex);
  }
  loader->wait_seconds += mtf_now_seconds() - start;
  rc = mtf_comm_agree(loader->opts.comm, rc, &local);
  if (rc != MTF_OK) {
    loader->failed = 1;
    loader->failure = local;
    if (err) *err = local;
    return rc;
  }
  loader->cursor = after;
  return MTF_OK;
}

void mtf_loader_split(const mtf_loader *loader, const int32_t *rows, int32_t *inputs, int32_t *targets) {
  int64_t length = loader->opts.length;
  for (int64_t r = 0; r < loader->local_batch; r++) {
    const int32_t *row = rows + r * loader->row_tokens;
    memcpy(inputs + r * length, row, sizeof(int32_t) * (size_t)length);
    memcpy(targets + r * length, row + 1, sizeof(int32_t) * (size_t)length);
  }
}

void mtf_loader_split_batch(const mtf_loader *loader, const int32_t *rows, const mtf_loader_batch *batch) {
  if (!loader->opts.seq2seq) {
    mtf_loader_split(loader, rows, batch->tokens, batch->targets);
    return;
  }
  int64_t T = loader->opts.length;
  size_t bytes = sizeof(int32_t) * (size_t)T;
  for (int64_t r = 0; r < loader->local_batch; r++) {
    const int32_t *row = rows + r * loader->row_tokens;
    memcpy(batch->encoder_tokens + r * T, row, bytes);
    memcpy(batch->tokens + r * T, row + T, bytes);
    memcpy(batch->targets + r * T, row + 2 * T, bytes);
    memcpy(batch->loss_weights + r * T, row + 3 * T, bytes);
  }
}

void mtf_loader_split_segments(const mtf_loader *loader, int32_t *segments, int32_t *target_segments,
                               int32_t *positions) {
  MTF_ASSERT(loader->segments != NULL); /* opened with opts.pack */
  int64_t length = loader->opts.length;
  for (int64_t r = 0; r < loader->local_batch; r++)
    mtf_segments_split_row(loader->segments + r * loader->row_tokens, length, segments + r * length,
                           target_segments + r * length, positions + r * length);
}

mtf_loader_cursor mtf_loader_cursor_get(const mtf_loader *loader) { return loader->cursor; }

int mtf_loader_cursor_set(mtf_loader *loader, const mtf_loader_cursor *cursor, mtf_error *err) {
  if (loader->failed) {
    if (err) *err = loader->failure;
    return loader->failure.code;
  }
  int64_t windows = loader->cursor.windows, batch = loader->opts.batch_size;
  if (cursor->windows != windows)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "the saved data cursor is for a dataset of %lld windows, but '%s' with length %lld has "
                         "%lld: the data or the sequence length changed since it was saved",
                         (long long)cursor->windows, loader->opts.data, (long long)loader->opts.length,
                         (long long)windows);
  /* position > windows - batch: position + batch would overflow for a damaged position near INT64_MAX */
  if (cursor->epoch < 0 || cursor->position < 0 || cursor->position > windows - batch)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "the saved data cursor (epoch %lld, position %lld) is outside this dataset's %lld windows "
                         "for batch %lld",
                         (long long)cursor->epoch, (long long)cursor->position, (long long)windows, (long long)batch);
  stop_prefetch(loader);
  loader->cursor = *cursor;
  return start_prefetch(loader, err);
}

void mtf_loader_times(mtf_loader *loader, double *wait_seconds, double *read_seconds) {
  pthread_mutex_lock(&loader->mutex);
  *wait_seconds = loader->wait_seconds;
  *read_seconds = loader->read_seconds;
  pthread_mutex_unlock(&loader->mutex);
}

void mtf_loader_close(mtf_loader *loader) {
  if (!loader) return;
  stop_prefetch(loader);
  for (int i = 0; loader->shards && i < loader->dataset.count; i++)
    if (loader->shards[i].path) mtf_shard_close(&loader->shards[i]);
  for (int i = 0; loader->slots && i < loader->depth; i++) {
    free(loader->slots[i].tokens);
    free(loader->slots[i].segments);
  }
  free(loader->segments);
  free(loader->slots);
  free(loader->shards);
  free(loader->last_used);
  free(loader->examples);
  free(loader->scratch);
  mtf_dataset_close(&loader->dataset);
  pthread_mutex_destroy(&loader->mutex);
  pthread_cond_destroy(&loader->changed);
  free(loader);
}
