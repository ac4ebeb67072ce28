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
  fprintf(out, "usage: mpiexec -n N mtf generate [CONFIG] [--set key.path=value]... [--mesh SHAPE] [--layout RULES]\n"
               "           [--checkpoint PATH] (--prompt TEXT... | --prompts FILE | --prompt-ids IDS) [--ids] [--vocab FILE]\n"
               "           [--max-new N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--beam N]\n"
               "           [--length-penalty A] [--no-cache] [--stream] [--json]\n"
               "\n");
  mtf_run_args_usage(out);
  fprintf(out, "                       (generate: without CONFIG, the config stored in --checkpoint's file, with\n"
               "                       --set, --mesh and --layout applied on top)\n"
               "  --checkpoint PATH    the checkpoint to sample from (a file, a checkpoints/latest, or a directory: its\n"
               "                       latest; default: RUN_DIR/checkpoints' latest good one)\n"
               "  --prompt TEXT        a text to continue (repeat for a batch), encoded with the checkpoint's tokenizer:\n"
               "                       bytes, or greedy longest match over its decode table (see docs/DATA.md); empty:\n"
               "                       start a new document at end-of-text\n"
               "  --prompts FILE       more prompts, one per line (with --ids: a JSON array of ids per line); all run\n"
               "                       in one batch, each row giving what it gives alone; one output line each\n"
               "                       (its newlines written as \\n, backslashes as \\\\)\n"
               "  --prompt-ids IDS     the prompt as token ids, separated by spaces or commas (any tokenizer)\n"
               "  --ids                prompts (--prompt, --prompts) and output as JSON arrays of token ids, one line\n"
               "                       per prompt: the output is valid input (ids are printed as text automatically\n"
               "                       when the tokenizer has no decode table)\n"
               "  --vocab FILE         a vocabulary file, one token per line (id = line - 1): prompts are split at\n"
               "                       whitespace and each word must be a line; output tokens are joined by spaces\n"
               "  --max-new N          tokens to generate (default 200, at most 16777216; 0: print the prompts); stops\n"
               "                       early at the checkpoint's end-of-text id\n"
               "  --temperature T      sampling temperature (default 1; 0 = greedy)\n"
               "  --top-k K            sample among the K most likely tokens (default 0 = all)\n"
               "  --top-p P            sample among the most likely tokens holding probability P (default 1 = all)\n"
               "  --seed S             sampling seed (default 1); every mesh gives the same text for one seed\n"
               "  --beam N             beam search with N beams (instead of sampling), stopping at end-of-text\n"
               "  --length-penalty A   beam scores are log-probability / ((5 + length) / 6)^A (default 0.6)\n"
               "  --no-cache           re-run the whole window per token (the reference for the cached path)\n"
               "  --stream             with --json: a JSON line per token as it comes (one prompt's text streams anyway)\n"
               "  --json               one JSON object per prompt: ids, log-probs, per-step times\n"
               "  -h, --help           show this help\n"
               "The header lines (backend:, generate:) and warnings go to stderr: stdout carries only the output.\n");
}

static int generate_option(void *ctx, int opt, const char *value) {
  mtf_generate_options *generate = ctx;
  if (opt == 'c') {
    generate->checkpoint = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'p') {
    if (generate->n_prompts == MTF_GENERATE_MAX_PROMPTS) {
      fprintf(stderr, "mtf generate: more than %d --prompt options: put them in a file (--prompts FILE)\n\n",
              MTF_GENERATE_MAX_PROMPTS);
      return MTF_EXIT_USAGE;
    }
    generate->prompts[generate->n_prompts++] = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'F') {
    generate->prompts_file = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'V') {
    generate->vocab_file = value;
    return MTF_EXIT_OK;
  }
  if (opt == 'N' || opt == 'R' || opt == 'J') {
    *(opt == 'N' ? &generate->no_cache : opt == 'R' ? &generate->stream : &generate->json) = 1;
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
  const char *name = opt == 'n' ? "max-new" : opt == 't' ? "temperature" : opt == 'k' ? "top-k" : opt == 'B' ? "beam"
                                                                                              : "seed";
  char *end = NULL;
  errno = 0;
  if (opt == 't' || opt == 'T' || opt == 'L') { /* a finite number >= 0: nan, inf and negatives are refused */
    double number = strtod(value, &end);
    const char *real = opt == 't' ? "temperature" : opt == 'T' ? "top-p" : "length-penalty";
    int bad = *value == '\0' || *end != '\0' || errno == ERANGE || !isfinite(number) || number < 0 ||
              (opt == 'T' && !(number > 0 && number <= 1));
    if (bad) {
      fprintf(stderr, "mtf generate: bad value '%s' for --%s: give a finite number %s\n\n", value, real,
              opt == 't' ? ">= 0 (0 = greedy)" : opt == 'T' ? "in (0, 1]" : ">= 0");
      return MTF_EXIT_USAGE;
    }
    *(opt == 't' ? &generate->temperature : opt == 'T' ? &generate->top_p : &generate->length_penalty) = number;
    return MTF_EXIT_OK;
  }
  /* integers: decimal digits only (no sign, no exponent), within each option's range */
  unsigned long long number = value[0] >= '0' && value[0] <= '9' ? strtoull(value, &end, 10) : 0;
  unsigned long long most = opt == 'n'   ? (unsigned long long)MTF_GENERATE_MAX_NEW
                            : opt == 'k' ? (unsigned long long)INT32_MAX
                            : opt == 'B' ? 64ULL
                                         : UINT64_MAX;
  if (!(value[0] >= '0' && value[0] <= '9') || *end != '\0' || errno == ERANGE || number > most) {
    fprintf(stderr, "mtf generate: bad value '%s' for --%s: give an integer from 0 to %llu\n\n", value, name, most);
    return MTF_EXIT_USAGE;
  }
  if (opt == 'n') generate->max_new = (int64_t)number;
  if (opt == 'k') generate->top_k = (int64_t)number;
  if (opt == 'S') generate->seed = (uint64_t)number;
  if (opt == 'B') generate->beam = (int)number;
  return MTF_EXIT_OK;
}

static int generate_body(const mtf_config *cfg, void *ctx, mtf_error *err) {
  mtf_generate_options *generate = ctx;
  MTF_CHECK(mtf_run_resolve_checkpoint(&generate->checkpoint, err));
  MTF_CHECK(mtf_run_check_layout_model(cfg, err));
  return mtf_generate_run(cfg, ctx, err);
}

int mtf_cmd_generate(int argc, char **argv) {
  static const struct option options[] = {
      {"checkpoint", required_argument, 0, 'c'}, {"prompt", required_argument, 0, 'p'},
      {"max-new", required_argument, 0, 'n'},    {"temperature", required_argument, 0, 't'},
      {"top-k", required_argument, 0, 'k'},      {"seed", required_argument, 0, 'S'},
      {"prompt-ids", required_argument, 0, 'P'}, {"ids", no_argument, 0, 'I'},
      {"prompts", required_argument, 0, 'F'},    {"vocab", required_argument, 0, 'V'},
      {"top-p", required_argument, 0, 'T'},      {"beam", required_argument, 0, 'B'},
      {"length-penalty", required_argument, 0, 'L'}, {"no-cache", no_argument, 0, 'N'},
      {"stream", no_argument, 0, 'R'},           {"json", no_argument, 0, 'J'},
      {0, 0, 0, 0}};
  static mtf_generate_options generate = {.max_new = 200, .temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 1,
                                          .length_penalty = 0.6};
  const mtf_run_command command = {"generate", generate_usage, options, generate_option, &generate, 1};
  mtf_run_args args;
  int status = mtf_run_args_parse(argc, argv, &command, &args);
  if (status) return status == MTF_RUN_ARGS_HELP ? MTF_EXIT_OK : status;
  if (!args.config_path && !generate.checkpoint) {
    fprintf(stderr, "mtf generate: give a CONFIG, or --checkpoint PATH (whose stored config is then used)\n\n");
    generate_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  args.config_checkpoint = generate.checkpoint;
  int texts = generate.n_prompts > 0 || generate.prompts_file;
  if (texts == !!generate.prompt_ids) {
    fprintf(stderr, texts ? "mtf generate: give --prompt/--prompts or --prompt-ids, not both\n\n"
                          : "mtf generate: --prompt is required (it may be empty: --prompt ''), or --prompts FILE, or "
                            "--prompt-ids IDS\n\n");
    generate_usage(stderr);
    return MTF_EXIT_USAGE;
  }
  return mtf_run_mpi("generate", &argc, &argv, &args, generate_body, &generate);
}
