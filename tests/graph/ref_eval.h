/* A naive reference evaluator for tests: evaluates a logical graph on whole tensors in double precision,
 * op by op, with no lowering, no BLAS and no layouts. Independent of src/exec and src/lower. */
#ifndef MTF_TESTS_REF_EVAL_H
#define MTF_TESTS_REF_EVAL_H

#include "graph/graph.h"

typedef struct ref_values {
  int n;
  double **value; /* per node, whole tensor, row-major; NULL where not evaluated */
} ref_values;

/* inputs[i] holds the whole value of the i-th MTF_OP_INPUT node (in node order); variables take their
 * initial values unless overrides[node] is non-NULL. */
ref_values ref_evaluate(const mtf_graph *g, double **inputs, double **overrides);
void ref_free(ref_values *v);

/* Autodiff checked in double precision: the worst |central difference - ref[grad]| / max(1, |ref[grad]|)
 * over the elements of variable `var`, where ref holds the reference values of the whole graph (with the
 * same inputs) and loss is a scalar. */
double ref_gradient_error(const mtf_graph *g, mtf_tensor loss, mtf_tensor var, mtf_tensor grad, double **inputs,
                          double *const *ref);

#endif
