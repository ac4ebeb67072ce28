#define _POSIX_C_SOURCE 200809L
/* The selection ops (top_k, argmax, cumsum, where, comparisons) beyond the conformance test's one-op cases:
 *  - hand-worked examples (ties, NaN, exclusive sums) that pin the semantics of mtf.h on the reference and
 *    on the engine, replicated and with the dim split;
 *  - builder errors: k out of range, a k dim the input already has, float arithmetic on int32 positions;
 *  - an MoE router (softmax gates, top-2 experts, one-hot dispatch, capacity positions by an exclusive
 *    cumsum over the tokens, a capacity cut by `less`, gates renormalised with `where`), forward and
 *    gradients, on 2-D meshes where the experts, the tokens, the groups and the k dim are split: every
 *    layout against the double-precision reference (finite differences check the reference's gradients),
 *    so the numbers are the same on 1, 2 and 4 ranks (CTest runs it on each).
 *
 *   mpiexec -n N test_select [--backend KIND]     (N = 1, 2 or 4; KIND default cpu, e.g. cuda-emu) */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "../graph/ref_eval.h"
#include "comm/mpi_comm.h"
#include "ops/reference.h"

static int world_rank;
static const char *backend_kind; /* --backend KIND; NULL: cpu */

static mtf_shape S(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "test", &s, NULL);
  return s;
}

/* Runs `fetches` of g on comm's mesh under `layout` with float input `x` set to `xv`; got gets each fetch
 * (concatenated). Returns 1 on success. */
static int run(mtf_graph *g, mtf_comm *comm, const char *layout, mtf_tensor x, const float *xv, int n_fetches,
               const mtf_tensor *fetches, float *got) {
  mtf_layout_rules rules;
  mtf_error err;
  mtf_plan *plan = NULL;
  mtf_session *s = NULL;
  mtf_session_options options = {.poison_freed = 1, .backend = backend_kind};
  int ok = mtf_layout_rules_parse(layout, &rules, &err) == MTF_OK &&
           mtf_plan_create(g, &comm->mesh, &rules, comm->rank, n_fetches, fetches, &plan, &err) == MTF_OK &&
           mtf_session_create(plan, comm, &options, &s, &err) == MTF_OK;
  if (ok && x >= 0) ok = mtf_session_set_input(s, x, xv, &err) == MTF_OK;
  if (ok) ok = mtf_session_run(s, &err) == MTF_OK;
  for (int f = 0; ok && f < n_fetches; f++) {
    ok = mtf_session_fetch(s, fetches[f], got, &err) == MTF_OK;
    got += mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
  }
  if (!ok && world_rank == 0) fprintf(stderr, "engine (layout '%s'): %s\n", layout, err.msg);
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  return ok;
}

/* Equal as numbers, NaN equal to NaN. */
static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* ---- hand-worked examples ---- */
static void check_example(mtf_comm *comm, const char *layout) {
  /* Row 0 has a tie (3 at 0 and 2: the lower index first); row 1 has NaNs (ranked last, lower index first). */
  const float xv[8] = {3, 1, 3, 2, NAN, 1, NAN, 5};
  const double values[2][4] = {{3, 3, 2, 1}, {5, 1, NAN, NAN}}, positions[2][4] = {{0, 2, 3, 1}, {3, 1, 0, 2}};
  const double argmax[2] = {0, 3}, sums[2][4] = {{3, 4, 7, 9}, {0, 1, 1, 6}}, exclusive[2][4] = {{0, 3, 4, 7}, {0, 0, 1, 1}};
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape xs = S("r:2,d:4");
  mtf_tensor x = mtf_input(g, "x", &xs);
  mtf_dim k = mtf_dim_make("k", 4);
  mtf_tensor indices, top = mtf_top_k(g, x, "d", &k, &indices);
  /* The running sums of row 1 with its NaNs replaced by 0 (where, isnan as x != x: equal is false). */
  mtf_tensor finite = mtf_where(g, mtf_equal(g, x, x), x, mtf_constant(g, &xs, 0.0f));
  mtf_tensor f[5] = {top, mtf_to_float(g, indices), mtf_to_float(g, mtf_argmax(g, x, "d")),
                     mtf_cumsum(g, finite, "d", 0), mtf_cumsum(g, finite, "d", 1)};
  mtf_error err;
  CHECK(mtf_graph_status(g, &err) == MTF_OK);
  double xd[8];
  for (int i = 0; i < 8; i++) xd[i] = xv[i];
  double *inputs[1] = {xd};
  double **ref = mtf_reference_evaluate(g, inputs, NULL);
  float got[8 * 4 + 2];
  int ok = run(g, comm, layout, x, xv, 5, f, got);
  CHECK(ok);
  int bad = 0;
  for (int r = 0; r < 2; r++) {
    bad += !same(ref[f[2]][r], argmax[r]) || !(ok && same(got[16 + r], argmax[r]));
    for (int j = 0; j < 4; j++) {
      int e = r * 4 + j;
      bad += !same(ref[f[0]][e], values[r][j]) || !same(ref[f[1]][e], positions[r][j]);
      bad += !same(ref[f[3]][e], sums[r][j]) || !same(ref[f[4]][e], exclusive[r][j]);
      if (ok) {
        bad += !same(got[e], values[r][j]) || !same(got[8 + e], positions[r][j]);
        bad += !same(got[18 + e], sums[r][j]) || !same(got[26 + e], exclusive[r][j]);
      }
    }
  }
  if (world_rank == 0)
    printf("%s worked example (ties, NaN, exclusive sums), layout '%s': %d wrong\n", bad ? "FAIL" : "ok  ", layout, bad);
  CHECK(bad == 0);
  mtf_reference_free(g, ref);
  mtf_graph_destroy(g);
}

/* ---- lowering: which communication a split dim costs (plans are pure: any mesh, here) ---- */
static void check_plan(const char *what, int top_k, int64_t k, int64_t expect_gathers, int64_t expect_reduced_floats) {
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape xs = S("r:3,d:16"), mesh = S("m:4");
  mtf_tensor x = mtf_variable(g, "x", &xs, MTF_INIT_NORMAL, 1.0f), y;
  mtf_dim kd = mtf_dim_make("k", k);
  y = top_k ? mtf_top_k(g, x, "d", &kd, NULL) : mtf_cumsum(g, x, "d", 1);
  mtf_layout_rules rules;
  mtf_error err;
  mtf_plan *plan = NULL;
  int ok = mtf_layout_rules_parse("d:m", &rules, &err) == MTF_OK &&
           mtf_plan_create(g, &mesh, &rules, 1, 1, &y, &plan, &err) == MTF_OK;
  const mtf_plan_stats *st = ok ? mtf_plan_get_stats(plan) : NULL;
  int64_t gathers = st ? st->comm_calls[MTF_COLL_ALLGATHER] : -1, reduces = st ? st->comm_calls[MTF_COLL_ALLREDUCE] : -1;
  /* the statistics allreduced: a ring allreduce of n floats over 4 ranks sends 2 * 3/4 * n of them */
  int64_t reduced = st ? st->comm_bytes[MTF_COLL_ALLREDUCE] * 2 / 3 / (int64_t)sizeof(float) : -1;
  int pass = ok && gathers == expect_gathers && reduces == (expect_reduced_floats > 0) && reduced == expect_reduced_floats;
  if (world_rank == 0)
    printf("%s plan of %s on m:4: %lld allgathers, %lld allreduces of %lld floats\n", pass ? "ok  " : "FAIL", what,
           (long long)gathers, (long long)reduces, (long long)reduced);
  CHECK(pass);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
}

/* ---- builder errors ---- */
static void check_error(const char *what, int k_size, const char *k_name, int int_arithmetic, const char *expect) {
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape xs = S("a:3,d:4");
  mtf_tensor x = mtf_variable(g, "x", &xs, MTF_INIT_NORMAL, 1.0f);
  if (int_arithmetic) {
    mtf_multiply(g, mtf_argmax(g, x, "d"), x);
  } else {
    mtf_dim k = mtf_dim_make(k_name, k_size);
    mtf_tensor indices;
    CHECK(mtf_top_k(g, x, "d", &k, &indices) == MTF_NO_TENSOR && indices == MTF_NO_TENSOR);
  }
  mtf_error err;
  int rc = mtf_graph_status(g, &err);
  int pass = rc == MTF_ERR_INVALID && strstr(err.msg, expect) != NULL;
  if (world_rank == 0) printf("%s %s: %s\n", pass ? "ok  " : "FAIL", what, rc ? err.msg : "(no error)");
  CHECK(pass);
  mtf_graph_destroy(g);
}

/* ---- an MoE router ---- */
#define TOLERANCE 2e-5

static void check_router(mtf_comm *comm, const char *mesh, const char *const *layouts, int n_layouts) {
  mtf_graph *g = mtf_graph_create(77);
  mtf_shape xs = S("group:4,tokens:8,d_model:4"), ws = S("d_model:4,experts:4"), scalar = {0};
  mtf_tensor x = mtf_variable(g, "x", &xs, MTF_INIT_NORMAL, 1.0f), w = mtf_variable(g, "w", &ws, MTF_INIT_NORMAL, 1.0f);
  mtf_shape ls = S("group:4,tokens:8,experts:4");
  mtf_tensor gates = mtf_softmax(g, mtf_einsum2(g, x, w, &ls), "experts");
  mtf_dim k = mtf_dim_make("k", 2), experts = mtf_dim_make("experts", 4);
  mtf_tensor indices, top = mtf_top_k(g, gates, "experts", &k, &indices);      /* [group, tokens, k] */
  mtf_tensor mask = mtf_one_hot(g, indices, &experts);                           /* [group, tokens, k, experts] */
  mtf_shape per_expert = S("group:4,tokens:8,experts:4");
  mtf_tensor routed = mtf_reduce_sum(g, mask, &per_expert);
  /* Position of each token in its expert's buffer, capacity 3: later tokens are dropped. */
  mtf_tensor position = mtf_cumsum(g, routed, "tokens", 1);
  mtf_tensor kept = mtf_multiply(g, routed, mtf_less(g, position, mtf_constant(g, &scalar, 3.0f)));
  /* The gate of each kept expert, renormalised over the kept ones (where: none kept gives 0, not 0/0). */
  mtf_shape tokens = S("group:4,tokens:8");
  mtf_tensor gate_of = mtf_einsum2(g, mtf_multiply(g, mask, top), mtf_constant(g, &per_expert, 1.0f), &per_expert);
  mtf_tensor kept_gates = mtf_multiply(g, gate_of, kept);
  mtf_tensor total = mtf_reduce_sum(g, kept_gates, &tokens);
  mtf_tensor any = mtf_greater(g, total, mtf_constant(g, &scalar, 0.0f));
  mtf_tensor combine = mtf_where(g, any, mtf_divide(g, kept_gates, mtf_maximum(g, total, mtf_constant(g, &scalar, 1e-9f))),
                                 mtf_constant(g, &scalar, 0.0f));
  mtf_tensor busiest = mtf_to_float(g, mtf_argmax(g, mtf_reduce_sum_dim(g, kept, "tokens"), "experts"));
  mtf_tensor projection = mtf_variable(g, "projection", &per_expert, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor loss = mtf_add(g, mtf_reduce_sum(g, mtf_multiply(g, combine, projection), &scalar),
                            mtf_reduce_sum(g, mtf_minimum(g, position, mtf_constant(g, &scalar, 5.0f)), &scalar));
  loss = mtf_add(g, loss, mtf_reduce_sum(g, busiest, &scalar));
  mtf_tensor wrt[2] = {x, w}, grads[2];
  CHECK(mtf_gradients(g, loss, 2, wrt, grads) == MTF_OK);
  mtf_error err;
  if (mtf_graph_status(g, &err)) {
    fprintf(stderr, "FAIL router graph: %s\n", err.msg);
    CHECK(0);
    mtf_graph_destroy(g);
    return;
  }
  mtf_tensor fetches[6] = {loss, combine, position, busiest, grads[0], grads[1]};
  double **ref = mtf_reference_evaluate(g, NULL, NULL);
  double fd = fmax(ref_gradient_error(g, loss, x, grads[0], NULL, ref), ref_gradient_error(g, loss, w, grads[1], NULL, ref));
  int dropped = 0; /* the capacity must bite, or the test would not check the cut */
  for (int64_t i = 0; i < mtf_shape_num_elements(&per_expert); i++) dropped += ref[position][i] >= 3 && ref[kept][i] == 0 && ref[routed][i] > 0;
  int64_t total_elements = 0;
  for (int f = 0; f < 6; f++) total_elements += mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
  float *got = malloc(sizeof(float) * (size_t)total_elements);
  for (int l = 0; l < n_layouts; l++) {
    int ok = run(g, comm, layouts[l], -1, NULL, 6, fetches, got);
    double worst = 0;
    const float *p = got;
    for (int f = 0; ok && f < 6; f++) {
      int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
      double scale = 1;
      for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[fetches[f]][i]));
      for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)p[i] - ref[fetches[f]][i]) / scale;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
      }
      p += n;
    }
    int pass = ok && worst <= TOLERANCE && fd <= 1e-6 && dropped > 0;
    if (world_rank == 0)
      printf("%s router, mesh %s, layout %-20s error %.2e (finite differences %.1e, %d dropped)\n", pass ? "ok  " : "FAIL",
             mesh, layouts[l], worst, fd, dropped);
    CHECK(pass);
  }
  free(got);
  mtf_reference_free(g, ref);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int world_size;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--backend") == 0) backend_kind = argv[i + 1];
  /* Meshes of this many ranks, with two axes so that two dims can be split at once. */
  const char *meshes[2] = {world_size == 4 ? "b:2,m:2" : world_size == 2 ? "b:2,m:1" : "b:1,m:1",
                           world_size == 4 ? "b:4,m:1" : world_size == 2 ? "b:1,m:2" : NULL};
  static const char *const layouts[] = {
      "",
      "experts:m",                      /* top-k's dim split: gathered, k slices back */
      "tokens:m",                       /* cumsum's dim split */
      "group:b;experts:m",
      "group:b;tokens:m",
      "experts:b;tokens:m",             /* expert parallelism with the tokens split too */
      "k:m;group:b",                    /* the top-k output's new dim split */
      "d_model:m;experts:b",
  };
  for (int m = 0; m < 2 && meshes[m]; m++) {
    mtf_shape mesh;
    mtf_comm *comm;
    mtf_error err;
    if (mtf_mesh_parse(meshes[m], &mesh, &err) || mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return 2;
    }
    if (world_rank == 0) printf("mesh %s\n", meshes[m]);
    check_example(comm, "");
    check_example(comm, "d:b");
    check_example(comm, "d:m;k:b");
    check_router(comm, meshes[m], layouts, (int)(sizeof layouts / sizeof layouts[0]));
    mtf_comm_destroy(comm);
  }
  if (world_rank == 0) {
    /* 4 entries per rank: k 2 gives 2 candidates (values and positions) per rank per row, 2 * 4 * 2 * 3 */
    check_plan("top_k, k 2 of 16, d split in 4", 1, 2, 0, 48);
    check_plan("top_k, k 3 of 16, d split in 4 (gathered)", 1, 3, 1, 0);
    check_plan("cumsum, d split in 4 (row totals)", 0, 0, 0, 12);
    check_error("k above the dim's size", 5, "k", 0, "k = 5 must be in [1, 4]");
    check_error("k of 0", 0, "k", 0, "k = 0 must be in [1, 4]");
    check_error("k dim already in the input", 2, "a", 0, "the new dimension 'a' must not be one of its dims");
    check_error("float arithmetic on int32 positions", 0, NULL, 1, "mtf_to_float converts");
  }
  int local_failed = check_failed, any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  /* Rank 0's status speaks for the job (check_mpi.h: another rank's non-zero exit can kill the job before
   * rank 0 prints its summary). */
  if (world_rank != 0) return 0;
  int rc = check_summary();
  return rc ? rc : (any_failed ? 1 : 0);
}
