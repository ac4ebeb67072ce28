#define _GNU_SOURCE
#include "io/dataset.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int list_paths(const char *spec, glob_t *found, mtf_error *err) {
  struct stat info;
  char pattern[4096];
  int is_pattern = strpbrk(spec, "*?[") != NULL;
  if (!is_pattern && stat(spec, &info) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "data '%s': %s: give a directory of shards, a glob or a shard file", spec,
                         strerror(errno));
  if (!is_pattern && S_ISDIR(info.st_mode))
    snprintf(pattern, sizeof pattern, "%s/*.h5", spec);
  else
    snprintf(pattern, sizeof pattern, "%s", spec);
  /* glob() sorts its matches, so every rank sees the same shard order. */
  int rc = glob(pattern, 0, NULL, found);
  if (rc == GLOB_NOMATCH || (rc == 0 && found->gl_pathc == 0)) {
    globfree(found);
    return mtf_error_set(err, MTF_ERR_IO,
                         "data '%s': no shard files match '%s': check the path, or create shards with 'mtf data "
                         "prepare' or 'mtf data synth'",
                         spec, pattern);
  }
  if (rc != 0) {
    globfree(found);
    return mtf_error_set(err, MTF_ERR_IO, "data '%s': cannot list '%s' (%s)", spec, pattern,
                         rc == GLOB_NOSPACE ? "out of memory" : "read error");
  }
  return MTF_OK;
}

int mtf_dataset_open(const char *spec, int64_t length, mtf_dataset *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  out->length = length;
  out->max_vocab_size = -1;
  if (length < 1) return mtf_error_set(err, MTF_ERR_INVALID, "sequence length must be at least 1, not %lld",
                                       (long long)length);
  glob_t found;
  MTF_CHECK(list_paths(spec, &found, err));
  int count = (int)found.gl_pathc;
  out->paths = calloc((size_t)count, sizeof(char *));
  out->meta = calloc((size_t)count, sizeof(mtf_shard_meta));
  out->first_window = calloc((size_t)count + 1, sizeof(int64_t));
  int rc = out->paths && out->meta && out->first_window ? MTF_OK
                                                        : mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing shards");
  for (int i = 0; rc == MTF_OK && i < count; i++) {
    out->paths[i] = strdup(found.gl_pathv[i]);
    out->count = i + 1;
    if (!out->paths[i]) {
      rc = mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing shards");
      break;
    }
    rc = mtf_shard_stat(out->paths[i], &out->meta[i], err);
    if (rc != MTF_OK) break;
    int64_t tokens = out->meta[i].num_tokens;
    if (tokens < length + 1)
      rc = mtf_error_set(err, MTF_ERR_INVALID,
                         "shard '%s' holds %lld tokens, fewer than one window of length + 1 = %lld: use a shorter "
                         "sequence length, write bigger shards (--shard-tokens), or remove it from the dataset",
                         out->paths[i], (long long)tokens, (long long)(length + 1));
    out->first_window[i + 1] = out->first_window[i] + (tokens - 1) / length;
    out->tokens += tokens;
    if (out->meta[i].vocab_size > out->max_vocab_size) out->max_vocab_size = out->meta[i].vocab_size;
  }
  globfree(&found);
  if (rc != MTF_OK) {
    mtf_dataset_close(out);
    return rc;
  }
  out->windows = out->first_window[count];
  return MTF_OK;
}

void mtf_dataset_close(mtf_dataset *dataset) {
  for (int i = 0; dataset->paths && i < dataset->count; i++) free(dataset->paths[i]);
  free(dataset->paths);
  free(dataset->meta);
  free(dataset->first_window);
  memset(dataset, 0, sizeof *dataset);
}

void mtf_dataset_window(const mtf_dataset *dataset, int64_t w, int *shard, int64_t *start) {
  /* Binary search for the last shard whose first window is <= w. */
  int lo = 0, hi = dataset->count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (dataset->first_window[mid] <= w)
      lo = mid;
    else
      hi = mid - 1;
  }
  *shard = lo;
  *start = (w - dataset->first_window[lo]) * dataset->length;
}
