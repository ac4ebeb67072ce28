/* `mtf plan CONFIG`: in one process, for any mesh, what the config's training step costs each rank: every
 * variable with its layout and slice, memory for parameters, optimizer state and activations, FLOPs and
 * bytes per collective kind (src/run/program.c builds the graph and plans; this prints them). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/run_args.h"
#include "run/program.h"

static void plan_usage(FILE *out) {
  fprintf(out, "usage: mtf plan CONFIG [--set key.path=value]... [--mesh SHAPE] [--layout RULES] [--json]\n"
               "\n");
  mtf_run_args_usage(out);
  fprintf(out, "  --json               print the result as JSON\n"
               "  -h, --help           show this help\n"
               "\nRuns in one process for any mesh size: variables with their layouts and slices, memory per rank,\n"
               "FLOPs and bytes per collective kind per step.\n");
}

static int plan_option(void *ctx, int opt, const char *value) {
  (void)opt;
  (void)value;
  *(int *)ctx = 1; /* --json */
  return MTF_EXIT_OK;
}

/* The gradient buckets (train.allreduce_bucket_mb): one non-blocking allreduce each, overlapped with the
 * backward pass. */
static void print_buckets(const mtf_config *cfg, const mtf_plan *plan, const mtf_plan_stats *stats) {
  if (stats->allreduce_buckets == 0) {
    printf("gradient allreduce: not bucketed (%s)\n", cfg->train.allreduce_bucket_mb > 0
                                                          ? "no weight gradient is summed over a mesh axis"
                                                          : "train.allreduce_bucket_mb is 0: one blocking allreduce each");
    return;
  }
  int gradients = 0;
  for (int i = 0; i < stats->allreduce_buckets; i++) {
    int members = 0;
    mtf_plan_bucket_bytes(plan, i, &members);
    gradients += members;
  }
  printf("gradient allreduce: %d buckets of at most %g MiB overlapped with the backward pass, %d gradients, %.2f MiB "
         "in all:", stats->allreduce_buckets, cfg->train.allreduce_bucket_mb, gradients,
         stats->bucketed_bytes / 1048576.0);
  for (int i = 0; i < stats->allreduce_buckets; i++) {
    double bytes = (double)mtf_plan_bucket_bytes(plan, i, NULL);
    if (bytes >= 1048576.0) printf(" %.2f MiB", bytes / 1048576.0);
    else printf(" %.1f KiB", bytes / 1024.0);
  }
  printf("\n");
}

static void print_plan(const mtf_config *cfg, const mtf_program *p, int json) {
  const mtf_plan_stats *stats = mtf_plan_get_stats(p->train_plan);
  int64_t param_bytes, slot_bytes;
  mtf_program_variable_bytes(p, &param_bytes, &slot_bytes);
  const mtf_graph *g = mtf_plan_graph(p->train_plan);
  const mtf_shape *mesh = mtf_plan_mesh(p->train_plan);
  char mesh_text[MTF_SHAPE_STR_MAX], shape_text[MTF_SHAPE_STR_MAX], slice_text[MTF_SHAPE_STR_MAX];
  mtf_shape_format(mesh, mesh_text, sizeof mesh_text);
  if (json) {
    printf("{\"mesh\": \"%s\", \"ranks\": %d, \"layout\": \"%s\", \"variables\": [", mesh_text, mtf_mesh_size(mesh),
           cfg->mesh_layout);
  } else {
    printf("plan: mesh %s (%d ranks), layout '%s'\n", mesh_text, mtf_mesh_size(mesh), cfg->mesh_layout);
    printf("%-40s %-36s %-14s %s\n", "variable", "shape", "split over", "slice per rank");
  }
  int first = 1;
  for (int i = 0; i < mtf_graph_num_variables(g); i++) {
    mtf_tensor var = mtf_graph_variable(g, i);
    const mtf_tensor_layout *layout = mtf_plan_layout(p->train_plan, var);
    if (!layout) continue;
    const mtf_shape *shape = mtf_tensor_shape(g, var);
    const char *name = mtf_tensor_name(g, var);
    mtf_shape slice = mtf_layout_slice_shape(layout, mesh);
    char axes[64];
    mtf_mesh_axis_set_format(mesh, mtf_layout_split_axes(layout), axes, sizeof axes);
    mtf_shape_format(shape, shape_text, sizeof shape_text);
    mtf_shape_format(&slice, slice_text, sizeof slice_text);
    if (json) {
      printf("%s\n  {\"name\": \"%s\", \"shape\": \"%s\", \"dims\": [", first ? "" : ",", name, shape_text);
      for (int d = 0; d < shape->rank; d++) printf("%s\"%s\"", d ? ", " : "", shape->dims[d].name);
      printf("], \"sizes\": [");
      for (int d = 0; d < shape->rank; d++) printf("%s%lld", d ? ", " : "", (long long)shape->dims[d].size);
      printf("], \"split_over\": \"%s\", \"slice\": \"%s\"}", axes, slice_text);
    } else {
      printf("%-40s %-36s %-14s %s\n", name, shape_text, axes, slice_text);
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
    printf("}, \"allreduce_buckets\": [");
    for (int i = 0; i < stats->allreduce_buckets; i++) {
      int members = 0;
      int64_t bytes = mtf_plan_bucket_bytes(p->train_plan, i, &members);
      printf("%s{\"bytes\": %lld, \"gradients\": %d}", i ? ", " : "", (long long)bytes, members);
    }
    printf("]}\n");
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
  print_buckets(cfg, p->train_plan, stats);
}

int mtf_cmd_plan(int argc, char **argv) {
  static const struct option options[] = {{"json", no_argument, 0, 'j'}, {0, 0, 0, 0}};
  int json = 0;
  const mtf_run_command command = {"plan", plan_usage, options, plan_option, &json};
  mtf_run_args args;
  int status = mtf_run_args_parse(argc, argv, &command, &args);
  if (status) return status == MTF_RUN_ARGS_HELP ? MTF_EXIT_OK : status;
  mtf_config *cfg = calloc(1, sizeof *cfg);
  if (!cfg) {
    fprintf(stderr, "mtf plan: error: out of memory\n");
    return MTF_EXIT_FAILURE;
  }
  mtf_error err;
  mtf_program program;
  int rc = mtf_run_config_load(&args, cfg, &err);
  if (rc == MTF_OK) rc = mtf_program_build(cfg, 0, &program, &err);
  if (rc == MTF_OK) {
    mtf_run_warn_layout("plan", program.graph, cfg);
    print_plan(cfg, &program, json);
    mtf_program_free(&program);
  } else {
    fprintf(stderr, "mtf plan: error: %s\n", err.msg);
  }
  free(cfg);
  return rc == MTF_OK ? MTF_EXIT_OK : MTF_EXIT_FAILURE;
}
