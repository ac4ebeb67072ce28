/* write_at: a tensor with, for each row, a new slice written at one index along a named dim (the decode
 * step's key/value cache update: the new token's keys at each row's position). Inputs: the tensor x, the
 * value (x's dims without the dim) and int32 positions (dims among the value's). Positions outside
 * [0, size of the dim) write nothing.
 *
 * Lowering: every input follows its layout (the value and the positions are split like x on the dims they
 * share); with the dim split, each rank writes the positions in its own range (step.dim_offset). When x is
 * a variable that this plan assigns exactly this node's value and that nothing else reads, the step writes
 * into the variable's storage (only the rows, not a pass over x) and the assign copies nothing
 * (lower.c); otherwise the kernel copies x first. No gradient: the op serves decoding state. */
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

mtf_tensor mtf_write_at(mtf_graph *g, mtf_tensor x, mtf_tensor value, mtf_tensor positions, const char *dim) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.along.dim, sizeof p.along.dim, "%s", dim);
  mtf_tensor in[3] = {x, value, positions};
  return mtf_graph_add_op(g, MTF_OP_WRITE_AT, 3, in, &p, NULL);
}

static int write_at_infer(mtf_graph *g, mtf_node *n) {
  const char *dim = n->params.along.dim;
  if (!mtf_op_float_inputs(g, n, 0, 1) || !mtf_op_needs_dim(g, n, 0, dim, "write_at")) return g->error.code;
  const mtf_shape *x = &g->nodes[n->inputs[0]].shape, *value = &g->nodes[n->inputs[1]].shape;
  const mtf_node *positions = &g->nodes[n->inputs[2]];
  mtf_shape rows = mtf_op_shape_without(x, dim);
  char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
  if (value->rank != rows.rank || !mtf_op_dims_within(g, value, &rows, "write_at", "the value")) {
    if (g->error.code == MTF_OK)
      mtf_graph_fail(g, MTF_ERR_INVALID, "write_at: the value %s must have the dims of '%s' %s without '%s'",
                     mtf_shape_format(value, a, sizeof a), g->nodes[n->inputs[0]].name,
                     mtf_shape_format(x, b, sizeof b), dim);
    return g->error.code;
  }
  if (positions->dtype != MTF_I32)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "write_at: positions '%s' must be int32", positions->name), g->error.code;
  if (!mtf_op_dims_within(g, &positions->shape, &rows, "write_at", "the positions")) return g->error.code;
  n->shape = *x;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static void write_at_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  (void)dy;
  mtf_graph *g = ctx->g;
  mtf_graph_fail(g, MTF_ERR_INVALID, "write_at '%s' has no gradient: it updates decoding state (a cache)",
                 g->nodes[self].name);
}

static int write_at_lower(mtf_lowering *lw, int node) {
  int in[3];
  mtf_shape in_shapes[3];
  mtf_dtype in_dtypes[3];
  const mtf_graph *g = mtf_lowering_graph(lw);
  for (int k = 0; k < 3; k++) {
    MTF_CHECK(mtf_lower_input(lw, node, k, &in[k], &in_shapes[k]));
    in_dtypes[k] = g->nodes[g->nodes[node].inputs[k]].dtype;
  }
  mtf_shape out_shape = mtf_lowering_local_shape(lw, node);
  int out;
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_WHOLE, 3, in, in_shapes, in_dtypes, &out_shape, &out));
  mtf_lower_set_value(lw, node, out);
  mtf_lower_into_assigned_variable(lw, node);
  return MTF_OK;
}

/* x, then each row's value at its position (rows over x without the dim, matched by name). */
static void write_at_reference(const mtf_ref_args *a) {
  const mtf_shape *x = &a->n->shape;
  memcpy(a->out, a->in[0], sizeof(double) * (size_t)mtf_shape_num_elements(x));
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, x, a->n->params.along.dim);
  do {
    double position = a->in[2][mtf_ref_offset(&w.rows, w.index, a->in_shape[2])];
    if (position < 0 || position >= (double)w.size) continue;
    a->out[mtf_ref_row_base(&w, x) + (int64_t)position * w.stride] =
        a->in[1][mtf_ref_offset(&w.rows, w.index, a->in_shape[1])];
  } while (mtf_ref_next(&w.rows, w.index));
}

const mtf_op_def mtf_op_write_at = {"write_at", MTF_DIM_IN_INPUT, write_at_infer, write_at_gradient, write_at_lower,
                                    NULL, NULL, write_at_reference, 0, 0, 0, 0};
