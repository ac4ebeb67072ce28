/* Loader throughput against a plain sequential read of the same shards (docs/PERFORMANCE.md).
 *
 * usage: bench_loader DATA BATCH LENGTH STEPS [COMPUTE_MS]
 *
 * 1. sequential: every shard read front to back in 1M-token hyperslabs, as int32 (the upper bound for
 *    reading these files through HDF5 in one thread);
 * 2. loader, prefetch 0 and prefetch 2: STEPS batches of BATCH random windows of LENGTH + 1 tokens on one
 *    rank (mesh of 1), i.e. one hyperslab read per row;
 * 3. with COMPUTE_MS > 0: the same loaders while each step also "computes" (spins) for COMPUTE_MS, to show
 *    how much of the reading prefetch hides.
 * Each phase runs once untimed first so that all of them read from the page cache. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/shard.h"

static void die(const mtf_error *err) {
  fprintf(stderr, "bench_loader: error: %s\n", err->msg);
  exit(1);
}

static double sequential_read(const char *data, int64_t *tokens_out) {
  mtf_dataset dataset;
  mtf_error err;
  if (mtf_dataset_open(data, 1, &dataset, &err)) die(&err);
  enum { CHUNK = 1 << 20 };
  int32_t *buf = malloc(sizeof(int32_t) * CHUNK);
  int64_t tokens = 0, checksum = 0;
  double start = mtf_now_seconds();
  for (int i = 0; i < dataset.count; i++) {
    mtf_shard shard;
    if (mtf_shard_open(dataset.paths[i], &shard, &err)) die(&err);
    for (int64_t at = 0; at < shard.meta.num_tokens; at += CHUNK) {
      int64_t count = shard.meta.num_tokens - at < CHUNK ? shard.meta.num_tokens - at : CHUNK;
      if (mtf_shard_read(&shard, at, count, buf, 0, &err)) die(&err);
      checksum += buf[count - 1];
      tokens += count;
    }
    mtf_shard_close(&shard);
  }
  double seconds = mtf_now_seconds() - start;
  free(buf);
  mtf_dataset_close(&dataset);
  if (checksum < 0) printf("impossible\n"); /* keeps the reads from being optimised away */
  *tokens_out = tokens;
  return seconds;
}

static void spin(double seconds) {
  double end = mtf_now_seconds() + seconds;
  while (mtf_now_seconds() < end) {
  }
}

/* Returns wall seconds for `steps` batches; *wait gets the seconds next() blocked. */
static double run_loader(const char *data, int64_t batch, int64_t length, int steps, int prefetch,
                         double compute_seconds, double *wait) {
  mtf_shape mesh;
  mtf_layout_rules rules;
  mtf_error err;
  mtf_mesh_parse("", &mesh, &err);
  mtf_layout_rules_parse("batch:b", &rules, &err);
  mtf_loader_options opts = {.data = data, .batch_size = batch, .length = length, .seed = 1, .prefetch = prefetch};
  mtf_loader *loader;
  if (mtf_loader_open(&opts, &mesh, &rules, 0, &loader, &err)) die(&err);
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(batch * (length + 1)));
  double start = mtf_now_seconds();
  for (int s = 0; s < steps; s++) {
    if (mtf_loader_next(loader, tokens, &err)) die(&err);
    if (compute_seconds > 0) spin(compute_seconds);
  }
  double seconds = mtf_now_seconds() - start, read;
  mtf_loader_times(loader, wait, &read);
  free(tokens);
  mtf_loader_close(loader);
  return seconds;
}

int main(int argc, char **argv) {
  if (argc < 5 || argc > 6) {
    fprintf(stderr, "usage: bench_loader DATA BATCH LENGTH STEPS [COMPUTE_MS]\n");
    return 2;
  }
  const char *data = argv[1];
  int64_t batch = atoll(argv[2]), length = atoll(argv[3]);
  int steps = atoi(argv[4]);
  double compute = argc == 6 ? atof(argv[5]) / 1e3 : 0;
  if (batch < 1 || length < 1 || steps < 1 || compute < 0) {
    fprintf(stderr, "bench_loader: BATCH, LENGTH and STEPS must be positive, COMPUTE_MS >= 0\n");
    return 2;
  }
  int64_t tokens;
  double wait;
  sequential_read(data, &tokens); /* warm the page cache */
  double seq = sequential_read(data, &tokens);
  printf("data %s: %lld tokens\n", data, (long long)tokens);
  printf("sequential read (1M-token hyperslabs)      %8.1f M tokens/s\n", (double)tokens / seq / 1e6);
  double step_tokens = (double)(batch * (length + 1));
  printf("loader, batch %lld x %lld tokens, %d steps:\n", (long long)batch, (long long)(length + 1), steps);
  for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
    run_loader(data, batch, length, steps, prefetch, 0, &wait);
    double seconds = run_loader(data, batch, length, steps, prefetch, 0, &wait);
    printf("  prefetch %d                                %8.1f M tokens/s (%.1f%% of sequential)\n", prefetch,
           step_tokens * steps / seconds / 1e6, 100.0 * (step_tokens * steps / seconds) / ((double)tokens / seq));
  }
  if (compute > 0) {
    printf("with %.1f ms of compute per step:\n", compute * 1e3);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
      double seconds = run_loader(data, batch, length, steps, prefetch, compute, &wait);
      printf("  prefetch %d: %.2f ms per step, of which %.2f ms waiting for data\n", prefetch, seconds / steps * 1e3,
             wait / steps * 1e3);
    }
  }
  return 0;
}
