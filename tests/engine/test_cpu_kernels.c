#define _POSIX_C_SOURCE 200809L
/* The CPU backend's fast paths at sizes that reach them: the conformance test's shapes are tiny (rows of
 * 3-6 elements never enter the 16-lane loops, no tensor is big enough to be split over threads), so here
 * every kernel the model uses runs on tensors of 10^5 elements with rows longer than a lane block (1100
 * logits > 1024), odd sizes for the tails, and broadcast, strided and transposed operands; forward and
 * gradient, replicated and with the op's dim split over the mesh (the fused ops' phases). Each case is
 * checked
 *   - against the double-precision reference (error relative to the tensor's scale <= 2e-5, as in the
 *     conformance test), and
 *   - bitwise between 1, 2 and 3 threads per rank: results must not depend on the thread count.
 *
 *   mpiexec -n 2 test_cpu_kernels [--only TEXT] [--break OP | --break-threads OP]
 *
 * --only runs the cases whose name contains TEXT. --break OP shifts one element in the middle of OP's
 * output; --break-threads OP changes OP's output by one ulp only when it runs on more than one thread.
 * Either must make the test fail (CTest checks it). */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "exec/backend.h"
#include "ops/reference.h"

#define MAX_VARS 3
#define N_THREADS 3

typedef struct kcase {
  const char *name;
  const char *vars[MAX_VARS];
  const char *layouts[3]; /* besides replicated */
  mtf_tensor (*build)(mtf_graph *g, const mtf_tensor *v, mtf_tensor *labels);
} kcase;

static mtf_shape S(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "test", &s, NULL);
  return s;
}

#define ARGS mtf_graph *g, const mtf_tensor *v, mtf_tensor *labels
static mtf_tensor positive(mtf_graph *g, mtf_tensor x) { return mtf_scalar_add(g, mtf_square(g, x), 0.5f); }
static mtf_tensor sum_to(mtf_graph *g, mtf_tensor x, const char *shape) {
  mtf_shape s = S(shape);
  return mtf_reduce_sum(g, x, &s);
}
static mtf_tensor permute(mtf_graph *g, mtf_tensor x, const char *shape) {
  mtf_shape s = S(shape);
  return mtf_einsum(g, 1, &x, &s);
}
static mtf_tensor int_input(mtf_graph *g, mtf_tensor *labels, const char *shape) {
  mtf_shape s = S(shape);
  return *labels = mtf_input_int(g, "labels", &s);
}

static mtf_tensor c_unary(ARGS) {
  (void)labels;
  mtf_tensor x = mtf_scalar_multiply(g, v[0], 3.0f), p = positive(g, x);
  mtf_tensor t = mtf_add(g, mtf_exp(g, x), mtf_log(g, p));
  t = mtf_add(g, t, mtf_add(g, mtf_rsqrt(g, p), mtf_sqrt(g, p)));
  t = mtf_add(g, t, mtf_add(g, mtf_tanh(g, x), mtf_sigmoid(g, x)));
  t = mtf_add(g, t, mtf_add(g, mtf_relu(g, x), mtf_gelu(g, x)));
  return mtf_scalar_add(g, mtf_scalar_multiply(g, t, -0.75f), 0.125f);
}
static mtf_tensor c_swish(ARGS) {
  (void)labels;
  return mtf_swish(g, mtf_scalar_multiply(g, v[0], 3.0f));
}
static mtf_tensor c_binary(ARGS) {
  (void)labels;
  mtf_tensor s = mtf_multiply(g, mtf_subtract(g, v[0], v[1]), v[2]);  /* [a, b] with [b] and [a] */
  s = mtf_add(g, s, mtf_divide(g, v[0], positive(g, v[1])));
  s = mtf_add(g, s, mtf_subtract(g, v[2], v[0]));                      /* [a] first: stride 0 in the row */
  return mtf_add(g, s, mtf_less_equal(g, v[1], v[0]));
}
static mtf_tensor c_sum_columns(ARGS) { (void)labels; return sum_to(g, mtf_square(g, v[0]), "c:90"); }
static mtf_tensor c_sum_rows(ARGS) { (void)labels; return sum_to(g, mtf_square(g, v[0]), "a:60"); }
static mtf_tensor c_sum_middle(ARGS) { (void)labels; return sum_to(g, mtf_square(g, v[0]), "b:40"); }
static mtf_tensor c_sum_transposed(ARGS) { (void)labels; return sum_to(g, mtf_square(g, v[0]), "c:90,a:60"); }
static mtf_tensor c_transpose(ARGS) { (void)labels; return mtf_square(g, permute(g, v[0], "c:90,b:40,a:60")); }
static mtf_tensor c_transpose_batch(ARGS) { (void)labels; return mtf_square(g, permute(g, v[0], "a:60,c:90,b:40")); }
static mtf_tensor c_copy_rows(ARGS) { (void)labels; return mtf_square(g, permute(g, v[0], "b:40,a:60,c:90")); }
static mtf_tensor c_max_last(ARGS) { (void)labels; return mtf_reduce_max_dim(g, v[0], "c"); }
static mtf_tensor c_max_middle(ARGS) { (void)labels; return mtf_reduce_max_dim(g, v[0], "b"); }
static mtf_tensor c_broadcast(ARGS) {
  (void)labels;
  mtf_shape last = S("a:200,d:530"), first = S("d:530,a:200");
  return mtf_add(g, mtf_broadcast(g, v[0], &last), mtf_broadcast(g, mtf_square(g, v[0]), &first));
}
static mtf_tensor c_softmax(ARGS) { (void)labels; return mtf_softmax(g, mtf_scalar_multiply(g, v[0], 4.0f), "v"); }
static mtf_tensor c_log_softmax(ARGS) { (void)labels; return mtf_log_softmax(g, mtf_scalar_multiply(g, v[0], 4.0f), "v"); }
static mtf_tensor c_softmax_strided(ARGS) { (void)labels; return mtf_softmax(g, v[0], "v"); }
static mtf_tensor c_layer_norm(ARGS) {
  (void)labels;
  return mtf_layer_norm(g, mtf_scalar_add(g, v[0], 100.0f), "d", v[1], v[2], 1e-5f);
}
static mtf_tensor c_rms_norm(ARGS) { (void)labels; return mtf_rms_norm(g, v[0], "d", v[1], 1e-5f); }
static mtf_tensor c_xent(ARGS) {
  return mtf_softmax_cross_entropy(g, mtf_scalar_multiply(g, v[0], 4.0f), int_input(g, labels, "a:128"), "v", 1e-2f);
}
static mtf_tensor c_causal(ARGS) { (void)labels; return mtf_softmax(g, mtf_causal_mask(g, v[0], "q", "m"), "m"); }
static mtf_tensor c_gather(ARGS) { return mtf_gather(g, v[0], int_input(g, labels, "a:400"), "v"); }
static mtf_tensor c_one_hot(ARGS) {
  mtf_dim vocab = mtf_dim_make("v", 300);
  return mtf_multiply(g, mtf_one_hot(g, int_input(g, labels, "a:400"), &vocab), v[0]);
}
static mtf_tensor c_batch_matmul(ARGS) {
  (void)labels;
  mtf_shape o = S("b:30,x:40,n:50");
  return mtf_einsum2(g, v[0], v[1], &o);
}

/* Selection (ops/select.c): values plus positions (through to_float, so a wrong index shows). */
static mtf_tensor top_k_of(mtf_graph *g, mtf_tensor x, const char *dim, int64_t k) {
  mtf_dim kd = mtf_dim_make("k", k);
  mtf_tensor indices, values = mtf_top_k(g, x, dim, &kd, &indices);
  return mtf_add(g, values, mtf_scalar_multiply(g, mtf_to_float(g, indices), 1e-3f));
}
static mtf_tensor c_top_k(ARGS) { (void)labels; return top_k_of(g, v[0], "v", 4); }
static mtf_tensor c_top_k_large(ARGS) { (void)labels; return top_k_of(g, v[0], "v", 260); }
static mtf_tensor c_argmax(ARGS) {
  (void)labels;
  mtf_dim vocab = mtf_dim_make("v", 300);
  mtf_tensor index = mtf_argmax(g, v[0], "v");
  return mtf_multiply(g, mtf_one_hot(g, index, &vocab), v[0]);
}
static mtf_tensor c_cumsum(ARGS) { (void)labels; return mtf_cumsum(g, v[0], "v", 0); }
static mtf_tensor c_cumsum_strided(ARGS) { (void)labels; return mtf_cumsum(g, v[0], "v", 1); }
static mtf_tensor c_select_binary(ARGS) {
  (void)labels;
  mtf_tensor m = mtf_add(g, mtf_greater(g, v[0], v[1]), mtf_less(g, v[1], v[0]));
  return mtf_add(g, mtf_multiply(g, m, mtf_maximum(g, v[0], v[1])), mtf_minimum(g, v[1], v[0]));
}
static mtf_tensor c_where(ARGS) {
  (void)labels;
  return mtf_where(g, mtf_greater(g, v[2], v[1]), v[0], mtf_scalar_multiply(g, v[2], 2.0f));
}

static const kcase cases[] = {
    {"unary functions", {"a:200,b:530"}, {"a:m"}, c_unary},
    {"swish (SiLU)", {"a:200,b:530"}, {"a:m"}, c_swish},
    {"binary, broadcast both ways", {"a:200,b:530", "b:530", "a:200"}, {"a:m", "b:m"}, c_binary},
    {"sum to innermost dim (columns)", {"a:60,b:40,c:90"}, {"a:m"}, c_sum_columns},
    {"sum to outermost dim (rows)", {"a:60,b:40,c:90"}, {"c:m"}, c_sum_rows},
    {"sum to middle dim", {"a:60,b:40,c:90"}, {"b:m"}, c_sum_middle},
    {"sum to transposed dims", {"a:60,b:40,c:90"}, {"b:m"}, c_sum_transposed},
    {"transpose (tiled)", {"a:60,b:40,c:90"}, {"b:m"}, c_transpose},
    {"transpose with a batch dim", {"a:60,b:40,c:90"}, {"a:m"}, c_transpose_batch},
    {"permutation keeping the inner dim", {"a:60,b:40,c:90"}, {"a:m"}, c_copy_rows},
    {"reduce_max innermost", {"a:60,b:40,c:90"}, {"c:m"}, c_max_last},
    {"reduce_max middle", {"a:60,b:40,c:90"}, {"b:m"}, c_max_middle},
    {"broadcast inner and outer", {"d:530"}, {"d:m"}, c_broadcast},
    {"softmax, 1100 logits", {"a:128,v:1100"}, {"v:m", "a:m"}, c_softmax},
    {"log_softmax, 1100 logits", {"a:128,v:1100"}, {"v:m"}, c_log_softmax},
    {"softmax, dim outermost (strided)", {"v:300,a:400"}, {"v:m"}, c_softmax_strided},
    {"layer_norm, mean 100 x std", {"a:256,d:530", "d:530", "d:530"}, {"d:m", "a:m"}, c_layer_norm},
    {"rms_norm", {"a:256,d:530", "d:530"}, {"d:m"}, c_rms_norm},
    {"cross-entropy + z_loss, 1100 logits", {"a:128,v:1100"}, {"v:m", "a:m"}, c_xent},
    {"causal mask + softmax", {"e:4,q:230,m:230"}, {"e:m", "m:m"}, c_causal},
    {"gather / scatter_add", {"v:300,d:200"}, {"v:m", "d:m"}, c_gather},
    {"one_hot", {"a:400,v:300"}, {"v:m"}, c_one_hot},
    {"top_k, k 4 of 300, 400 rows", {"a:400,v:300"}, {"v:m", "a:m"}, c_top_k},
    {"top_k, k 260 of 1100 (heap list)", {"a:16,v:1100"}, {"v:m"}, c_top_k_large},
    {"argmax, dim outermost (strided)", {"v:300,a:400"}, {"v:m", "a:m"}, c_argmax},
    {"cumsum, 1100 long rows", {"a:128,v:1100"}, {"v:m", "a:m"}, c_cumsum},
    {"cumsum exclusive, dim outermost", {"v:300,a:400"}, {"v:m"}, c_cumsum_strided},
    {"greater/less/maximum/minimum", {"a:200,b:530", "b:530"}, {"a:m", "b:m"}, c_select_binary},
    {"where, broadcast", {"a:200,b:530", "b:530", "a:200"}, {"a:m", "b:m"}, c_where},
    {"batched einsum with packing", {"x:40,k:64,b:30", "k:64,n:50,b:30"}, {"b:m", "k:m"}, c_batch_matmul},
};

static int world_rank;
static const char *broken_op, *only;
static int break_threads;
static mtf_kernel_fn real_kernel;

/* The deliberately wrong kernels of --break and --break-threads. */
static int broken_kernel(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  int rc = real_kernel(b, st, a);
  int64_t n = mtf_shape_num_elements(&st->out_shape);
  float *out = a->out;
  if (!break_threads) out[n / 2] += 0.5f * (1.0f + fabsf(out[n / 2]));
  else if (b->threads > 1) out[n / 2] = nextafterf(out[n / 2], INFINITY);
  return rc;
}

static double max_abs(const double *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

/* Runs the graph on `threads` threads per rank and fetches every tensor of `fetches` into got (concatenated). */
static int run_engine(mtf_graph *g, mtf_comm *comm, const char *layout, int threads, int n_fetches,
                      const mtf_tensor *fetches, mtf_tensor labels, const int32_t *ids, float *got) {
  mtf_layout_rules rules;
  mtf_error err;
  mtf_plan *plan = NULL;
  mtf_session *session = NULL;
  mtf_session_options options = {.threads = threads, .poison_freed = 1};
  int ok = mtf_layout_rules_parse(layout, &rules, &err) == MTF_OK &&
           mtf_plan_create(g, &comm->mesh, &rules, comm->rank, n_fetches, fetches, &plan, &err) == MTF_OK &&
           mtf_session_create(plan, comm, &options, &session, &err) == MTF_OK;
  if (ok && broken_op) {
    mtf_backend *b = mtf_session_backend_instance(session);
    for (int k = 0; k < MTF_OP_COUNT; k++)
      if (strcmp(mtf_op((mtf_op_kind)k)->name, broken_op) == 0 && b->kernels[k] != broken_kernel) {
        real_kernel = b->kernels[k];
        b->kernels[k] = broken_kernel;
      }
  }
  if (ok && labels >= 0) ok = mtf_session_set_input_int(session, labels, ids, &err) == MTF_OK;
  if (ok) ok = mtf_session_run(session, &err) == MTF_OK;
  for (int f = 0; ok && f < n_fetches; f++) {
    ok = mtf_session_fetch(session, fetches[f], got, &err) == MTF_OK;
    got += mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
  }
  if (!ok) fprintf(stderr, "engine (layout '%s', %d threads): %s\n", layout, threads, err.msg);
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  return ok;
}

static void run_case(const kcase *c, mtf_comm *comm) {
  mtf_graph *g = mtf_graph_create(4321);
  mtf_tensor vars[MAX_VARS], grads[MAX_VARS], labels = -1;
  int n_vars = 0;
  for (int i = 0; i < MAX_VARS && c->vars[i]; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    mtf_shape s = S(c->vars[i]);
    vars[n_vars++] = mtf_variable(g, name, &s, MTF_INIT_NORMAL, 1.0f);
  }
  mtf_tensor y = c->build(g, vars, &labels);
  mtf_shape ys = *mtf_tensor_shape(g, y), scalar = {0};
  mtf_tensor projection = mtf_variable(g, "projection", &ys, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor loss = mtf_reduce_sum(g, mtf_multiply(g, y, projection), &scalar);
  mtf_error err;
  CHECK(mtf_gradients(g, loss, n_vars, vars, grads) == MTF_OK);
  if (mtf_graph_status(g, &err)) {
    fprintf(stderr, "FAIL %s: graph error: %s\n", c->name, err.msg);
    CHECK(0);
    mtf_graph_destroy(g);
    return;
  }
  mtf_tensor fetches[1 + MAX_VARS] = {y};
  int64_t total = mtf_shape_num_elements(&ys);
  for (int i = 0; i < n_vars; i++) {
    fetches[1 + i] = grads[i];
    total += mtf_shape_num_elements(mtf_tensor_shape(g, grads[i]));
  }
  /* labels: ids in range, with a few outside the vocabulary of 300 or 1100 */
  int32_t *ids = NULL;
  double *ids_double = NULL;
  if (labels >= 0) {
    int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, labels));
    int64_t vocab = strstr(c->name, "1100") ? 1100 : 300;
    ids = malloc(sizeof(int32_t) * (size_t)n);
    ids_double = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      ids[i] = (int32_t)((i * 7919 + 13) % (vocab + 2)) - 1; /* -1 and vocab are outside */
      ids_double[i] = ids[i];
    }
  }
  double **ref = mtf_reference_evaluate(g, labels >= 0 ? &ids_double : NULL, NULL);

  float *got[N_THREADS + 1];
  for (int t = 1; t <= N_THREADS; t++) got[t] = malloc(sizeof(float) * (size_t)total);
  const char *layouts[4] = {"", c->layouts[0], c->layouts[1], c->layouts[2]};
  double worst = 0;
  int ok = 1, same = 1;
  for (int l = 0; l < 4 && (l == 0 || layouts[l]) && ok; l++) {
    for (int t = 1; t <= N_THREADS && ok; t++)
      ok = run_engine(g, comm, layouts[l], t, 1 + n_vars, fetches, labels, ids, got[t]);
    for (int t = 2; t <= N_THREADS && ok; t++)
      if (memcmp(got[t], got[1], sizeof(float) * (size_t)total) != 0) {
        same = 0;
        if (world_rank == 0) fprintf(stderr, "  %s: layout '%s': %d threads differ from 1\n", c->name, layouts[l], t);
      }
    const float *p = got[1];
    for (int f = 0; ok && f < 1 + n_vars; f++) {
      int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
      double scale = fmax(1.0, max_abs(ref[fetches[f]], n)), e = 0;
      for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)p[i] - ref[fetches[f]][i]) / scale;
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
      }
      if (e > 2e-5 && world_rank == 0) fprintf(stderr, "  %s: layout '%s': fetch %d error %.2e\n", c->name, layouts[l], f, e);
      worst = fmax(worst, e);
      p += n;
    }
  }
  int pass = ok && same && worst <= 2e-5;
  if (world_rank == 0)
    printf("%s %-38s error %.2e, 1/2/3 threads %s\n", pass ? "ok  " : "FAIL", c->name, worst,
           same ? "bitwise equal" : "DIFFER");
  CHECK(ok);
  CHECK(same);
  CHECK(worst <= 2e-5);
  for (int t = 1; t <= N_THREADS; t++) free(got[t]);
  free(ids);
  free(ids_double);
  mtf_reference_free(g, ref);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int world_size;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--break") == 0) broken_op = argv[i + 1];
    else if (strcmp(argv[i], "--break-threads") == 0) broken_op = argv[i + 1], break_threads = 1;
    else if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  if (broken_op && world_rank == 0)
    printf("deliberately broken kernel: %s%s\n", broken_op, break_threads ? " (on more than one thread)" : "");
  char mesh_text[32];
  snprintf(mesh_text, sizeof mesh_text, "m:%d", world_size);
  mtf_shape mesh;
  mtf_comm *comm;
  mtf_error err;
  if (mtf_mesh_parse(mesh_text, &mesh, &err) || mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 2;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!only || strstr(cases[i].name, only)) run_case(&cases[i], comm);
  mtf_comm_destroy(comm);
  int local_failed = check_failed, any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  /* Rank 0's status speaks for the job (check_mpi.h: another rank's non-zero exit can kill the job before
   * rank 0 prints its summary). */
  if (world_rank != 0) return 0;
  int rc = check_summary();
  return rc ? rc : (any_failed ? 1 : 0);
}
