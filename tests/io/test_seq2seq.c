/* Seq2seq shards and rows (io/seq2seq.h, io/loader.h, docs/DATA.md "Seq2seq rows"):
 *  - mtf data synth's marks: every marked example is whole in its shard, its prompt ends with '=', its
 *    answer is the reverse of the prompt's letters followed by end-of-text, and every example of the
 *    stream is marked in some shard unless a shard boundary cuts it;
 *  - the loader's seq2seq rows against rows built here from the marks (prompt, start token + shifted
 *    answer, answer, weights), every example once per epoch; the prefix task on unmarked shards against
 *    windows read straight from the shard;
 *  - bad marks, each refused with a message naming the shard and the rule; a dataset mixing marked and
 *    unmarked shards refused.
 * usage: test_seq2seq SCRATCH_DIR (needs an `mtf data synth` binary's library only) */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../check.h"
#include "io/loader.h"
#include "io/seq2seq.h"
#include "io/shard.h"
#include "io/synth.h"
#include "io/tokenize.h"

enum { LETTERS = 5, T = 8, BATCH = 4, SHARD_TOKENS = 100 };

static int32_t *read_all(const char *path, int64_t *count) {
  mtf_shard shard;
  mtf_error err;
  if (mtf_shard_open(path, &shard, &err) != MTF_OK) return NULL;
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)shard.meta.num_tokens);
  *count = shard.meta.num_tokens;
  if (mtf_shard_read(&shard, 0, *count, tokens, 0, &err) != MTF_OK) *count = -1;
  mtf_shard_close(&shard);
  return tokens;
}

static mtf_loader *open_loader(const char *data, int seq2seq, mtf_error *err) {
  mtf_shape mesh;
  mtf_shape_parse("b:1", "mesh", &mesh, NULL);
  mtf_layout_rules rules;
  memset(&rules, 0, sizeof rules);
  mtf_loader_options opts = {.data = data, .batch_size = BATCH, .length = T, .seed = 5, .prefetch = 1,
                             .vocab_limit = 384, .seq2seq = seq2seq};
  mtf_loader *loader = NULL;
  return mtf_loader_open(&opts, &mesh, &rules, 0, &loader, err) == MTF_OK ? loader : NULL;
}

/* synth's marks, and the loader's rows of them. */
static void marked(const char *dir) {
  mtf_synth_options opts = {.task = MTF_SYNTH_REVERSE, .output_dir = dir, .examples = 40, .length = LETTERS,
                            .seed = 3, .shard_tokens = SHARD_TOKENS, .val_fraction = 0, .force = 1};
  mtf_synth_stats stats;
  mtf_error err;
  CHECK(mtf_data_synth(&opts, &stats, &err) == MTF_OK);
  int64_t example = 2 * LETTERS + 2, marked_total = 0, expected = 0;
  /* Examples whose tokens [i e, (i+1) e) cross a multiple of SHARD_TOKENS are cut in two. */
  for (int64_t i = 0; i < opts.examples; i++) expected += (i * example) / SHARD_TOKENS == ((i + 1) * example - 1) / SHARD_TOKENS;
  int32_t *rows_expected[64];
  int n_rows = 0;
  for (int s = 0; s < stats.train_shards; s++) {
    char path[512];
    snprintf(path, sizeof path, "%s/train-%05d.h5", dir, s);
    int64_t count;
    int32_t *tokens = read_all(path, &count);
    mtf_seq2seq_marks marks;
    CHECK(tokens && mtf_seq2seq_read_marks(path, count, &marks, &err) == MTF_OK && marks.marked);
    for (int64_t e = 0; e < marks.examples; e++, marked_total++) {
      const int64_t *span = marks.spans + 3 * e;
      CHECK(span[1] - span[0] == LETTERS + 1 && span[2] - span[1] == LETTERS + 1);
      CHECK(tokens[span[1] - 1] == '=' && tokens[span[2] - 1] == MTF_BYTES_EOT_ID);
      for (int i = 0; i < LETTERS; i++) CHECK(tokens[span[1] + i] == tokens[span[1] - 2 - i]);
      /* The row the loader must give this example. */
      int32_t *row = calloc(4 * T, sizeof(int32_t));
      for (int i = 0; i < LETTERS + 1; i++) {
        row[i] = tokens[span[0] + i];
        row[2 * T + i] = tokens[span[1] + i];
        row[3 * T + i] = 1;
        row[T + i] = i == 0 ? MTF_BYTES_EOT_ID : tokens[span[1] + i - 1];
      }
      if (n_rows < 64) rows_expected[n_rows++] = row;
      else free(row);
    }
    mtf_seq2seq_marks_free(&marks);
    free(tokens);
  }
  CHECK(marked_total == expected && expected < opts.examples); /* some were cut, the rest all marked */
  printf("synth: %lld of %lld examples marked over %d shards (the rest cut by a shard boundary)\n",
         (long long)marked_total, (long long)opts.examples, stats.train_shards);

  mtf_loader *loader = open_loader(dir, 1, &err);
  CHECK(loader != NULL);
  if (!loader) return;
  CHECK(mtf_loader_examples_marked(loader) && mtf_loader_windows(loader) == marked_total);
  CHECK(mtf_loader_row_ints(loader) == 4 * T);
  int64_t steps = mtf_loader_steps_per_epoch(loader);
  int seen[64] = {0};
  int32_t raw[BATCH * 4 * T], enc[BATCH * T], dec[BATCH * T], tgt[BATCH * T], w[BATCH * T];
  mtf_loader_batch batch = {.tokens = dec, .targets = tgt, .encoder_tokens = enc, .loss_weights = w};
  int matched = 1;
  for (int64_t k = 0; k < steps; k++) {
    CHECK(mtf_loader_next(loader, raw, &err) == MTF_OK);
    mtf_loader_split_batch(loader, raw, &batch);
    for (int r = 0; r < BATCH; r++) {
      int found = -1;
      for (int e = 0; e < n_rows && found < 0; e++)
        if (!memcmp(rows_expected[e], enc + r * T, sizeof(int32_t) * T) &&
            !memcmp(rows_expected[e] + T, dec + r * T, sizeof(int32_t) * T) &&
            !memcmp(rows_expected[e] + 2 * T, tgt + r * T, sizeof(int32_t) * T) &&
            !memcmp(rows_expected[e] + 3 * T, w + r * T, sizeof(int32_t) * T))
          found = e;
      matched &= found >= 0 && !seen[found];
      if (found >= 0) seen[found] = 1;
    }
  }
  CHECK(matched); /* every row one of the examples, none twice in an epoch */
  mtf_loader_close(loader);
  for (int e = 0; e < n_rows; e++) free(rows_expected[e]);
}

/* Unmarked text: the prefix task over windows of T + 1 tokens. */
static void prefix(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/plain-00000.h5", dir);
  int32_t tokens[5 * T + 1];
  for (int i = 0; i < 5 * T + 1; i++) tokens[i] = 'a' + i % 26;
  mtf_error err;
  CHECK(mtf_shard_write(path, tokens, 5 * T + 1, 384, MTF_BYTES_EOT_ID, "bytes", &err) == MTF_OK);
  mtf_loader *loader = open_loader(path, 1, &err);
  CHECK(loader != NULL && !mtf_loader_examples_marked(loader) && mtf_loader_windows(loader) == 5);
  if (!loader) return;
  int32_t raw[BATCH * 4 * T], enc[BATCH * T], dec[BATCH * T], tgt[BATCH * T], w[BATCH * T];
  mtf_loader_batch batch = {.tokens = dec, .targets = tgt, .encoder_tokens = enc, .loss_weights = w};
  CHECK(mtf_loader_next(loader, raw, &err) == MTF_OK);
  mtf_loader_split_batch(loader, raw, &batch);
  int ok = 1;
  for (int r = 0; r < BATCH; r++) {
    int64_t start = -1;
    for (int64_t s = 0; s + T + 1 <= 5 * T + 1; s += T)
      if (!memcmp(tokens + s, enc + r * T, sizeof(int32_t) * (T / 2))) start = s;
    ok &= start >= 0;
    if (start < 0) continue;
    for (int i = 0; i < T; i++) {
      int answer = i < T / 2 + 1;
      ok &= enc[r * T + i] == (i < T / 2 ? tokens[start + i] : 0);
      ok &= tgt[r * T + i] == (answer ? tokens[start + T / 2 + i] : 0) && w[r * T + i] == answer;
      ok &= dec[r * T + i] == (i == 0 ? MTF_BYTES_EOT_ID : answer ? tokens[start + T / 2 + i - 1] : 0);
    }
  }
  CHECK(ok);
  mtf_loader_close(loader);
}

/* A marked shard with the given attribute value and dataset (type, dims, values), for the bad cases. */
static void bad_shard(const char *path, int64_t flag, int with_dataset, hid_t type, int rank, const hsize_t *dims,
                      const int64_t *values) {
  int32_t tokens[40];
  for (int i = 0; i < 40; i++) tokens[i] = 'a';
  mtf_error err;
  mtf_shard_write(path, tokens, 40, 384, MTF_BYTES_EOT_ID, "bytes", &err);
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (flag) {
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, "seq2seq", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &flag);
    H5Aclose(attr);
    H5Sclose(scalar);
  }
  if (with_dataset) {
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(file, MTF_SEQ2SEQ_DATASET, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    H5Dclose(ds);
    H5Sclose(space);
  }
  H5Fclose(file);
}

static void refused(const char *path, const char *fragment) {
  mtf_seq2seq_marks marks;
  mtf_error err;
  mtf_error_clear(&err);
  int rc = mtf_seq2seq_read_marks(path, 40, &marks, &err);
  CHECK(rc != MTF_OK);
  CHECK_CONTAINS(err.msg, path, fragment);
  mtf_loader *loader = open_loader(path, 1, &err); /* the loader passes the message on */
  CHECK(loader == NULL);
  CHECK_CONTAINS(err.msg, fragment);
  mtf_loader_close(loader);
}

static void bad_marks(const char *dir) {
  char path[600];
  const int64_t good[6] = {0, 5, 10, 10, 20, 30};
  const int64_t overlapping[6] = {0, 5, 12, 10, 20, 30}, empty_prompt[3] = {3, 3, 10}, past_end[3] = {0, 5, 41};
  hsize_t two_by_three[2] = {2, 3}, one_by_three[2] = {1, 3}, six[1] = {6}, three_by_two[2] = {3, 2};
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  snprintf(path, sizeof path, "%s/flag-two.h5", dir);
  bad_shard(path, 2, 1, H5T_STD_I64LE, 2, two_by_three, good);
  refused(path, "attribute 'seq2seq' is 2; it must be 1");
  snprintf(path, sizeof path, "%s/no-dataset.h5", dir);
  bad_shard(path, 1, 0, H5T_STD_I64LE, 2, two_by_three, good);
  refused(path, "has the attribute seq2seq = 1 but no dataset 'seq2seq_examples'");
  snprintf(path, sizeof path, "%s/no-flag.h5", dir);
  bad_shard(path, 0, 1, H5T_STD_I64LE, 2, two_by_three, good);
  refused(path, "but no attribute 'seq2seq'");
  snprintf(path, sizeof path, "%s/int32.h5", dir);
  bad_shard(path, 1, 1, H5T_STD_I32LE, 2, two_by_three, good);
  refused(path, "dataset 'seq2seq_examples' must hold int64");
  snprintf(path, sizeof path, "%s/one-d.h5", dir);
  bad_shard(path, 1, 1, H5T_STD_I64LE, 1, six, good);
  refused(path, "must be 2-D [examples, 3]");
  snprintf(path, sizeof path, "%s/by-two.h5", dir);
  bad_shard(path, 1, 1, H5T_STD_I64LE, 2, three_by_two, good);
  refused(path, "must be 2-D [examples, 3]");
  snprintf(path, sizeof path, "%s/overlap.h5", dir);
  bad_shard(path, 1, 1, H5T_STD_I64LE, 2, two_by_three, overlapping);
  refused(path, "row 1 is (start 10, answer_start 20, end 30), which breaks the rule 12 <= start");
  snprintf(path, sizeof path, "%s/empty-prompt.h5", dir);
  bad_shard(path, 1, 1, H5T_STD_I64LE, 2, one_by_three, empty_prompt);
  refused(path, "row 0 is (start 3, answer_start 3, end 10)");
  snprintf(path, sizeof path, "%s/past-end.h5", dir);
  bad_shard(path, 1, 1, H5T_STD_I64LE, 2, one_by_three, past_end);
  refused(path, "end <= num_tokens 40");

  /* One marked shard and one plain one in a dataset. */
  char mixed[400];
  snprintf(mixed, sizeof mixed, "%s/mixed", dir);
  mkdir(mixed, 0755);
  snprintf(path, sizeof path, "%s/a.h5", mixed);
  bad_shard(path, 1, 1, H5T_STD_I64LE, 2, two_by_three, good);
  snprintf(path, sizeof path, "%s/b.h5", mixed);
  bad_shard(path, 0, 0, H5T_STD_I64LE, 2, two_by_three, good);
  mtf_error err;
  mtf_loader *loader = open_loader(mixed, 1, &err);
  CHECK(loader == NULL);
  CHECK_CONTAINS(err.msg, "mixes shards with seq2seq marks", "a.h5", "b.h5");
  /* A decoder-only loader ignores marks, good or bad: the shards are plain windows to it. */
  snprintf(path, sizeof path, "%s/flag-two.h5", dir);
  loader = open_loader(path, 0, &err);
  CHECK(loader != NULL);
  mtf_loader_close(loader);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  char dir[300];
  mkdir(argv[1], 0755);
  snprintf(dir, sizeof dir, "%s/synth", argv[1]);
  marked(dir);
  prefix(argv[1]);
  bad_marks(argv[1]);
  return check_summary();
}
