/* The per-rank plan: a flat list of steps over buffers. Lowering (lower.c, driven by each op's table
 * entry) builds it from the graph, the mesh, the layout and one mesh coordinate, with no MPI; the memory
 * planner (memory.c) gives every arena buffer an offset; the executor (exec/) runs the steps in order.
 * A step carries everything its kernel needs (op, parameters, local shapes, offsets), so the executor
 * never reads the graph. */
#ifndef MTF_LOWER_PLAN_H
#define MTF_LOWER_PLAN_H

#include "graph/graph.h"

typedef enum mtf_buffer_kind { MTF_BUF_ARENA, MTF_BUF_VARIABLE, MTF_BUF_INPUT } mtf_buffer_kind;

typedef struct mtf_buffer {
  mtf_buffer_kind kind;
  mtf_dtype dtype;
  int64_t elements;
  int64_t offset;  /* arena: offset in arena words (MTF_ARENA_WORD bytes) from the memory planner; variable/
                    * input: index of its storage */
  int first_step;  /* writes start here */
  int last_step;   /* last reader; INT_MAX when it must survive the run (fetches) */
  int node;        /* graph node whose value it holds (for messages) */
  /* 1 + the index of the gradient bucket whose range holds this buffer (0: none). Such a buffer is not
   * placed by the memory planner: it lies at bucket_offset elements into its bucket's range buffer. */
  int bucket;
  int64_t bucket_offset;
} mtf_buffer;

typedef enum mtf_step_kind {
  MTF_STEP_KERNEL,    /* op `op` (phase `phase`) on local slices, through the backend's kernel table */
  MTF_STEP_ALLREDUCE, /* in place over `axes` with `reduce_op` */
  MTF_STEP_ALLGATHER, /* in (shape in_shape[0]) -> out, concatenated along tensor axis `tensor_axis` */
  MTF_STEP_SLICE,     /* out = in[offsets ...] with out_shape */
  MTF_STEP_COPY,      /* out = in (assign to a variable) */
  /* A bucket's non-blocking allreduce (lower/buckets.c): START begins the sum over `axes` of the range
   * buffer `out` in place and returns; WAIT blocks until it is done. Nothing between them touches the
   * range. Backend-neutral: the executor runs them through the communicator's requests. */
  MTF_STEP_ALLREDUCE_START,
  MTF_STEP_ALLREDUCE_WAIT,
  /* Resharding (reshard.c). ALLTOALL: in (in_shape[0]) is cut into group-size slices along `tensor_axis`,
   * slice p goes to member p, and what arrives is concatenated along `concat_axis` in member order.
   * REDUCE_SCATTER: partial sums in in are summed over `axes` and member p keeps slice p along
   * `tensor_axis`. `scratch` (when >= 0) holds the blocks in member order for the packing. */
  MTF_STEP_ALLTOALL,
  MTF_STEP_REDUCE_SCATTER,
} mtf_step_kind;

/* Phases of a fused op whose reduced dimension is split: local statistics, then (after lowering's
 * allreduce of them) the result. MTF_PHASE_WHOLE does everything in one kernel. */
typedef enum mtf_phase {
  MTF_PHASE_WHOLE = 0,
  MTF_PHASE_MAX,   /* per-row max over the dim (softmax, xent) */
  MTF_PHASE_SUM,   /* per-row sum over the dim (layer norm: for the mean) */
  MTF_PHASE_STATS, /* per-row sums given the first statistic (softmax: sum exp; xent: sum exp and the target
                    * logit; layer norm: sum of squares about the mean; RMS norm: sum of squares) */
  MTF_PHASE_APPLY, /* the result from the input and the allreduced statistics */
} mtf_phase;

typedef struct mtf_step {
  mtf_step_kind kind;
  mtf_op_kind op;
  mtf_phase phase;
  int node;                            /* for messages */
  int out, in[MTF_MAX_OP_INPUTS], n_in;
  int scratch;                         /* arena buffer for the kernel's temporaries, or -1 */
  mtf_dtype out_dtype, in_dtype[MTF_MAX_OP_INPUTS];
  mtf_shape out_shape, in_shape[MTF_MAX_OP_INPUTS]; /* local shapes */
  int64_t offsets[MTF_MAX_RANK];       /* slice: start per dim; kernels: global offset of out's slice */
  int64_t global_dims[MTF_MAX_RANK];   /* the node's whole shape (random numbers, norms' counts) */
  /* offsets and global_dims follow input 0's dims instead of out_shape's (mtf_lower_extent_of_input0: an op
   * drawing random numbers over dims its output lacks; mtf_random_extent_shape) */
  int extent_of_input0;
  int64_t dim_offset;                  /* global offset of the local part of the op's named dim */
  mtf_op_params params;
  uint64_t seed;                       /* the graph's seed (random ops) */
  mtf_axis_set axes;
  mtf_reduce_op reduce_op;
  int tensor_axis;
  int concat_axis;                     /* ALLTOALL: the tensor axis the arriving slices are concatenated on */
  int bucket;                          /* START / WAIT: index into the plan's buckets */
  /* bfloat16 weight copies (weight_copies.c): a weight's cast, skipped while the copy its last writer wrote
   * in an earlier run is current; the weight's last writer (a kernel or COPY step), whose output rounded also
   * goes into buffer bf16_copy - 1 (0: none): written by an adam_update kernel itself, after any other step
   * by the executor. */
  int skip_when_copy_current, bf16_copy;
  /* The node was built under the bf16 matmul policy (mtf_node.bf16_policy): its kernels may sum in another
   * order than the fp32 reference path's (lanes instead of one running double), which fp32 runs never see. */
  int bf16_policy;
  /* lower/fuse_moments.c (mtf_plan_options.fuse_optimizer): an adam_update that also runs its two slots' moving
   * averages in the same pass: m and v (its inputs 1 and 2, the slots' own buffers) updated in place from the
   * gradient in buffer moments_grad with keep/add of m and of v, before the update reads them; the moving
   * averages' own steps are then marked `fused` and the executor skips them. */
  int fused_moments, moments_grad, fused;
  float moments_keep[2], moments_add[2];
  /* fuse_moments.c (mtf_plan_options.fuse_grad_norm): a fused adam_update that also writes the sum of squares of
   * its gradient (the bf16 policy's dot, exec/cpu/rowops.h) into buffer squares_out - 1 (0: none), the output of
   * a later einsum step then marked `fused`. */
  int squares_out;
  /* fuse_xent.c (mtf_plan_options.xent_grad_from_loss): a cross-entropy gradient's buffer + 1 of the forward's
   * per-row loss (0: none), from which its kernel takes each row's logsumexp. */
  int xent_loss;
  /* fuse_xent.c's merge: the gradient computes the loss into buffer xent_loss - 1 itself (the forward step is
   * then `fused`), rather than reading it. */
  int xent_writes_loss;
  /* fuse_add.c (mtf_plan_options.fuse_product_add): an einsum that adds its result into what its output buffer
   * holds (the other term of a skipped add) instead of overwriting it. */
  int accumulate;
  /* fuse_scatter.c (mtf_plan_options.fuse_scatter_add): a scatter_add's buffer + 1 of the term it adds its rows
   * into (0: none; into zeros), written to the step's output first unless it is that buffer. */
  int scatter_base;
} mtf_step;

/* Gradient allreduces reduced together as one non-blocking collective over a contiguous range. */
typedef struct mtf_bucket {
  int buffer;            /* the arena buffer spanning the members, one after another */
  int staging;           /* MTF_BF16 on the wire: its bfloat16 copy, alive from START to WAIT (else -1); the
                          * START and WAIT steps carry it as their scratch */
  mtf_axis_set axes;
  int n_members;
  int64_t elements;
  int start_step, wait_step;
} mtf_bucket;

struct mtf_plan {
  const mtf_graph *graph;
  mtf_shape mesh;
  int mesh_rank;
  int coord[MTF_MAX_MESH_AXES];
  mtf_tensor_layout *layouts; /* per node (valid where needed[node]) */
  char *needed;
  int *value_buffer;          /* per node: buffer holding its materialized local slice, or -1 */
  mtf_step *steps;
  int n_steps, cap_steps;
  mtf_buffer *buffers;
  int n_buffers, cap_buffers;
  int64_t arena_elements;
  int n_variables, n_inputs;  /* storage slots */
  int *fetch_nodes;
  int n_fetches;
  mtf_bucket *buckets;
  int n_buckets;
  mtf_plan_stats stats;
};

/* The arena is laid out in 4-byte words (float32 and int32 take one, a bfloat16 buffer half as many, rounded
 * up), so every buffer starts 4-byte aligned. */
#define MTF_ARENA_WORD 4
static inline int64_t mtf_buffer_words(const mtf_buffer *b) {
  return (b->elements * (int64_t)mtf_dtype_size(b->dtype) + MTF_ARENA_WORD - 1) / MTF_ARENA_WORD;
}

/* memory.c: assigns arena offsets by liveness; returns the arena size in elements. Buffers inside a bucket
 * get their bucket range's offset plus their own bucket_offset. Every other buffer's offset (and the space it
 * takes) is a multiple of align_words arena words. */
int64_t mtf_plan_assign_memory(mtf_plan *plan, int64_t align_words);

/* buckets.c: after lowering, before memory planning: groups the plan's gradient allreduces into buckets of
 * at most bucket_bytes (a larger gradient gets a bucket of its own), each reduced by one START/WAIT pair
 * that replaces the members' blocking allreduces. 0 leaves the plan as it is. */
int mtf_plan_bucket_allreduces(mtf_plan *plan, int64_t bucket_bytes, mtf_dtype wire, mtf_error *err);

/* The buffer holding node t's value on this rank, or -1 (not a node of the graph, or not materialized). */
static inline int mtf_plan_value_buffer(const mtf_plan *p, int t) {
  return t >= 0 && t < p->graph->n_nodes ? p->value_buffer[t] : -1;
}

/* initial_values.c: a variable's initial slice on plan's rank, on the host (mtf_plan_slice_elements floats):
 * each element from its global index, so every layout and backend starts from the same values. */
void mtf_plan_initial_slice(const mtf_plan *p, int node, float *data);
/* The same rank's slice of node's whole host tensor (row-major, elements of elem_size bytes) into slice (as many
 * elements as the slice has): how a whole input or variable from the caller reaches each rank. */
void mtf_plan_slice_of_whole(const mtf_plan *p, int node, const void *whole, void *slice, size_t elem_size);

#endif
