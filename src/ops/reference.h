/* Evaluates every node of a graph in double precision by its op's reference (ops/op_def.h). */
#ifndef MTF_OPS_REFERENCE_H
#define MTF_OPS_REFERENCE_H

#include "ops/op_def.h"

/* inputs[i]: the whole value of the i-th input node (in node order); variables take their initial values
 * unless overrides[node] is non-NULL. Returns per-node whole tensors (row-major), or NULL when out of
 * memory; free with mtf_reference_free. */
double **mtf_reference_evaluate(const mtf_graph *g, double **inputs, double **overrides);
void mtf_reference_free(const mtf_graph *g, double **value);

#endif
