#define _POSIX_C_SOURCE 200809L
/* The backend conformance test (in the manner of ggml's test-backend-ops): every op of the op table,
 * forward and gradient, on every registered backend, against the double-precision reference and against
 * finite differences of it, over shapes with odd sizes, size-1 dims and operand orders, replicated and
 * with each even dimension split over the mesh (so fused ops also run their split phases).
 *
 * Ops without a gradient (the fused optimizer updates) are checked forward only, and differentiating through
 * them must be an error. The step cases run plan steps the op cases do not reach (reshards by all-to-all and
 * reduce-scatter, an SGD step's assigns through gradient buckets, its updated variables checked too) under their
 * own layouts, and dropout masks are checked under a run's random offset and a microbatch. This file is the
 * harness's runner for the kinds with a step executor (conformance_harness.h; pjrt_conformance.c is the other).
 *
 *   mpiexec -n 2 test_backend_conformance [--backend KIND] [--break OP] [--only TEXT] [--bf16 | --bf16-storage]
 *
 * --bf16 runs every case with the graph's matmul dtype bfloat16 (backend.precision bf16): every two-operand
 * einsum, forward and backward, takes bfloat16 operands. The reference rounds the same operands (ops/cast.c),
 * so products of variables agree to fp32 accumulation; an operand computed in fp32 by the kernels may round to
 * the neighbouring bfloat16 of the reference's double value, hence the bound there: 2^-7 of the tensor's scale
 * (an operand off by one bfloat16 ulp, 2^-8, relative), where fp32 cases have 2e-5. Finite differences do not
 * see the straight-through gradient of a rounding (piecewise constant), so a graph with a cast, or with
 * attention (whose products then round q, k, v, the weights, dO and dS, as the reference models), is checked
 * against the reference's gradient only.
 *
 * --bf16-storage is --bf16 with plans that store activations as bfloat16 (mtf_plan_options.bf16_storage, as the
 * cpu backend's runs do): every variable reaches the case's op rounded to bfloat16 and through an op that writes
 * it as bfloat16 where the case's op reads that input so (reads_bf16), and the result is rounded to bfloat16
 * (so written as bfloat16 by ops with bf16_output): both kernel paths, against the reference of the roundings.
 *
 * --break OP makes OP's kernel deliberately wrong (its first output element is shifted, or with
 * --break-nan OP made NaN): the test must then fail, which CTests check (the test of the test). --only TEXT
 * runs the cases whose name contains TEXT (on other mesh sizes, e.g.). Exit 0 when every check passes. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_comm.h"
#include "core/layout.h"
#include "exec/backend.h"
#include "../graph/ref_eval.h"

#include "conformance_harness.h"

static int world_rank;
static const char *only_cases; /* --only TEXT: the cases whose name contains TEXT */
static const char *broken_op;
static int broken_to_nan;
static mtf_kernel_fn real_kernel;

/* The deliberately wrong kernel of --break: the real one, then its first output element shifted. */
static int broken_kernel(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int rc = real_kernel(b, st, a);
  float first;
  b->mem->download(b, &first, a->out, sizeof first);
  first = broken_to_nan ? NAN : first + 0.5f;
  b->mem->upload(b, a->out, &first, sizeof first);
  return rc;
}

/* The engine on `backend` under `layout` against the reference: max error relative to each tensor's scale. */
static double engine_error(const conformance_graph *cg, int train, const char *backend, mtf_comm *comm,
                           const char *layout_text, int *ok, int *skipped) {
  mtf_graph *g = cg->g;
  int n_fetches = cg->n_fetches;
  const mtf_tensor *fetches = cg->fetches;
  mtf_layout_rules rules;
  mtf_error err;
  mtf_layout_rules_parse(layout_text, &rules, &err);
  mtf_plan *plan = NULL;
  mtf_session *session = NULL;
  /* Freed buffers become NaN, so a memory-plan lifetime error (scratch included) shows as a wrong value. */
  mtf_session_options options = {.backend = backend, .poison_freed = 1};
  double worst = 0;
  mtf_plan_options plan_options = {.bf16_storage = storage_mode, .allreduce_bucket_bytes = train ? 1 << 20 : 0};
  int rc = mtf_plan_create_with_options(g, &comm->mesh, &rules, comm->rank, n_fetches, fetches, &plan_options, &plan,
                                        &err);
  if (rc == MTF_ERR_LAYOUT) { /* two dims of one tensor on one axis: not a layout to test */
    *skipped = 1;
    return 0;
  }
  *ok = rc == MTF_OK && mtf_session_create(plan, comm, &options, &session, &err) == MTF_OK;
  if (*ok) note_bf16_steps(plan);
  if (*ok && broken_op) {
    mtf_backend *b = mtf_session_backend_instance(session);
    for (int k = 0; k < MTF_OP_COUNT; k++)
      if (strcmp(mtf_op((mtf_op_kind)k)->name, broken_op) == 0 && b->kernels[k] != broken_kernel) {
        real_kernel = b->kernels[k];
        b->kernels[k] = broken_kernel;
      }
  }
  for (int i = 0; *ok && i < cg->n_inputs; i++)
    *ok = mtf_session_set_input_int(session, cg->inputs[i], cg->ids[i], &err) == MTF_OK;
  if (*ok) *ok = mtf_session_run(session, &err) == MTF_OK;
  if (!*ok) fprintf(stderr, "engine (%s, layout '%s'): %s\n", backend, layout_text, err.msg);
  for (int f = 0; *ok && f < n_fetches; f++) {
    int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
    float *got = malloc(sizeof(float) * (size_t)n + 1);
    *ok = mtf_session_fetch(session, fetches[f], got, &err) == MTF_OK;
    if (*ok) worst = conformance_error(got, cg->ref[cg->expect[f]], n, worst);
    free(got);
  }
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  return worst;
}

#define FD_MAX_ELEMENTS 2048

static unsigned covered[MTF_OP_COUNT];

/* Differentiating through an op without a gradient is an error naming the op (in a copy of the case's graph:
 * the error is sticky). */
static void check_no_gradient(const op_case *c, const mtf_graph *g, int n_vars, const mtf_tensor *vars) {
  mtf_graph *copy = mtf_graph_create(1234);
  mtf_tensor copy_vars[MAX_VARS], grads[MAX_VARS], inputs[MAX_INPUTS];
  int n_inputs = 0;
  for (int i = 0; i < n_vars; i++)
    copy_vars[i] = mtf_variable(copy, mtf_tensor_name(g, vars[i]), mtf_tensor_shape(g, vars[i]), MTF_INIT_NORMAL, 1.0f);
  mtf_tensor y = c->build(copy, copy_vars, inputs, &n_inputs);
  mtf_shape scalar = {0};
  mtf_tensor copy_loss = mtf_reduce_sum(copy, y, &scalar);
  mtf_error err;
  int rc = mtf_gradients(copy, copy_loss, n_vars, copy_vars, grads);
  mtf_graph_status(copy, &err);
  CHECK(rc == MTF_ERR_INVALID && strstr(err.msg, "has no gradient") != NULL);
  if (rc != MTF_ERR_INVALID && world_rank == 0) fprintf(stderr, "FAIL %s: differentiating it did not fail\n", c->name);
  mtf_graph_destroy(copy);
}

/* A cast, or attention whose products round their operands to bfloat16 (params.attention.bf16). */
static int has_rounding(const mtf_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const mtf_node *n = &g->nodes[i];
    if (n->kind == MTF_OP_CAST) return 1;
    if ((n->kind == MTF_OP_ATTENTION || n->kind == MTF_OP_ATTENTION_GRAD) && n->params.attention.bf16) return 1;
  }
  return 0;
}

/* given, train: a step case's layouts and SGD step (conformance_cases.h), else NULL, 0. */
static void run_case(const op_case *c, int forward_only, const char *const *given, int train, const char *backend,
                     mtf_comm *comm) {
  if (only_cases && !strstr(c->name, only_cases)) return;
  conformance_graph cg;
  if (!conformance_graph_build(c, forward_only, train, &cg)) return;
  mtf_graph *g = cg.g;
  if (forward_only) check_no_gradient(c, g, cg.n_vars, cg.vars);
  for (int i = 0; i < g->n_nodes; i++) covered[g->nodes[i].kind]++;
  /* Finite differences see through stop_gradient (the engine check covers it), and not the straight-through
   * gradient of a rounding (see --bf16 above): neither is checked by them. */
  double worst_fd = 0;
  int fd_checks = c->build != c_stop && !has_rounding(g);
  /* Variables above FD_MAX_ELEMENTS (a 67 x 67 attention bias) are left out: two evaluations of the whole
   * reference graph per element would take most of the suite's time, and the reference gradients they would
   * check are the same code the smaller cases check. */
  for (int v = 0; fd_checks && v < cg.n_grads; v++)
    if (mtf_shape_num_elements(mtf_tensor_shape(g, cg.vars[v])) <= FD_MAX_ELEMENTS)
      worst_fd = fmax(worst_fd, ref_gradient_error(g, cg.loss, cg.vars[v], cg.grads[v], cg.ids_double, cg.ref));
  const double engine_bound = conformance_bound();
  static conformance_layout layouts[CONFORMANCE_MAX_LAYOUTS];
  int n_layouts = conformance_layouts(&cg, &comm->mesh, given, 1, layouts);
  double worst_engine = 0;
  int ok = 1, run_layouts = 0;
  for (int l = 0; l < n_layouts && ok; l++) {
    int skipped = 0;
    double e = engine_error(&cg, train, backend, comm, layouts[l], &ok, &skipped);
    run_layouts += !skipped;
    if (e > engine_bound && world_rank == 0)
      fprintf(stderr, "  %s: layout '%s' engine error %.2e\n", c->name, layouts[l], e);
    worst_engine = fmax(worst_engine, e);
  }
  CHECK(ok);
  int pass = ok && worst_fd <= 1e-6 && worst_engine <= engine_bound;
  if (world_rank == 0)
    fprintf(pass ? stdout : stderr, "%s %-8s %-38s %2d layouts, finite-difference error %.2e, engine error %.2e\n",
            pass ? "ok  " : "FAIL", backend, c->name, run_layouts, worst_fd, worst_engine);
  CHECK(worst_fd <= 1e-6);
  CHECK(worst_engine <= engine_bound);
  conformance_graph_free(&cg);
}

/* The harness's dropout check (conformance_random_graph) through mtf_session_set_random_offset and
 * mtf_session_set_microbatch. */
static void check_random_offset(const char *backend, mtf_comm *comm, const char *layout_text) {
  if (only_cases && !strstr("dropout mask with a random offset", only_cases)) return;
  mtf_graph *g = mtf_graph_create(99);
  mtf_tensor y = conformance_random_graph(g);
  mtf_layout_rules rules;
  mtf_error err = {0};
  mtf_layout_rules_parse(layout_text, &rules, &err);
  mtf_plan *plan = NULL;
  mtf_session *session = NULL;
  mtf_session_options options = {.backend = backend};
  float got[24];
  int rc = mtf_plan_create(g, &comm->mesh, &rules, comm->rank, 1, &y, &plan, &err);
  if (rc == MTF_OK) rc = mtf_session_create(plan, comm, &options, &session, &err);
  if (rc == MTF_OK) {
    mtf_session_set_random_offset(session, random_run_offset);
    rc = mtf_session_set_microbatch(session, "a", RANDOM_INDEX, RANDOM_COUNT, &err);
  }
  if (rc == MTF_OK) rc = mtf_session_run(session, &err);
  if (rc == MTF_OK) rc = mtf_session_fetch(session, y, got, &err);
  /* rows of a per rank, as the plan lays y out */
  int64_t rows = plan ? mtf_layout_slice_shape(&plan->layouts[y], &plan->mesh).dims[0].size : 4, mismatches = 0;
  for (int64_t i = 0; rc == MTF_OK && i < 4; i++)
    for (int64_t j = 0; j < 6; j++) /* row i: local row i % rows of the slice starting at i / rows * rows */
      mismatches += got[i * 6 + j] != conformance_random_want(g, i / rows * rows, rows, i % rows, j);
  if (rc != MTF_OK && world_rank == 0) fprintf(stderr, "random offset (%s): %s\n", backend, err.msg);
  if (world_rank == 0)
    printf("%s %-8s %-38s layout '%s', %lld of 24 mask elements differ\n", rc == MTF_OK && !mismatches ? "ok  " : "FAIL",
           backend, "dropout mask with a random offset and microbatch", layout_text, (long long)mismatches);
  CHECK(rc == MTF_OK && mismatches == 0);
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int world_size;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const char *only_backend = NULL;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--bf16") == 0 || strcmp(argv[i], "--bf16-storage") == 0) {
      bf16_mode = 1;
      storage_mode = strcmp(argv[i], "--bf16-storage") == 0;
      memmove(&argv[i], &argv[i + 1], sizeof *argv * (size_t)(argc - i)); /* the rest are pairs */
      argc--;
      break;
    }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--backend") == 0) only_backend = argv[i + 1];
    else if (strcmp(argv[i], "--break") == 0) broken_op = argv[i + 1];
    else if (strcmp(argv[i], "--break-nan") == 0) broken_op = argv[i + 1], broken_to_nan = 1;
    else if (strcmp(argv[i], "--only") == 0) only_cases = argv[i + 1];
  }
  if (broken_op && world_rank == 0) printf("deliberately broken kernel: %s\n", broken_op);
  if (bf16_mode && world_rank == 0) printf("every case with bfloat16 matmul operands (--bf16)\n");
  if (storage_mode && world_rank == 0)
    printf("and bfloat16-stored activations: operands and results through bf16 storage where the ops read and "
           "write it (--bf16-storage)\n");
  char mesh_text[32];
  snprintf(mesh_text, sizeof mesh_text, "m:%d", world_size);
  mtf_shape mesh;
  mtf_comm *comm;
  mtf_error err;
  if (mtf_mesh_parse(mesh_text, &mesh, &err) || mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 2;
  }
  /* Every registered backend ("cpu, cuda, ..."), or the one asked for. */
  char kinds[128];
  snprintf(kinds, sizeof kinds, "%s", only_backend ? only_backend : mtf_backend_kinds());
  for (char *save = NULL, *kind = strtok_r(kinds, ", ", &save); kind; kind = strtok_r(NULL, ", ", &save))
  {
    /* A kind that runs whole programs (pjrt), not plan steps through kernels, runs the same harness and cases
     * through its own runner: pjrt_conformance.c. */
    const mtf_backend_caps *caps = mtf_backend_capabilities(kind);
    if (caps && caps->one_program) continue;
    /* A backend whose device is absent here (cuda on a machine without a GPU) is listed as skipped, with the
     * reason; asked for by --backend, it is a failure instead. */
    mtf_backend_options probe = {.kind = kind, .device = MTF_DEVICE_FROM_LOCAL_RANK};
    char desc[1024];
    if (mtf_backend_describe(&probe, 0, 1, desc, sizeof desc, &err) != MTF_OK) {
      if (world_rank == 0) printf("SKIP backend %s: %s\n", kind, err.msg);
      CHECK(!only_backend);
      continue;
    }
    if (world_rank == 0 && desc[0]) printf("backend %s: %s\n", kind, desc);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], 0, NULL, 0, kind, comm);
    for (size_t i = 0; bf16_mode && i < sizeof bf16_cases / sizeof bf16_cases[0]; i++)
      run_case(&bf16_cases[i], 0, NULL, 0, kind, comm);
    for (size_t i = 0; i < sizeof forward_only_cases / sizeof forward_only_cases[0]; i++)
      run_case(&forward_only_cases[i], 1, NULL, 0, kind, comm);
    for (size_t i = 0; i < sizeof step_cases / sizeof step_cases[0]; i++)
      run_case(&step_cases[i].c, 0, step_cases[i].layouts, step_cases[i].train, kind, comm);
    if (caps && caps->microbatches) {
      int64_t size = comm->mesh.dims[0].size;
      check_random_offset(kind, comm, "");
      if (size == 2 || size == 4) check_random_offset(kind, comm, "a:m");
      if (size == 2) check_random_offset(kind, comm, "d:m");
    }
  }
  /* A bfloat16 tensor reaches only the ops whose entry takes it: any other op refuses it at build time. */
  {
    mtf_graph *g = mtf_graph_create(1);
    mtf_shape s = S("a:3,d:4");
    mtf_tensor x = mtf_cast(g, mtf_variable(g, "x", &s, MTF_INIT_NORMAL, 1.0f), MTF_BF16);
    mtf_tensor y = mtf_exp(g, x);
    mtf_error e;
    CHECK(y == MTF_NO_TENSOR && mtf_graph_status(g, &e) == MTF_ERR_INVALID && strstr(e.msg, "holds bfloat16 values"));
    mtf_graph_destroy(g);
  }
  /* Every op of the table was exercised (by all the cases: not checked under --only). */
  for (int k = 0; k < MTF_OP_COUNT && !only_cases; k++) {
    if (!covered[k] && world_rank == 0) fprintf(stderr, "FAIL no conformance case uses op '%s'\n", mtf_op((mtf_op_kind)k)->name);
    CHECK(covered[k] > 0);
  }
  /* Under --bf16-storage every op whose entry reads or writes bf16-stored values did so in some case (every
   * rank's plans have the same steps: rank 0 says it). */
  if (storage_mode && !only_cases && world_rank == 0) CHECK(bf16_storage_unexercised() == 0);
  mtf_comm_destroy(comm);
  int local_failed = check_failed, any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  /* Rank 0 answers for all (any_failed): another rank exiting non-zero first would let mpiexec end the job
   * before rank 0 prints its summary, which the --break tests read. */
  if (world_rank != 0) return 0;
  int rc = check_summary();
  return rc ? rc : (any_failed ? 1 : 0);
}
