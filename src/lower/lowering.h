/* What an op's lowering rule (its table entry's `lower`) may do: read the layout of its node and inputs,
 * take materialized or partial input buffers, emit kernel steps and collectives. lower.c implements these;
 * the op files under ops/ call them. Pure: no MPI. */
#ifndef MTF_LOWER_LOWERING_H
#define MTF_LOWER_LOWERING_H

#include "lower/plan.h"

typedef struct mtf_lowering mtf_lowering;

const mtf_graph *mtf_lowering_graph(const mtf_lowering *lw);
mtf_plan *mtf_lowering_plan(mtf_lowering *lw);
/* This rank's slice shape of a node. */
mtf_shape mtf_lowering_local_shape(const mtf_lowering *lw, int node);
/* The dtype the plan stores node's value in: its own, or bfloat16 for a float32 value the plan keeps so
 * (mtf_plan_options.bf16_storage; then node's op has bf16_output set and every reader reads bfloat16). Kernel
 * steps reading node's value give this as their in_dtype. */
mtf_dtype mtf_lowering_dtype(const mtf_lowering *lw, int node);
/* The mesh axis splitting dimension `dim` of node, or -1. */
int mtf_lowering_split_axis(const mtf_lowering *lw, int node, const char *dim);
/* Axes over which node's current buffer holds partial sums (0: a materialized value). */
mtf_axis_set mtf_lowering_pending(const mtf_lowering *lw, int node);

/* Sources: the node's value lives in variable or input storage. */
int mtf_lower_source(mtf_lowering *lw, int node);
/* The node's value is its first input's buffer (same bytes). */
int mtf_lower_alias(mtf_lowering *lw, int node);
/* One kernel step on local slices of materialized inputs; with keep_partial, inputs may stay partial sums
 * and the output is partial over their (common) axes. */
int mtf_lower_local(mtf_lowering *lw, int node, int keep_partial);
/* mtf_lower_local writing over input k's buffer where input k is a variable the plan assigns node's value to and
 * nothing after node reads its old value (an optimizer update: no copy into the variable, no buffer of its own).
 * The kernel must be elementwise in input k (out[i] from in_k[i] alone). */
int mtf_lower_local_in_place(mtf_lowering *lw, int node, int k);
/* A reduction over the input dims the output lacks: a split summed dim leaves partial sums over its axis
 * (returned in *reduced; inputs split along an axis that also splits the output are gathered first). */
int mtf_lower_reduction(mtf_lowering *lw, int node, mtf_axis_set *reduced);
/* Sums or maxes node's buffer over `axes` in place now. */
int mtf_lower_allreduce(mtf_lowering *lw, int node, mtf_axis_set axes, mtf_reduce_op op);
/* Marks node's buffer as partial sums over `axes` (summed when a consumer needs the total). */
void mtf_lower_set_pending(mtf_lowering *lw, int node, mtf_axis_set axes);
/* Reshape / rename: the input resharded to the output's layout (reshard.c). A rename keeps dim i as dim i;
 * a reshape carries each split over to the new dim that starts at the same flat offset (no data moves)
 * and gathers the splits it cannot carry, then reshards. */
int mtf_lower_reshape(mtf_lowering *lw, int node);

/* The resharding step (reshard.c): `buffer` holds this rank's slice of a tensor laid out as `from`, with
 * partial sums over `pending` (axes that split none of its dims); *out gets a buffer of the same values
 * laid out as `to` (the same dim sizes in order; names may differ, as in a rename) and summed. For each
 * mesh axis, by what its split does: stays (nothing), appears on data replicated along it (a local
 * slice), moves to another dim (one alltoall over the axis), holds pending sums that `to` splits a dim
 * on (one reduce-scatter), holds pending sums `to` does not split on (allreduce), must go (allgather).
 * Slices and reduce-scatters run before the collectives that keep or grow the data; a split whose new
 * dim is still held by another axis waits for it to move (a cycle is gathered). Every collective is
 * counted in the plan's statistics. *out may be `buffer` itself when nothing moves. */
int mtf_lower_reshard(mtf_lowering *lw, int node, int buffer, const mtf_tensor_layout *from, mtf_axis_set pending,
                      const mtf_tensor_layout *to, int *out);
/* Node's input k resharded to `want` (a layout of the input's shape), with its local shape. */
int mtf_lower_input_as(mtf_lowering *lw, int node, int k, const mtf_tensor_layout *want, int *buffer,
                       mtf_shape *local);

/* For fused ops with phases: a kernel step of node's op in `phase` over explicit buffers. Input buffers
 * (-1 terminated or n_in long) with their local shapes; a new arena buffer of out_shape is returned in
 * *out. The step's offsets/params come from node. */
int mtf_lower_phase(mtf_lowering *lw, int node, mtf_phase phase, int n_in, const int *in, const mtf_shape *in_shapes,
                    const mtf_dtype *in_dtypes, const mtf_shape *out_shape, int *out);
/* The same, writing a buffer of out_dtype (an op whose output is int32: top-k indices, argmax). */
int mtf_lower_phase_typed(mtf_lowering *lw, int node, mtf_phase phase, int n_in, const int *in,
                          const mtf_shape *in_shapes, const mtf_dtype *in_dtypes, const mtf_shape *out_shape,
                          mtf_dtype out_dtype, int *out);
/* An allreduce over `axes` of an arbitrary buffer (a statistics buffer of a fused op). */
int mtf_lower_allreduce_buffer(mtf_lowering *lw, int node, int buffer, const mtf_shape *shape, mtf_axis_set axes,
                               mtf_reduce_op op);
/* The materialized buffer of node's input k (allreduced first if it held partial sums). */
int mtf_lower_input(mtf_lowering *lw, int node, int k, int *buffer, mtf_shape *local);
/* Makes `buffer` node's value. */
void mtf_lower_set_value(mtf_lowering *lw, int node, int buffer);
/* For an op that updates its input 0 (write_at), called right after the node's one kernel step: where input
 * 0 is a variable this plan assigns exactly node's value and nothing else reads, the step writes into the
 * variable's storage instead (the kernel sees out == in[0]) and the assign copies nothing. 1 if it did. */
int mtf_lower_into_assigned_variable(mtf_lowering *lw, int node);

/* Node's kernel steps draw their random numbers over input 0's dims (which their output may lack): their
 * offsets and global dims become input 0's, with mtf_step.extent_of_input0 set. */
void mtf_lower_extent_of_input0(mtf_lowering *lw, int node);

/* For kernels that need some dims whole (fused attention's positions and features): node's input k,
 * materialized and allgathered along each dim named in `dims` that its layout splits (no step where none
 * is split), with its shape. */
int mtf_lower_input_whole(mtf_lowering *lw, int node, int k, int n_dims, const char *const *dims, int *buffer,
                          mtf_shape *shape);
/* Node's local shape with the dims named in `dims` at their full size. */
mtf_shape mtf_lowering_shape_whole(const mtf_lowering *lw, int node, int n_dims, const char *const *dims);
/* Makes `buffer`, node's value at mtf_lowering_shape_whole's shape, node's value: sliced to node's layout
 * where that shape is whole along a split dim, used as it is otherwise. */
int mtf_lower_set_value_sliced(mtf_lowering *lw, int node, int buffer, const mtf_shape *shape);

#endif
