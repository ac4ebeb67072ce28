/* What the files of lower/ share beyond lowering.h: the lowering state and the emitters of plan steps
 * (lower.c implements them; reshard.c moves buffers between layouts with them). Not for ops/. */
#ifndef MTF_LOWER_LOWER_INTERNAL_H
#define MTF_LOWER_LOWER_INTERNAL_H

#include <limits.h>

#include "lower/lowering.h"

struct mtf_lowering {
  mtf_plan *plan;
  const mtf_graph *g;
  mtf_axis_set *pending; /* per buffer: axes over which it still holds partial sums */
  int cap_pending;
  mtf_error *err;
  int first_assign, end_assign; /* the graph's assigns this plan performs */
  mtf_dtype *dtype;             /* per node: the dtype its value is stored in (storage.c) */
};

/* Chooses lw->dtype: each node's own dtype, except that with `bf16_storage` (mtf_plan_options) the values the
 * kernels may write and read as bfloat16 are stored so (storage.c). Call after the needed nodes are marked. */
int mtf_lw_choose_dtypes(mtf_lowering *lw, int bf16_storage, int n_fetches, const int *fetches);
/* Kernel steps of ops with overwrites_input write their value over a dying input 0 (overwrite.c). */
void mtf_lw_overwrite_inputs(mtf_lowering *lw);
/* adam_update steps also write the bfloat16 copy of their weight that the weight's cast made, which the
 * cast then skips while it is current (weight_copies.c; mtf_plan_options.bf16_weight_copies). */
void mtf_lw_weight_copies(mtf_lowering *lw);
/* AdamW's moving averages of m and v folded into the adam_update step that reads them (fuse_moments.c;
 * mtf_plan_options.fuse_optimizer). */
void mtf_lw_fuse_moments(mtf_lowering *lw);
/* The post-passes' questions of a finished step list: does step s read (reads) or write (writes) buffer b; the
 * step before `before` that writes b, or -1. */
static inline int mtf_lw_step_touches(const mtf_step *s, int b, int reads, int writes) {
  if (writes && s->out == b) return 1;
  for (int k = 0; reads && k < s->n_in; k++)
    if (s->in[k] == b) return 1;
  return 0;
}
/* Every reference to buffer `from` in the steps after `after` (and the nodes' values) becomes `to` (overwrite.c):
 * for the passes that give a value another's buffer. */
void mtf_lw_rename_buffer(mtf_plan *p, int from, int to, int after);
/* Buffer b is no longer written or read (a fusion took its value elsewhere): the memory planner skips it. */
static inline void mtf_lw_drop_buffer(mtf_plan *p, int b) {
  p->buffers[b].elements = 0;
  p->buffers[b].first_step = INT_MAX;
  p->buffers[b].last_step = -1;
}
static inline int mtf_lw_writer_before(const mtf_plan *p, int b, int before) {
  for (int t = before - 1; t >= 0; t--)
    if (p->steps[t].out == b) return t;
  return -1;
}
/* A fused adam_update also sums its gradient's squares for a later einsum (fuse_moments.c;
 * mtf_plan_options.fuse_grad_norm). */
void mtf_lw_fuse_grad_norm(mtf_lowering *lw);
/* Cross-entropy gradients that read the forward's loss (fuse_xent.c; mtf_plan_options.xent_grad_from_loss). */
void mtf_lw_fuse_xent(mtf_lowering *lw);
/* scatter_adds that add into the other term of their only reader's sum (fuse_scatter.c;
 * mtf_plan_options.fuse_scatter_add). */
void mtf_lw_fuse_scatter(mtf_lowering *lw);
/* einsums that add into the other term of their only reader's sum (fuse_add.c; mtf_plan_options.fuse_product_add). */
void mtf_lw_fuse_product_add(mtf_lowering *lw);
/* The node's value was to be bfloat16 but stays float32 (partial sums are summed in float32). */
void mtf_lw_keep_float(mtf_lowering *lw, int node);

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
