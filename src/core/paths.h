/* Directories on the local file system (run directories, checkpoint directories). */
#ifndef MTF_CORE_PATHS_H
#define MTF_CORE_PATHS_H

#include "core/error.h"

/* Creates path and its missing parents (like mkdir -p). `what` names it in the error ("run directory"),
 * whose hint is `hint` (e.g. "set run.dir to a writable place"). */
int mtf_make_dirs(const char *path, const char *what, const char *hint, mtf_error *err);

#endif
