/* For the fuzz targets whose entry point takes a path: the input's bytes are written to one temporary
 * file per process (made once, rewritten for every input, removed at exit). */
#ifndef MTF_FUZZ_TMP_H
#define MTF_FUZZ_TMP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_tmp_path[256];

static void fuzz_tmp_remove(void) {
  if (fuzz_tmp_path[0]) unlink(fuzz_tmp_path);
}

/* Returns the path holding exactly data[0, size), or NULL (the caller skips the input). */
static const char *fuzz_tmp_write(const uint8_t *data, size_t size, const char *suffix) {
  if (!fuzz_tmp_path[0]) {
    const char *dir = getenv("TMPDIR");
    snprintf(fuzz_tmp_path, sizeof fuzz_tmp_path, "%s/mtf-fuzz-%ld%s", dir && *dir ? dir : "/tmp",
             (long)getpid(), suffix);
    atexit(fuzz_tmp_remove);
  }
  FILE *f = fopen(fuzz_tmp_path, "wb");
  if (!f) return NULL;
  int ok = fwrite(data, 1, size, f) == size;
  ok = fclose(f) == 0 && ok;
  return ok ? fuzz_tmp_path : NULL;
}

#endif
