/* `mtf train CONFIG`: trains the config's transformer under mpiexec/srun (src/run/train.c), resuming from the
 * run directory's latest checkpoint unless told otherwise. */
#define _GNU_SOURCE
#include <stdio.h>

#include "cli/cli.h"
#include "cli/run_args.h"
#include "comm/world.h"
#include "run/train.h"

static void train_usage(FILE *out) {
  fprintf(out, "usage: mpiexec -n N mtf train CONFIG [--set key.path=value]... [--mesh SHAPE] [--layout RULES]"
               " [--from PATH | --fresh] [--done-ok]\n"
               "\n");
  mtf_run_args_usage(out);
  fprintf(out, "  --from PATH          resume from this checkpoint (a file, a checkpoints/latest, or a directory: its\n"
               "                       latest; default: RUN_DIR/checkpoints/latest, if any)\n"
               "  --fresh              start at step 0 even if RUN_DIR/checkpoints holds checkpoints (they are moved,\n"
               "                       not deleted, to RUN_DIR/checkpoints.previous-<UTC time>)\n"
               "  --done-ok            exit 0 when the checkpoint resumed from is already at train.steps (else 3)\n"
               "  -h, --help           show this help\n"
               "\nLogs a line every train.log_every steps and appends the same figures to RUN_DIR/metrics.jsonl.\n"
               "Saves a checkpoint every train.checkpoint_every steps (and at the end), keeping train.keep_checkpoints\n"
               "(docs/CHECKPOINTS.md). SIGUSR1, SIGTERM or SIGINT (Ctrl-C): finish the step, save a checkpoint, stop\n"
               "(a second Ctrl-C stops at once). Under OpenMPI's mpiexec send SIGUSR1 to mpiexec: it forwards it to\n"
               "every rank (Ctrl-C or SIGTERM to mpiexec make mpiexec end the ranks itself, within about a second).\n"
               "Exit status: 0 done, 1 error, 2 bad command line, 3 nothing to train (the checkpoint resumed from\n"
               "is at train.steps already), 75 checkpointed and stopped by SIGUSR1/SIGTERM, 130 checkpointed and stopped\n"
               "by SIGINT.\n");
}

static int train_option(void *ctx, int opt, const char *value) {
  mtf_train_options *options = ctx;
  if (opt == 'f') options->resume_from = value;
  else if (opt == 'd') options->done_ok = 1;
  else options->fresh = 1;
  return MTF_EXIT_OK;
}

static int train_body(const mtf_config *cfg, void *ctx, mtf_error *err) {
  mtf_train_options *train = ctx;
  MTF_CHECK(mtf_run_resolve_checkpoint(&train->resume_from, err));
  MTF_CHECK(mtf_run_check_layout_model(cfg, err));
  if (mtf_world_rank() == 0) {
    printf("# resolved config (also saved as %s/config.yaml)\n", cfg->run_dir);
    mtf_config_print(cfg, stdout);
    fflush(stdout);
  }
  return mtf_train_run(cfg, ctx, err);
}

int mtf_cmd_train(int argc, char **argv) {
  static const struct option options[] = {{"from", required_argument, 0, 'f'}, {"fresh", no_argument, 0, 'F'},
                                                {"done-ok", no_argument, 0, 'd'}, {0, 0, 0, 0}};
  mtf_train_options train = {0};
  const mtf_run_command command = {"train", train_usage, options, train_option, &train, 0};
  mtf_run_args args;
  int status = mtf_run_args_parse(argc, argv, &command, &args);
  if (status) return status == MTF_RUN_ARGS_HELP ? MTF_EXIT_OK : status;
  if (train.fresh && train.resume_from) {
    fprintf(stderr, "mtf train: --from and --fresh exclude each other\n\n");
    train_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  return mtf_run_mpi("train", &argc, &argv, &args, train_body, &train);
}
