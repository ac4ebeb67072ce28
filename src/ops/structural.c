/* Sources (inputs, variables), shape changes (reshape, rename), stop_gradient and one_hot. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_def.h"

static int input_infer(mtf_graph *g, mtf_node *n) {
  (void)g;
  n->dtype = MTF_F32; /* mtf_input_int sets MTF_I32 after */
  return MTF_OK;
}

static void input_reference(const mtf_ref_args *a) {
  memcpy(a->out, a->given, sizeof(double) * (size_t)mtf_shape_num_elements(&a->n->shape));
}

const mtf_op_def mtf_op_input = {"input", MTF_DIM_NONE, input_infer, NULL, mtf_lower_source, NULL, NULL, input_reference, 0, 0, 0, 0};

static void variable_reference(const mtf_ref_args *a) {
  int64_t total = mtf_shape_num_elements(&a->n->shape);
  for (int64_t e = 0; e < total; e++) a->out[e] = a->given ? a->given[e] : mtf_variable_value(a->g, a->n, e);
}

const mtf_op_def mtf_op_variable = {"variable", MTF_DIM_NONE, input_infer, NULL, mtf_lower_source, NULL, NULL, variable_reference, 0, 0, 0, 0};

mtf_tensor mtf_reshape(mtf_graph *g, mtf_tensor x, const mtf_shape *new_shape) {
  return mtf_graph_add_op(g, MTF_OP_RESHAPE, 1, &x, NULL, new_shape);
}

static int reshape_infer(mtf_graph *g, mtf_node *n) {
  const mtf_node *x = &g->nodes[n->inputs[0]];
  n->dtype = x->dtype;
  if (mtf_shape_num_elements(&x->shape) == mtf_shape_num_elements(&n->shape)) return MTF_OK;
  char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
  mtf_graph_fail(g, MTF_ERR_INVALID, "reshape of '%s': %s and %s have different numbers of elements", x->name,
                 mtf_shape_format(&x->shape, a, sizeof a), mtf_shape_format(&n->shape, b, sizeof b));
  return g->error.code;
}

static void reshape_gradient(mtf_grad_ctx *ctx, int self, mtf_tensor dy) {
  mtf_tensor x = ctx->g->nodes[self].inputs[0];
  mtf_shape shape = ctx->g->nodes[x].shape;
  mtf_grad_accumulate(ctx, x, mtf_reshape(ctx->g, dy, &shape));
}

static void copy_reference(const mtf_ref_args *a) {
  memcpy(a->out, a->in[0], sizeof(double) * (size_t)mtf_shape_num_elements(&a->n->shape));
}

const mtf_op_def mtf_op_reshape = {"reshape", MTF_DIM_NONE, reshape_infer, reshape_gradient, mtf_lower_reshape, NULL, NULL,
                                   copy_reference, 1, 0, 0, 0};

mtf_tensor mtf_rename(mtf_graph *g, mtf_tensor x, const char *old_dim, const char *new_dim) {
  if (!mtf_graph_check(g, x, "rename")) return MTF_NO_TENSOR;
  mtf_shape shape = g->nodes[x].shape;
  int i = mtf_shape_index_of(&shape, old_dim);
  if (i < 0) return mtf_graph_fail(g, MTF_ERR_INVALID, "rename of '%s': it has no dimension '%s'", g->nodes[x].name, old_dim);
  if (mtf_shape_has(&shape, new_dim) || !mtf_name_is_valid(new_dim))
    return mtf_graph_fail(g, MTF_ERR_INVALID, "rename of '%s': '%s' is already a dimension or not a valid name",
                          g->nodes[x].name, new_dim);
  snprintf(shape.dims[i].name, sizeof shape.dims[i].name, "%s", new_dim);
  return mtf_reshape(g, x, &shape);
}

mtf_tensor mtf_replace_dimensions(mtf_graph *g, mtf_tensor x, const mtf_shape *old_dims, const mtf_shape *new_dims) {
  if (!mtf_graph_check(g, x, "replace_dimensions")) return MTF_NO_TENSOR;
  const mtf_shape *shape = &g->nodes[x].shape;
  int start = old_dims->rank ? mtf_shape_index_of(shape, old_dims->dims[0].name) : -1;
  for (int i = 0; start >= 0 && i < old_dims->rank; i++)
    if (start + i >= shape->rank || strcmp(shape->dims[start + i].name, old_dims->dims[i].name) != 0) start = -1;
  if (start < 0)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "replace_dimensions of '%s': the old dims are not a contiguous run of it",
                          g->nodes[x].name);
  mtf_shape out;
  memset(&out, 0, sizeof out);
  mtf_error err;
  int rc = MTF_OK;
  for (int i = 0; i < start && !rc; i++) rc = mtf_shape_append(&out, shape->dims[i].name, shape->dims[i].size, &err);
  for (int i = 0; i < new_dims->rank && !rc; i++) rc = mtf_shape_append(&out, new_dims->dims[i].name, new_dims->dims[i].size, &err);
  for (int i = start + old_dims->rank; i < shape->rank && !rc; i++)
    rc = mtf_shape_append(&out, shape->dims[i].name, shape->dims[i].size, &err);
  if (rc) return mtf_graph_fail(g, rc, "replace_dimensions of '%s': %s", g->nodes[x].name, err.msg);
  return mtf_reshape(g, x, &out);
}

mtf_tensor mtf_stop_gradient(mtf_graph *g, mtf_tensor x) {
  return mtf_graph_add_op(g, MTF_OP_STOP_GRADIENT, 1, &x, NULL, NULL);
}

static int same_infer(mtf_graph *g, mtf_node *n) {
  n->shape = g->nodes[n->inputs[0]].shape;
  n->dtype = g->nodes[n->inputs[0]].dtype;
  return MTF_OK;
}

/* No gradient flows through: the entry has none. */
const mtf_op_def mtf_op_stop_gradient = {"stop_gradient", MTF_DIM_NONE, same_infer, NULL, mtf_lower_alias, NULL, NULL,
                                         copy_reference, 1, 0, 0, 0};

mtf_tensor mtf_one_hot(mtf_graph *g, mtf_tensor indices, const mtf_dim *dim) {
  if (!mtf_graph_check(g, indices, "one_hot")) return MTF_NO_TENSOR;
  mtf_shape out = g->nodes[indices].shape;
  mtf_error err;
  if (mtf_shape_append(&out, dim->name, dim->size, &err))
    return mtf_graph_fail(g, err.code, "one_hot of '%s': %s", g->nodes[indices].name, err.msg);
  mtf_op_params p;
  memset(&p, 0, sizeof p);
  snprintf(p.along.dim, sizeof p.along.dim, "%s", dim->name);
  return mtf_graph_add_op(g, MTF_OP_ONE_HOT, 1, &indices, &p, &out);
}

static int one_hot_infer(mtf_graph *g, mtf_node *n) {
  (void)g;
  n->dtype = MTF_F32;
  return MTF_OK;
}

static int one_hot_lower(mtf_lowering *lw, int node) { return mtf_lower_local(lw, node, 0); }

static void one_hot_reference(const mtf_ref_args *a) {
  const mtf_shape *s = &a->n->shape;
  int d = mtf_shape_index_of(s, a->n->params.along.dim);
  int64_t index[MTF_MAX_RANK] = {0};
  do a->out[mtf_ref_offset(s, index, s)] = llround(a->in[0][mtf_ref_offset(s, index, a->in_shape[0])]) == index[d];
  while (mtf_ref_next(s, index));
}

const mtf_op_def mtf_op_one_hot = {"one_hot", MTF_DIM_IN_OUTPUT, one_hot_infer, NULL, one_hot_lower, mtf_op_flops_elements, NULL,
                                   one_hot_reference, 0, 0, 0, 0};
