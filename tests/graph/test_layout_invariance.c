/* The project's central property: the same graph gives the same loss, logits and gradients under every
 * valid layout as on one process. Runs the model block on the mesh given as argv[1] under layouts that
 * split, in turn, each of its dimensions (and combinations), and compares with a one-rank run computed
 * on every rank. Invalid layouts must be refused at plan time with the layout's message. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "model_block.h"

#define MAX_FETCH (2 + BLOCK_VARS)

typedef struct results {
  int n;
  float *values[MAX_FETCH];
  int64_t sizes[MAX_FETCH];
} results;

static int world_rank;
/* argv[2]: gradient bucket bytes of the layouts' plans (lower/buckets.c); 0 (default): blocking allreduces. */
static mtf_plan_options plan_options;

static int fetch_list(const model_block *m, mtf_tensor *fetches) {
  int n = 0;
  fetches[n++] = m->loss;
  fetches[n++] = m->logits;
  for (int v = 0; v < m->n_vars; v++) fetches[n++] = m->grads[v];
  return n;
}

static results run(const model_block *m, const mtf_shape *mesh, const mtf_layout_rules *rules, mtf_comm *comm,
                   mtf_plan_stats *stats) {
  mtf_tensor fetches[MAX_FETCH];
  int n = fetch_list(m, fetches);
  mtf_plan *plan;
  mtf_session *session;
  mtf_error err;
  if (mtf_plan_create_with_options(m->graph, mesh, rules, comm->rank, n, fetches, &plan_options, &plan, &err))
    fail_job("plan", &err);
  if (stats) *stats = *mtf_plan_get_stats(plan);
  mtf_session_options options = {.poison_freed = 1};
  if (mtf_session_create(plan, comm, &options, &session, &err)) fail_job("session", &err);
  float ids[16], labels[16];
  model_block_inputs(m, ids, labels);
  if (mtf_session_set_input(session, m->ids, ids, &err) || mtf_session_set_input(session, m->labels, labels, &err) ||
      mtf_session_run(session, &err))
    fail_job("run", &err);
  results r = {.n = n};
  for (int i = 0; i < n; i++) {
    r.sizes[i] = mtf_shape_num_elements(mtf_tensor_shape(m->graph, fetches[i]));
    r.values[i] = malloc(sizeof(float) * (size_t)r.sizes[i]);
    if (mtf_session_fetch(session, fetches[i], r.values[i], &err)) fail_job("fetch", &err);
  }
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  return r;
}

static void free_results(results *r) {
  for (int i = 0; i < r->n; i++) free(r->values[i]);
}

/* Largest difference relative to the reference tensor's largest magnitude, over all fetched tensors. */
static double worst_error(const results *got, const results *want, int *worst_index) {
  double worst = 0;
  for (int i = 0; i < want->n; i++) {
    double scale = 1e-30, diff = 0;
    for (int64_t e = 0; e < want->sizes[i]; e++) scale = fmax(scale, fabs(want->values[i][e]));
    for (int64_t e = 0; e < want->sizes[i]; e++) diff = fmax(diff, fabs((double)got->values[i][e] - want->values[i][e]));
    if (diff / scale > worst) {
      worst = diff / scale;
      *worst_index = i;
    }
  }
  return worst;
}

static void check_layout(const model_block *m, const mtf_shape *mesh, mtf_comm *comm, const results *reference,
                         const char *layout_text) {
  mtf_layout_rules rules;
  mtf_error err;
  if (mtf_layout_rules_parse(layout_text, &rules, &err)) fail_job("layout", &err);
  mtf_plan_stats stats;
  results r = run(m, mesh, &rules, comm, &stats);
  int worst_index = 0;
  double worst = worst_error(&r, reference, &worst_index);
  int64_t sent = 0;
  for (int k = 0; k < MTF_COLL_KINDS; k++) sent += stats.comm_bytes[k];
  if (world_rank == 0)
    printf("%-42s loss %.6f  max relative error %.2e (%s)  %5lld bytes sent per rank, peak %lld of %lld bytes, "
           "%d gradient buckets\n",
           layout_text, r.values[0][0], worst, worst_index < 2 ? (worst_index ? "logits" : "loss") : "a gradient",
           (long long)sent, (long long)stats.peak_bytes, (long long)stats.naive_bytes, stats.allreduce_buckets);
  CHECK(worst <= 1e-5);
  /* A layout that splits something over a real mesh axis must communicate. */
  if (mtf_mesh_size(mesh) > 1 && rules.count > 0) CHECK(sent > 0);
  free_results(&r);
}

static void check_refused(const model_block *m, const char *mesh_text, const char *layout_text, const char *fragment) {
  mtf_shape mesh;
  mtf_layout_rules rules;
  mtf_error err;
  mtf_mesh_parse(mesh_text, &mesh, NULL);
  mtf_layout_rules_parse(layout_text, &rules, NULL);
  mtf_tensor fetches[MAX_FETCH];
  int n = fetch_list(m, fetches);
  mtf_plan *plan = NULL;
  CHECK(mtf_plan_create(m->graph, &mesh, &rules, 0, n, fetches, &plan, &err) == MTF_ERR_LAYOUT);
  CHECK(plan == NULL);
  CHECK_CONTAINS(err.msg, fragment);
  if (world_rank == 0) printf("refused as expected: mesh %s, layout %s:\n  %s\n", mesh_text, layout_text, err.msg);
}


/* An einsum where each input sums a dimension of its own, both split over the same mesh axis: the partial
 * sums must not be added by one allreduce (sum_r A_r B_r is not (sum A)(sum B)). */
static void check_private_sums(const mtf_shape *mesh, mtf_comm *comm, mtf_comm *self) {
  mtf_graph *g = mtf_graph_create(5);
  mtf_shape xs, ws, out, scalar = {0};
  mtf_shape_parse("x:4,j:4", "x", &xs, NULL);
  mtf_shape_parse("k:4,y:4", "w", &ws, NULL);
  mtf_shape_parse("x:4,y:4", "out", &out, NULL);
  mtf_tensor vars[2] = {mtf_variable(g, "a", &xs, MTF_INIT_NORMAL, 1.0f), mtf_variable(g, "b", &ws, MTF_INIT_NORMAL, 1.0f)};
  mtf_tensor y = mtf_einsum2(g, vars[0], vars[1], &out), grads[2];
  mtf_tensor loss = mtf_reduce_sum(g, mtf_square(g, y), &scalar);
  mtf_gradients(g, loss, 2, vars, grads);
  mtf_tensor fetches[4] = {loss, y, grads[0], grads[1]};
  for (int a = 0; a < mesh->rank; a++) {
    char text[2 * MTF_NAME_MAX + 16];
    snprintf(text, sizeof text, "j:%s;k:%s", mesh->dims[a].name, mesh->dims[a].name);
    mtf_layout_rules rules, none = {0};
    mtf_layout_rules_parse(text, &rules, NULL);
    float got[16], want[16];
    double worst = 0;
    for (int f = 0; f < 4; f++) {
      for (int pass = 0; pass < 2; pass++) {
        mtf_plan *plan;
        mtf_session *s;
        mtf_error err;
        mtf_shape one = {0};
        mtf_comm *c = pass ? comm : self;
        if (mtf_plan_create(g, pass ? mesh : &one, pass ? &rules : &none, c->rank, 4, fetches, &plan, &err) ||
            mtf_session_create(plan, c, NULL, &s, &err) || mtf_session_run(s, &err) ||
            mtf_session_fetch(s, fetches[f], pass ? got : want, &err))
          fail_job("private sums", &err);
        mtf_session_destroy(s);
        mtf_plan_destroy(plan);
      }
      int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
      double scale = 1e-30;
      for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(want[e]));
      for (int64_t e = 0; e < n; e++) worst = fmax(worst, fabs((double)got[e] - want[e]) / scale);
    }
    if (world_rank == 0) printf("%-42s private sums on one axis: max relative error %.2e\n", text, worst);
    CHECK(worst <= 1e-5);
  }
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  mtf_error err;
  mtf_shape mesh, one = {0};
  if (argc < 2 || argc > 3 || mtf_mesh_parse(argv[1], &mesh, &err)) {
    fprintf(stderr, "usage: test_layout_invariance MESH [BUCKET_BYTES]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (argc == 3) plan_options.allreduce_bucket_bytes = atoll(argv[2]);
  mtf_comm *comm, *self;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err) || mtf_comm_mpi_create(MPI_COMM_SELF, &one, &self, &err))
    fail_job("communicator", &err);

  check_private_sums(&mesh, comm, self);
  for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
    model_block m;
    if (model_block_build(&m, with_dropout ? 0.2f : 0.0f, &err)) fail_job("graph", &err);
    mtf_layout_rules none = {0};
    results reference = run(&m, &one, &none, self, NULL);
    if (world_rank == 0) printf("== mesh %s, dropout %s: one-rank loss %.6f\n", argv[1], with_dropout ? "0.2" : "off",
                                reference.values[0][0]);
    /* Every dimension split on its own, over each mesh axis. */
    const char *dims[] = {"batch", "length", "memory_length", "d_model", "heads", "d_kv", "hd", "d_ff", "vocab"};
    for (int a = 0; a < mesh.rank; a++)
      for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        char layout[64];
        snprintf(layout, sizeof layout, "%s:%s", dims[d], mesh.dims[a].name);
        check_layout(&m, &mesh, comm, &reference, layout);
      }
    /* Pending sums of the d_model contractions wanted split by the k and v renames: reduce-scatters
     * (lower/reshard.c) in the forward pass, allgathers of the renamed gradients back. */
    for (int a = 0; a < mesh.rank; a++) {
      char layout[4 * MTF_NAME_MAX + 32];
      snprintf(layout, sizeof layout, "d_model:%s;memory_length:%s", mesh.dims[a].name, mesh.dims[a].name);
      check_layout(&m, &mesh, comm, &reference, layout);
    }
    /* Combinations on two-axis meshes. */
    if (mesh.rank == 2) {
      char layout[128];
      const char *combos[] = {"batch:%1$s;heads:%2$s;d_ff:%2$s;vocab:%2$s;hd:%2$s", "batch:%1$s;d_model:%2$s",
                              "length:%1$s;d_kv:%2$s", "batch:%1$s;length:%2$s", "length:%1$s;memory_length:%2$s",
                              "vocab:%1$s;d_ff:%2$s;heads:%1$s", "batch:%1$s;d_model:%2$s;memory_length:%2$s",
                              "d_model:%1$s;memory_length:%2$s"};
      for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
        snprintf(layout, sizeof layout, combos[c], mesh.dims[0].name, mesh.dims[1].name);
        check_layout(&m, &mesh, comm, &reference, layout);
      }
    }
    if (with_dropout == 0) {
      check_refused(&m, "m:4", "heads:m;d_kv:m",
                    "dimensions 'heads' (size 4) and 'd_kv' (size 4) are both mapped to mesh axis 'm' (size 4)");
      check_refused(&m, "b:2;m:2", "batch:b;length:b",
                    "tensor 'ids' [batch:4, length:4]: dimensions 'batch' (size 4) and 'length' (size 4) are both "
                    "mapped to mesh axis 'b' (size 2)");
      check_refused(&m, "m:3", "d_ff:m",
                    "dimension 'd_ff' (size 8) is split over mesh axis 'm' (size 3), which does not divide it");
      check_refused(&m, "b:2;m:2", "vocab:m;vocab:b", "dimension 'vocab' (size 16) is mapped to two mesh axes");
    }
    free_results(&reference);
    mtf_graph_destroy(m.graph);
  }
  int status = check_mpi_summary();
  mtf_comm_destroy(comm);
  mtf_comm_destroy(self);
  MPI_Finalize();
  return status;
}
