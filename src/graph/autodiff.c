/* Reverse-mode autodiff: each node's gradient comes from its op's table entry, built from ordinary ops,
 * so the backward pass is lowered (and communicates) by the same layout rules as the forward pass. */
#include <stdlib.h>
#include <string.h>

#include "ops/op_def.h"

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
  /* Which nodes depend on a wrt tensor through ops that pass gradients: only those need gradients. */
  for (int i = 0; i < count; i++)
    if (mtf_op(g->nodes[i].kind)->gradient)
      for (int k = 0; k < g->nodes[i].n_inputs; k++)
        if (depends[g->nodes[i].inputs[k]]) depends[i] = 1;

  mtf_grad_ctx ctx = {g, grad, depends};
  mtf_shape scalar = {0};
  grad[loss] = mtf_constant(g, &scalar, 1.0f);
  for (int i = loss; i >= 0 && g->error.code == MTF_OK; i--) {
    mtf_tensor dy = grad[i];
    const mtf_op_def *def = mtf_op(g->nodes[i].kind);
    if (dy < 0 || !depends[i] || !def->gradient) continue;
    def->gradient(&ctx, i, dy);
  }
  for (int i = 0; i < n; i++) {
    if (g->error.code != MTF_OK) break;
    grads[i] = grad[wrt[i]] >= 0 ? grad[wrt[i]] : mtf_constant(g, &g->nodes[wrt[i]].shape, 0.0f);
  }
  free(grad);
  free(depends);
  return g->error.code;
}
