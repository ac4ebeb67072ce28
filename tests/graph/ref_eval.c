#include "ref_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t count(const mtf_shape *s) { return mtf_shape_num_elements(s); }

/* Index of element `index` (a multi-index over `walked`) in tensor `t`, matching dims by name. */
static int64_t offset_in(const mtf_shape *walked, const int64_t *index, const mtf_shape *t) {
  int64_t offset = 0;
  for (int d = 0; d < t->rank; d++) {
    int j = mtf_shape_index_of(walked, t->dims[d].name);
    offset = offset * t->dims[d].size + (j >= 0 ? index[j] : 0);
  }
  return offset;
}

static int next_index(const mtf_shape *s, int64_t *index) {
  for (int d = s->rank - 1; d >= 0; d--) {
    if (++index[d] < s->dims[d].size) return 1;
    index[d] = 0;
  }
  return 0;
}

static mtf_shape union_of(const mtf_graph *g, const mtf_node *n) {
  mtf_shape u = n->shape;
  for (int k = 0; k < n->n_inputs; k++) {
    const mtf_shape *s = &g->nodes[n->inputs[k]].shape;
    for (int d = 0; d < s->rank; d++)
      if (!mtf_shape_has(&u, s->dims[d].name)) mtf_shape_append(&u, s->dims[d].name, s->dims[d].size, NULL);
  }
  return u;
}

static double unary(int kind, double a, double b, double x) {
  const double c = sqrt(2.0 / 3.14159265358979323846);
  switch ((mtf_unary_kind)kind) {
    case MTF_UN_AFFINE: return a * x + b;
    case MTF_UN_EXP: return exp(x);
    case MTF_UN_LOG: return log(x);
    case MTF_UN_RSQRT: return 1.0 / sqrt(x);
    case MTF_UN_SQRT: return sqrt(x);
    case MTF_UN_SQUARE: return x * x;
    case MTF_UN_TANH: return tanh(x);
    case MTF_UN_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case MTF_UN_RELU: return x > 0 ? x : 0;
    case MTF_UN_STEP: return x > 0 ? 1 : 0;
    case MTF_UN_GELU: return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
    case MTF_UN_GELU_GRAD: {
      double t = tanh(c * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
    }
  }
  return NAN;
}

static double binary(int kind, double u, double v) {
  switch ((mtf_binary_kind)kind) {
    case MTF_BIN_ADD: return u + v;
    case MTF_BIN_SUB: return u - v;
    case MTF_BIN_MUL: return u * v;
    case MTF_BIN_DIV: return u / v;
    case MTF_BIN_EQUAL: return u == v;
    case MTF_BIN_LESS_EQUAL: return u <= v;
  }
  return NAN;
}

ref_values ref_evaluate(const mtf_graph *g, double **inputs, double **overrides) {
  ref_values r = {g->n_nodes, calloc((size_t)g->n_nodes, sizeof(double *))};
  int next_input = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const mtf_node *n = &g->nodes[i];
    int64_t total = count(&n->shape);
    double *out = calloc((size_t)total + 1, sizeof(double));
    r.value[i] = out;
    const double *a = n->n_inputs > 0 ? r.value[n->inputs[0]] : NULL, *b = n->n_inputs > 1 ? r.value[n->inputs[1]] : NULL;
    const mtf_shape *as = n->n_inputs > 0 ? &g->nodes[n->inputs[0]].shape : NULL;
    const mtf_shape *bs = n->n_inputs > 1 ? &g->nodes[n->inputs[1]].shape : NULL;
    int64_t index[MTF_MAX_RANK * 2] = {0};
    switch (n->kind) {
      case MTF_OP_INPUT: memcpy(out, inputs[next_input++], sizeof(double) * (size_t)total); break;
      case MTF_OP_VARIABLE:
        for (int64_t e = 0; e < total; e++) out[e] = overrides && overrides[i] ? overrides[i][e] : mtf_variable_value(g, n, e);
        break;
      case MTF_OP_CONSTANT: for (int64_t e = 0; e < total; e++) out[e] = n->a; break;
      case MTF_OP_RANGE: for (int64_t e = 0; e < total; e++) out[e] = (double)e; break;
      case MTF_OP_EINSUM:
      case MTF_OP_REDUCE_MAX: {
        mtf_shape u = union_of(g, n);
        if (n->kind == MTF_OP_REDUCE_MAX)
          for (int64_t e = 0; e < total; e++) out[e] = -INFINITY;
        do {
          int64_t o = offset_in(&u, index, &n->shape);
          double v = a[offset_in(&u, index, as)];
          if (n->kind == MTF_OP_REDUCE_MAX) {
            if (v > out[o]) out[o] = v;
          } else {
            out[o] += b ? v * b[offset_in(&u, index, bs)] : v;
          }
        } while (next_index(&u, index));
        break;
      }
      case MTF_OP_BROADCAST:
      case MTF_OP_BINARY:
      case MTF_OP_ONE_HOT:
        do {
          int64_t o = offset_in(&n->shape, index, &n->shape);
          double u = a[offset_in(&n->shape, index, as)];
          if (n->kind == MTF_OP_BROADCAST) out[o] = u;
          if (n->kind == MTF_OP_BINARY) out[o] = binary(n->sub, u, b[offset_in(&n->shape, index, bs)]);
          if (n->kind == MTF_OP_ONE_HOT) out[o] = llround(u) == index[mtf_shape_index_of(&n->shape, n->dim_name)];
        } while (n->shape.rank > 0 && next_index(&n->shape, index));
        break;
      case MTF_OP_UNARY: for (int64_t e = 0; e < total; e++) out[e] = unary(n->sub, n->a, n->b, a[e]); break;
      case MTF_OP_RANDOM_KEEP:
        for (int64_t e = 0; e < total; e++) out[e] = mtf_uniform01(g->seed, n->key, (uint64_t)e) < (double)n->a;
        break;
      case MTF_OP_RESHAPE:
      case MTF_OP_STOP_GRADIENT: memcpy(out, a, sizeof(double) * (size_t)total); break;
    }
  }
  return r;
}

void ref_free(ref_values *v) {
  for (int i = 0; i < v->n; i++) free(v->value[i]);
  free(v->value);
  v->value = NULL;
}
