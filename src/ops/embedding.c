/* Embedding lookup (gather) and its gradient (scatter-add), with integer ids. With a split vocabulary
 * each rank looks up only the ids of its own range (step.dim_offset) and leaves zeros elsewhere: partial
 * sums over the vocabulary's axis, summed by lowering's deferred allreduce. Never a one-hot matmul. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

static int ids_ok(mtf_graph *g, mtf_tensor ids, const char *op) {
  mtf_dtype t = g->nodes[ids].dtype;
  if (t == MTF_I32 || t == MTF_F32) return 1; /* float ids must hold integers */
  mtf_graph_fail(g, MTF_ERR_INVALID, "%s: ids '%s' must be integers", op, g->nodes[ids].name);
  return 0;
}

mtf_tensor mtf_gather(mtf_graph *g, mtf_tensor table, mtf_tensor ids, const char *vocab_dim) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.along.dim, sizeof p.along.dim, "%s", vocab_dim);
  mtf_tensor in[2] = {table, ids};
  return mtf_graph_add_op(g, MTF_OP_GATHER, 2, in, &p, NULL);
}

static int gather_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0) || !mtf_op_needs_dim(g, n, 0, n->params.along.dim, "gather") ||
      !ids_ok(g, n->inputs[1], "gather"))
    return g->error.code;
  mtf_shape rest;
  mtf_error err;
  mtf_shape_remove(&g->nodes[n->inputs[0]].shape, n->params.along.dim, &rest, NULL);
  if (mtf_shape_concat(&g->nodes[n->inputs[1]].shape, &rest, &n->shape, &err))
    return mtf_graph_fail(g, err.code, "gather: %s", err.msg), g->error.code;
  n->dtype = MTF_F32;
  return MTF_OK;
}

mtf_tensor mtf_scatter_add(mtf_graph *g, mtf_tensor rows, mtf_tensor ids, const mtf_shape *table_shape,
                           const char *dim) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.along.dim, sizeof p.along.dim, "%s", dim);
  mtf_tensor in[2] = {rows, ids};
  return mtf_graph_add_op(g, MTF_OP_SCATTER_ADD, 2, in, &p, table_shape);
}

static int scatter_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0) || !ids_ok(g, n->inputs[1], "scatter_add")) return g->error.code;
  if (!mtf_shape_has(&n->shape, n->params.along.dim))
    return mtf_graph_fail(g, MTF_ERR_INVALID, "scatter_add: the table has no dimension '%s'", n->params.along.dim),
           g->error.code;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static void gather_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  if (!mtf_grad_wanted(ctx, &n, 0)) return;
  mtf_shape table = ctx->g->nodes[n.inputs[0]].shape;
  mtf_grad_accumulate(ctx, n.inputs[0], mtf_scatter_add(ctx->g, dy, n.inputs[1], &table, n.params.along.dim));
}

static void scatter_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  if (mtf_grad_wanted(ctx, &n, 0))
    mtf_grad_accumulate(ctx, n.inputs[0], mtf_gather(ctx->g, dy, n.inputs[1], n.params.along.dim));
}

/* Both are reductions: gather sums over the table's vocabulary (one nonzero term), scatter-add over the
 * ids' dims; split summed dims leave partial sums. */
static int reduction_lower(mtf_lowering *lw, int node) {
  mtf_axis_set reduced;
  MTF_CHECK(mtf_lower_reduction(lw, node, &reduced));
  mtf_lower_set_pending(lw, node, reduced);
  return MTF_OK;
}

/* The ids' walk: for each multi-index of the ids, the row of the table it selects. */
static void embedding_reference(const mtf_ref_args *a, int scatter) {
  const char *dim = a->n->params.along.dim;
  const mtf_shape *table = scatter ? &a->n->shape : a->in_shape[0], *ids = a->in_shape[1];
  mtf_shape rest;
  mtf_shape_remove(table, dim, &rest, NULL);
  int d = mtf_shape_index_of(table, dim);
  int64_t vocab = table->dims[d].size, stride = 1;
  for (int i = d + 1; i < table->rank; i++) stride *= table->dims[i].size;
  mtf_shape walk;
  mtf_shape_concat(ids, &rest, &walk, NULL);
  if (scatter) memset(a->out, 0, sizeof(double) * (size_t)mtf_shape_num_elements(table));
  int64_t index[2 * MTF_MAX_RANK] = {0};
  do {
    long long id = llround(a->in[1][mtf_ref_offset(&walk, index, ids)]);
    if (id < 0 || id >= vocab) {
      if (!scatter) a->out[mtf_ref_offset(&walk, index, &walk)] = 0;
      continue;
    }
    int64_t t = mtf_ref_offset(&walk, index, table) + id * stride; /* the walk's vocab index is 0 */
    if (scatter) a->out[t] += a->in[0][mtf_ref_offset(&walk, index, a->in_shape[0])];
    else a->out[mtf_ref_offset(&walk, index, &walk)] = a->in[0][t];
  } while (mtf_ref_next(&walk, index));
}

static void gather_reference(const mtf_ref_args *a) { embedding_reference(a, 0); }
static void scatter_reference(const mtf_ref_args *a) { embedding_reference(a, 1); }

const mtf_op_def mtf_op_gather = {"gather", MTF_DIM_IN_INPUT, gather_infer, gather_gradient, reduction_lower,
                                  mtf_op_flops_elements, NULL, gather_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_scatter_add = {"scatter_add", MTF_DIM_IN_OUTPUT, scatter_infer, scatter_gradient,
                                       reduction_lower, mtf_op_flops_elements, NULL, scatter_reference, 0, 0, 0, 0};
