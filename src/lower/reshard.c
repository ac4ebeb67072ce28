/* The resharding step: one buffer moved from the layout it has to the layout its consumer needs, with the
 * fewest bytes sent (lowering.h, mtf_lower_reshard, describes the cases). Each mesh axis splits at most one
 * dim of a tensor, and partial sums are pending only over axes that split none of its dims, so what an
 * axis must do follows from where it is now and where it must be:
 *
 *   now            wanted          steps                       bytes sent per rank (B: its buffer's bytes)
 *   dim d          dim d           nothing                     0
 *   nothing        dim e           local slice                 0
 *   pending sums   dim e           reduce-scatter along e      (G-1)/G * B
 *   dim d          dim e           alltoall (split e, join d)  (G-1)/G * B
 *   pending sums   nothing         allreduce                   2 (G-1)/G * B
 *   dim d          nothing         allgather along d           (G-1) * B
 *
 * (G: the axis's size; the communicator counts the same, mtf_collective_bytes_sent.) The order keeps B
 * small: allreduces of the unsplit sums first, in place (as mtf_lower_input would, so other consumers of
 * the buffer find it summed), then slices and reduce-scatters, then alltoalls, and only when nothing else
 * can move an allgather, one axis at a time, after which the moves that waited for its dim are made.
 * Consecutive slices are one step. Pure: no MPI. */
#include <stdio.h>
#include <string.h>

#include "lower/lower_internal.h"

typedef struct reshard {
  mtf_lowering *lw;
  int node;
  int buffer;                 /* holding the value now */
  mtf_shape shape;            /* its local shape (dim names of the target layout) */
  int axis_of[MTF_MAX_RANK];  /* the mesh axis splitting each dim now, or -1 */
  mtf_axis_set pending;       /* axes the buffer still holds partial sums over */
  mtf_dtype dtype;
  int slice_step;             /* index of the slice step that made `buffer`, while it can absorb another */
} reshard;

static int dim_on(const int *axis_of, int rank, int axis) {
  for (int d = 0; d < rank; d++)
    if (axis_of[d] == axis) return d;
  return -1;
}

static int64_t axis_size(const reshard *r, int axis) { return r->lw->plan->mesh.dims[axis].size; }

/* A new arena buffer of shape for the value; its id or minus an error code. */
static int new_arena(reshard *r, const mtf_shape *shape) {
  return mtf_lw_new_buffer(r->lw, MTF_BUF_ARENA, shape, r->node, r->dtype);
}

static int add(reshard *r, const mtf_step *s, int out, const mtf_shape *out_shape) {
  MTF_CHECK(mtf_lw_add_step(r->lw, s));
  r->buffer = out;
  r->shape = *out_shape;
  r->slice_step = -1;
  return MTF_OK;
}

/* Elements before tensor axis d (its outer rows): a collective along d of a tensor with more than one
 * such row needs its blocks packed. */
static int64_t outer_rows(const mtf_shape *shape, int d) {
  int64_t outer = 1;
  for (int e = 0; e < d; e++) outer *= shape->dims[e].size;
  return outer;
}

/* Dim d, now whole (and replicated along `axis`), cut to this rank's part. */
static int local_slice(reshard *r, int d, int axis) {
  mtf_plan *p = r->lw->plan;
  int64_t part = r->shape.dims[d].size / axis_size(r, axis), offset = part * p->coord[axis];
  mtf_shape out_shape = r->shape;
  out_shape.dims[d].size = part;
  r->axis_of[d] = axis;
  if (r->slice_step >= 0) { /* the previous step was a slice made here: it cuts this dim too */
    mtf_step *s = &p->steps[r->slice_step];
    s->out_shape = out_shape;
    s->offsets[d] = offset;
    p->buffers[r->buffer].elements = mtf_shape_num_elements(&out_shape);
    r->shape = out_shape;
    return MTF_OK;
  }
  int out = new_arena(r, &out_shape);
  if (out < 0) return -out;
  mtf_step s = mtf_lw_one_input_step(MTF_STEP_SLICE, r->node, r->buffer, &r->shape, out, &out_shape);
  s.offsets[d] = offset;
  MTF_CHECK(add(r, &s, out, &out_shape));
  r->slice_step = p->n_steps - 1;
  return MTF_OK;
}

/* Partial sums over `axis` summed, this rank keeping its part of dim e. */
static int reduce_scatter(reshard *r, int e, int axis) {
  mtf_shape out_shape = r->shape;
  out_shape.dims[e].size /= axis_size(r, axis);
  int out = new_arena(r, &out_shape);
  if (out < 0) return -out;
  mtf_step s = mtf_lw_one_input_step(MTF_STEP_REDUCE_SCATTER, r->node, r->buffer, &r->shape, out, &out_shape);
  s.axes = 1u << axis;
  s.reduce_op = MTF_REDUCE_SUM;
  s.tensor_axis = e;
  if (outer_rows(&r->shape, e) > 1) {
    s.scratch = new_arena(r, &r->shape);
    if (s.scratch < 0) return -s.scratch;
  }
  mtf_lw_count_collective(r->lw->plan, MTF_COLL_REDUCE_SCATTER, s.axes, mtf_shape_num_elements(&r->shape), r->dtype);
  r->axis_of[e] = axis;
  r->pending &= ~s.axes;
  return add(r, &s, out, &out_shape);
}

/* The split of `axis` moved from dim d to dim e (whole now): one alltoall over the axis. */
static int alltoall(reshard *r, int d, int e, int axis) {
  int64_t G = axis_size(r, axis);
  mtf_shape out_shape = r->shape, blocks = r->shape;
  out_shape.dims[e].size /= G;
  out_shape.dims[d].size *= G;
  blocks.dims[e].size /= G; /* one member's block, as it arrives */
  int out = new_arena(r, &out_shape);
  if (out < 0) return -out;
  mtf_step s = mtf_lw_one_input_step(MTF_STEP_ALLTOALL, r->node, r->buffer, &r->shape, out, &out_shape);
  s.axes = 1u << axis;
  s.tensor_axis = e;
  s.concat_axis = d;
  /* Blocks to send are contiguous when e has no outer rows; those received when d has none. */
  int packs = (outer_rows(&r->shape, e) > 1) + (outer_rows(&blocks, d) > 1);
  if (packs > 0) {
    mtf_shape flat = {0};
    mtf_shape_append(&flat, "scratch", packs * mtf_shape_num_elements(&r->shape), NULL);
    s.scratch = new_arena(r, &flat);
    if (s.scratch < 0) return -s.scratch;
  }
  mtf_lw_count_collective(r->lw->plan, MTF_COLL_ALLTOALL, s.axes, mtf_shape_num_elements(&r->shape), r->dtype);
  r->axis_of[d] = -1;
  r->axis_of[e] = axis;
  return add(r, &s, out, &out_shape);
}

static int allgather(reshard *r, int d, int axis) {
  MTF_CHECK(mtf_lw_gather_dim(r->lw, r->node, &r->buffer, &r->shape, d, axis));
  r->axis_of[d] = -1;
  r->slice_step = -1;
  return MTF_OK;
}

typedef enum move { MOVE_SLICE, MOVE_REDUCE_SCATTER, MOVE_ALLTOALL } move;

/* One pass over the axes making the moves of one kind that are possible now (the wanted dim is whole);
 * sets *progress when it made one. */
static int pass(reshard *r, const mtf_tensor_layout *to, move kind, int *progress) {
  int rank = r->shape.rank, n_axes = r->lw->plan->mesh.rank;
  for (int axis = 0; axis < n_axes; axis++) {
    int now = dim_on(r->axis_of, rank, axis), want = dim_on(to->mesh_axis, rank, axis);
    if (now == want || want < 0 || r->axis_of[want] >= 0) continue; /* nothing to do, or its dim is held */
    int summed = (r->pending >> axis) & 1u;
    if (kind == MOVE_SLICE && !summed && now < 0) MTF_CHECK(local_slice(r, want, axis));
    else if (kind == MOVE_REDUCE_SCATTER && summed) MTF_CHECK(reduce_scatter(r, want, axis));
    else if (kind == MOVE_ALLTOALL && now >= 0) MTF_CHECK(alltoall(r, now, want, axis));
    else continue;
    *progress = 1;
  }
  return MTF_OK;
}

/* Slices (free), then reduce-scatters of what the slices left, then alltoalls, while any is possible. */
static int until_done(reshard *r, const mtf_tensor_layout *to) {
  for (int progress = 1; progress;) {
    progress = 0;
    for (move kind = MOVE_SLICE; kind <= MOVE_ALLTOALL; kind++) MTF_CHECK(pass(r, to, kind, &progress));
  }
  return MTF_OK;
}

static int check_layouts(const mtf_lowering *lw, int node, const mtf_tensor_layout *from, mtf_axis_set pending,
                         const mtf_tensor_layout *to) {
  int ok = from->shape.rank == to->shape.rank && !(pending & mtf_layout_split_axes(from));
  for (int d = 0; ok && d < from->shape.rank; d++) ok = from->shape.dims[d].size == to->shape.dims[d].size;
  if (ok) return MTF_OK;
  char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
  return mtf_error_set(lw->err, MTF_ERR_INVALID, "lowering '%s': cannot reshard %s (partial over 0x%x) to %s",
                       lw->g->nodes[node].name, mtf_shape_format(&from->shape, a, sizeof a), pending,
                       mtf_shape_format(&to->shape, b, sizeof b));
}

/* The whole step; keep_pending leaves the sums over axes `to` splits nothing on pending (*left). */
static int reshard_to(mtf_lowering *lw, int node, int buffer, const mtf_tensor_layout *from, mtf_axis_set pending,
                      const mtf_tensor_layout *to, int keep_pending, int *out, mtf_axis_set *left) {
  MTF_CHECK(check_layouts(lw, node, from, pending, to));
  mtf_plan *p = lw->plan;
  reshard r = {.lw = lw, .node = node, .buffer = buffer, .pending = pending, .dtype = p->buffers[buffer].dtype,
               .slice_step = -1};
  r.shape = mtf_layout_slice_shape(from, &p->mesh);
  for (int d = 0; d < r.shape.rank; d++) {
    snprintf(r.shape.dims[d].name, MTF_NAME_MAX, "%s", to->shape.dims[d].name);
    r.axis_of[d] = from->mesh_axis[d];
  }
  mtf_axis_set unsplit = pending & ~mtf_layout_split_axes(to);
  if (unsplit && !keep_pending) {
    MTF_CHECK(mtf_lw_allreduce(lw, node, buffer, &r.shape, unsplit, MTF_REDUCE_SUM));
    lw->pending[buffer] &= ~unsplit; /* summed in place, for every reader */
    r.pending &= ~unsplit;
  }
  /* What cannot move is gathered, one axis at a time: a split with nowhere to go, or one of a cycle of
   * splits that each wait for the other's dim (gathering one frees the dim the next moves to). */
  for (int gathered = 1; gathered;) {
    MTF_CHECK(until_done(&r, to));
    gathered = 0;
    for (int axis = 0; axis < p->mesh.rank && !gathered; axis++) {
      int now = dim_on(r.axis_of, r.shape.rank, axis);
      if (now >= 0 && to->mesh_axis[now] != axis) {
        MTF_CHECK(allgather(&r, now, axis));
        gathered = 1;
      }
    }
  }
  for (int d = 0; d < r.shape.rank; d++)
    if (r.axis_of[d] != to->mesh_axis[d])
      return mtf_error_set(lw->err, MTF_ERR_INVALID, "lowering '%s': resharding left dim %d on axis %d, not %d",
                           lw->g->nodes[node].name, d, r.axis_of[d], to->mesh_axis[d]);
  *out = r.buffer;
  if (left) *left = r.pending;
  if (r.buffer != buffer) lw->pending[r.buffer] = r.pending;
  return MTF_OK;
}

int mtf_lower_reshard(mtf_lowering *lw, int node, int buffer, const mtf_tensor_layout *from, mtf_axis_set pending,
                      const mtf_tensor_layout *to, int *out) {
  return reshard_to(lw, node, buffer, from, pending, to, 0, out, NULL);
}

int mtf_lower_input_as(mtf_lowering *lw, int node, int k, const mtf_tensor_layout *want, int *buffer,
                       mtf_shape *local) {
  mtf_plan *p = lw->plan;
  int input = lw->g->nodes[node].inputs[k], b = p->value_buffer[input];
  MTF_CHECK(mtf_lower_reshard(lw, node, b, &p->layouts[input], lw->pending[b], want, buffer));
  *local = mtf_layout_slice_shape(want, &p->mesh);
  return MTF_OK;
}

static int same_sizes(const mtf_shape *a, const mtf_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i].size != b->dims[i].size) return 0;
  return 1;
}

/* For a reshape: the layout of the new shape that the old layout already is, byte for byte. A split of old
 * dim d into G parts is a split of new dim e when both start at the same flat offset (the dims before them
 * have one product) and G divides e: then each part is the same run of elements in every outer row. The
 * splits that carry over stay in *kept; the others are taken out of it (they are gathered first). */
static void carried_layout(const mtf_shape *mesh, const mtf_tensor_layout *old, const mtf_shape *new_shape,
                           mtf_tensor_layout *kept, mtf_tensor_layout *carried) {
  *kept = *old;
  memset(carried, 0, sizeof *carried);
  carried->shape = *new_shape;
  for (int e = 0; e < new_shape->rank; e++) carried->mesh_axis[e] = -1;
  for (int d = 0; d < old->shape.rank; d++) {
    int axis = old->mesh_axis[d];
    if (axis < 0) continue;
    int64_t before = outer_rows(&old->shape, d), G = mesh->dims[axis].size;
    kept->mesh_axis[d] = -1;
    for (int e = 0; e < new_shape->rank; e++)
      if (outer_rows(new_shape, e) == before && new_shape->dims[e].size % G == 0 && carried->mesh_axis[e] < 0 &&
          new_shape->dims[e].size > 1) {
        carried->mesh_axis[e] = axis;
        kept->mesh_axis[d] = axis;
        break;
      }
  }
}

int mtf_lower_reshape(mtf_lowering *lw, int node) {
  mtf_plan *p = lw->plan;
  int input = lw->g->nodes[node].inputs[0], buffer = p->value_buffer[input], out;
  const mtf_tensor_layout *in_layout = &p->layouts[input], *out_layout = &p->layouts[node];
  /* the same bytes: float32 where its input was kept so (partial sums, storage.c) */
  if (p->buffers[buffer].dtype == MTF_F32) mtf_lw_keep_float(lw, node);
  if (same_sizes(&in_layout->shape, &out_layout->shape)) { /* a rename: dim i stays dim i */
    MTF_CHECK(mtf_lower_reshard(lw, node, buffer, in_layout, lw->pending[buffer], out_layout, &out));
  } else {
    mtf_tensor_layout kept, carried;
    carried_layout(&p->mesh, in_layout, &out_layout->shape, &kept, &carried);
    mtf_axis_set pending = lw->pending[buffer];
    int whole;
    MTF_CHECK(reshard_to(lw, node, buffer, in_layout, pending, &kept, 1, &whole, &pending));
    /* The same bytes read as the new shape (summing is linear, so pending sums stay pending). */
    MTF_CHECK(mtf_lower_reshard(lw, node, whole, &carried, pending, out_layout, &out));
  }
  p->value_buffer[node] = out;
  return MTF_OK;
}
