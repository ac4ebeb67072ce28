/* The loader on a mesh, against references:
 *  - rank 0 opens a 1-rank loader; at every step the rows every rank read (gathered to rank 0) must be
 *    exactly that loader's rows at their offsets, and together cover the batch;
 *  - every row of the 1-rank batch must be a window of T + 1 tokens at a multiple of T in some shard,
 *    read straight from the shard, and an epoch visits each window at most once; epochs differ;
 *  - a loader without prefetch gives the same batches as one with prefetch;
 *  - saving the cursor at step k and restoring it (in the same loader and in a fresh one) gives the same
 *    batches again.
 * usage: mpiexec -n N test_io_loader DATA MESH LAYOUT */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/shard.h"

enum { BATCH = 8, LENGTH = 16, ROW = LENGTH + 1, STEPS = 40, RESUME_AT = 13, REPLAY = 9, SEED = 77 };

static mtf_loader *open_loader(const char *data, const mtf_shape *mesh, const mtf_layout_rules *rules, int rank,
                               int prefetch, mtf_comm *comm) {
  mtf_loader_options opts = {.data = data, .batch_size = BATCH, .length = LENGTH, .seed = SEED,
                             .prefetch = prefetch, .vocab_limit = 384, .comm = comm};
  mtf_loader *loader = NULL;
  mtf_error err;
  if (mtf_loader_open(&opts, mesh, rules, rank, &loader, &err) != MTF_OK) {
    fprintf(stderr, "rank %d: loader open failed: %s\n", rank, err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return loader;
}

/* All tokens of every shard, read directly, to check rows against. */
typedef struct all_tokens {
  mtf_dataset dataset;
  int32_t **shard_tokens;
} all_tokens;

static void load_all(const char *data, all_tokens *all) {
  mtf_error err;
  if (mtf_dataset_open(data, LENGTH, &all->dataset, &err) != MTF_OK) MPI_Abort(MPI_COMM_WORLD, 1);
  all->shard_tokens = calloc((size_t)all->dataset.count, sizeof(int32_t *));
  for (int i = 0; i < all->dataset.count; i++) {
    mtf_shard shard;
    if (mtf_shard_open(all->dataset.paths[i], &shard, &err) != MTF_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    all->shard_tokens[i] = malloc(sizeof(int32_t) * (size_t)shard.meta.num_tokens);
    if (mtf_shard_read(&shard, 0, shard.meta.num_tokens, all->shard_tokens[i], 0, &err) != MTF_OK)
      MPI_Abort(MPI_COMM_WORLD, 1);
    mtf_shard_close(&shard);
  }
}

/* The global window index whose tokens equal row, or -1 (windows: starts at multiples of T). */
static int64_t find_window(const all_tokens *all, const int32_t *row) {
  int64_t w = 0;
  for (int s = 0; s < all->dataset.count; s++) {
    int64_t windows = (all->dataset.meta[s].num_tokens - 1) / LENGTH;
    for (int64_t k = 0; k < windows; k++, w++)
      if (memcmp(all->shard_tokens[s] + k * LENGTH, row, sizeof(int32_t) * ROW) == 0) return w;
  }
  return -1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 4) {
    fprintf(stderr, "usage: test_io_loader DATA MESH LAYOUT\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *data = argv[1];
  mtf_shape mesh, one_rank_mesh;
  mtf_layout_rules rules;
  mtf_comm *comm;
  mtf_error err;
  if (mtf_mesh_parse(argv[2], &mesh, &err) || mtf_layout_rules_parse(argv[3], &rules, &err) ||
      mtf_mesh_parse("", &one_rank_mesh, &err) || mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) {
    fprintf(stderr, "setup: %s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = comm->rank, size = comm->size;

  mtf_loader *loader = open_loader(data, &mesh, &rules, rank, 3, comm);
  mtf_loader *unprefetched = open_loader(data, &mesh, &rules, rank, 0, NULL);
  int64_t local = mtf_loader_local_batch(loader), offset = mtf_loader_row_offset(loader);
  CHECK(local >= 1 && BATCH % local == 0);
  CHECK(offset % local == 0 && offset + local <= BATCH);
  int64_t steps_per_epoch = mtf_loader_steps_per_epoch(loader);
  if (rank == 0) printf("mesh %s layout '%s': local batch %lld, %lld steps per epoch\n", argv[2], argv[3],
                        (long long)local, (long long)steps_per_epoch);
  CHECK(steps_per_epoch < STEPS); /* the run crosses an epoch boundary */

  mtf_loader *reference = NULL;
  all_tokens all = {0};
  char *visited = NULL;
  if (rank == 0) {
    reference = open_loader(data, &one_rank_mesh, &rules, 0, 0, NULL);
    CHECK(mtf_loader_local_batch(reference) == BATCH);
    load_all(data, &all);
    visited = calloc((size_t)all.dataset.windows, 1);
  }

  int32_t *mine = malloc(sizeof(int32_t) * (size_t)(local * ROW));
  int32_t *plain = malloc(sizeof(int32_t) * (size_t)(local * ROW));
  int32_t *history = malloc(sizeof(int32_t) * (size_t)(STEPS * local * ROW));
  int32_t *gathered = malloc(sizeof(int32_t) * (size_t)(size * local * ROW));
  int64_t *offsets = malloc(sizeof(int64_t) * (size_t)size);
  int32_t ref[BATCH * ROW];
  mtf_loader_cursor saved = {0};
  int covered_all = 1, slices_match = 1, prefetch_match = 1, rows_are_windows = 1, windows_once = 1;
  int64_t epoch0_first = -1, epoch1_first = -1;

  for (int step = 0; step < STEPS; step++) {
    if (step == RESUME_AT) saved = mtf_loader_cursor_get(loader);
    CHECK(mtf_loader_next(loader, mine, &err) == MTF_OK);
    CHECK(mtf_loader_next(unprefetched, plain, &err) == MTF_OK);
    prefetch_match &= memcmp(mine, plain, sizeof(int32_t) * (size_t)(local * ROW)) == 0;
    memcpy(history + step * local * ROW, mine, sizeof(int32_t) * (size_t)(local * ROW));

    MPI_Gather(mine, (int)(local * ROW), MPI_INT32_T, gathered, (int)(local * ROW), MPI_INT32_T, 0, MPI_COMM_WORLD);
    MPI_Gather(&offset, 1, MPI_INT64_T, offsets, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank != 0) continue;
    mtf_loader_cursor before = mtf_loader_cursor_get(reference);
    CHECK(mtf_loader_next(reference, ref, &err) == MTF_OK);
    int covered[BATCH] = {0};
    for (int r = 0; r < size; r++) {
      for (int64_t i = 0; i < local; i++) covered[offsets[r] + i] = 1;
      slices_match &= memcmp(gathered + r * local * ROW, ref + offsets[r] * ROW, sizeof(int32_t) * (size_t)(local * ROW)) == 0;
    }
    for (int i = 0; i < BATCH; i++) covered_all &= covered[i];
    if (before.position == 0) memset(visited, 0, (size_t)all.dataset.windows); /* a new epoch */
    for (int i = 0; i < BATCH; i++) {
      int64_t w = find_window(&all, ref + i * ROW);
      if (w < 0) { rows_are_windows = 0; continue; }
      /* Synthetic data repeats windows by chance only rarely; a repeat within an epoch is a bug. */
      windows_once &= !visited[w];
      visited[w] = 1;
      if (i == 0 && before.epoch == 0 && before.position == 0) epoch0_first = w;
      if (i == 0 && before.epoch == 1 && before.position == 0) epoch1_first = w;
    }
  }
  CHECK(prefetch_match);
  if (rank == 0) {
    CHECK(covered_all);
    CHECK(slices_match);
    CHECK(rows_are_windows);
    CHECK(windows_once);
    CHECK(epoch0_first >= 0 && epoch1_first >= 0 && epoch0_first != epoch1_first);
  }

  /* Resume in place, then in a fresh loader (as a restarted job would). */
  mtf_loader_cursor end = mtf_loader_cursor_get(loader);
  CHECK(end.epoch == STEPS / steps_per_epoch && end.position == (STEPS % steps_per_epoch) * BATCH);
  CHECK(mtf_loader_cursor_set(loader, &saved, &err) == MTF_OK);
  mtf_loader *fresh = open_loader(data, &mesh, &rules, rank, 2, comm);
  CHECK(mtf_loader_cursor_set(fresh, &saved, &err) == MTF_OK);
  int replay_match = 1, fresh_match = 1;
  for (int step = RESUME_AT; step < RESUME_AT + REPLAY; step++) {
    CHECK(mtf_loader_next(loader, mine, &err) == MTF_OK);
    replay_match &= memcmp(mine, history + step * local * ROW, sizeof(int32_t) * (size_t)(local * ROW)) == 0;
    CHECK(mtf_loader_next(fresh, mine, &err) == MTF_OK);
    fresh_match &= memcmp(mine, history + step * local * ROW, sizeof(int32_t) * (size_t)(local * ROW)) == 0;
  }
  CHECK(replay_match);
  CHECK(fresh_match);

  /* A cursor from other data is refused. */
  mtf_loader_cursor wrong = saved;
  wrong.windows += 1;
  CHECK(mtf_loader_cursor_set(fresh, &wrong, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "the data or the sequence length changed");
  /* A position from a damaged checkpoint near INT64_MAX is refused, without overflowing position + batch
   * (UBSan's signed overflow in the sanitizer pass, issue 35). */
  mtf_loader_cursor huge = saved;
  huge.position = INT64_MAX;
  CHECK(mtf_loader_cursor_set(fresh, &huge, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "is outside this dataset's");

  int failed = check_failed;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("all ranks: %d failed checks\n", failed);
  int status = check_summary() || failed;

  mtf_loader_close(fresh);
  mtf_loader_close(loader);
  mtf_loader_close(unprefetched);
  mtf_loader_close(reference);
  if (rank == 0) {
    for (int i = 0; i < all.dataset.count; i++) free(all.shard_tokens[i]);
    free(all.shard_tokens);
    mtf_dataset_close(&all.dataset);
  }
  free(visited);
  free(mine);
  free(plain);
  free(history);
  free(gathered);
  free(offsets);
  mtf_comm_destroy(comm);
  MPI_Finalize();
  return status;
}
