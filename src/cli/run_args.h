/* What `mtf train`, `mtf eval`, `mtf generate` and `mtf plan` share: the command line CONFIG [--set
 * key.path=value]... [--mesh SHAPE] [--layout RULES] (plus each command's own options), loading the config
 * with those overrides (on rank 0, then broadcast, for the MPI commands), the layout-rule warnings, and
 * the MPI frame of train, eval and generate. Each command lives in its own cmd_<name>.c. */
#ifndef MTF_CLI_RUN_ARGS_H
#define MTF_CLI_RUN_ARGS_H

#include <getopt.h>
#include <stdio.h>

#include "config/config.h"
#include "mtf.h"

#define MTF_RUN_MAX_SETS 64
#define MTF_RUN_MAX_OPTIONS 16
/* mtf_run_args_parse's result after printing --help: the command exits 0. */
#define MTF_RUN_ARGS_HELP (-1)

typedef struct mtf_run_args {
  const char *config_path; /* NULL only for a command with config_from_checkpoint */
  /* Where config_path is NULL: the checkpoint (as the user named it: a file, checkpoints/latest, a
   * checkpoints or run directory) whose stored config is loaded instead, --set and friends applied on top. */
  const char *config_checkpoint;
  const char *sets[MTF_RUN_MAX_SETS]; /* --set key.path=value, in order */
  int n_sets;
  const char *mesh, *layout; /* --mesh, --layout (NULL: the config's) */
} mtf_run_args;

/* A command's own options, on top of the shared CONFIG, --set, --mesh, --layout and -h/--help. */
typedef struct mtf_run_command {
  const char *name;         /* "train" */
  void (*usage)(FILE *out); /* the command's whole --help text */
  /* getopt_long entries ending in {0, 0, 0, 0}, at most MTF_RUN_MAX_OPTIONS, or NULL; their values must
   * differ from 's', 'm', 'l' and 'h', which the shared options use. */
  const struct option *options;
  /* Stores one of them; returns MTF_EXIT_OK, or MTF_EXIT_USAGE after saying why on stderr. */
  int (*handle)(void *ctx, int opt, const char *value);
  void *ctx;
  int config_from_checkpoint; /* 1: CONFIG may be left out (the command then sets args->config_checkpoint) */
} mtf_run_command;

/* Parses argv (argv[0] is the command's name). Returns MTF_EXIT_OK; MTF_EXIT_USAGE after printing the
 * reason and the usage to stderr; or MTF_RUN_ARGS_HELP after printing the usage to stdout. */
int mtf_run_args_parse(int argc, char **argv, const mtf_run_command *command, mtf_run_args *args);
/* The usage lines of the shared arguments (CONFIG, --set, --mesh, --layout). */
void mtf_run_args_usage(FILE *out);

/* Reads the config file (or the config stored in args->config_checkpoint), applies --set, --mesh and
 * --layout, and validates (one process). */
int mtf_run_config_load(const mtf_run_args *args, mtf_config *cfg, mtf_error *err);
/* Collective: rank 0 loads; every rank returns its status and message, and the config when it loaded. */
int mtf_run_config_load_collective(const mtf_run_args *args, mtf_config *cfg, mtf_error *err);

/* Collective: a --checkpoint/--from PATH as the user gave it (a file, checkpoints/latest, a checkpoints or run
 * directory) replaced by the checkpoint file it means, as rank 0 finds it (mtf_ckpt_resolve; the string lives
 * until the process ends); every rank returns rank 0's status. A NULL *path stays NULL. */
int mtf_run_resolve_checkpoint(const char **path, mtf_error *err);
/* cfg's layout rules against the model's graph g: a rule that names a dimension no tensor of g has, or a mesh
 * axis cfg's mesh lacks, is an MTF_ERR_LAYOUT naming where the layout was set (FILE:LINE:COL of mesh.layout,
 * --set mesh.layout or --layout), each such rule and the valid names (lowering would ignore the rule and
 * split the model otherwise than written). Pure: every rank that calls it gets the same answer. */
int mtf_run_check_layout(const mtf_graph *g, const mtf_config *cfg, mtf_error *err);
/* The same against the model of cfg (its forward graph, built without plans). A model that does not build
 * passes: running it reports why. */
int mtf_run_check_layout_model(const mtf_config *cfg, mtf_error *err);

/* What an MPI command does with the config on every rank; returns MTF_OK or an error (err says why),
 * MTF_RUN_INTERRUPTED, MTF_RUN_PREEMPTED or MTF_RUN_NOTHING_TO_TRAIN. */
typedef int (*mtf_run_body)(const mtf_config *cfg, void *ctx, mtf_error *err);
/* The frame of train, eval and generate: starts MPI, loads the config collectively, runs body on every
 * rank, prints its error on rank 0 ("mtf <command>: error: ...") and ends MPI. Returns the exit status:
 * 0, 1, or the body's MTF_RUN_INTERRUPTED / MTF_RUN_PREEMPTED / MTF_RUN_NOTHING_TO_TRAIN. */
int mtf_run_mpi(const char *command, int *argc, char ***argv, const mtf_run_args *args, mtf_run_body body, void *ctx);

#endif
