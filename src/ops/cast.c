/* cast: a float tensor in another float dtype (float32 <-> bfloat16), and the graph's matmul precision that
 * places casts in front of two-operand einsums (backend.precision bf16: mtf_graph_set_matmul_dtype). The
 * rounding is core/bf16.h's, on every backend and in the reference. */
#include <stdio.h>

#include "core/bf16.h"
#include "ops/op_def.h"

static int float_dtype(mtf_dtype t) { return t == MTF_F32 || t == MTF_BF16; }

mtf_tensor mtf_cast(mtf_graph *g, mtf_tensor x, mtf_dtype to) {
  if (!mtf_graph_check(g, x, "cast")) return MTF_NO_TENSOR;
  if (g->nodes[x].dtype == to) return x;
  mtf_op_params p = {.cast = {.to = to}};
  return mtf_graph_add_op(g, MTF_OP_CAST, 1, &x, &p, NULL);
}

/* The cast of x to dtype, made once per tensor (and recompute block): a weight used by several einsums of a
 * step, forward and backward, is rounded once, not once per product. */
mtf_tensor mtf_cast_shared(mtf_graph *g, mtf_tensor x, mtf_dtype to) {
  if (!mtf_graph_check(g, x, "cast")) return MTF_NO_TENSOR;
  if (g->nodes[x].dtype == to) return x;
  for (int i = g->n_nodes - 1; i > x; i--) {
    const mtf_node *n = &g->nodes[i];
    if (n->kind == MTF_OP_CAST && n->inputs[0] == x && n->params.cast.to == to && n->block == g->current_block)
      return i;
  }
  return mtf_cast(g, x, to);
}

void mtf_graph_set_matmul_dtype(mtf_graph *g, mtf_dtype dtype) {
  if (!float_dtype(dtype)) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "matmul dtype must be float32 or bfloat16, not %s", mtf_dtype_name(dtype));
    return;
  }
  g->matmul_dtype = dtype;
}

mtf_dtype mtf_graph_matmul_dtype(const mtf_graph *g) { return g->matmul_dtype; }

void mtf_graph_set_policy_sums(mtf_graph *g, int on) { g->policy_sums = on != 0; }

static int cast_infer(mtf_graph *g, mtf_node *n) {
  const mtf_node *x = &g->nodes[n->inputs[0]];
  if (!float_dtype(x->dtype) || !float_dtype(n->params.cast.to))
    return mtf_graph_fail(g, MTF_ERR_INVALID, "cast of '%s': %s -> %s; cast converts between float32 and bfloat16 "
                          "(mtf_to_float converts int32)", x->name, mtf_dtype_name(x->dtype),
                          mtf_dtype_name(n->params.cast.to)),
           g->error.code;
  n->shape = x->shape;
  n->dtype = n->params.cast.to;
  return MTF_OK;
}

/* Gradients stay float32 whatever the dtype of the tensor they belong to, so the cast passes dy through
 * (the straight-through gradient of the rounding). */
static void cast_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  if (mtf_grad_wanted(ctx, &n, 0)) mtf_grad_accumulate(ctx, n.inputs[0], dy);
}

/* A cast to bfloat16 of a value the plan already stores as bfloat16 (lower/storage.c) is that value. */
static int cast_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  if (mtf_lowering_dtype(lw, n->inputs[0]) == n->params.cast.to && mtf_lowering_pending(lw, n->inputs[0]) == 0)
    return mtf_lower_alias(lw, node);
  return mtf_lower_local(lw, node, 0);
}

static void cast_reference(const mtf_ref_args *a) {
  int64_t n = mtf_shape_num_elements(&a->n->shape);
  int to_bf16 = a->n->params.cast.to == MTF_BF16;
  for (int64_t i = 0; i < n; i++) a->out[i] = to_bf16 ? (double)mtf_bf16_round((float)a->in[0][i]) : a->in[0][i];
}

const mtf_op_def mtf_op_cast = {"cast", MTF_DIM_NONE, cast_infer, cast_gradient, cast_lower, mtf_op_flops_elements,
                                NULL, cast_reference, 1, 0, 0, 0};
