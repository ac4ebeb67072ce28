#define _GNU_SOURCE
#include "io/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
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

/* The files and directories taken so far, by (st_dev, st_ino), in an open-addressing hash set: a file reached
 * again (through a link, a hard link or an input given twice) is read once, and a directory reached again (a
 * link cycle such as `loop -> ..`, or a link to a directory already walked) is walked once. */
typedef struct file_id {
  dev_t dev;
  ino_t ino;
} file_id;

typedef struct seen_set {
  file_id *ids;
  unsigned char *used;
  size_t capacity, count; /* capacity: 0 or a power of two */
} seen_set;

static size_t seen_slot(const seen_set *set, file_id id) {
  uint64_t h = (uint64_t)id.ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)id.dev;
  h ^= h >> 29;
  size_t slot = (size_t)h & (set->capacity - 1);
  while (set->used[slot] && !(set->ids[slot].dev == id.dev && set->ids[slot].ino == id.ino))
    slot = (slot + 1) & (set->capacity - 1);
  return slot;
}

/* Adds id to the set: 1 when it is new, 0 when it was there already, -1 out of memory. */
static int seen_add(seen_set *set, file_id id) {
  if (2 * (set->count + 1) > set->capacity) {
    seen_set grown = {.capacity = set->capacity ? 2 * set->capacity : 256};
    grown.ids = malloc(sizeof(file_id) * grown.capacity);
    grown.used = calloc(grown.capacity, 1);
    if (!grown.ids || !grown.used) {
      free(grown.ids);
      free(grown.used);
      return -1;
    }
    for (size_t i = 0; i < set->capacity; i++)
      if (set->used[i]) {
        size_t slot = seen_slot(&grown, set->ids[i]);
        grown.ids[slot] = set->ids[i];
        grown.used[slot] = 1;
      }
    grown.count = set->count;
    free(set->ids);
    free(set->used);
    *set = grown;
  }
  size_t slot = seen_slot(set, id);
  if (set->used[slot]) return 0;
  set->ids[slot] = id;
  set->used[slot] = 1;
  set->count++;
  return 1;
}

static void seen_free(seen_set *set) {
  free(set->ids);
  free(set->used);
}

/* What the inputs hold: the files to read, in order, and what was left out (counted in stats). */
typedef struct walker {
  file_list list;
  seen_set seen;
  mtf_prepare_stats *stats;
} walker;

static int looks_binary(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return 0; /* reading it later reports the error */
  unsigned char head[4096];
  size_t got = fread(head, 1, sizeof head, file);
  fclose(file);
  return memchr(head, 0, got) != NULL;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

/* A path stat() cannot follow: inside a directory (found) a broken link is skipped, named on stderr; anything
 * else, and any input named with --input, is an error. */
static int unreadable(walker *w, const char *path, int named, int error, mtf_error *err) {
  struct stat info;
  char target[4096];
  ssize_t length = -1;
  if (lstat(path, &info) == 0 && S_ISLNK(info.st_mode)) length = readlink(path, target, sizeof target - 1);
  if (length < 0)
    return mtf_error_set(err, MTF_ERR_IO, "input '%s': %s: check the path", path, strerror(error));
  target[length] = '\0';
  if (named)
    return mtf_error_set(err, MTF_ERR_IO, "input '%s' is a link to '%s', which cannot be read (%s): fix the link or "
                         "give its target", path, target, strerror(error));
  fprintf(stderr, "mtf data prepare: skipped the broken link '%s' -> '%s' (%s)\n", path, target, strerror(error));
  w->stats->broken_links++;
  return MTF_OK;
}

/* Lists path: a file is one document, a directory is walked in sorted order (hidden entries left out). Links
 * are followed. A file or directory reached a second time is skipped (counted). Files found in a directory or
 * by a glob (named = 0) are skipped when binary; those named with --input are always read. */
static int walk(walker *w, const char *path, int named, mtf_error *err) {
  struct stat info;
  if (stat(path, &info) != 0) return unreadable(w, path, named, errno, err);
  if (!S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode)) {
    if (named) return mtf_error_set(err, MTF_ERR_IO, "input '%s' is neither a file nor a directory", path);
    w->stats->not_files++;
    return MTF_OK;
  }
  if (S_ISREG(info.st_mode) && !named && looks_binary(path)) {
    w->stats->binary_files++;
    return MTF_OK;
  }
  int added = seen_add(&w->seen, (file_id){.dev = info.st_dev, .ino = info.st_ino});
  if (added < 0) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing input files");
  if (!added) {
    if (S_ISREG(info.st_mode)) w->stats->repeated_files++;
    else w->stats->repeated_dirs++;
    return MTF_OK;
  }
  if (S_ISREG(info.st_mode)) return list_add(&w->list, path, (int64_t)info.st_size, err);

  struct dirent **entries = NULL;
  int count = scandir(path, &entries, NULL, by_name);
  if (count < 0) return mtf_error_set(err, MTF_ERR_IO, "input directory '%s': %s", path, strerror(errno));
  int rc = MTF_OK;
  for (int i = 0; i < count; i++) {
    if (rc == MTF_OK && entries[i]->d_name[0] != '.') {
      char *child = NULL;
      if (asprintf(&child, "%s/%s", path, entries[i]->d_name) < 0)
        rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing input files");
      else
        rc = walk(w, child, 0, err);
      free(child);
    }
    free(entries[i]);
  }
  free(entries);
  return rc;
}

/* One --input: a path that exists is taken literally, whatever characters its name holds; otherwise a name
 * with *, ? or [ is a glob, expanded here (sorted; hidden names only by a pattern that starts them with a dot)
 * so that a quoted pattern works, and each match is walked as a directory's entry would be. A pattern that
 * matches nothing is an error. */
static int add_input(walker *w, const char *input, mtf_error *err) {
  struct stat info;
  if (lstat(input, &info) == 0 || !strpbrk(input, "*?[")) return walk(w, input, 1, err);
  glob_t matches;
  int found = glob(input, 0, NULL, &matches);
  int rc = MTF_OK;
  if (found == GLOB_NOMATCH)
    rc = mtf_error_set(err, MTF_ERR_IO, "input '%s': no files match this pattern: check it (and that its "
                       "directory exists)", input);
  else if (found == GLOB_NOSPACE)
    rc = mtf_error_set(err, MTF_ERR_NOMEM, "input '%s': out of memory expanding the pattern", input);
  else if (found != 0)
    rc = mtf_error_set(err, MTF_ERR_IO, "input '%s': the pattern could not be expanded (a directory could not be "
                       "read)", input);
  for (size_t i = 0; found == 0 && rc == MTF_OK && i < matches.gl_pathc; i++) {
    /* 'corpus/.*' matches 'corpus/.' and 'corpus/..' too: not entries of corpus, so left out */
    const char *slash = strrchr(matches.gl_pathv[i], '/');
    const char *name = slash ? slash + 1 : matches.gl_pathv[i];
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) rc = walk(w, matches.gl_pathv[i], 0, err);
  }
  globfree(&matches); /* glob() sets it up, matches or not */
  return rc;
}

static void add_count(char *out, size_t size, size_t *at, int64_t count, const char *one, const char *many) {
  if (count == 0 || *at >= size) return;
  int wrote = snprintf(out + *at, size - *at, "%s%lld %s", *at ? ", " : "", (long long)count, count == 1 ? one : many);
  if (wrote > 0) *at += (size_t)wrote;
}

const char *mtf_prepare_skipped_text(const mtf_prepare_stats *stats, char *out, size_t size) {
  size_t at = 0;
  out[0] = '\0';
  add_count(out, size, &at, stats->binary_files, "binary file", "binary files");
  add_count(out, size, &at, stats->repeated_files, "file already read", "files already read");
  add_count(out, size, &at, stats->repeated_dirs, "directory already walked", "directories already walked");
  add_count(out, size, &at, stats->broken_links, "broken link", "broken links");
  add_count(out, size, &at, stats->not_files, "neither file nor directory", "neither files nor directories");
  if (at == 0) snprintf(out, size, "none");
  return out;
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

  walker w = {.stats = stats};
  int rc = MTF_OK;
  for (int i = 0; rc == MTF_OK && i < opts->input_count; i++) rc = add_input(&w, opts->inputs[i], err);
  seen_free(&w.seen);
  file_list list = w.list;
  char skipped[256];
  if (rc == MTF_OK && list.count == 0)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "no text files found in the inputs (skipped: %s)",
                       mtf_prepare_skipped_text(stats, skipped, sizeof skipped));
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
