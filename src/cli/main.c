/* The `mtf` binary: dispatches to subcommands. MPI is initialised only by the subcommands that run as
 * an MPI job, so `mtf --help` or `mtf layout` work in a plain shell. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command commands[] = {
    {"train", mtf_cmd_train, "train the transformer of a YAML config (run under mpiexec/srun)"},
    {"eval", mtf_cmd_eval, "loss and perplexity on the config's eval shards (run under mpiexec/srun)"},
    {"generate", mtf_cmd_generate, "sample text from a checkpoint (run under mpiexec/srun)"},
    {"plan", mtf_cmd_plan, "variables, layouts, memory, FLOPs and communication per rank (one process)"},
    {"layout", mtf_cmd_layout, "show how layout rules split tensors over a mesh (one process)"},
    {"commcheck", mtf_cmd_commcheck, "check the mesh communicators and every collective (run under mpiexec/srun)"},
    {"ckpt", mtf_cmd_ckpt, "inspect a checkpoint: step, config, datasets with dims, shape and dtype (one process)"},
    {"data", mtf_cmd_data, "make HDF5 token shards (prepare, synth), inspect them, check the loader on a mesh"},
};
#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out,
          "usage: mtf <command> [options]\n"
          "       mtf --help | --version [--set backend.KEY=VALUE ...]\n"
          "\n"
          "mtf is Mesh TensorFlow's model parallelism as one MPI program: tensors have named dimensions,\n"
          "processors form a named mesh, and layout rules (dimension:mesh-axis) say what is split where.\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < COMMAND_COUNT; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n"
          "options:\n"
          "  -h, --help     show this help\n"
          "  -V, --version  show the version and the libraries mtf was built with; with --set backend.kind=pjrt\n"
          "                 (and backend.plugin, backend.local_devices) also the PJRT platform and devices\n"
          "\n"
          "Run 'mtf <command> --help' for a command's options.\n"
          "Exit status: 0 success, 1 failure (the message says why), 2 bad command line.\n");
}

int main(int argc, char **argv) {
  mtf_cli_choose_blas_kernels(argv);
  if (argc < 2) {
    usage(stderr);
    return MTF_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
    usage(stdout);
    return MTF_EXIT_OK;
  }
  if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
    return mtf_cmd_version(argc - 1, argv + 1);
  }
  for (size_t i = 0; i < COMMAND_COUNT; i++)
    if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "mtf: unknown command '%s'\n\n", name);
  usage(stderr);
  return MTF_EXIT_USAGE;
}
