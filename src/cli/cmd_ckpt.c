/* `mtf ckpt inspect PATH [--json]`: a checkpoint's step, state, config and datasets (one process).
 * `mtf ckpt verify PATH`: every dataset against its checksum (exit 0 ok, 1 naming the bad dataset). */
#include <stdio.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "cli/cli.h"

static void ckpt_usage(FILE *out) {
  fprintf(out,
          "usage: mtf ckpt inspect PATH [--json]\n"
          "       mtf ckpt verify PATH\n"
          "\n"
          "  PATH     a checkpoint file (RUN_DIR/checkpoints/ckpt-<step>.h5), RUN_DIR/checkpoints/latest (the one\n"
          "           it names), RUN_DIR/checkpoints or RUN_DIR (the latest one there)\n"
          "  --json   print the result as one JSON object\n"
          "\n"
          "Prints the step, the RNG state and data cursor, the mesh and layout that wrote it, every dataset with\n"
          "its dims, shape and dtype, and the resolved config saved with it. verify reads every dataset and\n"
          "compares it with its stored checksum: exit 0 when all match, 1 naming the first that does not.\n"
          "Format: docs/CHECKPOINTS.md.\n");
}

int mtf_cmd_ckpt(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    ckpt_usage(stdout);
    return MTF_EXIT_OK;
  }
  if (argc < 2 || (strcmp(argv[1], "inspect") != 0 && strcmp(argv[1], "verify") != 0)) {
    if (argc >= 2) fprintf(stderr, "mtf ckpt: unknown subcommand '%s'\n\n", argv[1]);
    ckpt_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  const char *path = NULL, *sub = argv[1];
  int json = 0, verify = strcmp(sub, "verify") == 0;
  for (int i = 2; i < argc; i++) {
    if (!verify && strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      ckpt_usage(stdout);
      return MTF_EXIT_OK;
    } else if (argv[i][0] == '-' || path) {
      fprintf(stderr, "mtf ckpt %s: %s '%s'\n\n", sub, argv[i][0] == '-' ? "unknown option" : "only one PATH, got also",
              argv[i]);
      ckpt_usage(stderr);
      return MTF_EXIT_USAGE;
    } else {
      path = argv[i];
    }
  }
  if (!path) {
    fprintf(stderr, "mtf ckpt %s: a checkpoint PATH is required\n\n", sub);
    ckpt_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  mtf_error err;
  mtf_error_clear(&err);
  char file[MTF_CKPT_PATH_MAX];
  if (mtf_ckpt_resolve(path, file, sizeof file, &err) != MTF_OK ||
      (verify ? mtf_ckpt_verify(file, stdout, &err) : mtf_ckpt_inspect(file, json, stdout, &err)) != MTF_OK) {
    fflush(stdout);
    fprintf(stderr, "mtf ckpt %s: error: %s\n", sub, err.msg);
    return MTF_EXIT_FAILURE;
  }
  return MTF_EXIT_OK;
}
