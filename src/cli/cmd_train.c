/* `mtf train`, `mtf eval`, `mtf generate` and `mtf plan`: the config is read on rank 0 (with --set/--mesh/--layout
 * overrides) and broadcast; a bad config fails on every rank with rank 0's message. */
#define _GNU_SOURCE
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "lower/plan.h"
#include "run/generate.h"
#include "run/program.h"
#include "run/train.h"

#define MAX_SETS 64

typedef struct common_args {
  const char *config_path;
  const char *sets[MAX_SETS];
  int n_sets;
  const char *mesh, *layout;
  int json;
  const char *resume_from; /* train --from */
  int fresh;               /* train --fresh */
  const char *checkpoint;  /* eval and generate --checkpoint */
  mtf_generate_options generate;
} common_args;

static void usage(FILE *out, const char *command) {
  int train = strcmp(command, "train") == 0, eval = strcmp(command, "eval") == 0,
      generate = strcmp(command, "generate") == 0;
  fprintf(out, "usage: %s%s CONFIG [--set key.path=value]... [--mesh SHAPE] [--layout RULES]%s%s\n",
          strcmp(command, "plan") == 0 ? "mtf " : "mpiexec -n N mtf ", command, train || generate ? "" : " [--json]",
          train ? " [--from PATH | --fresh]"
          : eval ? " [--checkpoint PATH]"
          : generate ? "\n           [--checkpoint PATH] --prompt TEXT [--max-new N] [--temperature T] [--top-k K] [--seed S]"
                     : "");
  fprintf(out,
          "\n"
          "  CONFIG               a YAML config (see configs/ and the README's config reference)\n"
          "  --set key.path=value override one key, e.g. --set train.steps=50 (repeatable)\n"
          "  --mesh SHAPE         override mesh.shape, e.g. 'b:2;m:2'\n"
          "  --layout RULES       override mesh.layout, e.g. 'batch:b;d_ff:m;heads:m;vocab:m'\n");
  if (!train && !generate) fprintf(out, "  --json               print the result as JSON\n");
  if (generate)
    fprintf(out, "  --checkpoint PATH    the checkpoint to sample from (default: RUN_DIR/checkpoints' latest good one)\n"
                 "  --prompt TEXT        the text to continue (byte tokenizer)\n"
                 "  --max-new N          tokens to generate (default 200); stops early at end-of-text\n"
                 "  --temperature T      sampling temperature (default 1; 0 = greedy)\n"
                 "  --top-k K            sample among the K most likely tokens (default 0 = all)\n"
                 "  --seed S             sampling seed (default 1); every mesh gives the same text for one seed\n");
  if (train)
    fprintf(out, "  --from PATH          resume from this checkpoint (default: RUN_DIR/checkpoints/latest, if any)\n"
                 "  --fresh              start at step 0 even if RUN_DIR/checkpoints holds checkpoints\n"
                 "\nLogs a line every train.log_every steps and appends the same figures to RUN_DIR/metrics.jsonl.\n"
                 "Saves a checkpoint every train.checkpoint_every steps (and at the end), keeping train.keep_checkpoints\n"
                 "(docs/CHECKPOINTS.md). SIGUSR1 or SIGTERM: save a checkpoint, then stop (exit 75).\n"
                 "Exit status: 0 done, 1 error, 2 bad command line, 75 checkpointed and stopped by SIGUSR1/SIGTERM,\n"
                 "130 stopped by SIGINT (no checkpoint).\n");
  if (eval)
    fprintf(out, "  --checkpoint PATH    evaluate this checkpoint (default: RUN_DIR/checkpoints' latest good one)\n");
  if (strcmp(command, "plan") == 0)
    fprintf(out, "\nRuns in one process for any mesh size: variables with their layouts and slices, memory per rank,\n"
                 "FLOPs and bytes per collective kind per step.\n");
}

static int parse_args(int argc, char **argv, const char *command, common_args *args) {
  static const struct option options[] = {{"set", required_argument, 0, 's'}, {"mesh", required_argument, 0, 'm'},
                                          {"layout", required_argument, 0, 'l'}, {"json", no_argument, 0, 'j'},
                                          {"from", required_argument, 0, 'f'}, {"fresh", no_argument, 0, 'F'},
                                          {"checkpoint", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'},
                                          {"prompt", required_argument, 0, 'p'}, {"max-new", required_argument, 0, 'n'},
                                          {"temperature", required_argument, 0, 't'}, {"top-k", required_argument, 0, 'k'},
                                          {"seed", required_argument, 0, 'S'}, {0, 0, 0, 0}};
  memset(args, 0, sizeof *args);
  args->generate = (mtf_generate_options){.max_new = 200, .temperature = 1.0, .top_k = 0, .seed = 1};
  int generate = strcmp(command, "generate") == 0;
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
    switch (opt) {
      case 's':
        if (args->n_sets == MAX_SETS) {
          fprintf(stderr, "mtf %s: at most %d --set options\n", command, MAX_SETS);
          return MTF_EXIT_USAGE;
        }
        args->sets[args->n_sets++] = optarg;
        break;
      case 'm': args->mesh = optarg; break;
      case 'l': args->layout = optarg; break;
      case 'j':
        if (strcmp(command, "train") == 0) {
          usage(stderr, command);
          return MTF_EXIT_USAGE;
        }
        args->json = 1;
        break;
      case 'f':
      case 'F':
        if (strcmp(command, "train") != 0) {
          usage(stderr, command);
          return MTF_EXIT_USAGE;
        }
        if (opt == 'f') args->resume_from = optarg;
        else args->fresh = 1;
        break;
      case 'c':
        if (strcmp(command, "eval") != 0 && !generate) {
          usage(stderr, command);
          return MTF_EXIT_USAGE;
        }
        args->checkpoint = optarg;
        break;
      case 'p':
      case 'n':
      case 't':
      case 'k':
      case 'S': {
        char *end = NULL;
        double value = opt == 'p' ? 0 : strtod(optarg, &end);
        if (!generate || (opt != 'p' && (*optarg == '\0' || *end != '\0' || value < 0 || (opt != 't' && value != (int64_t)value)))) {
          if (generate) fprintf(stderr, "mtf generate: bad value '%s' for --%s\n\n", optarg,
                                opt == 'n' ? "max-new" : opt == 't' ? "temperature" : opt == 'k' ? "top-k" : "seed");
          usage(stderr, command);
          return MTF_EXIT_USAGE;
        }
        if (opt == 'p') args->generate.prompt = optarg;
        if (opt == 'n') args->generate.max_new = (int64_t)value;
        if (opt == 't') args->generate.temperature = value;
        if (opt == 'k') args->generate.top_k = (int64_t)value;
        if (opt == 'S') args->generate.seed = (uint64_t)value;
        break;
      }
      case 'h': usage(stdout, command); return -1;
      default: usage(stderr, command); return MTF_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "mtf %s: %s\n\n", command, optind >= argc ? "a CONFIG file is required" : "only one CONFIG file");
    usage(stderr, command);
    return MTF_EXIT_USAGE;
  }
  if (generate && !args->generate.prompt) {
    fprintf(stderr, "mtf generate: --prompt is required (it may be empty: --prompt '')\n\n");
    usage(stderr, command);
    return MTF_EXIT_USAGE;
  }
  if (args->fresh && args->resume_from) {
    fprintf(stderr, "mtf %s: --from and --fresh exclude each other\n\n", command);
    usage(stderr, command);
    return MTF_EXIT_USAGE;
  }
  args->config_path = argv[optind];
  return MTF_EXIT_OK;
}

static int load_config(const common_args *args, mtf_config *cfg, mtf_error *err) {
  mtf_config_defaults(cfg);
  MTF_CHECK(mtf_config_load_file(cfg, args->config_path, err));
  for (int i = 0; i < args->n_sets; i++) MTF_CHECK(mtf_config_set(cfg, args->sets[i], err));
  char assignment[MTF_CONFIG_PATH + 16];
  if (args->mesh) {
    snprintf(assignment, sizeof assignment, "mesh.shape=%s", args->mesh);
    MTF_CHECK(mtf_config_set(cfg, assignment, err));
  }
  if (args->layout) {
    snprintf(assignment, sizeof assignment, "mesh.layout=%s", args->layout);
    MTF_CHECK(mtf_config_set(cfg, assignment, err));
  }
  return mtf_config_validate(cfg, err);
}

/* Rank 0 reads; everyone gets its status, message and the config. */
static int load_config_collective(const common_args *args, mtf_config *cfg, mtf_error *err, int rank) {
  int rc = MTF_OK;
  mtf_error_clear(err);
  if (rank == 0) rc = load_config(args, cfg, err);
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(err->msg, sizeof err->msg, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rc == MTF_OK) MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, MPI_COMM_WORLD);
  err->code = rc;
  return rc;
}

static int run_mpi(int argc, char **argv, const char *command) {
  common_args args;
  int status = parse_args(argc, argv, command, &args);
  if (status) return status < 0 ? MTF_EXIT_OK : status;
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  int rc = load_config_collective(&args, cfg, &err, rank);
  if (rc == MTF_OK && rank == 0 && strcmp(command, "train") == 0) {
    printf("# resolved config (also saved as %s/config.yaml)\n", cfg->run_dir);
    mtf_config_print(cfg, stdout);
    fflush(stdout);
  }
  mtf_train_options options = {.resume_from = args.resume_from, .fresh = args.fresh};
  args.generate.checkpoint = args.checkpoint;
  if (rc == MTF_OK)
    rc = strcmp(command, "train") == 0  ? mtf_train_run(cfg, &options, &err)
         : strcmp(command, "eval") == 0 ? mtf_eval_run(cfg, args.json, args.checkpoint, &err)
                                        : mtf_generate_run(cfg, &args.generate, &err);
  int stopped = rc == MTF_RUN_INTERRUPTED || rc == MTF_RUN_PREEMPTED;
  if (rc != MTF_OK && rank == 0) fprintf(stderr, stopped ? "mtf %s: %s\n" : "mtf %s: error: %s\n", command, err.msg);
  free(cfg);
  MPI_Finalize();
  return rc == MTF_OK ? MTF_EXIT_OK : stopped ? rc : MTF_EXIT_FAILURE;
}

int mtf_cmd_train(int argc, char **argv) { return run_mpi(argc, argv, "train"); }
int mtf_cmd_eval(int argc, char **argv) { return run_mpi(argc, argv, "eval"); }
int mtf_cmd_generate(int argc, char **argv) { return run_mpi(argc, argv, "generate"); }

static void print_plan(const mtf_config *cfg, const mtf_program *p, int json) {
  const mtf_plan_stats *stats = mtf_plan_get_stats(p->train_plan);
  int64_t param_bytes, slot_bytes;
  mtf_program_variable_bytes(p, &param_bytes, &slot_bytes);
  const mtf_graph *g = p->graph;
  char mesh_text[MTF_SHAPE_STR_MAX], shape_text[MTF_SHAPE_STR_MAX], slice_text[MTF_SHAPE_STR_MAX];
  mtf_shape_format(&cfg->mesh_shape, mesh_text, sizeof mesh_text);
  if (json) {
    printf("{\"mesh\": \"%s\", \"ranks\": %d, \"layout\": \"%s\", \"variables\": [", mesh_text,
           mtf_mesh_size(&cfg->mesh_shape), cfg->mesh_layout);
  } else {
    printf("plan: mesh %s (%d ranks), layout '%s'\n", mesh_text, mtf_mesh_size(&cfg->mesh_shape), cfg->mesh_layout);
    printf("%-40s %-36s %-14s %s\n", "variable", "shape", "split over", "slice per rank");
  }
  int first = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    const mtf_tensor_layout *layout = mtf_plan_layout(p->train_plan, i);
    if (g->nodes[i].kind != MTF_OP_VARIABLE || !layout) continue;
    mtf_shape slice = mtf_layout_slice_shape(layout, &cfg->mesh_shape);
    char axes[64];
    mtf_mesh_axis_set_format(&cfg->mesh_shape, mtf_layout_split_axes(layout), axes, sizeof axes);
    mtf_shape_format(&g->nodes[i].shape, shape_text, sizeof shape_text);
    mtf_shape_format(&slice, slice_text, sizeof slice_text);
    if (json) {
      printf("%s\n  {\"name\": \"%s\", \"shape\": \"%s\", \"dims\": [", first ? "" : ",", g->nodes[i].name, shape_text);
      for (int d = 0; d < g->nodes[i].shape.rank; d++) printf("%s\"%s\"", d ? ", " : "", g->nodes[i].shape.dims[d].name);
      printf("], \"sizes\": [");
      for (int d = 0; d < g->nodes[i].shape.rank; d++) printf("%s%lld", d ? ", " : "", (long long)g->nodes[i].shape.dims[d].size);
      printf("], \"split_over\": \"%s\", \"slice\": \"%s\"}", axes, slice_text);
    } else {
      printf("%-40s %-36s %-14s %s\n", g->nodes[i].name, shape_text, axes, slice_text);
    }
    first = 0;
  }
  if (json) {
    printf("\n], \"per_rank_bytes\": {\"parameters\": %lld, \"optimizer_state\": %lld, \"activations_peak\": %lld},\n",
           (long long)param_bytes, (long long)slot_bytes, (long long)stats->peak_bytes);
    printf(" \"flops_per_step\": %lld, \"collectives\": {", (long long)stats->flops);
    for (int k = 0; k < MTF_COLL_KINDS; k++)
      printf("%s\"%s\": {\"calls\": %lld, \"bytes\": %lld}", k ? ", " : "", mtf_collective_name((mtf_collective_kind)k),
             (long long)stats->comm_calls[k], (long long)stats->comm_bytes[k]);
    printf("}}\n");
    return;
  }
  printf("\nper rank: parameters %.2f MiB, optimizer state %.2f MiB, activations (planned peak) %.2f MiB, total %.2f MiB\n",
         param_bytes / 1048576.0, slot_bytes / 1048576.0, stats->peak_bytes / 1048576.0,
         (param_bytes + slot_bytes + stats->peak_bytes) / 1048576.0);
  printf("per rank per step: %.3f GFLOP", stats->flops / 1e9);
  for (int k = 0; k < MTF_COLL_KINDS; k++)
    if (stats->comm_calls[k])
      printf(", %s %lld calls %.2f MiB sent", mtf_collective_name((mtf_collective_kind)k), (long long)stats->comm_calls[k],
             stats->comm_bytes[k] / 1048576.0);
  printf("\n");
}

int mtf_cmd_plan(int argc, char **argv) {
  common_args args;
  int status = parse_args(argc, argv, "plan", &args);
  if (status) return status < 0 ? MTF_EXIT_OK : status;
  mtf_config *cfg = calloc(1, sizeof *cfg);
  mtf_error err;
  mtf_program program;
  int rc = load_config(&args, cfg, &err);
  if (rc == MTF_OK) rc = mtf_program_build(cfg, 0, &program, &err);
  if (rc == MTF_OK) {
    print_plan(cfg, &program, args.json);
    mtf_program_free(&program);
  } else {
    fprintf(stderr, "mtf plan: error: %s\n", err.msg);
  }
  free(cfg);
  return rc == MTF_OK ? MTF_EXIT_OK : MTF_EXIT_FAILURE;
}
