/* Lowering: graph + mesh + layout + one mesh coordinate -> that rank's plan. Pure (no MPI), so `mtf plan`
 * and tests can lower for any mesh in one process. Each node is lowered by its op's table entry
 * (ops/op_def.h), through the helpers of lower/lowering.h implemented here.
 *
 * Every tensor's layout follows from its dimension names, so inputs of an op agree on how shared
 * dimensions are split and most ops run locally on slices. Communication comes from three places:
 *  - a sum over a split dimension (einsum contraction, reduce_sum) leaves partial sums; the allreduce is
 *    deferred (kept as `pending` axes on the buffer) so that adds of partial sums happen locally first;
 *  - a max over a split dimension is max-allreduced at once;
 *  - a reshape/rename whose output is split differently is resharded (reshard.c: local slices, alltoall,
 *    reduce-scatter of pending sums, allgather: the cheapest sequence for each mesh axis).
 * An einsum that sums over a dimension split along an axis that also splits its output first gathers
 * that input along the summed dimension (otherwise the partial sums of different slices would mix). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/lower_internal.h"
#include "ops/op_def.h"

typedef struct mtf_lowering lowering;

static int grow(void **array, int *cap, int need, size_t elem) {
  if (need <= *cap) return MTF_OK;
  int cap2 = *cap ? *cap : 64;
  while (cap2 < need) cap2 *= 2;
  void *p = realloc(*array, elem * (size_t)cap2);
  if (!p) return MTF_ERR_NOMEM;
  memset((char *)p + elem * (size_t)*cap, 0, elem * (size_t)(cap2 - *cap));
  *array = p;
  *cap = cap2;
  return MTF_OK;
}

int mtf_lw_new_buffer(lowering *lw, mtf_buffer_kind kind, const mtf_shape *local, int node, mtf_dtype dtype) {
  mtf_plan *p = lw->plan;
  if (grow((void **)&p->buffers, &p->cap_buffers, p->n_buffers + 1, sizeof(mtf_buffer)) ||
      grow((void **)&lw->pending, &lw->cap_pending, p->n_buffers + 1, sizeof(mtf_axis_set)))
    return -mtf_error_set(lw->err, MTF_ERR_NOMEM, "lowering: out of memory");
  int id = p->n_buffers++;
  mtf_buffer *b = &p->buffers[id];
  memset(b, 0, sizeof *b);
  b->kind = kind;
  b->dtype = dtype;
  b->elements = mtf_shape_num_elements(local);
  b->first_step = INT_MAX;
  b->last_step = -1;
  b->node = node;
  if (kind == MTF_BUF_VARIABLE) b->offset = p->n_variables++;
  if (kind == MTF_BUF_INPUT) b->offset = p->n_inputs++;
  lw->pending[id] = 0;
  return id;
}

static int new_buffer(lowering *lw, mtf_buffer_kind kind, const mtf_shape *local, int node) {
  return mtf_lw_new_buffer(lw, kind, local, node, lw->dtype[node]);
}

int mtf_lw_add_step(lowering *lw, const mtf_step *step) {
  mtf_plan *p = lw->plan;
  if (grow((void **)&p->steps, &p->cap_steps, p->n_steps + 1, sizeof(mtf_step)))
    return mtf_error_set(lw->err, MTF_ERR_NOMEM, "lowering: out of memory");
  int index = p->n_steps++;
  p->steps[index] = *step;
  mtf_buffer *out = &p->buffers[step->out];
  if (out->first_step > index) out->first_step = index;
  if (out->last_step < index) out->last_step = index;
  for (int k = 0; k < step->n_in; k++)
    if (p->buffers[step->in[k]].last_step < index) p->buffers[step->in[k]].last_step = index;
  if (step->scratch >= 0) p->buffers[step->scratch].first_step = p->buffers[step->scratch].last_step = index;
  return MTF_OK;
}

mtf_shape mtf_lw_local_shape(const mtf_plan *p, int node) { return mtf_layout_slice_shape(&p->layouts[node], &p->mesh); }

void mtf_lw_count_collective(mtf_plan *p, mtf_collective_kind kind, mtf_axis_set axes, int64_t elements,
                             mtf_dtype dtype) {
  int group = mtf_mesh_group_size(&p->mesh, axes);
  int64_t bytes = elements * (int64_t)mtf_dtype_size(dtype);
  p->stats.comm_calls[kind]++;
  p->stats.comm_bytes[kind] += (int64_t)mtf_collective_bytes_sent(kind, group, (double)bytes);
  int64_t block = group > 1 ? bytes / group : 0;
  if (kind == MTF_COLL_ALLREDUCE && block > p->stats.largest_allreduce_block) p->stats.largest_allreduce_block = block;
}

/* A step reading one buffer and writing another (or the same, for in-place collectives). */
mtf_step mtf_lw_one_input_step(mtf_step_kind kind, int node, int in, const mtf_shape *in_shape, int out,
                               const mtf_shape *out_shape) {
  mtf_step s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.node = node;
  s.in[0] = in;
  s.n_in = 1;
  s.in_shape[0] = *in_shape;
  s.out = out;
  s.out_shape = *out_shape;
  s.scratch = -1;
  return s;
}

/* An in-place allreduce of `buffer` over `axes`. */
int mtf_lw_allreduce(lowering *lw, int node, int buffer, const mtf_shape *shape, mtf_axis_set axes,
                          mtf_reduce_op op) {
  mtf_step s = mtf_lw_one_input_step(MTF_STEP_ALLREDUCE, node, buffer, shape, buffer, shape);
  s.axes = axes;
  s.reduce_op = op;
  mtf_lw_count_collective(lw->plan, MTF_COLL_ALLREDUCE, axes, mtf_shape_num_elements(shape),
                          lw->plan->buffers[buffer].dtype);
  return mtf_lw_add_step(lw, &s);
}

/* Sums node's partial values over their pending axes, in place: the resharding step to its own layout
 * (one allreduce, and the buffer is summed for every later reader). */
static int materialize(lowering *lw, int node) {
  mtf_plan *p = lw->plan;
  int buffer = p->value_buffer[node], same;
  if (lw->pending[buffer] == 0) return MTF_OK;
  return mtf_lower_reshard(lw, node, buffer, &p->layouts[node], lw->pending[buffer], &p->layouts[node], &same);
}

/* Allgathers *buffer (local shape *shape) along tensor dim d over mesh axis `axis`; updates both. */
int mtf_lw_gather_dim(lowering *lw, int node, int *buffer, mtf_shape *shape, int d, int axis) {
  mtf_shape gathered = *shape;
  gathered.dims[d].size *= lw->plan->mesh.dims[axis].size;
  mtf_dtype dtype = lw->plan->buffers[*buffer].dtype;
  int out = mtf_lw_new_buffer(lw, MTF_BUF_ARENA, &gathered, node, dtype);
  if (out < 0) return -out;
  mtf_step s = mtf_lw_one_input_step(MTF_STEP_ALLGATHER, node, *buffer, shape, out, &gathered);
  s.axes = 1u << axis;
  s.tensor_axis = d;
  int64_t outer = 1;
  for (int e = 0; e < d; e++) outer *= shape->dims[e].size;
  if (outer > 1) { /* the blocks arrive one after another and are reordered from scratch */
    s.scratch = mtf_lw_new_buffer(lw, MTF_BUF_ARENA, &gathered, node, dtype);
    if (s.scratch < 0) return -s.scratch;
  }
  mtf_lw_count_collective(lw->plan, MTF_COLL_ALLGATHER, s.axes, mtf_shape_num_elements(shape), dtype);
  MTF_CHECK(mtf_lw_add_step(lw, &s));
  *buffer = out;
  *shape = gathered;
  return MTF_OK;
}

/* ---- kernel steps ---- */

/* Global offset, along the op's named dim, of the local part a kernel sees (0 where the buffer is whole). */
static int64_t named_dim_offset(const lowering *lw, int node, const mtf_step *s) {
  const mtf_plan *p = lw->plan;
  const mtf_node *n = &lw->g->nodes[node];
  mtf_named_dim where = mtf_op(n->kind)->named_dim;
  if (where == MTF_DIM_NONE) return 0;
  const char *dim = n->params.along.dim;
  if (where == MTF_DIM_IN_OUTPUT) {
    int d = mtf_shape_index_of(&s->out_shape, dim);
    return d >= 0 ? s->offsets[d] : 0;
  }
  int input = n->inputs[0], d = mtf_shape_index_of(&s->in_shape[0], dim);
  if (d < 0 || s->in_shape[0].dims[d].size == lw->g->nodes[input].shape.dims[d].size) return 0;
  int64_t offsets[MTF_MAX_RANK];
  mtf_layout_slice_offset(&p->layouts[input], &p->mesh, p->coord, offsets);
  return offsets[d];
}

void mtf_lower_extent_of_input0(mtf_lowering *lw, int node) {
  mtf_plan *p = lw->plan;
  int input = lw->g->nodes[node].inputs[0];
  for (int i = 0; i < p->n_steps; i++) {
    mtf_step *s = &p->steps[i];
    if (s->kind != MTF_STEP_KERNEL || s->node != node) continue;
    s->extent_of_input0 = 1;
    memset(s->global_dims, 0, sizeof s->global_dims);
    for (int d = 0; d < lw->g->nodes[input].shape.rank; d++) s->global_dims[d] = lw->g->nodes[input].shape.dims[d].size;
    mtf_layout_slice_offset(&p->layouts[input], &p->mesh, p->coord, s->offsets);
  }
}

/* A kernel step of node's op over explicit inputs, writing buffer `into`, or (into < 0) a new arena buffer of
 * out_shape (*out). */
static int emit_kernel_into(lowering *lw, int node, mtf_phase phase, int n_in, const int *in,
                            const mtf_shape *in_shapes, const mtf_dtype *in_dtypes, const mtf_shape *out_shape,
                            mtf_dtype out_dtype, int into, int *out) {
  mtf_plan *p = lw->plan;
  const mtf_node *n = &lw->g->nodes[node];
  const mtf_op_def *def = mtf_op(n->kind);
  mtf_step s;
  memset(&s, 0, sizeof s);
  s.kind = MTF_STEP_KERNEL;
  s.op = n->kind;
  s.phase = phase;
  s.node = node;
  s.n_in = n_in;
  for (int k = 0; k < n_in; k++) {
    s.in[k] = in[k];
    s.in_shape[k] = in_shapes[k];
    s.in_dtype[k] = in_dtypes[k];
  }
  s.out_shape = *out_shape;
  /* the phases that write the node's value write it in the dtype the plan stores it in */
  if ((phase == MTF_PHASE_WHOLE || phase == MTF_PHASE_APPLY) && out_dtype == MTF_F32) out_dtype = lw->dtype[node];
  s.out_dtype = out_dtype;
  s.params = n->params;
  s.bf16_policy = n->bf16_policy;
  s.seed = lw->g->seed;
  for (int d = 0; d < n->shape.rank; d++) s.global_dims[d] = n->shape.dims[d].size;
  if (phase == MTF_PHASE_WHOLE || phase == MTF_PHASE_APPLY)
    mtf_layout_slice_offset(&p->layouts[node], &p->mesh, p->coord, s.offsets);
  s.dim_offset = named_dim_offset(lw, node, &s);
  s.scratch = -1;
  int64_t scratch = def->scratch ? def->scratch(&s) : 0;
  if (scratch > 0) {
    mtf_shape flat = {0};
    mtf_shape_append(&flat, "scratch", scratch, NULL);
    s.scratch = mtf_lw_new_buffer(lw, MTF_BUF_ARENA, &flat, node, MTF_F32);
    if (s.scratch < 0) return -s.scratch;
  }
  int b = into >= 0 ? into : mtf_lw_new_buffer(lw, MTF_BUF_ARENA, out_shape, node, out_dtype);
  if (b < 0) return -b;
  if (out_dtype == MTF_BF16 && n->dtype == MTF_F32)
    p->stats.bf16_value_bytes += mtf_shape_num_elements(out_shape) * (int64_t)sizeof(uint16_t);
  s.out = b;
  *out = b;
  if (def->flops) p->stats.flops += def->flops(&s);
  return mtf_lw_add_step(lw, &s);
}

static int emit_kernel(lowering *lw, int node, mtf_phase phase, int n_in, const int *in, const mtf_shape *in_shapes,
                       const mtf_dtype *in_dtypes, const mtf_shape *out_shape, mtf_dtype out_dtype, int *out) {
  return emit_kernel_into(lw, node, phase, n_in, in, in_shapes, in_dtypes, out_shape, out_dtype, -1, out);
}

/* ---- the helpers of lower/lowering.h ---- */
const mtf_graph *mtf_lowering_graph(const mtf_lowering *lw) { return lw->g; }
mtf_plan *mtf_lowering_plan(mtf_lowering *lw) { return lw->plan; }
mtf_shape mtf_lowering_local_shape(const mtf_lowering *lw, int node) { return mtf_lw_local_shape(lw->plan, node); }

int mtf_lowering_split_axis(const mtf_lowering *lw, int node, const char *dim) {
  const mtf_tensor_layout *layout = &lw->plan->layouts[node];
  int d = mtf_shape_index_of(&layout->shape, dim);
  return d >= 0 ? layout->mesh_axis[d] : -1;
}

mtf_axis_set mtf_lowering_pending(const mtf_lowering *lw, int node) {
  int b = lw->plan->value_buffer[node];
  return b >= 0 ? lw->pending[b] : 0;
}

void mtf_lower_set_pending(mtf_lowering *lw, int node, mtf_axis_set axes) {
  lw->pending[lw->plan->value_buffer[node]] = axes;
}

void mtf_lower_set_value(mtf_lowering *lw, int node, int buffer) { lw->plan->value_buffer[node] = buffer; }

int mtf_lower_source(mtf_lowering *lw, int node) {
  mtf_plan *p = lw->plan;
  const mtf_node *n = &lw->g->nodes[node];
  mtf_shape local = mtf_lw_local_shape(p, node);
  int b = new_buffer(lw, n->kind == MTF_OP_INPUT ? MTF_BUF_INPUT : MTF_BUF_VARIABLE, &local, node);
  if (b < 0) return -b;
  p->value_buffer[node] = b;
  if (n->kind == MTF_OP_VARIABLE) p->stats.variable_bytes += (int64_t)sizeof(float) * p->buffers[b].elements;
  return MTF_OK;
}

int mtf_lower_alias(mtf_lowering *lw, int node) {
  lw->plan->value_buffer[node] = lw->plan->value_buffer[lw->g->nodes[node].inputs[0]];
  return MTF_OK;
}

int mtf_lower_input(mtf_lowering *lw, int node, int k, int *buffer, mtf_shape *local) {
  int input = lw->g->nodes[node].inputs[k];
  MTF_CHECK(materialize(lw, input));
  *buffer = lw->plan->value_buffer[input];
  *local = mtf_lw_local_shape(lw->plan, input);
  return MTF_OK;
}

int mtf_lower_phase(mtf_lowering *lw, int node, mtf_phase phase, int n_in, const int *in, const mtf_shape *in_shapes,
                    const mtf_dtype *in_dtypes, const mtf_shape *out_shape, int *out) {
  return emit_kernel(lw, node, phase, n_in, in, in_shapes, in_dtypes, out_shape, MTF_F32, out);
}

int mtf_lower_phase_typed(mtf_lowering *lw, int node, mtf_phase phase, int n_in, const int *in,
                          const mtf_shape *in_shapes, const mtf_dtype *in_dtypes, const mtf_shape *out_shape,
                          mtf_dtype out_dtype, int *out) {
  return emit_kernel(lw, node, phase, n_in, in, in_shapes, in_dtypes, out_shape, out_dtype, out);
}

int mtf_lower_allreduce_buffer(mtf_lowering *lw, int node, int buffer, const mtf_shape *shape, mtf_axis_set axes,
                               mtf_reduce_op op) {
  return mtf_lw_allreduce(lw, node, buffer, shape, axes, op);
}

int mtf_lower_allreduce(mtf_lowering *lw, int node, mtf_axis_set axes, mtf_reduce_op op) {
  mtf_shape local = mtf_lw_local_shape(lw->plan, node);
  return mtf_lw_allreduce(lw, node, lw->plan->value_buffer[node], &local, axes, op);
}

int mtf_lower_reduction(mtf_lowering *lw, int node, mtf_axis_set *reduced_axes) {
  mtf_plan *p = lw->plan;
  const mtf_node *n = &lw->g->nodes[node];
  mtf_axis_set out_axes = mtf_layout_split_axes(&p->layouts[node]);
  int in[MTF_MAX_OP_INPUTS];
  mtf_shape in_shapes[MTF_MAX_OP_INPUTS];
  mtf_dtype in_dtypes[MTF_MAX_OP_INPUTS];
  *reduced_axes = 0;
  /* The summed dim that claimed each axis: partial sums of two different dims over one axis cannot be
   * added up by one allreduce (sum_r A_r B_r is not (sum A)(sum B)), so a second such dim is gathered. */
  const char *summed_on[MTF_MAX_MESH_AXES] = {0};
  for (int k = 0; k < n->n_inputs; k++) {
    int input = n->inputs[k];
    MTF_CHECK(materialize(lw, input));
    const mtf_tensor_layout *layout = &p->layouts[input];
    mtf_tensor_layout want = *layout; /* the input's layout with the splits that cannot stay gathered */
    for (int d = 0; d < layout->shape.rank; d++) {
      int axis = layout->mesh_axis[d];
      const char *name = layout->shape.dims[d].name;
      if (axis < 0 || mtf_shape_has(&n->shape, name)) continue;
      if ((out_axes & (1u << axis)) || (summed_on[axis] && strcmp(summed_on[axis], name) != 0)) {
        want.mesh_axis[d] = -1;
      } else {
        *reduced_axes |= 1u << axis;
        summed_on[axis] = name;
      }
    }
    MTF_CHECK(mtf_lower_reshard(lw, node, p->value_buffer[input], layout, 0, &want, &in[k]));
    in_shapes[k] = mtf_layout_slice_shape(&want, &p->mesh);
    in_dtypes[k] = lw->dtype[input];
  }
  if (*reduced_axes) mtf_lw_keep_float(lw, node);
  mtf_shape out_shape = mtf_lw_local_shape(p, node);
  int out;
  MTF_CHECK(emit_kernel(lw, node, MTF_PHASE_WHOLE, n->n_inputs, in, in_shapes, in_dtypes, &out_shape, n->dtype, &out));
  p->value_buffer[node] = out;
  return MTF_OK;
}

/* Whether node's value may be written over variable var's buffer: this plan assigns it to var, nothing the
 * plan runs after node (steps follow node order) or fetches reads var's old value, and the two slices match. */
static int in_place_target(lowering *lw, int node, int var) {
  const mtf_graph *g = lw->g;
  mtf_plan *p = lw->plan;
  if (g->nodes[var].kind != MTF_OP_VARIABLE) return 0;
  int assigned = 0;
  for (int a = lw->first_assign; a < lw->end_assign; a++) {
    if (g->assigns[a].variable != var) continue;
    if (g->assigns[a].value != node) return 0;
    assigned = 1;
  }
  if (!assigned) return 0;
  /* The old value's readers: var, and nodes lowered before node that alias its buffer (stop_gradient, a
   * reshape that moves nothing). */
  int buffer = p->value_buffer[var];
  char *old = calloc((size_t)g->n_nodes + 1, 1);
  if (!old) return 0;
  for (int j = 0; j < node; j++) old[j] = p->needed[j] && p->value_buffer[j] == buffer;
  old[var] = 1;
  int later_reader = 0;
  for (int f = 0; f < p->n_fetches; f++) later_reader |= old[p->fetch_nodes[f]];
  for (int a = lw->first_assign; a < lw->end_assign; a++) later_reader |= old[g->assigns[a].value];
  for (int j = node + 1; j < g->n_nodes && !later_reader; j++)
    for (int k = 0; p->needed[j] && k < g->nodes[j].n_inputs; k++) later_reader |= old[g->nodes[j].inputs[k]];
  free(old);
  if (later_reader) return 0;
  mtf_shape mine = mtf_lw_local_shape(p, node), its = mtf_lw_local_shape(p, var);
  return mtf_shape_equal(&mine, &its) && lw->dtype[node] == lw->dtype[var] && !lw->pending[p->value_buffer[var]];
}

static int lower_local_into(mtf_lowering *lw, int node, int keep_partial, int into);

int mtf_lower_local_in_place(mtf_lowering *lw, int node, int k) {
  int var = lw->g->nodes[node].inputs[k];
  return lower_local_into(lw, node, 0, in_place_target(lw, node, var) ? lw->plan->value_buffer[var] : -1);
}

int mtf_lower_local(mtf_lowering *lw, int node, int keep_partial) { return lower_local_into(lw, node, keep_partial, -1); }

static int lower_local_into(mtf_lowering *lw, int node, int keep_partial, int into) {
  mtf_plan *p = lw->plan;
  const mtf_node *n = &lw->g->nodes[node];
  int in[MTF_MAX_OP_INPUTS];
  mtf_shape in_shapes[MTF_MAX_OP_INPUTS];
  mtf_dtype in_dtypes[MTF_MAX_OP_INPUTS];
  mtf_axis_set pending = 0;
  for (int k = 0; k < n->n_inputs; k++) {
    int input = n->inputs[k];
    if (!keep_partial) MTF_CHECK(materialize(lw, input));
    in[k] = p->value_buffer[input];
    in_shapes[k] = mtf_lw_local_shape(p, input);
    in_dtypes[k] = lw->dtype[input];
    pending |= lw->pending[in[k]];
  }
  if (pending) mtf_lw_keep_float(lw, node);
  mtf_shape out_shape = mtf_lw_local_shape(p, node);
  int out;
  MTF_CHECK(emit_kernel_into(lw, node, MTF_PHASE_WHOLE, n->n_inputs, in, in_shapes, in_dtypes, &out_shape, n->dtype, into,
                             &out));
  lw->pending[out] = pending;
  p->value_buffer[node] = out;
  return MTF_OK;
}

static int named_in(const char *name, int n_dims, const char *const *dims) {
  for (int i = 0; i < n_dims; i++)
    if (strcmp(name, dims[i]) == 0) return 1;
  return 0;
}

int mtf_lower_input_whole(mtf_lowering *lw, int node, int k, int n_dims, const char *const *dims, int *buffer,
                          mtf_shape *shape) {
  mtf_tensor_layout want = lw->plan->layouts[lw->g->nodes[node].inputs[k]];
  for (int d = 0; d < want.shape.rank; d++)
    if (named_in(want.shape.dims[d].name, n_dims, dims)) want.mesh_axis[d] = -1;
  return mtf_lower_input_as(lw, node, k, &want, buffer, shape);
}

mtf_shape mtf_lowering_shape_whole(const mtf_lowering *lw, int node, int n_dims, const char *const *dims) {
  mtf_shape s = mtf_lw_local_shape(lw->plan, node);
  const mtf_shape *whole = &lw->g->nodes[node].shape;
  for (int d = 0; d < s.rank; d++)
    if (named_in(s.dims[d].name, n_dims, dims)) s.dims[d].size = whole->dims[d].size;
  return s;
}

int mtf_lower_set_value_sliced(mtf_lowering *lw, int node, int buffer, const mtf_shape *shape) {
  mtf_plan *p = lw->plan;
  mtf_tensor_layout whole = p->layouts[node]; /* the layout `shape` is: whole where it is larger */
  mtf_shape local = mtf_lw_local_shape(p, node);
  for (int d = 0; d < shape->rank; d++)
    if (shape->dims[d].size != local.dims[d].size) whole.mesh_axis[d] = -1;
  return mtf_lower_reshard(lw, node, buffer, &whole, 0, &p->layouts[node], &p->value_buffer[node]);
}

/* Whether node (whose input 0 is a variable) may write into the variable's storage: the plan assigns the
 * variable this node's value and nothing else, and no other needed node (nor a fetch) reads the variable. */
static int may_write_into_variable(const lowering *lw, int node) {
  const mtf_graph *g = lw->g;
  const mtf_plan *p = lw->plan;
  int variable = g->nodes[node].inputs[0], assigned_here = 0;
  if (g->nodes[variable].kind != MTF_OP_VARIABLE) return 0;
  for (int i = lw->first_assign; i < lw->end_assign; i++)
    if (g->assigns[i].variable == variable) {
      if (g->assigns[i].value != node) return 0;
      assigned_here = 1;
    }
  if (!assigned_here) return 0;
  for (int f = 0; f < p->n_fetches; f++)
    if (p->fetch_nodes[f] == variable) return 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (i == node || !p->needed[i]) continue;
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] == variable) return 0;
  }
  return 1;
}

int mtf_lower_into_assigned_variable(mtf_lowering *lw, int node) {
  mtf_plan *p = lw->plan;
  int last = p->n_steps - 1, variable_buffer = p->value_buffer[lw->g->nodes[node].inputs[0]];
  if (last < 0 || p->steps[last].node != node || p->steps[last].kind != MTF_STEP_KERNEL ||
      p->steps[last].out != p->value_buffer[node] || !may_write_into_variable(lw, node))
    return 0;
  mtf_lw_drop_buffer(p, p->steps[last].out); /* the arena buffer the step was given */
  p->steps[last].out = variable_buffer;
  p->value_buffer[node] = variable_buffer;
  mtf_buffer *v = &p->buffers[variable_buffer];
  if (v->last_step < last) v->last_step = last;
  return 1;
}

static int mark_needed(mtf_plan *p, const mtf_graph *g, int n_fetches, const mtf_tensor *fetches, int first_assign,
                       int end_assign, mtf_error *err) {
  for (int i = 0; i < n_fetches; i++) {
    if (fetches[i] < 0 || fetches[i] >= g->n_nodes)
      return mtf_error_set(err, MTF_ERR_INVALID, "plan: fetch %d is not a tensor of the graph", fetches[i]);
    p->needed[fetches[i]] = 1;
  }
  for (int i = first_assign; i < end_assign; i++)
    p->needed[g->assigns[i].variable] = p->needed[g->assigns[i].value] = 1;
  for (int i = g->n_nodes - 1; i >= 0; i--)
    if (p->needed[i])
      for (int k = 0; k < g->nodes[i].n_inputs; k++) p->needed[g->nodes[i].inputs[k]] = 1;
  return MTF_OK;
}

static int check_layouts(mtf_plan *p, const mtf_graph *g, const mtf_layout_rules *rules, mtf_error *err) {
  for (int i = 0; i < g->n_nodes; i++) {
    if (!p->needed[i]) continue;
    int rc = mtf_tensor_layout_make(rules, &p->mesh, g->nodes[i].name, &g->nodes[i].shape, &p->layouts[i], err);
    if (rc) {
      char mesh_text[MTF_SHAPE_STR_MAX];
      return mtf_error_prefix(err, "layout for mesh %s", mtf_shape_format(&p->mesh, mesh_text, sizeof mesh_text));
    }
  }
  return MTF_OK;
}

static int plan_create(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules, int mesh_rank,
                       int n_fetches, const mtf_tensor *fetches, int first_assign, int end_assign,
                       const mtf_plan_options *options, mtf_plan **out, mtf_error *err) {
  *out = NULL;
  if (g->error.code != MTF_OK) {
    *err = g->error;
    return mtf_error_prefix(err, "graph");
  }
  if (first_assign < 0 || first_assign > end_assign || end_assign > g->n_assigns)
    return mtf_error_set(err, MTF_ERR_INVALID, "plan: assigns [%d, %d) are not among the graph's %d", first_assign,
                         end_assign, g->n_assigns);
  MTF_CHECK(mtf_mesh_validate(mesh, err));
  if (mesh_rank < 0 || mesh_rank >= mtf_mesh_size(mesh))
    return mtf_error_set(err, MTF_ERR_INVALID, "plan: rank %d is outside the mesh of %d", mesh_rank, mtf_mesh_size(mesh));
  mtf_plan *p = calloc(1, sizeof *p);
  int count = g->n_nodes;
  lowering lw = {.plan = p, .g = g, .err = err, .first_assign = first_assign, .end_assign = end_assign};
  if (!p) return mtf_error_set(err, MTF_ERR_NOMEM, "plan: out of memory");
  p->graph = g;
  p->mesh = *mesh;
  p->mesh_rank = mesh_rank;
  mtf_mesh_rank_to_coord(mesh, mesh_rank, p->coord);
  p->layouts = calloc((size_t)count + 1, sizeof *p->layouts);
  p->needed = calloc((size_t)count + 1, 1);
  p->value_buffer = malloc(sizeof(int) * ((size_t)count + 1));
  p->fetch_nodes = malloc(sizeof(int) * ((size_t)n_fetches + 1));
  int rc = !p->layouts || !p->needed || !p->value_buffer || !p->fetch_nodes
               ? mtf_error_set(err, MTF_ERR_NOMEM, "plan: out of memory")
               : MTF_OK;
  if (rc == MTF_OK) {
    for (int i = 0; i < count; i++) p->value_buffer[i] = -1;
    memcpy(p->fetch_nodes, fetches, sizeof(int) * (size_t)n_fetches);
    p->n_fetches = n_fetches;
    rc = mark_needed(p, g, n_fetches, fetches, first_assign, end_assign, err);
  }
  if (rc == MTF_OK) rc = check_layouts(p, g, rules, err);
  if (rc == MTF_OK) rc = mtf_lw_choose_dtypes(&lw, options && options->bf16_storage, n_fetches, fetches);
  for (int i = 0; i < count && rc == MTF_OK; i++)
    if (p->needed[i]) rc = mtf_op(g->nodes[i].kind)->lower(&lw, i);
  for (int i = 0; i < n_fetches && rc == MTF_OK; i++) {
    rc = materialize(&lw, fetches[i]);
    p->buffers[p->value_buffer[fetches[i]]].last_step = INT_MAX; /* read after the run */
  }
  for (int i = first_assign; i < end_assign && rc == MTF_OK; i++) {
    int variable = g->assigns[i].variable, value = g->assigns[i].value;
    rc = materialize(&lw, value);
    if (rc) break;
    if (p->value_buffer[value] == p->value_buffer[variable]) continue; /* written in place */
    mtf_shape local = mtf_lw_local_shape(p, variable);
    mtf_step s = mtf_lw_one_input_step(MTF_STEP_COPY, variable, p->value_buffer[value], &local, p->value_buffer[variable], &local);
    rc = mtf_lw_add_step(&lw, &s);
  }
  if (rc == MTF_OK) mtf_lw_overwrite_inputs(&lw);
  if (rc == MTF_OK && options && options->bf16_weight_copies) mtf_lw_weight_copies(&lw);
  if (rc == MTF_OK && options && options->fuse_optimizer) mtf_lw_fuse_moments(&lw);
  if (rc == MTF_OK && options && options->fuse_optimizer && options->fuse_grad_norm) mtf_lw_fuse_grad_norm(&lw);
  if (rc == MTF_OK && options && options->xent_grad_from_loss) mtf_lw_fuse_xent(&lw);
  if (rc == MTF_OK && options && options->fuse_scatter_add) mtf_lw_fuse_scatter(&lw);
  if (rc == MTF_OK && options && options->fuse_product_add) mtf_lw_fuse_product_add(&lw);
  free(lw.pending);
  free(lw.dtype);
  if (rc == MTF_OK && options) rc = mtf_plan_bucket_allreduces(p, options->allreduce_bucket_bytes,
                                                                        options->bucket_wire_dtype, err);
  if (rc != MTF_OK) {
    mtf_plan_destroy(p);
    return rc;
  }
  int alignment = options && options->arena_alignment > MTF_ARENA_WORD ? options->arena_alignment : MTF_ARENA_WORD;
  if (alignment & (alignment - 1)) {
    mtf_plan_destroy(p);
    return mtf_error_set(err, MTF_ERR_INVALID, "plan: arena alignment %d is not a power of two", alignment);
  }
  p->arena_elements = mtf_plan_assign_memory(p, alignment / MTF_ARENA_WORD);
  if (p->arena_elements < 0) {
    mtf_plan_destroy(p);
    return mtf_error_set(err, MTF_ERR_NOMEM, "plan: out of memory while placing buffers");
  }
  p->stats.peak_bytes = p->arena_elements * (int64_t)MTF_ARENA_WORD;
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == MTF_BUF_ARENA) p->stats.naive_bytes += mtf_buffer_words(&p->buffers[b]) * MTF_ARENA_WORD;
  for (int k = 0; k < p->n_buckets; k++) /* a bucket's range holds its members, counted above */
    p->stats.naive_bytes -= p->buckets[k].elements * (int64_t)sizeof(float);
  p->stats.steps = p->n_steps;
  *out = p;
  return MTF_OK;
}

int mtf_plan_create(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules, int mesh_rank,
                    int n_fetches, const mtf_tensor *fetches, mtf_plan **out, mtf_error *err) {
  return plan_create(g, mesh, rules, mesh_rank, n_fetches, fetches, 0, g->n_assigns, NULL, out, err);
}

int mtf_plan_create_with_options(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                                 int mesh_rank, int n_fetches, const mtf_tensor *fetches,
                                 const mtf_plan_options *options, mtf_plan **out, mtf_error *err) {
  return plan_create(g, mesh, rules, mesh_rank, n_fetches, fetches, 0, g->n_assigns, options, out, err);
}

int mtf_plan_create_without_assigns(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                                    int mesh_rank, int n_fetches, const mtf_tensor *fetches, mtf_plan **out,
                                    mtf_error *err) {
  return plan_create(g, mesh, rules, mesh_rank, n_fetches, fetches, 0, 0, NULL, out, err);
}

int mtf_plan_create_with_assigns(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                                 int mesh_rank, int n_fetches, const mtf_tensor *fetches, int first_assign,
                                 int n_assigns, const mtf_plan_options *options, mtf_plan **out, mtf_error *err) {
  return plan_create(g, mesh, rules, mesh_rank, n_fetches, fetches, first_assign, first_assign + n_assigns, options,
                     out, err);
}

int mtf_graph_num_assigns(const mtf_graph *g) { return g->n_assigns; }

void mtf_plan_destroy(mtf_plan *plan) {
  if (!plan) return;
  free(plan->layouts);
  free(plan->needed);
  free(plan->value_buffer);
  free(plan->fetch_nodes);
  free(plan->steps);
  free(plan->buffers);
  free(plan->buckets);
  free(plan);
}

const mtf_plan_stats *mtf_plan_get_stats(const mtf_plan *plan) { return &plan->stats; }

int64_t mtf_plan_bucket_bytes(const mtf_plan *plan, int i, int *members) {
  if (i < 0 || i >= plan->n_buckets) return -1;
  if (members) *members = plan->buckets[i].n_members;
  return plan->buckets[i].elements * (int64_t)sizeof(float);
}

const mtf_tensor_layout *mtf_plan_layout(const mtf_plan *plan, mtf_tensor t) {
  if (t < 0 || t >= plan->graph->n_nodes || !plan->needed[t]) return NULL;
  return &plan->layouts[t];
}

const mtf_graph *mtf_plan_graph(const mtf_plan *plan) { return plan->graph; }
const mtf_shape *mtf_plan_mesh(const mtf_plan *plan) { return &plan->mesh; }
int mtf_plan_rank(const mtf_plan *plan) { return plan->mesh_rank; }

int64_t mtf_plan_slice_elements(const mtf_plan *plan, mtf_tensor t) {
  const mtf_tensor_layout *layout = mtf_plan_layout(plan, t);
  if (!layout) return 0;
  mtf_shape slice = mtf_layout_slice_shape(layout, &plan->mesh);
  return mtf_shape_num_elements(&slice);
}
