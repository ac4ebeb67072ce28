/* The whole-program layer (exec/pjrt/program.c) on the XLA CPU plugin, independent of the emitter: a
 * graph's per-rank plans on mesh b:2 (batch split), and a hand-written module with the emitter's I/O
 * contract (emit.h) that computes y = x * w + microbatch + (random offset's words) as a fetch and updates
 * the variable w += sum over the whole batch of x (an all_reduce), its result aliasing w's parameter.
 * Checked against host arithmetic over three runs: w carried on the devices (donated), inputs sliced per
 * device, fetches assembled from slices, scalars passed, a second program sharing w, write_variable. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "exec/backend.h"
#include "exec/pjrt/program.h"
#include "mtf.h"

static const char *train_text =
    "module @train attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {\n"
    "  func.func public @main(%w: tensor<3xf32> {tf.aliasing_output = 0 : i32}, %x: tensor<2x3xf32>,\n"
    "                         %ro: tensor<2xi32>, %mb: tensor<i32>) -> (tensor<3xf32>, tensor<2x3xf32>) {\n"
    "    %wb = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>\n"
    "    %xw = stablehlo.multiply %x, %wb : tensor<2x3xf32>\n"
    "    %zi = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %words = stablehlo.reduce(%ro init: %zi) applies stablehlo.add across dimensions = [0]\n"
    "        : (tensor<2xi32>, tensor<i32>) -> tensor<i32>\n"
    "    %k = stablehlo.add %words, %mb : tensor<i32>\n"
    "    %kf = stablehlo.convert %k : (tensor<i32>) -> tensor<f32>\n"
    "    %kb = stablehlo.broadcast_in_dim %kf, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n"
    "    %y = stablehlo.add %xw, %kb : tensor<2x3xf32>\n"
    "    %zf = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "    %cs = stablehlo.reduce(%x init: %zf) applies stablehlo.add across dimensions = [0]\n"
    "        : (tensor<2x3xf32>, tensor<f32>) -> tensor<3xf32>\n"
    "    %tot = \"stablehlo.all_reduce\"(%cs) ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = stablehlo.add %a, %b : tensor<f32>\n"
    "      stablehlo.return %s : tensor<f32>\n"
    "    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<3xf32>) -> tensor<3xf32>\n"
    "    %w2 = stablehlo.add %w, %tot : tensor<3xf32>\n"
    "    return %w2, %y : tensor<3xf32>, tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

/* Reads w (shared with the training program), fetches z = 2 w. */
static const char *eval_text =
    "module @eval attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {\n"
    "  func.func public @main(%w: tensor<3xf32>, %ro: tensor<2xi32>, %mb: tensor<i32>) -> tensor<3xf32> {\n"
    "    %z = stablehlo.add %w, %w : tensor<3xf32>\n"
    "    return %z : tensor<3xf32>\n"
    "  }\n"
    "}\n";

static mtf_pjrt_value value(mtf_pjrt_value_kind kind, int node, mtf_pjrt_type elem, const char *shape, int aliases) {
  mtf_pjrt_value v = {.kind = kind, .node = node, .elem = elem, .aliases = aliases};
  if (shape[0]) mtf_shape_parse(shape, "test", &v.shape, NULL);
  v.elements = mtf_shape_num_elements(&v.shape);
  return v;
}

int main(void) {
  mtf_error err = {0};
  mtf_graph *g = mtf_graph_create(11);
  mtf_shape xs, ws;
  mtf_shape_parse("batch:4,d:3", "x", &xs, NULL);
  mtf_shape_parse("d:3", "w", &ws, NULL);
  mtf_tensor x = mtf_input(g, "x", &xs);
  mtf_tensor w = mtf_variable(g, "w", &ws, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor y = mtf_multiply(g, x, w);
  mtf_tensor z = mtf_add(g, w, w);
  CHECK(mtf_graph_status(g, &err) == MTF_OK);
  mtf_shape mesh;
  mtf_layout_rules rules;
  CHECK(mtf_mesh_parse("b:2", &mesh, &err) == MTF_OK);
  CHECK(mtf_layout_rules_parse("batch:b", &rules, &err) == MTF_OK);
  mtf_plan *train_plans[2] = {0}, *eval_plans[2] = {0};
  for (int r = 0; r < 2; r++) {
    CHECK(mtf_plan_create(g, &mesh, &rules, r, 1, &y, &train_plans[r], &err) == MTF_OK);
    CHECK(mtf_plan_create(g, &mesh, &rules, r, 1, &z, &eval_plans[r], &err) == MTF_OK);
  }
  mtf_pjrt_value train_params[4] = {
      value(MTF_PJRT_VARIABLE, w, MTF_PJRT_F32, "d:3", -1), value(MTF_PJRT_INPUT, x, MTF_PJRT_F32, "batch:2,d:3", -1),
      value(MTF_PJRT_RANDOM_OFFSET, -1, MTF_PJRT_S32, "words:2", -1), value(MTF_PJRT_MICROBATCH, -1, MTF_PJRT_S32, "", -1)};
  mtf_pjrt_value train_results[2] = {value(MTF_PJRT_VARIABLE, w, MTF_PJRT_F32, "d:3", 0),
                                     value(MTF_PJRT_FETCH, y, MTF_PJRT_F32, "batch:2,d:3", -1)};
  mtf_pjrt_module train = {.text = (char *)train_text, .length = strlen(train_text), .n_devices = 2, .n_params = 4,
                           .n_results = 2, .params = train_params, .results = train_results};
  mtf_pjrt_value eval_params[3] = {train_params[0], train_params[2], train_params[3]};
  mtf_pjrt_value eval_results[1] = {value(MTF_PJRT_FETCH, z, MTF_PJRT_F32, "d:3", -1)};
  mtf_pjrt_module eval = {.text = (char *)eval_text, .length = strlen(eval_text), .n_devices = 2, .n_params = 3,
                          .n_results = 1, .params = eval_params, .results = eval_results};

  mtf_pjrt_runtime *rt = NULL;
  mtf_pjrt_options options = {.local_devices = 2};
  int rc = mtf_pjrt_open(&options, &rt, &err);
  if (rc) fprintf(stderr, "open: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  mtf_pjrt_program *tp = NULL, *ep = NULL;
  if (rt) {
    rc = mtf_pjrt_program_create(rt, train_plans, 2, &train, NULL, &tp, &err);
    if (rc) fprintf(stderr, "train program: %s\n", err.msg);
    CHECK(rc == MTF_OK);
    if (tp) {
      rc = mtf_pjrt_program_create(rt, eval_plans, 2, &eval, tp, &ep, &err);
      if (rc) fprintf(stderr, "eval program: %s\n", err.msg);
      CHECK(rc == MTF_OK);
    }
  }
  if (tp && ep) {
    /* w starts at the same initial value as on cpu. */
    float w_host[3], w_dev[3];
    mtf_plan_initial_slice(train_plans[0], w, w_host);
    CHECK(mtf_pjrt_program_read_slice(tp, 1, w, w_dev, &err) == MTF_OK);
    for (int i = 0; i < 3; i++) CHECK(w_dev[i] == w_host[i]);
    double w_ref[3] = {w_host[0], w_host[1], w_host[2]};
    for (int run = 0; run < 3; run++) {
      float xf[12], yf[12];
      for (int i = 0; i < 12; i++) xf[i] = (float)((i * 7 + run * 3) % 11) * 0.25f - 1.0f;
      uint64_t offset = ((uint64_t)(run + 1) << 32) | (uint64_t)(10 * run + 3);
      CHECK(mtf_pjrt_program_set_input(tp, x, xf, &err) == MTF_OK);
      mtf_pjrt_program_set_random_offset(tp, offset);
      mtf_pjrt_program_set_microbatch(tp, run);
      rc = mtf_pjrt_program_run(tp, &err);
      if (rc) fprintf(stderr, "run %d: %s\n", run, err.msg);
      CHECK(rc == MTF_OK);
      CHECK(mtf_pjrt_program_fetch(tp, y, yf, &err) == MTF_OK);
      double k = (double)(run + 1) + (double)(10 * run + 3) + run;
      for (int b = 0; b < 4; b++)
        for (int d = 0; d < 3; d++) CHECK(fabs(yf[b * 3 + d] - (xf[b * 3 + d] * w_ref[d] + k)) < 1e-5);
      for (int d = 0; d < 3; d++) w_ref[d] += (double)xf[d] + xf[3 + d] + xf[6 + d] + xf[9 + d];
      for (int r = 0; r < 2; r++) {
        CHECK(mtf_pjrt_program_read_slice(tp, r, w, w_dev, &err) == MTF_OK);
        for (int d = 0; d < 3; d++) CHECK(fabs(w_dev[d] - w_ref[d]) < 1e-5);
      }
    }
    /* The eval program sees the trained w. */
    float zf[3];
    CHECK(mtf_pjrt_program_run(ep, &err) == MTF_OK);
    CHECK(mtf_pjrt_program_fetch(ep, z, zf, &err) == MTF_OK);
    for (int d = 0; d < 3; d++) CHECK(fabs(zf[d] - 2 * w_ref[d]) < 1e-5);
    /* A restored variable (checkpoint path) reaches both programs. */
    float restored[3] = {0.5f, -1.5f, 2.0f};
    for (int r = 0; r < 2; r++) CHECK(mtf_pjrt_program_write_variable(tp, r, w, restored, &err) == MTF_OK);
    CHECK(mtf_pjrt_program_run(ep, &err) == MTF_OK);
    CHECK(mtf_pjrt_program_fetch(ep, z, zf, &err) == MTF_OK);
    for (int d = 0; d < 3; d++) CHECK(zf[d] == 2 * restored[d]);
    /* Errors: not an input, not a variable. */
    CHECK(mtf_pjrt_program_set_input(tp, w, restored, &err) == MTF_ERR_INVALID);
    CHECK(mtf_pjrt_program_write_variable(tp, 0, x, restored, &err) == MTF_ERR_INVALID);
    CHECK(mtf_pjrt_program_read_slice(tp, 5, w, w_dev, &err) == MTF_ERR_INVALID);
  }
  /* A module for more devices than plans is refused before compiling. */
  mtf_pjrt_program *bad = NULL;
  train.n_devices = 4;
  if (rt) CHECK(mtf_pjrt_program_create(rt, train_plans, 2, &train, NULL, &bad, &err) == MTF_ERR_INVALID);
  mtf_pjrt_program_destroy(ep);
  mtf_pjrt_program_destroy(tp);
  mtf_pjrt_close(rt);
  for (int r = 0; r < 2; r++) {
    mtf_plan_destroy(train_plans[r]);
    mtf_plan_destroy(eval_plans[r]);
  }
  mtf_graph_destroy(g);
  return check_summary();
}
