/* The op cases of the backend conformance test, run by both of its runners through conformance_harness.h
 * (backend_conformance.c over the executor's backends, pjrt_conformance.c over the PJRT emitter): each case
 * builds a graph from variables of the given shapes (and integer inputs), every op of the table appears in
 * some case. Included by one .c file each (static definitions). */
#ifndef MTF_TESTS_ENGINE_CONFORMANCE_CASES_H
#define MTF_TESTS_ENGINE_CONFORMANCE_CASES_H

#include <stdio.h>
#include <string.h>

#include "mtf.h"
#include "graph/graph.h"
#include "lower/plan.h"
#include "ops/op_def.h"

#define MAX_VARS 4
#define MAX_INPUTS 2

typedef struct op_case {
  const char *name;
  const char *var_shapes[MAX_VARS];
  mtf_tensor (*build)(mtf_graph *g, const mtf_tensor *v, mtf_tensor *inputs, int *n_inputs);
} op_case;

static mtf_shape S(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "test", &s, NULL);
  return s;
}

static mtf_dim D(const char *name, int64_t size) { return mtf_dim_make(name, size); }
static mtf_tensor positive(mtf_graph *g, mtf_tensor x) { return mtf_scalar_add(g, mtf_square(g, x), 0.5f); }
/* --bf16-storage (both drivers): x rounded to a bfloat16 value, then passed on by an op that writes it as
 * bfloat16 where its readers read it so (lower/storage.c), losslessly: the case's op then reads a bf16-stored
 * input exactly as the reference (which models the rounding of the casts) sees it. */
static inline mtf_tensor bf16_stored(mtf_graph *g, mtf_tensor x) {
  return mtf_scalar_multiply(g, mtf_cast(g, mtf_cast(g, x, MTF_BF16), MTF_F32), 1.0f);
}

/* --bf16-storage: the kernel steps of a plan that read (an input other than a cast's or an einsum's) or wrote
 * (other than a cast) a bf16-stored value, per op; every op whose entry says it can must have done both
 * (bf16_storage_unexercised). */
static unsigned read_bf16[MTF_OP_COUNT], wrote_bf16[MTF_OP_COUNT];

static inline void note_bf16_steps(const mtf_plan *plan) {
  for (int i = 0; i < plan->n_steps; i++) {
    const mtf_step *st = &plan->steps[i];
    if (st->kind != MTF_STEP_KERNEL || st->op == MTF_OP_CAST) continue;
    if (st->out_dtype == MTF_BF16) wrote_bf16[st->op]++;
    for (int k = 0; k < st->n_in && st->op != MTF_OP_EINSUM; k++)
      if (st->in_dtype[k] == MTF_BF16) read_bf16[st->op]++;
  }
}

/* The ops whose entry reads or writes bf16-stored values and that no case's plan did so for, each named on
 * stderr; their count. */
static inline int bf16_storage_unexercised(void) {
  int missing = 0;
  for (int k = 0; k < MTF_OP_COUNT; k++) {
    const mtf_op_def *def = mtf_op((mtf_op_kind)k);
    int unread = def->reads_bf16 && !read_bf16[k], unwritten = def->bf16_output && !wrote_bf16[k];
    if (unread || unwritten) {
      fprintf(stderr, "FAIL no --bf16-storage case %s op '%s' a bf16-stored value\n", unread ? "gave" : "had",
              def->name);
      missing++;
    }
  }
  return missing;
}

#define ARGS mtf_graph *g, const mtf_tensor *v, mtf_tensor *in, int *n_in
#define UNUSED_INPUTS (void)in, (void)n_in

static mtf_tensor c_matmul(ARGS) { UNUSED_INPUTS; mtf_shape o = S("a:3,b:5"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor c_matmul_transposed(ARGS) { UNUSED_INPUTS; mtf_shape o = S("b:5,a:3"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor c_batch_matmul(ARGS) { UNUSED_INPUTS; mtf_shape o = S("a:3,e:2,b:5"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor c_lonely(ARGS) { UNUSED_INPUTS; mtf_shape o = S("b:5"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor c_transpose(ARGS) { UNUSED_INPUTS; mtf_shape o = S("d:4,c:1,a:3"); return mtf_einsum(g, 1, v, &o); }
static mtf_tensor c_reduce_middle(ARGS) { UNUSED_INPUTS; return mtf_reduce_sum_dim(g, v[0], "d"); }
static mtf_tensor c_binary(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor s = mtf_add(g, mtf_subtract(g, v[0], v[1]), mtf_multiply(g, v[1], v[0]));
  return mtf_add(g, s, mtf_divide(g, v[0], positive(g, v[1])));
}
static mtf_tensor c_binary_swapped(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor s = mtf_add(g, mtf_subtract(g, v[1], v[0]), mtf_multiply(g, v[0], v[1]));
  return mtf_add(g, s, mtf_divide(g, v[1], positive(g, v[0])));
}
static mtf_tensor c_compare(ARGS) {
  UNUSED_INPUTS;
  return mtf_multiply(g, v[0], mtf_add(g, mtf_equal(g, v[0], mtf_reduce_max_dim(g, v[0], "d")), mtf_less_equal(g, v[1], v[0])));
}
static mtf_tensor c_unary(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor x = v[0], p = positive(g, x), t = mtf_add(g, mtf_exp(g, x), mtf_log(g, p));
  t = mtf_add(g, t, mtf_add(g, mtf_rsqrt(g, p), mtf_sqrt(g, p)));
  t = mtf_add(g, t, mtf_add(g, mtf_tanh(g, x), mtf_sigmoid(g, x)));
  t = mtf_add(g, t, mtf_add(g, mtf_relu(g, x), mtf_gelu(g, x)));
  return mtf_scalar_add(g, mtf_scalar_multiply(g, t, -0.75f), 0.125f);
}
/* Rotary angles reach model.length radians: large arguments too. */
static mtf_tensor c_sin_cos(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor x = mtf_scalar_multiply(g, v[0], 40.0f);
  return mtf_add(g, mtf_sin(g, x), mtf_scalar_multiply(g, mtf_cos(g, x), 0.5f));
}
static mtf_tensor c_swish(ARGS) { UNUSED_INPUTS; return mtf_swish(g, mtf_scalar_multiply(g, v[0], 3.0f)); }
static mtf_tensor c_reduce_max(ARGS) { UNUSED_INPUTS; return mtf_reduce_max_dim(g, v[0], "d"); }
static mtf_tensor c_broadcast(ARGS) { UNUSED_INPUTS; mtf_shape o = S("a:3,c:1,d:4"); return mtf_broadcast(g, v[0], &o); }
static mtf_tensor c_sources(ARGS) {
  UNUSED_INPUTS;
  mtf_dim d = D("d", 4), vocab = D("v", 6);
  mtf_shape s = S("d:4");
  mtf_tensor ids = mtf_scalar_add(g, mtf_range(g, &d), 1.0f);
  mtf_tensor oh = mtf_one_hot(g, ids, &vocab);
  return mtf_multiply(g, mtf_multiply(g, oh, v[0]), mtf_constant(g, &s, 2.5f));
}
static mtf_tensor c_dropout(ARGS) { UNUSED_INPUTS; return mtf_dropout(g, v[0], 0.4f, 7); }
static mtf_tensor c_reshape(ARGS) {
  UNUSED_INPUTS;
  mtf_shape s = S("e:2,f:6");
  return mtf_square(g, mtf_rename(g, mtf_reshape(g, v[0], &s), "e", "z"));
}
static mtf_tensor c_stop(ARGS) { UNUSED_INPUTS; return mtf_add(g, mtf_stop_gradient(g, mtf_square(g, v[0])), v[0]); }
static mtf_tensor c_softmax_last(ARGS) { UNUSED_INPUTS; return mtf_softmax(g, v[0], "d"); }
static mtf_tensor c_softmax_first(ARGS) { UNUSED_INPUTS; return mtf_softmax(g, v[0], "d"); }
static mtf_tensor c_log_softmax(ARGS) { UNUSED_INPUTS; return mtf_log_softmax(g, v[0], "d"); }
static mtf_tensor c_layer_norm(ARGS) { UNUSED_INPUTS; return mtf_layer_norm(g, v[0], "d", v[1], v[2], 1e-5f); }
/* |mean| >> std: a one-pass variance (E[x^2] - mean^2) over a split dim would cancel. */
static mtf_tensor c_layer_norm_offset(ARGS) { UNUSED_INPUTS; return mtf_layer_norm(g, mtf_scalar_add(g, v[0], 100.0f), "d", -1, -1, 1e-5f); }
static mtf_tensor c_rms_norm(ARGS) { UNUSED_INPUTS; return mtf_rms_norm(g, v[0], "d", v[1], 1e-5f); }
/* A norm's output read only by a product, and a product's result read only by gelu (and its gradient): the
 * values a bf16-storing plan keeps as bfloat16 (--bf16-storage). */
static mtf_tensor c_rms_norm_product(ARGS) {
  UNUSED_INPUTS;
  mtf_shape o = S("a:3,e:2");
  return mtf_einsum2(g, mtf_rms_norm(g, v[0], "d", MTF_NO_TENSOR, 1e-5f), v[1], &o);
}
static mtf_tensor c_gelu_product(ARGS) {
  UNUSED_INPUTS;
  mtf_shape o = S("a:3,e:2");
  return mtf_gelu(g, mtf_einsum2(g, v[0], v[1], &o));
}
static mtf_tensor c_causal(ARGS) { UNUSED_INPUTS; return mtf_softmax(g, mtf_causal_mask(g, v[0], "q", "m"), "m"); }
static mtf_tensor c_masked_fill(ARGS) {
  UNUSED_INPUTS;
  mtf_dim d = D("d", 4), a = D("a", 3);
  mtf_tensor mask = mtf_less_equal(g, mtf_range(g, &d), mtf_scalar_add(g, mtf_range(g, &a), 0.5f));
  return mtf_masked_fill(g, v[0], mask, 3.0f);
}
static mtf_tensor c_attention(ARGS) { UNUSED_INPUTS; return mtf_causal_attention(g, v[0], v[1], v[2], "q", "m", "e", 0.7f, 0.0f, 0); }
/* Dropout on the weights: the mask of mtf_dropout, the same on every layout. */
static mtf_tensor c_attention_dropout(ARGS) {
  UNUSED_INPUTS;
  return mtf_causal_attention(g, v[0], v[1], v[2], "q", "m", "e", 0.7f, 0.3f, 11);
}
/* Also the logsumexp half of the op's stacked value, so its gradient (through dS) is checked too. */
static mtf_tensor c_attention_lse(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor o = mtf_causal_attention(g, v[0], v[1], v[2], "q", "m", "e", 1.3f, 0.0f, 0);
  return mtf_add(g, o, mtf_take(g, g->nodes[o].inputs[0], "_attn", 1));
}
static mtf_tensor labels_input(mtf_graph *g, mtf_tensor *in, int *n_in, const char *shape) {
  mtf_shape s = S(shape);
  in[*n_in] = mtf_input_int(g, "labels", &s);
  return in[(*n_in)++];
}
/* An additive bias (v[3]) on the scores and segment ids from an integer input of `segments` shape (NULL:
 * none), with dropout; causal or not. */
static mtf_tensor attention_general(mtf_graph *g, const mtf_tensor *v, mtf_tensor *in, int *n_in, int bias,
                                    const char *segments, float dropout, int causal) {
  mtf_tensor ids = MTF_NO_TENSOR;
  if (segments) {
    mtf_shape s = S(segments);
    in[*n_in] = mtf_input_int(g, "segments", &s);
    mtf_shape scalar = {0}; /* two segments, interleaved: the drivers' ids (-1 .. 6) above 2.5 or not */
    ids = mtf_greater(g, mtf_to_float(g, in[(*n_in)++]), mtf_constant(g, &scalar, 2.5f));
  }
  mtf_fused_attention_options o = {"q", "m", "e", causal, 0.7f, dropout, 13, bias ? v[3] : MTF_NO_TENSOR, ids};
  return mtf_fused_attention(g, v[0], v[1], v[2], &o);
}
static mtf_tensor attention_masked(mtf_graph *g, const mtf_tensor *v, mtf_tensor *in, int *n_in, int bias,
                                   const char *segments, float dropout) {
  return attention_general(g, v, in, n_in, bias, segments, dropout, 1);
}
static mtf_tensor c_attention_bidirectional(ARGS) { return attention_general(g, v, in, n_in, 0, NULL, 0.0f, 0); }
static mtf_tensor c_attention_bidirectional_all(ARGS) { return attention_general(g, v, in, n_in, 1, "h:2,q:6", 0.3f, 0); }
static mtf_tensor c_attention_bidirectional_67(ARGS) { return attention_general(g, v, in, n_in, 0, "q:67", 0.3f, 0); }
static mtf_tensor c_attention_bidirectional_131(ARGS) { return attention_general(g, v, in, n_in, 0, "q:131", 0.3f, 0); }
/* Grouped key/value heads: q [.., k:2, g:2, ..] reads k and v [.., k:2, ..], shared by the g query heads. */
static mtf_tensor c_attention_grouped(ARGS) { return attention_general(g, v, in, n_in, 1, NULL, 0.3f, 1); }
/* Depths the tensor-core kernels take (cuda under bf16: multiples of 16 up to 128), over 40 and 70 positions
 * (their tiles of 32 rows, the last partial). */
static mtf_tensor c_attention_tc_causal(ARGS) { return attention_general(g, v, in, n_in, 1, "h:2,q:40", 0.3f, 1); }
static mtf_tensor c_attention_tc_bidirectional(ARGS) { return attention_general(g, v, in, n_in, 1, "q:40", 0.0f, 0); }
static mtf_tensor c_attention_tc_grouped(ARGS) { return attention_general(g, v, in, n_in, 1, NULL, 0.3f, 1); }
static mtf_tensor c_attention_tc_plain(ARGS) { return attention_general(g, v, in, n_in, 0, NULL, 0.0f, 1); }
static mtf_tensor c_attention_bias(ARGS) { return attention_masked(g, v, in, n_in, 1, NULL, 0.0f); }
static mtf_tensor c_attention_bias_dropout(ARGS) { return attention_masked(g, v, in, n_in, 1, NULL, 0.3f); }
static mtf_tensor c_attention_segments(ARGS) { return attention_masked(g, v, in, n_in, 0, "a:2,q:6", 0.0f); }
static mtf_tensor c_attention_segments_67(ARGS) { return attention_masked(g, v, in, n_in, 0, "q:67", 0.3f); }
static mtf_tensor c_attention_segments_131(ARGS) { return attention_masked(g, v, in, n_in, 0, "q:131", 0.3f); }
static mtf_tensor c_attention_bias_segments(ARGS) { return attention_masked(g, v, in, n_in, 1, "h:2,q:6", 0.3f); }
static mtf_tensor c_xent(ARGS) { return mtf_softmax_cross_entropy(g, v[0], labels_input(g, in, n_in, "a:3,c:1"), "v", 1e-2f); }
static mtf_tensor c_xent_vocab_first(ARGS) { return mtf_softmax_cross_entropy(g, v[0], labels_input(g, in, n_in, "a:3"), "v", 0.0f); }
static mtf_tensor c_xent_smoothed(ARGS) {
  return mtf_softmax_cross_entropy_smoothed(g, v[0], labels_input(g, in, n_in, "a:3,c:1"), "v", 1e-2f, 0.2f);
}
static mtf_tensor c_xent_smoothed_vocab_first(ARGS) {
  return mtf_softmax_cross_entropy_smoothed(g, v[0], labels_input(g, in, n_in, "a:3"), "v", 0.0f, 0.1f);
}
static mtf_tensor c_gather(ARGS) { return mtf_gather(g, v[0], labels_input(g, in, n_in, "a:3,e:2"), "v"); }
static mtf_tensor c_gather_vocab_last(ARGS) { return mtf_gather(g, v[0], labels_input(g, in, n_in, "b:5"), "v"); }

static mtf_tensor c_gather_float_ids(ARGS) {
  UNUSED_INPUTS;
  mtf_dim a = D("a", 3), e = D("e", 2);
  mtf_tensor ids = mtf_add(g, mtf_range(g, &a), mtf_scalar_multiply(g, mtf_range(g, &e), 2.0f)); /* 0..4, floats */
  return mtf_gather(g, v[0], ids, "v");
}

/* The fused gradient ops on their own: their values, and their gradients (second derivatives of the
 * forward ops), replicated and split; the cases above reach them through the forward ops' gradients. */
static mtf_tensor c_softmax_grad(ARGS) { UNUSED_INPUTS; return mtf_softmax_grad(g, mtf_softmax(g, v[0], "d"), v[1], "d"); }
static mtf_tensor c_log_softmax_grad(ARGS) {
  UNUSED_INPUTS;
  return mtf_log_softmax_grad(g, mtf_log_softmax(g, v[0], "d"), v[1], "d");
}
static mtf_tensor c_layer_norm_grad(ARGS) { UNUSED_INPUTS; return mtf_norm_grad(g, MTF_OP_LAYER_NORM, v[0], v[1], "d", 1e-5f); }
static mtf_tensor c_layer_norm_grad_offset(ARGS) {
  UNUSED_INPUTS;
  return mtf_norm_grad(g, MTF_OP_LAYER_NORM, mtf_scalar_add(g, v[0], 100.0f), v[1], "d", 1e-5f);
}
static mtf_tensor c_rms_norm_grad(ARGS) { UNUSED_INPUTS; return mtf_norm_grad(g, MTF_OP_RMS_NORM, v[0], v[1], "d", 1e-5f); }
static mtf_tensor c_xent_grad(ARGS) {
  return mtf_softmax_xent_grad(g, v[0], labels_input(g, in, n_in, "a:3,c:1"), v[1], "v", 1e-2f);
}
static mtf_tensor c_xent_grad_vocab_first(ARGS) {
  return mtf_softmax_xent_grad(g, v[0], labels_input(g, in, n_in, "a:4"), v[1], "v", 0.0f);
}
static mtf_tensor c_xent_smoothed_grad(ARGS) {
  return mtf_softmax_xent_smoothed_grad(g, v[0], labels_input(g, in, n_in, "a:3,c:1"), v[1], "v", 1e-2f, 0.2f);
}
static mtf_tensor c_gelu_grad(ARGS) { UNUSED_INPUTS; return mtf_gelu_grad(g, v[0], v[1]); }
/* Selection (ops/select.c). Positions come back through to_float, so a wrong index shows in the value;
 * a variable over the new k dim lets the layouts split it too. */
static mtf_tensor c_top_k(ARGS) {
  UNUSED_INPUTS;
  mtf_dim k = *mtf_tensor_shape(g, v[1])->dims;
  mtf_tensor indices, values = mtf_top_k(g, v[0], "d", &k, &indices);
  return mtf_add(g, mtf_multiply(g, values, v[1]), mtf_to_float(g, indices));
}
/* Ties: x[a, d] = v0[a] + (d <= 1 ? 1 : 0) + 0 * v1[d] ties d = 0 and 1 (the lower index first), and d = 2
 * and 3; v1 only lets the layouts split d. */
static mtf_tensor tied(mtf_graph *g, const mtf_tensor *v) {
  mtf_dim d = D("d", 4);
  mtf_shape s = S("d:4");
  mtf_tensor x = mtf_add(g, v[0], mtf_less_equal(g, mtf_range(g, &d), mtf_constant(g, &s, 1.5f)));
  return mtf_add(g, x, mtf_scalar_multiply(g, v[1], 0.0f));
}
static mtf_tensor c_top_k_ties(ARGS) {
  UNUSED_INPUTS;
  mtf_dim k = D("k", 3);
  mtf_tensor indices, values = mtf_top_k(g, tied(g, v), "d", &k, &indices);
  return mtf_add(g, values, mtf_scalar_multiply(g, mtf_to_float(g, indices), 10.0f));
}
/* The chosen entry as a one-hot mask times x: the gradient reaches x only there. */
static mtf_tensor c_argmax(ARGS) {
  UNUSED_INPUTS;
  const mtf_shape *s = mtf_tensor_shape(g, v[0]);
  mtf_dim d = s->dims[mtf_shape_index_of(s, "d")];
  mtf_tensor index = mtf_argmax(g, v[0], "d");
  return mtf_add(g, mtf_multiply(g, mtf_one_hot(g, index, &d), v[0]), mtf_to_float(g, index));
}
static mtf_tensor c_argmax_ties(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor x = tied(g, v);
  return mtf_add(g, mtf_to_float(g, mtf_argmax(g, x, "d")), mtf_reduce_sum_dim(g, x, "d"));
}
static mtf_tensor c_cumsum(ARGS) { UNUSED_INPUTS; return mtf_cumsum(g, v[0], "d", 0); }
static mtf_tensor c_cumsum_exclusive(ARGS) { UNUSED_INPUTS; return mtf_cumsum(g, v[0], "d", 1); }
static mtf_tensor c_cumsum_reverse(ARGS) {
  UNUSED_INPUTS;
  return mtf_add(g, mtf_cumsum_reverse(g, v[0], "d", 0), mtf_cumsum_reverse(g, v[0], "d", 1));
}
/* Capacity positions as the MoE router computes them: exclusive running count of a 0/1 mask. */
static mtf_tensor c_cumsum_mask(ARGS) {
  UNUSED_INPUTS;
  mtf_shape scalar = {0};
  mtf_tensor mask = mtf_greater(g, v[0], mtf_constant(g, &scalar, 0.0f));
  return mtf_multiply(g, mtf_cumsum(g, mask, "d", 1), v[0]);
}
static mtf_tensor c_greater_less(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor m = mtf_add(g, mtf_greater(g, v[0], v[1]), mtf_scalar_multiply(g, mtf_less(g, v[1], v[0]), 2.0f));
  m = mtf_add(g, m, mtf_scalar_multiply(g, mtf_less(g, v[0], v[1]), 4.0f));
  return mtf_multiply(g, v[0], m);
}
static mtf_tensor c_maximum_minimum(ARGS) {
  UNUSED_INPUTS;
  return mtf_add(g, mtf_maximum(g, v[0], v[1]), mtf_scalar_multiply(g, mtf_minimum(g, v[1], v[0]), 0.5f));
}
/* On ties a gets the gradient: maximum(x, x) and minimum(x, x) pass all of it to their first operand. */
static mtf_tensor c_maximum_ties(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor s = mtf_stop_gradient(g, v[0]);
  return mtf_add(g, mtf_maximum(g, v[0], s), mtf_minimum(g, v[0], s));
}
static mtf_tensor c_where(ARGS) {
  UNUSED_INPUTS;
  mtf_shape scalar = {0};
  mtf_tensor cond = mtf_greater(g, v[2], mtf_constant(g, &scalar, 0.0f));
  return mtf_add(g, mtf_where(g, cond, v[0], v[1]), mtf_where(g, mtf_less(g, v[0], v[1]), v[1], v[2]));
}
static mtf_tensor c_where_int_cond(ARGS) {
  mtf_tensor labels = labels_input(g, in, n_in, "a:4");
  return mtf_where(g, labels, v[0], mtf_scalar_multiply(g, v[0], -3.0f));
}
/* Positions include -1 and 6 (outside v:6: nothing written); with v split, each rank writes its own range. */
static mtf_tensor c_write_at(ARGS) {
  return mtf_write_at(g, v[0], v[1], labels_input(g, in, n_in, "a:3"), "v");
}
/* The value in another dimension order, positions over only some of the rows' dims, dim in the middle. */
static mtf_tensor c_write_at_middle(ARGS) {
  return mtf_write_at(g, v[0], v[1], labels_input(g, in, n_in, "d:4"), "v");
}
static mtf_tensor c_to_float(ARGS) { return mtf_multiply(g, mtf_to_float(g, labels_input(g, in, n_in, "a:4,d:2")), v[0]); }

/* Optimizer updates. Scalars come from reductions of a variable, so over a split dim they arrive as partial
 * sums the update's lowering must sum first. */
static mtf_tensor scalar_of(mtf_graph *g, mtf_tensor x, float scale, float offset) {
  mtf_shape scalar = {0};
  return mtf_scalar_add(g, mtf_scalar_multiply(g, mtf_sigmoid(g, mtf_reduce_sum(g, x, &scalar)), scale), offset);
}
static mtf_tensor c_moving_average(ARGS) {
  UNUSED_INPUTS;
  return mtf_moving_average(g, v[0], v[1], MTF_NO_TENSOR, 0.9f, 1, 0.0f);
}
static mtf_tensor c_moving_average_decay(ARGS) {
  UNUSED_INPUTS;
  return mtf_moving_average(g, v[0], v[1], scalar_of(g, v[2], 0.5f, 0.25f), 0.0f, 2, 0.125f);
}
static mtf_tensor c_adam_update(ARGS) {
  UNUSED_INPUTS;
  mtf_shape scalar = {0};
  mtf_tensor step = mtf_constant(g, &scalar, 3.0f);
  return mtf_adam_update(g, v[0], v[1], positive(g, v[2]), scalar_of(g, v[1], 0.5f, 0.0f), step, 0.9f, 0.999f, 1e-3f,
                         0.1f);
}
/* Adafactor's factors broadcast over w by name (rows, columns; one of w's shape), its step size a scalar. */
static mtf_tensor c_adafactor_update(ARGS) {
  UNUSED_INPUTS;
  return mtf_adafactor_update(g, v[0], v[1], scalar_of(g, v[1], 0.5f, 0.25f), positive(g, v[2]), positive(g, v[3]));
}
static mtf_tensor c_adafactor_update_one(ARGS) {
  UNUSED_INPUTS;
  mtf_shape scalar = {0};
  return mtf_adafactor_update(g, v[0], v[1], mtf_constant(g, &scalar, 0.3f), positive(g, v[2]), MTF_NO_TENSOR);
}
static mtf_tensor c_adafactor_squares(ARGS) {
  UNUSED_INPUTS;
  return mtf_adafactor_squares(g, v[0], positive(g, v[1]), positive(g, v[2]));
}
static mtf_tensor c_adafactor_squares_one(ARGS) {
  UNUSED_INPUTS;
  return mtf_adafactor_squares(g, v[0], positive(g, v[1]), MTF_NO_TENSOR);
}
static mtf_tensor c_adam_update_no_beta1(ARGS) {
  UNUSED_INPUTS;
  mtf_shape scalar = {0};
  mtf_tensor step = mtf_scalar_add(g, mtf_constant(g, &scalar, 0.0f), 1.0f);
  return mtf_adam_update(g, v[0], v[1], positive(g, v[2]), mtf_constant(g, &scalar, 0.25f), step, 0.0f, 0.5f, 1e-8f, 0.0f);
}

/* bfloat16 (ops/cast.c): casts, and products of bfloat16 operands (fp32 accumulation) in each einsum order:
 * in place, the output transposed (a weight's gradient), packed operands (the widened path), lonely dims. */
static mtf_tensor c_cast(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor rounded = mtf_cast(g, mtf_cast(g, v[0], MTF_BF16), MTF_F32);
  return mtf_add(g, mtf_multiply(g, rounded, v[1]), mtf_cast(g, mtf_cast(g, v[1], MTF_BF16), MTF_F32));
}
static mtf_tensor bf16_product(mtf_graph *g, const mtf_tensor *v, const char *out) {
  mtf_dtype before = mtf_graph_matmul_dtype(g);
  mtf_graph_set_matmul_dtype(g, MTF_BF16);
  mtf_shape o = S(out);
  mtf_tensor y = mtf_einsum2(g, v[0], v[1], &o);
  mtf_graph_set_matmul_dtype(g, before);
  return y;
}
static mtf_tensor c_bf16_matmul(ARGS) { UNUSED_INPUTS; return bf16_product(g, v, "a:3,b:6"); }
static mtf_tensor c_bf16_matmul_transposed(ARGS) { UNUSED_INPUTS; return bf16_product(g, v, "b:6,a:3"); }
static mtf_tensor c_bf16_batch(ARGS) { UNUSED_INPUTS; return bf16_product(g, v, "a:3,e:2,b:5"); }
static mtf_tensor c_bf16_lonely(ARGS) { UNUSED_INPUTS; return bf16_product(g, v, "b:5"); }
/* A bfloat16 operand and a float32 one: the float32 one is cast, whatever the graph's setting. */
static mtf_tensor c_bf16_mixed(ARGS) {
  UNUSED_INPUTS;
  mtf_shape o = S("a:3,b:6");
  return mtf_einsum2(g, mtf_cast(g, v[0], MTF_BF16), v[1], &o);
}

/* A bfloat16 tensor that moves: split along a (layout a:m), its rename to e (split nowhere) allgathers it,
 * 2 bytes an element. */
static mtf_tensor c_bf16_moved(ARGS) {
  UNUSED_INPUTS;
  mtf_tensor moved = mtf_rename(g, mtf_cast(g, v[0], MTF_BF16), "a", "e");
  mtf_shape o = S("e:4,b:6");
  return mtf_einsum2(g, moved, v[1], &o);
}

static const op_case cases[] = {
    {"einsum matmul", {"a:3,d:4", "d:4,b:5"}, c_matmul},
    {"einsum transposed operands", {"d:4,a:3", "b:5,d:4"}, c_matmul_transposed},
    {"einsum batch, odd order", {"e:2,a:3,d:4", "d:4,e:2,b:5"}, c_batch_matmul},
    {"einsum lonely and size-1 dims", {"a:3,c:1,d:4", "d:4,b:5"}, c_lonely},
    {"einsum one operand (transpose)", {"a:3,c:1,d:4"}, c_transpose},
    {"reduce_sum middle dim", {"a:3,d:4,b:5"}, c_reduce_middle},
    {"binary ops, broadcast b", {"a:3,d:4", "d:4"}, c_binary},
    {"binary ops, broadcast a", {"a:3,d:4", "d:4"}, c_binary_swapped},
    {"equal / less_equal", {"a:3,d:4", "a:3"}, c_compare},
    {"unary functions", {"a:3,c:1,d:4"}, c_unary},
    {"swish (SiLU)", {"a:3,c:1,d:4"}, c_swish},
    {"sin, cos (large angles)", {"a:3,d:4"}, c_sin_cos},
    {"reduce_max", {"a:3,d:4"}, c_reduce_max},
    {"broadcast", {"d:4"}, c_broadcast},
    {"constant, range, one_hot", {"d:4,v:6"}, c_sources},
    {"random keep (dropout)", {"a:3,d:4"}, c_dropout},
    {"reshape and rename", {"a:3,d:4"}, c_reshape},
    {"stop_gradient", {"a:3,d:4"}, c_stop},
    {"softmax, dim last", {"a:3,c:1,d:4"}, c_softmax_last},
    {"softmax, dim first", {"d:4,a:3"}, c_softmax_first},
    {"log_softmax, dim middle", {"a:3,d:4,b:5"}, c_log_softmax},
    {"layer_norm", {"a:3,d:4", "d:4", "d:4"}, c_layer_norm},
    {"layer_norm, mean 100 x std", {"a:3,d:8"}, c_layer_norm_offset},
    {"rms_norm, dim first", {"d:4,a:3", "d:4"}, c_rms_norm},
    {"rms_norm into a product", {"a:3,d:4", "d:4,e:2"}, c_rms_norm_product},
    {"gelu of a product", {"a:3,d:4", "d:4,e:2"}, c_gelu_product},
    {"causal mask + softmax", {"q:4,m:4,e:2"}, c_causal},
    {"masked_fill", {"a:3,d:4"}, c_masked_fill},
    {"causal attention", {"a:2,q:6,e:4", "a:2,m:6,e:4", "a:2,m:6,e:4"}, c_attention},
    /* 67 positions: two tiles of the kernels, the second partial; k and v in another dim order than q. */
    {"causal attention, 2 tiles, dims reordered", {"q:67,e:2,h:2", "h:2,m:67,e:2", "h:2,m:67,e:2"}, c_attention},
    {"causal attention with dropout", {"a:2,q:6,e:4", "a:2,m:6,e:4", "a:2,m:6,e:4"}, c_attention_dropout},
    {"causal attention with dropout, 2 tiles", {"q:67,e:2,h:2", "h:2,m:67,e:2", "h:2,m:67,e:2"}, c_attention_dropout},
    /* more query rows than one block of the bf16 path (MTF_ATTENTION_BF16_ROWS), an odd depth */
    {"causal attention with dropout, 2 row blocks", {"q:131,e:3", "m:131,e:3", "m:131,e:3"}, c_attention_dropout},
    {"causal attention + logsumexp output", {"q:5,a:2,e:2", "a:2,m:5,e:2", "a:2,m:5,e:2"}, c_attention_lse},
    /* The bias broadcast over a (its gradient summed over a's problems), and per head across 2 tiles. */
    {"causal attention with a bias", {"a:2,q:6,e:4", "a:2,m:6,e:4", "a:2,m:6,e:4", "m:6,q:6"}, c_attention_bias},
    /* The dropout mask over a, which the bias gradient's output lacks (drawn from q's global indices). */
    {"causal attention with a bias, dropout", {"a:2,q:6,e:4", "a:2,m:6,e:4", "a:2,m:6,e:4", "m:6,q:6"},
     c_attention_bias_dropout},
    {"causal attention with a bias, 2 tiles", {"q:67,e:2", "m:67,e:2", "m:67,e:2", "q:67,m:67"}, c_attention_bias},
    {"causal attention with segments", {"a:2,q:6,e:4", "a:2,m:6,e:4", "a:2,m:6,e:4"}, c_attention_segments},
    {"causal attention with segments, dropout, 2 tiles", {"q:67,e:2", "m:67,e:2", "m:67,e:2"}, c_attention_segments_67},
    {"causal attention with a bias per head, segments, dropout", {"h:2,q:6,e:2", "m:6,h:2,e:2", "m:6,h:2,e:2",
     "h:2,q:6,m:6"}, c_attention_bias_segments},
    {"causal attention, grouped heads, bias, dropout", {"k:2,q:6,g:2,e:2", "m:6,k:2,e:2", "m:6,k:2,e:2", "g:2,q:6,m:6"},
     c_attention_grouped},
    {"bidirectional attention", {"a:2,q:6,e:4", "a:2,m:6,e:4", "a:2,m:6,e:4"}, c_attention_bidirectional},
    {"bidirectional attention with a bias per head, segments, dropout", {"h:2,q:6,e:2", "m:6,h:2,e:2", "m:6,h:2,e:2",
     "h:2,q:6,m:6"}, c_attention_bidirectional_all},
    {"bidirectional attention with segments, dropout, 2 tiles", {"q:67,e:2", "m:67,e:2", "m:67,e:2"},
     c_attention_bidirectional_67},
    {"softmax_cross_entropy + z_loss", {"a:3,c:1,v:6"}, c_xent},
    {"softmax_cross_entropy, vocab first", {"v:6,a:3"}, c_xent_vocab_first},
    {"softmax_cross_entropy + label smoothing + z_loss", {"a:3,c:1,v:6"}, c_xent_smoothed},
    {"softmax_cross_entropy + label smoothing, vocab first", {"v:8,a:3"}, c_xent_smoothed_vocab_first},
    {"gather / scatter_add", {"v:6,d:4"}, c_gather},
    {"gather, vocab last", {"d:4,v:6"}, c_gather_vocab_last},
    {"gather with float ids", {"v:6,d:4"}, c_gather_float_ids},
    {"softmax_grad, dim last", {"a:3,d:4", "a:3,d:4"}, c_softmax_grad},
    {"log_softmax_grad, dim middle", {"a:4,d:4,b:3", "a:4,d:4,b:3"}, c_log_softmax_grad},
    {"layer_norm_grad, dim first", {"d:4,a:2", "d:4,a:2"}, c_layer_norm_grad},
    {"layer_norm_grad, mean 100 x std", {"a:3,d:8", "a:3,d:8"}, c_layer_norm_grad_offset},
    {"rms_norm_grad", {"a:3,d:4", "a:3,d:4"}, c_rms_norm_grad},
    /* rows longer than the cpu kernels' 16 lanes (the bf16 policy's lane sums, exec/cpu/fused_grad.c) */
    {"layer_norm_grad, rows of 40", {"a:2,d:40", "a:2,d:40"}, c_layer_norm_grad},
    {"rms_norm_grad, rows of 40", {"a:2,d:40", "a:2,d:40"}, c_rms_norm_grad},
    {"softmax_cross_entropy_grad + z_loss", {"a:3,c:1,v:6", "a:3,c:1"}, c_xent_grad},
    {"softmax_cross_entropy_grad, vocab first", {"v:8,a:4", "a:4"}, c_xent_grad_vocab_first},
    {"softmax_cross_entropy_grad + label smoothing + z_loss", {"a:3,c:1,v:6", "a:3,c:1"}, c_xent_smoothed_grad},
    {"gelu_grad", {"a:3,d:4", "a:3,d:4"}, c_gelu_grad},
    {"select: top_k, dim last", {"a:3,d:6", "k:2"}, c_top_k},
    {"select: top_k, dim first, k odd", {"d:4,a:3,b:2", "k:3"}, c_top_k},
    {"select: top_k, k = size (sort)", {"a:2,d:4,b:3", "k:4"}, c_top_k},
    /* d split in 2 (4) leaves 8 (4) entries per rank: each selects 2 candidates, no gather */
    {"select: top_k, k 2 of 16 (candidates)", {"a:3,d:16", "k:2"}, c_top_k},
    {"select: top_k with ties", {"a:4", "d:4"}, c_top_k_ties},
    {"select: argmax, dim last", {"a:3,d:4"}, c_argmax},
    {"select: argmax, dim first", {"d:6,a:2,b:3"}, c_argmax},
    {"select: argmax with ties", {"a:4", "d:4"}, c_argmax_ties},
    {"select: cumsum, dim last", {"a:3,d:4"}, c_cumsum},
    {"select: cumsum exclusive, dim first", {"d:6,a:2,b:3"}, c_cumsum_exclusive},
    {"select: cumsum reverse, dim middle", {"a:3,d:4,b:2"}, c_cumsum_reverse},
    {"select: cumsum of a mask (capacity)", {"b:2,d:8"}, c_cumsum_mask},
    {"select: greater / less, broadcast", {"a:3,d:4", "d:4"}, c_greater_less},
    {"select: maximum / minimum, broadcast", {"a:3,d:4", "a:3"}, c_maximum_minimum},
    {"select: maximum / minimum ties", {"a:3,d:4"}, c_maximum_ties},
    {"select: where, broadcast", {"a:3,d:4", "a:3", "d:4"}, c_where},
    {"select: where, int32 condition", {"a:4,d:2"}, c_where_int_cond},
    {"select: to_float of int32", {"a:4,d:2"}, c_to_float},
    {"bf16: cast round trips", {"a:3,d:4", "a:3,d:4"}, c_cast},
    {"bf16: einsum matmul", {"a:3,d:4", "d:4,b:6"}, c_bf16_matmul},
    {"bf16: einsum output transposed", {"d:4,a:3", "d:4,b:6"}, c_bf16_matmul_transposed},
    {"bf16: einsum batch, odd order", {"e:2,a:3,d:4", "d:4,e:2,b:5"}, c_bf16_batch},
    {"bf16: einsum lonely and size-1 dims", {"a:3,c:1,d:4", "d:4,b:5"}, c_bf16_lonely},
    {"bf16: einsum of bf16 and fp32 operands", {"a:3,d:4", "d:4,b:6"}, c_bf16_mixed},
    {"bf16: a bfloat16 operand gathered by a rename", {"a:4,d:4", "d:4,b:6"}, c_bf16_moved},
};

/* Ops without a gradient: values only, and mtf_gradients through them must fail. */
/* Cases of the bf16 kernels' own structure, run under --bf16 and --bf16-storage only (in fp32 their finite
 * differences would take most of the suite's time, for nothing the cases above do not cover). */
static const op_case bf16_cases[] = {
    /* 8 problems of 131 rows: the bf16 attention's groups (mtf_attention_bf16_group) of 7, then a partial 1 */
    {"causal attention, 2 row blocks, 8 problems", {"a:8,q:131,e:3", "a:8,m:131,e:3", "a:8,m:131,e:3"}, c_attention},
    /* the segment mask across the bf16 path's row blocks (fp32's tiles: the 67-position cases) */
    {"causal attention with segments, dropout, 2 row blocks", {"q:131,e:3", "m:131,e:3", "m:131,e:3"},
     c_attention_segments_131},
    {"bidirectional attention with segments, dropout, 2 row blocks", {"q:131,e:3", "m:131,e:3", "m:131,e:3"},
     c_attention_bidirectional_131},
    {"attention d_kv 64, causal, bias per head, segments, dropout", {"h:2,q:40,e:64", "m:40,h:2,e:64", "m:40,h:2,e:64",
     "h:2,q:40,m:40"}, c_attention_tc_causal},
    {"attention d_kv 128, bidirectional, bias, segments", {"q:40,e:128", "m:40,e:128", "m:40,e:128", "q:40,m:40"},
     c_attention_tc_bidirectional},
    {"attention d_kv 64, grouped heads, bias, dropout", {"k:2,q:40,g:2,e:64", "m:40,k:2,e:64", "m:40,k:2,e:64",
     "g:2,q:40,m:40"}, c_attention_tc_grouped},
    {"attention d_kv 128, causal, 70 positions", {"q:70,e:128,a:2", "a:2,m:70,e:128", "a:2,m:70,e:128"},
     c_attention_tc_plain},
};

static const op_case forward_only_cases[] = {
    {"moving_average, constant decay", {"a:3,d:4", "a:3,d:4"}, c_moving_average},
    {"moving_average, decay tensor, squared", {"a:3,c:1,d:4", "a:3,c:1,d:4", "d:4"}, c_moving_average_decay},
    {"adam_update", {"a:3,d:4", "a:3,d:4", "a:3,d:4"}, c_adam_update},
    {"adam_update, beta1 0, step 1", {"d:4,b:5", "d:4,b:5", "d:4,b:5"}, c_adam_update_no_beta1},
    {"adafactor_update, row and column factors", {"r:4,b:3,c:6", "r:4,b:3,c:6", "r:4,b:3", "b:3,c:6"},
     c_adafactor_update},
    {"adafactor_update, one factor", {"a:3,d:4", "a:3,d:4", "a:3,d:4"}, c_adafactor_update_one},
    {"adafactor_squares, row and column factors", {"r:4,b:3,c:6", "r:4,b:3", "c:6,b:3"}, c_adafactor_squares},
    {"adafactor_squares, one factor", {"a:4,d:2", "d:2,a:4"}, c_adafactor_squares_one},
    {"write_at", {"a:3,v:6,d:4", "a:3,d:4"}, c_write_at},
    {"write_at, dim in the middle, value transposed", {"a:2,v:6,d:4", "d:4,a:2"}, c_write_at_middle},
};

/* Cases for the plan steps the op cases do not reach: resharding between dims (all-to-all; reduce-scatter
 * of pending sums), and a training step (assigns: the updated variables are results; gradient buckets:
 * START/WAIT). Their layouts are given: the dims that move are the outputs'. */
static mtf_tensor c_reshard(ARGS) {
  UNUSED_INPUTS;
  mtf_shape o = S("c:4,e:8");
  return mtf_square(g, mtf_reshape(g, v[0], &o));
}
static mtf_tensor c_reshard_sums(ARGS) {
  UNUSED_INPUTS;
  mtf_shape p = S("a:4,d:8"), o = S("c:4,e:8");
  return mtf_square(g, mtf_reshape(g, mtf_einsum2(g, v[0], v[1], &p), &o));
}
static mtf_tensor c_train_step(ARGS) {
  UNUSED_INPUTS;
  mtf_shape h = S("a:4,b:4");
  return mtf_tanh(g, mtf_multiply(g, mtf_einsum2(g, v[0], v[1], &h), v[2]));
}
typedef struct step_case {
  op_case c;
  /* NULL-terminated, for a mesh whose first axis is m and second b (pjrt's --mesh b:2,m:2); on a 1-D mesh the
   * layout rules drop the rule naming b (core/layout.c), which then leaves that dim whole */
  const char *layouts[4];
  int train;              /* an SGD step assigned to every variable but the first, with gradient buckets */
} step_case;
static const step_case step_cases[] = {
    {{"step: reshard all-to-all", {"a:4,d:8"}, c_reshard}, {"a:m;e:m", "d:m;c:m", "a:b;e:m", NULL}, 0},
    {{"step: reshard reduce-scatter of sums", {"a:4,k:4", "k:4,d:8"}, c_reshard_sums}, {"k:m;e:m", "k:m;c:m", "k:b;c:m", NULL}, 0},
    {{"step: SGD assigns, gradient buckets", {"a:4,d:4", "d:4,b:4", "b:4"}, c_train_step}, {"a:m", "a:m;b:m", "a:b;b:m", NULL}, 1},
};

#endif
