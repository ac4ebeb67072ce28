/* The plan's data-movement steps as StableHLO: SLICE (a dynamic_slice whose starts come from a per-rank
 * table), COPY, and the collectives over replica groups. A step over mesh axes `axes` runs within each
 * group of ranks that differ only along those axes: replica_groups lists every group, members in the
 * order src/core/mesh.c numbers them (row-major over the set's axes), which is the order lowering
 * concatenates slices in, so all_gather / all_to_all / reduce_scatter place blocks as comm.c does.
 * Cross-replica mode (no channel_handle): with num_partitions = 1, replica ids are the mesh ranks. */
#include <stdlib.h>

#include "core/mesh.h"
#include "exec/pjrt/emit_internal.h"

static void print_groups(h_emitter *E, mtf_axis_set axes) {
  const mtf_shape *mesh = &E->plans[0]->mesh;
  int size = mtf_mesh_group_size(mesh, axes), count = mtf_mesh_group_count(mesh, axes);
  int ranks[1024];
  h_printf(E, "replica_groups = dense<[");
  for (int g = 0; g < count; g++) {
    int leader = -1; /* the first rank (row-major) of group g */
    for (int r = 0; r < E->n_plans && leader < 0; r++) {
      int coord[MTF_MAX_MESH_AXES];
      mtf_mesh_rank_to_coord(mesh, r, coord);
      if (mtf_mesh_group_index(mesh, axes, coord) == g) leader = r;
    }
    mtf_mesh_group_ranks(mesh, axes, leader, ranks);
    h_printf(E, "%s[", g ? ", " : "");
    for (int i = 0; i < size; i++) h_printf(E, "%s%d", i ? ", " : "", ranks[i]);
    h_printf(E, "]");
  }
  h_printf(E, "]> : tensor<%dx%dxi64>", count, size);
}

static const char *reduce_name(mtf_reduce_op op) {
  return op == MTF_REDUCE_MAX ? "maximum" : op == MTF_REDUCE_MIN ? "minimum" : "add";
}

/* all_reduce or reduce_scatter (scatter_dim >= 0) of x with a region of op. */
static int reduce_collective(h_emitter *E, int x, mtf_axis_set axes, mtf_reduce_op op, int scatter_dim) {
  const h_type *tx = h_t(E, x);
  h_shape s = tx->s, scalar = {0, {0}};
  if (scatter_dim >= 0) s.d[scatter_dim] /= mtf_mesh_group_size(&E->plans[0]->mesh, axes);
  int id = h_new(E, s, tx->e), a = h_new(E, scalar, tx->e), b = h_new(E, scalar, tx->e), r = h_new(E, scalar, tx->e);
  char tin[160], tout[160], ts[160];
  h_type st = {scalar, tx->e};
  h_type_text(&st, ts);
  E->n_collectives++;
  h_printf(E, "    %%v%d = \"stablehlo.%s\"(%%v%d) ({\n    ^bb0(%%v%d: %s, %%v%d: %s):\n", id,
           scatter_dim >= 0 ? "reduce_scatter" : "all_reduce", x, a, ts, b, ts);
  h_printf(E, "      %%v%d = \"stablehlo.%s\"(%%v%d, %%v%d) : (%s, %s) -> %s\n", r, reduce_name(op), a, b, ts, ts, ts);
  h_printf(E, "      \"stablehlo.return\"(%%v%d) : (%s) -> ()\n    }) {", r, ts);
  print_groups(E, axes);
  if (scatter_dim >= 0) h_printf(E, ", scatter_dimension = %d : i64", scatter_dim);
  h_printf(E, "} : (%s) -> %s\n", h_type_text(h_t(E, x), tin), h_type_text(h_t(E, id), tout));
  return id;
}

static int all_gather(h_emitter *E, int x, mtf_axis_set axes, int dim) {
  h_shape s = h_t(E, x)->s;
  s.d[dim] *= mtf_mesh_group_size(&E->plans[0]->mesh, axes);
  int id = h_new(E, s, h_t(E, x)->e);
  char t1[160], t2[160];
  E->n_collectives++;
  h_printf(E, "    %%v%d = \"stablehlo.all_gather\"(%%v%d) {all_gather_dim = %d : i64, ", id, x, dim);
  print_groups(E, axes);
  h_printf(E, "} : (%s) -> %s\n", h_type_text(h_t(E, x), t1), h_type_text(h_t(E, id), t2));
  return id;
}

static int all_to_all(h_emitter *E, int x, mtf_axis_set axes, int split, int concat) {
  int g = mtf_mesh_group_size(&E->plans[0]->mesh, axes);
  h_shape s = h_t(E, x)->s;
  s.d[split] /= g;
  s.d[concat] *= g;
  int id = h_new(E, s, h_t(E, x)->e);
  char t1[160], t2[160];
  E->n_collectives++;
  h_printf(E, "    %%v%d = \"stablehlo.all_to_all\"(%%v%d) {concat_dimension = %d : i64, ", id, x, concat);
  print_groups(E, axes);
  h_printf(E, ", split_count = %d : i64, split_dimension = %d : i64} : (%s) -> %s\n", g, split,
           h_type_text(h_t(E, x), t1), h_type_text(h_t(E, id), t2));
  return id;
}

static int64_t get_slice_offset(const mtf_step *st, void *arg) { return st->offsets[*(int *)arg]; }

/* A bucket's allreduce: its members (buffers placed in its range) flattened, concatenated in range order,
 * summed at once, and split back. Nothing touches the range between START and WAIT, so doing it all at
 * START is the same program; XLA schedules it. */
static int bucket_allreduce(h_emitter *E, const mtf_step *st) {
  const mtf_plan *p = E->plans[0];
  int k = st->bucket;
  if (k < 0 || k >= p->n_buckets) return e_fail(E, st, "a bucket step names no bucket");
  int *members = malloc(sizeof(int) * ((size_t)p->n_buffers + 1)), *parts = malloc(sizeof(int) * (2 * (size_t)p->n_buffers + 1));
  if (!members || !parts) {
    free(members);
    free(parts);
    return mtf_error_set(E->err, MTF_ERR_NOMEM, "pjrt emitter: out of memory");
  }
  int n = 0;
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].bucket == k + 1) members[n++] = b;
  for (int i = 1; i < n; i++) /* by offset in the range */
    for (int j = i; j > 0 && p->buffers[members[j - 1]].bucket_offset > p->buffers[members[j]].bucket_offset; j--) {
      int t = members[j];
      members[j] = members[j - 1];
      members[j - 1] = t;
    }
  int n_parts = 0;
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    const mtf_buffer *buf = &p->buffers[members[i]];
    if (buf->bucket_offset > at) { /* a gap: zeros */
      h_shape gap = {1, {buf->bucket_offset - at}};
      parts[n_parts++] = h_splat(E, 0.0, H_F32, gap);
    }
    int v = E->buffer_value[members[i]];
    h_shape flat = {1, {buf->elements}};
    parts[n_parts++] = v >= 0 ? h_reshape(E, v, flat) : h_splat(E, 0.0, H_F32, flat);
    at = buf->bucket_offset + buf->elements;
  }
  int rc = MTF_OK;
  if (n_parts > 0) {
    int summed = reduce_collective(E, h_concatenate(E, parts, n_parts, 0), p->buckets[k].axes, MTF_REDUCE_SUM, -1);
    for (int i = 0; i < n; i++) {
      const mtf_buffer *buf = &p->buffers[members[i]];
      int64_t start = buf->bucket_offset, limit = start + buf->elements;
      int v = E->buffer_value[members[i]];
      h_shape shape = v >= 0 ? h_t(E, v)->s : (h_shape){1, {buf->elements}};
      E->buffer_value[members[i]] = h_reshape(E, h_slice(E, summed, &start, &limit), shape);
    }
  }
  free(members);
  free(parts);
  return rc;
}

int e_collective(h_emitter *E, const mtf_step *st) {
  switch (st->kind) {
    case MTF_STEP_ALLREDUCE: {
      /* in place: the buffer's current value, whatever shape it was written with */
      int v = E->buffer_value[st->out];
      h_shape s = h_shape_of(&st->out_shape);
      int x = v >= 0 ? h_reshape(E, v, s) : h_splat(E, 0.0, h_elem_of(E->plans[0]->buffers[st->out].dtype), s);
      E->buffer_value[st->out] = reduce_collective(E, x, st->axes, st->reduce_op, -1);
      return MTF_OK;
    }
    case MTF_STEP_ALLGATHER:
      e_output(E, st, all_gather(E, e_input(E, st, 0), st->axes, st->tensor_axis));
      return MTF_OK;
    case MTF_STEP_ALLTOALL:
      e_output(E, st, all_to_all(E, e_input(E, st, 0), st->axes, st->tensor_axis, st->concat_axis));
      return MTF_OK;
    case MTF_STEP_REDUCE_SCATTER:
      e_output(E, st, reduce_collective(E, e_input(E, st, 0), st->axes, MTF_REDUCE_SUM, st->tensor_axis));
      return MTF_OK;
    case MTF_STEP_SLICE: {
      int x = e_input(E, st, 0), starts[MTF_MAX_RANK];
      int64_t sizes[MTF_MAX_RANK], values[1024];
      for (int d = 0; d < st->out_shape.rank; d++) {
        e_rank_values(E, get_slice_offset, &d, values);
        starts[d] = h_rank_int(E, values);
        sizes[d] = st->out_shape.dims[d].size;
      }
      e_output(E, st, h_dynamic_slice(E, x, starts, sizes));
      return MTF_OK;
    }
    case MTF_STEP_COPY: e_output(E, st, e_input(E, st, 0)); return MTF_OK;
    case MTF_STEP_ALLREDUCE_START: return bucket_allreduce(E, st);
    case MTF_STEP_ALLREDUCE_WAIT: return MTF_OK;
    case MTF_STEP_KERNEL: break;
  }
  return e_fail(E, st, "unknown step kind");
}
