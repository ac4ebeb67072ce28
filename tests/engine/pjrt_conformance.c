#define _POSIX_C_SOURCE 200809L
/* The backend conformance cases (conformance_cases.h: every op of the table, forward and gradient) on
 * the PJRT emitter and runtime, against the double-precision reference: for a mesh m:N of N devices in
 * this one process, every layout of backend_conformance.c (replicated, each even dim split, each pair),
 * the N per-rank plans are made in-process, emitted as one SPMD StableHLO module (exec/pjrt/emit.h),
 * compiled for N replicas on the XLA CPU plugin, run with each device's slices of the variables and
 * inputs, and the fetched slices reassembled and compared with the reference (2e-5 of each tensor's
 * scale, as backend_conformance.c). Splits make the plans use allreduce, allgather, all-to-all,
 * reduce-scatter and slice steps, and the fused ops their split phases.
 *
 *   test_pjrt_conformance [--devices N | --mesh b:2,m:2] [--only TEXT] [--dump FILE] [--break]
 *                         [--bf16 | --bf16-storage] [--bf16-dots]
 *
 * --bf16 runs every case with the graph's matmul dtype bfloat16 (backend.precision bf16: the module converts
 * the products' operands to bf16, as the plan says), --bf16-storage also with plans that store activations as
 * bfloat16 (mtf_plan_options.bf16_storage, as every bf16 run's plans have): the module then holds bf16 values
 * between the ops that write and read them so, and every op whose entry reads or writes them must have done
 * both in some case; both against the reference of the roundings, within 2^-7 of each tensor's scale (the
 * bound backend_conformance.c states for bf16). --bf16-dots emits the products of bf16 operands as bf16 dots
 * with f32 results (mtf_pjrt_emit_options.bf16_dots, what GPU and TPU plugins get): the XLA CPU plugin runs
 * those of the cases' small sizes (larger ones fail in its Eigen kernel), so their numbers are checked here.
 *
 * --mesh runs a 2-D mesh (groups over each axis and both); the op cases split over its first axis.
 *
 * --break turns the first multiply of every emitted module into an add: the test must fail (the test of
 * the test: a wrong op in the module is caught).
 * Exit 0 when every case passes, 1 otherwise, 77 (ctest SKIP) when no PJRT plugin is installed.
 * The summary lists, per op kind, the cases it appears in that pass and fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/layout.h"
#include "core/mesh.h"
#include "exec/pjrt/emit.h"
#include "exec/pjrt/runtime.h"
#include "lower/plan.h"
#include "ops/op_def.h"

#include "conformance_harness.h"

#define SKIP 77

static const char *only_cases, *dump_path;

static int break_values, bf16_dots;
static long bf16_dot_count; /* bf16 x bf16 dot_generals compiled (--bf16-dots) */
static char mesh_name[64]; /* for the report lines */
static int op_pass[MTF_OP_COUNT], op_fail[MTF_OP_COUNT];

/* Copies between a whole tensor (shape full) and one device's slice (shape local at offsets), 4-byte
 * elements; to_slice 1: full -> slice. */
static void move_slice(const mtf_shape *full, const mtf_shape *local, const int64_t *offsets, void *whole, void *slice,
                       int to_slice) {
  int64_t n = mtf_shape_num_elements(local), index[MTF_MAX_RANK] = {0}, strides[MTF_MAX_RANK], s = 1;
  for (int d = full->rank - 1; d >= 0; d--) {
    strides[d] = s;
    s *= full->dims[d].size;
  }
  for (int64_t e = 0; e < n; e++) {
    int64_t g = 0;
    for (int d = 0; d < local->rank; d++) g += (index[d] + offsets[d]) * strides[d];
    if (to_slice) memcpy((char *)slice + 4 * e, (char *)whole + 4 * g, 4);
    else memcpy((char *)whole + 4 * g, (char *)slice + 4 * e, 4);
    for (int d = local->rank - 1; d >= 0; d--) {
      if (++index[d] < local->dims[d].size) break;
      index[d] = 0;
    }
  }
}

/* One device's value of parameter p: the variable's initial slice, the input's slice, or the scalars. */
static void *param_data(const mtf_plan *plan, const mtf_pjrt_value *p, const mtf_graph *g, const mtf_tensor *inputs,
                        int n_inputs, int32_t **input_ids) {
  void *data = calloc((size_t)(p->elements > 0 ? p->elements : 1), 4);
  if (!data || p->kind == MTF_PJRT_RANDOM_OFFSET || p->kind == MTF_PJRT_MICROBATCH) return data;
  const mtf_node *node = &g->nodes[p->node];
  int64_t offsets[MTF_MAX_RANK];
  mtf_layout_slice_offset(&plan->layouts[p->node], &plan->mesh, plan->coord, offsets);
  int64_t total = mtf_shape_num_elements(&node->shape);
  void *whole = NULL;
  if (p->kind == MTF_PJRT_VARIABLE) {
    float *w = malloc(sizeof(float) * (size_t)(total + 1));
    for (int64_t i = 0; w && i < total; i++) w[i] = mtf_variable_value(g, node, i);
    whole = w;
  } else {
    for (int i = 0; i < n_inputs; i++)
      if (inputs[i] == p->node) whole = input_ids[i];
  }
  if (whole) move_slice(&node->shape, &p->shape, offsets, whole, data, 1);
  if (p->kind == MTF_PJRT_VARIABLE) free(whole);
  return data;
}

typedef struct run_result {
  int ok;
  double worst;      /* against the double reference */
  double worst_base; /* against the one-device run (base), when given */
  char what[512];
} run_result;

/* Plan steps of each kind emitted over the whole run (evidence that the splits exercised every
 * collective), by mtf_step_kind. */
static long step_kinds[MTF_STEP_REDUCE_SCATTER + 1];
static const char *step_kind_names[] = {"kernel", "allreduce", "allgather", "slice", "copy", "allreduce_start",
                                        "allreduce_wait", "alltoall", "reduce_scatter"};

/* The case's graph under one layout on n devices against the reference. */
static run_result run_layout(mtf_pjrt_runtime *rt, mtf_graph *g, const mtf_shape *mesh, const char *layout_text,
                             int n_fetches, const mtf_tensor *fetches, const mtf_tensor *inputs, int n_inputs,
                             int32_t **input_ids, double **ref, double **base, double **save,
                             const mtf_plan_options *options, int *skipped) {
  run_result res = {0, 0, 0, ""};
  mtf_layout_rules rules;
  mtf_error err = {0};
  mtf_layout_rules_parse(layout_text, &rules, &err);
  mtf_plan **plans = NULL;
  int n = 0;
  mtf_pjrt_module m = {0};
  mtf_pjrt_executable *exe = NULL;
  mtf_pjrt_buffer **args = NULL, **outs = NULL;
  float **full = NULL;
  int rc = mtf_pjrt_plans_create(g, mesh, &rules, n_fetches, fetches, options, &plans, &n, &err);
  if (rc == MTF_ERR_LAYOUT) {
    *skipped = 1;
    res.ok = 1;
    return res;
  }
  mtf_pjrt_emit_options emit_options = {.bf16_dots = bf16_dots};
  if (rc == MTF_OK) rc = mtf_pjrt_emit((const mtf_plan *const *)plans, n, &emit_options, &m, &err);
  for (int i = 0; rc == MTF_OK && i < plans[0]->n_steps; i++) step_kinds[plans[0]->steps[i].kind]++;
  for (const char *at = rc == MTF_OK ? m.text : NULL; at && (at = strstr(at, "\"stablehlo.dot_general\"")); at++) {
    const char *end = strchr(at, '\n'), *sig = strstr(at, " : (tensor<");
    bf16_dot_count += sig && sig < end && strstr(sig, "xbf16>, tensor<") && strstr(sig, "xbf16>, tensor<") < end;
  }
  if (rc == MTF_OK) note_bf16_steps(plans[0]);
  if (rc == MTF_OK && break_values) { /* a wrong op in the module: its first multiply becomes an add */
    char *at = strstr(m.text, "\"stablehlo.multiply\"");
    if (at) memcpy(at, "\"stablehlo.add\"     ", strlen("\"stablehlo.multiply\""));
  }
  if (rc == MTF_OK && dump_path) {
    FILE *f = fopen(dump_path, "w");
    if (f) fputs(m.text, f), fclose(f);
  }
  if (rc == MTF_OK) rc = mtf_pjrt_compile(rt, m.text, m.length, n, 1, &exe, &err);
  if (rc != MTF_OK) {
    snprintf(res.what, sizeof res.what, "%.480s", err.msg);
    goto done;
  }
  args = calloc((size_t)(n * m.n_params + 1), sizeof *args);
  outs = calloc((size_t)(n * m.n_results + 1), sizeof *outs);
  for (int d = 0; rc == MTF_OK && d < n; d++)
    for (int a = 0; rc == MTF_OK && a < m.n_params; a++) {
      const mtf_pjrt_value *p = &m.params[a];
      void *data = param_data(plans[d], p, g, inputs, n_inputs, input_ids);
      int64_t dims[MTF_MAX_RANK];
      for (int k = 0; k < p->shape.rank; k++) dims[k] = p->shape.dims[k].size;
      rc = mtf_pjrt_buffer_from_host(rt, d, p->elem, dims, p->shape.rank, data, &args[d * m.n_params + a], &err);
      free(data);
    }
  unsigned char *keep = calloc((size_t)(n * m.n_params + 1), 1);
  memset(keep, 1, (size_t)(n * m.n_params));
  if (rc == MTF_OK) rc = mtf_pjrt_execute(rt, exe, m.n_params, args, keep, outs, &err);
  free(keep);
  if (rc != MTF_OK) {
    snprintf(res.what, sizeof res.what, "%.480s", err.msg);
    goto done;
  }
  res.ok = 1;
  for (int f = 0; f < m.n_results && res.ok; f++) {
    const mtf_pjrt_value *r = &m.results[f];
    /* an updated variable is checked against the reference of the value assigned to it */
    int expect = r->node;
    for (int a = 0; r->kind == MTF_PJRT_VARIABLE && a < g->n_assigns; a++)
      if (g->assigns[a].variable == r->node) expect = g->assigns[a].value;
    const mtf_shape *whole = &g->nodes[r->node].shape;
    int64_t total = mtf_shape_num_elements(whole);
    float *assembled = calloc((size_t)(total + 1), sizeof(float)), *slice = malloc(sizeof(float) * (size_t)(r->elements + 1));
    for (int d = 0; d < n && res.ok; d++) {
      rc = mtf_pjrt_buffer_to_host(rt, outs[d * m.n_results + f], slice, (size_t)r->elements * 4, &err);
      if (rc != MTF_OK) {
        snprintf(res.what, sizeof res.what, "download: %.480s", err.msg);
        res.ok = 0;
        break;
      }
      int64_t offsets[MTF_MAX_RANK];
      mtf_layout_slice_offset(&plans[d]->layouts[r->node], mesh, plans[d]->coord, offsets);
      move_slice(whole, &r->shape, offsets, assembled, slice, 0);
    }
    if (res.ok) res.worst = conformance_error(assembled, ref[expect], total, res.worst);
    if (res.ok && base && base[expect]) /* the same graph on one device, at the reference's scale */
      res.worst_base = conformance_error_scaled(assembled, base[expect], total, fmax(1.0, max_abs(ref[expect], total)),
                                                res.worst_base);
    if (save && !save[expect]) {
      save[expect] = malloc(sizeof(double) * (size_t)(total + 1));
      for (int64_t i = 0; save[expect] && i < total; i++) save[expect][i] = assembled[i];
    }
    free(assembled);
    free(slice);
  }
done:
  for (int i = 0; args && i < n * m.n_params; i++) mtf_pjrt_buffer_destroy(rt, args[i]);
  for (int i = 0; outs && i < n * m.n_results; i++) mtf_pjrt_buffer_destroy(rt, outs[i]);
  free(args);
  free(outs);
  free(full);
  mtf_pjrt_executable_destroy(rt, exe);
  mtf_pjrt_module_free(&m);
  mtf_pjrt_plans_destroy(plans, n);
  return res;
}

/* given, train: a step case's layouts and SGD step (conformance_cases.h), else NULL, 0. */
static void run_case(mtf_pjrt_runtime *rt, const op_case *c, int forward_only, const mtf_shape *mesh,
                     const char *const *given, int train) {
  static const mtf_shape one_device = {1, {{"m", 1}}};
  if (only_cases && !strstr(c->name, only_cases)) return;
  conformance_graph cg;
  if (!conformance_graph_build(c, forward_only, train, &cg)) return;
  mtf_graph *g = cg.g;
  mtf_plan_options options = {.allreduce_bucket_bytes = train ? 1 << 20 : 0, .bf16_storage = storage_mode};
  const double bound = conformance_bound();
  static conformance_layout layouts[CONFORMANCE_MAX_LAYOUTS];
  int n_layouts = conformance_layouts(&cg, mesh, given, 0, layouts);
  double worst = 0, worst_base = 0;
  int ok = 1, run_layouts = 0;
  char first_error[600] = "";
  /* on more than one device, first the one-device values the split layouts must also match */
  /* y and the gradients: the module's results hold the updated variables themselves (checked against the values
   * assigned to them) */
  int n_fetches = 1 + cg.n_grads;
  double **base = NULL;
  if (mesh->dims[0].size > 1) {
    base = calloc((size_t)g->n_nodes, sizeof(double *));
    int skipped = 0;
    run_result r = run_layout(rt, g, &one_device, "", n_fetches, cg.fetches, cg.inputs, cg.n_inputs, cg.ids, cg.ref,
                              NULL, base, &options, &skipped);
    if (!r.ok) {
      ok = 0;
      snprintf(first_error, sizeof first_error, "one device: %.400s", r.what);
    }
  }
  for (int l = 0; l < n_layouts && ok; l++) {
    int skipped = 0;
    run_result r = run_layout(rt, g, mesh, layouts[l], n_fetches, cg.fetches, cg.inputs, cg.n_inputs, cg.ids, cg.ref,
                              base, NULL, &options, &skipped);
    worst_base = fmax(worst_base, r.worst_base);
    run_layouts += !skipped;
    if (!r.ok) {
      ok = 0;
      if (!first_error[0]) snprintf(first_error, sizeof first_error, "layout %.60s: %.400s", layouts[l], r.what);
      continue;
    }
    if (r.worst > bound) fprintf(stderr, "  %s: layout '%s' error %.2e\n", c->name, layouts[l], r.worst);
    worst = fmax(worst, r.worst);
  }
  int pass = ok && worst <= bound && worst_base <= bound;
  printf("%s pjrt %s %-52s %2d layouts, error %.2e (vs 1 device %.2e)%s%s\n", pass ? "ok  " : "FAIL",
         mesh_name, c->name, run_layouts, worst, worst_base, first_error[0] ? "  " : "", first_error);
  for (int i = 0; base && i < g->n_nodes; i++) free(base[i]);
  free(base);
  CHECK(pass);
  unsigned char used[MTF_OP_COUNT] = {0};
  for (int i = 0; i < g->n_nodes; i++) used[g->nodes[i].kind] = 1;
  for (int k = 0; k < MTF_OP_COUNT; k++)
    if (used[k]) (pass ? op_pass : op_fail)[k]++;
  conformance_graph_free(&cg);
}

/* The harness's dropout check (conformance_random_graph) through the module's RANDOM_OFFSET and MICROBATCH
 * parameters. */
static void check_random_offset(mtf_pjrt_runtime *rt, const mtf_shape *mesh, const char *layout_text) {
  const uint64_t offset = random_run_offset;
  const int index = RANDOM_INDEX, count = RANDOM_COUNT;
  mtf_graph *g = mtf_graph_create(99);
  mtf_tensor y = conformance_random_graph(g);
  mtf_layout_rules rules;
  mtf_error err = {0};
  mtf_layout_rules_parse(layout_text, &rules, &err);
  mtf_plan **plans = NULL;
  int n = 0, ok = 0, mismatches = 0;
  mtf_pjrt_module m = {0};
  mtf_pjrt_executable *exe = NULL;
  mtf_pjrt_emit_options options = {.microbatch_dim = "a", .microbatches = count};
  int rc = mtf_pjrt_plans_create(g, mesh, &rules, 1, &y, NULL, &plans, &n, &err);
  if (rc == MTF_OK) rc = mtf_pjrt_emit((const mtf_plan *const *)plans, n, &options, &m, &err);
  if (rc == MTF_OK) rc = mtf_pjrt_compile(rt, m.text, m.length, n, 1, &exe, &err);
  mtf_pjrt_buffer *args[64] = {0}, *outs[64] = {0};
  int na = m.n_params, nr = m.n_results;
  if (rc == MTF_OK && (n * na > 64 || n * nr > 64 || nr != 1)) rc = MTF_ERR_INVALID;
  for (int d = 0; rc == MTF_OK && d < n; d++)
    for (int a = 0; rc == MTF_OK && a < na; a++) {
      int32_t words[2] = {(int32_t)(uint32_t)offset, (int32_t)(uint32_t)(offset >> 32)}, micro = index;
      int64_t dims[1] = {2};
      const mtf_pjrt_value *p = &m.params[a];
      rc = mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_S32, dims, p->kind == MTF_PJRT_RANDOM_OFFSET ? 1 : 0,
                                     p->kind == MTF_PJRT_RANDOM_OFFSET ? (void *)words : (void *)&micro, &args[d * na + a], &err);
    }
  if (rc == MTF_OK) rc = mtf_pjrt_execute(rt, exe, na, args, NULL, outs, &err);
  for (int d = 0; rc == MTF_OK && d < n; d++) {
    float got[24];
    const mtf_pjrt_value *r = &m.results[0];
    rc = mtf_pjrt_buffer_to_host(rt, outs[d], got, (size_t)r->elements * 4, &err);
    int64_t offsets[MTF_MAX_RANK];
    mtf_layout_slice_offset(&plans[d]->layouts[y], mesh, plans[d]->coord, offsets);
    int64_t rows = r->shape.dims[0].size, cols = r->shape.dims[1].size;
    for (int64_t i = 0; rc == MTF_OK && i < rows; i++)
      for (int64_t j = 0; j < cols; j++)
        mismatches += got[i * cols + j] != conformance_random_want(g, offsets[0], rows, i, offsets[1] + j);
    ok = rc == MTF_OK;
  }
  if (rc != MTF_OK) fprintf(stderr, "random offset: %s\n", err.msg);
  printf("%s pjrt %s %-52s layout '%s', %d of 24 mask elements differ\n", ok && !mismatches ? "ok  " : "FAIL", mesh_name,
         "dropout mask with a random offset and microbatch", layout_text, mismatches);
  CHECK(ok && mismatches == 0);
  for (int i = 0; i < n * na && i < 64; i++) mtf_pjrt_buffer_destroy(rt, args[i]);
  for (int i = 0; i < n * nr && i < 64; i++) mtf_pjrt_buffer_destroy(rt, outs[i]);
  mtf_pjrt_executable_destroy(rt, exe);
  mtf_pjrt_module_free(&m);
  mtf_pjrt_plans_destroy(plans, n);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  int devices = 1;
  const char *mesh_arg = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) devices = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only_cases = argv[++i];
    else if (strcmp(argv[i], "--mesh") == 0 && i + 1 < argc) mesh_arg = argv[++i];
    else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) dump_path = argv[++i];
    else if (strcmp(argv[i], "--break") == 0) break_values = 1;
    else if (strcmp(argv[i], "--bf16") == 0) bf16_mode = 1;
    else if (strcmp(argv[i], "--bf16-storage") == 0) bf16_mode = storage_mode = 1;
    else if (strcmp(argv[i], "--bf16-dots") == 0) bf16_dots = 1;
    else {
      fprintf(stderr, "usage: %s [--devices N | --mesh MESH] [--only TEXT] [--dump FILE] [--break] "
              "[--bf16 | --bf16-storage] [--bf16-dots]\n", argv[0]);
      return 2;
    }
  }
  char plugin[4096];
  mtf_error err = {0};
  if (mtf_pjrt_resolve_plugin(NULL, plugin, sizeof plugin, &err) != MTF_OK || access(plugin, R_OK) != 0) {
    printf("SKIP: no PJRT plugin installed (%s); bash tools/install-deps.sh --pjrt installs %s\n",
           err.msg[0] ? err.msg : plugin, MTF_PJRT_CPU_PACKAGE);
    return SKIP;
  }
  char mesh_text[64];
  snprintf(mesh_text, sizeof mesh_text, "m:%d", devices);
  if (mesh_arg) snprintf(mesh_text, sizeof mesh_text, "%s", mesh_arg);
  mtf_shape mesh;
  if (mtf_mesh_parse(mesh_text, &mesh, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 2;
  }
  devices = mtf_mesh_size(&mesh);
  snprintf(mesh_name, sizeof mesh_name, "%s", mesh_text);
  mtf_pjrt_options options = {.plugin_path = plugin, .local_devices = devices};
  mtf_pjrt_runtime *rt = NULL;
  if (mtf_pjrt_open(&options, &rt, &err) != MTF_OK) {
    fprintf(stderr, "FAIL: %s\n", err.msg);
    return 1;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(rt, &cases[i], 0, &mesh, NULL, 0);
  for (size_t i = 0; bf16_mode && i < sizeof bf16_cases / sizeof bf16_cases[0]; i++)
    run_case(rt, &bf16_cases[i], 0, &mesh, NULL, 0);
  for (size_t i = 0; i < sizeof forward_only_cases / sizeof forward_only_cases[0]; i++)
    run_case(rt, &forward_only_cases[i], 1, &mesh, NULL, 0);
  for (size_t i = 0; i < sizeof step_cases / sizeof step_cases[0]; i++)
    run_case(rt, &step_cases[i].c, 0, &mesh, step_cases[i].layouts, step_cases[i].train);
  if (!only_cases || strstr("dropout mask with a random offset", only_cases)) {
    check_random_offset(rt, &mesh, "");
    if (mesh.dims[0].size == 2 || mesh.dims[0].size == 4) check_random_offset(rt, &mesh, "a:m");
    if (mesh.dims[0].size == 2) check_random_offset(rt, &mesh, "d:m");
  }
  printf("ops on pjrt (%s), cases passing / failing:\n", mesh_text);
  for (int k = 0; k < MTF_OP_COUNT; k++)
    if (op_pass[k] + op_fail[k] > 0) printf("  %-22s %2d / %d%s\n", mtf_op((mtf_op_kind)k)->name, op_pass[k], op_fail[k],
                                            op_fail[k] ? "" : "  all pass");
  printf("plan steps emitted:");
  for (int k = 0; k <= MTF_STEP_REDUCE_SCATTER; k++) printf(" %s %ld", step_kind_names[k], step_kinds[k]);
  printf("\n");
  for (int k = 0; k < MTF_OP_COUNT && !only_cases; k++)
    if (op_pass[k] + op_fail[k] == 0) {
      fprintf(stderr, "FAIL no case uses op '%s'\n", mtf_op((mtf_op_kind)k)->name);
      CHECK(0);
    }
  if (storage_mode && !only_cases) CHECK(bf16_storage_unexercised() == 0);
  if (bf16_dots) {
    printf("dot_generals of bfloat16 operands compiled and run: %ld\n", bf16_dot_count);
    CHECK(!bf16_mode || bf16_dot_count > 0);
  }
  mtf_pjrt_close(rt);
  return check_summary();
}
