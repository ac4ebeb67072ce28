/* `mtf eval CONFIG`: loss and perplexity of a checkpoint on the config's eval shards, under mpiexec/srun
 * (src/run/train.c). */
#define _GNU_SOURCE
#include <stdio.h>

#include "cli/cli.h"
#include "cli/run_args.h"
#include "run/train.h"

typedef struct eval_args {
  int json;
  const char *checkpoint;
} eval_args;

static void eval_usage(FILE *out) {
  fprintf(out, "usage: mpiexec -n N mtf eval CONFIG [--set key.path=value]... [--mesh SHAPE] [--layout RULES] [--json]"
               " [--checkpoint PATH]\n"
               "\n");
  mtf_run_args_usage(out);
  fprintf(out, "  --json               print the result as JSON (loss, perplexity, tokens)\n"
               "  --checkpoint PATH    evaluate this checkpoint (a file, a checkpoints/latest, or a directory: its latest;\n"
               "                       default: RUN_DIR/checkpoints' latest good one)\n"
               "  -h, --help           show this help\n"
               "\nEvaluates train.eval_batches batches of the eval shards (data.eval).\n");
}

static int eval_option(void *ctx, int opt, const char *value) {
  eval_args *eval = ctx;
  if (opt == 'j') eval->json = 1;
  else eval->checkpoint = value;
  return MTF_EXIT_OK;
}

static int eval_body(const mtf_config *cfg, void *ctx, mtf_error *err) {
  eval_args *eval = ctx;
  MTF_CHECK(mtf_run_resolve_checkpoint(&eval->checkpoint, err));
  MTF_CHECK(mtf_run_check_layout_model(cfg, err));
  return mtf_eval_run(cfg, eval->json, eval->checkpoint, err);
}

int mtf_cmd_eval(int argc, char **argv) {
  static const struct option options[] = {
      {"json", no_argument, 0, 'j'}, {"checkpoint", required_argument, 0, 'c'}, {0, 0, 0, 0}};
  eval_args eval = {0};
  const mtf_run_command command = {"eval", eval_usage, options, eval_option, &eval, 0};
  mtf_run_args args;
  int status = mtf_run_args_parse(argc, argv, &command, &args);
  if (status) return status == MTF_RUN_ARGS_HELP ? MTF_EXIT_OK : status;
  return mtf_run_mpi("eval", &argc, &argv, &args, eval_body, &eval);
}
