/* Reverse-mode autodiff over the primitives. Each gradient is built from ordinary ops, so the backward
 * pass is lowered (and communicates) by the same layout rules as the forward pass. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

/* t summed (and transposed) to `shape`, whose dims t must contain. */
static mtf_tensor fit(mtf_graph *g, mtf_tensor t, const mtf_shape *shape) {
  if (t < 0) return t;
  if (mtf_shape_equal(&g->nodes[t].shape, shape)) return t;
  return mtf_reduce_sum(g, t, shape);
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
  mtf_tensor partial = other >= 0 ? mtf_einsum2(g, dy, other, &reachable) : fit(g, dy, &reachable);
  /* Dims of x summed away by the einsum get dy broadcast back along them. */
  return reachable.rank == x_shape.rank ? fit(g, partial, &x_shape) : mtf_broadcast(g, partial, &x_shape);
}

static void accumulate(mtf_graph *g, int *grad, int target, mtf_tensor contribution) {
  if (contribution < 0) return;
  contribution = fit(g, contribution, &g->nodes[target].shape);
  grad[target] = grad[target] < 0 ? contribution : mtf_add(g, grad[target], contribution);
}

static void unary_grad(mtf_graph *g, const mtf_node *n, int self, mtf_tensor dy, int *grad) {
  mtf_tensor x = n->inputs[0], y = self, d = MTF_NO_TENSOR;
  switch ((mtf_unary_kind)n->sub) {
    case MTF_UN_AFFINE: d = mtf_scalar_multiply(g, dy, n->a); break;
    case MTF_UN_EXP: d = mtf_multiply(g, dy, y); break;
    case MTF_UN_LOG: d = mtf_divide(g, dy, x); break;
    case MTF_UN_RSQRT: /* d x^-1/2 = -1/2 y^3 */
      d = mtf_multiply(g, dy, mtf_scalar_multiply(g, mtf_multiply(g, y, mtf_square(g, y)), -0.5f));
      break;
    case MTF_UN_SQRT: d = mtf_scalar_multiply(g, mtf_divide(g, dy, y), 0.5f); break;
    case MTF_UN_SQUARE: d = mtf_multiply(g, dy, mtf_scalar_multiply(g, x, 2.0f)); break;
    case MTF_UN_TANH: d = mtf_multiply(g, dy, mtf_unary(g, mtf_square(g, y), MTF_UN_AFFINE, -1.0f, 1.0f)); break;
    case MTF_UN_SIGMOID:
      d = mtf_multiply(g, dy, mtf_multiply(g, y, mtf_unary(g, y, MTF_UN_AFFINE, -1.0f, 1.0f)));
      break;
    case MTF_UN_RELU: d = mtf_multiply(g, dy, mtf_unary(g, x, MTF_UN_STEP, 0, 0)); break;
    case MTF_UN_GELU: d = mtf_multiply(g, dy, mtf_unary(g, x, MTF_UN_GELU_GRAD, 0, 0)); break;
    case MTF_UN_STEP:
    case MTF_UN_GELU_GRAD: break; /* piecewise constant / only used inside gradients */
  }
  accumulate(g, grad, x, d);
}

static void binary_grad(mtf_graph *g, const mtf_node *n, int self, mtf_tensor dy, int *grad) {
  mtf_tensor a = n->inputs[0], b = n->inputs[1];
  switch ((mtf_binary_kind)n->sub) {
    case MTF_BIN_ADD:
      accumulate(g, grad, a, dy);
      accumulate(g, grad, b, dy);
      break;
    case MTF_BIN_SUB:
      accumulate(g, grad, a, dy);
      accumulate(g, grad, b, mtf_scalar_multiply(g, dy, -1.0f));
      break;
    case MTF_BIN_MUL:
      accumulate(g, grad, a, mtf_multiply(g, dy, b));
      accumulate(g, grad, b, mtf_multiply(g, dy, a));
      break;
    case MTF_BIN_DIV:
      accumulate(g, grad, a, mtf_divide(g, dy, b));
      accumulate(g, grad, b, mtf_scalar_multiply(g, mtf_divide(g, mtf_multiply(g, dy, self), b), -1.0f));
      break;
    case MTF_BIN_EQUAL:
    case MTF_BIN_LESS_EQUAL: break;
  }
}

int mtf_gradients(mtf_graph *g, mtf_tensor loss, int n, const mtf_tensor *wrt, mtf_tensor *grads) {
  if (!mtf_graph_check(g, loss, "gradients")) return g->error.code;
  if (g->nodes[loss].shape.rank != 0) {
    char s[MTF_SHAPE_STR_MAX];
    mtf_graph_fail(g, MTF_ERR_INVALID, "gradients: loss '%s' %s must be a scalar; reduce it first",
                   g->nodes[loss].name, mtf_shape_format(&g->nodes[loss].shape, s, sizeof s));
    return g->error.code;
  }
  int count = g->n_nodes;
  int *grad = malloc(sizeof(int) * (size_t)count);
  char *depends = calloc((size_t)count, 1);
  if (!grad || !depends) {
    free(grad);
    free(depends);
    mtf_graph_fail(g, MTF_ERR_NOMEM, "gradients: out of memory");
    return g->error.code;
  }
  for (int i = 0; i < count; i++) grad[i] = MTF_NO_TENSOR;
  for (int i = 0; i < n; i++)
    if (mtf_graph_check(g, wrt[i], "gradients")) depends[wrt[i]] = 1;
  /* Which nodes depend on a wrt tensor: only those need gradients. */
  for (int i = 0; i < count; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (depends[g->nodes[i].inputs[k]] && g->nodes[i].kind != MTF_OP_STOP_GRADIENT) depends[i] = 1;

  mtf_shape scalar = {0};
  grad[loss] = mtf_constant(g, &scalar, 1.0f);
  for (int i = loss; i >= 0 && g->error.code == MTF_OK; i--) {
    mtf_tensor dy = grad[i];
    if (dy < 0 || !depends[i]) continue;
    mtf_node node = g->nodes[i]; /* copy: building ops may move g->nodes */
    switch (node.kind) {
      case MTF_OP_EINSUM:
        if (node.n_inputs == 1) {
          if (depends[node.inputs[0]]) accumulate(g, grad, node.inputs[0], einsum_input_grad(g, dy, -1, node.inputs[0]));
        } else {
          if (depends[node.inputs[0]])
            accumulate(g, grad, node.inputs[0], einsum_input_grad(g, dy, node.inputs[1], node.inputs[0]));
          if (depends[node.inputs[1]])
            accumulate(g, grad, node.inputs[1], einsum_input_grad(g, dy, node.inputs[0], node.inputs[1]));
        }
        break;
      case MTF_OP_BROADCAST:
        if (depends[node.inputs[0]]) accumulate(g, grad, node.inputs[0], dy);
        break;
      case MTF_OP_REDUCE_MAX:
        if (depends[node.inputs[0]])
          accumulate(g, grad, node.inputs[0], mtf_multiply(g, mtf_equal(g, node.inputs[0], i), dy));
        break;
      case MTF_OP_BINARY: binary_grad(g, &node, i, dy, grad); break;
      case MTF_OP_UNARY: unary_grad(g, &node, i, dy, grad); break;
      case MTF_OP_RESHAPE:
        if (depends[node.inputs[0]]) accumulate(g, grad, node.inputs[0], mtf_reshape(g, dy, &g->nodes[node.inputs[0]].shape));
        break;
      default: break; /* sources, one_hot, random, stop_gradient: no gradient flows through */
    }
  }
  for (int i = 0; i < n; i++) {
    if (g->error.code != MTF_OK) break;
    grads[i] = grad[wrt[i]] >= 0 ? grad[wrt[i]] : mtf_constant(g, &g->nodes[wrt[i]].shape, 0.0f);
  }
  free(grad);
  free(depends);
  return g->error.code;
}
