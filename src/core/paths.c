#include "core/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
