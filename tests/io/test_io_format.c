/* The shard format, the byte tokenizer, prepare's round trip, the synthetic tasks, the shuffling
 * permutation, and the message for every kind of bad input (made by make_bad_shards).
 * usage: test_io_format BAD_SHARDS_DIR SCRATCH_DIR */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/prepare.h"
#include "core/rng.h"
#include "io/shard.h"
#include "io/synth.h"
#include "io/tokenize.h"

static const char *bad_dir, *scratch;

static void test_permutation(void) {
  const uint64_t sizes[] = {1, 2, 3, 7, 64, 100, 1000, 4099};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    uint64_t n = sizes[s];
    char *seen = calloc(n, 1);
    mtf_permutation perm = mtf_permutation_make(n, 42, 3);
    int bijective = 1;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t x = mtf_permutation_at(&perm, i);
      if (x >= n || seen[x]) bijective = 0;
      else seen[x] = 1;
    }
    CHECK(bijective);
    free(seen);
  }
  /* Keyed: the same (seed, epoch) gives the same order, another epoch or seed another one. */
  mtf_permutation a = mtf_permutation_make(1000, 7, 0), b = mtf_permutation_make(1000, 7, 0);
  mtf_permutation c = mtf_permutation_make(1000, 7, 1), d = mtf_permutation_make(1000, 8, 0);
  int same_ab = 1, moved = 0, diff_ac = 0, diff_ad = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    uint64_t x = mtf_permutation_at(&a, i);
    same_ab &= x == mtf_permutation_at(&b, i);
    diff_ac += x != mtf_permutation_at(&c, i);
    diff_ad += x != mtf_permutation_at(&d, i);
    moved += x != i;
  }
  CHECK(same_ab);
  CHECK(diff_ac > 900);
  CHECK(diff_ad > 900);
  CHECK(moved > 900);
}

static void test_shard_round_trip(void) {
  char path[4096];
  mtf_error err;
  int32_t tokens[5000], back[5000];
  mtf_rng rng = mtf_rng_make(1, 2);
  for (int i = 0; i < 5000; i++) tokens[i] = (int32_t)mtf_rng_below(&rng, 384);
  snprintf(path, sizeof path, "%s/narrow.h5", scratch);
  CHECK(mtf_shard_write(path, tokens, 5000, 384, 256, "bytes", &err) == MTF_OK);
  mtf_shard shard;
  CHECK(mtf_shard_open(path, &shard, &err) == MTF_OK);
  CHECK(shard.meta.token_bytes == 2 && shard.meta.num_tokens == 5000 && shard.meta.vocab_size == 384);
  CHECK(shard.meta.eot_id == 256 && shard.meta.format_version == 1 && strcmp(shard.meta.tokenizer, "bytes") == 0);
  CHECK(mtf_shard_read(&shard, 1234, 777, back, 384, &err) == MTF_OK);
  CHECK(memcmp(back, tokens + 1234, 777 * sizeof(int32_t)) == 0);
  CHECK(mtf_shard_read(&shard, 4900, 101, back, 0, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "narrow.h5", "past its end");
  mtf_shard_close(&shard);

  /* A vocabulary over 65536 ids is stored as int32. */
  for (int i = 0; i < 5000; i++) tokens[i] = (int32_t)mtf_rng_below(&rng, 100000);
  snprintf(path, sizeof path, "%s/wide.h5", scratch);
  CHECK(mtf_shard_write(path, tokens, 5000, 100000, 99999, "outside", &err) == MTF_OK);
  CHECK(mtf_shard_open(path, &shard, &err) == MTF_OK);
  CHECK(shard.meta.token_bytes == 4 && strcmp(shard.meta.tokenizer, "outside") == 0);
  CHECK(mtf_shard_read(&shard, 0, 5000, back, 100000, &err) == MTF_OK);
  CHECK(memcmp(back, tokens, sizeof tokens) == 0);
  mtf_shard_close(&shard);

  CHECK(mtf_shard_write(path, tokens, 5000, 384, 256, "bytes", &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "wide.h5", "outside [0, 384)");
}

/* Writes random documents (every byte value, NUL included), prepares them into small shards, and checks
 * that train and val shards together give back every document's bytes exactly, each once, in order. */
static void test_prepare_round_trip(void) {
  char input[1024], output[1024], path[4096];
  snprintf(input, sizeof input, "%s/docs", scratch);
  snprintf(output, sizeof output, "%s/prepared", scratch);
  mkdir(input, 0777);
  enum { DOCS = 12 };
  unsigned char *docs[DOCS];
  size_t sizes[DOCS];
  const char *paths[DOCS];
  char names[DOCS][4096];
  mtf_rng rng = mtf_rng_make(5, 6);
  for (int d = 0; d < DOCS; d++) {
    sizes[d] = d == 3 ? 0 : (size_t)mtf_rng_below(&rng, 3000);
    docs[d] = malloc(sizes[d] + 1);
    for (size_t i = 0; i < sizes[d]; i++) docs[d][i] = (unsigned char)mtf_rng_below(&rng, 256);
    snprintf(names[d], sizeof names[d], "%s/doc%02d.bin", input, d);
    FILE *file = fopen(names[d], "wb");
    fwrite(docs[d], 1, sizes[d], file);
    fclose(file);
    paths[d] = names[d]; /* named explicitly: binary files are read too */
  }
  mtf_prepare_options opts = {.inputs = paths, .input_count = DOCS, .output_dir = output, .tokenizer = "bytes",
                              .shard_tokens = 1000, .val_fraction = 0.25, .force = 1};
  mtf_prepare_stats stats;
  mtf_error err;
  CHECK(mtf_data_prepare(&opts, &stats, &err) == MTF_OK);
  CHECK(stats.files == DOCS && stats.val_tokens > 0 && stats.train_tokens > stats.val_tokens);
  int64_t total = 0;
  for (int d = 0; d < DOCS; d++) total += (int64_t)sizes[d] + 1;
  CHECK(stats.train_tokens + stats.val_tokens == total);
  CHECK(stats.train_shards == (int)((stats.train_tokens + 999) / 1000));

  /* Reassemble: walk train then val shards, split at end-of-text, match documents in input order. */
  int matched[DOCS] = {0}, next_train = 0, problems = 0;
  for (int split = 0; split < 2; split++) {
    int64_t doc_start_cap = total + 1;
    int32_t *stream = malloc(sizeof(int32_t) * (size_t)doc_start_cap);
    int64_t length = 0;
    for (int s = 0;; s++) {
      snprintf(path, sizeof path, "%s/%s-%05d.h5", output, split ? "val" : "train", s);
      struct stat info;
      if (stat(path, &info) != 0) break;
      mtf_shard shard;
      if (mtf_shard_open(path, &shard, &err) != MTF_OK) { problems++; break; }
      CHECK(shard.meta.token_bytes == 2 && shard.meta.vocab_size == MTF_BYTES_VOCAB_SIZE);
      problems += mtf_shard_read(&shard, 0, shard.meta.num_tokens, stream + length, 0, &err) != MTF_OK;
      length += shard.meta.num_tokens;
      mtf_shard_close(&shard);
    }
    int64_t pos = 0;
    int search_from = 0;
    (void)next_train;
    while (pos < length) {
      int64_t end = pos;
      while (end < length && stream[end] != MTF_BYTES_EOT_ID) end++;
      int found = -1;
      for (int d = search_from; d < DOCS && found < 0; d++) {
        if (matched[d] || (int64_t)sizes[d] != end - pos) continue;
        int same = 1;
        for (size_t i = 0; i < sizes[d] && same; i++) same = stream[pos + (int64_t)i] == docs[d][i];
        if (same) found = d;
      }
      if (found < 0) problems++;
      else matched[found] = 1, search_from = found + 1;
      pos = end + 1;
    }
    free(stream);
  }
  int all = 1;
  for (int d = 0; d < DOCS; d++) all &= matched[d];
  CHECK(all);
  CHECK(problems == 0);
  for (int d = 0; d < DOCS; d++) free(docs[d]);

  /* Shards already there are not mixed with new ones unless --force. */
  opts.force = 0;
  CHECK(mtf_data_prepare(&opts, &stats, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "already holds shards", "--force");
}

/* Each synthetic example's answer is checked by recomputing it from the question. */
static void test_synth(void) {
  const mtf_synth_task tasks[] = {MTF_SYNTH_COPY, MTF_SYNTH_REVERSE, MTF_SYNTH_SORT, MTF_SYNTH_ADD};
  int wrong = 0;
  for (int t = 0; t < 4; t++)
    for (uint64_t i = 0; i < 300; i++) {
      char text[256], question[128], answer[128], expect[128];
      int length = 1 + (int)(i % 12);
      mtf_synth_example(tasks[t], length, 9, 0, i, text, sizeof text);
      char *eq = strchr(text, '=');
      if (!eq) { wrong++; continue; }
      snprintf(question, sizeof question, "%.*s", (int)(eq - text), text);
      snprintf(answer, sizeof answer, "%s", eq + 1);
      if (tasks[t] == MTF_SYNTH_ADD) {
        char *plus = strchr(question, '+');
        if (!plus || (int)strlen(plus + 1) != length) { wrong++; continue; }
        *plus = '\0';
        snprintf(expect, sizeof expect, "%0*llu", length + 1,
                 strtoull(question, NULL, 10) + strtoull(plus + 1, NULL, 10));
      } else {
        int n = (int)strlen(question);
        for (int k = 0; k < n; k++) expect[k] = question[tasks[t] == MTF_SYNTH_REVERSE ? n - 1 - k : k];
        expect[n] = '\0';
        if (tasks[t] == MTF_SYNTH_SORT) /* insertion sort: an independent reference */
          for (int k = 1; k < n; k++)
            for (int j = k; j > 0 && expect[j - 1] > expect[j]; j--) {
              char tmp = expect[j]; expect[j] = expect[j - 1]; expect[j - 1] = tmp;
            }
        if (n != length) wrong++;
      }
      if (strcmp(answer, expect) != 0) wrong++;
    }
  CHECK(wrong == 0);
  char a[256], b[256];
  mtf_synth_example(MTF_SYNTH_COPY, 8, 1, 0, 5, a, sizeof a);
  mtf_synth_example(MTF_SYNTH_COPY, 8, 1, 0, 5, b, sizeof b);
  CHECK(strcmp(a, b) == 0);
  mtf_synth_example(MTF_SYNTH_COPY, 8, 2, 0, 5, b, sizeof b);
  CHECK(strcmp(a, b) != 0);
}

/* Opens a loader on one rank over bad_dir/kind and returns the code, with the message in err. */
static int open_bad(const char *kind, int64_t length, int64_t vocab, int steps, mtf_error *err) {
  char spec[4096];
  snprintf(spec, sizeof spec, "%s/%s", bad_dir, kind);
  mtf_shape mesh;
  mtf_layout_rules rules;
  mtf_mesh_parse("", &mesh, err);
  mtf_layout_rules_parse("", &rules, err);
  mtf_loader_options opts = {.data = spec, .batch_size = 2, .length = length, .seed = 1, .prefetch = 1,
                             .vocab_limit = vocab};
  mtf_loader *loader;
  int rc = mtf_loader_open(&opts, &mesh, &rules, 0, &loader, err);
  if (rc != MTF_OK) return rc;
  int32_t tokens[2 * 64];
  for (int s = 0; rc == MTF_OK && s < steps; s++) rc = mtf_loader_next(loader, tokens, err);
  mtf_loader_close(loader);
  return rc;
}

static void test_bad_inputs(void) {
  mtf_error err;
  CHECK(open_bad("does-not-exist", 8, 0, 1, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "does-not-exist", "No such file");
  CHECK(open_bad("empty", 8, 0, 1, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "empty", "no shard files match");
  CHECK(open_bad("empty/*.h5", 8, 0, 1, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "no shard files match");
  CHECK(open_bad("no-tokens", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "no-tokens/shard-00000.h5", "has no dataset 'tokens'");
  CHECK(open_bad("float", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "float/shard-00000.h5", "holds float32", "must be uint16");
  CHECK(open_bad("int64", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "int64/shard-00000.h5", "holds int64");
  CHECK(open_bad("rank2", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "rank2/shard-00000.h5", "has 2 dimensions", "1-D");
  CHECK(open_bad("short", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "short/shard-00001.h5", "holds 5 tokens", "length + 1 = 9");
  CHECK(open_bad("not-hdf5", 8, 0, 1, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "not-hdf5/shard-00000.h5", "not a readable HDF5 file");
  CHECK(open_bad("truncated", 8, 0, 1, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "truncated/shard-00000.h5", "truncated");
  /* 999 windows of 2 tokens: 500 steps read every one, so the bad id at offset 613 is met. */
  CHECK(open_bad("bad-token", 1, 384, 500, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "bad-token/shard-00000.h5", "token id 700 at offset 613", "vocabulary size 384");
  /* Without a model vocabulary the shard's own (70000) is the limit and the same data reads fine. */
  CHECK(open_bad("bad-token", 1, 0, 500, &err) == MTF_OK);
}

/* Attributes of the wrong rank, size, class or width are refused by name, without reading past a buffer
 * (the arrays overflowed the stack and the heap under ASan); strings as h5py writes them read whole. */
static void test_bad_attributes(void) {
  mtf_error err;
  CHECK(open_bad("attr-int-array", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-int-array/shard-00000.h5", "attribute 'vocab_size'", "4096 elements", "scalar");
  CHECK(open_bad("attr-int-float", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-int-float/shard-00000.h5", "attribute 'vocab_size'", "must be an integer");
  CHECK(open_bad("attr-int-huge", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-int-huge/shard-00000.h5", "attribute 'vocab_size'", "out of range");
  CHECK(open_bad("attr-str-vlen-array", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-str-vlen-array/shard-00000.h5", "attribute 'tokenizer'", "64 elements", "scalar");
  CHECK(open_bad("attr-str-fixed-array", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-str-fixed-array/shard-00000.h5", "attribute 'tokenizer'", "64 elements");
  CHECK(open_bad("attr-str-long", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-str-long/shard-00000.h5", "attribute 'tokenizer'", "at most 63 bytes");
  CHECK(open_bad("attr-str-int", 8, 0, 1, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "attr-str-int/shard-00000.h5", "attribute 'tokenizer'", "must be a string");
  const char *good[] = {"attr-ok-nullpad", "attr-ok-vlen", "attr-ok-int-1elem"};
  for (int i = 0; i < 3; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/shard-00000.h5", bad_dir, good[i]);
    mtf_shard_meta meta;
    int rc = mtf_shard_stat(path, &meta, &err);
    CHECK(rc == MTF_OK);
    if (rc != MTF_OK) {
      fprintf(stderr, "  %s\n", err.msg);
      continue;
    }
    CHECK(strcmp(meta.tokenizer, "bytes") == 0);
    CHECK(meta.vocab_size == 384);
    CHECK(open_bad(good[i], 8, 0, 1, &err) == MTF_OK);
  }
}

/* A FIFO is refused without blocking; a directory whose name holds glob characters is read literally,
 * as a directory and as the literal part of a glob. */
static void test_odd_paths(void) {
  mtf_error err;
  CHECK(open_bad("fifo", 8, 0, 1, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "fifo/shard-00000.h5", "not a regular file");
  const char *specs[] = {"odd[1]*?dir", "odd[1]*?dir/*.h5", "odd[1]*?dir/shard-00000.h5"};
  for (int i = 0; i < 3; i++) {
    char spec[4096];
    snprintf(spec, sizeof spec, "%s/%s", bad_dir, specs[i]);
    mtf_dataset dataset;
    int rc = mtf_dataset_open(spec, 8, &dataset, &err);
    CHECK(rc == MTF_OK);
    if (rc != MTF_OK) {
      fprintf(stderr, "  %s: %s\n", spec, err.msg);
      continue;
    }
    CHECK(dataset.count == 1 && dataset.tokens == 1000);
    CHECK(strstr(dataset.paths[0], "odd[1]*?dir/shard-00000.h5") != NULL);
    mtf_dataset_close(&dataset);
  }
}

/* A shard truncated, rewritten in place or touched after it was opened is refused, by name, at the
 * next read (it read zeros before). */
static void test_changed_shard(void) {
  int32_t tokens[4000], back[100];
  for (int i = 0; i < 4000; i++) tokens[i] = 1 + i % 200;
  mtf_error err;
  for (int how = 0; how < 3; how++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/changed-%d.h5", scratch, how);
    CHECK(mtf_shard_write(path, tokens, 4000, 384, 256, "bytes", &err) == MTF_OK);
    mtf_shard shard;
    CHECK(mtf_shard_open(path, &shard, &err) == MTF_OK);
    CHECK(mtf_shard_read(&shard, 3000, 100, back, 384, &err) == MTF_OK && back[0] == tokens[3000]);
    struct stat info;
    CHECK(stat(path, &info) == 0);
    if (how == 0) {
      CHECK(truncate(path, info.st_size / 2) == 0);
    } else if (how == 1) { /* same size, new bytes (zeros) over the tokens */
      FILE *f = fopen(path, "r+b");
      static char zeros[8000];
      CHECK(f && fseek(f, info.st_size - 6000, SEEK_SET) == 0 && fwrite(zeros, 1, 6000, f) == 6000);
      if (f) fclose(f);
      struct timespec times[2] = {{0, UTIME_OMIT}, {info.st_mtim.tv_sec + 5, 0}};
      utimensat(AT_FDCWD, path, times, 0); /* a rewrite within the clock's granularity keeps mtime */
    } else {
      struct timespec times[2] = {{0, UTIME_OMIT}, {info.st_mtim.tv_sec + 5, 0}};
      CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
    }
    int rc = mtf_shard_read(&shard, 3000, 100, back, 384, &err);
    CHECK(rc == MTF_ERR_IO);
    if (rc != MTF_OK) CHECK_CONTAINS(err.msg, path, "changed since it was opened");
    mtf_shard_close(&shard);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_io_format BAD_SHARDS_DIR SCRATCH_DIR\n");
    return 2;
  }
  bad_dir = argv[1];
  scratch = argv[2];
  mkdir(scratch, 0777);
  test_permutation();
  test_shard_round_trip();
  test_prepare_round_trip();
  test_synth();
  test_bad_inputs();
  test_bad_attributes();
  test_odd_paths();
  test_changed_shard();
  return check_summary();
}
