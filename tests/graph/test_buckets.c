/* Gradient buckets (lower/buckets.c): the model block with an AdamW update (gradient-norm clipping on, so
 * one reader takes every gradient) on the mesh of argv[1], under data- and model-parallel layouts, with
 * bucket sizes from one gradient per bucket to one bucket for all. For each plan, without trusting the
 * planner:
 *  - every bucket has one START before one WAIT; no step between them touches memory of the bucket's
 *    range; its members lie in the range one after another; no two buffers alive together share memory
 *    (a member and its own range excepted); buckets respect the size limit unless a gradient is larger;
 *  - allreduces that are not weight gradients stay blocking steps, and the bucketed ones leave the plan;
 *  - three training steps give the same loss, gradient norm and variables as the unbucketed plan:
 *    bitwise where the buckets' groups have 2 ranks (a + b is the same sum in either order), within
 *    1e-6 relative otherwise (MPI may add 4 ranks' parts in another order for a different message size).
 * Poisoning freed buffers with NaN is on, so a buffer freed while its allreduce is in flight shows. */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "model_block.h"
#include "train/optimizer.h"

#define STEPS 3

static int world_rank;

typedef struct training {
  model_block m;
  mtf_tensor learning_rate, step, grad_norm;
} training;

static void build(training *t) {
  mtf_error err;
  if (model_block_build(&t->m, 0.0f, &err)) fail_job("graph", &err);
  mtf_shape scalar = {0};
  t->learning_rate = mtf_input(t->m.graph, "learning_rate", &scalar);
  t->step = mtf_input(t->m.graph, "step", &scalar);
  mtf_optimizer_config opt;
  mtf_optimizer_defaults(MTF_OPT_ADAMW, &opt);
  opt.clip_grad_norm = 0.5f;
  opt.weight_decay = 0.01f;
  if (mtf_optimizer_apply(t->m.graph, &opt, t->m.n_vars, t->m.vars, t->m.grads, t->learning_rate, t->step,
                          &t->grad_norm, &err))
    fail_job("optimizer", &err);
}

static int touches(const mtf_step *s, int buffer) {
  if (s->out == buffer || s->scratch == buffer) return 1;
  for (int k = 0; k < s->n_in; k++)
    if (s->in[k] == buffer) return 1;
  return 0;
}

static int shares_memory(const mtf_buffer *a, const mtf_buffer *b) {
  return a->kind == MTF_BUF_ARENA && b->kind == MTF_BUF_ARENA && a->offset < b->offset + b->elements &&
         b->offset < a->offset + a->elements;
}

static int count_kind(const mtf_plan *p, mtf_step_kind kind) {
  int n = 0;
  for (int i = 0; i < p->n_steps; i++) n += p->steps[i].kind == kind;
  return n;
}

/* The structural checks of the header on one bucketed plan; `plain` is the same plan unbucketed. */
static void check_plan(const mtf_plan *p, const mtf_plan *plain, int64_t bucket_bytes) {
  int bad_order = 0, touched_in_flight = 0, bad_members = 0, overlaps = 0, too_big = 0, members = 0;
  for (int k = 0; k < p->n_buckets; k++) {
    const mtf_bucket *bk = &p->buckets[k];
    const mtf_buffer *range = &p->buffers[bk->buffer];
    int starts = 0, waits = 0, start = -1, wait = -1;
    for (int i = 0; i < p->n_steps; i++) {
      const mtf_step *s = &p->steps[i];
      if (s->bucket != k || (s->kind != MTF_STEP_ALLREDUCE_START && s->kind != MTF_STEP_ALLREDUCE_WAIT)) continue;
      if (s->kind == MTF_STEP_ALLREDUCE_START) starts++, start = i;
      else waits++, wait = i;
    }
    bad_order += starts != 1 || waits != 1 || start >= wait || range->first_step > start || range->last_step < wait;
    for (int i = start + 1; i < wait; i++) {
      int list[MTF_MAX_OP_INPUTS + 2], n = 0;
      list[n++] = p->steps[i].out;
      for (int j = 0; j < p->steps[i].n_in; j++) list[n++] = p->steps[i].in[j];
      if (p->steps[i].scratch >= 0) list[n++] = p->steps[i].scratch;
      for (int j = 0; j < n; j++) touched_in_flight += shares_memory(&p->buffers[list[j]], range);
    }
    int64_t next = range->offset;
    for (int b = 0; b < p->n_buffers; b++) {
      const mtf_buffer *m = &p->buffers[b];
      if (m->bucket != k + 1) continue;
      members++;
      bad_members += m->offset != next || m->first_step > start || m->last_step < wait;
      next = m->offset + m->elements;
      for (int i = start + 1; i < wait; i++) touched_in_flight += touches(&p->steps[i], b);
    }
    bad_members += next != range->offset + range->elements || bk->elements != range->elements;
    /* Only a gradient larger than the limit makes a bucket larger than it, alone. */
    too_big += bk->n_members > 1 && bk->elements * (int64_t)sizeof(float) > bucket_bytes;
  }
  for (int i = 0; i < p->n_buffers; i++)
    for (int j = i + 1; j < p->n_buffers; j++) {
      const mtf_buffer *a = &p->buffers[i], *b = &p->buffers[j];
      int own_range = (a->bucket && p->buckets[a->bucket - 1].buffer == j) ||
                      (b->bucket && p->buckets[b->bucket - 1].buffer == i);
      int alive_together = a->first_step <= b->last_step && b->first_step <= a->last_step;
      overlaps += !own_range && alive_together && shares_memory(a, b);
    }
  CHECK(bad_order == 0);
  CHECK(touched_in_flight == 0);
  CHECK(bad_members == 0);
  CHECK(overlaps == 0);
  CHECK(too_big == 0);
  /* Each member was one blocking allreduce; all other allreduces are still there, in place. */
  CHECK(count_kind(p, MTF_STEP_ALLREDUCE) == count_kind(plain, MTF_STEP_ALLREDUCE) - members);
  CHECK(p->n_steps == plain->n_steps - members + 2 * p->n_buckets);
  CHECK(mtf_plan_get_stats(p)->comm_bytes[MTF_COLL_ALLREDUCE] ==
        mtf_plan_get_stats(plain)->comm_bytes[MTF_COLL_ALLREDUCE]);
}

typedef struct outcome {
  float loss[STEPS], grad_norm[STEPS];
  float *vars; /* every variable after the last step, concatenated */
  int64_t n;
} outcome;

static outcome train(const training *t, const mtf_plan *plan, mtf_comm *comm) {
  mtf_session *s;
  mtf_error err;
  mtf_session_options options = {.poison_freed = 1};
  if (mtf_session_create((mtf_plan *)plan, comm, &options, &s, &err)) fail_job("session", &err);
  outcome o = {0};
  const mtf_graph *g = t->m.graph;
  for (int i = 0; i < mtf_graph_num_variables(g); i++)
    o.n += mtf_shape_num_elements(mtf_tensor_shape(g, mtf_graph_variable(g, i)));
  o.vars = malloc(sizeof(float) * (size_t)o.n);
  float ids[16], labels[16];
  model_block_inputs(&t->m, ids, labels);
  for (int step = 0; step < STEPS; step++) {
    float lr = 0.01f * (float)(step + 1), t1 = (float)(step + 1);
    if (mtf_session_set_input(s, t->m.ids, ids, &err) || mtf_session_set_input(s, t->m.labels, labels, &err) ||
        mtf_session_set_input(s, t->learning_rate, &lr, &err) || mtf_session_set_input(s, t->step, &t1, &err) ||
        mtf_session_run(s, &err) || mtf_session_fetch(s, t->m.loss, &o.loss[step], &err) ||
        mtf_session_fetch(s, t->grad_norm, &o.grad_norm[step], &err))
      fail_job("run", &err);
  }
  int64_t at = 0;
  for (int i = 0; i < mtf_graph_num_variables(g); i++) {
    mtf_tensor v = mtf_graph_variable(g, i);
    if (mtf_session_fetch(s, v, o.vars + at, &err)) fail_job("fetch", &err);
    at += mtf_shape_num_elements(mtf_tensor_shape(g, v));
  }
  mtf_session_destroy(s);
  return o;
}

static double difference(const outcome *a, const outcome *b) {
  double worst = 0, scale = 1e-30;
  for (int64_t e = 0; e < b->n; e++) scale = fmax(scale, fabs(b->vars[e]));
  for (int64_t e = 0; e < b->n; e++) worst = fmax(worst, fabs((double)a->vars[e] - b->vars[e]) / scale);
  for (int i = 0; i < STEPS; i++) {
    worst = fmax(worst, fabs((double)a->loss[i] - b->loss[i]) / fabs(b->loss[i]));
    worst = fmax(worst, fabs((double)a->grad_norm[i] - b->grad_norm[i]) / fabs(b->grad_norm[i]));
  }
  return worst;
}

static int bitwise_equal(const outcome *a, const outcome *b) {
  return memcmp(a->loss, b->loss, sizeof a->loss) == 0 && memcmp(a->grad_norm, b->grad_norm, sizeof a->grad_norm) == 0 &&
         memcmp(a->vars, b->vars, sizeof(float) * (size_t)a->n) == 0;
}

static void check_layout(const training *t, const mtf_shape *mesh, mtf_comm *comm, const char *layout_text,
                         int expect_buckets) {
  mtf_layout_rules rules;
  mtf_error err;
  if (mtf_layout_rules_parse(layout_text, &rules, &err)) fail_job("layout", &err);
  mtf_tensor fetches[2] = {t->m.loss, t->grad_norm};
  mtf_plan *plain;
  if (mtf_plan_create(t->m.graph, mesh, &rules, comm->rank, 2, fetches, &plain, &err)) fail_job("plan", &err);
  outcome reference = train(t, plain, comm);
  const int64_t sizes[] = {4, 600, 2048, (int64_t)1 << 30};
  int previous_buckets = INT_MAX;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    mtf_plan_options options = {.allreduce_bucket_bytes = sizes[i]};
    mtf_plan *plan;
    if (mtf_plan_create_with_options(t->m.graph, mesh, &rules, comm->rank, 2, fetches, &options, &plan, &err))
      fail_job("bucketed plan", &err);
    check_plan(plan, plain, sizes[i]);
    int group = 1;
    for (int k = 0; k < plan->n_buckets; k++) {
      int g = mtf_mesh_group_size(mesh, plan->buckets[k].axes);
      if (g > group) group = g;
    }
    outcome got = train(t, plan, comm);
    double worst = difference(&got, &reference);
    int same = bitwise_equal(&got, &reference);
    if (world_rank == 0)
      printf("%-32s buckets of %10lld bytes: %2d buckets (%3lld bytes in all), %3d blocking allreduces left; "
             "%d steps: %s (max relative difference %.1e)\n",
             layout_text, (long long)sizes[i], plan->n_buckets, (long long)plan->stats.bucketed_bytes,
             count_kind(plan, MTF_STEP_ALLREDUCE), STEPS, same ? "bitwise equal" : "not bitwise equal", worst);
    if (expect_buckets) CHECK(plan->n_buckets > 0);
    else CHECK(plan->n_buckets == 0);
    CHECK(plan->n_buckets <= previous_buckets); /* larger buckets, fewer of them */
    previous_buckets = plan->n_buckets;
    if (group <= 2) CHECK(same);
    CHECK(worst <= 1e-6);
    free(got.vars);
    mtf_plan_destroy(plan);
  }
  free(reference.vars);
  mtf_plan_destroy(plain);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  mtf_error err;
  mtf_shape mesh;
  if (argc != 2 || mtf_mesh_parse(argv[1], &mesh, &err)) {
    fprintf(stderr, "usage: test_buckets MESH\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mtf_comm *comm;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail_job("communicator", &err);
  training t;
  build(&t);
  const char *a = mesh.dims[0].name, *b = mesh.rank > 1 ? mesh.dims[1].name : mesh.dims[0].name;
  char layout[4 * MTF_NAME_MAX + 64];
  /* Data parallel: every weight gradient is summed over the batch axis. */
  snprintf(layout, sizeof layout, "batch:%s", a);
  check_layout(&t, &mesh, comm, layout, 1);
  /* Model parallel alone: the weight gradients need no sum; activations' allreduces stay blocking. */
  snprintf(layout, sizeof layout, "d_ff:%s;heads:%s;vocab:%s", b, b, b);
  check_layout(&t, &mesh, comm, layout, 0);
  if (mesh.rank > 1) {
    snprintf(layout, sizeof layout, "batch:%s;d_ff:%s;heads:%s;vocab:%s", a, b, b, b);
    check_layout(&t, &mesh, comm, layout, 1);
    snprintf(layout, sizeof layout, "batch:%s;d_model:%s", a, b);
    check_layout(&t, &mesh, comm, layout, 1);
    /* Gradients summed over both axes (batch and length split): groups of 4. */
    snprintf(layout, sizeof layout, "batch:%s;length:%s", a, b);
    check_layout(&t, &mesh, comm, layout, 1);
  }
  mtf_graph_destroy(t.m.graph);
  mtf_comm_destroy(comm);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
