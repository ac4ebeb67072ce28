/* What the files of lower/ share beyond lowering.h: the lowering state and the emitters of plan steps
 * (lower.c implements them; reshard.c moves buffers between layouts with them). Not for ops/. */
#ifndef MTF_LOWER_LOWER_INTERNAL_H
#define MTF_LOWER_LOWER_INTERNAL_H

#include "lower/lowering.h"

struct mtf_lowering {
  mtf_plan *plan;
  const mtf_graph *g;
  mtf_axis_set *pending; /* per buffer: axes over which it still holds partial sums */
  int cap_pending;
  mtf_error *err;
  int first_assign, end_assign; /* the graph's assigns this plan performs */
};

/* A new buffer of this rank (local shape), holding a value of node; its id, or minus an error code. */
int mtf_lw_new_buffer(mtf_lowering *lw, mtf_buffer_kind kind, const mtf_shape *local, int node, mtf_dtype dtype);
/* Appends a step and extends the lifetimes of the buffers it touches. */
int mtf_lw_add_step(mtf_lowering *lw, const mtf_step *step);
mtf_step mtf_lw_one_input_step(mtf_step_kind kind, int node, int in, const mtf_shape *in_shape, int out,
                               const mtf_shape *out_shape);
/* Counts one collective of `kind` over `axes` whose input holds `elements` (4-byte) elements in the plan's
 * statistics, with the communicator's formula (mtf_collective_bytes_sent). */
void mtf_lw_count_collective(mtf_plan *p, mtf_collective_kind kind, mtf_axis_set axes, int64_t elements,
                             mtf_dtype dtype);
/* An in-place allreduce of `buffer` over `axes`. */
int mtf_lw_allreduce(mtf_lowering *lw, int node, int buffer, const mtf_shape *shape, mtf_axis_set axes,
                     mtf_reduce_op op);
/* Allgathers *buffer (local shape *shape) along tensor dim d over mesh axis `axis`; updates both. */
int mtf_lw_gather_dim(mtf_lowering *lw, int node, int *buffer, mtf_shape *shape, int d, int axis);
mtf_shape mtf_lw_local_shape(const mtf_plan *p, int node);

#endif
