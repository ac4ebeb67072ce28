/* Einsum (products and sums over named dims) and max reductions. A sum over a split dimension leaves
 * partial sums whose allreduce lowering defers; a max over one is max-allreduced at once. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/einsum_dims.h"
#include "ops/op_def.h"

/* A product's operand dtype: the graph's matmul dtype, or bfloat16 when either operand already is one. */
static mtf_dtype product_dtype(const mtf_graph *g, const mtf_tensor *inputs) {
  if (g->nodes[inputs[0]].dtype == MTF_BF16 || g->nodes[inputs[1]].dtype == MTF_BF16) return MTF_BF16;
  return g->matmul_dtype == MTF_BF16 ? MTF_BF16 : MTF_F32;
}

mtf_tensor mtf_einsum(mtf_graph *g, int n_inputs, const mtf_tensor *inputs, const mtf_shape *output_shape) {
  if (n_inputs < 1 || n_inputs > 2) return mtf_graph_fail(g, MTF_ERR_INVALID, "einsum takes 1 or 2 inputs, not %d", n_inputs);
  if (n_inputs == 2 && mtf_graph_check(g, inputs[0], "einsum") && mtf_graph_check(g, inputs[1], "einsum") &&
      g->nodes[inputs[0]].dtype != MTF_I32 && g->nodes[inputs[1]].dtype != MTF_I32 &&
      product_dtype(g, inputs) == MTF_BF16) {
    mtf_tensor operands[2] = {mtf_cast_shared(g, inputs[0], MTF_BF16), mtf_cast_shared(g, inputs[1], MTF_BF16)};
    if (operands[0] < 0 || operands[1] < 0) return MTF_NO_TENSOR;
    return mtf_graph_add_op(g, MTF_OP_EINSUM, 2, operands, NULL, output_shape);
  }
  return mtf_graph_add_op(g, MTF_OP_EINSUM, n_inputs, inputs, NULL, output_shape);
}

mtf_tensor mtf_einsum2(mtf_graph *g, mtf_tensor a, mtf_tensor b, const mtf_shape *output_shape) {
  mtf_tensor inputs[2] = {a, b};
  return mtf_einsum(g, 2, inputs, output_shape);
}

mtf_tensor mtf_reduce_sum(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  return mtf_einsum(g, 1, &x, output_shape);
}

mtf_tensor mtf_reduce_mean(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  if (!mtf_graph_check(g, x, "reduce_mean")) return MTF_NO_TENSOR;
  mtf_tensor sum = mtf_reduce_sum(g, x, output_shape);
  if (sum < 0) return MTF_NO_TENSOR;
  double ratio = (double)mtf_shape_num_elements(&g->nodes[sum].shape) /
                 (double)mtf_shape_num_elements(&g->nodes[x].shape);
  return mtf_scalar_multiply(g, sum, (float)ratio);
}

mtf_tensor mtf_reduce_max(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  return mtf_graph_add_op(g, MTF_OP_REDUCE_MAX, 1, &x, NULL, output_shape);
}

static int shape_without(mtf_graph *g, mtf_tensor x, const char *dim, mtf_shape *out, const char *op) {
  if (!mtf_graph_check(g, x, op)) return 0;
  mtf_error err;
  if (mtf_shape_remove(&g->nodes[x].shape, dim, out, &err)) {
    mtf_graph_fail(g, err.code, "%s of '%s': %s", op, g->nodes[x].name, err.msg);
    return 0;
  }
  return 1;
}

mtf_tensor mtf_reduce_sum_dim(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_shape out;
  return shape_without(g, x, dim, &out, "reduce_sum") ? mtf_reduce_sum(g, x, &out) : MTF_NO_TENSOR;
}

mtf_tensor mtf_reduce_max_dim(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_shape out;
  return shape_without(g, x, dim, &out, "reduce_max") ? mtf_reduce_max(g, x, &out) : MTF_NO_TENSOR;
}

mtf_tensor mtf_logsumexp(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_shape reduced;
  if (!shape_without(g, x, dim, &reduced, "logsumexp")) return MTF_NO_TENSOR;
  /* The max only keeps exp() in range; it carries no gradient of its own. */
  mtf_tensor max = mtf_stop_gradient(g, mtf_reduce_max(g, x, &reduced));
  mtf_tensor sum = mtf_reduce_sum(g, mtf_exp(g, mtf_subtract(g, x, max)), &reduced);
  return mtf_add(g, mtf_log(g, sum), max);
}

static int einsum_infer(mtf_graph *g, mtf_node *n) {
  /* bfloat16 operands (both; one-operand sums take float32): fp32 accumulation, float32 result */
  int bf16 = n->n_inputs == 2 && g->nodes[n->inputs[0]].dtype == MTF_BF16 && g->nodes[n->inputs[1]].dtype == MTF_BF16;
  if (!bf16 && !mtf_op_float_inputs(g, n, 0, 1)) return g->error.code;
  mtf_shape all;
  memset(&all, 0, sizeof all);
  for (int i = 0; i < n->n_inputs; i++)
    if (!mtf_op_union_shape(g, &all, &g->nodes[n->inputs[i]].shape, &all, "einsum")) return g->error.code;
  n->dtype = MTF_F32;
  return mtf_op_dims_within(g, &n->shape, &all, "einsum", "output") ? MTF_OK : g->error.code;
}

/* Gradient of einsum input `x` given the other input `other` (or none) and dy. */
static mtf_tensor einsum_input_grad(mtf_graph *g, mtf_tensor dy, mtf_tensor other, mtf_tensor x) {
  mtf_shape x_shape = g->nodes[x].shape, reachable;
  memset(&reachable, 0, sizeof reachable);
  for (int i = 0; i < x_shape.rank; i++) {
    const char *name = x_shape.dims[i].name;
    if (mtf_shape_has(&g->nodes[dy].shape, name) || (other >= 0 && mtf_shape_has(&g->nodes[other].shape, name)))
      mtf_shape_append(&reachable, name, x_shape.dims[i].size, NULL);
  }
  mtf_tensor partial = other >= 0 ? mtf_einsum2(g, dy, other, &reachable)
                       : mtf_shape_equal(&g->nodes[dy].shape, &reachable) ? dy
                                                                           : mtf_reduce_sum(g, dy, &reachable);
  /* Dims of x summed away by the einsum get dy broadcast back along them. */
  if (reachable.rank == x_shape.rank)
    return mtf_shape_equal(&g->nodes[partial].shape, &x_shape) ? partial : mtf_reduce_sum(g, partial, &x_shape);
  return mtf_broadcast(g, partial, &x_shape);
}

static void einsum_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  for (int k = 0; k < n.n_inputs; k++)
    if (mtf_grad_wanted(ctx, &n, k))
      mtf_grad_accumulate(ctx, n.inputs[k], einsum_input_grad(ctx->g, dy, n.n_inputs == 2 ? n.inputs[1 - k] : -1, n.inputs[k]));
}

static int einsum_lower(mtf_lowering *lw, int node) {
  mtf_axis_set reduced;
  MTF_CHECK(mtf_lower_reduction(lw, node, &reduced));
  mtf_lower_set_pending(lw, node, reduced); /* summed when a consumer needs the total */
  return MTF_OK;
}

static int64_t einsum_flops(const mtf_step *s) {
  mtf_shape all = s->in_shape[0];
  if (s->n_in == 2)
    for (int i = 0; i < s->in_shape[1].rank; i++)
      if (!mtf_shape_has(&all, s->in_shape[1].dims[i].name))
        mtf_shape_append(&all, s->in_shape[1].dims[i].name, s->in_shape[1].dims[i].size, NULL);
  return (s->n_in == 2 ? 2 : 1) * mtf_shape_num_elements(&all);
}

/* float32 elements: the decomposition's packed copies, and for bfloat16 operands that must be summed or
 * reordered first, both operands widened to float32 after them (the CUDA backend multiplies those in fp32:
 * exact products, as a bfloat16 GEMM's). */
static int64_t einsum_scratch(const mtf_step *s) {
  if (s->n_in != 2) return 0;
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&s->in_shape[0], &s->in_shape[1], &s->out_shape, &d);
  int64_t n = d.scratch_elements;
  int bf16 = s->in_dtype[0] == MTF_BF16, widened = bf16 && (d.a_summed || d.b_summed || d.a_packed || d.b_packed);
  if (widened) n += mtf_shape_num_elements(&s->in_shape[0]) + mtf_shape_num_elements(&s->in_shape[1]);
  /* a float32 product whose bf16-stored result (lower/storage.c) is not unpacked from the GEMM's own scratch:
   * formed in fp32 here, then rounded (a GEMM of bfloat16 operands rounds its result itself) */
  if (s->out_dtype == MTF_BF16 && (!bf16 || widened) && !d.c_packed) n += mtf_shape_num_elements(&s->out_shape);
  return n;
}

static mtf_shape union_of(const mtf_ref_args *a) {
  mtf_shape u = a->n->shape;
  for (int k = 0; k < a->n->n_inputs; k++)
    for (int d = 0; d < a->in_shape[k]->rank; d++)
      if (!mtf_shape_has(&u, a->in_shape[k]->dims[d].name))
        mtf_shape_append(&u, a->in_shape[k]->dims[d].name, a->in_shape[k]->dims[d].size, NULL);
  return u;
}

static void reduction_reference(const mtf_ref_args *a, int is_max) {
  mtf_shape u = union_of(a);
  int64_t total = mtf_shape_num_elements(&a->n->shape), index[MTF_MAX_RANK] = {0};
  for (int64_t e = 0; e < total; e++) a->out[e] = is_max ? -INFINITY : 0.0;
  do {
    int64_t o = mtf_ref_offset(&u, index, &a->n->shape);
    double v = a->in[0][mtf_ref_offset(&u, index, a->in_shape[0])];
    if (is_max) {
      if (v > a->out[o]) a->out[o] = v;
    } else {
      a->out[o] += a->n->n_inputs == 2 ? v * a->in[1][mtf_ref_offset(&u, index, a->in_shape[1])] : v;
    }
  } while (mtf_ref_next(&u, index));
}

static void einsum_reference(const mtf_ref_args *a) { reduction_reference(a, 0); }

const mtf_op_def mtf_op_einsum = {"einsum", MTF_DIM_NONE, einsum_infer, einsum_gradient, einsum_lower, einsum_flops, einsum_scratch,
                                  einsum_reference, 1, 0, 1, 0};

static int reduce_max_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0)) return g->error.code;
  n->dtype = MTF_F32;
  return mtf_op_dims_within(g, &n->shape, &g->nodes[n->inputs[0]].shape, "reduce_max", "output") ? MTF_OK
                                                                                                 : g->error.code;
}

static void reduce_max_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_tensor x = ctx->g->nodes[self].inputs[0];
  mtf_grad_accumulate(ctx, x, mtf_multiply(ctx->g, mtf_equal(ctx->g, x, self), dy));
}

static int reduce_max_lower(mtf_lowering *lw, int node) {
  mtf_axis_set reduced;
  MTF_CHECK(mtf_lower_reduction(lw, node, &reduced));
  return reduced ? mtf_lower_allreduce(lw, node, reduced, MTF_REDUCE_MAX) : MTF_OK;
}

static void reduce_max_reference(const mtf_ref_args *a) { reduction_reference(a, 1); }

const mtf_op_def mtf_op_reduce_max = {"reduce_max", MTF_DIM_NONE, reduce_max_infer, reduce_max_gradient, reduce_max_lower,
                                      mtf_op_flops_elements, NULL, reduce_max_reference, 0, 0, 0, 0};
