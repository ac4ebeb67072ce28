#include "ref_eval.h"

#include <stdlib.h>

#include "ops/reference.h"

ref_values ref_evaluate(const mtf_graph *g, double **inputs, double **overrides) {
  ref_values r = {g->n_nodes, mtf_reference_evaluate(g, inputs, overrides)};
  return r;
}

void ref_free(ref_values *v) {
  for (int i = 0; i < v->n && v->value; i++) free(v->value[i]);
  free(v->value);
  v->value = NULL;
}
