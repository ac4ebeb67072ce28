/* A sharded MLP trained with SGD on a synthetic regression task, written against libmtf's installed headers
 * only (mtf.h and core/rng.h): the example for using mtf as a library for models other than the
 * transformer.
 *
 *   mpiexec -n 4 mtf_example_mlp --mesh 'b:2;m:2' --layout 'batch:b;hidden:m' --steps 50
 *
 * The data are a function of the step number alone, and variables depend only on their names and the
 * seed, so every mesh and layout prints the same losses (up to float rounding). */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "mtf.h"

enum { BATCH = 32, D_IN = 16, HIDDEN = 64, D_OUT = 4 };

static void usage(FILE *out) {
  fprintf(out, "usage: mtf_example_mlp [--mesh SHAPE] [--layout RULES] [--steps N] [--lr RATE]\n"
               "  --mesh SHAPE    processor mesh (default: one axis 'b' over all ranks)\n"
               "  --layout RULES  e.g. 'batch:b;hidden:m' (default: 'batch:b')\n"
               "  --steps N       training steps (default 40)\n"
               "  --lr RATE       SGD learning rate (default 0.1)\n");
}

/* A fixed random "teacher" the MLP learns to imitate; inputs are a function of (step, row, column): uniform
 * in (-1, 1) from the library's counter-based generator. */
static double hashed(uint64_t a, uint64_t b, uint64_t c) { return 2.0 * mtf_uniform01(a, b, c) - 1.0; }

static void make_batch(int step, float *x, float *y) {
  for (int b = 0; b < BATCH; b++) {
    for (int i = 0; i < D_IN; i++) x[b * D_IN + i] = (float)hashed(1, (uint64_t)(step * BATCH + b), (uint64_t)i);
    for (int o = 0; o < D_OUT; o++) {
      double sum = 0;
      for (int i = 0; i < D_IN; i++) sum += x[b * D_IN + i] * hashed(2, (uint64_t)i, (uint64_t)o);
      y[b * D_OUT + o] = (float)tanh(sum * 0.5);
    }
  }
}

/* Ends the whole job: "mtf: rank k: what: message" (other ranks may be waiting in a collective). */
static void die(const char *what, const mtf_error *err) { mtf_world_abort(1, what, err); }

int main(int argc, char **argv) {
  static const struct option options[] = {{"mesh", required_argument, 0, 'm'}, {"layout", required_argument, 0, 'l'},
                                          {"steps", required_argument, 0, 's'}, {"lr", required_argument, 0, 'r'},
                                          {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *mesh_text = NULL, *layout_text = "batch:b";
  int steps = 40, opt;
  float lr = 0.1f;
  while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
    switch (opt) {
      case 'm': mesh_text = optarg; break;
      case 'l': layout_text = optarg; break;
      case 's': steps = atoi(optarg); break;
      case 'r': lr = (float)atof(optarg); break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  mtf_world_init(&argc, &argv);
  int rank = mtf_world_rank(), size = mtf_world_size();
  char default_mesh[32];
  snprintf(default_mesh, sizeof default_mesh, "b:%d", size);
  mtf_error err;
  mtf_shape mesh;
  mtf_layout_rules rules;
  mtf_comm *comm;
  /* The same arguments on every rank: these fail alike everywhere, so each rank can just return. */
  if (mtf_mesh_parse(mesh_text ? mesh_text : default_mesh, &mesh, &err) ||
      mtf_layout_rules_parse(layout_text, &rules, &err) || mtf_comm_world_create(&mesh, &comm, &err)) {
    if (rank == 0) fprintf(stderr, "mtf_example_mlp: %s\n", err.msg);
    mtf_world_finalize();
    return 1;
  }

  mtf_graph *g = mtf_graph_create(2024);
  mtf_shape xs, ys, w1s, b1s, w2s, hs, scalar = {0};
  mtf_shape_parse("batch:32,d_in:16", "x", &xs, NULL);
  mtf_shape_parse("batch:32,d_out:4", "y", &ys, NULL);
  mtf_shape_parse("d_in:16,hidden:64", "w1", &w1s, NULL);
  mtf_shape_parse("hidden:64", "b1", &b1s, NULL);
  mtf_shape_parse("hidden:64,d_out:4", "w2", &w2s, NULL);
  mtf_shape_parse("batch:32,hidden:64", "h", &hs, NULL);
  mtf_tensor x = mtf_input(g, "x", &xs), y = mtf_input(g, "y", &ys);
  mtf_tensor w[3] = {mtf_variable(g, "mlp/w1", &w1s, MTF_INIT_NORMAL, 0.25f),
                     mtf_variable(g, "mlp/b1", &b1s, MTF_INIT_ZEROS, 0.0f),
                     mtf_variable(g, "mlp/w2", &w2s, MTF_INIT_NORMAL, 0.125f)};
  mtf_tensor h = mtf_relu(g, mtf_add(g, mtf_einsum2(g, x, w[0], &hs), w[1]));
  mtf_tensor prediction = mtf_einsum2(g, h, w[2], &ys);
  mtf_tensor loss = mtf_reduce_mean(g, mtf_square(g, mtf_subtract(g, prediction, y)), &scalar);
  mtf_tensor grads[3];
  mtf_gradients(g, loss, 3, w, grads);
  for (int i = 0; i < 3; i++) mtf_assign(g, w[i], mtf_subtract(g, w[i], mtf_scalar_multiply(g, grads[i], lr)));
  if (mtf_graph_status(g, &err)) die("graph", &err);

  mtf_plan *plan = NULL;
  mtf_session *session;
  /* A layout error is the same on every rank, but a plan can also fail on one rank alone (out of memory):
   * agree, so that all ranks return together with the lowest failing rank's message. */
  int rc = mtf_comm_agree(comm, mtf_plan_create(g, &mesh, &rules, comm->rank, 1, &loss, &plan, &err), &err);
  if (rc) {
    if (rank == 0) fprintf(stderr, "mtf_example_mlp: %s\n", err.msg);
    mtf_plan_destroy(plan);
    mtf_graph_destroy(g);
    mtf_comm_destroy(comm);
    mtf_world_finalize();
    return 1;
  }
  if (mtf_session_create(plan, comm, NULL, &session, &err)) die("session", &err);
  const mtf_plan_stats *stats = mtf_plan_get_stats(plan);
  if (rank == 0) {
    char mesh_str[MTF_SHAPE_STR_MAX];
    printf("mlp: mesh %s, layout '%s': %d steps per run, %lld FLOPs and %lld bytes sent per rank per step\n",
           mtf_shape_format(&mesh, mesh_str, sizeof mesh_str), layout_text, stats->steps, (long long)stats->flops,
           (long long)(stats->comm_bytes[MTF_COLL_ALLREDUCE] + stats->comm_bytes[MTF_COLL_ALLGATHER]));
  }
  float xb[BATCH * D_IN], yb[BATCH * D_OUT];
  for (int step = 0; step < steps; step++) {
    make_batch(step, xb, yb);
    float value;
    if (mtf_session_set_input(session, x, xb, &err) || mtf_session_set_input(session, y, yb, &err) ||
        mtf_session_run(session, &err) || mtf_session_fetch(session, loss, &value, &err))
      die("step", &err);
    if (rank == 0) printf("step %d loss %.7f\n", step, value);
  }
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  mtf_comm_destroy(comm);
  mtf_world_finalize();
  return 0;
}
