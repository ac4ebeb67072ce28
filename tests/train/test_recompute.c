/* Recompute blocks (mtf_gradients_recompute): the same gradients as mtf_gradients, bit for bit, on a
 * stack of residual blocks with dropout, norms, softmax and einsums; a lower planned peak; and in the
 * recomputing plan no activation inside a block stays alive into the backward pass (the planner frees
 * the originals during the forward pass because only forward ops read them). Without recompute the
 * block marks change nothing. Blocks do not nest. Runs on the job's ranks over mesh argv[1] with layout
 * argv[2] (e.g. "m:2" "f:m"). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "mtf.h"

enum { LAYERS = 4, MAX_VARS = 3 * LAYERS };

typedef struct stack {
  mtf_graph *g;
  mtf_tensor loss, vars[MAX_VARS], grads[MAX_VARS];
  int n_vars, forward_nodes; /* nodes before the backward pass */
} stack;

static mtf_shape shape(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "test", &s, NULL);
  return s;
}

/* marks: wrap each layer in a recompute block; recompute: differentiate with mtf_gradients_recompute. */
static void build(stack *s, int marks, int recompute) {
  memset(s, 0, sizeof *s);
  mtf_graph *g = s->g = mtf_graph_create(11);
  mtf_shape act = shape("batch:4,length:8,d:16"), hidden = shape("batch:4,length:8,f:32"), scalar = {0};
  mtf_shape w1s = shape("d:16,f:32"), w2s = shape("f:32,d:16"), ds = shape("d:16");
  mtf_tensor x = mtf_variable(g, "x", &act, MTF_INIT_NORMAL, 1.0f);
  for (int l = 0; l < LAYERS; l++) {
    char name[32];
    if (marks) mtf_recompute_begin(g);
    snprintf(name, sizeof name, "l%d/w1", l);
    mtf_tensor w1 = s->vars[s->n_vars++] = mtf_variable(g, name, &w1s, MTF_INIT_NORMAL, 0.25f);
    snprintf(name, sizeof name, "l%d/w2", l);
    mtf_tensor w2 = s->vars[s->n_vars++] = mtf_variable(g, name, &w2s, MTF_INIT_NORMAL, 0.2f);
    snprintf(name, sizeof name, "l%d/scale", l);
    mtf_tensor scale = s->vars[s->n_vars++] = mtf_variable(g, name, &ds, MTF_INIT_ONES, 1.0f);
    mtf_tensor h = mtf_rms_norm(g, x, "d", scale, 1e-6f);
    mtf_tensor a = mtf_dropout(g, mtf_gelu(g, mtf_einsum2(g, h, w1, &hidden)), 0.2f, 100 + (uint64_t)l);
    mtf_tensor p = mtf_softmax(g, a, "f");
    x = mtf_add(g, x, mtf_einsum2(g, mtf_multiply(g, p, a), w2, &act));
    if (marks) mtf_recompute_end(g);
  }
  s->loss = mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, x), &scalar), 1.0f / 512);
  s->forward_nodes = mtf_graph_status(g, NULL) == MTF_OK ? g->n_nodes : 0;
  if (recompute) mtf_gradients_recompute(g, s->loss, s->n_vars, s->vars, s->grads);
  else mtf_gradients(g, s->loss, s->n_vars, s->vars, s->grads);
}

static mtf_plan *plan_of(const stack *s, const mtf_shape *mesh, const mtf_layout_rules *rules, int rank) {
  mtf_tensor fetches[1 + MAX_VARS];
  fetches[0] = s->loss;
  memcpy(fetches + 1, s->grads, sizeof(mtf_tensor) * (size_t)s->n_vars);
  mtf_plan *plan = NULL;
  mtf_error err;
  if (mtf_plan_create(s->g, mesh, rules, rank, 1 + s->n_vars, fetches, &plan, &err) != MTF_OK)
    fprintf(stderr, "plan: %s\n", err.msg);
  return plan;
}

/* Runs the plan twice (random offsets 1 and 2) and fetches loss and gradients of the second run. */
static float *run(const stack *s, mtf_plan *plan, mtf_comm *comm, int64_t *n_out) {
  int64_t n = 1;
  for (int i = 0; i < s->n_vars; i++) n += mtf_shape_num_elements(mtf_tensor_shape(s->g, s->vars[i]));
  float *out = calloc((size_t)n, sizeof(float));
  mtf_session *session;
  mtf_error err;
  int rc = mtf_session_create(plan, comm, &(mtf_session_options){.poison_freed = 1}, &session, &err);
  /* (mtf_session_set_microbatch refuses what does not exist; count 1 is the default numbering.) */
  CHECK(rc != MTF_OK || mtf_session_set_microbatch(session, "batch", 2, 2, &err) == MTF_ERR_INVALID);
  CHECK(rc != MTF_OK || mtf_session_set_microbatch(session, "not a dim", 0, 2, &err) == MTF_ERR_INVALID);
  CHECK(rc != MTF_OK || mtf_session_set_microbatch(session, NULL, 0, 1, &err) == MTF_OK);
  for (int r = 1; r <= 2 && rc == MTF_OK; r++) {
    mtf_session_set_random_offset(session, (uint64_t)r);
    rc = mtf_session_run(session, &err);
  }
  int64_t at = 1;
  if (rc == MTF_OK) rc = mtf_session_fetch(session, s->loss, out, &err);
  for (int i = 0; i < s->n_vars && rc == MTF_OK; i++) {
    rc = mtf_session_fetch(session, s->grads[i], out + at, &err);
    at += mtf_shape_num_elements(mtf_tensor_shape(s->g, s->vars[i]));
  }
  if (rc != MTF_OK) fprintf(stderr, "run: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  if (rc == MTF_OK) mtf_session_destroy(session);
  *n_out = n;
  return out;
}

/* Arena buffers of forward nodes inside a block, read only inside it, that are alive at the first step of
 * the backward pass (there should be none when recomputing). */
static int internal_alive_in_backward(const stack *s, const mtf_plan *p) {
  const mtf_graph *g = s->g;
  int first_backward = p->n_steps;
  for (int i = 0; i < p->n_steps; i++)
    if (p->steps[i].node >= s->forward_nodes) {
      first_backward = i;
      break;
    }
  char *outside = calloc((size_t)s->forward_nodes, 1); /* read by a node of another block (a block output) */
  for (int j = 0; j < g->n_nodes; j++)
    for (int k = 0; k < g->nodes[j].n_inputs; k++) {
      int i = g->nodes[j].inputs[k];
      if (i < s->forward_nodes && g->nodes[j].block != g->nodes[i].block && j < s->forward_nodes) outside[i] = 1;
    }
  int alive = 0;
  for (int i = 0; i < s->forward_nodes; i++) {
    int b = p->value_buffer[i];
    if (!g->nodes[i].block || outside[i] || b < 0 || p->buffers[b].kind != MTF_BUF_ARENA) continue;
    alive += p->buffers[b].last_step >= first_backward;
  }
  free(outside);
  return alive;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_shape mesh = shape(argc > 1 ? argv[1] : "m:1");
  mtf_layout_rules rules = {0};
  mtf_error err;
  mtf_comm *comm = NULL;
  if (mtf_layout_rules_parse(argc > 2 ? argv[2] : "", &rules, &err) ||
      mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) {
    fprintf(stderr, "setup: %s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  stack plain, marked, recomputed;
  build(&plain, 0, 0);
  build(&marked, 1, 0);
  build(&recomputed, 1, 1);
  CHECK(mtf_graph_status(plain.g, NULL) == MTF_OK && mtf_graph_status(marked.g, NULL) == MTF_OK);
  CHECK(mtf_graph_status(recomputed.g, &err) == MTF_OK);
  mtf_plan *p0 = plan_of(&plain, &mesh, &rules, comm->rank), *p1 = plan_of(&marked, &mesh, &rules, comm->rank),
           *p2 = plan_of(&recomputed, &mesh, &rules, comm->rank);
  CHECK(p0 && p1 && p2);
  if (!p0 || !p1 || !p2) MPI_Abort(MPI_COMM_WORLD, 2);

  /* The marks alone change nothing: same steps, same arena. */
  CHECK(p0->n_steps == p1->n_steps && p0->arena_elements == p1->arena_elements);
  const mtf_plan_stats *a = mtf_plan_get_stats(p0), *b = mtf_plan_get_stats(p2);
  if (rank == 0)
    printf("peak %lld bytes (%d steps, %lld FLOPs) without recompute, %lld bytes (%d steps, %lld FLOPs) with\n",
           (long long)a->peak_bytes, a->steps, (long long)a->flops, (long long)b->peak_bytes, b->steps,
           (long long)b->flops);
  CHECK(b->peak_bytes < a->peak_bytes);
  CHECK(b->flops > a->flops); /* the forward pass of every block runs twice */
  int kept = internal_alive_in_backward(&marked, p1), leaked = internal_alive_in_backward(&recomputed, p2);
  if (rank == 0) printf("block activations alive into the backward pass: %d without recompute, %d with\n", kept, leaked);
  CHECK(kept > 0); /* the check can see them */
  CHECK(leaked == 0);

  /* Same numbers, bit for bit: the copies run the same kernels on the same values (dropout included). */
  int64_t n0, n2;
  float *v0 = run(&plain, p0, comm, &n0), *v2 = run(&recomputed, p2, comm, &n2);
  CHECK(n0 == n2);
  int differ = 0;
  for (int64_t e = 0; e < n0 && n0 == n2; e++) differ += v0[e] != v2[e] || !isfinite(v0[e]);
  if (rank == 0) printf("loss %.6f; %d of %lld values differ\n", v0[0], differ, (long long)n0);
  CHECK(differ == 0);
  free(v0);
  free(v2);

  /* Blocks do not nest. */
  mtf_graph *g = mtf_graph_create(1);
  CHECK(mtf_recompute_begin(g) == 1);
  CHECK(mtf_recompute_begin(g) == 0);
  CHECK(mtf_graph_status(g, &err) == MTF_ERR_INVALID && strstr(err.msg, "do not nest"));
  mtf_graph_destroy(g);

  mtf_plan_destroy(p0);
  mtf_plan_destroy(p1);
  mtf_plan_destroy(p2);
  mtf_graph_destroy(plain.g);
  mtf_graph_destroy(marked.g);
  mtf_graph_destroy(recomputed.g);
  int status = check_mpi_summary();
  mtf_comm_destroy(comm);
  MPI_Finalize();
  return status;
}
