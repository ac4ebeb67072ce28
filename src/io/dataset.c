#define _GNU_SOURCE
#include "io/dataset.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Appends text to out[*at..] with glob's special characters escaped, so glob() matches it literally. */
static int append_literal(char *out, size_t size, size_t *at, const char *text, size_t length) {
  for (size_t i = 0; i < length; i++) {
    if (strchr("*?[]\\", text[i])) {
      if (*at + 1 >= size) return -1;
      out[(*at)++] = '\\';
    }
    if (*at + 1 >= size) return -1;
    out[(*at)++] = text[i];
  }
  out[*at] = '\0';
  return 0;
}

/* The glob pattern for a spec: an existing directory or file is taken literally, whatever characters its
 * name holds (a directory becomes escaped(dir)/\*.h5); otherwise the spec is a glob, whose directory part is
 * taken literally when it names an existing directory (so data/run[1]/train-*.h5 works). */
static int list_paths(const char *spec, glob_t *found, mtf_error *err) {
  struct stat info;
  char pattern[8192], shown[4200];
  size_t at = 0;
  int is_pattern = strpbrk(spec, "*?[") != NULL, too_long = 0;
  int exists = stat(spec, &info) == 0;
  if (!exists && !is_pattern)
    return mtf_error_set(err, MTF_ERR_IO, "data '%s': %s: give a directory of shards, a glob or a shard file", spec,
                         strerror(errno));
  pattern[0] = '\0';
  if (exists && S_ISDIR(info.st_mode)) {
    too_long = append_literal(pattern, sizeof pattern, &at, spec, strlen(spec)) ||
               append_literal(pattern, sizeof pattern, &at, "/", 1);
    if (!too_long && at + 5 < sizeof pattern) strcat(pattern, "*.h5");
    else too_long = 1;
    snprintf(shown, sizeof shown, "%s/*.h5", spec);
  } else if (exists) {
    too_long = append_literal(pattern, sizeof pattern, &at, spec, strlen(spec));
    snprintf(shown, sizeof shown, "%s", spec);
  } else {
    const char *slash = strrchr(spec, '/');
    char dir[4096];
    struct stat dir_info;
    size_t dir_length = slash ? (size_t)(slash - spec) : 0;
    if (slash && dir_length > 0 && dir_length < sizeof dir) {
      memcpy(dir, spec, dir_length);
      dir[dir_length] = '\0';
    }
    if (slash && dir_length > 0 && dir_length < sizeof dir && stat(dir, &dir_info) == 0 && S_ISDIR(dir_info.st_mode)) {
      too_long = append_literal(pattern, sizeof pattern, &at, spec, dir_length);
      if (!too_long && at + strlen(slash) < sizeof pattern) strcat(pattern, slash);
      else too_long = 1;
    } else if (strlen(spec) < sizeof pattern) {
      snprintf(pattern, sizeof pattern, "%s", spec);
    } else {
      too_long = 1;
    }
    snprintf(shown, sizeof shown, "%s", spec);
  }
  if (too_long) return mtf_error_set(err, MTF_ERR_INVALID, "data '%.200s...': the path is too long", spec);
  /* glob() sorts its matches, so every rank sees the same shard order. */
  int rc = glob(pattern, 0, NULL, found);
  if (rc == GLOB_NOMATCH || (rc == 0 && found->gl_pathc == 0)) {
    globfree(found);
    return mtf_error_set(err, MTF_ERR_IO,
                         "data '%s': no shard files match '%s': check the path, or create shards with 'mtf data "
                         "prepare' or 'mtf data synth'",
                         spec, shown);
  }
  if (rc != 0) {
    globfree(found);
    return mtf_error_set(err, MTF_ERR_IO, "data '%s': cannot list '%s' (%s)", spec, shown,
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
