/* The double-precision reference evaluation of a whole graph, op by op through the table's references:
 * whole tensors, no lowering, no layouts, no backend. Tests and the conformance test compare against it. */
#include <stdlib.h>

#include "ops/reference.h"

double **mtf_reference_evaluate(const mtf_graph *g, double **inputs, double **overrides) {
  double **value = calloc((size_t)g->n_nodes + 1, sizeof(double *));
  if (!value) return NULL;
  int next_input = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const mtf_node *n = &g->nodes[i];
    value[i] = calloc((size_t)mtf_shape_num_elements(&n->shape) + 1, sizeof(double));
    if (!value[i]) {
      mtf_reference_free(g, value);
      return NULL;
    }
    mtf_ref_args a = {.g = g, .node = i, .n = n, .out = value[i]};
    for (int k = 0; k < n->n_inputs; k++) {
      a.in[k] = value[n->inputs[k]];
      a.in_shape[k] = &g->nodes[n->inputs[k]].shape;
    }
    if (n->kind == MTF_OP_INPUT) a.given = inputs ? inputs[next_input++] : NULL;
    if (n->kind == MTF_OP_VARIABLE) a.given = overrides ? overrides[i] : NULL;
    mtf_op(n->kind)->reference(&a);
  }
  return value;
}

void mtf_reference_free(const mtf_graph *g, double **value) {
  if (!value) return;
  for (int i = 0; i < g->n_nodes; i++) free(value[i]);
  free(value);
}
