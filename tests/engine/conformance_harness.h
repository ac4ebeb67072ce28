/* The backend conformance harness: a case's graph (its variables, the op under test, a projection to a scalar
 * loss, the gradients, integer inputs), the double-precision reference of every tensor, the layouts it runs
 * under, the error measure and its bound; in one place for both of its runners, which differ only in how a
 * layout's plans are run: backend_conformance.c runs them step by step through a backend's kernels on MPI
 * ranks (every kind with an executor: cpu, cuda, cuda-emu, cpu-staged, ref64); pjrt_conformance.c compiles
 * every rank's plan into one SPMD program run on a PJRT plugin's devices in one process (the one-program
 * kinds). The cases themselves are conformance_cases.h's. Included by one .c file each (static definitions). */
#ifndef MTF_TESTS_ENGINE_CONFORMANCE_HARNESS_H
#define MTF_TESTS_ENGINE_CONFORMANCE_HARNESS_H

#include <math.h>
#include <stdlib.h>

#include "../check.h"
#include "core/rng.h"
#include "ops/reference.h"

#include "conformance_cases.h"

/* --bf16: every case's two-operand einsums take bfloat16 operands; --bf16-storage: and the plans store
 * activations as bfloat16 (each runner's header says more). */
static int bf16_mode, storage_mode;

/* Within 2e-5 of each tensor's scale in fp32; 2^-7 with bfloat16 operands (one bfloat16 ulp, 2^-8, off). */
static inline double conformance_bound(void) { return bf16_mode ? 0x1p-7 : 2e-5; }

static inline double max_abs(const double *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

/* The largest error of got against want relative to `scale`, or worst if larger; NaN counts as the worst error. */
static inline double conformance_error_scaled(const float *got, const double *want, int64_t n, double scale,
                                              double worst) {
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]) / scale;
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

/* The same relative to want's scale (its largest magnitude, at least 1): the error the bound is stated for. */
static inline double conformance_error(const float *got, const double *want, int64_t n, double worst) {
  return conformance_error_scaled(got, want, n, fmax(1.0, max_abs(want, n)), worst);
}

/* Integer labels/ids in range, a pure function of the element index, ids -1 and vocab (outside) included. */
static inline void fill_ids(int32_t *ids, double *as_double, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; i++) {
    ids[i] = (int32_t)((i * 5 + 2) % (vocab + 1)) - (i == 1);
    as_double[i] = ids[i];
  }
}

typedef struct conformance_graph {
  mtf_graph *g;
  int n_vars, n_inputs, n_grads, n_fetches;
  mtf_tensor vars[MAX_VARS], grads[MAX_VARS], inputs[MAX_INPUTS], y, loss;
  /* y, the gradient of each variable, and with `train` the variables assigned (after the run: their new value) */
  mtf_tensor fetches[1 + 2 * MAX_VARS];
  int expect[1 + 2 * MAX_VARS]; /* the node whose reference each fetch must equal */
  int32_t *ids[MAX_INPUTS];
  double *ids_double[MAX_INPUTS];
  double **ref; /* per node: its reference value (mtf_reference_evaluate) */
} conformance_graph;

/* The case's graph: its op on variables x0.. (through bfloat16 storage with --bf16-storage), loss = sum(y *
 * projection), the gradients unless forward_only, and with `train` an SGD step assigned to every variable but
 * the first. 0 (the graph's error printed, a check failed) when the case does not build. */
static inline int conformance_graph_build(const op_case *c, int forward_only, int train, conformance_graph *cg) {
  memset(cg, 0, sizeof *cg);
  mtf_graph *g = cg->g = mtf_graph_create(1234);
  if (bf16_mode) mtf_graph_set_matmul_dtype(g, MTF_BF16);
  for (int i = 0; i < MAX_VARS && c->var_shapes[i]; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    mtf_shape s = S(c->var_shapes[i]);
    cg->vars[cg->n_vars++] = mtf_variable(g, name, &s, MTF_INIT_NORMAL, 1.0f);
  }
  mtf_tensor operands[MAX_VARS];
  for (int i = 0; i < cg->n_vars; i++) operands[i] = storage_mode ? bf16_stored(g, cg->vars[i]) : cg->vars[i];
  mtf_tensor y = cg->y = c->build(g, operands, cg->inputs, &cg->n_inputs);
  if (storage_mode && mtf_tensor_dtype(g, y) != MTF_I32) y = cg->y = mtf_cast(g, mtf_cast(g, y, MTF_BF16), MTF_F32);
  mtf_error err;
  if (mtf_graph_status(g, &err)) {
    fprintf(stderr, "FAIL %s: graph error: %s\n", c->name, err.msg);
    CHECK(0);
    mtf_graph_destroy(g);
    cg->g = NULL;
    return 0;
  }
  mtf_shape ys = *mtf_tensor_shape(g, y), scalar = {0};
  mtf_tensor projection = mtf_variable(g, "projection", &ys, MTF_INIT_NORMAL, 1.0f);
  cg->loss = mtf_reduce_sum(g, mtf_multiply(g, y, projection), &scalar);
  cg->n_grads = forward_only ? 0 : cg->n_vars;
  if (!forward_only) CHECK(mtf_gradients(g, cg->loss, cg->n_vars, cg->vars, cg->grads) == MTF_OK);
  cg->fetches[cg->n_fetches++] = y;
  for (int v = 0; v < cg->n_grads; v++) cg->fetches[cg->n_fetches++] = cg->grads[v];
  for (int f = 0; f < cg->n_fetches; f++) cg->expect[f] = cg->fetches[f];
  for (int v = 1; train && v < cg->n_vars; v++) {
    cg->expect[cg->n_fetches] = mtf_subtract(g, cg->vars[v], mtf_scalar_multiply(g, cg->grads[v], 0.1f));
    mtf_assign(g, cg->vars[v], cg->expect[cg->n_fetches]);
    cg->fetches[cg->n_fetches++] = cg->vars[v];
  }
  for (int i = 0; i < cg->n_inputs; i++) {
    int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, cg->inputs[i]));
    cg->ids[i] = malloc(sizeof(int32_t) * (size_t)n);
    cg->ids_double[i] = malloc(sizeof(double) * (size_t)n);
    fill_ids(cg->ids[i], cg->ids_double[i], n, 6);
  }
  cg->ref = mtf_reference_evaluate(g, cg->ids_double, NULL);
  return 1;
}

static inline void conformance_graph_free(conformance_graph *cg) {
  for (int i = 0; i < cg->n_inputs; i++) {
    free(cg->ids[i]);
    free(cg->ids_double[i]);
  }
  if (cg->g) mtf_reference_free(cg->g, cg->ref);
  mtf_graph_destroy(cg->g);
}

#define CONFORMANCE_MAX_LAYOUTS 80
typedef char conformance_layout[4 * MTF_NAME_MAX + 8];

/* The layouts a case runs under, over the mesh's first axis: replicated (""), then the case's own `given`
 * layouts (NULL-terminated) or else each dim of its variables and inputs that the axis divides, and each pair
 * of them (tensors holding both are refused by the layout rules, and the runners skip those). On an axis of
 * size 1 the splits are run only where `split_size_one` (the plans still take their split phases there). The
 * number of layouts. */
static inline int conformance_layouts(const conformance_graph *cg, const mtf_shape *mesh, const char *const *given,
                                      int split_size_one, conformance_layout *layouts) {
  int n_layouts = 1;
  layouts[0][0] = 0;
  if (mesh->dims[0].size == 1 && !split_size_one) return n_layouts;
  for (int i = 0; given && i < 4 && given[i]; i++) snprintf(layouts[n_layouts++], sizeof layouts[0], "%s", given[i]);
  if (given) return n_layouts;
  char dims[12][MTF_NAME_MAX];
  int n_dims = 0;
  for (int t = 0; t < cg->n_vars + cg->n_inputs; t++) {
    const mtf_shape *s = mtf_tensor_shape(cg->g, t < cg->n_vars ? cg->vars[t] : cg->inputs[t - cg->n_vars]);
    for (int d = 0; d < s->rank; d++) {
      int seen = s->dims[d].size % mesh->dims[0].size != 0;
      for (int k = 0; k < n_dims && !seen; k++) seen = strcmp(dims[k], s->dims[d].name) == 0;
      if (!seen && n_dims < 12) snprintf(dims[n_dims++], MTF_NAME_MAX, "%s", s->dims[d].name);
    }
  }
  const char *axis = mesh->dims[0].name;
  for (int i = 0; i < n_dims; i++) {
    snprintf(layouts[n_layouts++], sizeof layouts[0], "%.31s:%.31s", dims[i], axis);
    for (int j = i + 1; j < n_dims && n_layouts < CONFORMANCE_MAX_LAYOUTS; j++)
      snprintf(layouts[n_layouts++], sizeof layouts[0], "%.31s:%.31s;%.31s:%.31s", dims[i], axis, dims[j], axis);
  }
  return n_layouts;
}

/* The dropout check under a run's random offset and a microbatch, which the cases leave at 0 and 1: a
 * random_keep of [a:4, d:6] run as microbatch RANDOM_INDEX of RANDOM_COUNT along a, against mtf_uniform01
 * numbered as mtf_random_extent says (each runner runs it its own way). */
enum { RANDOM_INDEX = 2, RANDOM_COUNT = 3 };
static const uint64_t random_run_offset = 0x9abcdef012345678ULL, random_key = 7;
static const float random_keep = 0.5f;

static inline mtf_tensor conformance_random_graph(mtf_graph *g) {
  mtf_shape s = S("a:4,d:6");
  return mtf_random_keep(g, &s, random_keep, random_key);
}

/* Element (i, d) of a slice of `rows` rows of a that starts at row a_offset: the whole batch's row of it. */
static inline float conformance_random_want(const mtf_graph *g, int64_t a_offset, int64_t rows, int64_t i, int64_t d) {
  int64_t row = a_offset * RANDOM_COUNT + RANDOM_INDEX * rows + i;
  return mtf_uniform01(g->seed, mtf_run_key(random_key, random_run_offset), (uint64_t)(row * 6 + d)) <
         (double)random_keep;
}

#endif
