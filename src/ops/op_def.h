/* The op table: everything the engine knows about an op kind is in its one entry here. Adding an op is
 * one entry (in one of the files of this folder) plus one kernel per backend (exec/<backend>/).
 *
 *   infer      validates the inputs and parameters; sets the node's shape (where the builder did not state
 *              it) and dtype. Runs when the node is added.
 *   gradient   adds d loss / d input for each input that needs it, built from other ops (so the backward
 *              pass lowers and communicates by the same rules).
 *   lower      the lowering rule: which kernel steps and collectives the node's layout implies.
 *   flops      floating-point operations of one kernel step (the plan's FLOP count, MFU).
 *   scratch    elements of arena scratch one kernel step needs (0 when NULL).
 *   reference  the double-precision value on whole tensors, for tests and the conformance test (or on a
 *              step's local slices: mtf_ref_args.random_*).
 *   takes_bf16 1 for the ops given bfloat16 tensors (cast, einsum of two, and the aliasing reshape and
 *              stop_gradient); mtf_graph_add_op refuses bfloat16 inputs to every other op.
 *   reads_bf16, bf16_output  where a plan stores float32 activations as bfloat16 (mtf_plan_options'
 *              bf16_storage, lower/storage.c): whether the node's kernels also read input k as bfloat16 (step
 *              in_dtype; NULL: no input), for the inputs where that costs nothing a bf16 product would not
 *              (attention's q, k, v, the logits, an activation function's argument, never a sine's angle),
 *              and whether the kernels also write the value as bfloat16 (step out_dtype), with fp32 math
 *              either way. Every backend that enables bf16_storage implements them.
 *   overwrites_input  1 where every backend's kernel stays right when its output is its input 0's buffer (each
 *              element read before it is written): the plan then writes the value over input 0 where that is
 *              the input's last read (lower/overwrite.c). */
#ifndef MTF_OPS_OP_DEF_H
#define MTF_OPS_OP_DEF_H

#include "graph/graph.h"
#include "lower/lowering.h"

typedef struct mtf_grad_ctx {
  mtf_graph *g;
  int *grad;           /* per node: accumulated gradient tensor or MTF_NO_TENSOR */
  const char *depends; /* per node: depends on a tensor we differentiate with respect to */
} mtf_grad_ctx;

/* Adds `contribution` (summed down to the target's shape) to the gradient of `target`. */
void mtf_grad_accumulate(mtf_grad_ctx *ctx, int target, mtf_tensor contribution);
/* Whether input k of node needs a gradient. */
int mtf_grad_wanted(const mtf_grad_ctx *ctx, const mtf_node *node, int k);

typedef struct mtf_ref_args {
  const mtf_graph *g;
  int node;
  const mtf_node *n;
  const double *in[MTF_MAX_OP_INPUTS];
  const mtf_shape *in_shape[MTF_MAX_OP_INPUTS];
  double *out;
  const double *given; /* inputs: the value supplied; variables: an override, or NULL for the initial value */
  /* NULL: the tensors are whole. On a slice (a backend whose kernels are these references on a step's local
   * slices, tests/ref64/ref_backend.c): the local shape whose indices number a random op's draws, with each of
   * its dims' global offset and global size (mtf_random_extent: random_keep's output, attention's), so that a
   * slice draws what the whole tensor draws there. */
  const mtf_shape *random_shape;
  const int64_t *random_offsets, *random_dims;
} mtf_ref_args;

/* Where the dimension named by params.along.dim lives: its local offset reaches the kernel as
 * step.dim_offset (a split vocabulary: each rank knows which ids are its own). */
typedef enum mtf_named_dim { MTF_DIM_NONE, MTF_DIM_IN_INPUT, MTF_DIM_IN_OUTPUT } mtf_named_dim;

typedef struct mtf_op_def {
  const char *name;
  mtf_named_dim named_dim;
  int (*infer)(mtf_graph *g, mtf_node *n);
  void (*gradient)(mtf_grad_ctx *ctx, int node, mtf_tensor dy);
  int (*lower)(mtf_lowering *lw, int node);
  int64_t (*flops)(const mtf_step *s);
  int64_t (*scratch)(const mtf_step *s);
  void (*reference)(const mtf_ref_args *a);
  int takes_bf16;
  int (*reads_bf16)(const mtf_node *n, int k);
  int bf16_output;
  int overwrites_input; /* the kernels may write the value over input 0 (same size and dtype, read by nothing after) */
} mtf_op_def;

/* reads_bf16 of the ops that read their first input so (the logits, gelu's argument). */
int mtf_op_reads_first_bf16(const mtf_node *n, int k);

/* The entry of an op kind (kind < MTF_OP_COUNT). */
const mtf_op_def *mtf_op(mtf_op_kind kind);

/* The table's parts, one per file of ops/. */
extern const mtf_op_def mtf_op_input, mtf_op_variable, mtf_op_constant, mtf_op_range, mtf_op_einsum,
    mtf_op_broadcast, mtf_op_reduce_max, mtf_op_binary, mtf_op_unary, mtf_op_one_hot, mtf_op_random_keep,
    mtf_op_reshape, mtf_op_stop_gradient, mtf_op_softmax, mtf_op_log_softmax, mtf_op_layer_norm, mtf_op_rms_norm,
    mtf_op_softmax_xent, mtf_op_masked_fill, mtf_op_gather, mtf_op_scatter_add;
/* The fused gradients (fused_grad.c). */
extern const mtf_op_def mtf_op_softmax_grad, mtf_op_log_softmax_grad, mtf_op_layer_norm_grad, mtf_op_rms_norm_grad,
    mtf_op_softmax_xent_grad, mtf_op_gelu_grad;
extern const mtf_op_def mtf_op_attention, mtf_op_attention_grad, mtf_op_attention_bias_grad,
    mtf_op_take; /* ops/attention.c */
extern const mtf_op_def mtf_op_adafactor_update, mtf_op_adafactor_squares; /* ops/optimizer_ops.c */
/* ops/optimizer_ops.c */
extern const mtf_op_def mtf_op_moving_average, mtf_op_adam_update;
/* ops/select.c */
extern const mtf_op_def mtf_op_top_k, mtf_op_top_k_indices, mtf_op_cumsum, mtf_op_where, mtf_op_to_float;
extern const mtf_op_def mtf_op_write_at; /* ops/write_at.c */
extern const mtf_op_def mtf_op_cast;     /* ops/cast.c */

/* ---- helpers shared by the op files ---- */
/* Checks every dim of `part` is in `whole` with the same size. */
int mtf_op_dims_within(mtf_graph *g, const mtf_shape *part, const mtf_shape *whole, const char *op, const char *what);
/* Union of two shapes by name (a's dims, then b's new ones); sizes must agree. */
int mtf_op_union_shape(mtf_graph *g, const mtf_shape *a, const mtf_shape *b, mtf_shape *out, const char *op);
/* Fails unless input k of n is an index tensor (int32, or float holding integers). */
int mtf_op_needs_dim(mtf_graph *g, const mtf_node *n, int k, const char *dim, const char *op);
int64_t mtf_op_flops_elements(const mtf_step *s);
/* Fails (naming the op and the tensor) unless inputs [first, last] of n are float tensors. */
int mtf_op_float_inputs(mtf_graph *g, const mtf_node *n, int first, int last);

/* Ops along one named dim (fused.c, fused_grad.c): s without dim (s itself if it lacks it), and a
 * [_stats: k, rows...] buffer of k per-row statistics reduced together in one allreduce. */
mtf_shape mtf_op_shape_without(const mtf_shape *s, const char *dim);
mtf_shape mtf_op_stats_shape(int k, const mtf_shape *rows);
/* Their references walk rows (every index of the other dims); element j of a row is at
 * mtf_ref_row_base(w, full) + j * w->stride. */
typedef struct mtf_ref_rows {
  mtf_shape rows;
  int64_t size, stride; /* of the dim in the full tensor */
  int64_t index[MTF_MAX_RANK];
} mtf_ref_rows;
void mtf_ref_rows_init(mtf_ref_rows *w, const mtf_shape *full, const char *dim);
int64_t mtf_ref_row_base(const mtf_ref_rows *w, const mtf_shape *full);

/* The double-precision value of a unary function (elementwise.c). */
double mtf_unary_reference(mtf_unary_kind fn, double a, double b, double x);

/* Reference helpers: multi-index walks with dims matched by name. */
int64_t mtf_ref_offset(const mtf_shape *walked, const int64_t *index, const mtf_shape *t);
int mtf_ref_next(const mtf_shape *s, int64_t *index);

#endif
