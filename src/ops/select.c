/* Selection ops for MoE routing and sampling: top-k along a named dim (values, and their int32 positions),
 * argmax, running sums (cumsum, for capacity positions), where, the int32 -> float cast, and the builders
 * of the comparison / maximum / minimum kinds of the binary op (whose table entry is elementwise.c's).
 *
 * Order: an entry ranks before another when it is larger, or equal with a lower index; NaN ranks below
 * every number (so a row of NaNs still yields k positions, the lowest first).
 *
 * Lowering: the other dims (batch, groups) stay split with no communication. A layout splitting the
 * selected or scanned dim runs the kernels in phases around one allreduce of small per-row statistics (each
 * rank's k candidates; each rank's totals), or, for top-k when the local slice is not much longer than k,
 * gathers the input along the dim and slices the result back to the layout (k_dim). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_def.h"

/* ---- builders ---- */
static mtf_op_params select_params(const char *dim, const char *k_dim, int k) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.top_k.dim, sizeof p.top_k.dim, "%s", dim ? dim : "");
  snprintf(p.top_k.k_dim, sizeof p.top_k.k_dim, "%s", k_dim ? k_dim : "");
  p.top_k.k = k;
  return p;
}

mtf_tensor mtf_top_k(mtf_graph *g, mtf_tensor x, const char *dim, const mtf_dim *k_dim, mtf_tensor *indices) {
  if (indices) *indices = MTF_NO_TENSOR;
  if (!mtf_graph_check(g, x, "top_k")) return MTF_NO_TENSOR;
  if (!k_dim || !mtf_name_is_valid(k_dim->name))
    return mtf_graph_fail(g, MTF_ERR_INVALID, "top_k of '%s': the new dimension needs a valid name", g->nodes[x].name);
  if (k_dim->size > 0x7fffffff)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "top_k of '%s': k %lld is too large", g->nodes[x].name,
                          (long long)k_dim->size);
  mtf_op_params p = select_params(dim, k_dim->name, (int)k_dim->size);
  mtf_tensor values = mtf_graph_add_op(g, MTF_OP_TOP_K, 1, &x, &p, NULL);
  if (indices && values >= 0) *indices = mtf_graph_add_op(g, MTF_OP_TOP_K_INDICES, 1, &x, &p, NULL);
  return indices && *indices < 0 ? MTF_NO_TENSOR : values;
}

mtf_tensor mtf_argmax(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_op_params p = select_params(dim, "", 1);
  return mtf_graph_add_op(g, MTF_OP_TOP_K_INDICES, 1, &x, &p, NULL);
}

static mtf_tensor scan(mtf_graph *g, mtf_tensor x, const char *dim, int exclusive, int reverse) {
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.scan.dim, sizeof p.scan.dim, "%s", dim ? dim : "");
  p.scan.exclusive = exclusive != 0;
  p.scan.reverse = reverse;
  return mtf_graph_add_op(g, MTF_OP_CUMSUM, 1, &x, &p, NULL);
}

mtf_tensor mtf_cumsum(mtf_graph *g, mtf_tensor x, const char *dim, int exclusive) { return scan(g, x, dim, exclusive, 0); }
mtf_tensor mtf_cumsum_reverse(mtf_graph *g, mtf_tensor x, const char *dim, int exclusive) {
  return scan(g, x, dim, exclusive, 1);
}

mtf_tensor mtf_greater(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_GREATER); }
mtf_tensor mtf_less(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_LESS); }
mtf_tensor mtf_maximum(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_MAXIMUM); }
mtf_tensor mtf_minimum(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_MINIMUM); }

mtf_tensor mtf_where(mtf_graph *g, mtf_tensor cond, mtf_tensor a, mtf_tensor b) {
  mtf_tensor in[3] = {cond, a, b};
  return mtf_graph_add_op(g, MTF_OP_WHERE, 3, in, NULL, NULL);
}

mtf_tensor mtf_to_float(mtf_graph *g, mtf_tensor x) {
  if (!mtf_graph_check(g, x, "to_float")) return MTF_NO_TENSOR;
  if (g->nodes[x].dtype == MTF_F32) return x;
  return mtf_graph_add_op(g, MTF_OP_TO_FLOAT, 1, &x, NULL, NULL);
}

/* ---- shape rules ---- */
static int select_infer(mtf_graph *g, mtf_node *n) {
  const char *op = mtf_op(n->kind)->name, *dim = n->params.top_k.dim, *k_dim = n->params.top_k.k_dim;
  if (!mtf_op_float_inputs(g, n, 0, 0) || !mtf_op_needs_dim(g, n, 0, dim, op)) return g->error.code;
  const mtf_shape *x = &g->nodes[n->inputs[0]].shape;
  int d = mtf_shape_index_of(x, dim);
  n->dtype = n->kind == MTF_OP_TOP_K_INDICES ? MTF_I32 : MTF_F32;
  if (k_dim[0] == 0) { /* argmax */
    mtf_shape_remove(x, dim, &n->shape, NULL);
    return MTF_OK;
  }
  char s[MTF_SHAPE_STR_MAX];
  if (n->params.top_k.k < 1 || n->params.top_k.k > x->dims[d].size)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "%s of '%s' %s: k = %d must be in [1, %lld] (the size of '%s')", op,
                          g->nodes[n->inputs[0]].name, mtf_shape_format(x, s, sizeof s), n->params.top_k.k,
                          (long long)x->dims[d].size, dim),
           g->error.code;
  if (mtf_shape_has(x, k_dim))
    return mtf_graph_fail(g, MTF_ERR_INVALID, "%s of '%s' %s: the new dimension '%s' must not be one of its dims", op,
                          g->nodes[n->inputs[0]].name, mtf_shape_format(x, s, sizeof s), k_dim),
           g->error.code;
  n->shape = *x; /* dim replaced in place by k_dim */
  snprintf(n->shape.dims[d].name, sizeof n->shape.dims[d].name, "%s", k_dim);
  n->shape.dims[d].size = n->params.top_k.k;
  return MTF_OK;
}

static int scan_infer(mtf_graph *g, mtf_node *n) {
  if (!mtf_op_float_inputs(g, n, 0, 0) || !mtf_op_needs_dim(g, n, 0, n->params.scan.dim, "cumsum")) return g->error.code;
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static int where_infer(mtf_graph *g, mtf_node *n) {
  const mtf_node *cond = &g->nodes[n->inputs[0]];
  if (cond->dtype != MTF_F32 && cond->dtype != MTF_I32)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "where: condition '%s' holds %s values; it takes float or int32", cond->name,
                          mtf_dtype_name(cond->dtype)),
           g->error.code;
  if (!mtf_op_float_inputs(g, n, 1, 2)) return g->error.code;
  mtf_shape ab;
  if (!mtf_op_union_shape(g, &g->nodes[n->inputs[1]].shape, &g->nodes[n->inputs[2]].shape, &ab, "where") ||
      !mtf_op_union_shape(g, &ab, &cond->shape, &n->shape, "where"))
    return g->error.code;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static int to_float_infer(mtf_graph *g, mtf_node *n) {
  const mtf_node *x = &g->nodes[n->inputs[0]];
  if (x->dtype != MTF_I32 && x->dtype != MTF_F32)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "to_float: '%s' holds %s values", x->name, mtf_dtype_name(x->dtype)),
           g->error.code;
  n->shape = x->shape;
  n->dtype = MTF_F32;
  return MTF_OK;
}

/* ---- gradients ---- */
/* d x = sum over k_dim of one_hot(indices, dim) * dy: each chosen entry gets its value's gradient (an
 * elementwise product summed down to x's shape by mtf_grad_accumulate, not a batched einsum of tiny
 * matmuls). The indices are a node of their own (the builder's, if any, is not known here; the same
 * positions). */
static void top_k_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  if (!mtf_grad_wanted(ctx, &n, 0)) return;
  mtf_tensor x = n.inputs[0];
  mtf_shape xs = g->nodes[x].shape;
  mtf_dim dim = xs.dims[mtf_shape_index_of(&xs, n.params.top_k.dim)];
  mtf_tensor indices = mtf_graph_add_op(g, MTF_OP_TOP_K_INDICES, 1, &x, &n.params, NULL);
  mtf_tensor chosen = mtf_one_hot(g, indices, &dim); /* [values' dims, dim] */
  mtf_grad_accumulate(ctx, x, mtf_multiply(g, chosen, dy));
}

/* The adjoint of a running sum is the running sum from the other end (same exclusivity). */
static void scan_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  const mtf_node n = ctx->g->nodes[self];
  mtf_tensor dx = scan(ctx->g, dy, n.params.scan.dim, n.params.scan.exclusive, !n.params.scan.reverse);
  mtf_grad_accumulate(ctx, n.inputs[0], dx);
}

static void where_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_graph *g = ctx->g;
  const mtf_node n = g->nodes[self];
  mtf_shape scalar = {0};
  if (mtf_grad_wanted(ctx, &n, 1))
    mtf_grad_accumulate(ctx, n.inputs[1], mtf_where(g, n.inputs[0], dy, mtf_constant(g, &scalar, 0.0f)));
  if (mtf_grad_wanted(ctx, &n, 2))
    mtf_grad_accumulate(ctx, n.inputs[2], mtf_where(g, n.inputs[0], mtf_constant(g, &scalar, 0.0f), dy));
}

/* ---- lowering ---- */
/* The input gathered whole along `dim`, one kernel step, its output (whole along `out_dim`, or as it is
 * when out_dim is "") sliced back to the node's layout. */
static int whole_dim_lower(mtf_lowering *lw, int node, const char *dim, const char *out_dim) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  const char *in_dims[1] = {dim}, *out_dims[1] = {out_dim};
  int in, out;
  mtf_shape in_shape;
  MTF_CHECK(mtf_lower_input_whole(lw, node, 0, 1, in_dims, &in, &in_shape));
  mtf_dtype in_dtype = mtf_lowering_graph(lw)->nodes[n->inputs[0]].dtype;
  mtf_shape out_shape = mtf_lowering_shape_whole(lw, node, out_dim[0] ? 1 : 0, out_dims);
  MTF_CHECK(mtf_lower_phase_typed(lw, node, MTF_PHASE_WHOLE, 1, &in, &in_shape, &in_dtype, &out_shape, n->dtype, &out));
  return mtf_lower_set_value_sliced(lw, node, out, &out_shape);
}

/* A split dim, split over `axis` (or -1), and the number of its parts (mesh axis size). */
static int split_parts(mtf_lowering *lw, int node, const char *dim, int *axis, int64_t *local_len) {
  const mtf_graph *g = mtf_lowering_graph(lw);
  int input = g->nodes[node].inputs[0];
  mtf_shape xs = mtf_lowering_local_shape(lw, input);
  int d = mtf_shape_index_of(&xs, dim);
  *axis = mtf_lowering_split_axis(lw, input, dim);
  *local_len = xs.dims[d].size;
  return (int)(g->nodes[input].shape.dims[d].size / xs.dims[d].size);
}

/* A split dim much longer than k (a vocabulary, many experts per rank): each rank selects its own k
 * candidates (values and global positions) into its slot of a zeroed [_stats: 2 * parts * k, rows] buffer,
 * one sum allreduce gives every rank all the candidates (each slot has one writer, and adding zeros is
 * exact: only a -0 comes back as +0), and a last step selects the k best of them, whole along k_dim,
 * sliced to the layout. Otherwise the dim is gathered: fewer bytes when the local slice is at most twice
 * the candidates. */
static int select_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  int axis;
  int64_t local_len, k = n->params.top_k.k_dim[0] ? n->params.top_k.k : 1;
  int parts = split_parts(lw, node, n->params.top_k.dim, &axis, &local_len);
  int64_t candidates = k < local_len ? k : local_len;
  /* positions travel as floats: exact below 2^24 */
  if (axis < 0 || 2 * candidates > local_len || local_len * parts > (1 << 24))
    return whole_dim_lower(lw, node, n->params.top_k.dim, n->params.top_k.k_dim);
  int x, stats, out;
  mtf_shape xs;
  MTF_CHECK(mtf_lower_input(lw, node, 0, &x, &xs));
  mtf_shape rows = mtf_op_shape_without(&xs, n->params.top_k.dim);
  mtf_shape stats_shape = mtf_op_stats_shape((int)(2 * parts * candidates), &rows);
  mtf_dtype types[1] = {MTF_F32};
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_STATS, 1, &x, &xs, types, &stats_shape, &stats));
  MTF_CHECK(mtf_lower_allreduce_buffer(lw, node, stats, &stats_shape, 1u << axis, MTF_REDUCE_SUM));
  const char *k_dims[1] = {n->params.top_k.k_dim};
  mtf_shape out_shape = mtf_lowering_shape_whole(lw, node, n->params.top_k.k_dim[0] ? 1 : 0, k_dims);
  MTF_CHECK(mtf_lower_phase_typed(lw, node, MTF_PHASE_APPLY, 1, &stats, &stats_shape, types, &out_shape, n->dtype, &out));
  return mtf_lower_set_value_sliced(lw, node, out, &out_shape);
}

/* A split dim: each rank's row totals into its slot of a zeroed [_stats: parts, rows] buffer, one sum
 * allreduce, then each rank scans its slice starting from the totals of the slices before it (after it,
 * reversed). No gather: the totals are 1 / local length of the values. */
static int scan_lower(mtf_lowering *lw, int node) {
  const mtf_node *n = &mtf_lowering_graph(lw)->nodes[node];
  int axis;
  int64_t local_len;
  int parts = split_parts(lw, node, n->params.scan.dim, &axis, &local_len);
  if (axis < 0) return whole_dim_lower(lw, node, n->params.scan.dim, n->params.scan.dim); /* one local step */
  int x, stats, out;
  mtf_shape xs;
  MTF_CHECK(mtf_lower_input(lw, node, 0, &x, &xs));
  mtf_shape rows = mtf_op_shape_without(&xs, n->params.scan.dim), stats_shape = mtf_op_stats_shape(parts, &rows);
  mtf_dtype types[2] = {MTF_F32, MTF_F32};
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_STATS, 1, &x, &xs, types, &stats_shape, &stats));
  MTF_CHECK(mtf_lower_allreduce_buffer(lw, node, stats, &stats_shape, 1u << axis, MTF_REDUCE_SUM));
  int in[2] = {x, stats};
  mtf_shape in_shapes[2] = {xs, stats_shape}, out_shape = mtf_lowering_local_shape(lw, node);
  MTF_CHECK(mtf_lower_phase(lw, node, MTF_PHASE_APPLY, 2, in, in_shapes, types, &out_shape, &out));
  mtf_lower_set_value(lw, node, out);
  return MTF_OK;
}

static int local_lower(mtf_lowering *lw, int node) { return mtf_lower_local(lw, node, 0); }

/* One comparison (or add) per input element: the kernel's insertion list rarely moves on real data. */
static int64_t input_flops(const mtf_step *s) { return mtf_shape_num_elements(&s->in_shape[0]); }

/* ---- references (double precision, whole tensors) ---- */
/* Whether entry (u, i) ranks before entry (v, j): larger first, equal ones by index, NaN last. */
static int ranks_before(double u, int64_t i, double v, int64_t j) {
  if (isnan(u) || isnan(v)) return isnan(u) == isnan(v) ? i < j : !isnan(u);
  return u > v || (u == v && i < j);
}

/* Selection by k passes over the row, each taking the best entry not yet taken (independent of the
 * kernels' insertion list). */
static void select_reference(const mtf_ref_args *a) {
  const mtf_shape *xs = a->in_shape[0], *os = &a->n->shape;
  const char *k_dim = a->n->params.top_k.k_dim;
  int argmax = k_dim[0] == 0, values = a->n->kind == MTF_OP_TOP_K;
  int64_t k = argmax ? 1 : a->n->params.top_k.k, out_stride = 1;
  if (!argmax)
    for (int d = mtf_shape_index_of(os, k_dim) + 1; d < os->rank; d++) out_stride *= os->dims[d].size;
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, xs, a->n->params.top_k.dim);
  char *taken = calloc((size_t)w.size, 1);
  if (!taken) return;
  do {
    int64_t base = mtf_ref_row_base(&w, xs);
    /* rows' dims are the output's other dims: the output's row offset at k index 0 */
    int64_t out_base = mtf_ref_offset(&w.rows, w.index, os);
    memset(taken, 0, (size_t)w.size);
    for (int64_t r = 0; r < k; r++) {
      int64_t best = -1;
      for (int64_t j = 0; j < w.size; j++)
        if (!taken[j] && (best < 0 || ranks_before(a->in[0][base + j * w.stride], j, a->in[0][base + best * w.stride], best)))
          best = j;
      taken[best] = 1;
      a->out[out_base + r * out_stride] = values ? a->in[0][base + best * w.stride] : (double)best;
    }
  } while (mtf_ref_next(&w.rows, w.index));
  free(taken);
}

static void scan_reference(const mtf_ref_args *a) {
  const mtf_shape *s = a->in_shape[0];
  mtf_ref_rows w;
  mtf_ref_rows_init(&w, s, a->n->params.scan.dim);
  int exclusive = a->n->params.scan.exclusive, reverse = a->n->params.scan.reverse;
  do {
    int64_t base = mtf_ref_row_base(&w, s);
    for (int64_t i = 0; i < w.size; i++) { /* each output as its own sum, straight from the definition */
      double sum = 0;
      for (int64_t j = 0; j < w.size; j++) {
        int in = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
        if (in) sum += a->in[0][base + j * w.stride];
      }
      a->out[base + i * w.stride] = sum;
    }
  } while (mtf_ref_next(&w.rows, w.index));
}

static void where_reference(const mtf_ref_args *a) {
  const mtf_shape *s = &a->n->shape;
  int64_t index[MTF_MAX_RANK] = {0};
  do {
    double c = a->in[0][mtf_ref_offset(s, index, a->in_shape[0])];
    int k = c != 0 ? 1 : 2;
    a->out[mtf_ref_offset(s, index, s)] = a->in[k][mtf_ref_offset(s, index, a->in_shape[k])];
  } while (mtf_ref_next(s, index));
}

static void copy_reference(const mtf_ref_args *a) {
  memcpy(a->out, a->in[0], sizeof(double) * (size_t)mtf_shape_num_elements(&a->n->shape));
}

/* named_dim: the split phases' kernels need their slice's global offset along the dim (params.top_k.dim
 * and params.scan.dim are where params.along.dim is). */
const mtf_op_def mtf_op_top_k = {"top_k", MTF_DIM_IN_INPUT, select_infer, top_k_gradient, select_lower, input_flops, NULL,
                                 select_reference, 0, 0, 0, 0};
/* Positions are piecewise constant: no gradient flows (the entry has none). */
const mtf_op_def mtf_op_top_k_indices = {"top_k_indices", MTF_DIM_IN_INPUT, select_infer, NULL, select_lower, input_flops,
                                         NULL, select_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_cumsum = {"cumsum", MTF_DIM_IN_INPUT, scan_infer, scan_gradient, scan_lower, input_flops, NULL,
                                  scan_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_where = {"where", MTF_DIM_NONE, where_infer, where_gradient, local_lower, mtf_op_flops_elements,
                                 NULL, where_reference, 0, 0, 0, 0};
const mtf_op_def mtf_op_to_float = {"to_float", MTF_DIM_NONE, to_float_infer, NULL, local_lower, NULL, NULL,
                                    copy_reference, 0, 0, 0, 0};
