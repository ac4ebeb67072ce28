/* A rank's slice of a variable or an input, on the host: lowering decides each rank's slice; a variable's
 * elements come from their global index (graph/graph.h's mtf_variable_value), so every layout and every backend
 * starts from the same numbers, and a whole host tensor is cut the same way for every backend. */
#include <string.h>

#include "lower/plan.h"

/* visit(arg, e, global) for each element e of node's slice on p's rank, in order, global its row-major index
 * in the whole tensor. */
static void each_slice_element(const mtf_plan *p, int node, void (*visit)(void *arg, int64_t e, int64_t global),
                               void *arg) {
  const mtf_shape *whole = &p->graph->nodes[node].shape;
  const mtf_tensor_layout *layout = &p->layouts[node];
  mtf_shape local = mtf_layout_slice_shape(layout, &p->mesh);
  int64_t offsets[MTF_MAX_RANK], strides[MTF_MAX_RANK], stride = 1, index[MTF_MAX_RANK] = {0};
  mtf_layout_slice_offset(layout, &p->mesh, p->coord, offsets);
  for (int d = whole->rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= whole->dims[d].size;
  }
  int64_t n = mtf_shape_num_elements(&local);
  for (int64_t e = 0; e < n; e++) {
    int64_t global = 0;
    for (int d = 0; d < local.rank; d++) global += (index[d] + offsets[d]) * strides[d];
    visit(arg, e, global);
    for (int d = local.rank - 1; d >= 0; d--) {
      if (++index[d] < local.dims[d].size) break;
      index[d] = 0;
    }
  }
}

typedef struct initial_visit {
  const mtf_plan *p;
  const mtf_node *var;
  float *data;
} initial_visit;

static void set_initial(void *arg, int64_t e, int64_t global) {
  initial_visit *v = arg;
  v->data[e] = mtf_variable_value(v->p->graph, v->var, global);
}

void mtf_plan_initial_slice(const mtf_plan *p, int node, float *data) {
  initial_visit v = {p, &p->graph->nodes[node], data};
  each_slice_element(p, node, set_initial, &v);
}

typedef struct copy_visit {
  const char *whole;
  char *slice;
  size_t elem_size;
} copy_visit;

static void copy_element(void *arg, int64_t e, int64_t global) {
  copy_visit *v = arg;
  memcpy(v->slice + (size_t)e * v->elem_size, v->whole + (size_t)global * v->elem_size, v->elem_size);
}

void mtf_plan_slice_of_whole(const mtf_plan *p, int node, const void *whole, void *slice, size_t elem_size) {
  copy_visit v = {whole, slice, elem_size};
  each_slice_element(p, node, copy_element, &v);
}
