/* Fused causal attention beyond its values (the conformance test checks those on every layout): the
 * builder's messages for operands that do not fit, and lowering's choice per layout — no communication
 * when batch or heads are split, the positions gathered when they are split. Pure: plans for rank 0 of a
 * 2-rank mesh without MPI. */
#include <math.h>
#include <string.h>

#include "../check.h"
#include "graph/graph.h"
#include "ops/reference.h"

static mtf_shape S(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "test", &s, NULL);
  return s;
}

/* The graph error of attention over q, k, v of these shapes, or "" when it builds. */
static const char *attention_error(const char *q, const char *k, const char *v, mtf_error *err) {
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape qs = S(q), ks = S(k), vs = S(v);
  mtf_causal_attention(g, mtf_variable(g, "q", &qs, MTF_INIT_NORMAL, 1.0f), mtf_variable(g, "k", &ks, MTF_INIT_NORMAL, 1.0f),
                       mtf_variable(g, "v", &vs, MTF_INIT_NORMAL, 1.0f), "q", "m", "e", 1.0f, 0.0f, 0);
  if (mtf_graph_status(g, err) == MTF_OK) err->msg[0] = 0;
  mtf_graph_destroy(g);
  return err->msg;
}

/* The same for the general op with a bias and segment ids of these shapes (NULL: none). */
static const char *extras_error(const char *bias, const char *segments, mtf_error *err) {
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape qs = S("b:2,h:2,q:4,e:3"), ks = S("b:2,h:2,m:4,e:3");
  mtf_fused_attention_options o = {"q", "m", "e", 1, 1.0f, 0.0f, 0, MTF_NO_TENSOR, MTF_NO_TENSOR};
  if (bias) {
    mtf_shape bs = S(bias);
    o.bias = mtf_variable(g, "bias", &bs, MTF_INIT_NORMAL, 1.0f);
  }
  if (segments) {
    mtf_shape ss = S(segments);
    o.segments = mtf_variable(g, "ids", &ss, MTF_INIT_ZEROS, 0.0f);
  }
  mtf_fused_attention(g, mtf_variable(g, "q", &qs, MTF_INIT_NORMAL, 1.0f), mtf_variable(g, "k", &ks, MTF_INIT_NORMAL, 1.0f),
                      mtf_variable(g, "v", &ks, MTF_INIT_NORMAL, 1.0f), &o);
  if (mtf_graph_status(g, err) == MTF_OK) err->msg[0] = 0;
  mtf_graph_destroy(g);
  return err->msg;
}

static void builder_errors(void) {
  mtf_error err;
  CHECK(strcmp(attention_error("b:2,q:4,e:3", "b:2,m:4,e:3", "b:2,m:4,e:3", &err), "") == 0);
  CHECK(strcmp(attention_error("b:2,q:4,e:3", "m:4,e:3,b:2", "m:4,e:3,b:2", &err), "") == 0); /* any order */
  CHECK_CONTAINS(attention_error("b:2,q:4", "b:2,m:4", "b:2,m:4", &err), "causal_attention: 'q' [b:2, q:4] needs dimensions 'q' and 'e'");
  CHECK_CONTAINS(attention_error("b:2,q:4,e:3", "b:2,q:4,e:3", "b:2,q:4,e:3", &err), "'k'",
                 "must have the query's dimensions (some of the others may be missing) with 'm' for 'q'");
  /* k and v shared along q's dims they lack (grouped heads); never along the depth or the positions */
  CHECK(strcmp(attention_error("b:2,h:2,q:4,e:3", "b:2,m:4,e:3", "b:2,m:4,e:3", &err), "") == 0);
  CHECK_CONTAINS(attention_error("b:2,q:4,e:3", "b:2,m:4", "b:2,m:4", &err), "'k'", "and 'e'");
  CHECK_CONTAINS(attention_error("b:2,q:4,e:3", "b:2,m:5,e:3", "b:2,m:5,e:3", &err), "'k'", "of the same size");
  CHECK_CONTAINS(attention_error("b:2,q:4,e:3", "b:3,m:4,e:3", "b:3,m:4,e:3", &err), "'k'");
  CHECK_CONTAINS(attention_error("b:2,q:4,e:3", "b:2,m:4,e:3", "b:2,m:4,e:2", &err), "'v'", "must have the keys' shape");
  /* the bias: the positions and any of the batch dims; the ids: the query positions and any batch dims */
  CHECK(strcmp(extras_error("h:2,q:4,m:4", "b:2,q:4", &err), "") == 0);
  CHECK(strcmp(extras_error("m:4,b:2,h:2,q:4", NULL, &err), "") == 0);
  CHECK_CONTAINS(extras_error("h:2,q:4", NULL, &err), "'bias'", "(the bias) needs dimensions 'q' and 'm'");
  CHECK_CONTAINS(extras_error("h:2,q:4,m:4,e:3", NULL, &err), "'bias'", "without 'e'");
  CHECK_CONTAINS(extras_error("x:2,q:4,m:4", NULL, &err), "'bias'", "otherwise only the query's");
  CHECK_CONTAINS(extras_error("h:2,q:4,m:5", NULL, &err), "'bias'", "at its sizes");
  CHECK_CONTAINS(extras_error(NULL, "b:2,m:4", &err), "'ids'", "(the segment ids) needs dimension 'q'");
  CHECK_CONTAINS(extras_error(NULL, "b:2,q:4,e:3", &err), "'ids'", "without 'e'");
  CHECK_CONTAINS(attention_error("b:2,q:4,e:3", "b:2,m:4,e:3", "m:4,b:2,e:3", &err), "'v'", "must have the keys' shape");

  mtf_graph *g = mtf_graph_create(1);
  mtf_shape xs = S("a:2,c:3");
  mtf_take(g, mtf_variable(g, "x", &xs, MTF_INIT_NORMAL, 1.0f), "a", 2);
  CHECK(mtf_graph_status(g, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "take: index 2 is outside 'a' of size 2");
  mtf_graph_destroy(g);
}

/* The fused op's reference against the general decomposition's (einsum, causal mask, softmax, dropout of
 * the weights [b, h, q, m], einsum), values and gradients, in double precision: the same function, the
 * same dropout mask. Returns the largest difference. */
static double fused_vs_general(float rate) {
  mtf_graph *g = mtf_graph_create(5);
  mtf_shape qs = S("b:2,q:7,h:2,e:3"), ks = S("b:2,m:7,h:2,e:3"), ws = S("b:2,h:2,q:7,m:7"), scalar = {0};
  mtf_tensor in[3] = {mtf_variable(g, "q", &qs, MTF_INIT_NORMAL, 1.0f), mtf_variable(g, "k", &ks, MTF_INIT_NORMAL, 1.0f),
                      mtf_variable(g, "v", &ks, MTF_INIT_NORMAL, 1.0f)};
  mtf_tensor proj = mtf_variable(g, "proj", &qs, MTF_INIT_NORMAL, 1.0f), grads[2][3], loss[2], out[2];
  out[0] = mtf_causal_attention(g, in[0], in[1], in[2], "q", "m", "e", 0.6f, rate, 21);
  mtf_tensor logits = mtf_scalar_multiply(g, mtf_causal_mask(g, mtf_einsum2(g, in[0], in[1], &ws), "q", "m"), 0.6f);
  out[1] = mtf_einsum2(g, mtf_dropout(g, mtf_softmax(g, logits, "m"), rate, 21), in[2], &qs);
  for (int p = 0; p < 2; p++) {
    loss[p] = mtf_reduce_sum(g, mtf_multiply(g, out[p], proj), &scalar);
    CHECK(mtf_gradients(g, loss[p], 3, in, grads[p]) == MTF_OK);
  }
  double **value = mtf_reference_evaluate(g, NULL, NULL), worst = 0;
  mtf_tensor fused[4] = {out[0], grads[0][0], grads[0][1], grads[0][2]}, general[4] = {out[1], grads[1][0], grads[1][1], grads[1][2]};
  for (int t = 0; t < 4; t++)
    for (int64_t e = 0; e < mtf_shape_num_elements(mtf_tensor_shape(g, fused[t])); e++)
      worst = fmax(worst, fabs(value[fused[t]][e] - value[general[t]][e]));
  mtf_reference_free(g, value);
  mtf_graph_destroy(g);
  return worst;
}

/* Allgathers rank 0 of mesh m:2 runs for attention's training step (values and gradients) under `layout`. */
static int64_t allgathers(const char *layout) {
  mtf_graph *g = mtf_graph_create(1);
  mtf_shape qs = S("b:2,q:8,h:2,e:4"), ks = S("b:2,m:8,h:2,e:4"), scalar = {0};
  mtf_tensor in[3] = {mtf_variable(g, "q", &qs, MTF_INIT_NORMAL, 1.0f), mtf_variable(g, "k", &ks, MTF_INIT_NORMAL, 1.0f),
                      mtf_variable(g, "v", &ks, MTF_INIT_NORMAL, 1.0f)};
  mtf_tensor o = mtf_causal_attention(g, in[0], in[1], in[2], "q", "m", "e", 0.5f, 0.2f, 9);
  mtf_tensor loss = mtf_reduce_sum(g, mtf_square(g, o), &scalar), grads[3];
  CHECK(mtf_gradients(g, loss, 3, in, grads) == MTF_OK);
  mtf_shape mesh = S("m:2");
  mtf_layout_rules rules;
  mtf_error err;
  CHECK(mtf_layout_rules_parse(layout, &rules, &err) == MTF_OK);
  mtf_tensor fetches[4] = {loss, grads[0], grads[1], grads[2]};
  mtf_plan *plan = NULL;
  int64_t calls = -1;
  if (mtf_plan_create(g, &mesh, &rules, 0, 4, fetches, &plan, &err) == MTF_OK)
    calls = mtf_plan_get_stats(plan)->comm_calls[MTF_COLL_ALLGATHER];
  else
    fprintf(stderr, "plan (layout '%s'): %s\n", layout, err.msg);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  return calls;
}

static void lowering_by_layout(void) {
  CHECK(allgathers("") == 0);
  CHECK(allgathers("h:m") == 0);
  CHECK(allgathers("b:m") == 0);
  CHECK(allgathers("m:m") > 0); /* k, v gathered whole, forward and backward */
  CHECK(allgathers("q:m") > 0);
  CHECK(allgathers("e:m") > 0);
}

int main(void) {
  builder_errors();
  lowering_by_layout();
  double plain = fused_vs_general(0.0f), dropped = fused_vs_general(0.4f);
  printf("fused vs general attention (double references): %.2e without dropout, %.2e with\n", plain, dropped);
  CHECK(plain < 1e-12);
  CHECK(dropped < 1e-12);
  return check_summary();
}
