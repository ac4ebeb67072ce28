/* The segment mask of packed sequences on the attention weights (model/segments.h): scores of random q and
 * k [batch, heads, length, memory_length], the causal mask, the segment mask, softmax over memory_length,
 * as the model builds them, fetched on every layout of the job's mesh (argv[1], two axes b and m): whole,
 * and batch, heads, the query positions and the memory positions (the softmax's own dim: three phases with
 * allreduces) split. Every weight between two documents, from padding to a document or into the future is
 * exactly 0, every row sums to 1, and each weight equals a double-precision softmax over the query's own
 * document's earlier keys computed here (1e-6). The segments come from mtf_segments_split_row of rows with
 * padding, a document cut by the window's end and documents of one token. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../check_mpi.h"
#include "comm/mpi_comm.h"
#include "config/config.h"
#include "io/segments.h"
#include "model/segments.h"
#include "mtf.h"

enum { B = 4, H = 2, T = 8, K = 4 };

/* Each row's T + 1 segment ids as a shard holds them (0 = padding). */
static const int32_t raw[B][T + 1] = {{3, 3, 3, 0, 0, 5, 5, 5, 5},
                                      {1, 1, 2, 2, 2, 2, 7, 7, 7},
                                      {4, 9, 9, 6, 6, 6, 6, 6, 0},
                                      {8, 8, 8, 8, 8, 8, 8, 8, 8}};

static void run_layout(const char *layout, const mtf_shape *mesh, mtf_comm *comm, int rank, const float *q,
                       const float *k, const int32_t *segments, const int32_t *target_segments,
                       const int32_t *positions) {
  mtf_config cfg;
  mtf_config_defaults(&cfg);
  mtf_model_config model = cfg.model;
  model.length = T;
  model.pack = MTF_PACK_SEGMENTS;
  mtf_graph *g = mtf_graph_create(5);
  mtf_shape q_shape, k_shape, scores_shape;
  mtf_error err;
  if (mtf_shape_parse("batch:4,heads:2,length:8,d_kv:4", "q", &q_shape, &err) ||
      mtf_shape_parse("batch:4,heads:2,memory_length:8,d_kv:4", "k", &k_shape, &err) ||
      mtf_shape_parse("batch:4,heads:2,length:8,memory_length:8", "scores", &scores_shape, &err))
    fail_job("shape", &err);
  mtf_segment_inputs seg = mtf_segments_build(g, &model, B);
  mtf_tensor qt = mtf_input(g, "q", &q_shape), kt = mtf_input(g, "k", &k_shape);
  mtf_tensor scores = mtf_causal_mask(g, mtf_einsum2(g, qt, kt, &scores_shape), "length", "memory_length");
  mtf_tensor weights = mtf_softmax(g, mtf_segments_mask(g, &seg, scores), "memory_length");
  mtf_layout_rules rules;
  mtf_plan *plan;
  mtf_session *s;
  mtf_session_options options = {.backend = "cpu", .poison_freed = 1};
  if (mtf_graph_status(g, &err) || mtf_layout_rules_parse(layout, &rules, &err) ||
      mtf_plan_create(g, mesh, &rules, rank, 1, &weights, &plan, &err) ||
      mtf_session_create(plan, comm, &options, &s, &err))
    fail_job(layout, &err);
  static float w[B * H * T * T];
  if (mtf_session_set_input(s, qt, q, &err) || mtf_session_set_input(s, kt, k, &err) ||
      mtf_session_set_input_int(s, seg.segments, segments, &err) ||
      mtf_session_set_input_int(s, seg.target_segments, target_segments, &err) ||
      mtf_session_set_input_int(s, seg.positions, positions, &err) || mtf_session_run(s, &err) ||
      mtf_session_fetch(s, weights, w, &err))
    fail_job(layout, &err);
  int crossing = 0, masked = 0;
  double worst_sum = 0, worst = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++) {
        const float *row = w + ((b * H + h) * T + i) * T;
        double logits[T], max = -INFINITY, total = 0, sum = 0;
        for (int j = 0; j < T; j++) {
          int allowed = j <= i && segments[b * T + j] == segments[b * T + i];
          logits[j] = -INFINITY;
          if (allowed) {
            logits[j] = 0;
            for (int d = 0; d < K; d++)
              logits[j] += (double)q[((b * H + h) * T + i) * K + d] * k[((b * H + h) * T + j) * K + d];
            max = fmax(max, logits[j]);
          } else {
            masked++;
            crossing += row[j] != 0.0f;
          }
          sum += row[j];
        }
        for (int j = 0; j < T; j++) total += exp(logits[j] - max);
        for (int j = 0; j < T; j++) worst = fmax(worst, fabs(row[j] - exp(logits[j] - max) / total));
        worst_sum = fmax(worst_sum, fabs(sum - 1));
      }
  CHECK(crossing == 0);
  CHECK(worst_sum < 1e-6);
  CHECK(worst < 1e-6);
  if (rank == 0)
    printf("%s layout '%s': %d masked weights, %d not exactly 0; rows sum to 1 within %.1e; max error %.1e\n",
           crossing == 0 && worst_sum < 1e-6 && worst < 1e-6 ? "ok  " : "FAIL", layout, masked, crossing, worst_sum,
           worst);
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mtf_error err;
  mtf_shape mesh;
  if (argc != 2 || mtf_mesh_parse(argv[1], &mesh, &err) || mesh.rank != 2) {
    fprintf(stderr, "usage: test_segment_mask MESH (axes b and m, e.g. b:2,m:2)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mtf_comm *comm;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail_job("communicator", &err);
  static float q[B * H * T * K], k[B * H * T * K];
  for (int i = 0; i < B * H * T * K; i++) {
    q[i] = (float)sin(0.7 * i + 0.3);
    k[i] = (float)cos(1.3 * i);
  }
  int32_t segments[B * T], target_segments[B * T], positions[B * T];
  for (int b = 0; b < B; b++)
    mtf_segments_split_row(raw[b], T, segments + b * T, target_segments + b * T, positions + b * T);
  /* The split of the rows by hand: runs renumbered 1, 2, ..., padding 0, positions from each run's start. */
  CHECK(segments[0 * T + 3] == 0 && segments[0 * T + 5] == 2 && positions[0 * T + 6] == 1);
  CHECK(segments[2 * T + 0] == 1 && segments[2 * T + 1] == 2 && segments[2 * T + 3] == 3 && positions[2 * T + 7] == 4);
  CHECK(target_segments[2 * T + 7] == 0 && target_segments[1 * T + 1] == 2 && positions[3 * T + 7] == 7);
  const char *layouts[] = {"", "batch:b,heads:m", "batch:b,memory_length:m", "length:b,heads:m",
                           "heads:b,memory_length:m", "length:m,memory_length:b"};
  for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
    run_layout(layouts[l], &mesh, comm, rank, q, k, segments, target_segments, positions);
  mtf_comm_destroy(comm);
  int status = check_mpi_summary();
  MPI_Finalize();
  return status;
}
