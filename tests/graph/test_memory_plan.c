/* The memory planner: peak well under the sum of all buffers, no two buffers alive at the same time share
 * memory, and poisoning every buffer with NaN after its last reader leaves all results unchanged. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "lower/plan.h"
#include "model_block.h"

static int live_buffers_overlap(const mtf_plan *p) {
  int overlaps = 0;
  for (int i = 0; i < p->n_buffers; i++)
    for (int j = i + 1; j < p->n_buffers; j++) {
      const mtf_buffer *a = &p->buffers[i], *b = &p->buffers[j];
      if (a->kind != MTF_BUF_ARENA || b->kind != MTF_BUF_ARENA) continue;
      int alive_together = a->first_step <= b->last_step && b->first_step <= a->last_step;
      int share_memory = a->offset < b->offset + b->elements && b->offset < a->offset + a->elements;
      overlaps += alive_together && share_memory;
    }
  return overlaps;
}

static void test_chain(mtf_comm *self) {
  mtf_graph *g = mtf_graph_create(7);
  mtf_shape shape, scalar = {0};
  mtf_shape_parse("a:64,b:64", "x", &shape, NULL);
  mtf_tensor x = mtf_variable(g, "x", &shape, MTF_INIT_NORMAL, 1.0f), y = x;
  for (int i = 0; i < 24; i++) y = mtf_tanh(g, mtf_scalar_multiply(g, y, 1.1f));
  mtf_tensor loss = mtf_reduce_sum(g, y, &scalar), grad;
  mtf_gradients(g, loss, 1, &x, &grad);
  mtf_layout_rules rules = {0};
  mtf_plan *plan;
  mtf_error err;
  /* Forward only: each activation dies as soon as the next is computed, so a few buffers suffice. */
  CHECK(mtf_plan_create(g, &scalar, &rules, 0, 1, &loss, &plan, &err) == MTF_OK);
  const mtf_plan_stats *stats = mtf_plan_get_stats(plan);
  printf("forward chain, %d steps: planned peak %lld bytes, sum of all buffers %lld bytes\n", stats->steps,
         (long long)stats->peak_bytes, (long long)stats->naive_bytes);
  CHECK(stats->peak_bytes <= 3 * 64 * 64 * 4);
  CHECK(stats->peak_bytes * 8 < stats->naive_bytes);
  CHECK(live_buffers_overlap(plan) == 0);
  mtf_plan_destroy(plan);

  /* Forward and backward: the backward pass reads every tanh output, so those stay alive. */
  mtf_tensor fetches[2] = {loss, grad};
  CHECK(mtf_plan_create(g, &scalar, &rules, 0, 2, fetches, &plan, &err) == MTF_OK);
  stats = mtf_plan_get_stats(plan);
  printf("forward and backward, %d steps: planned peak %lld bytes, sum of all buffers %lld bytes\n", stats->steps,
         (long long)stats->peak_bytes, (long long)stats->naive_bytes);
  CHECK(stats->peak_bytes * 4 < stats->naive_bytes);
  CHECK(live_buffers_overlap(plan) == 0);

  /* The gradient of the chain, by hand: prod over steps of 1.1 * (1 - tanh^2). */
  mtf_session *s;
  CHECK(mtf_session_create(plan, self, &(mtf_session_options){.poison_freed = 1}, &s, &err) == MTF_OK);
  CHECK(mtf_session_run(s, &err) == MTF_OK);
  const float *x0 = mtf_session_slice(s, x), *dx = mtf_session_slice(s, grad);
  int wrong = 0;
  for (int e = 0; e < 64 * 64; e += 97) {
    double v = x0[e], d = 1.0;
    for (int i = 0; i < 24; i++) {
      v = tanh(1.1 * v);
      d *= 1.1 * (1.0 - v * v);
    }
    wrong += fabs(d - dx[e]) > 1e-5 * fmax(1.0, fabs(d));
  }
  CHECK(wrong == 0);
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
}

static void test_poison_changes_nothing(mtf_comm *self) {
  model_block m;
  mtf_error err;
  CHECK(model_block_build(&m, 0.1f, &err) == MTF_OK);
  mtf_tensor fetches[2 + BLOCK_VARS];
  int n = 0;
  fetches[n++] = m.loss;
  for (int v = 0; v < m.n_vars; v++) fetches[n++] = m.grads[v];
  mtf_shape one = {0};
  mtf_layout_rules rules = {0};
  mtf_plan *plan;
  CHECK(mtf_plan_create(m.graph, &one, &rules, 0, n, fetches, &plan, &err) == MTF_OK);
  CHECK(live_buffers_overlap(plan) == 0);
  const mtf_plan_stats *stats = mtf_plan_get_stats(plan);
  printf("model block: %d steps, planned peak %lld bytes, sum of all buffers %lld bytes\n", stats->steps,
         (long long)stats->peak_bytes, (long long)stats->naive_bytes);
  CHECK(stats->peak_bytes * 2 < stats->naive_bytes);
  float ids[16], labels[16];
  model_block_inputs(&m, ids, labels);
  float *results[2];
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += mtf_shape_num_elements(mtf_tensor_shape(m.graph, fetches[i]));
  for (int poison = 0; poison < 2; poison++) {
    mtf_session *s;
    CHECK(mtf_session_create(plan, self, &(mtf_session_options){.poison_freed = poison}, &s, &err) == MTF_OK);
    mtf_session_set_input(s, m.ids, ids, &err);
    mtf_session_set_input(s, m.labels, labels, &err);
    CHECK(mtf_session_run(s, &err) == MTF_OK);
    results[poison] = malloc(sizeof(float) * (size_t)total);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
      int64_t size = mtf_shape_num_elements(mtf_tensor_shape(m.graph, fetches[i]));
      memcpy(results[poison] + at, mtf_session_slice(s, fetches[i]), sizeof(float) * (size_t)size);
      at += size;
    }
    mtf_session_destroy(s);
  }
  int nan_count = 0;
  for (int64_t i = 0; i < total; i++) nan_count += isnan(results[1][i]);
  CHECK(nan_count == 0);
  CHECK(memcmp(results[0], results[1], sizeof(float) * (size_t)total) == 0);
  free(results[0]);
  free(results[1]);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(m.graph);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mtf_shape one = {0};
  mtf_comm *self;
  mtf_error err;
  if (mtf_comm_mpi_create(MPI_COMM_SELF, &one, &self, &err)) return 2;
  test_chain(self);
  test_poison_changes_nothing(self);
  mtf_comm_destroy(self);
  MPI_Finalize();
  return check_summary();
}
