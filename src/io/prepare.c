#define _GNU_SOURCE
#include "io/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "io/shard_sink.h"
#include "io/tokenize.h"

#define READ_CHUNK (1 << 20)

typedef struct file_list {
  char **paths;
  int64_t *sizes;
  int64_t count, capacity;
  int64_t skipped;
} file_list;

static int list_add(file_list *list, const char *path, int64_t size, mtf_error *err) {
  if (list->count == list->capacity) {
    int64_t capacity = list->capacity ? list->capacity * 2 : 64;
    char **paths = realloc(list->paths, sizeof(char *) * (size_t)capacity);
    if (paths) list->paths = paths;
    int64_t *sizes = realloc(list->sizes, sizeof(int64_t) * (size_t)capacity);
    if (sizes) list->sizes = sizes;
    if (!paths || !sizes) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing input files");
    list->capacity = capacity;
  }
  list->paths[list->count] = strdup(path);
  if (!list->paths[list->count]) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing input files");
  list->sizes[list->count++] = size;
  return MTF_OK;
}

static void list_free(file_list *list) {
  for (int64_t i = 0; i < list->count; i++) free(list->paths[i]);
  free(list->paths);
  free(list->sizes);
}

static int looks_binary(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return 0; /* reading it later reports the error */
  unsigned char head[4096];
  size_t got = fread(head, 1, sizeof head, file);
  fclose(file);
  return memchr(head, 0, got) != NULL;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int walk(const char *path, int named, file_list *list, mtf_error *err) {
  struct stat info;
  if ((named ? stat(path, &info) : lstat(path, &info)) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "input '%s': %s: check the path", path, strerror(errno));
  if (S_ISLNK(info.st_mode)) {
    list->skipped++;
    return MTF_OK;
  }
  if (S_ISREG(info.st_mode)) {
    if (!named && looks_binary(path)) {
      list->skipped++;
      return MTF_OK;
    }
    return list_add(list, path, (int64_t)info.st_size, err);
  }
  if (!S_ISDIR(info.st_mode)) {
    if (named) return mtf_error_set(err, MTF_ERR_IO, "input '%s' is neither a file nor a directory", path);
    list->skipped++;
    return MTF_OK;
  }
  struct dirent **entries = NULL;
  int count = scandir(path, &entries, NULL, by_name);
  if (count < 0) return mtf_error_set(err, MTF_ERR_IO, "input directory '%s': %s", path, strerror(errno));
  int rc = MTF_OK;
  for (int i = 0; i < count; i++) {
    if (rc == MTF_OK && entries[i]->d_name[0] != '.') {
      char child[4096];
      snprintf(child, sizeof child, "%s/%s", path, entries[i]->d_name);
      rc = walk(child, 0, list, err);
    }
    free(entries[i]);
  }
  free(entries);
  return rc;
}

typedef struct progress {
  int enabled, printed;
  double start, last;
  int64_t total_bytes;
} progress;

static void progress_report(progress *p, int64_t bytes, int64_t tokens, int final) {
  double now = mtf_now_seconds();
  /* Short inputs finish before the first report is due and print nothing. */
  if (!p->enabled || (!final && now - p->last < 1.0) || (final && !p->printed)) return;
  p->last = now;
  p->printed = 1;
  double elapsed = now - p->start, rate = elapsed > 0 ? (double)tokens / elapsed : 0;
  double eta = bytes > 0 && elapsed > 0 ? elapsed * (double)(p->total_bytes - bytes) / (double)bytes : 0;
  char eta_text[32];
  mtf_format_duration(final ? 0.0 : eta, eta_text, sizeof eta_text);
  fprintf(stderr, "prepare: %.1f / %.1f MB, %.2f M tokens/s, ETA %s%s", (double)bytes / 1e6,
          (double)p->total_bytes / 1e6, rate / 1e6, eta_text, isatty(2) && !final ? "\r" : "\n");
  fflush(stderr);
}

/* Streams one file into the sink as byte tokens followed by the end-of-text id. */
static int tokenize_file(const char *path, mtf_shard_sink *sink, unsigned char *bytes, int32_t *tokens,
                         progress *prog, int64_t *done_bytes, int64_t *done_tokens, mtf_error *err) {
  FILE *file = fopen(path, "rb");
  if (!file) return mtf_error_set(err, MTF_ERR_IO, "input '%s': %s", path, strerror(errno));
  int rc = MTF_OK;
  size_t got;
  while (rc == MTF_OK && (got = fread(bytes, 1, READ_CHUNK, file)) > 0) {
    size_t count = mtf_tokenize_bytes(bytes, got, tokens);
    rc = mtf_shard_sink_push(sink, tokens, (int64_t)count, err);
    *done_bytes += (int64_t)got;
    *done_tokens += (int64_t)count;
    progress_report(prog, *done_bytes, *done_tokens, 0);
  }
  if (rc == MTF_OK && ferror(file)) rc = mtf_error_set(err, MTF_ERR_IO, "input '%s': read error", path);
  fclose(file);
  if (rc == MTF_OK) {
    int32_t eot = MTF_BYTES_EOT_ID;
    rc = mtf_shard_sink_push(sink, &eot, 1, err);
    ++*done_tokens;
  }
  return rc;
}

int mtf_data_prepare(const mtf_prepare_options *opts, mtf_prepare_stats *stats, mtf_error *err) {
  memset(stats, 0, sizeof *stats);
  MTF_CHECK(mtf_tokenizer_check(opts->tokenizer, err));
  if (opts->shard_tokens < 1) return mtf_error_set(err, MTF_ERR_INVALID, "--shard-tokens must be at least 1");
  if (!(opts->val_fraction >= 0 && opts->val_fraction < 1))
    return mtf_error_set(err, MTF_ERR_INVALID, "--val-fraction must be in [0, 1), not %g", opts->val_fraction);
  if (opts->input_count < 1) return mtf_error_set(err, MTF_ERR_INVALID, "no --input given");

  file_list list = {0};
  int rc = MTF_OK;
  for (int i = 0; rc == MTF_OK && i < opts->input_count; i++) rc = walk(opts->inputs[i], 1, &list, err);
  if (rc == MTF_OK && list.count == 0)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "no text files found in the inputs (%lld skipped as links or binary)",
                       (long long)list.skipped);
  if (rc == MTF_OK) rc = mtf_output_dir_prepare(opts->output_dir, opts->force, err);
  unsigned char *bytes = malloc(READ_CHUNK);
  int32_t *tokens = malloc(sizeof(int32_t) * READ_CHUNK);
  if (rc == MTF_OK && (!bytes || !tokens)) rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");

  progress prog = {.enabled = opts->progress, .start = mtf_now_seconds()};
  prog.last = prog.start;
  for (int64_t i = 0; i < list.count; i++) prog.total_bytes += list.sizes[i];
  mtf_shard_sink train, val;
  mtf_shard_sink_init(&train, opts->output_dir, "train", opts->shard_tokens, MTF_BYTES_VOCAB_SIZE, MTF_BYTES_EOT_ID,
                      MTF_BYTES_TOKENIZER);
  mtf_shard_sink_init(&val, opts->output_dir, "val", opts->shard_tokens, MTF_BYTES_VOCAB_SIZE, MTF_BYTES_EOT_ID,
                      MTF_BYTES_TOKENIZER);
  int64_t done_bytes = 0, done_tokens = 0;
  for (int64_t i = 0; rc == MTF_OK && i < list.count; i++) {
    int64_t doc_tokens = list.sizes[i] + 1;
    /* Whole documents go to val while it holds no more than its share of what has been seen. */
    int to_val = (double)(val.total + doc_tokens) <= opts->val_fraction * (double)(done_tokens + doc_tokens);
    rc = tokenize_file(list.paths[i], to_val ? &val : &train, bytes, tokens, &prog, &done_bytes, &done_tokens, err);
  }
  int train_rc = mtf_shard_sink_finish(&train, rc == MTF_OK ? err : NULL);
  if (rc == MTF_OK) rc = train_rc;
  int val_rc = mtf_shard_sink_finish(&val, rc == MTF_OK ? err : NULL);
  if (rc == MTF_OK) rc = val_rc;
  if (rc == MTF_OK) progress_report(&prog, done_bytes, done_tokens, 1);

  stats->files = list.count;
  stats->skipped = list.skipped;
  stats->bytes = done_bytes;
  stats->train_tokens = train.total;
  stats->val_tokens = val.total;
  stats->train_shards = train.shards;
  stats->val_shards = val.shards;
  stats->seconds = mtf_now_seconds() - prog.start;
  free(bytes);
  free(tokens);
  list_free(&list);
  return rc;
}
