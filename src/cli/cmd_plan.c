/* `mtf plan CONFIG`: in one process, for any mesh, what the config's training step costs each rank: every
 * variable with its layout and slice, memory for parameters, optimizer state and activations, FLOPs and
 * bytes per collective kind (src/run/program.c builds the graph and plans; this prints them). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/run_args.h"
#include "core/units.h"
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
    printf("gradient allreduce: not bucketed (%s)\n",
           cfg->train.allreduce_overlap == MTF_OVERLAP_OFF ? "train.allreduce_overlap is off: one blocking allreduce each"
           : cfg->train.allreduce_bucket_mb > 0             ? "no weight gradient is summed over a mesh axis"
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
  if (cfg->grad_reduce == MTF_NUMBERS_BF16) printf(" (sent as bf16: backend.grad_reduce)");
  printf("\n");
  if (mtf_run_overlap_by_placement(cfg))
    printf("gradient allreduce: blocking instead, one each, where every rank of the job runs on one node "
           "(train.allreduce_overlap auto; on keeps the buckets)\n");
}

static void print_plan(const mtf_config *cfg, const mtf_program *p, int json) {
  const mtf_plan_stats *stats = mtf_plan_get_stats(p->train_plan);
  const mtf_plan_stats *apply = p->apply_plan ? mtf_plan_get_stats(p->apply_plan) : NULL;
  mtf_program_memory mem;
  mtf_program_memory_of(p, cfg, &mem);
  int64_t activations = mem.train_arena + mem.apply_arena;
  int64_t training = mem.parameters + mem.optimizer_state + mem.accumulators + activations;
  /* Per step: the train plan runs once per microbatch, the apply plan once. */
  int N = p->microbatches;
  int64_t flops = stats->flops * N + (apply ? apply->flops : 0), comm_calls[MTF_COLL_KINDS], comm_bytes[MTF_COLL_KINDS];
  for (int k = 0; k < MTF_COLL_KINDS; k++) {
    comm_calls[k] = stats->comm_calls[k] * N + (apply ? apply->comm_calls[k] : 0);
    comm_bytes[k] = stats->comm_bytes[k] * N + (apply ? apply->comm_bytes[k] : 0);
  }
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
    const mtf_tensor_layout *layout = mtf_plan_layout(mtf_program_state_plan(p), var);
    if (!layout || mtf_variable_is_transient(g, var)) continue; /* accumulators: counted below */
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
    printf("\n], \"parameter_count\": %lld, \"microbatches\": %d, \"recompute\": \"%s\",\n",
           (long long)p->train_model.param_count, N, mtf_config_choice_text("train.recompute", (int)cfg->train.recompute));
    printf(" \"per_rank_bytes\": {\"parameters\": %lld, \"optimizer_state\": %lld, \"gradient_accumulators\": %lld, "
           "\"activations_peak\": %lld, \"train_arena\": %lld, \"apply_arena\": %lld, \"eval_arena\": %lld, "
           "\"inputs\": %lld, \"host_buffers\": %lld, \"runtime\": %lld, \"allreduce_scratch\": %lld, "
           "\"checkpoint_staging\": %lld, \"run_total\": %lld, \"bf16_activations\": %lld, "
           "\"bf16_weight_copies\": %lld},\n",
           (long long)mem.parameters, (long long)mem.optimizer_state, (long long)mem.accumulators,
           (long long)activations, (long long)mem.train_arena, (long long)mem.apply_arena, (long long)mem.eval_arena,
           (long long)mem.inputs, (long long)mem.host, (long long)mem.runtime, (long long)mem.allreduce_scratch,
           (long long)mem.staging, (long long)mem.total, (long long)stats->bf16_value_bytes,
           (long long)stats->bf16_weight_copy_bytes);
    printf(" \"flops_per_step\": %lld, \"collectives\": {", (long long)flops);
    for (int k = 0; k < MTF_COLL_KINDS; k++)
      printf("%s\"%s\": {\"calls\": %lld, \"bytes\": %lld}", k ? ", " : "", mtf_collective_name((mtf_collective_kind)k),
             (long long)comm_calls[k], (long long)comm_bytes[k]);
    printf("}, \"allreduce_buckets\": [");
    for (int i = 0; i < stats->allreduce_buckets; i++) {
      int members = 0;
      int64_t bytes = mtf_plan_bucket_bytes(p->train_plan, i, &members);
      printf("%s{\"bytes\": %lld, \"gradients\": %d}", i ? ", " : "", (long long)bytes, members);
    }
    printf("]}\n");
    return;
  }
  const double MiB = 1048576.0;
  /* The model's trainable values (not optimizer slots), whole, on every mesh: what "a 1B model" counts. */
  char count[32];
  mtf_format_count((double)p->train_model.param_count, count, sizeof count);
  printf("\nmodel: %lld parameters (%s)\n", (long long)p->train_model.param_count, count);
  printf("step: batch %lld", (long long)cfg->train.batch);
  if (N > 1) printf(" in %d microbatches of %lld (gradients accumulated)", N, (long long)(cfg->train.batch / N));
  printf(", recompute %s\n", mtf_config_choice_text("train.recompute", (int)cfg->train.recompute));
  printf("per rank: parameters %.2f MiB, optimizer state %.2f MiB, ", mem.parameters / MiB, mem.optimizer_state / MiB);
  if (N > 1) printf("gradient accumulators %.2f MiB, ", mem.accumulators / MiB);
  printf("activations (planned peak) %.2f MiB, total %.2f MiB\n", activations / MiB, training / MiB);
  if (N > 1)
    printf("per rank activations: %.2f MiB forward+backward of a microbatch, %.2f MiB optimizer update\n",
           mem.train_arena / MiB, mem.apply_arena / MiB);
  if (stats->bf16_values)
    printf("bf16 activations: %d values of the training step stored as bfloat16, %.2f MiB per rank in all "
           "(backend.precision bf16 on %s)\n", stats->bf16_values, stats->bf16_value_bytes / MiB,
           cfg->backend[0] ? cfg->backend : "cpu");
  if (stats->bf16_weight_copies)
    printf("bf16 weight copies: %d weights' bfloat16 copies written by the optimizer and kept between steps, %.2f MiB "
           "per rank (in the activations above)\n", stats->bf16_weight_copies, stats->bf16_weight_copy_bytes / MiB);
  printf("per rank in mtf train (peak resident, estimated): %.2f MiB = the total above", mem.total / MiB);
  if (cfg->data_eval[0]) printf(" + evaluation %.2f", mem.eval_arena / MiB);
  printf(" + inputs and loader rows %.2f + runtime %.2f (code, MPI, BLAS buffers) + ", (mem.inputs + mem.host) / MiB,
         mem.runtime / MiB);
  if (mem.staging) printf("the larger of checkpoint staging %.2f and ", mem.staging / MiB);
  printf("allreduce scratch %.2f MiB\n", mem.allreduce_scratch / MiB);
  printf("per rank per step: %.3f GFLOP", flops / 1e9);
  for (int k = 0; k < MTF_COLL_KINDS; k++)
    if (comm_calls[k])
      printf(", %s %lld calls %.2f MiB sent", mtf_collective_name((mtf_collective_kind)k), (long long)comm_calls[k],
             comm_bytes[k] / MiB);
  printf("\n");
  print_buckets(cfg, p->train_plan, stats);
}

int mtf_cmd_plan(int argc, char **argv) {
  static const struct option options[] = {{"json", no_argument, 0, 'j'}, {0, 0, 0, 0}};
  int json = 0;
  const mtf_run_command command = {"plan", plan_usage, options, plan_option, &json, 0};
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
    rc = mtf_run_check_layout(program.graph, cfg, &err);
    if (rc == MTF_OK) print_plan(cfg, &program, json);
    mtf_program_free(&program);
  }
  if (rc != MTF_OK) {
    fprintf(stderr, "mtf plan: error: %s\n", err.msg);
  }
  free(cfg);
  return rc == MTF_OK ? MTF_EXIT_OK : MTF_EXIT_FAILURE;
}
