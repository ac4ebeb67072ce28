/* The logical graph: one node per tensor, each made by one primitive op. Composite ops (softmax,
 * norms, cross-entropy, gather, dropout, masks) are built from these primitives, so lowering and autodiff
 * only need to know the primitives. Nodes are appended in topological order. No ranks here. */
#ifndef MTF_GRAPH_GRAPH_H
#define MTF_GRAPH_GRAPH_H

#include "core/rng.h"
#include "mtf.h"

typedef enum mtf_op_kind {
  MTF_OP_INPUT,
  MTF_OP_VARIABLE,
  MTF_OP_CONSTANT,    /* scalar value broadcast over the shape */
  MTF_OP_RANGE,       /* 0..n-1 along its one dim */
  MTF_OP_EINSUM,      /* 1 or 2 inputs; sums every input dim absent from the output */
  MTF_OP_BROADCAST,   /* copies along output dims the input lacks */
  MTF_OP_REDUCE_MAX,  /* max over input dims absent from the output */
  MTF_OP_BINARY,      /* elementwise with broadcasting by name */
  MTF_OP_UNARY,
  MTF_OP_ONE_HOT,     /* input indices; output gains dims[param.axis_dim] */
  MTF_OP_RANDOM_KEEP, /* 1 with probability keep, else 0; counter-based on global index */
  MTF_OP_RESHAPE,     /* same elements, new shape (rename is a reshape) */
  MTF_OP_STOP_GRADIENT,
} mtf_op_kind;

typedef enum mtf_binary_kind {
  MTF_BIN_ADD, MTF_BIN_SUB, MTF_BIN_MUL, MTF_BIN_DIV, MTF_BIN_EQUAL, MTF_BIN_LESS_EQUAL
} mtf_binary_kind;

typedef enum mtf_unary_kind {
  MTF_UN_AFFINE, /* a*x + b */
  MTF_UN_EXP, MTF_UN_LOG, MTF_UN_RSQRT, MTF_UN_SQRT, MTF_UN_SQUARE, MTF_UN_TANH, MTF_UN_SIGMOID,
  MTF_UN_RELU, MTF_UN_GELU,
  MTF_UN_STEP,      /* 1 where x > 0 (relu's derivative) */
  MTF_UN_GELU_GRAD, /* d gelu / dx */
} mtf_unary_kind;

typedef struct mtf_node {
  mtf_op_kind kind;
  mtf_dtype dtype;
  mtf_shape shape;
  char name[64];
  int n_inputs;
  int inputs[2];
  int sub;         /* mtf_binary_kind / mtf_unary_kind */
  float a, b;      /* affine a*x+b; constant value (a); keep probability (a); init scale (a) */
  mtf_init init;
  uint64_t key;    /* random: dropout key */
  char dim_name[MTF_NAME_MAX]; /* one_hot: the new dim */
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
  mtf_error error; /* first builder error, sticky */
};

/* Appends a node (copying *node); returns its id, or MTF_NO_TENSOR when the graph already has an error. */
int mtf_graph_add(mtf_graph *g, const mtf_node *node);
/* Records the first error; returns MTF_NO_TENSOR for use in `return`. */
int mtf_graph_fail(mtf_graph *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Validates a tensor id; fails the graph (mentioning `op`) when it is not one. */
int mtf_graph_check(mtf_graph *g, mtf_tensor t, const char *op);

mtf_tensor mtf_unary(mtf_graph *g, mtf_tensor x, mtf_unary_kind kind, float a, float b);
mtf_tensor mtf_binary(mtf_graph *g, mtf_tensor x, mtf_tensor y, mtf_binary_kind kind);
mtf_tensor mtf_random_keep(mtf_graph *g, const mtf_shape *shape, float keep, uint64_t key);

/* Initial value of element `index` of a variable node. */
float mtf_variable_value(const mtf_graph *g, const mtf_node *var, int64_t index);

#endif
