/* The bf16 policy's plan fusions on cpu, each against the same graph planned without it.
 *
 * The cross-entropy gradient with the forward (lower/fuse_xent.c, mtf_plan_options.xent_grad_from_loss).
 * A bf16-policy model, logits = x w, the mean cross-entropy (plain, squared, then with a z-loss, which must stay
 * unfused), planned with and without the option on the job's mesh (argv[1]) under three layouts: the vocab
 * whole (the gradient merged with the forward: 1 step; squared, dy reads the loss, so the gradient reads the
 * loss instead), the batch split (the same, 1 step per rank) and the vocab split (the gradient's phases: not
 * fused). Over several runs: the loss equals the unfused plan's bit for bit (the forward
 * is the same) and the logits' gradient (fetched in float32) agrees within 1e-5 of its largest element, the
 * difference of one float rounding of the loss; a double-precision softmax of the fetched logits gives the same
 * gradient within 1e-5. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "mtf.h"

enum { B = 4, T = 3, D = 8, V = 40, RUNS = 3 };

/* max(a, b) where a NaN wins (fmax would drop it, and a NaN result would then pass) */
static double worse(double a, double b) { return !(b <= a) ? b : a; }

static mtf_shape shape_of(const char *text) {
  mtf_shape s;
  mtf_error err;
  if (mtf_shape_parse(text, "test", &s, &err)) fail_job("shape", &err);
  return s;
}

typedef struct model {
  mtf_graph *g;
  mtf_tensor x, labels, w, logits, loss, dlogits;
} model;

/* squared: the mean of the squared cross-entropy, whose gradient's dy reads the forward's loss (no merge) */
static model build(float z_loss, int squared) {
  model m;
  m.g = mtf_graph_create(5);
  mtf_graph *g = m.g;
  mtf_shape xs = shape_of("b:4,t:3,d:8"), ws = shape_of("d:8,v:40"), ls = shape_of("b:4,t:3"), scalar = {0};
  m.x = mtf_input(g, "x", &xs);
  m.labels = mtf_input_int(g, "labels", &ls);
  m.w = mtf_variable(g, "w", &ws, MTF_INIT_NORMAL, 1.0f);
  mtf_graph_set_matmul_dtype(g, MTF_BF16); /* the model's ops under the bf16 policy, as a bf16 run builds them */
  mtf_shape logits_shape = shape_of("b:4,t:3,v:40");
  mtf_tensor product = mtf_einsum2(g, m.x, m.w, &logits_shape);
  m.logits = mtf_scalar_multiply(g, product, 1.0f); /* a float32 tensor of its own, to differentiate against */
  mtf_tensor xent = mtf_softmax_cross_entropy(g, m.logits, m.labels, "v", z_loss);
  if (squared) xent = mtf_square(g, xent);
  m.loss = mtf_scalar_multiply(g, mtf_reduce_sum(g, xent, &scalar), 1.0f / (B * T));
  mtf_graph_set_matmul_dtype(g, MTF_F32);
  if (mtf_gradients(g, m.loss, 1, &m.logits, &m.dlogits) != MTF_OK) fail_job("gradients", NULL);
  mtf_error err;
  if (mtf_graph_status(g, &err)) fail_job("graph", &err);
  return m;
}

/* The mean cross-entropy's gradient in double from the logits: (softmax - one_hot) / (B T). */
static double reference_error(const float *logits, const int32_t *labels, const float *dlogits) {
  double worst = 0.0, largest = 0.0;
  for (int r = 0; r < B * T; r++) {
    const float *x = logits + r * V;
    double m = -INFINITY, sum = 0.0;
    for (int j = 0; j < V; j++) m = fmax(m, x[j]);
    for (int j = 0; j < V; j++) sum += exp(x[j] - m);
    for (int j = 0; j < V; j++) {
      double want = (exp(x[j] - m) / sum - (j == labels[r] ? 1.0 : 0.0)) / (B * T);
      worst = worse(worst, fabs(dlogits[r * V + j] - want));
      largest = fmax(largest, fabs(want));
    }
  }
  return worst / largest;
}

/* with_logits: the logits fetched too (so stored as float32) for the double reference; else bf16-stored, as
 * in a bf16 run, and read so by both kernels. */
static void run_case(float z_loss, int squared, const char *layout, int with_logits, int want_merged,
                     int want_from_loss, const mtf_shape *mesh, mtf_comm *comm, int rank) {
  model m = build(z_loss, squared);
  mtf_error err;
  mtf_layout_rules rules;
  mtf_plan *plan[2];
  mtf_session *s[2];
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job(layout, &err);
  mtf_tensor fetches[3] = {m.loss, m.dlogits, m.logits};
  for (int c = 0; c < 2; c++) { /* c = 1: the gradient from the loss */
    mtf_plan_options po = {.bf16_storage = 1, .xent_grad_from_loss = c};
    if (mtf_plan_create_with_options(m.g, mesh, &rules, rank, with_logits ? 3 : 2, fetches, &po, &plan[c], &err) ||
        mtf_session_create(plan[c], comm, &options, &s[c], &err))
      fail_job(layout, &err);
  }
  int merged = plan[1]->stats.xent_merged, from_loss = plan[1]->stats.xent_grads_from_loss;
  CHECK(plan[0]->stats.xent_grads_from_loss == 0 && plan[0]->stats.xent_merged == 0 && merged == want_merged &&
        from_loss == want_from_loss);
  int same_loss = 1;
  double worst = 0.0, worst_reference = 0.0;
  for (int run = 0; run < RUNS; run++) {
    float x[B * T * D], loss[2], logits[B * T * V] = {0};
    static float dlogits[2][B * T * V];
    int32_t labels[B * T];
    for (int i = 0; i < B * T * D; i++) x[i] = (float)((i * 7 + run * 5) % 17) * 0.25f - 2.0f;
    for (int i = 0; i < B * T; i++) labels[i] = (i * 11 + run * 3) % V;
    for (int c = 0; c < 2; c++) {
      if (mtf_session_set_input(s[c], m.x, x, &err) || mtf_session_set_input_int(s[c], m.labels, labels, &err) ||
          mtf_session_run(s[c], &err) || mtf_session_fetch(s[c], m.loss, &loss[c], &err) ||
          mtf_session_fetch(s[c], m.dlogits, dlogits[c], &err) ||
          (with_logits && mtf_session_fetch(s[c], m.logits, logits, &err)))
        fail_job("run", &err);
    }
    same_loss &= memcmp(&loss[0], &loss[1], sizeof(float)) == 0;
    double largest = 0.0, diff = 0.0;
    for (int i = 0; i < B * T * V; i++) {
      largest = fmax(largest, fabs(dlogits[0][i]));
      diff = worse(diff, fabs(dlogits[1][i] - dlogits[0][i]));
    }
    worst = worse(worst, diff / largest);
    if (with_logits && z_loss == 0.0f && !squared) worst_reference = worse(worst_reference, reference_error(logits, labels, dlogits[1]));
  }
  int ok = same_loss && worst < 1e-5 && worst_reference < 1e-5;
  CHECK(ok);
  if (rank == 0)
    printf("%s z_loss %g%s layout '%s'%s: %d gradient step(s) merged with the forward, %d from its loss; %d runs, "
           "loss equal bit for bit, gradient within %.1e of the unfused plan's%s\n",
           ok ? "ok  " : "FAIL", z_loss, squared ? " squared" : "", layout,
           with_logits ? ", float32 logits" : ", bf16 logits", merged, from_loss, RUNS, worst,
           with_logits && !squared ? " and of a double softmax's" : "");
  for (int c = 0; c < 2; c++) {
    mtf_session_destroy(s[c]);
    mtf_plan_destroy(plan[c]);
  }
  mtf_graph_destroy(m.g);
}

/* A tied embedding's gradient (lower/fuse_scatter.c, mtf_plan_options.fuse_scatter_add): h = wte[ids],
 * logits = h wte^T, loss = sum(logits^2) / (B T) under the bf16 policy; the table's gradient is the product's
 * term plus the lookup's scatter_add, which the fused plan adds into the product's term. Its gradient equals
 * the unfused plan's within 1e-5 of the largest element (the same terms added in another order) and a double
 * computation from the table within 2e-2 (the bf16 products' operands). */
static void run_scatter_case(const char *layout, int want_fused, const mtf_shape *mesh, mtf_comm *comm, int rank) {
  mtf_graph *g = mtf_graph_create(9);
  mtf_shape ws = shape_of("v:40,d:8"), ids_shape = shape_of("b:4,t:3"), hs = shape_of("b:4,t:3,d:8");
  mtf_shape logits_shape = shape_of("b:4,t:3,v:40"), scalar = {0};
  mtf_tensor wte = mtf_variable(g, "wte", &ws, MTF_INIT_NORMAL, 1.0f), ids = mtf_input_int(g, "ids", &ids_shape);
  mtf_graph_set_matmul_dtype(g, MTF_BF16);
  mtf_tensor h = mtf_gather(g, wte, ids, "v");
  mtf_tensor logits = mtf_einsum2(g, h, wte, &logits_shape);
  mtf_tensor loss = mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, logits), &scalar), 1.0f / (B * T));
  mtf_graph_set_matmul_dtype(g, MTF_F32);
  mtf_tensor dw;
  mtf_error err;
  if (mtf_gradients(g, loss, 1, &wte, &dw) != MTF_OK || mtf_graph_status(g, &err)) fail_job("scatter graph", NULL);
  (void)hs;
  mtf_layout_rules rules;
  mtf_plan *plan[2];
  mtf_session *s[2];
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job(layout, &err);
  mtf_tensor fetches[2] = {loss, dw};
  for (int c = 0; c < 2; c++) {
    mtf_plan_options po = {.bf16_storage = 1, .fuse_scatter_add = c};
    if (mtf_plan_create_with_options(g, mesh, &rules, rank, 2, fetches, &po, &plan[c], &err) ||
        mtf_session_create(plan[c], comm, &options, &s[c], &err))
      fail_job(layout, &err);
  }
  int fused = plan[1]->stats.fused_scatter_adds;
  CHECK(plan[0]->stats.fused_scatter_adds == 0 && (want_fused < 0 || fused == want_fused));
  /* the product's term dies at the add in this graph: the fused scatter_add adds into it where it lies */
  CHECK(plan[1]->stats.scatter_adds_in_place == fused);
  static float table[V * D], grad[2][V * D];
  int32_t id[B * T];
  double worst = 0.0, worst_reference = 0.0;
  for (int run = 0; run < RUNS; run++) {
    for (int i = 0; i < B * T; i++) id[i] = (i * 7 + run) % 5 * 3; /* repeated ids: rows summed into one */
    for (int c = 0; c < 2; c++)
      if (mtf_session_set_input_int(s[c], ids, id, &err) || mtf_session_run(s[c], &err) ||
          mtf_session_fetch(s[c], dw, grad[c], &err) || mtf_session_fetch(s[c], wte, table, &err))
        fail_job("scatter run", &err);
    static double want[V * D];
    memset(want, 0, sizeof want);
    for (int r = 0; r < B * T; r++) {
      const float *hr = table + id[r] * D;
      for (int v = 0; v < V; v++) {
        double z = 0.0;
        for (int d = 0; d < D; d++) z += (double)hr[d] * table[v * D + d];
        double gz = 2.0 * z / (B * T);
        for (int d = 0; d < D; d++) {
          want[v * D + d] += gz * hr[d];                /* the product's term */
          want[id[r] * D + d] += gz * table[v * D + d]; /* the lookup's */
        }
      }
    }
    double largest = 0.0, diff = 0.0, off = 0.0;
    for (int i = 0; i < V * D; i++) {
      largest = fmax(largest, fabs(want[i]));
      diff = worse(diff, fabs(grad[1][i] - grad[0][i]));
      off = worse(off, fabs(grad[1][i] - want[i]));
    }
    worst = worse(worst, diff / largest);
    worst_reference = worse(worst_reference, off / largest);
  }
  int ok = worst < 1e-5 && worst_reference < 2e-2;
  CHECK(ok);
  if (rank == 0)
    printf("%s tied embedding, layout '%s': %d scatter_add(s) into the product's term; %d runs, gradient within %.1e "
           "of the unfused plan's, %.1e of a double computation\n",
           ok ? "ok  " : "FAIL", layout, fused, RUNS, worst, worst_reference);
  for (int c = 0; c < 2; c++) {
    mtf_session_destroy(s[c]);
    mtf_plan_destroy(plan[c]);
  }
  mtf_graph_destroy(g);
}

/* Adds fused into their producers (lower/fuse_add.c, mtf_plan_options.fuse_product_add), under the bf16 policy:
 * x (a variable) feeds two products, q = x wq and k = x wk, and a layer norm whose output goes through two more,
 * r = x + (norm(x) w1) w2; loss = (sum(q k) + sum(r^2)) / (B T). x's gradient is the sum of the products' (one
 * einsum adds into the other's result) and of the norm's and the residual's (the norm's gradient adds into the
 * residual's). Fused against unfused: the loss and the gradients of x and w1 agree within 1e-6 of their largest
 * element (the same float32 sums; the unfused plan's own kernels are checked against references elsewhere). */
static void run_add_case(const char *layout, int want_fused, const mtf_shape *mesh, mtf_comm *comm, int rank) {
  mtf_graph *g = mtf_graph_create(13);
  mtf_shape xs = shape_of("b:4,t:3,d:8"), de = shape_of("d:8,e:8"), ed = shape_of("e:8,d:8"), he = shape_of("b:4,t:3,e:8");
  mtf_shape scalar = {0};
  mtf_tensor x = mtf_variable(g, "x", &xs, MTF_INIT_NORMAL, 1.0f), wq = mtf_variable(g, "wq", &de, MTF_INIT_NORMAL, 0.5f);
  mtf_tensor wk = mtf_variable(g, "wk", &de, MTF_INIT_NORMAL, 0.5f), w1 = mtf_variable(g, "w1", &de, MTF_INIT_NORMAL, 0.5f);
  mtf_tensor w2 = mtf_variable(g, "w2", &ed, MTF_INIT_NORMAL, 0.5f);
  mtf_graph_set_matmul_dtype(g, MTF_BF16);
  mtf_tensor q = mtf_einsum2(g, x, wq, &he), k = mtf_einsum2(g, x, wk, &he);
  mtf_tensor n = mtf_layer_norm(g, x, "d", MTF_NO_TENSOR, MTF_NO_TENSOR, 1e-6f);
  mtf_tensor r = mtf_add(g, x, mtf_einsum2(g, mtf_einsum2(g, n, w1, &he), w2, &xs));
  mtf_tensor sum = mtf_add(g, mtf_reduce_sum(g, mtf_multiply(g, q, k), &scalar), mtf_reduce_sum(g, mtf_square(g, r), &scalar));
  mtf_tensor loss = mtf_scalar_multiply(g, sum, 1.0f / (B * T));
  mtf_graph_set_matmul_dtype(g, MTF_F32);
  mtf_tensor wrt[2] = {x, w1}, grads[2];
  mtf_error err;
  if (mtf_gradients(g, loss, 2, wrt, grads) != MTF_OK || mtf_graph_status(g, &err)) fail_job("add graph", NULL);
  mtf_layout_rules rules;
  mtf_plan *plan[2];
  mtf_session *s[2];
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job(layout, &err);
  mtf_tensor fetches[3] = {loss, grads[0], grads[1]};
  for (int c = 0; c < 2; c++) {
    mtf_plan_options po = {.bf16_storage = 1, .fuse_product_add = c};
    if (mtf_plan_create_with_options(g, mesh, &rules, rank, 3, fetches, &po, &plan[c], &err) ||
        mtf_session_create(plan[c], comm, &options, &s[c], &err))
      fail_job(layout, &err);
  }
  int fused = plan[1]->stats.fused_product_adds, into[2] = {0, 0}; /* by einsums, by norm gradients */
  for (int i = 0; i < plan[1]->n_steps; i++)
    if (plan[1]->steps[i].accumulate) into[plan[1]->steps[i].op == MTF_OP_EINSUM ? 0 : 1]++;
  CHECK(plan[0]->stats.fused_product_adds == 0 && into[0] + into[1] == fused &&
        (want_fused < 0 || (fused == want_fused && into[0] >= 1 && into[1] >= 1)));
  double worst = 0.0;
  int bitwise = 1;
  for (int run = 0; run < RUNS; run++) {
    static float value[2][3][B * T * D];
    int sizes[3] = {1, B * T * D, D * D};
    for (int c = 0; c < 2; c++) { /* no assigns: each run recomputes from the same variables, reusing buffers */
      if (mtf_session_run(s[c], &err)) fail_job("add run", &err);
      for (int f = 0; f < 3; f++)
        if (mtf_session_fetch(s[c], fetches[f], value[c][f], &err)) fail_job("add fetch", &err);
    }
    for (int f = 0; f < 3; f++) {
      double largest = 0.0, diff = 0.0;
      for (int i = 0; i < sizes[f]; i++) {
        largest = fmax(largest, fabs(value[0][f][i]));
        diff = worse(diff, fabs(value[1][f][i] - value[0][f][i]));
      }
      bitwise &= memcmp(value[0][f], value[1][f], sizeof(float) * (size_t)sizes[f]) == 0;
      worst = worse(worst, diff / (largest > 0.0 ? largest : 1.0));
    }
  }
  int ok = worst < 1e-6;
  CHECK(ok);
  if (rank == 0)
    printf("%s adds into their producers, layout '%s': %d add(s) fused (%d into products, %d into norm gradients); %d "
           "runs, loss and gradients within %.1e of the unfused plan's%s\n",
           ok ? "ok  " : "FAIL", layout, fused, into[0], into[1], RUNS, worst, bitwise ? " (bit for bit)" : "");
  for (int c = 0; c < 2; c++) {
    mtf_session_destroy(s[c]);
    mtf_plan_destroy(plan[c]);
  }
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_shape mesh = shape_of(argc > 1 ? argv[1] : "m:1");
  mtf_comm *comm;
  mtf_error err;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail_job("comm", &err);
  run_case(0.0f, 0, "", 1, 1, 0, &mesh, comm, rank);
  run_case(0.0f, 0, "", 0, 1, 0, &mesh, comm, rank);
  run_case(0.0f, 0, "b:m", 0, 1, 0, &mesh, comm, rank); /* with the loss's allreduce moved after the gradient */
  run_case(0.0f, 0, "b:m", 1, 1, 0, &mesh, comm, rank);
  run_case(0.0f, 1, "", 0, 0, 1, &mesh, comm, rank);    /* dy from the loss: not merged, the gradient reads it */
  run_case(0.0f, 1, "b:m", 1, 0, 1, &mesh, comm, rank);
  run_case(0.0f, 0, "v:m", 0, 0, 0, &mesh, comm, rank); /* a vocab laid out split: the gradient's phases, not fused */
  run_case(1e-3f, 0, "", 0, 0, 0, &mesh, comm, rank);   /* a z-loss: the loss is not lse - x[label] */
  run_scatter_case("", 1, &mesh, comm, rank);
  run_scatter_case("b:m", -1, &mesh, comm, rank); /* split batch: fused where the partial sums allow it */
  run_scatter_case("v:m", -1, &mesh, comm, rank);
  run_add_case("", 2, &mesh, comm, rank);    /* the products' sum and the norm's gradient with the residual's */
  run_add_case("b:m", -1, &mesh, comm, rank);
  mtf_comm_destroy(comm);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
