/* AdamW in one pass (lower/fuse_moments.c, mtf_plan_options.fuse_optimizer): each adam_update runs its slots'
 * moving averages itself and their own steps are skipped. Against the same graph planned without fusion (its own
 * session and variables, the same initial values), on the backend of argv[2] (cpu, or cuda-emu where linked in):
 * the loss, every weight and every slot equal bit for bit after each of several runs, with the hidden dim whole
 * and split over the job's mesh (argv[1]); the plan fuses exactly the two AdamW variables, not the SGD one; a
 * slot read between its moving average and the update (a fetch of m' before the update would see it) keeps
 * that variable unfused.
 * With a bf16 run's gradient norm (mtf_graph_set_policy_sums, built after the updates) and fuse_grad_norm on cpu:
 * the two AdamW updates sum their gradients' squares and those einsums are skipped, the SGD variable's stays;
 * the norm, loss and weights equal the plan without that fusion bit for bit, and the norm equals a double
 * computation from the fetched gradients within 1e-6. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "mtf.h"

enum { B = 4, D = 8, H = 12, E = 8, RUNS = 5 };

static mtf_shape shape_of(const char *text) {
  mtf_shape s;
  mtf_error err;
  if (mtf_shape_parse(text, "test", &s, &err)) fail_job("shape", &err);
  return s;
}

typedef struct model {
  mtf_graph *g;
  mtf_tensor x, lr, step, loss, w[3], slots[2][2], read_m, grads[3], norm;
} model;

/* loss = sum(((x w1) w2) w3)^2 / B; AdamW on w1 and w2, SGD on w3. With `read_slot`, a fetched value reads w2's
 * new m before w2's update, which must then stay three passes. */
static model build(int read_slot, int with_norm) {
  model m;
  m.g = mtf_graph_create(13);
  mtf_graph *g = m.g;
  mtf_shape xs = shape_of("b:4,d:8"), w1s = shape_of("d:8,h:12"), w2s = shape_of("h:12,e:8"), w3s = shape_of("e:8,f:4");
  mtf_shape hs = shape_of("b:4,h:12"), es = shape_of("b:4,e:8"), zs = shape_of("b:4,f:4"), scalar = {0};
  m.x = mtf_input(g, "x", &xs);
  m.lr = mtf_input(g, "lr", &scalar);
  m.step = mtf_input(g, "step", &scalar);
  m.w[0] = mtf_variable(g, "w1", &w1s, MTF_INIT_NORMAL, 0.5f);
  m.w[1] = mtf_variable(g, "w2", &w2s, MTF_INIT_NORMAL, 0.5f);
  m.w[2] = mtf_variable(g, "w3", &w3s, MTF_INIT_NORMAL, 0.5f);
  mtf_tensor z = mtf_einsum2(g, mtf_einsum2(g, mtf_einsum2(g, m.x, m.w[0], &hs), m.w[1], &es), m.w[2], &zs);
  m.loss = mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, z), &scalar), 1.0f / B);
  mtf_tensor *grads = m.grads;
  if (mtf_gradients(g, m.loss, 3, m.w, grads) != MTF_OK) fail_job("gradients", NULL);
  mtf_assign(g, m.w[2], mtf_subtract(g, m.w[2], mtf_multiply(g, grads[2], m.lr)));
  m.read_m = MTF_NO_TENSOR;
  for (int i = 0; i < 2; i++) {
    char name[32];
    const mtf_shape *shape = mtf_tensor_shape(g, m.w[i]);
    snprintf(name, sizeof name, "w%d/m", i + 1);
    m.slots[i][0] = mtf_variable(g, name, shape, MTF_INIT_ZEROS, 0.0f);
    snprintf(name, sizeof name, "w%d/v", i + 1);
    m.slots[i][1] = mtf_variable(g, name, shape, MTF_INIT_ZEROS, 0.0f);
    mtf_tensor new_m = mtf_moving_average(g, m.slots[i][0], grads[i], MTF_NO_TENSOR, 0.9f, 1, 0.0f);
    mtf_tensor new_v = mtf_moving_average(g, m.slots[i][1], grads[i], MTF_NO_TENSOR, 0.999f, 2, 0.0f);
    if (read_slot && i == 1) m.read_m = mtf_reduce_sum(g, new_m, &scalar);
    mtf_assign(g, m.slots[i][0], new_m);
    mtf_assign(g, m.slots[i][1], new_v);
    mtf_assign(g, m.w[i], mtf_adam_update(g, m.w[i], new_m, new_v, m.lr, m.step, 0.9f, 0.999f, 1e-8f, 0.01f));
  }
  m.norm = MTF_NO_TENSOR;
  if (with_norm) { /* as train/optimizer.c builds a bf16 run's norm without clipping: after the updates */
    mtf_tensor sum = MTF_NO_TENSOR;
    for (int i = 0; i < 3; i++) {
      mtf_graph_set_policy_sums(g, 1);
      mtf_tensor part = mtf_einsum2(g, grads[i], grads[i], &scalar);
      mtf_graph_set_policy_sums(g, 0);
      sum = i == 0 ? part : mtf_add(g, sum, part);
    }
    m.norm = mtf_sqrt(g, sum);
  }
  mtf_error err;
  if (mtf_graph_status(g, &err)) fail_job("graph", &err);
  return m;
}

static int fused_steps(const mtf_plan *p) {
  int n = 0;
  for (int i = 0; i < p->n_steps; i++) n += p->steps[i].fused;
  return n;
}

static void run_case(const char *backend, const char *layout, int read_slot, const mtf_shape *mesh, mtf_comm *comm,
                     int rank) {
  model m = build(read_slot, 0);
  mtf_error err;
  mtf_layout_rules rules;
  mtf_plan *plan[2];
  mtf_session *s[2];
  mtf_session_options options = {.backend = backend, .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job(layout, &err);
  mtf_tensor fetches[2] = {m.loss, m.read_m};
  int n_fetches = read_slot ? 2 : 1;
  for (int c = 0; c < 2; c++) { /* c = 1: fused */
    mtf_plan_options po = {.fuse_optimizer = c};
    if (mtf_plan_create_with_options(m.g, mesh, &rules, rank, n_fetches, fetches, &po, &plan[c], &err) ||
        mtf_session_create(plan[c], comm, &options, &s[c], &err))
      fail_job(layout, &err);
  }
  int want = read_slot ? 1 : 2; /* adam_update steps fused: w1 and w2, or w1 alone when w2's m' is read */
  CHECK(plan[0]->stats.fused_optimizer_updates == 0 && fused_steps(plan[0]) == 0);
  CHECK(plan[1]->stats.fused_optimizer_updates == want && fused_steps(plan[1]) == 2 * want);
  int same = 1;
  for (int run = 0; run < RUNS; run++) {
    float step = (float)(run + 1), lr = 0.05f, x[B * D], loss[2];
    static float vars[2][8][D * H]; /* w1..w3 and the four slots, each at most D x H elements */
    for (int i = 0; i < B * D; i++) x[i] = (float)((i * 7 + run * 3) % 11) * 0.2f - 1.0f;
    for (int c = 0; c < 2; c++) {
      if (mtf_session_set_input(s[c], m.x, x, &err) || mtf_session_set_input(s[c], m.lr, &lr, &err) ||
          mtf_session_set_input(s[c], m.step, &step, &err) || mtf_session_run(s[c], &err) ||
          mtf_session_fetch(s[c], m.loss, &loss[c], &err))
        fail_job("run", &err);
      mtf_tensor all[7] = {m.w[0], m.w[1], m.w[2], m.slots[0][0], m.slots[0][1], m.slots[1][0], m.slots[1][1]};
      memset(vars[c], 0, sizeof vars[c]);
      for (int k = 0; k < 7; k++)
        if (mtf_session_fetch(s[c], all[k], vars[c][k], &err)) fail_job("fetch", &err);
    }
    int equal = memcmp(&loss[0], &loss[1], sizeof(float)) == 0 && memcmp(vars[0], vars[1], sizeof vars[0]) == 0;
    if (!equal && rank == 0)
      fprintf(stderr, "%s layout '%s' run %d: fused loss %.9g, unfused %.9g, or a variable differs\n", backend,
              layout, run, loss[1], loss[0]);
    same &= equal;
  }
  CHECK(same);
  if (rank == 0)
    printf("%s %s layout '%s'%s: %d of 2 AdamW updates fused; %d runs, loss, weights and slots equal bit for bit\n",
           same ? "ok  " : "FAIL", backend, layout, read_slot ? ", w2's m' read" : "", want, RUNS);
  for (int c = 0; c < 2; c++) {
    mtf_session_destroy(s[c]);
    mtf_plan_destroy(plan[c]);
  }
  mtf_graph_destroy(m.g);
}

/* The gradient norm's squares summed by the fused updates (fuse_grad_norm) against the same plan without. */
static void run_norm_case(const char *layout, const mtf_shape *mesh, mtf_comm *comm, int rank) {
  model m = build(0, 1);
  mtf_error err;
  mtf_layout_rules rules;
  mtf_plan *plan[2];
  mtf_session *s[2];
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job(layout, &err);
  mtf_tensor fetches[5] = {m.loss, m.norm, m.grads[0], m.grads[1], m.grads[2]};
  for (int c = 0; c < 2; c++) { /* c = 1: the squares fused; c = 0 fetches the gradients for the reference */
    mtf_plan_options po = {.fuse_optimizer = 1, .fuse_grad_norm = c};
    if (mtf_plan_create_with_options(m.g, mesh, &rules, rank, c ? 2 : 5, fetches, &po, &plan[c], &err) ||
        mtf_session_create(plan[c], comm, &options, &s[c], &err))
      fail_job(layout, &err);
  }
  CHECK(plan[0]->stats.fused_grad_norm_squares == 0 && plan[0]->stats.fused_optimizer_updates == 2);
  CHECK(plan[1]->stats.fused_grad_norm_squares == 2 && fused_steps(plan[1]) == 2 * 2 + 2);
  int same = 1;
  double worst = 0.0;
  for (int run = 0; run < RUNS; run++) {
    float step = (float)(run + 1), lr = 0.05f, x[B * D], loss[2], norm[2];
    static float vars[2][3][D * H], grads[3][D * H];
    for (int i = 0; i < B * D; i++) x[i] = (float)((i * 5 + run * 3) % 13) * 0.15f - 0.9f;
    for (int c = 0; c < 2; c++) {
      if (mtf_session_set_input(s[c], m.x, x, &err) || mtf_session_set_input(s[c], m.lr, &lr, &err) ||
          mtf_session_set_input(s[c], m.step, &step, &err) || mtf_session_run(s[c], &err) ||
          mtf_session_fetch(s[c], m.loss, &loss[c], &err) || mtf_session_fetch(s[c], m.norm, &norm[c], &err))
        fail_job("run", &err);
      memset(vars[c], 0, sizeof vars[c]);
      for (int k = 0; k < 3; k++)
        if (mtf_session_fetch(s[c], m.w[k], vars[c][k], &err)) fail_job("fetch", &err);
    }
    double squares = 0.0;
    for (int k = 0; k < 3; k++) {
      int64_t n = mtf_shape_num_elements(mtf_tensor_shape(m.g, m.grads[k]));
      if (mtf_session_fetch(s[0], m.grads[k], grads[k], &err)) fail_job("fetch", &err);
      for (int64_t i = 0; i < n; i++) squares += (double)grads[k][i] * grads[k][i];
    }
    double error = fabs(norm[1] - sqrt(squares)) / sqrt(squares);
    if (!(error <= worst)) worst = error; /* a NaN stays (fmax would drop it) */
    int equal = memcmp(loss, loss + 1, sizeof(float)) == 0 && memcmp(norm, norm + 1, sizeof(float)) == 0 &&
                memcmp(vars[0], vars[1], sizeof vars[0]) == 0;
    if (!equal && rank == 0)
      fprintf(stderr, "layout '%s' run %d: norm fused %.9g, unfused %.9g, or the loss or a weight differs\n", layout,
              run, norm[1], norm[0]);
    same &= equal;
  }
  CHECK(same && worst < 1e-6);
  if (rank == 0)
    printf("%s cpu layout '%s': the norm's squares of 2 AdamW gradients summed by their updates; %d runs, norm, loss "
           "and weights equal bit for bit, norm within %.1e of the double sum\n",
           same && worst < 1e-6 ? "ok  " : "FAIL", layout, RUNS, worst);
  for (int c = 0; c < 2; c++) {
    mtf_session_destroy(s[c]);
    mtf_plan_destroy(plan[c]);
  }
  mtf_graph_destroy(m.g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_shape mesh = shape_of(argc > 1 ? argv[1] : "m:1");
  const char *backend = argc > 2 ? argv[2] : "cpu";
  mtf_comm *comm;
  mtf_error err;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail_job("comm", &err);
  run_case(backend, "", 0, &mesh, comm, rank);
  run_case(backend, "h:m", 0, &mesh, comm, rank);
  run_case(backend, "", 1, &mesh, comm, rank);
  if (strcmp(backend, "cpu") == 0) { /* cpu's adam_update kernel sums the squares (mtf_plan_options.fuse_grad_norm) */
    run_norm_case("", &mesh, comm, rank);
    run_norm_case("h:m", &mesh, comm, rank);
  }
  mtf_comm_destroy(comm);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
