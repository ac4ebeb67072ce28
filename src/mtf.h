/* libmtf — Mesh TensorFlow's model parallelism as a C library.
 *
 * Build a logical graph of tensors with named dimensions (no ranks anywhere), take gradients, then lower
 * it for a mesh, a layout and one mesh coordinate into a per-rank plan, and run that plan with a
 * communicator. Any valid layout computes the same numbers as one process.
 *
 *   mtf_graph *g = mtf_graph_create(seed);
 *   mtf_shape xs;  mtf_shape_parse("batch:64,d_in:32", "x", &xs, NULL);
 *   mtf_tensor x = mtf_input(g, "x", &xs);
 *   mtf_tensor w = mtf_variable(g, "w", &ws, MTF_INIT_NORMAL, 0.1f);
 *   mtf_tensor h = mtf_relu(g, mtf_einsum2(g, x, w, &hs));     // contracts d_in
 *   ...
 *   mtf_plan *plan;  mtf_plan_create(g, &mesh, &rules, rank, fetches, n, &plan, &err);   // pure
 *   mtf_session *s;  mtf_session_create(plan, comm, &s, &err);                          // MPI
 *   mtf_session_set_input(s, x, data, &err);  mtf_session_run(s, &err);
 *
 * Builder calls never fail loudly: the first error (a shape that does not fit, an unknown dimension)
 * is kept in the graph, later calls return MTF_NO_TENSOR, and mtf_graph_status() reports it. */
#ifndef MTF_H
#define MTF_H

#include <stddef.h>
#include <stdint.h>

#include "comm/agree.h"
#include "comm/world.h"
#include "comm/comm.h"
#include "comm/comm_mode.h"
#include "core/error.h"
#include "core/layout.h"
#include "core/mesh.h"
#include "core/shape.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mtf_graph mtf_graph;
typedef int mtf_tensor; /* a tensor of a graph; MTF_NO_TENSOR after an error */
#define MTF_NO_TENSOR (-1)

typedef enum mtf_init { MTF_INIT_ZEROS, MTF_INIT_ONES, MTF_INIT_NORMAL, MTF_INIT_UNIFORM } mtf_init;

/* ---- graph ---- */
mtf_graph *mtf_graph_create(uint64_t seed);
void mtf_graph_destroy(mtf_graph *g);
/* MTF_OK, or the first builder error (err gets its message). */
int mtf_graph_status(const mtf_graph *g, mtf_error *err);
const mtf_shape *mtf_tensor_shape(const mtf_graph *g, mtf_tensor t);
const char *mtf_tensor_name(const mtf_graph *g, mtf_tensor t);
/* The variable called name, or MTF_NO_TENSOR (lets a second forward pass reuse the first's variables). */
mtf_tensor mtf_find_variable(const mtf_graph *g, const char *name);
/* Gives a tensor a name used in messages and plans ("layer_000/attn/logits"). */
mtf_tensor mtf_set_name(mtf_graph *g, mtf_tensor t, const char *name);
/* Element type of a tensor: MTF_F32, or MTF_I32 for token ids, labels and indices. */
mtf_dtype mtf_tensor_dtype(const mtf_graph *g, mtf_tensor t);
/* The graph's variables in creation order: i in [0, mtf_graph_num_variables). */
int mtf_graph_num_variables(const mtf_graph *g);
mtf_tensor mtf_graph_variable(const mtf_graph *g, int i);
int mtf_tensor_is_variable(const mtf_graph *g, mtf_tensor t);

/* The distinct dimension names of the graph's tensors, in first-seen order: at most max of them into names
 * (pointers into the graph); returns how many. (The commands check layout rules against them before
 * lowering, which would ignore a rule naming none of them: src/cli/run_args.c.) */
int mtf_graph_dim_names(const mtf_graph *g, const char **names, int max);

/* ---- sources ---- */
mtf_tensor mtf_input(mtf_graph *g, const char *name, const mtf_shape *shape);
/* An int32 input (token ids, labels): set with mtf_session_set_input_int. */
mtf_tensor mtf_input_int(mtf_graph *g, const char *name, const mtf_shape *shape);
/* A trainable variable. Its value depends only on (graph seed, name, global element index): the same
 * on every mesh and layout. `scale` is the stddev (normal), half-width (uniform) or value (ones). */
mtf_tensor mtf_variable(mtf_graph *g, const char *name, const mtf_shape *shape, mtf_init init, float scale);
/* A zero-initialised variable that is not model state: it persists between runs (and is shared between
 * sessions) like any variable, but checkpoints leave it out. For values that are zero again at every step
 * boundary, such as gradient accumulators. */
mtf_tensor mtf_transient_variable(mtf_graph *g, const char *name, const mtf_shape *shape);
int mtf_variable_is_transient(const mtf_graph *g, mtf_tensor t);
mtf_tensor mtf_constant(mtf_graph *g, const mtf_shape *shape, float value);
/* Values 0..n-1 along dimension `dim` (shape [dim]). */
mtf_tensor mtf_range(mtf_graph *g, const mtf_dim *dim);

/* ---- einsum and reductions ---- */
/* Contracts every dimension that is in an input but not in output_shape; output dims by name. */
mtf_tensor mtf_einsum(mtf_graph *g, int n_inputs, const mtf_tensor *inputs, const mtf_shape *output_shape);
mtf_tensor mtf_einsum2(mtf_graph *g, mtf_tensor a, mtf_tensor b, const mtf_shape *output_shape);
mtf_tensor mtf_reduce_sum(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape);
mtf_tensor mtf_reduce_mean(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape);
mtf_tensor mtf_reduce_max(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape);
/* Sums / takes the max over one named dimension. */
mtf_tensor mtf_reduce_sum_dim(mtf_graph *g, mtf_tensor x, const char *dim);
mtf_tensor mtf_reduce_max_dim(mtf_graph *g, mtf_tensor x, const char *dim);
mtf_tensor mtf_logsumexp(mtf_graph *g, mtf_tensor x, const char *dim);
mtf_tensor mtf_broadcast(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape);

/* ---- elementwise (binary ops broadcast by dimension name; output dims: a's, then b's new ones) ---- */
mtf_tensor mtf_add(mtf_graph *g, mtf_tensor a, mtf_tensor b);
mtf_tensor mtf_subtract(mtf_graph *g, mtf_tensor a, mtf_tensor b);
mtf_tensor mtf_multiply(mtf_graph *g, mtf_tensor a, mtf_tensor b);
mtf_tensor mtf_divide(mtf_graph *g, mtf_tensor a, mtf_tensor b);
mtf_tensor mtf_equal(mtf_graph *g, mtf_tensor a, mtf_tensor b);      /* 1 where a == b, else 0 */
mtf_tensor mtf_less_equal(mtf_graph *g, mtf_tensor a, mtf_tensor b); /* 1 where a <= b, else 0 */
mtf_tensor mtf_scalar_add(mtf_graph *g, mtf_tensor x, float c);
mtf_tensor mtf_scalar_multiply(mtf_graph *g, mtf_tensor x, float c);
mtf_tensor mtf_exp(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_log(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_rsqrt(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_sqrt(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_square(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_tanh(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_sigmoid(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_relu(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_gelu(mtf_graph *g, mtf_tensor x); /* tanh approximation */
mtf_tensor mtf_swish(mtf_graph *g, mtf_tensor x); /* x * sigmoid(x) (SiLU) */
mtf_tensor mtf_sin(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_cos(mtf_graph *g, mtf_tensor x);
mtf_tensor mtf_stop_gradient(mtf_graph *g, mtf_tensor x);

/* ---- fused ops over a named dim (one kernel; phases with max/sum allreduces when the dim is split) and
 * composites ---- */
mtf_tensor mtf_softmax(mtf_graph *g, mtf_tensor x, const char *dim);
mtf_tensor mtf_log_softmax(mtf_graph *g, mtf_tensor x, const char *dim);
/* x / rms(x) * scale over `dim` (scale has shape [dim]). */
mtf_tensor mtf_rms_norm(mtf_graph *g, mtf_tensor x, const char *dim, mtf_tensor scale, float epsilon);
mtf_tensor mtf_layer_norm(mtf_graph *g, mtf_tensor x, const char *dim, mtf_tensor scale, mtf_tensor bias,
                          float epsilon);
/* indices are int32 (or floats holding integers); the result gains dimension `dim`. */
mtf_tensor mtf_one_hot(mtf_graph *g, mtf_tensor indices, const mtf_dim *dim);
/* Embedding lookup: table [..., vocab, ...] indexed by int32 ids over `vocab_dim` (a fused op: with a split
 * vocabulary each rank looks up its own id range, then one allreduce; ids outside the vocabulary give 0). */
mtf_tensor mtf_gather(mtf_graph *g, mtf_tensor table, mtf_tensor ids, const char *vocab_dim);
/* Per-position cross-entropy of logits over `vocab_dim` against int32 labels, plus z_loss * lse^2 (fused). */
mtf_tensor mtf_softmax_cross_entropy(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, const char *vocab_dim,
                                     float z_loss);
/* The same with label smoothing eps in [0, 1): (1-eps) (lse - logits[label]) + eps (lse - mean over vocab of
 * logits) + z_loss lse^2, i.e. the cross-entropy against (1-eps) one_hot(label) + eps / vocab (fused; with a
 * split vocabulary the sum of the logits joins the one stats allreduce). */
mtf_tensor mtf_softmax_cross_entropy_smoothed(mtf_graph *g, mtf_tensor logits, mtf_tensor labels,
                                              const char *vocab_dim, float z_loss, float label_smoothing);
/* x where mask is 1, `fill` where it is 0 (mask broadcasts by name). */
mtf_tensor mtf_masked_fill(mtf_graph *g, mtf_tensor x, mtf_tensor mask, float fill);
/* Keeps x[query_dim = i, memory_dim = j] for j <= i and fills the rest with -1e9. */
mtf_tensor mtf_causal_mask(mtf_graph *g, mtf_tensor x, const char *query_dim, const char *memory_dim);
/* Causal self-attention, fused: softmax over memory_dim of (q . k) * scale, keeping memory positions <= the
 * query position, then dropout (rate, key) on those weights, times v. q has query_dim and depth_dim; k and v
 * have q's dims with memory_dim (same size) for query_dim, in any order. Computed blockwise with an online
 * softmax, never materialising the scores; the same values as the general decomposition (einsum,
 * mtf_causal_mask, softmax, mtf_dropout(rate, key) of the weights [q's other dims in q's order, query_dim,
 * memory_dim], einsum), dropout mask included. */
mtf_tensor mtf_causal_attention(mtf_graph *g, mtf_tensor q, mtf_tensor k, mtf_tensor v, const char *query_dim,
                                const char *memory_dim, const char *depth_dim, float scale, float dropout_rate,
                                uint64_t dropout_key);
/* Fused self-attention in general: causal or not (every memory position), with an additive bias on the
 * scaled scores and segment masks (either MTF_NO_TENSOR for none). k and v may lack some of q's other dims
 * and are then shared along them (grouped key/value heads: q [.., kv_heads, q_group, ..], k [.., kv_heads,
 * ..]). bias has query_dim and memory_dim and any of q's other dims (broadcast over the rest; T5's relative
 * bias [heads, query, memory]); segments holds an id per query position (q's dims without depth_dim, any of
 * the others), and query i sees memory j only where their ids are equal (packed documents): the general
 * path's einsum + bias, masked_fill(-1e9) where the ids differ, softmax. */
typedef struct mtf_fused_attention_options {
  const char *query_dim, *memory_dim, *depth_dim;
  int causal;
  float scale, dropout_rate;
  uint64_t dropout_key;
  mtf_tensor bias, segments;
} mtf_fused_attention_options;
mtf_tensor mtf_fused_attention(mtf_graph *g, mtf_tensor q, mtf_tensor k, mtf_tensor v,
                               const mtf_fused_attention_options *options);
/* Zeroes each element with probability rate and scales the rest by 1/(1-rate); the mask depends only
 * on (graph seed, key, global element index). rate 0 returns x. */
mtf_tensor mtf_dropout(mtf_graph *g, mtf_tensor x, float rate, uint64_t key);

/* ---- fused optimizer updates (one elementwise pass each; no gradient: differentiating one is an error) ----
 * d * old + (1 - d) * (x^power + add), power 1 or 2, x of old's shape; d is `decay` (a scalar tensor) or,
 * when decay is MTF_NO_TENSOR, the constant beta. */
mtf_tensor mtf_moving_average(mtf_graph *g, mtf_tensor old, mtf_tensor x, mtf_tensor decay, float beta, int power,
                              float add);
/* Adafactor's update of w by its gradient g scaled per element by factors a and b (b may be MTF_NO_TENSOR),
 * tensors of some of w's dims broadcast by name (its row and column factors rsqrt(vr / mean vr), rsqrt(vc),
 * or one factor rsqrt(v) of w's shape): w - step_size g a b, step_size a scalar tensor; and the sum of the
 * squares of that update's elements, g a b, without the update itself (partial over the axes splitting g,
 * summed where it is used), for the update's RMS that clipping divides by. */
mtf_tensor mtf_adafactor_update(mtf_graph *g, mtf_tensor w, mtf_tensor grad, mtf_tensor step_size, mtf_tensor a,
                                mtf_tensor b);
mtf_tensor mtf_adafactor_squares(mtf_graph *g, mtf_tensor grad, mtf_tensor a, mtf_tensor b);
/* AdamW: w - lr * ((m / c1) / (sqrt(v / c2) + epsilon) + weight_decay * w) with c = 1 - beta^step (1 for beta
 * 0); m, v of w's shape (the moments already updated), lr and step scalar tensors. */
mtf_tensor mtf_adam_update(mtf_graph *g, mtf_tensor w, mtf_tensor m, mtf_tensor v, mtf_tensor lr, mtf_tensor step,
                           float beta1, float beta2, float epsilon, float weight_decay);

/* ---- selection (MoE routing, sampling) ---- */
/* The k largest entries of x along `dim` (ties: lower index first), in decreasing order over the new dim
 * k_dim (size k <= dim's size) that replaces `dim`; *indices (if not NULL) gets their int32 positions along
 * `dim` (same shape as the values). The gradient flows to the chosen entries. */
mtf_tensor mtf_top_k(mtf_graph *g, mtf_tensor x, const char *dim, const mtf_dim *k_dim, mtf_tensor *indices);
/* int32 position of the largest entry along `dim` (ties: lowest index), `dim` removed. No gradient. */
mtf_tensor mtf_argmax(mtf_graph *g, mtf_tensor x, const char *dim);
/* Running sum along `dim`: out[i] = sum_{j <= i} x[j] (exclusive: j < i). Gradient: the reverse cumsum. */
mtf_tensor mtf_cumsum(mtf_graph *g, mtf_tensor x, const char *dim, int exclusive);
/* Comparisons (1 where true, else 0; broadcast by name like mtf_add; no gradient) and selections. */
mtf_tensor mtf_greater(mtf_graph *g, mtf_tensor a, mtf_tensor b);
mtf_tensor mtf_less(mtf_graph *g, mtf_tensor a, mtf_tensor b);
mtf_tensor mtf_maximum(mtf_graph *g, mtf_tensor a, mtf_tensor b); /* gradient to the larger (a on ties) */
mtf_tensor mtf_minimum(mtf_graph *g, mtf_tensor a, mtf_tensor b); /* gradient to the smaller (a on ties) */
/* a where cond != 0, else b (cond, a, b broadcast by name); gradient to a and b through the mask. */
mtf_tensor mtf_where(mtf_graph *g, mtf_tensor cond, mtf_tensor a, mtf_tensor b);
/* x with, for each row (every index of x's other dims), value's row written at index positions[row] along
 * `dim` (value: x's dims without dim; positions: int32 over some of them; outside [0, size) writes nothing).
 * Assigned back to x, a variable, it updates the variable in place (one row each, no pass over x). No
 * gradient. */
mtf_tensor mtf_write_at(mtf_graph *g, mtf_tensor x, mtf_tensor value, mtf_tensor positions, const char *dim);
/* The float value of an int32 tensor (indices, labels), so float ops can use it; a float tensor is returned
 * as it is. No gradient. (Float ops given an int32 tensor are a builder error that names this; fetch int32
 * results such as positions through it too: mtf_session_fetch copies their int32 bits as they are.) */
mtf_tensor mtf_to_float(mtf_graph *g, mtf_tensor x);
/* x in float dtype `to` (MTF_F32 or MTF_BF16; x itself when it has it): to bfloat16 rounds to nearest, ties to
 * even (core/bf16.h). Its gradient is dy as it is (gradients are float32). Only einsum (two operands) and cast
 * take bfloat16 tensors; every other op refuses them. */
mtf_tensor mtf_cast(mtf_graph *g, mtf_tensor x, mtf_dtype to);
/* Mixed precision (backend.precision bf16): with MTF_BF16, every two-operand einsum built after this call
 * gets bfloat16 operands (each float32 operand cast once per tensor) and computes in float32 (fp32
 * accumulation, float32 result); with MTF_F32 (the default) einsums are float32. An einsum given one
 * bfloat16 and one float32 operand casts the float32 one, whatever the setting. */
void mtf_graph_set_matmul_dtype(mtf_graph *g, mtf_dtype dtype);
mtf_dtype mtf_graph_matmul_dtype(const mtf_graph *g);
/* While on, nodes built belong to the bf16 policy with float32 operands: their kernels may sum in another order
 * than an fp32 run's (the cpu's dot products in lanes, and, with mtf_plan_options.fuse_grad_norm, inside an
 * adam_update's pass), which fp32 runs never see. A bf16 run's gradient norm (mtf_optimizer_config.policy_sums). */
void mtf_graph_set_policy_sums(mtf_graph *g, int on);

/* ---- shape changes ---- */
mtf_tensor mtf_rename(mtf_graph *g, mtf_tensor x, const char *old_dim, const char *new_dim);
/* Same number of elements, any new dims (row-major order kept). */
mtf_tensor mtf_reshape(mtf_graph *g, mtf_tensor x, const mtf_shape *new_shape);
/* Replaces dims `old` (a contiguous run in x) by the dims of `new_dims`. */
mtf_tensor mtf_replace_dimensions(mtf_graph *g, mtf_tensor x, const mtf_shape *old_dims, const mtf_shape *new_dims);

/* ---- autodiff ---- */
/* Adds the backward pass of scalar `loss` to the graph: grads[i] = d loss / d wrt[i] (zeros where wrt[i]
 * does not reach the loss). Gradients are ordinary ops, so they lower with the same layout rules. */
int mtf_gradients(mtf_graph *g, mtf_tensor loss, int n, const mtf_tensor *wrt, mtf_tensor *grads);
/* Recompute blocks (activation checkpointing): the nodes added between mtf_recompute_begin and
 * mtf_recompute_end form one block (returns its id, > 0; blocks do not nest). mtf_gradients ignores
 * blocks. mtf_gradients_recompute gives the same gradients, but differentiates each block from a copy of
 * its forward ops (variables and inputs excepted) added just before the block's backward ops, so the
 * plan computes the block's activations again from its inputs instead of keeping them from the forward
 * pass: only the block's inputs and outputs stay alive between the two passes. Random ops are
 * counter-based, so a recomputed dropout mask is the original one. */
int mtf_recompute_begin(mtf_graph *g);
void mtf_recompute_end(mtf_graph *g);
int mtf_gradients_recompute(mtf_graph *g, mtf_tensor loss, int n, const mtf_tensor *wrt, mtf_tensor *grads);

/* Marks `value` to be written into variable `var` at the end of each run (an optimizer update). */
int mtf_assign(mtf_graph *g, mtf_tensor var, mtf_tensor value);

/* ---- lowering: pure, for any mesh, in one process ---- */
typedef struct mtf_plan mtf_plan;

typedef struct mtf_plan_stats {
  int64_t peak_bytes;       /* planned activation arena per rank */
  int64_t naive_bytes;      /* sum of all intermediate buffers, for comparison */
  int64_t variable_bytes;   /* variables held by this rank */
  int64_t flops;            /* per run, this rank */
  int64_t comm_bytes[MTF_COLL_KINDS]; /* sent by this rank per run, by collective kind */
  int64_t comm_calls[MTF_COLL_KINDS];
  int64_t largest_allreduce_block; /* bytes of the largest allreduce over its group's size: the scratch an
                                    * MPI ring allreduce holds while it runs */
  int steps;
  int allreduce_buckets;    /* non-blocking gradient allreduces (mtf_plan_options), counted once in comm_calls */
  int64_t bucketed_bytes;   /* the gradient bytes they reduce */
  int bf16_values;          /* node values stored as bfloat16 (mtf_plan_options.bf16_storage) */
  int64_t bf16_value_bytes; /* their bytes on this rank */
  int bf16_weight_copies;   /* weights whose bfloat16 copy the optimizer writes (mtf_plan_options) */
  int64_t bf16_weight_copy_bytes; /* those copies' bytes on this rank, kept between runs */
  int fused_optimizer_updates;    /* adam_update steps that run their moving averages too (fuse_optimizer) */
  int fused_grad_norm_squares;    /* of those, steps that also sum their gradient's squares (fuse_grad_norm) */
  int xent_grads_from_loss;       /* cross-entropy gradients that read the forward's loss (xent_grad_from_loss) */
  int xent_merged;                /* cross-entropy gradients that compute the loss too, the forward skipped (same) */
  int fused_scatter_adds;         /* scatter_adds that add into the other term of their sum (fuse_scatter_add) */
  int scatter_adds_in_place;      /* of those, the ones whose term's buffer becomes the sum's (no copy of the term) */
  int fused_product_adds;         /* einsums that add into the other term of their sum (fuse_product_add) */
} mtf_plan_stats;

typedef struct mtf_plan_options {
  /* Gradient reduction overlapped with the backward pass: the allreduces of weight gradients (read only
   * after the backward pass) are grouped into buckets of at most this many bytes, each summed by one
   * non-blocking collective started as soon as its last gradient is complete and waited for just before
   * the first step that reads one. 0: each stays a blocking allreduce before its first reader. */
  int64_t allreduce_bucket_bytes;
  /* What the buckets send (backend.grad_reduce): MTF_F32 (0, the default) or MTF_BF16, half the bytes: each
   * bucket is cast to bfloat16 into a staging buffer, summed so (rounded at every hop of the ring) and cast
   * back into its float32 gradients. */
  mtf_dtype bucket_wire_dtype;
  /* Under the bf16 policy, store as bfloat16 the activations that are only read as bfloat16 (product
   * operands, attention's q, k, v, the logits, the feed-forward pre-activation) where the ops' kernels
   * write and read them so, instead of float32 values and a cast (lower/storage.c). For backends whose
   * kernels do: the run layer sets it for cpu. */
  int bf16_storage;
  /* Under the bf16 policy, each adam_update also writes the bfloat16 copy of its weight that the products read,
   * and the weight's cast runs only when that copy is stale (lower/weight_copies.c): one pass over the weights
   * less per step. The copies stay allocated between runs. For the cpu backend (the run layer sets it there). */
  int bf16_weight_copies;
  /* Bytes that every arena buffer's offset is a multiple of (a power of two, at least 4; 0: 4): the run layer
   * asks 256 for cuda, whose vector loads and cuBLAS want aligned operands. Buffers inside a gradient bucket
   * lie back to back within the bucket's range, which is aligned. */
  int arena_alignment;
  /* AdamW's three passes per variable (the two moving averages of its slots, then the update) as one: the
   * update's kernel runs the moving averages too, with the same arithmetic (lower/fuse_moments.c). For backends
   * whose adam_update kernel does (cpu, cuda: the run layer sets it there). */
  int fuse_optimizer;
  /* With fuse_optimizer: the sum of squares of a gradient under the bf16 policy (mtf_graph_set_policy_sums; a
   * bf16 run's gradient norm, built after the updates) is summed by the fused adam_update that reads that
   * gradient, in its pass, with the einsum's arithmetic (lower/fuse_moments.c): one read of every gradient
   * less per step. For backends whose adam_update kernel does (cpu: the run layer sets it there). */
  int fuse_grad_norm;
  /* Under the bf16 policy, a cross-entropy gradient (no label smoothing, no z-loss, the vocab whole on the rank)
   * reads the forward's per-row loss, lse - x[label], and takes its logsumexp from it instead of recomputing the
   * rows' max and sum of exponentials: one pass over the logits instead of three (lower/fuse_xent.c). The
   * values differ from the recomputed ones by about a float rounding of the loss (2^-24 relative). Where the
   * steps allow it (training: dy does not depend on the loss), the gradient step computes the loss as well and the
   * forward step is skipped: one pass instead of two (the loss bit for bit the forward's). For backends whose
   * kernel does (cpu: the run layer sets it there). */
  int xent_grad_from_loss;
  /* Under the bf16 policy, a scatter_add (an embedding's gradient) whose only reader adds it to another term of
   * its shape (a tied embedding's other gradient) scatters into a copy of that term, or into it in place, and
   * the add is skipped: one pass over the table less and no zeroing (lower/fuse_scatter.c). The sums' order
   * changes (rows added into the term, not into zeros first). For backends whose kernel does (cpu). */
  int fuse_scatter_add;
  /* Under the bf16 policy, an einsum whose float32 result only an add of its shape reads, with the other term
   * dying there (the residual stream and its gradient), adds its result into that term's buffer itself and the
   * add is skipped: one pass over three buffers less (lower/fuse_add.c). For backends whose kernel does (cpu:
   * oneDNN's sum post-op; the float32 accumulation may differ in the last bits). */
  int fuse_product_add;
} mtf_plan_options;

/* Checks every tensor against the layout (errors name the tensor, dims and sizes) and builds the plan of
 * the rank at mesh_rank for computing `fetches` and all assigns. */
int mtf_plan_create(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules, int mesh_rank,
                    int n_fetches, const mtf_tensor *fetches, mtf_plan **out, mtf_error *err);
/* The same, for `fetches` alone: the graph's assigns are left out (an evaluation plan next to a training
 * plan of the same graph). */
int mtf_plan_create_without_assigns(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                                    int mesh_rank, int n_fetches, const mtf_tensor *fetches, mtf_plan **out,
                                    mtf_error *err);
/* mtf_plan_create with options (NULL: the defaults, as mtf_plan_create). */
int mtf_plan_create_with_options(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                                 int mesh_rank, int n_fetches, const mtf_tensor *fetches,
                                 const mtf_plan_options *options, mtf_plan **out, mtf_error *err);
/* The same, with the graph's assigns [first_assign, first_assign + n_assigns) alone (in mtf_assign order),
 * with options (NULL: the defaults): plans of one graph that update different variables (gradient accumulation and the optimizer step). */
int mtf_plan_create_with_assigns(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                                 int mesh_rank, int n_fetches, const mtf_tensor *fetches, int first_assign,
                                 int n_assigns, const mtf_plan_options *options, mtf_plan **out, mtf_error *err);
/* Assigns made so far (mtf_assign). */
int mtf_graph_num_assigns(const mtf_graph *g);
void mtf_plan_destroy(mtf_plan *plan);
const mtf_plan_stats *mtf_plan_get_stats(const mtf_plan *plan);
/* Bytes reduced by gradient bucket i (0 <= i < stats.allreduce_buckets) and its number of gradients in
 * *members (may be NULL); -1 outside the range. */
int64_t mtf_plan_bucket_bytes(const mtf_plan *plan, int i, int *members);
/* The layout of a tensor under this plan (split axes, slice shape via core/layout.h). */
const mtf_tensor_layout *mtf_plan_layout(const mtf_plan *plan, mtf_tensor t);
const mtf_graph *mtf_plan_graph(const mtf_plan *plan);
const mtf_shape *mtf_plan_mesh(const mtf_plan *plan);
int mtf_plan_rank(const mtf_plan *plan);
/* Elements of this rank's slice of t (0 when the plan does not hold t). */
int64_t mtf_plan_slice_elements(const mtf_plan *plan, mtf_tensor t);

/* ---- backends ---- */
/* Checks that a backend kind ("cpu"; later "cuda", "pjrt") is built in and usable here; otherwise an
 * error such as "unknown backend 'gpu' (built in: cpu)". NULL or "" means "cpu". */
int mtf_backend_check(const char *kind, mtf_error *err);
/* How the cpu backend multiplies bfloat16 in this process (oneDNN's version and ISA, or the conversion path
 * and why): `mtf --version` and the backend line of a bf16 run print it. */
const char *mtf_cpu_bf16_text(void);
/* c[m, n] = a[m, k] b[k, n] (row-major; a and b bfloat16 bits, c float32) the way the cpu backend multiplies
 * bfloat16, on `threads` threads: the MFU ceiling of a bf16 run measures it. */
int mtf_cpu_bf16_matmul(int64_t m, int64_t n, int64_t k, const uint16_t *a, const uint16_t *b, float *c, int threads);
/* What a backend kind does, from its registry entry (exec/registry.c): config, run and cli ask this instead
 * of comparing backend names, so a new backend states its abilities in one place. */
typedef struct mtf_backend_caps {
  const char *kind;
  int bf16;             /* backend.precision: bf16 implemented */
  int bf16_grad_reduce; /* backend.grad_reduce: bf16 (gradient buckets summed in bfloat16) */
  int one_program;      /* runs the whole mesh from one process as one compiled program per plan (pjrt): no
                         * step-by-step executor, so no plan fields that only its kernels implement */
  int microbatches;     /* train.microbatches > 1 */
  int generate;         /* mtf generate (prefill and decode plans with a key/value cache) */
  int host_memory;      /* tensors in this process's memory and collectives by MPI on it (cpu): the node's
                         * memory bounds a run's planned peak; train.allreduce_overlap auto decides by placement */
  int host_fusions;     /* its kernels implement the plan fusions made for the cpu kernels (mtf_plan_options'
                         * fuse_grad_norm, xent_grad_from_loss, fuse_scatter_add, fuse_product_add) */
  int arena_alignment;  /* bytes the arena's buffers start on (0: the plan's default) */
  int host_peak;        /* computes on the host's cores: the host's measured sgemm is its MFU ceiling */
  int host_bf16_matmul; /* multiplies bfloat16 as mtf_cpu_bf16_matmul does (the bf16 MFU ceiling measures it) */
  int gpu;              /* one GPU per rank: backend.device, backend.tf32 and backend.comm: nccl apply */
  int plugin;           /* backend.plugin and backend.local_devices apply (a PJRT plugin) */
} mtf_backend_caps;
/* The capabilities of a built-in or registered kind (NULL or "" = "cpu"); NULL for a kind this build lacks. */
const mtf_backend_caps *mtf_backend_capabilities(const char *kind);
/* The built-in kinds, comma-separated ("cpu", "cpu, pjrt" when the PJRT backend is built). */
const char *mtf_backend_kinds(void);
/* backend.precision: fp32 computes everything in fp32; bf16 gives the model's einsums bf16 operands with fp32
 * accumulation and output (master weights, reductions and the loss stay fp32): see mtf_graph_set_matmul_dtype,
 * which is what changes the products; every built-in backend runs it. */
typedef enum mtf_precision { MTF_PRECISION_FP32 = 0, MTF_PRECISION_BF16 = 1 } mtf_precision;
#define MTF_DEVICE_FROM_LOCAL_RANK (-1)

/* A backend's settings (the config's backend section). Zero-initialised = cpu's defaults, except that
 * `device` 0 means GPU 0: use MTF_DEVICE_FROM_LOCAL_RANK for the per-rank choice. */
typedef struct mtf_backend_options {
  const char *kind;    /* NULL or "" = "cpu" */
  int threads;         /* cpu: compute threads (0 = default) */
  const char *plugin;  /* pjrt: the plugin .so (NULL: $MTF_PJRT_PLUGIN or the installed one) */
  int local_devices;   /* pjrt: devices to ask the plugin for (0: all) */
  int device;          /* cuda: the GPU's ordinal, or MTF_DEVICE_FROM_LOCAL_RANK (OMPI_COMM_WORLD_LOCAL_RANK,
                        * SLURM_LOCALID, else 0, modulo the visible GPUs) */
  int tf32;            /* cuda: fp32 GEMMs may use TF32 tensor cores */
  mtf_precision precision;
} mtf_backend_options;

/* What a backend runs on, as lines for `mtf --version` and the start of a run (empty for cpu). For pjrt it
 * opens the plugin (`plugin`, NULL = $MTF_PJRT_PLUGIN or the installed one; `local_devices`, 0 = all) and
 * describes platform, version and devices; with mesh_devices > 0 it also checks that the mesh has
 * processes x devices devices. For cuda it names the GPU, driver, CUDA runtime, cuBLAS and NCCL, and is an
 * error when there is no usable GPU (saying what was looked for). Errors name the plugin, the package and
 * the settings; a precision the backend lacks is an error too. */
int mtf_backend_describe(const mtf_backend_options *options, long mesh_devices, int processes, char *out, size_t cap,
                         mtf_error *err);
/* Threads a CPU backend uses on one rank for `requested` (0: cores of this node / ranks on it). */
int mtf_backend_resolve_threads(int requested, int ranks_per_node);

/* ---- execution ---- */
typedef struct mtf_session mtf_session;

typedef struct mtf_session_options {
  int poison_freed; /* fill buffers with NaN when their last reader is done (checks the memory plan) */
  /* Use this session's variables (same graph, same mesh and layout, same backend) instead of new ones: e.g.
   * an eval plan next to the training plan. Variables the other session lacks are created. The other
   * session must be destroyed after this one (destroying it first aborts with a message). */
  const struct mtf_session *share_variables_with;
  const char *backend; /* backend kind (mtf_backend_check); NULL or "" = "cpu" */
  int threads;         /* compute threads of this rank's backend; 0 = the backend's default */
  const char *plugin;  /* pjrt: the plugin .so (NULL: $MTF_PJRT_PLUGIN or the installed one) */
  int local_devices;   /* pjrt: devices to ask the plugin for (0: the plugin's default, all on TPU/GPU) */
  /* cuda: device_set = use GPU `device` (backend.device), else the one of the rank's local rank */
  int device_set, device;
  int tf32;                /* cuda: backend.tf32 */
  mtf_precision precision; /* backend.precision: what the run layer reports (the bf16 line); the
                            * products themselves follow the graph (mtf_graph_set_matmul_dtype) */
  /* backend.comm, collectives on device memory: auto (0: NCCL when every rank has a GPU of its own, else MPI
   * through host staging), nccl or mpi (staged). A host-memory backend (cpu) uses the session's communicator
   * as it is, and refuses nccl. */
  mtf_comm_mode comm;
} mtf_session_options;

/* Binds a plan to a communicator (whose mesh and rank must match the plan) and allocates memory;
 * variables get their initial values. */
int mtf_session_create(mtf_plan *plan, mtf_comm *comm, const mtf_session_options *options, mtf_session **out,
                       mtf_error *err);
void mtf_session_destroy(mtf_session *s);
/* backend pjrt, one process owning every device of the mesh: device_plans[r] is mesh rank r's plan of the
 * graph (device r runs it), all compiled into one program run once per mtf_session_run. host_plan is the
 * same graph's plan on a one-rank mesh (every axis of size 1) and comm that mesh's communicator: inputs,
 * fetches, read_slice and write_variable speak of its slices, which are whole tensors. The plans must
 * outlive the session. train.microbatches > 1 (set_microbatch with count > 1) is refused for now. */
int mtf_session_create_spmd(mtf_plan *host_plan, mtf_plan *const *device_plans, int n_devices, mtf_comm *comm,
                            const mtf_session_options *options, mtf_session **out, mtf_error *err);
/* Devices the session computes on: 1, or the mesh's size for an spmd session. */
/* The communicator of the session's collective steps (backend.comm): "mpi" (host memory), "nccl", or
 * "mpi-staged" (MPI through host copies of device memory). */
const char *mtf_session_collectives(const mtf_session *s);
/* With backend.precision bf16 (the session's options), how the backend multiplies bfloat16 (cpu: "bf16 matmuls
 * on oneDNN 2.6.3, ISA avx512_core_amx", or through conversion and why); NULL for fp32 or a backend that does
 * not say. */
const char *mtf_session_bf16_text(const mtf_session *s);
int mtf_session_devices(const mtf_session *s);
/* An input's value for the next run: the whole logical tensor (each rank keeps its slice) ... An input
 * the plan does not read is accepted and ignored. */
int mtf_session_set_input(mtf_session *s, mtf_tensor input, const float *full, mtf_error *err);
/* ... or just this rank's slice (row-major over the slice shape). */
int mtf_session_set_input_slice(mtf_session *s, mtf_tensor input, const float *slice, mtf_error *err);
/* The same for int32 inputs (mtf_input_int). */
int mtf_session_set_input_int(mtf_session *s, mtf_tensor input, const int32_t *full, mtf_error *err);
int mtf_session_set_input_slice_int(mtf_session *s, mtf_tensor input, const int32_t *slice, mtf_error *err);
/* Runs the plan once. A failure on one rank of a multi-rank session ends the whole job at once with
 * "mtf: rank k: <message>" on stderr (its peers may be waiting in the plan's next collective); on a
 * one-rank session it returns the error. */
int mtf_session_run(mtf_session *s, mtf_error *err);
/* A fetched tensor (or variable or input) as the whole logical tensor, on every rank. Collective: every rank of
 * the mesh must call it, in the same order. */
int mtf_session_fetch(mtf_session *s, mtf_tensor t, float *full, mtf_error *err);
/* This rank's slice of a fetched tensor or a variable (not collective), in the backend's memory: host
 * memory on the CPU backend only. Portable code uses mtf_session_read_slice. */
const float *mtf_session_slice(const mtf_session *s, mtf_tensor t);
/* Writable storage of a variable's slice on this rank (row-major over its slice shape), in the backend's
 * memory (host memory on the CPU backend only); NULL when t is not a variable this plan holds. Shared
 * variables are shared storage. Portable code uses mtf_session_write_variable. Write through it before the
 * next run of a session on these variables: the call is what tells bf16 weight copies that the variables
 * may change (mtf_plan_options.bf16_weight_copies). */
float *mtf_session_variable_slice(mtf_session *s, mtf_tensor t);
/* Copies this rank's slice of a computed tensor or variable out of backend memory (mtf_plan_slice_elements
 * floats), or a variable's slice into it (checkpoints stage through these, so any backend works). */
int mtf_session_read_slice(const mtf_session *s, mtf_tensor t, float *out, mtf_error *err);
int mtf_session_write_variable(mtf_session *s, mtf_tensor var, const float *slice, mtf_error *err);
/* The backend this session computes on ("cpu") and its threads per rank (pjrt: the plugin's host threads, see
 * mtf_pjrt_threads_needed; 0 = the plugin's default). */
const char *mtf_session_backend(const mtf_session *s);
int mtf_session_threads(const mtf_session *s);
/* Mixed into every random op's counter (dropout masks differ from step to step, yet stay the same on
 * every layout): set it to the step number before each run. */
void mtf_session_set_random_offset(mtf_session *s, uint64_t offset);
/* Gradient accumulation: the next runs compute microbatch `index` of `count` with a plan built for
 * 1/count of the batch, and random ops number dimension `dim` as the rows of the whole batch. The
 * microbatch's rows on this rank are taken to be the index-th of `count` equal runs of the rank's rows of
 * the whole batch (what a loader of the whole batch gives it, cut in `count`), so every dropout mask is
 * the one a plan of the whole batch draws for the same rows, on any layout. count 1 (the default) numbers
 * rows as they are. */
int mtf_session_set_microbatch(mtf_session *s, const char *dim, int index, int count, mtf_error *err);
/* Bytes this session allocated: its activation arena, variables (not those shared) and inputs. */
int64_t mtf_session_allocated_bytes(const mtf_session *s);
/* Seconds blocked in collectives since creation (for the communication share of step time): blocking
 * collectives, and waits for non-blocking gradient buckets; not the time they progress behind kernels. */
double mtf_session_comm_seconds(const mtf_session *s);
/* Seconds spent starting gradient buckets' collectives and letting them progress between kernels (MPI
 * tests) since creation: not blocked, so not in mtf_session_comm_seconds. */
double mtf_session_progress_seconds(const mtf_session *s);

#ifdef __cplusplus
}
#endif

#endif
