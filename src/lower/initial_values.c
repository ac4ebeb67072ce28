/* Variables' initial values on the host, per rank: lowering decides each rank's slice, and each element's value
 * comes from its global index (graph/graph.h's mtf_variable_value), so every layout and every backend starts
 * from the same numbers. */
#include "lower/plan.h"

/* A variable's initial slice, on the host: each element from its global index, so every layout starts
 * equal (exec.c and the PJRT program upload it). */
void mtf_plan_initial_slice(const mtf_plan *p, int node, float *data) {
  const mtf_node *var = &p->graph->nodes[node];
  const mtf_tensor_layout *layout = &p->layouts[node];
  mtf_shape local = mtf_layout_slice_shape(layout, &p->mesh);
  int64_t offsets[MTF_MAX_RANK], strides[MTF_MAX_RANK], stride = 1, index[MTF_MAX_RANK] = {0};
  mtf_layout_slice_offset(layout, &p->mesh, p->coord, offsets);
  for (int d = var->shape.rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= var->shape.dims[d].size;
  }
  int64_t n = mtf_shape_num_elements(&local);
  for (int64_t e = 0; e < n; e++) {
    int64_t global = 0;
    for (int d = 0; d < local.rank; d++) global += (index[d] + offsets[d]) * strides[d];
    data[e] = mtf_variable_value(p->graph, var, global);
    for (int d = local.rank - 1; d >= 0; d--) {
      if (++index[d] < local.dims[d].size) break;
      index[d] = 0;
    }
  }
}
