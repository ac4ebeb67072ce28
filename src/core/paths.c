#define _GNU_SOURCE /* O_NOFOLLOW, lstat */
#include "core/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int mtf_make_dirs(const char *path, const char *what, const char *hint, mtf_error *err) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return mtf_error_set(err, MTF_ERR_IO, "%s '%.64s...' is too long a path", what, path);
  for (char *p = buf + 1;; p++) {
    char c = *p;
    if (c == '/' || c == '\0') {
      *p = '\0';
      if (mkdir(buf, 0775) != 0 && errno != EEXIST)
        return mtf_error_set(err, MTF_ERR_IO, "cannot create %s '%s': %s (%s)", what, buf, strerror(errno), hint);
      *p = c;
    }
    if (c == '\0') break;
  }
  return MTF_OK;
}

static const char *file_kind(mode_t mode) {
  return S_ISFIFO(mode) ? "FIFO" : S_ISDIR(mode) ? "directory" : S_ISSOCK(mode) ? "socket"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "device" : "special file";
}

int mtf_require_regular_file(const char *path, const char *what, const char *hint, mtf_error *err) {
  struct stat st;
  if (stat(path, &st) != 0 || access(path, R_OK) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "%s '%s': cannot open it (%s): check the path and permissions", what, path,
                         strerror(errno));
  if (!S_ISREG(st.st_mode))
    return mtf_error_set(err, MTF_ERR_IO, "%s '%s' is not a regular file (it is a %s): %s", what, path,
                         file_kind(st.st_mode), hint);
  return MTF_OK;
}

FILE *mtf_create_file_nofollow(const char *path, mtf_error *err) {
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && unlink(path) != 0) {
    mtf_error_set(err, MTF_ERR_IO, "cannot remove the link '%s' (it is not followed): %s", path, strerror(errno));
    return NULL;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    mtf_error_set(err, MTF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
  }
  return f;
}
