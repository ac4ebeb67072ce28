/* The checkpoint directory: file names, the `latest` pointer, atomic commit and pruning. Runs on rank 0
 * only, with plain POSIX calls (no HDF5, no MPI). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "core/paths.h"

#define MAX_FILES 4096

typedef struct ckpt_name {
  int64_t step;
  int64_t sequence; /* 0 for ckpt-<step>.h5, n for ckpt-<step>-<n>.h5 (a step saved again) */
  char name[MTF_CKPT_PATH_MAX];
} ckpt_name;

/* Parses ckpt-<step>.h5 or ckpt-<step>-<n>.h5; anything else (a .tmp file, `latest`) is not a checkpoint. */
static int parse_name(const char *name, ckpt_name *out) {
  long long step = 0, sequence = 0;
  int used = 0;
  if (sscanf(name, "ckpt-%lld-%lld.h5%n", &step, &sequence, &used) == 2 && name[used] == '\0') {
  } else if (used = 0, sequence = 0, sscanf(name, "ckpt-%lld.h5%n", &step, &used) == 1 && name[used] == '\0') {
  } else {
    return 0;
  }
  if (step < 0 || sequence < 0) return 0;
  out->step = step;
  out->sequence = sequence;
  snprintf(out->name, sizeof out->name, "%s", name);
  return 1;
}

static int compare_newest_first(const void *a, const void *b) {
  const ckpt_name *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? 1 : -1;
  if (x->sequence != y->sequence) return x->sequence < y->sequence ? 1 : -1;
  return 0;
}

static int key_less(const ckpt_name *x, const ckpt_name *y) { return compare_newest_first(x, y) > 0; }

/* All checkpoint files of dir, newest first, in *out (malloc'ed); -1 when dir cannot be read (a missing
 * dir is 0 files). */
static int list_checkpoints(const char *dir, ckpt_name **out) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -1;
  int n = 0, capacity = 0;
  struct dirent *entry;
  ckpt_name parsed;
  while ((entry = readdir(d)))
    if (parse_name(entry->d_name, &parsed)) {
      if (n == capacity) {
        ckpt_name *grown = capacity < MAX_FILES * 256 ? realloc(*out, sizeof **out * (size_t)(capacity ? 2 * capacity : 64)) : NULL;
        if (!grown) break;
        *out = grown;
        capacity = capacity ? 2 * capacity : 64;
      }
      (*out)[n++] = parsed;
    }
  closedir(d);
  if (n > 0) qsort(*out, (size_t)n, sizeof **out, compare_newest_first);
  return n;
}

/* The name `latest` holds, or "" when there is no usable one. */
static void read_latest(const char *dir, char *name, size_t size) {
  char path[MTF_CKPT_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/latest", dir);
  name[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(name, (int)size, f)) name[0] = '\0';
  fclose(f);
  name[strcspn(name, "\r\n")] = '\0';
}

int mtf_ckpt_dir_candidates(const char *dir, char (**names)[MTF_CKPT_PATH_MAX], mtf_error *err) {
  ckpt_name *files;
  *names = NULL;
  int n = list_checkpoints(dir, &files);
  if (n < 0) {
    mtf_error_set(err, MTF_ERR_IO, "cannot read checkpoint directory '%s': %s", dir, strerror(errno));
    return -1;
  }
  *names = calloc((size_t)(n > 0 ? n : 1), sizeof **names);
  if (!*names) {
    free(files);
    mtf_error_set(err, MTF_ERR_NOMEM, "out of memory listing checkpoints");
    return -1;
  }
  char latest_name[MTF_CKPT_PATH_MAX];
  read_latest(dir, latest_name, sizeof latest_name);
  ckpt_name latest;
  int have_latest = 0;
  for (int i = 0; i < n && latest_name[0]; i++)
    if (strcmp(files[i].name, latest_name) == 0) have_latest = 1, latest = files[i];
  int count = 0;
  /* `latest` decides: files newer than it are left-overs (of a run restarted with --fresh, say). */
  if (have_latest) snprintf((*names)[count++], MTF_CKPT_PATH_MAX, "%s", latest.name);
  for (int i = 0; i < n; i++) {
    if (have_latest && !key_less(&files[i], &latest)) continue;
    snprintf((*names)[count++], MTF_CKPT_PATH_MAX, "%s", files[i].name);
  }
  free(files);
  return count;
}

int mtf_ckpt_resolve(const char *given, char *out, size_t size, mtf_error *err) {
  struct stat st;
  const char *base = strrchr(given, '/');
  base = base ? base + 1 : given;
  if (stat(given, &st) != 0 || (!S_ISDIR(st.st_mode) && strcmp(base, "latest") != 0)) {
    if ((size_t)snprintf(out, size, "%s", given) >= size)
      return mtf_error_set(err, MTF_ERR_INVALID, "checkpoint path '%s' is too long", given);
    return MTF_OK;
  }
  char dir[MTF_CKPT_PATH_MAX];
  if (strlen(given) + sizeof "/checkpoints" > sizeof dir)
    return mtf_error_set(err, MTF_ERR_INVALID, "checkpoint path '%s' is too long", given);
  if (!S_ISDIR(st.st_mode)) { /* `latest`: the name it holds, beside it */
    snprintf(dir, sizeof dir, "%s", given);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    char name[MTF_CKPT_PATH_MAX];
    read_latest(dir, name, sizeof name);
    if (!name[0])
      return mtf_error_set(err, MTF_ERR_IO, "'%s' names no checkpoint (it should hold a file name like "
                           "ckpt-00000100.h5): give a checkpoint file of %s instead", given, dir);
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size)
      return mtf_error_set(err, MTF_ERR_INVALID, "checkpoint path '%s/%s' is too long", dir, name);
    return MTF_OK;
  }
  /* A run directory holds checkpoints/; a checkpoints directory holds the files. */
  snprintf(dir, sizeof dir, "%s/checkpoints", given);
  struct stat sub;
  if (stat(dir, &sub) != 0 || !S_ISDIR(sub.st_mode)) snprintf(dir, sizeof dir, "%s", given);
  char(*names)[MTF_CKPT_PATH_MAX];
  int n = mtf_ckpt_dir_candidates(dir, &names, err);
  if (n < 0) return err->code ? err->code : MTF_ERR_IO;
  int rc = MTF_OK;
  if (n == 0)
    rc = mtf_error_set(err, MTF_ERR_IO, "'%s' holds no checkpoint (ckpt-<step>.h5 files, written by mtf train with "
                       "train.checkpoint_every): give a run directory, its checkpoints/ or a checkpoint file", dir);
  else if ((size_t)snprintf(out, size, "%s/%s", dir, names[0]) >= size)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "checkpoint path '%s/%s' is too long", dir, names[0]);
  free(names);
  return rc;
}

static int file_exists(const char *dir, const char *name) {
  char path[2 * MTF_CKPT_PATH_MAX];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return lstat(path, &st) == 0; /* a link (even a dangling one) takes its name too */
}

int mtf_ckpt_dir_new_name(const char *dir, int64_t step, char *name, size_t size, mtf_error *err) {
  /* Never reuse a name: a file of the same step may be a damaged checkpoint someone wants to look at. */
  for (int64_t sequence = 0; sequence < 10000; sequence++) {
    if (sequence == 0)
      snprintf(name, size, "ckpt-%08lld.h5", (long long)step);
    else
      snprintf(name, size, "ckpt-%08lld-%lld.h5", (long long)step, (long long)sequence);
    if (!file_exists(dir, name)) return MTF_OK;
  }
  return mtf_error_set(err, MTF_ERR_IO, "checkpoint directory '%s' already holds 10000 checkpoints of step %lld",
                       dir, (long long)step);
}

static int fsync_path(const char *path, int directory) {
  int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int mtf_ckpt_dir_commit(const char *dir, const char *name, mtf_error *err) {
  char tmp[2 * MTF_CKPT_PATH_MAX + 8], final[2 * MTF_CKPT_PATH_MAX], latest[MTF_CKPT_PATH_MAX + 16],
      latest_tmp[MTF_CKPT_PATH_MAX + 16];
  snprintf(final, sizeof final, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  snprintf(latest, sizeof latest, "%s/latest", dir);
  snprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", dir);
  if (fsync_path(tmp, 0) != 0 || rename(tmp, final) != 0 || fsync_path(dir, 1) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "cannot commit checkpoint '%s': %s (is the directory writable and the disk "
                         "not full?)", final, strerror(errno));
  /* Never written through a link planted under the name: remove whatever is there, then create it anew. */
  if (unlink(latest_tmp) != 0 && errno != ENOENT)
    return mtf_error_set(err, MTF_ERR_IO, "cannot remove the stale '%s': %s", latest_tmp, strerror(errno));
  int fd = open(latest_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) close(fd);
  int ok = f && fprintf(f, "%s\n", name) > 0;
  if (f) { /* each step runs whatever the one before gave (the file is closed in every case) */
    int flushed = fflush(f) == 0, synced = fsync(fileno(f)) == 0, closed = fclose(f) == 0;
    ok = ok && flushed && synced && closed;
  }
  if (!ok || rename(latest_tmp, latest) != 0 || fsync_path(dir, 1) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "checkpoint '%s' is complete but '%s' could not be updated: %s", final,
                         latest, strerror(errno));
  return MTF_OK;
}

void mtf_ckpt_dir_prune(const char *dir, const char *name, int64_t keep) {
  ckpt_name current;
  if (keep < 1 || !parse_name(name, &current)) return;
  ckpt_name *files;
  int n = list_checkpoints(dir, &files);
  int64_t kept = 0;
  for (int i = 0; i < n; i++) {
    if (key_less(&current, &files[i])) continue; /* newer than the one just written: not ours to judge */
    if (kept++ < keep) continue;
    char path[2 * MTF_CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
    if (unlink(path) != 0) fprintf(stderr, "mtf: warning: cannot delete old checkpoint '%s': %s\n", path, strerror(errno));
  }
  free(files);
}

int mtf_ckpt_dir_clear_tmp(const char *dir, const char *name, mtf_error *err) {
  char tmp[2 * MTF_CKPT_PATH_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
  struct stat st;
  if (lstat(tmp, &st) != 0) return MTF_OK;
  if (S_ISDIR(st.st_mode))
    return mtf_error_set(err, MTF_ERR_IO, "'%s' is a directory: remove it so that the checkpoint can be written", tmp);
  if (unlink(tmp) != 0) /* unlink removes a link itself, never its target */
    return mtf_error_set(err, MTF_ERR_IO, "cannot remove the stale '%s': %s", tmp, strerror(errno));
  return MTF_OK;
}

int mtf_ckpt_dir_make(const char *dir, mtf_error *err) {
  return mtf_make_dirs(dir, "checkpoint directory", "set run.dir to a writable place", err);
}

int mtf_ckpt_dir_set_aside(const char *dir, char *moved_to, size_t size, int *count, mtf_error *err) {
  ckpt_name *names = NULL;
  int n = list_checkpoints(dir, &names);
  free(names);
  *count = n > 0 ? n : 0;
  if (moved_to && size) moved_to[0] = '\0';
  if (n < 0) return mtf_error_set(err, MTF_ERR_IO, "cannot read checkpoint directory '%s': %s", dir, strerror(errno));
  if (n == 0) return MTF_OK;
  /* A name no earlier run took: the directory and when it was set aside (UTC), then -1, -2, ... */
  char stamp[32], target[MTF_CKPT_PATH_MAX + 64];
  time_t now = time(NULL);
  struct tm utc;
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", gmtime_r(&now, &utc));
  struct stat st;
  for (int k = 0;; k++) {
    if (k == 0) snprintf(target, sizeof target, "%s.previous-%s", dir, stamp);
    else snprintf(target, sizeof target, "%s.previous-%s-%d", dir, stamp, k);
    if (lstat(target, &st) != 0 && errno == ENOENT) break;
    if (k == 1000) return mtf_error_set(err, MTF_ERR_IO, "no free name beside '%s' to set its checkpoints aside", dir);
  }
  if (strlen(target) >= size)
    return mtf_error_set(err, MTF_ERR_IO, "the name to set '%s' aside under is too long: shorten run.dir", dir);
  if (rename(dir, target) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "cannot move the previous checkpoints '%s' aside to '%s': %s (move or "
                         "delete them yourself, or give another run.dir)", dir, target, strerror(errno));
  snprintf(moved_to, size, "%s", target);
  return MTF_OK;
}
