/* `mtf data`: make token shards (prepare, synth), look at them (inspect), and read them the way training
 * does on a mesh (check, an MPI job). The format and the loader are in src/io; docs/DATA.md describes
 * both. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/world.h"
#include "core/clock.h"
#include "io/dataset.h"
#include "io/decode_table.h"
#include "io/loader.h"
#include "io/prepare.h"
#include "io/shard_sink.h"
#include "io/segments.h"
#include "io/synth.h"
#include "io/tokenize.h"

static void data_usage(FILE *out) {
  fprintf(out,
          "usage: mtf data prepare --input PATH [--input PATH...] --output DIR [--tokenizer bytes]\n"
          "                        [--shard-tokens N] [--val-fraction F] [--force]\n"
          "       mtf data synth --task copy|reverse|sort|add --output DIR [--examples N] [--length T]\n"
          "                      [--seed S] [--shard-tokens N] [--val-fraction F] [--force]\n"
          "                      [--pack T [--one-per-row]]\n"
          "       mtf data inspect DATA...\n"
          "       mpiexec -n N mtf data check --data DATA --batch B --length T [--mesh SHAPE] [--layout RULES]\n"
          "                      [--steps K] [--seed S] [--prefetch D] [--vocab V] [--show]\n"
          "\n"
          "Token shards are HDF5 files with a 1-D dataset 'tokens' (docs/DATA.md). DATA is a directory of\n"
          "*.h5 shards, a glob ('data/fortunes/train-*.h5') or one shard.\n"
          "\n"
          "  prepare   tokenise text files (each file is a document; directories are walked in sorted order,\n"
          "            following links) into DIR/train-00000.h5 ... and DIR/val-00000.h5 ...; the 'bytes'\n"
          "            tokenizer maps byte b to id b and ends each document with id 256 (vocabulary 384); for\n"
          "            BPE and Hugging Face tokenizers use tools/prepare_tokenized.py (docs/DATA.md)\n"
          "  synth     write a learnable synthetic task (copy, reverse, sort, add) in the same format\n"
          "  inspect   print each shard's tokens, type and attributes, and check it (every id below vocab_size, its\n"
          "            decode table too)\n"
          "  check     read K steps as training would, on a mesh (default 'b:N', layout 'batch:b')\n"
          "\n"
          "  --input PATH        a text file, a directory or a quoted glob ('corpus/*.txt'); repeat for\n"
          "                      more (no limit). Inside directories and globs, binary files, hidden entries\n"
          "                      and broken links are skipped; a file or directory reached twice is taken once\n"
          "  --output DIR        where shards go (created if missing)\n"
          "  --shard-tokens N    tokens per shard (default %lld)\n"
          "  --val-fraction F    share of documents (prepare, default 0.05) or extra examples (synth,\n"
          "                      default 0.1) written as val shards\n"
          "  --force             replace train-*/val-* shards already in DIR\n"
          "  --examples N        train examples (default 10000)     --length T   operand length (default 8)\n"
          "  --seed S            random seed (default 1)\n"
          "  --pack T            synth: whole examples packed into rows of T tokens, padding after, with a\n"
          "                      'segments' dataset of document ids (data.pack: segments; docs/DATA.md)\n"
          "  --one-per-row       with --pack: one example a row (the same documents unpacked)\n"
          "  --batch B           global batch (windows per step)   --length T   tokens per window, plus one\n"
          "  --steps K           steps to read (default 10)        --prefetch D batches read ahead (default 2)\n"
          "  --vocab V           the model's vocabulary: every token id must be below it (default: the\n"
          "                      shards' vocab_size)\n"
          "  --show              print rank 0's first row of the first batch as text\n"
          "  -h, --help          show this help\n",
          (long long)MTF_DEFAULT_SHARD_TOKENS);
}

/* Integers from the command line: bounded, so that the products made of them (examples x length, ...)
 * cannot overflow. */
static int parse_int(const char *opt, const char *text, long long min, long long max, long long *out) {
  char *end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno == ERANGE || value < min || value > max) {
    fprintf(stderr, "mtf data: --%s must be an integer from %lld to %lld, not '%s'\n", opt, min, max, text);
    return -1;
  }
  *out = value;
  return 0;
}

static int parse_fraction(const char *text, double *out) {
  char *end = NULL;
  double value = strtod(text, &end);
  if (*text == '\0' || *end != '\0' || !(value >= 0 && value < 1)) {
    fprintf(stderr, "mtf data: --val-fraction must be a number in [0, 1), not '%s'\n", text);
    return -1;
  }
  *out = value;
  return 0;
}

enum { OPT_INPUT = 256, OPT_OUTPUT, OPT_TOKENIZER, OPT_SHARD_TOKENS, OPT_VAL_FRACTION, OPT_FORCE, OPT_TASK,
       OPT_EXAMPLES, OPT_LENGTH, OPT_SEED, OPT_DATA, OPT_BATCH, OPT_MESH, OPT_LAYOUT, OPT_STEPS, OPT_PREFETCH,
       OPT_VOCAB, OPT_SHOW, OPT_PACK, OPT_ONE_PER_ROW };

static const struct option data_options[] = {
    {"input", required_argument, 0, OPT_INPUT},       {"output", required_argument, 0, OPT_OUTPUT},
    {"tokenizer", required_argument, 0, OPT_TOKENIZER}, {"shard-tokens", required_argument, 0, OPT_SHARD_TOKENS},
    {"val-fraction", required_argument, 0, OPT_VAL_FRACTION}, {"force", no_argument, 0, OPT_FORCE},
    {"task", required_argument, 0, OPT_TASK},         {"examples", required_argument, 0, OPT_EXAMPLES},
    {"length", required_argument, 0, OPT_LENGTH},     {"seed", required_argument, 0, OPT_SEED},
    {"data", required_argument, 0, OPT_DATA},         {"batch", required_argument, 0, OPT_BATCH},
    {"mesh", required_argument, 0, OPT_MESH},         {"layout", required_argument, 0, OPT_LAYOUT},
    {"steps", required_argument, 0, OPT_STEPS},       {"prefetch", required_argument, 0, OPT_PREFETCH},
    {"vocab", required_argument, 0, OPT_VOCAB},       {"show", no_argument, 0, OPT_SHOW},
    {"pack", required_argument, 0, OPT_PACK},         {"one-per-row", no_argument, 0, OPT_ONE_PER_ROW},
    {"help", no_argument, 0, 'h'},                    {0, 0, 0, 0}};

/* Everything any data subcommand accepts; each subcommand refuses what it does not use. */
typedef struct data_args {
  const char **inputs; /* room for argc: each --input takes at least one argument of the command line */
  int input_count;
  const char *output, *tokenizer, *task, *data, *mesh, *layout;
  long long shard_tokens, examples, length, seed, batch, steps, prefetch, vocab, pack;
  double val_fraction;
  int force, show, help, val_fraction_set, one_per_row;
  unsigned seen; /* bit (option - OPT_INPUT) set when given */
} data_args;

/* Fills args; args->inputs is allocated (free it, also after a failure). */
static int parse_args(int argc, char **argv, data_args *args) {
  memset(args, 0, sizeof *args);
  args->inputs = malloc(sizeof(const char *) * (size_t)argc);
  if (!args->inputs) {
    fprintf(stderr, "mtf data: out of memory reading the command line\n");
    return -1;
  }
  args->tokenizer = MTF_BYTES_TOKENIZER;
  args->shard_tokens = MTF_DEFAULT_SHARD_TOKENS;
  args->examples = 10000;
  args->seed = 1;
  args->steps = 10;
  args->prefetch = 2;
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "h", data_options, NULL)) != -1) {
    if (opt >= OPT_INPUT) args->seen |= 1u << (opt - OPT_INPUT);
    switch (opt) {
      case OPT_INPUT: args->inputs[args->input_count++] = optarg; break;
      case OPT_OUTPUT: args->output = optarg; break;
      case OPT_TOKENIZER: args->tokenizer = optarg; break;
      case OPT_TASK: args->task = optarg; break;
      case OPT_DATA: args->data = optarg; break;
      case OPT_MESH: args->mesh = optarg; break;
      case OPT_LAYOUT: args->layout = optarg; break;
      case OPT_FORCE: args->force = 1; break;
      case OPT_SHOW: args->show = 1; break;
      case OPT_ONE_PER_ROW: args->one_per_row = 1; break;
      case OPT_PACK: if (parse_int("pack", optarg, 1, 1LL << 20, &args->pack)) return -1; break;
      case OPT_VAL_FRACTION:
        if (parse_fraction(optarg, &args->val_fraction)) return -1;
        args->val_fraction_set = 1;
        break;
      case OPT_SHARD_TOKENS: if (parse_int("shard-tokens", optarg, 1, 1LL << 40, &args->shard_tokens)) return -1; break;
      case OPT_EXAMPLES: if (parse_int("examples", optarg, 1, 1LL << 32, &args->examples)) return -1; break;
      case OPT_LENGTH: if (parse_int("length", optarg, 1, 1LL << 20, &args->length)) return -1; break;
      case OPT_SEED: if (parse_int("seed", optarg, 0, 1000000000000000000LL, &args->seed)) return -1; break;
      case OPT_BATCH: if (parse_int("batch", optarg, 1, 1LL << 24, &args->batch)) return -1; break;
      case OPT_STEPS: if (parse_int("steps", optarg, 1, 1000000000000000000LL, &args->steps)) return -1; break;
      case OPT_PREFETCH: if (parse_int("prefetch", optarg, 0, 64, &args->prefetch)) return -1; break;
      case OPT_VOCAB: if (parse_int("vocab", optarg, 1, INT32_MAX, &args->vocab)) return -1; break;
      case 'h': args->help = 1; break;
      default: return -1;
    }
  }
  return 0;
}

/* Refuses options the subcommand does not take, so a typo'd combination is not silently ignored. */
static int only_options(const data_args *args, const char *sub, unsigned allowed) {
  unsigned extra = args->seen & ~allowed;
  if (!extra) return 0;
  for (int i = 0; data_options[i].name; i++)
    if (data_options[i].val >= OPT_INPUT && (extra & (1u << (data_options[i].val - OPT_INPUT)))) {
      fprintf(stderr, "mtf data %s: --%s does not apply to '%s'\n\n", sub, data_options[i].name, sub);
      return -1;
    }
  return -1;
}
#define BIT(opt) (1u << ((opt) - OPT_INPUT))

static int usage_error(const char *message) {
  if (message) fprintf(stderr, "mtf data: %s\n\n", message);
  data_usage(stderr);
  return MTF_EXIT_USAGE;
}

static int run_prepare(const data_args *args) {
  if (only_options(args, "prepare", BIT(OPT_INPUT) | BIT(OPT_OUTPUT) | BIT(OPT_TOKENIZER) | BIT(OPT_SHARD_TOKENS) |
                                        BIT(OPT_VAL_FRACTION) | BIT(OPT_FORCE)))
    return usage_error(NULL);
  if (args->input_count == 0 || !args->output) return usage_error("prepare needs --input and --output");
  mtf_prepare_options opts = {.inputs = args->inputs, .input_count = args->input_count, .output_dir = args->output,
                              .tokenizer = args->tokenizer, .shard_tokens = args->shard_tokens,
                              .val_fraction = args->val_fraction_set ? args->val_fraction : 0.05,
                              .force = args->force, .progress = 1};
  mtf_prepare_stats stats;
  mtf_error err;
  if (mtf_data_prepare(&opts, &stats, &err) != MTF_OK) {
    fprintf(stderr, "mtf data prepare: error: %s\n", err.msg);
    return MTF_EXIT_FAILURE;
  }
  char skipped[256];
  printf("prepare: %lld files (skipped: %s), %lld bytes in %.2f s\n", (long long)stats.files,
         mtf_prepare_skipped_text(&stats, skipped, sizeof skipped), (long long)stats.bytes, stats.seconds);
  printf("prepare: train %lld tokens in %d shards, val %lld tokens in %d shards, in %s (tokenizer %s, vocab %d)\n",
         (long long)stats.train_tokens, stats.train_shards, (long long)stats.val_tokens, stats.val_shards,
         args->output, args->tokenizer, MTF_BYTES_VOCAB_SIZE);
  return MTF_EXIT_OK;
}

static int run_synth(const data_args *args) {
  if (only_options(args, "synth", BIT(OPT_TASK) | BIT(OPT_OUTPUT) | BIT(OPT_EXAMPLES) | BIT(OPT_LENGTH) |
                                      BIT(OPT_SEED) | BIT(OPT_SHARD_TOKENS) | BIT(OPT_VAL_FRACTION) | BIT(OPT_FORCE) |
                                      BIT(OPT_PACK) | BIT(OPT_ONE_PER_ROW)))
    return usage_error(NULL);
  if (!args->task || !args->output) return usage_error("synth needs --task and --output");
  if (args->one_per_row && !args->pack) return usage_error("--one-per-row goes with --pack T");
  mtf_synth_options opts = {.output_dir = args->output, .examples = args->examples,
                            .length = args->length ? (int)(args->length > INT_MAX ? INT_MAX : args->length) : 8,
                            .seed = (uint64_t)args->seed, .shard_tokens = args->shard_tokens,
                            .val_fraction = args->val_fraction_set ? args->val_fraction : 0.1, .force = args->force,
                            .pack = args->pack, .one_per_row = args->one_per_row};
  mtf_synth_stats stats;
  mtf_error err;
  if (mtf_synth_task_parse(args->task, &opts.task, &err) != MTF_OK) return usage_error(err.msg);
  if (mtf_data_synth(&opts, &stats, &err) != MTF_OK) {
    fprintf(stderr, "mtf data synth: error: %s\n", err.msg);
    return MTF_EXIT_FAILURE;
  }
  char example[256];
  mtf_synth_example(opts.task, opts.length, opts.seed, 0, 0, example, sizeof example);
  printf("synth: task %s, train %lld examples (%lld tokens, %d shards), val %lld examples (%lld tokens, %d shards) "
         "in %s\n",
         args->task, (long long)stats.train_examples, (long long)stats.train_tokens, stats.train_shards,
         (long long)stats.val_examples, (long long)stats.val_tokens, stats.val_shards, args->output);
  printf("synth: first example: %s\n", example);
  return MTF_EXIT_OK;
}

/* ", segments: D documents, P padding tokens": reads and checks every id (none negative). */
static int print_segments(const char *path, int64_t count, mtf_error *err) {
  mtf_shard shard;
  MTF_CHECK(mtf_shard_open(path, &shard, err));
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(count > 0 ? count : 1));
  int rc = ids ? mtf_shard_read_segments(&shard, 0, count, ids, err)
               : mtf_error_set(err, MTF_ERR_NOMEM, "out of memory reading the segments of '%s'", path);
  mtf_shard_close(&shard);
  if (rc == MTF_OK) {
    int64_t documents = 0, padding = 0;
    for (int64_t i = 0; i < count; i++) {
      padding += ids[i] == 0;
      documents += ids[i] != 0 && (i == 0 || ids[i] != ids[i - 1]);
    }
    printf(", segments: %lld documents, %lld padding tokens", (long long)documents, (long long)padding);
  }
  free(ids);
  return rc;
}

/* Every token id of a shard in [0, vocab_size): read in blocks, the first one outside is the error (naming its
 * offset in the file). */
static int check_ids(const char *path, int64_t count, int64_t vocab, mtf_error *err) {
  enum { BLOCK = 1 << 20 };
  mtf_shard shard;
  MTF_CHECK(mtf_shard_open(path, &shard, err));
  int32_t *ids = malloc(sizeof(int32_t) * BLOCK);
  int rc = ids ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "out of memory reading the tokens of '%s'", path);
  for (int64_t at = 0; rc == MTF_OK && at < count; at += BLOCK) {
    int64_t n = count - at < BLOCK ? count - at : BLOCK;
    rc = mtf_shard_read(&shard, at, n, ids, 0, err);
    for (int64_t i = 0; rc == MTF_OK && i < n; i++)
      if (ids[i] < 0 || ids[i] >= vocab)
        rc = mtf_error_set(err, MTF_ERR_INVALID, "shard '%s': token id %d at offset %lld is outside [0, %lld), the "
                           "shard's own vocab_size: its tokens or its vocab_size attribute are wrong (make the shard "
                           "again)", path, (int)ids[i], (long long)(at + i), (long long)vocab);
  }
  free(ids);
  mtf_shard_close(&shard);
  return rc;
}

static int run_inspect(int argc, char **argv, const data_args *args) {
  if (only_options(args, "inspect", 0)) return usage_error(NULL);
  if (optind >= argc) return usage_error("inspect needs at least one DATA argument");
  int status = MTF_EXIT_OK;
  for (int a = optind; a < argc; a++) {
    mtf_dataset dataset;
    mtf_error err;
    /* Length 1: every shard with at least 2 tokens passes; the point is to list and check. */
    if (mtf_dataset_open(argv[a], 1, &dataset, &err) != MTF_OK) {
      fprintf(stderr, "mtf data inspect: error: %s\n", err.msg);
      status = MTF_EXIT_FAILURE;
      continue;
    }
    for (int i = 0; i < dataset.count; i++) {
      const mtf_shard_meta *m = &dataset.meta[i];
      printf("%s: %lld tokens, %s, vocab_size %lld, eot_id %lld, tokenizer '%s', format_version %lld", dataset.paths[i],
             (long long)m->num_tokens, m->token_bytes == 2 ? "uint16" : "int32", (long long)m->vocab_size,
             (long long)m->eot_id, m->tokenizer, (long long)m->format_version);
      if (m->decode_ids > 0)
        printf(", decode table %lld ids, %lld bytes", (long long)m->decode_ids, (long long)m->decode_bytes);
      if (m->has_segments && print_segments(dataset.paths[i], m->num_tokens, &err) != MTF_OK) {
        fprintf(stderr, "mtf data inspect: error: %s\n", err.msg);
        status = MTF_EXIT_FAILURE;
      }
      printf("\n");
      if (check_ids(dataset.paths[i], m->num_tokens, m->vocab_size, &err) != MTF_OK) {
        fprintf(stderr, "mtf data inspect: error: %s\n", err.msg);
        status = MTF_EXIT_FAILURE;
      }
      mtf_decode_table table;
      if (m->decode_ids > 0 && mtf_shard_read_decode_table(dataset.paths[i], &table, &err) != MTF_OK) {
        /* the shapes were checked on opening; this reads and checks the contents */
        fprintf(stderr, "mtf data inspect: error: %s\n", err.msg);
        status = MTF_EXIT_FAILURE;
      } else if (m->decode_ids > 0) {
        mtf_decode_table_free(&table);
      }
    }
    printf("%s: %d shards, %lld tokens\n", argv[a], dataset.count, (long long)dataset.tokens);
    mtf_dataset_close(&dataset);
  }
  return status;
}

/* Prints a row as text: byte ids as characters (control bytes escaped), other ids as <id>. */
static void print_row(const int32_t *row, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    int32_t id = row[i];
    if (id == '\n') printf("\\n");
    else if (id >= 32 && id < 127) putchar((int)id);
    else printf("<%d>", id);
  }
  putchar('\n');
}

static int run_check(const data_args *args, int argc, char **argv) {
  if (only_options(args, "check", BIT(OPT_DATA) | BIT(OPT_BATCH) | BIT(OPT_LENGTH) | BIT(OPT_MESH) | BIT(OPT_LAYOUT) |
                                      BIT(OPT_STEPS) | BIT(OPT_SEED) | BIT(OPT_PREFETCH) | BIT(OPT_VOCAB) |
                                      BIT(OPT_SHOW)))
    return usage_error(NULL);
  if (!args->data || !args->batch || !args->length) return usage_error("check needs --data, --batch and --length");

  if (mtf_world_init(&argc, &argv) != MTF_OK) {
    fprintf(stderr, "mtf data check: error: MPI could not be started\n");
    return MTF_EXIT_FAILURE;
  }
  int world_rank = mtf_world_rank(), world_size = mtf_world_size();
  char default_mesh[32];
  snprintf(default_mesh, sizeof default_mesh, "b:%d", world_size);
  mtf_shape mesh;
  mtf_layout_rules rules;
  mtf_comm *comm = NULL;
  mtf_loader *loader = NULL;
  mtf_error err;
  /* Parsing and the job size are the same on every rank, so every rank fails alike here. */
  if (mtf_mesh_parse(args->mesh ? args->mesh : default_mesh, &mesh, &err) ||
      mtf_layout_rules_parse(args->layout ? args->layout : "batch:b", &rules, &err) ||
      mtf_comm_world_create(&mesh, &comm, &err)) {
    if (world_rank == 0) fprintf(stderr, "mtf data check: error: %s\n", err.msg);
    mtf_world_finalize();
    return MTF_EXIT_FAILURE;
  }
  mtf_loader_options opts = {.data = args->data, .batch_size = args->batch, .length = args->length,
                             .seed = (uint64_t)args->seed, .prefetch = (int)args->prefetch,
                             .vocab_limit = args->vocab, .comm = comm};
  int rc = mtf_loader_open(&opts, &mesh, &rules, comm->rank, &loader, &err);
  int32_t *tokens = NULL;
  double start = mtf_now_seconds();
  if (rc == MTF_OK) {
    int64_t local = mtf_loader_local_batch(loader);
    tokens = malloc(sizeof(int32_t) * (size_t)(local * (args->length + 1)));
    if (comm->rank == 0) {
      char mesh_text[MTF_SHAPE_STR_MAX];
      printf("data check: %s: %lld windows of %lld tokens, %lld steps per epoch; mesh %s, local batch %lld of %lld\n",
             args->data, (long long)mtf_loader_windows(loader), args->length + 1,
             (long long)mtf_loader_steps_per_epoch(loader), mtf_shape_format(&mesh, mesh_text, sizeof mesh_text),
             (long long)local, args->batch);
    }
    for (long long step = 0; rc == MTF_OK && step < args->steps; step++) {
      rc = mtf_loader_next(loader, tokens, &err);
      if (rc == MTF_OK && step == 0 && args->show && comm->rank == 0) print_row(tokens, args->length + 1);
    }
  }
  double seconds = mtf_now_seconds() - start;
  if (rc == MTF_OK && comm->rank == 0) {
    mtf_loader_cursor cursor = mtf_loader_cursor_get(loader);
    double tokens_read = (double)args->steps * (double)mtf_loader_local_batch(loader) * (double)(args->length + 1);
    printf("data check: ok: %lld steps, cursor epoch %lld position %lld, %.3g tokens/s on rank 0\n", args->steps,
           (long long)cursor.epoch, (long long)cursor.position, seconds > 0 ? tokens_read / seconds : 0.0);
  }
  /* Open and next agree across ranks (the loader's comm), so every rank gets here with the same rc and
   * the message is printed once. */
  if (rc != MTF_OK && comm->rank == 0) fprintf(stderr, "mtf data check: error: %s\n", err.msg);
  free(tokens);
  mtf_loader_close(loader);
  mtf_comm_destroy(comm);
  mtf_world_finalize();
  return rc == MTF_OK ? MTF_EXIT_OK : MTF_EXIT_FAILURE;
}

static int run_subcommand(const char *sub, int argc, char **argv, data_args *args) {
  if (parse_args(argc - 1, argv + 1, args) != 0) return usage_error(NULL);
  if (args->help) {
    data_usage(stdout);
    return MTF_EXIT_OK;
  }
  if (strcmp(sub, "inspect") != 0 && optind < argc - 1) return usage_error("unexpected argument");
  if (strcmp(sub, "prepare") == 0) return run_prepare(args);
  if (strcmp(sub, "synth") == 0) return run_synth(args);
  if (strcmp(sub, "inspect") == 0) return run_inspect(argc - 1, argv + 1, args);
  if (strcmp(sub, "check") == 0) return run_check(args, argc, argv);
  fprintf(stderr, "mtf data: unknown command '%s'\n\n", sub);
  data_usage(stderr);
  return MTF_EXIT_USAGE;
}

int mtf_cmd_data(int argc, char **argv) {
  if (argc < 2) return usage_error("which data command? prepare, synth, inspect or check");
  const char *sub = argv[1];
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
    data_usage(stdout);
    return MTF_EXIT_OK;
  }
  data_args args = {0};
  int status = run_subcommand(sub, argc, argv, &args);
  free(args.inputs);
  return status;
}
