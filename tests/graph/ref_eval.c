#include "ref_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

double ref_gradient_error(const mtf_graph *g, mtf_tensor loss, mtf_tensor var, mtf_tensor grad, double **inputs,
                          double *const *ref) {
  int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, var));
  double *x = malloc(sizeof(double) * (size_t)n + 1);
  double **overrides = calloc((size_t)g->n_nodes, sizeof(double *));
  memcpy(x, ref[var], sizeof(double) * (size_t)n);
  overrides[var] = x;
  const double h = 1e-6;
  double worst = 0;
  for (int64_t e = 0; e < n; e++) {
    double keep = x[e];
    x[e] = keep + h;
    double **plus = mtf_reference_evaluate(g, inputs, overrides);
    x[e] = keep - h;
    double **minus = mtf_reference_evaluate(g, inputs, overrides);
    x[e] = keep;
    double fd = (plus[loss][0] - minus[loss][0]) / (2 * h), ad = ref[grad][e];
    double error = fabs(fd - ad) / fmax(1.0, fabs(ad));
    if (!(error <= worst)) worst = isnan(error) ? INFINITY : error; /* a NaN gradient is the worst error, not none */
    mtf_reference_free(g, plus);
    mtf_reference_free(g, minus);
  }
  free(x);
  free(overrides);
  return worst;
}
