/* Reverse-mode autodiff: each node's gradient comes from its op's table entry, built from ordinary ops,
 * so the backward pass is lowered (and communicates) by the same layout rules as the forward pass.
 *
 * Recomputation (mtf_gradients_recompute). Plans run their steps in node order, and the memory planner
 * keeps a buffer from its first write to its last read. A block's backward ops read the block's forward
 * values, so without recomputation every block's activations stay alive from the forward pass to the
 * block's backward. With it, when the backward walk reaches a block, the block's forward ops are copied
 * (appended to the graph, so they run just before the block's backward ops) and the gradient rules are
 * applied to the copies: the backward reads only the copies, and the originals' last readers are forward
 * ops, so the planner frees them during the forward pass. The copies read the block's inputs (the outputs
 * of the block before), which are what stays alive. Gradient contributions that the rules add to a copy
 * are kept on the copy's id and joined with the contributions from outside the block (which arrive on the
 * original) when the walk reaches that node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_def.h"

typedef struct walk {
  mtf_grad_ctx ctx;
  char *depends;  /* ctx.depends, writable: grows with the graph when blocks are copied */
  int size;       /* entries of ctx.grad and depends */
  int *copy;      /* per original node (< count): its copy in the recomputed block, or -1 */
  char *copied;   /* per block id: copied already */
} walk;

/* Makes grad[] and depends[] cover every node of the graph (copies get ids beyond the original nodes). */
static int cover_graph(walk *w) {
  mtf_graph *g = w->ctx.g;
  if (g->n_nodes <= w->size) return 1;
  int size = g->n_nodes;
  int *grad = realloc(w->ctx.grad, sizeof(int) * (size_t)size);
  if (grad) w->ctx.grad = grad;
  char *depends = grad ? realloc(w->depends, (size_t)size) : NULL;
  if (!depends) return 0;
  w->depends = depends;
  w->ctx.depends = depends;
  for (int i = w->size; i < size; i++) {
    grad[i] = MTF_NO_TENSOR;
    depends[i] = 0;
  }
  w->size = size;
  return 1;
}

/* Appends a copy of every node of `block` among the first `count` nodes (variables and inputs stay shared:
 * they are storage, not computation); the copies read the copies of their inputs within the block. */
static void copy_block(walk *w, int block, int count) {
  mtf_graph *g = w->ctx.g;
  int open = g->current_block;
  g->current_block = 0; /* the copies belong to no block */
  for (int i = 0; i < count && g->error.code == MTF_OK; i++) {
    const mtf_node n = g->nodes[i]; /* a copy: adding nodes may move the array */
    if (n.block != block) continue;
    if (n.kind == MTF_OP_VARIABLE || n.kind == MTF_OP_INPUT) {
      w->copy[i] = i;
      continue;
    }
    int inputs[MTF_MAX_OP_INPUTS];
    for (int k = 0; k < n.n_inputs; k++)
      inputs[k] = g->nodes[n.inputs[k]].block == block ? w->copy[n.inputs[k]] : n.inputs[k];
    int id = mtf_graph_add_op(g, n.kind, n.n_inputs, inputs, &n.params, &n.shape);
    if (id < 0) break;
    g->nodes[id].dtype = n.dtype;
    g->nodes[id].bf16_policy = n.bf16_policy;
    snprintf(g->nodes[id].name, sizeof g->nodes[id].name, "%.50s/recompute", n.name);
    w->copy[i] = id;
  }
  g->current_block = open;
  if (g->error.code == MTF_OK && !cover_graph(w)) {
    mtf_graph_fail(g, MTF_ERR_NOMEM, "gradients: out of memory");
    return;
  }
  for (int i = 0; i < count; i++)
    if (g->nodes[i].block == block && w->copy[i] != i) w->depends[w->copy[i]] = w->depends[i];
  w->copied[block] = 1;
}

static int gradients(mtf_graph *g, mtf_tensor loss, int n, const mtf_tensor *wrt, mtf_tensor *grads, int recompute) {
  if (!mtf_graph_check(g, loss, "gradients")) return g->error.code;
  if (g->nodes[loss].shape.rank != 0) {
    char s[MTF_SHAPE_STR_MAX];
    mtf_graph_fail(g, MTF_ERR_INVALID, "gradients: loss '%s' %s must be a scalar; reduce it first",
                   g->nodes[loss].name, mtf_shape_format(&g->nodes[loss].shape, s, sizeof s));
    return g->error.code;
  }
  int count = g->n_nodes;
  walk w;
  memset(&w, 0, sizeof w);
  w.ctx.g = g;
  w.ctx.grad = malloc(sizeof(int) * (size_t)count);
  w.depends = calloc((size_t)count, 1);
  w.ctx.depends = w.depends;
  w.size = count;
  if (recompute) {
    w.copy = malloc(sizeof(int) * (size_t)count);
    w.copied = calloc((size_t)g->n_blocks + 1, 1);
  }
  if (!w.ctx.grad || !w.depends || (recompute && (!w.copy || !w.copied))) {
    mtf_graph_fail(g, MTF_ERR_NOMEM, "gradients: out of memory");
    goto done;
  }
  for (int i = 0; i < count; i++) w.ctx.grad[i] = MTF_NO_TENSOR;
  for (int i = 0; recompute && i < count; i++) w.copy[i] = -1;
  for (int i = 0; i < n; i++)
    if (mtf_graph_check(g, wrt[i], "gradients")) w.depends[wrt[i]] = 1;
  /* Which nodes depend on a wrt tensor through ops that pass gradients: only those need gradients. */
  for (int i = 0; i < count; i++)
    if (mtf_op(g->nodes[i].kind)->gradient)
      for (int k = 0; k < g->nodes[i].n_inputs; k++)
        if (w.depends[g->nodes[i].inputs[k]]) w.depends[i] = 1;

  mtf_shape scalar = {0};
  w.ctx.grad[loss] = mtf_constant(g, &scalar, 1.0f);
  for (int i = loss; i >= 0 && g->error.code == MTF_OK; i--) {
    const mtf_op_def *def = mtf_op(g->nodes[i].kind);
    int block = recompute ? g->nodes[i].block : 0, self = i;
    if (block && w.ctx.grad[i] >= 0 && w.depends[i] && def->gradient && !w.copied[block]) copy_block(&w, block, count);
    if (g->error.code != MTF_OK) break;
    mtf_tensor dy = w.ctx.grad[i];
    if (block && w.copied[block] && w.copy[i] != i) {
      self = w.copy[i];
      mtf_tensor inner = w.ctx.grad[self]; /* contributions from the block's own (copied) readers */
      if (inner >= 0) dy = dy >= 0 ? mtf_add(g, dy, inner) : inner;
    }
    if (dy < 0 || !w.depends[i] || !def->gradient) continue;
    int first_new = g->n_nodes;
    def->gradient(&w.ctx, self, dy); /* its targets are its inputs: originals, or copies already covered */
    for (int k = first_new; k < g->n_nodes; k++) g->nodes[k].bf16_policy |= g->nodes[self].bf16_policy;
  }
  for (int i = 0; i < n; i++) {
    if (g->error.code != MTF_OK) break;
    grads[i] = w.ctx.grad[wrt[i]] >= 0 ? w.ctx.grad[wrt[i]] : mtf_constant(g, &g->nodes[wrt[i]].shape, 0.0f);
  }
done:
  free(w.ctx.grad);
  free(w.depends);
  free(w.copy);
  free(w.copied);
  return g->error.code;
}

int mtf_gradients(mtf_graph *g, mtf_tensor loss, int n, const mtf_tensor *wrt, mtf_tensor *grads) {
  return gradients(g, loss, n, wrt, grads, 0);
}

int mtf_gradients_recompute(mtf_graph *g, mtf_tensor loss, int n, const mtf_tensor *wrt, mtf_tensor *grads) {
  return gradients(g, loss, n, wrt, grads, 1);
}
