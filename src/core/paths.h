/* Paths on the local file system: run and checkpoint directories, files read and written there. */
#ifndef MTF_CORE_PATHS_H
#define MTF_CORE_PATHS_H

#include <stdio.h>

#include "core/error.h"

/* Creates path and its missing parents (like mkdir -p). `what` names it in the error ("run directory"),
 * whose hint is `hint` (e.g. "set run.dir to a writable place"). */
int mtf_make_dirs(const char *path, const char *what, const char *hint, mtf_error *err);

/* Fails unless path names a readable regular file: a FIFO, device, socket or directory is refused before
 * anything opens it (opening one could block or read something that is no file). `what` names it in the
 * error ("shard", "checkpoint"), followed by `hint`. */
int mtf_require_regular_file(const char *path, const char *what, const char *hint, mtf_error *err);

/* Opens path for writing (truncated) without following a link there: a symlink planted at path is removed,
 * not followed, and the file is created with O_NOFOLLOW. NULL with err set on failure. */
FILE *mtf_create_file_nofollow(const char *path, mtf_error *err);

#endif
