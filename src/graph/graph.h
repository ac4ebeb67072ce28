/* The logical graph: one node per tensor, each made by one op of the op table (ops/op_def.h). Nodes are
 * appended in topological order. No ranks here: how a node is sliced and communicated is the business of
 * lowering, driven by its op's table entry. */
#ifndef MTF_GRAPH_GRAPH_H
#define MTF_GRAPH_GRAPH_H

#include "core/rng.h"
#include "mtf.h"

#define MTF_MAX_OP_INPUTS 7 /* attention_grad: q, k, v, bias, segments, its forward value and its gradient */

typedef enum mtf_op_kind {
  MTF_OP_INPUT,
  MTF_OP_VARIABLE,
  MTF_OP_CONSTANT,      /* scalar value broadcast over the shape */
  MTF_OP_RANGE,         /* 0..n-1 along its one dim */
  MTF_OP_EINSUM,        /* 1 or 2 inputs; sums every input dim absent from the output */
  MTF_OP_BROADCAST,     /* copies along output dims the input lacks */
  MTF_OP_REDUCE_MAX,    /* max over input dims absent from the output */
  MTF_OP_BINARY,        /* elementwise with broadcasting by name */
  MTF_OP_UNARY,
  MTF_OP_ONE_HOT,       /* integer indices; output gains dimension params.along.dim */
  MTF_OP_RANDOM_KEEP,   /* 1 with probability keep, else 0; counter-based on global index */
  MTF_OP_RESHAPE,       /* same elements, new shape (rename is a reshape) */
  MTF_OP_STOP_GRADIENT,
  MTF_OP_SOFTMAX,       /* fused: exp(x - logsumexp(x)) over params.along.dim */
  MTF_OP_LOG_SOFTMAX,   /* fused: x - logsumexp(x) */
  MTF_OP_LAYER_NORM,    /* fused: (x - mean) * rsqrt(var + epsilon) over params.norm.dim */
  MTF_OP_RMS_NORM,      /* fused: x * rsqrt(mean(x^2) + epsilon) */
  MTF_OP_SOFTMAX_XENT,  /* fused: logsumexp - logits[label] + z_loss * logsumexp^2, labels integer */
  MTF_OP_MASKED_FILL,   /* x where mask != 0, else params.fill.value */
  MTF_OP_GATHER,        /* table rows by integer ids over params.along.dim (the embedding lookup) */
  MTF_OP_SCATTER_ADD,   /* the gather's gradient: out[id] += rows */
  /* Fused gradients (ops/fused_grad.c): the backward of the fused ops in one or two passes. */
  MTF_OP_SOFTMAX_GRAD,      /* y * (dy - sum(dy * y)) over params.along.dim; inputs y (softmax), dy */
  MTF_OP_LOG_SOFTMAX_GRAD,  /* dy - exp(y) * sum(dy); inputs y (log-softmax), dy */
  MTF_OP_LAYER_NORM_GRAD,   /* d x of layer_norm (params.norm); inputs x, dy */
  MTF_OP_RMS_NORM_GRAD,     /* d x of rms_norm; inputs x, dy */
  MTF_OP_SOFTMAX_XENT_GRAD, /* d logits of softmax_cross_entropy (params.xent); inputs logits, labels, dy */
  MTF_OP_GELU_GRAD,         /* dy * gelu'(x); inputs x, dy */
  MTF_OP_ATTENTION,     /* fused causal attention (ops/attention.c): [_attn:2, q dims] = o, logsumexp per row */
  MTF_OP_ATTENTION_GRAD,/* its backward in one pass: [_attn_grad:3, q dims] = dq, dk, dv */
  MTF_OP_ATTENTION_BIAS_GRAD, /* the gradient of its additive bias, at the bias's shape */
  MTF_OP_TAKE,          /* the slice at params.take.index of params.take.dim, without that dim */
  MTF_OP_MOVING_AVERAGE, /* optimizer: d * old + (1 - d) * (x^power + add); no gradient (ops/optimizer_ops.c) */
  MTF_OP_ADAM_UPDATE,   /* optimizer: AdamW's new variable from (w, m, v, lr, step); no gradient */
  MTF_OP_ADAFACTOR_UPDATE,  /* optimizer: w - step_size g a b from (w, g, step_size, a[, b]), a b broadcast */
  MTF_OP_ADAFACTOR_SQUARES, /* optimizer: sum of (g a b)^2 from (g, a[, b]): the update's RMS for clipping */
  /* Selection (ops/select.c): MoE routing and sampling. */
  MTF_OP_TOP_K,         /* the k largest along params.top_k.dim, in decreasing order over params.top_k.k_dim */
  MTF_OP_TOP_K_INDICES, /* their int32 positions; argmax when params.top_k.k_dim is "" (dim removed) */
  MTF_OP_CUMSUM,        /* running sum along params.scan.dim (exclusive, reverse: params.scan) */
  MTF_OP_WHERE,         /* inputs cond, a, b: a where cond != 0, else b (broadcast by name) */
  MTF_OP_TO_FLOAT,      /* int32 -> float */
  MTF_OP_WRITE_AT,      /* inputs x, value, positions: x with each row's value at its position along params.along.dim */
  MTF_OP_CAST,          /* float32 <-> bfloat16 (params.cast.to; ops/cast.c) */
  MTF_OP_COUNT
} mtf_op_kind;

typedef enum mtf_binary_kind {
  MTF_BIN_ADD, MTF_BIN_SUB, MTF_BIN_MUL, MTF_BIN_DIV, MTF_BIN_EQUAL, MTF_BIN_LESS_EQUAL,
  MTF_BIN_GREATER, MTF_BIN_LESS, MTF_BIN_MAXIMUM, MTF_BIN_MINIMUM /* ops/select.c's builders */
} mtf_binary_kind;

typedef enum mtf_unary_kind {
  MTF_UN_AFFINE, /* a*x + b */
  MTF_UN_EXP, MTF_UN_LOG, MTF_UN_RSQRT, MTF_UN_SQRT, MTF_UN_SQUARE, MTF_UN_TANH, MTF_UN_SIGMOID,
  MTF_UN_RELU, MTF_UN_GELU,
  MTF_UN_STEP,      /* 1 where x > 0 (relu's derivative) */
  MTF_UN_GELU_GRAD, /* d gelu / dx */
  MTF_UN_SWISH,      /* x sigmoid(x) (SiLU): one op, so its sigmoid is not kept for the backward pass */
  MTF_UN_SWISH_GRAD, /* d swish / dx = s (1 + x (1 - s)), s = sigmoid(x) */
  MTF_UN_SIN, MTF_UN_COS, /* rotary position angles (model/position.c) */
} mtf_unary_kind;

/* Typed parameters of a node, by op; a plan step carries a copy, so kernels never read the graph. */
typedef union mtf_op_params {
  struct { mtf_init init; float scale; int transient; } variable; /* transient: not model state (mtf.h) */
  struct { float value; } constant;
  struct { mtf_unary_kind fn; float alpha, beta; } unary;
  struct { mtf_binary_kind fn; } binary;
  struct { float keep; uint64_t key; } random;
  /* softmax, log_softmax, one_hot, gather, scatter_add: the named dimension the op works along */
  struct { char dim[MTF_NAME_MAX]; } along;
  struct { char dim[MTF_NAME_MAX]; float epsilon; } norm;
  /* label_smoothing eps: (1-eps) xent + eps mean over dim of -log_softmax; vocab: the dim's global size
   * (set by the shape rule, so the kernels of a split dim know it) */
  struct { char dim[MTF_NAME_MAX]; float z_loss; float label_smoothing; int64_t vocab; } xent;
  struct { float value; } fill;
  /* attention: query positions along dim, key/value positions along memory, features along depth; the
   * weights kept with probability keep (1: no dropout) by the random_keep mask of `key`; bf16: built under
   * the bf16 matmul policy, so a backend may multiply bfloat16-rounded q, k, v and weights (fp32 accumulation,
   * fp32 softmax and statistics); bias, segments: the op has those optional inputs (ops/attention.h); causal:
   * memory positions <= the query's only */
  struct {
    char dim[MTF_NAME_MAX], memory[MTF_NAME_MAX], depth[MTF_NAME_MAX];
    float scale, keep;
    uint64_t key;
    int bf16, bias, segments, causal;
  } attention;
  struct { char dim[MTF_NAME_MAX]; int index; } take;
  /* moving_average: decay `beta` unless a third (scalar) input gives it; power 1 or 2 */
  struct { float beta, add; int power; } moment;
  struct { float beta1, beta2, epsilon, weight_decay; } adam;
  /* top_k, top_k_indices: k entries along dim, over the new dim k_dim ("" for argmax: dim removed, k 1) */
  struct { char dim[MTF_NAME_MAX], k_dim[MTF_NAME_MAX]; int k; } top_k;
  /* cumsum: out[i] = sum of x[j] for j <= i (exclusive: j < i; reverse: j >= i, or j > i) along dim */
  struct { char dim[MTF_NAME_MAX]; int exclusive, reverse; } scan;
  struct { mtf_dtype to; } cast;
} mtf_op_params;

typedef struct mtf_node {
  mtf_op_kind kind;
  mtf_dtype dtype;
  mtf_shape shape;
  char name[64];
  int n_inputs;
  int inputs[MTF_MAX_OP_INPUTS];
  mtf_op_params params;
  int block; /* recompute block (mtf_recompute_begin), 0 = none */
  /* Built under the bf16 matmul policy, or part of the gradient of such a node: the plan may then store it,
   * or read it, as bfloat16 where the op's kernels can (lower/storage.c). */
  int bf16_policy;
} mtf_node;

typedef struct mtf_assign_pair {
  int variable, value;
} mtf_assign_pair;

struct mtf_graph {
  uint64_t seed;
  mtf_node *nodes;
  int n_nodes, cap_nodes;
  mtf_assign_pair *assigns;
  int n_assigns, cap_assigns;
  int *variables; /* node ids of the variables, in creation order */
  int n_variables, cap_variables;
  int *variable_index; /* open-addressing hash of variable names -> node id (-1 empty), cap_index slots */
  int cap_index;
  int n_blocks, current_block; /* recompute blocks made so far; the open one (0 = none) */
  mtf_dtype matmul_dtype;      /* operands of two-operand einsums (mtf_graph_set_matmul_dtype); 0 = float32 */
  int policy_sums;             /* nodes built now are the bf16 policy's, float32 operands (mtf_graph_set_policy_sums) */
  mtf_error error; /* first builder error, sticky */
};

/* Adds a node of `kind` with these inputs and parameters. `shape` is the output shape where the caller
 * states it (einsum, reductions, broadcast, reshape, sources) or NULL where the op's shape rule infers it.
 * The op's table entry validates it. Returns the new id, or MTF_NO_TENSOR (the graph keeps the error). */
int mtf_graph_add_op(mtf_graph *g, mtf_op_kind kind, int n_inputs, const int *inputs, const mtf_op_params *params,
                     const mtf_shape *shape);
/* Records the first error; returns MTF_NO_TENSOR for use in `return`. */
int mtf_graph_fail(mtf_graph *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Validates a tensor id; fails the graph (mentioning `op`) when it is not one. */
int mtf_graph_check(mtf_graph *g, mtf_tensor t, const char *op);

mtf_tensor mtf_unary(mtf_graph *g, mtf_tensor x, mtf_unary_kind kind, float a, float b);
mtf_tensor mtf_binary(mtf_graph *g, mtf_tensor x, mtf_tensor y, mtf_binary_kind kind);
mtf_tensor mtf_random_keep(mtf_graph *g, const mtf_shape *shape, float keep, uint64_t key);
/* The gradient of a gather: a tensor of table_shape with rows of `rows` added at `ids` along dim. */
mtf_tensor mtf_scatter_add(mtf_graph *g, mtf_tensor rows, mtf_tensor ids, const mtf_shape *table_shape,
                           const char *dim);

/* The fused gradient ops (ops/fused_grad.c); dy has the shape of the forward op's output. */
mtf_tensor mtf_softmax_grad(mtf_graph *g, mtf_tensor y, mtf_tensor dy, const char *dim);
mtf_tensor mtf_log_softmax_grad(mtf_graph *g, mtf_tensor y, mtf_tensor dy, const char *dim);
mtf_tensor mtf_norm_grad(mtf_graph *g, mtf_op_kind forward, mtf_tensor x, mtf_tensor dy, const char *dim, float epsilon);
mtf_tensor mtf_softmax_xent_grad(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, mtf_tensor dy, const char *dim,
                                 float z_loss);
mtf_tensor mtf_softmax_xent_smoothed_grad(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, mtf_tensor dy,
                                          const char *dim, float z_loss, float label_smoothing);
mtf_tensor mtf_gelu_grad(mtf_graph *g, mtf_tensor x, mtf_tensor dy);
/* x's slice at `index` along `dim`, without that dim (ops/attention.c: unstacks attention's outputs). */
mtf_tensor mtf_take(mtf_graph *g, mtf_tensor x, const char *dim, int index);

/* A running sum along dim from the far end (reverse: out[i] = sum_{j >= i} x[j], exclusive: j > i):
 * the gradient of mtf_cumsum (ops/select.c). */
mtf_tensor mtf_cumsum_reverse(mtf_graph *g, mtf_tensor x, const char *dim, int exclusive);

/* The cast of x to `to`, reusing one already made in the current recompute block (ops/cast.c). */
mtf_tensor mtf_cast_shared(mtf_graph *g, mtf_tensor x, mtf_dtype to);

/* Initial value of element `index` of a variable node. */
float mtf_variable_value(const mtf_graph *g, const mtf_node *var, int64_t index);

#endif
