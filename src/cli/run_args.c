/* The command line and config shared by train, eval, generate and plan (run_args.h). The config is read on
 * rank 0 (with --set/--mesh/--layout overrides) and broadcast; a bad config fails on every rank with rank
 * 0's message. */
#define _GNU_SOURCE
#include "cli/run_args.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "cli/cli.h"
#include "comm/world.h"
#include "model/transformer.h"
#include "run/train.h"

void mtf_run_args_usage(FILE *out) {
  fprintf(out,
          "  CONFIG               a YAML config (see configs/ and the README's config reference)\n"
          "  --set key.path=value override one key, e.g. --set train.steps=50 (repeatable)\n"
          "  --mesh SHAPE         override mesh.shape, e.g. 'b:2;m:2'\n"
          "  --layout RULES       override mesh.layout, e.g. 'batch:b;d_ff:m;heads:m;vocab:m'\n"
          "                       (a rule naming a dimension the model lacks or an axis the mesh lacks is\n"
          "                       an error)\n");
}

static int usage_error(const mtf_run_command *command) {
  command->usage(stderr);
  return MTF_EXIT_USAGE;
}

int mtf_run_args_parse(int argc, char **argv, const mtf_run_command *command, mtf_run_args *args) {
  static const struct option shared[] = {{"set", required_argument, 0, 's'},
                                         {"mesh", required_argument, 0, 'm'},
                                         {"layout", required_argument, 0, 'l'},
                                         {"help", no_argument, 0, 'h'}};
  enum { SHARED = sizeof shared / sizeof shared[0] };
  struct option options[SHARED + MTF_RUN_MAX_OPTIONS + 1];
  memset(options, 0, sizeof options);
  memcpy(options, shared, sizeof shared);
  int n = SHARED;
  for (const struct option *o = command->options; o && o->name && n < SHARED + MTF_RUN_MAX_OPTIONS; o++)
    options[n++] = *o;

  memset(args, 0, sizeof *args);
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
    switch (opt) {
      case 's':
        if (args->n_sets == MTF_RUN_MAX_SETS) {
          fprintf(stderr, "mtf %s: at most %d --set options\n", command->name, MTF_RUN_MAX_SETS);
          return MTF_EXIT_USAGE;
        }
        args->sets[args->n_sets++] = optarg;
        break;
      case 'm': args->mesh = optarg; break;
      case 'l': args->layout = optarg; break;
      case 'h': command->usage(stdout); return MTF_RUN_ARGS_HELP;
      case '?': return usage_error(command);
      default: {
        int status = command->handle ? command->handle(command->ctx, opt, optarg) : MTF_EXIT_USAGE;
        if (status != MTF_EXIT_OK) return usage_error(command);
      }
    }
  }
  if (optind == argc && command->config_from_checkpoint) return MTF_EXIT_OK; /* the command says which */
  if (optind != argc - 1) {
    fprintf(stderr, "mtf %s: %s\n\n", command->name, optind >= argc ? "a CONFIG file is required" : "only one CONFIG file");
    return usage_error(command);
  }
  args->config_path = argv[optind];
  return MTF_EXIT_OK;
}

int mtf_run_config_load(const mtf_run_args *args, mtf_config *cfg, mtf_error *err) {
  mtf_config_defaults(cfg);
  if (args->config_path) {
    MTF_CHECK(mtf_config_load_file(cfg, args->config_path, err));
  } else {
    char file[MTF_CKPT_PATH_MAX], source[MTF_CONFIG_PATH];
    char *text = NULL;
    MTF_CHECK(mtf_ckpt_resolve(args->config_checkpoint, file, sizeof file, err));
    MTF_CHECK(mtf_ckpt_read_config(file, &text, err));
    snprintf(source, sizeof source, "%.470s (its stored config)", file); /* a message's name, not a path */
    int rc = mtf_config_load_text(cfg, text, strlen(text), source, err);
    free(text);
    MTF_CHECK(rc);
  }
  for (int i = 0; i < args->n_sets; i++) MTF_CHECK(mtf_config_set(cfg, args->sets[i], err));
  char assignment[MTF_CONFIG_PATH + 16];
  if (args->mesh) {
    snprintf(assignment, sizeof assignment, "mesh.shape=%s", args->mesh);
    MTF_CHECK(mtf_config_set(cfg, assignment, err));
  }
  if (args->layout) {
    snprintf(assignment, sizeof assignment, "mesh.layout=%s", args->layout);
    MTF_CHECK(mtf_config_set(cfg, assignment, err));
    snprintf(cfg->layout_origin, sizeof cfg->layout_origin, "--layout");
  }
  return mtf_config_validate(cfg, err);
}

/* Rank 0's status and message to every rank, and its result (bytes of it) where it succeeded: what rank 0
 * alone worked out (from files every rank would read alike) becomes every rank's answer. */
static int share_from_rank0(int rc, void *result, size_t bytes, const char *what, mtf_error *err) {
  mtf_error comm_err;
  if (mtf_world_broadcast(&rc, sizeof rc, 0, &comm_err) || mtf_world_broadcast(err->msg, sizeof err->msg, 0, &comm_err) ||
      (rc == MTF_OK && mtf_world_broadcast(result, bytes, 0, &comm_err)))
    mtf_world_abort(MTF_EXIT_FAILURE, what, &comm_err);
  err->code = rc;
  return rc;
}

int mtf_run_config_load_collective(const mtf_run_args *args, mtf_config *cfg, mtf_error *err) {
  mtf_error_clear(err);
  int rc = mtf_world_rank() == 0 ? mtf_run_config_load(args, cfg, err) : MTF_OK;
  return share_from_rank0(rc, cfg, sizeof *cfg, "sharing the config", err);
}

int mtf_run_resolve_checkpoint(const char **path, mtf_error *err) {
  static char file[MTF_CKPT_PATH_MAX]; /* one command, one checkpoint option */
  if (!*path) return MTF_OK;
  /* Rank 0 reads the directory and `latest` once for all: ranks reading them apart could disagree (a run
   * writing checkpoints there) or one fail alone, and every rank must open the same file. */
  int rc = mtf_world_rank() == 0 ? mtf_ckpt_resolve(*path, file, sizeof file, err) : MTF_OK;
  MTF_CHECK(share_from_rank0(rc, file, sizeof file, "sharing the checkpoint path", err));
  *path = file;
  return MTF_OK;
}

int mtf_run_check_layout(const mtf_graph *g, const mtf_config *cfg, mtf_error *err) {
  const char *names[256];
  int n_names = mtf_graph_dim_names(g, names, (int)(sizeof names / sizeof names[0]));
  char problems[MTF_ERROR_MSG_MAX] = "", dims[512] = "", axes[256] = "";
  size_t used = 0;
  for (int k = 0, at = 0; k < n_names && at < (int)sizeof dims; k++) /* not the engine's own ("_attn") */
    if (names[k][0] != '_') at += snprintf(dims + at, sizeof dims - (size_t)at, "%s%s", at ? ", " : "", names[k]);
  mtf_mesh_axis_names(&cfg->mesh_shape, axes, sizeof axes);
  int bad = 0;
  for (int r = 0; r < cfg->layout.count; r++) {
    const mtf_layout_rule *rule = &cfg->layout.rules[r];
    int known = 0;
    for (int k = 0; k < n_names && !known; k++) known = strcmp(names[k], rule->dim) == 0;
    int on_mesh = mtf_shape_has(&cfg->mesh_shape, rule->axis);
    if (known && on_mesh) continue;
    const char *hint = known ? NULL : mtf_closest_name(rule->dim, names, n_names);
    char what[400];
    if (!known)
      snprintf(what, sizeof what, "rule '%s:%s': no tensor of the model has a dimension '%s'%s%s%s", rule->dim,
               rule->axis, rule->dim, hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
    else
      snprintf(what, sizeof what, "rule '%s:%s': the mesh has no axis '%s' (its axes: %s)", rule->dim, rule->axis,
               rule->axis, axes);
    if (used < sizeof problems)
      used += (size_t)snprintf(problems + used, sizeof problems - used, "%s%s", bad ? "; " : "", what);
    bad++;
  }
  if (!bad) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_LAYOUT,
                       "%s: mesh.layout '%s': %s. The model's dimensions: %s. Fix the rule%s or drop %s (lowering "
                       "would ignore %s and split the model otherwise than written)",
                       cfg->layout_origin[0] ? cfg->layout_origin : cfg->source, cfg->mesh_layout, problems, dims,
                       bad > 1 ? "s" : "", bad > 1 ? "them" : "it", bad > 1 ? "them" : "it");
}

int mtf_run_check_layout_model(const mtf_config *cfg, mtf_error *err) {
  if (cfg->layout.count == 0) return MTF_OK;
  mtf_graph *g = mtf_graph_create((uint64_t)cfg->train.seed);
  if (!g) return MTF_OK;
  mtf_transformer model;
  mtf_error build_err;
  memset(&model, 0, sizeof model);
  int rc = MTF_OK;
  if (mtf_transformer_build(g, &cfg->model, cfg->train.batch, 0.0f, &model, &build_err) == MTF_OK)
    rc = mtf_run_check_layout(g, cfg, err);
  mtf_transformer_free(&model);
  mtf_graph_destroy(g);
  return rc;
}

int mtf_run_mpi(const char *command, int *argc, char ***argv, const mtf_run_args *args, mtf_run_body body, void *ctx) {
  if (mtf_world_init(argc, argv) != MTF_OK) {
    fprintf(stderr, "mtf %s: error: MPI could not be started\n", command);
    return MTF_EXIT_FAILURE;
  }
  mtf_config *cfg = calloc(1, sizeof *cfg);
  if (!cfg) mtf_world_abort(MTF_EXIT_FAILURE, "out of memory for the config", NULL);
  mtf_error err;
  int rc = mtf_run_config_load_collective(args, cfg, &err);
  if (rc == MTF_OK) rc = body(cfg, ctx, &err);
  int stopped = rc == MTF_RUN_INTERRUPTED || rc == MTF_RUN_PREEMPTED || rc == MTF_RUN_NOTHING_TO_TRAIN;
  if (rc != MTF_OK && mtf_world_rank() == 0)
    fprintf(stderr, stopped ? "mtf %s: %s\n" : "mtf %s: error: %s\n", command, err.msg);
  free(cfg);
  mtf_world_finalize();
  if (rc == MTF_RUN_NOTHING_TO_TRAIN) return MTF_EXIT_NOTHING_TO_TRAIN;
  return rc == MTF_OK ? MTF_EXIT_OK : stopped ? rc : MTF_EXIT_FAILURE;
}
