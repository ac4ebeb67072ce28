/* The op table (one entry per op kind; the entries live with their builders in the files of this folder)
 * and the helpers the entries share. The table is the one place that dispatches on op kind. */
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

static const mtf_op_def *const table[MTF_OP_COUNT] = {
    [MTF_OP_INPUT] = &mtf_op_input,
    [MTF_OP_VARIABLE] = &mtf_op_variable,
    [MTF_OP_CONSTANT] = &mtf_op_constant,
    [MTF_OP_RANGE] = &mtf_op_range,
    [MTF_OP_EINSUM] = &mtf_op_einsum,
    [MTF_OP_BROADCAST] = &mtf_op_broadcast,
    [MTF_OP_REDUCE_MAX] = &mtf_op_reduce_max,
    [MTF_OP_BINARY] = &mtf_op_binary,
    [MTF_OP_UNARY] = &mtf_op_unary,
    [MTF_OP_ONE_HOT] = &mtf_op_one_hot,
    [MTF_OP_RANDOM_KEEP] = &mtf_op_random_keep,
    [MTF_OP_RESHAPE] = &mtf_op_reshape,
    [MTF_OP_STOP_GRADIENT] = &mtf_op_stop_gradient,
    [MTF_OP_SOFTMAX] = &mtf_op_softmax,
    [MTF_OP_LOG_SOFTMAX] = &mtf_op_log_softmax,
    [MTF_OP_LAYER_NORM] = &mtf_op_layer_norm,
    [MTF_OP_RMS_NORM] = &mtf_op_rms_norm,
    [MTF_OP_SOFTMAX_XENT] = &mtf_op_softmax_xent,
    [MTF_OP_MASKED_FILL] = &mtf_op_masked_fill,
    [MTF_OP_GATHER] = &mtf_op_gather,
    [MTF_OP_SCATTER_ADD] = &mtf_op_scatter_add,
    [MTF_OP_SOFTMAX_GRAD] = &mtf_op_softmax_grad,
    [MTF_OP_LOG_SOFTMAX_GRAD] = &mtf_op_log_softmax_grad,
    [MTF_OP_LAYER_NORM_GRAD] = &mtf_op_layer_norm_grad,
    [MTF_OP_RMS_NORM_GRAD] = &mtf_op_rms_norm_grad,
    [MTF_OP_SOFTMAX_XENT_GRAD] = &mtf_op_softmax_xent_grad,
    [MTF_OP_GELU_GRAD] = &mtf_op_gelu_grad,
    [MTF_OP_ATTENTION] = &mtf_op_attention,
    [MTF_OP_ATTENTION_GRAD] = &mtf_op_attention_grad,
    [MTF_OP_ATTENTION_BIAS_GRAD] = &mtf_op_attention_bias_grad,
    [MTF_OP_TAKE] = &mtf_op_take,
    [MTF_OP_ADAFACTOR_UPDATE] = &mtf_op_adafactor_update,
    [MTF_OP_ADAFACTOR_SQUARES] = &mtf_op_adafactor_squares,
    [MTF_OP_MOVING_AVERAGE] = &mtf_op_moving_average,
    [MTF_OP_ADAM_UPDATE] = &mtf_op_adam_update,
    [MTF_OP_TOP_K] = &mtf_op_top_k,
    [MTF_OP_TOP_K_INDICES] = &mtf_op_top_k_indices,
    [MTF_OP_CUMSUM] = &mtf_op_cumsum,
    [MTF_OP_WHERE] = &mtf_op_where,
    [MTF_OP_TO_FLOAT] = &mtf_op_to_float,
    [MTF_OP_WRITE_AT] = &mtf_op_write_at,
    [MTF_OP_CAST] = &mtf_op_cast,
};

const mtf_op_def *mtf_op(mtf_op_kind kind) { return table[kind]; }

int mtf_op_dims_within(mtf_graph *g, const mtf_shape *part, const mtf_shape *whole, const char *op, const char *what) {
  for (int i = 0; i < part->rank; i++) {
    int j = mtf_shape_index_of(whole, part->dims[i].name);
    if (j < 0 || whole->dims[j].size != part->dims[i].size) {
      char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
      mtf_graph_fail(g, MTF_ERR_INVALID, "%s: dimension %s:%lld of %s %s is not in %s", op, part->dims[i].name,
                     (long long)part->dims[i].size, what, mtf_shape_format(part, a, sizeof a),
                     mtf_shape_format(whole, b, sizeof b));
      return 0;
    }
  }
  return 1;
}

int mtf_op_union_shape(mtf_graph *g, const mtf_shape *a, const mtf_shape *b, mtf_shape *out, const char *op) {
  *out = *a;
  for (int i = 0; i < b->rank; i++) {
    int j = mtf_shape_index_of(a, b->dims[i].name);
    if (j >= 0 && a->dims[j].size != b->dims[i].size) {
      char sa[MTF_SHAPE_STR_MAX], sb[MTF_SHAPE_STR_MAX];
      mtf_graph_fail(g, MTF_ERR_INVALID, "%s: dimension '%s' has size %lld in %s but %lld in %s", op,
                     b->dims[i].name, (long long)a->dims[j].size, mtf_shape_format(a, sa, sizeof sa),
                     (long long)b->dims[i].size, mtf_shape_format(b, sb, sizeof sb));
      return 0;
    }
    if (j < 0) {
      mtf_error err;
      if (mtf_shape_append(out, b->dims[i].name, b->dims[i].size, &err)) {
        mtf_graph_fail(g, err.code, "%s: %s", op, err.msg);
        return 0;
      }
    }
  }
  return 1;
}

int mtf_op_needs_dim(mtf_graph *g, const mtf_node *n, int k, const char *dim, const char *op) {
  const mtf_node *x = &g->nodes[n->inputs[k]];
  if (mtf_shape_has(&x->shape, dim)) return 1;
  char s[MTF_SHAPE_STR_MAX];
  mtf_graph_fail(g, MTF_ERR_INVALID, "%s of '%s' %s: no dimension '%s'", op, x->name,
                 mtf_shape_format(&x->shape, s, sizeof s), dim);
  return 0;
}

int mtf_op_float_inputs(mtf_graph *g, const mtf_node *n, int first, int last) {
  for (int k = first; k <= last && k < n->n_inputs; k++) {
    const mtf_node *x = &g->nodes[n->inputs[k]];
    if (x->dtype == MTF_F32) continue;
    mtf_graph_fail(g, MTF_ERR_INVALID, "%s: '%s' holds %s values; it takes float tensors (ids and labels go to "
                   "gather, one_hot and softmax_cross_entropy; mtf_to_float converts)", mtf_op(n->kind)->name, x->name, mtf_dtype_name(x->dtype));
    return 0;
  }
  return 1;
}

int mtf_op_reads_first_bf16(const mtf_node *n, int k) {
  (void)n;
  return k == 0;
}

int64_t mtf_op_flops_elements(const mtf_step *s) { return mtf_shape_num_elements(&s->out_shape); }

void mtf_grad_accumulate(mtf_grad_ctx *ctx, int target, mtf_tensor contribution) {
  mtf_graph *g = ctx->g;
  if (contribution < 0) return;
  if (!mtf_shape_equal(&g->nodes[contribution].shape, &g->nodes[target].shape))
    contribution = mtf_reduce_sum(g, contribution, &g->nodes[target].shape);
  ctx->grad[target] = ctx->grad[target] < 0 ? contribution : mtf_add(g, ctx->grad[target], contribution);
}

int mtf_grad_wanted(const mtf_grad_ctx *ctx, const mtf_node *node, int k) {
  return k < node->n_inputs && ctx->depends[node->inputs[k]];
}

int64_t mtf_ref_offset(const mtf_shape *walked, const int64_t *index, const mtf_shape *t) {
  int64_t offset = 0;
  for (int d = 0; d < t->rank; d++) {
    int j = mtf_shape_index_of(walked, t->dims[d].name);
    offset = offset * t->dims[d].size + (j >= 0 ? index[j] : 0);
  }
  return offset;
}

int mtf_ref_next(const mtf_shape *s, int64_t *index) {
  for (int d = s->rank - 1; d >= 0; d--) {
    if (++index[d] < s->dims[d].size) return 1;
    index[d] = 0;
  }
  return 0;
}
