/* `mtf generate CONFIG --prompt TEXT`: samples text from a checkpoint under mpiexec/srun (src/run/generate.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/run_args.h"
#include "run/generate.h"

static void generate_usage(FILE *out) {
  fprintf(out, "usage: mpiexec -n N mtf generate CONFIG [--set key.path=value]... [--mesh SHAPE] [--layout RULES]\n"
               "           [--checkpoint PATH] (--prompt TEXT | --prompt-ids IDS) [--ids] [--max-new N] [--temperature T]\n"
               "           [--top-k K] [--seed S]\n"
               "\n");
  mtf_run_args_usage(out);
  fprintf(out, "  --checkpoint PATH    the checkpoint to sample from (default: RUN_DIR/checkpoints' latest good one)\n"
               "  --prompt TEXT        the text to continue, encoded with the checkpoint's tokenizer: bytes, or greedy\n"
               "                       longest match over its decode table (see docs/DATA.md)\n"
               "  --prompt-ids IDS     the prompt as token ids, separated by spaces or commas (any tokenizer)\n"
               "  --ids                print token ids instead of text (automatic when the tokenizer has no decode\n"
               "                       table)\n"
               "  --max-new N          tokens to generate (default 200, at most 16777216); stops early at end-of-text\n"
               "  --temperature T      sampling temperature (default 1; 0 = greedy)\n"
               "  --top-k K            sample among the K most likely tokens (default 0 = all)\n"
               "  --seed S             sampling seed (default 1); every mesh gives the same text for one seed\n"
               "  -h, --help           show this help\n");
}

static int generate_option(void *ctx, int opt, const char *value) {
  mtf_generate_options *generate = ctx;
  if (opt == 'c') {
    generate->checkpoint = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'p') {
    generate->prompt = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'P') {
    generate->prompt_ids = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'I') {
    generate->print_ids = 1;
    return MTF_EXIT_OK;
  }
  const char *name = opt == 'n' ? "max-new" : opt == 't' ? "temperature" : opt == 'k' ? "top-k" : "seed";
  char *end = NULL;
  errno = 0;
  if (opt == 't') { /* a finite number >= 0: nan, inf and negatives are refused */
    double number = strtod(value, &end);
    if (*value == '\0' || *end != '\0' || errno == ERANGE || !isfinite(number) || number < 0) {
      fprintf(stderr, "mtf generate: bad value '%s' for --temperature: give a finite number >= 0 (0 = greedy)\n\n",
              value);
      return MTF_EXIT_USAGE;
    }
    generate->temperature = number;
    return MTF_EXIT_OK;
  }
  /* integers: decimal digits only (no sign, no exponent), within each option's range */
  unsigned long long number = value[0] >= '0' && value[0] <= '9' ? strtoull(value, &end, 10) : 0;
  unsigned long long most = opt == 'n' ? (unsigned long long)MTF_GENERATE_MAX_NEW : opt == 'k' ? (unsigned long long)INT32_MAX
                                                                                                : UINT64_MAX;
  if (!(value[0] >= '0' && value[0] <= '9') || *end != '\0' || errno == ERANGE || number > most) {
    fprintf(stderr, "mtf generate: bad value '%s' for --%s: give an integer from 0 to %llu\n\n", value, name, most);
    return MTF_EXIT_USAGE;
  }
  if (opt == 'n') generate->max_new = (int64_t)number;
  if (opt == 'k') generate->top_k = (int64_t)number;
  if (opt == 'S') generate->seed = (uint64_t)number;
  return MTF_EXIT_OK;
}

static int generate_body(const mtf_config *cfg, void *ctx, mtf_error *err) {
  mtf_run_warn_layout_model("generate", cfg);
  return mtf_generate_run(cfg, ctx, err);
}

int mtf_cmd_generate(int argc, char **argv) {
  static const struct option options[] = {
      {"checkpoint", required_argument, 0, 'c'}, {"prompt", required_argument, 0, 'p'},
      {"max-new", required_argument, 0, 'n'},    {"temperature", required_argument, 0, 't'},
      {"top-k", required_argument, 0, 'k'},      {"seed", required_argument, 0, 'S'},
      {"prompt-ids", required_argument, 0, 'P'}, {"ids", no_argument, 0, 'I'},
      {0, 0, 0, 0}};
  mtf_generate_options generate = {.max_new = 200, .temperature = 1.0, .top_k = 0, .seed = 1};
  const mtf_run_command command = {"generate", generate_usage, options, generate_option, &generate};
  mtf_run_args args;
  int status = mtf_run_args_parse(argc, argv, &command, &args);
  if (status) return status == MTF_RUN_ARGS_HELP ? MTF_EXIT_OK : status;
  if (!generate.prompt == !generate.prompt_ids) {
    fprintf(stderr, generate.prompt ? "mtf generate: give --prompt or --prompt-ids, not both\n\n"
                                    : "mtf generate: --prompt is required (it may be empty: --prompt ''), or "
                                      "--prompt-ids IDS\n\n");
    generate_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  return mtf_run_mpi("generate", &argc, &argv, &args, generate_body, &generate);
}
