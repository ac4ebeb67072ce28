#define _GNU_SOURCE
#include "io/shard_sink.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_shard_name(const char *name) {
  return fnmatch("train-*.h5", name, 0) == 0 || fnmatch("val-*.h5", name, 0) == 0;
}

int mtf_output_dir_prepare(const char *dir, int force, mtf_error *err) {
  char path[4096];
  /* mkdir -p: create each missing component in turn. */
  snprintf(path, sizeof path, "%s", dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      return mtf_error_set(err, MTF_ERR_IO, "cannot create output directory '%s': %s", path, strerror(errno));
    *p = '/';
  }
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return mtf_error_set(err, MTF_ERR_IO, "cannot create output directory '%s': %s", dir, strerror(errno));
  DIR *handle = opendir(dir);
  if (!handle) return mtf_error_set(err, MTF_ERR_IO, "output '%s' is not a directory: %s", dir, strerror(errno));
  int rc = MTF_OK;
  struct dirent *entry;
  while (rc == MTF_OK && (entry = readdir(handle)) != NULL) {
    if (!is_shard_name(entry->d_name)) continue;
    if (!force) {
      rc = mtf_error_set(err, MTF_ERR_INVALID,
                         "output directory '%s' already holds shards (%s): they would mix with the new ones; choose "
                         "another directory or pass --force to replace them",
                         dir, entry->d_name);
    } else {
      snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
      if (unlink(path) != 0) rc = mtf_error_set(err, MTF_ERR_IO, "cannot remove old shard '%s': %s", path, strerror(errno));
    }
  }
  closedir(handle);
  return rc;
}

void mtf_shard_sink_init(mtf_shard_sink *sink, const char *dir, const char *prefix, int64_t shard_tokens,
                         int64_t vocab_size, int64_t eot_id, const char *tokenizer) {
  memset(sink, 0, sizeof *sink);
  sink->dir = dir;
  sink->prefix = prefix;
  sink->shard_tokens = shard_tokens;
  sink->vocab_size = vocab_size;
  sink->eot_id = eot_id;
  sink->tokenizer = tokenizer;
}

static int flush_shard(mtf_shard_sink *sink, mtf_error *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s-%05d.h5", sink->dir, sink->prefix, sink->shards);
  MTF_CHECK(mtf_shard_write(path, sink->buf, sink->fill, sink->vocab_size, sink->eot_id, sink->tokenizer, err));
  sink->shards++;
  sink->fill = 0;
  return MTF_OK;
}

int mtf_shard_sink_push(mtf_shard_sink *sink, const int32_t *tokens, int64_t count, mtf_error *err) {
  while (count > 0) {
    if (sink->fill == sink->capacity) {
      /* Grow by doubling up to one shard, so small inputs do not allocate a full shard's buffer. */
      int64_t capacity = sink->capacity ? sink->capacity * 2 : 65536;
      if (capacity > sink->shard_tokens) capacity = sink->shard_tokens;
      if (capacity > sink->capacity) {
        int32_t *grown = realloc(sink->buf, sizeof(int32_t) * (size_t)capacity);
        if (!grown) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory buffering a shard of %lld tokens",
                                         (long long)capacity);
        sink->buf = grown;
        sink->capacity = capacity;
      }
    }
    int64_t room = sink->capacity - sink->fill, take = count < room ? count : room;
    memcpy(sink->buf + sink->fill, tokens, sizeof(int32_t) * (size_t)take);
    sink->fill += take;
    sink->total += take;
    tokens += take;
    count -= take;
    if (sink->fill == sink->shard_tokens) MTF_CHECK(flush_shard(sink, err));
  }
  return MTF_OK;
}

int mtf_shard_sink_finish(mtf_shard_sink *sink, mtf_error *err) {
  int rc = sink->fill > 0 ? flush_shard(sink, err) : MTF_OK;
  mtf_shard_sink_free(sink);
  return rc;
}

void mtf_shard_sink_free(mtf_shard_sink *sink) {
  free(sink->buf);
  sink->buf = NULL;
  sink->fill = sink->capacity = 0;
}
