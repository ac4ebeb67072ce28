/* bfloat16 weight copies (lower/weight_copies.c, mtf_plan_options.bf16_weight_copies): under the bf16 policy each
 * weight's last writer also writes the weight's bfloat16 copy (w1's adam_update in its kernel, w2's SGD update,
 * a subtract, through the executor's cast right after it), and the weight's cast runs only while that copy
 * is stale. Against the same graph planned without copies (its own session and variables, the same initial
 * values): the loss and every variable equal bit for bit over several runs, also after write_variable changes a
 * weight between runs (its copy is stale then: the cast must run again) and after another session sharing the
 * variables has run (one that shares them through a third session: the owner is the first). The plan marks exactly the weights' casts and keeps their buffers for the whole run. On
 * the job's mesh (argv[1], one axis), with the hidden dim whole and split. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "mtf.h"

enum { B = 4, D = 8, H = 12, RUNS = 5 };

static mtf_shape shape_of(const char *text) {
  mtf_shape s;
  mtf_error err;
  if (mtf_shape_parse(text, "test", &s, &err)) fail_job("shape", &err);
  return s;
}

typedef struct model {
  mtf_graph *g;
  mtf_tensor x, lr, step, loss, w[2];
} model;

/* loss = sum((x w1) w2)^2 / B under the bf16 policy, AdamW on w1, SGD on w2. */
static model build(void) {
  model m;
  m.g = mtf_graph_create(11);
  mtf_graph *g = m.g;
  mtf_graph_set_matmul_dtype(g, MTF_BF16);
  mtf_shape xs = shape_of("b:4,d:8"), w1s = shape_of("d:8,h:12"), w2s = shape_of("h:12,e:8"), hs = shape_of("b:4,h:12");
  mtf_shape zs = shape_of("b:4,e:8"), scalar = {0};
  m.x = mtf_input(g, "x", &xs);
  m.lr = mtf_input(g, "lr", &scalar);
  m.step = mtf_input(g, "step", &scalar);
  m.w[0] = mtf_variable(g, "w1", &w1s, MTF_INIT_NORMAL, 0.5f);
  m.w[1] = mtf_variable(g, "w2", &w2s, MTF_INIT_NORMAL, 0.5f);
  mtf_tensor z = mtf_einsum2(g, mtf_einsum2(g, m.x, m.w[0], &hs), m.w[1], &zs);
  m.loss = mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, z), &scalar), 1.0f / B);
  mtf_tensor grads[2];
  if (mtf_gradients(g, m.loss, 2, m.w, grads) != MTF_OK) fail_job("gradients", NULL);
  mtf_assign(g, m.w[1], mtf_subtract(g, m.w[1], mtf_multiply(g, grads[1], m.lr)));
  for (int i = 0; i < 1; i++) {
    char name[32];
    const mtf_shape *shape = mtf_tensor_shape(g, m.w[i]);
    snprintf(name, sizeof name, "w%d/m", i + 1);
    mtf_tensor mom = mtf_variable(g, name, shape, MTF_INIT_ZEROS, 0.0f);
    snprintf(name, sizeof name, "w%d/v", i + 1);
    mtf_tensor var = mtf_variable(g, name, shape, MTF_INIT_ZEROS, 0.0f);
    mtf_tensor new_m = mtf_moving_average(g, mom, grads[i], MTF_NO_TENSOR, 0.9f, 1, 0.0f);
    mtf_tensor new_v = mtf_moving_average(g, var, grads[i], MTF_NO_TENSOR, 0.999f, 2, 0.0f);
    mtf_assign(g, mom, new_m);
    mtf_assign(g, var, new_v);
    mtf_assign(g, m.w[i], mtf_adam_update(g, m.w[i], new_m, new_v, m.lr, m.step, 0.9f, 0.999f, 1e-8f, 0.01f));
  }
  mtf_error err;
  if (mtf_graph_status(g, &err)) fail_job("graph", &err);
  return m;
}

/* The plan's marked casts and updates; each marked cast's buffer alive for the whole run. */
static void check_plan(const mtf_plan *p, int copies) {
  int skipped = 0, writers = 0, adam = 0;
  for (int i = 0; i < p->n_steps; i++) {
    const mtf_step *s = &p->steps[i];
    if (s->skip_when_copy_current) {
      skipped++;
      CHECK(s->kind == MTF_STEP_KERNEL && s->op == MTF_OP_CAST);
      CHECK(p->buffers[s->out].first_step == 0 && p->buffers[s->out].last_step == INT_MAX);
    }
    if (s->bf16_copy) {
      writers++;
      adam += s->kind == MTF_STEP_KERNEL && s->op == MTF_OP_ADAM_UPDATE;
      CHECK(p->buffers[s->bf16_copy - 1].dtype == MTF_BF16);
    }
  }
  CHECK(skipped == (copies ? 2 : 0) && writers == skipped && adam == writers / 2 &&
        p->stats.bf16_weight_copies == skipped);
}

static void run_case(const char *layout, const mtf_shape *mesh, mtf_comm *comm, int rank) {
  model m = build();
  mtf_error err;
  mtf_layout_rules rules;
  mtf_plan *plan[2], *eval, *eval2;
  mtf_session *s[2], *reader, *chained;
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_layout_rules_parse(layout, &rules, &err)) fail_job(layout, &err);
  for (int c = 0; c < 2; c++) { /* c = 1: with copies */
    mtf_plan_options po = {.bf16_storage = 1, .bf16_weight_copies = c};
    if (mtf_plan_create_with_options(m.g, mesh, &rules, rank, 1, &m.loss, &po, &plan[c], &err) ||
        mtf_session_create(plan[c], comm, &options, &s[c], &err))
      fail_job(layout, &err);
    check_plan(plan[c], c);
  }
  /* A second session on the copies session's variables, which writes them (an update without the optimizer's
   * copies: its own plan of the same graph). */
  mtf_session_options shared = options;
  shared.share_variables_with = s[1];
  mtf_plan_options plain = {.bf16_storage = 1};
  if (mtf_plan_create_with_options(m.g, mesh, &rules, rank, 1, &m.loss, &plain, &eval, &err) ||
      mtf_session_create(eval, comm, &shared, &reader, &err))
    fail_job("shared session", &err);
  mtf_session_options chain = options; /* shares s[1]'s variables through reader */
  chain.share_variables_with = reader;
  if (mtf_plan_create_with_options(m.g, mesh, &rules, rank, 1, &m.loss, &plain, &eval2, &err) ||
      mtf_session_create(eval2, comm, &chain, &chained, &err))
    fail_job("chained session", &err);

  /* Both sessions start from the same values (initialised from the graph's seed and global indices). */
  float init[2][2][D * H], x[B * D], lr = 0.05f;
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 2; i++)
      if (mtf_session_fetch(s[c], m.w[i], init[c][i], &err)) fail_job("fetch", &err);
  CHECK(memcmp(init[0], init[1], sizeof init[0]) == 0);
  /* This rank's slice of w1 [d, h] with h whole or split over the mesh (layout "h:m"). */
  int64_t parts = layout[0] ? mesh->dims[0].size : 1, h0 = layout[0] ? rank * (H / parts) : 0, hn = H / parts;
  int same = 1;
  for (int run = 0; run < RUNS; run++) {
    float step = (float)(run + 1), loss[2], w[2][2][D * H];
    for (int i = 0; i < B * D; i++) x[i] = (float)((i * 7 + run * 3) % 11) * 0.2f - 1.0f;
    if (run == 2) /* a weight changed from outside: the next run must cast it again */
      for (int c = 0; c < 2; c++) {
        float changed[D * H];
        for (int d = 0; d < D; d++)
          for (int h = 0; h < hn; h++) changed[d * hn + h] = init[0][0][d * H + h0 + h] * 0.5f + 0.01f * (float)h;
        if (mtf_session_write_variable(s[c], m.w[0], changed, &err)) fail_job("write", &err);
      }
    if (run == 3) { /* the sharing session updates the variables: s[1]'s copies are stale; s[0] runs alike */
      for (int c = 0; c < 2; c++) {
        mtf_session *who = c ? chained : s[0];
        if (mtf_session_set_input(who, m.x, x, &err) || mtf_session_set_input(who, m.lr, &lr, &err) ||
            mtf_session_set_input(who, m.step, &step, &err) || mtf_session_run(who, &err))
          fail_job("shared run", &err);
      }
    }
    for (int c = 0; c < 2; c++) {
      if (mtf_session_set_input(s[c], m.x, x, &err) || mtf_session_set_input(s[c], m.lr, &lr, &err) ||
          mtf_session_set_input(s[c], m.step, &step, &err) || mtf_session_run(s[c], &err) ||
          mtf_session_fetch(s[c], m.loss, &loss[c], &err) || mtf_session_fetch(s[c], m.w[0], w[c][0], &err) ||
          mtf_session_fetch(s[c], m.w[1], w[c][1], &err))
        fail_job("run", &err);
    }
    int equal = memcmp(&loss[0], &loss[1], sizeof(float)) == 0 && memcmp(w[0], w[1], sizeof w[0]) == 0;
    if (!equal && rank == 0)
      fprintf(stderr, "layout '%s' run %d: with copies loss %.9g, without %.9g\n", layout, run, loss[1], loss[0]);
    same &= equal;
  }
  CHECK(same);
  if (rank == 0) printf("%s layout '%s': %d runs, loss and weights equal bit for bit with and without copies\n",
                        same ? "ok  " : "FAIL", layout, RUNS);
  mtf_session_destroy(chained);
  mtf_plan_destroy(eval2);
  mtf_session_destroy(reader);
  mtf_plan_destroy(eval);
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
  mtf_comm *comm;
  mtf_error err;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail_job("comm", &err);
  run_case("", &mesh, comm, rank);
  run_case("h:m", &mesh, comm, rank);
  mtf_comm_destroy(comm);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
