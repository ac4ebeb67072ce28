/* Graph storage, error handling, the primitive builders and the counter-based random numbers. */
#include "graph/graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *op_names[] = {"input", "variable", "constant", "range", "einsum", "broadcast", "reduce_max",
                                 "binary", "unary", "one_hot", "random", "reshape", "stop_gradient"};

mtf_graph *mtf_graph_create(uint64_t seed) {
  mtf_graph *g = calloc(1, sizeof *g);
  if (g) g->seed = seed;
  return g;
}

void mtf_graph_destroy(mtf_graph *g) {
  if (!g) return;
  free(g->nodes);
  free(g->assigns);
  free(g);
}

int mtf_graph_status(const mtf_graph *g, mtf_error *err) {
  if (g->error.code != MTF_OK && err) *err = g->error;
  return g->error.code;
}

int mtf_graph_fail(mtf_graph *g, int code, const char *fmt, ...) {
  if (g->error.code == MTF_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error.msg, sizeof g->error.msg, fmt, ap);
    va_end(ap);
    g->error.code = code;
  }
  return MTF_NO_TENSOR;
}

int mtf_graph_check(mtf_graph *g, mtf_tensor t, const char *op) {
  if (g->error.code != MTF_OK) return 0;
  if (t < 0 || t >= g->n_nodes) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "%s: tensor %d is not a tensor of this graph", op, t);
    return 0;
  }
  return 1;
}

int mtf_graph_add(mtf_graph *g, const mtf_node *node) {
  if (g->error.code != MTF_OK) return MTF_NO_TENSOR;
  if (g->n_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? 2 * g->cap_nodes : 256;
    mtf_node *nodes = realloc(g->nodes, sizeof *nodes * (size_t)cap);
    if (!nodes) return mtf_graph_fail(g, MTF_ERR_NOMEM, "graph: out of memory at %d tensors", g->n_nodes);
    g->nodes = nodes;
    g->cap_nodes = cap;
  }
  int id = g->n_nodes++;
  g->nodes[id] = *node;
  if (!g->nodes[id].name[0]) snprintf(g->nodes[id].name, sizeof g->nodes[id].name, "%s_%d", op_names[node->kind], id);
  return id;
}

const mtf_shape *mtf_tensor_shape(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes ? &g->nodes[t].shape : NULL;
}

const char *mtf_tensor_name(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes ? g->nodes[t].name : "(no tensor)";
}

mtf_tensor mtf_find_variable(const mtf_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == MTF_OP_VARIABLE && strcmp(g->nodes[i].name, name) == 0) return i;
  return MTF_NO_TENSOR;
}

mtf_tensor mtf_set_name(mtf_graph *g, mtf_tensor t, const char *name) {
  if (!mtf_graph_check(g, t, "set_name")) return MTF_NO_TENSOR;
  snprintf(g->nodes[t].name, sizeof g->nodes[t].name, "%s", name);
  return t;
}

static mtf_node node_of(mtf_op_kind kind, const mtf_shape *shape) {
  mtf_node n;
  memset(&n, 0, sizeof n);
  n.kind = kind;
  n.shape = *shape;
  return n;
}

mtf_tensor mtf_input(mtf_graph *g, const char *name, const mtf_shape *shape) {
  mtf_node n = node_of(MTF_OP_INPUT, shape);
  snprintf(n.name, sizeof n.name, "%s", name);
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_input_int(mtf_graph *g, const char *name, const mtf_shape *shape) {
  mtf_node n = node_of(MTF_OP_INPUT, shape);
  snprintf(n.name, sizeof n.name, "%s", name);
  n.dtype = MTF_I32;
  return mtf_graph_add(g, &n);
}

mtf_dtype mtf_tensor_dtype(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes ? g->nodes[t].dtype : MTF_F32;
}

int mtf_tensor_is_variable(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes && g->nodes[t].kind == MTF_OP_VARIABLE;
}

int mtf_graph_num_variables(const mtf_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == MTF_OP_VARIABLE;
  return n;
}

mtf_tensor mtf_graph_variable(const mtf_graph *g, int index) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == MTF_OP_VARIABLE && index-- == 0) return i;
  return MTF_NO_TENSOR;
}

void mtf_layout_check_graph(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules,
                            mtf_warnings *warnings) {
  mtf_layout_rules_check_mesh(rules, mesh, warnings);
  /* The distinct dimension names of the graph, for the did-you-mean. */
  const char *names[256];
  int n_names = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int d = 0; d < g->nodes[i].shape.rank; d++) {
      const char *name = g->nodes[i].shape.dims[d].name;
      int seen = 0;
      for (int k = 0; k < n_names && !seen; k++) seen = strcmp(names[k], name) == 0;
      if (!seen && n_names < (int)(sizeof names / sizeof names[0])) names[n_names++] = name;
    }
  for (int r = 0; r < rules->count; r++) {
    const char *dim = rules->rules[r].dim;
    int found = 0;
    for (int k = 0; k < n_names && !found; k++) found = strcmp(names[k], dim) == 0;
    if (found) continue;
    const char *hint = mtf_closest_name(dim, names, n_names);
    mtf_warn(warnings, "layout rule '%s:%s': no tensor of the model has a dimension '%s'%s%s%s; the rule is ignored",
             dim, rules->rules[r].axis, dim, hint ? " (did you mean '" : "", hint ? hint : "", hint ? "'?)" : "");
  }
}

mtf_tensor mtf_variable(mtf_graph *g, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == MTF_OP_VARIABLE && strcmp(g->nodes[i].name, name) == 0)
      return mtf_graph_fail(g, MTF_ERR_INVALID, "variable '%s' is defined twice; variable names must be unique", name);
  mtf_node n = node_of(MTF_OP_VARIABLE, shape);
  snprintf(n.name, sizeof n.name, "%s", name);
  n.init = init;
  n.a = scale;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_constant(mtf_graph *g, const mtf_shape *shape, float value) {
  mtf_node n = node_of(MTF_OP_CONSTANT, shape);
  n.a = value;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_range(mtf_graph *g, const mtf_dim *dim) {
  mtf_shape shape = {0};
  shape.rank = 1;
  shape.dims[0] = *dim;
  return mtf_graph_add(g, &(mtf_node){.kind = MTF_OP_RANGE, .shape = shape});
}

/* Checks that every dim of `part` is in `whole` with the same size. */
static int dims_within(mtf_graph *g, const mtf_shape *part, const mtf_shape *whole, const char *op,
                       const char *what) {
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

/* Union of two shapes by name (a's dims, then b's new ones); sizes must agree. */
static int union_shape(mtf_graph *g, const mtf_shape *a, const mtf_shape *b, mtf_shape *out, const char *op) {
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

mtf_tensor mtf_einsum(mtf_graph *g, int n_inputs, const mtf_tensor *inputs, const mtf_shape *output_shape) {
  if (n_inputs < 1 || n_inputs > 2) return mtf_graph_fail(g, MTF_ERR_INVALID, "einsum takes 1 or 2 inputs, not %d", n_inputs);
  mtf_shape all;
  memset(&all, 0, sizeof all);
  for (int i = 0; i < n_inputs; i++) {
    if (!mtf_graph_check(g, inputs[i], "einsum")) return MTF_NO_TENSOR;
    if (!union_shape(g, &all, &g->nodes[inputs[i]].shape, &all, "einsum")) return MTF_NO_TENSOR;
  }
  if (!dims_within(g, output_shape, &all, "einsum", "output")) return MTF_NO_TENSOR;
  mtf_node n = node_of(MTF_OP_EINSUM, output_shape);
  n.n_inputs = n_inputs;
  for (int i = 0; i < n_inputs; i++) n.inputs[i] = inputs[i];
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_einsum2(mtf_graph *g, mtf_tensor a, mtf_tensor b, const mtf_shape *output_shape) {
  mtf_tensor inputs[2] = {a, b};
  return mtf_einsum(g, 2, inputs, output_shape);
}

mtf_tensor mtf_reduce_sum(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  return mtf_einsum(g, 1, &x, output_shape);
}

mtf_tensor mtf_reduce_mean(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  if (!mtf_graph_check(g, x, "reduce_mean")) return MTF_NO_TENSOR;
  mtf_tensor sum = mtf_reduce_sum(g, x, output_shape);
  if (sum < 0) return MTF_NO_TENSOR;
  double ratio = (double)mtf_shape_num_elements(&g->nodes[sum].shape) /
                 (double)mtf_shape_num_elements(&g->nodes[x].shape);
  return mtf_scalar_multiply(g, sum, (float)ratio);
}

mtf_tensor mtf_reduce_max(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  if (!mtf_graph_check(g, x, "reduce_max")) return MTF_NO_TENSOR;
  if (!dims_within(g, output_shape, &g->nodes[x].shape, "reduce_max", "output")) return MTF_NO_TENSOR;
  mtf_node n = node_of(MTF_OP_REDUCE_MAX, output_shape);
  n.n_inputs = 1;
  n.inputs[0] = x;
  return mtf_graph_add(g, &n);
}

static int shape_without(mtf_graph *g, mtf_tensor x, const char *dim, mtf_shape *out, const char *op) {
  if (!mtf_graph_check(g, x, op)) return 0;
  mtf_error err;
  if (mtf_shape_remove(&g->nodes[x].shape, dim, out, &err)) {
    mtf_graph_fail(g, err.code, "%s of '%s': %s", op, g->nodes[x].name, err.msg);
    return 0;
  }
  return 1;
}

mtf_tensor mtf_reduce_sum_dim(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_shape out;
  return shape_without(g, x, dim, &out, "reduce_sum") ? mtf_reduce_sum(g, x, &out) : MTF_NO_TENSOR;
}

mtf_tensor mtf_reduce_max_dim(mtf_graph *g, mtf_tensor x, const char *dim) {
  mtf_shape out;
  return shape_without(g, x, dim, &out, "reduce_max") ? mtf_reduce_max(g, x, &out) : MTF_NO_TENSOR;
}

mtf_tensor mtf_broadcast(mtf_graph *g, mtf_tensor x, const mtf_shape *output_shape) {
  if (!mtf_graph_check(g, x, "broadcast")) return MTF_NO_TENSOR;
  if (!dims_within(g, &g->nodes[x].shape, output_shape, "broadcast", "input")) return MTF_NO_TENSOR;
  mtf_node n = node_of(MTF_OP_BROADCAST, output_shape);
  n.n_inputs = 1;
  n.inputs[0] = x;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_binary(mtf_graph *g, mtf_tensor x, mtf_tensor y, mtf_binary_kind kind) {
  if (!mtf_graph_check(g, x, "binary op") || !mtf_graph_check(g, y, "binary op")) return MTF_NO_TENSOR;
  mtf_shape out;
  if (!union_shape(g, &g->nodes[x].shape, &g->nodes[y].shape, &out, "elementwise op")) return MTF_NO_TENSOR;
  mtf_node n = node_of(MTF_OP_BINARY, &out);
  n.n_inputs = 2;
  n.inputs[0] = x;
  n.inputs[1] = y;
  n.sub = kind;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_unary(mtf_graph *g, mtf_tensor x, mtf_unary_kind kind, float a, float b) {
  if (!mtf_graph_check(g, x, "unary op")) return MTF_NO_TENSOR;
  mtf_node n = node_of(MTF_OP_UNARY, &g->nodes[x].shape);
  n.n_inputs = 1;
  n.inputs[0] = x;
  n.sub = kind;
  n.a = a;
  n.b = b;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_add(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_ADD); }
mtf_tensor mtf_subtract(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_SUB); }
mtf_tensor mtf_multiply(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_MUL); }
mtf_tensor mtf_divide(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_DIV); }
mtf_tensor mtf_equal(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_EQUAL); }
mtf_tensor mtf_less_equal(mtf_graph *g, mtf_tensor a, mtf_tensor b) { return mtf_binary(g, a, b, MTF_BIN_LESS_EQUAL); }
mtf_tensor mtf_scalar_add(mtf_graph *g, mtf_tensor x, float c) { return mtf_unary(g, x, MTF_UN_AFFINE, 1.0f, c); }
mtf_tensor mtf_scalar_multiply(mtf_graph *g, mtf_tensor x, float c) { return mtf_unary(g, x, MTF_UN_AFFINE, c, 0.0f); }
mtf_tensor mtf_exp(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_EXP, 0, 0); }
mtf_tensor mtf_log(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_LOG, 0, 0); }
mtf_tensor mtf_rsqrt(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_RSQRT, 0, 0); }
mtf_tensor mtf_sqrt(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SQRT, 0, 0); }
mtf_tensor mtf_square(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SQUARE, 0, 0); }
mtf_tensor mtf_tanh(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_TANH, 0, 0); }
mtf_tensor mtf_sigmoid(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_SIGMOID, 0, 0); }
mtf_tensor mtf_relu(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_RELU, 0, 0); }
mtf_tensor mtf_gelu(mtf_graph *g, mtf_tensor x) { return mtf_unary(g, x, MTF_UN_GELU, 0, 0); }

mtf_tensor mtf_stop_gradient(mtf_graph *g, mtf_tensor x) {
  if (!mtf_graph_check(g, x, "stop_gradient")) return MTF_NO_TENSOR;
  mtf_node n = node_of(MTF_OP_STOP_GRADIENT, &g->nodes[x].shape);
  n.n_inputs = 1;
  n.inputs[0] = x;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_one_hot(mtf_graph *g, mtf_tensor indices, const mtf_dim *dim) {
  if (!mtf_graph_check(g, indices, "one_hot")) return MTF_NO_TENSOR;
  mtf_shape out = g->nodes[indices].shape;
  mtf_error err;
  if (mtf_shape_append(&out, dim->name, dim->size, &err))
    return mtf_graph_fail(g, err.code, "one_hot of '%s': %s", g->nodes[indices].name, err.msg);
  mtf_node n = node_of(MTF_OP_ONE_HOT, &out);
  n.n_inputs = 1;
  n.inputs[0] = indices;
  snprintf(n.dim_name, sizeof n.dim_name, "%s", dim->name);
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_random_keep(mtf_graph *g, const mtf_shape *shape, float keep, uint64_t key) {
  mtf_node n = node_of(MTF_OP_RANDOM_KEEP, shape);
  n.a = keep;
  n.key = key;
  return mtf_graph_add(g, &n);
}

mtf_tensor mtf_reshape(mtf_graph *g, mtf_tensor x, const mtf_shape *new_shape) {
  if (!mtf_graph_check(g, x, "reshape")) return MTF_NO_TENSOR;
  const mtf_shape *old = &g->nodes[x].shape;
  if (mtf_shape_num_elements(old) != mtf_shape_num_elements(new_shape)) {
    char a[MTF_SHAPE_STR_MAX], b[MTF_SHAPE_STR_MAX];
    return mtf_graph_fail(g, MTF_ERR_INVALID, "reshape of '%s': %s and %s have different numbers of elements",
                          g->nodes[x].name, mtf_shape_format(old, a, sizeof a),
                          mtf_shape_format(new_shape, b, sizeof b));
  }
  mtf_node n = node_of(MTF_OP_RESHAPE, new_shape);
  n.n_inputs = 1;
  n.inputs[0] = x;
  return mtf_graph_add(g, &n);
}

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

int mtf_assign(mtf_graph *g, mtf_tensor var, mtf_tensor value) {
  if (!mtf_graph_check(g, var, "assign") || !mtf_graph_check(g, value, "assign")) return g->error.code;
  if (g->nodes[var].kind != MTF_OP_VARIABLE || !mtf_shape_equal(&g->nodes[var].shape, &g->nodes[value].shape)) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "assign: '%s' is not a variable with the shape of '%s'", g->nodes[var].name,
                   g->nodes[value].name);
    return g->error.code;
  }
  if (g->n_assigns == g->cap_assigns) {
    int cap = g->cap_assigns ? 2 * g->cap_assigns : 64;
    mtf_assign_pair *assigns = realloc(g->assigns, sizeof *assigns * (size_t)cap);
    if (!assigns) {
      mtf_graph_fail(g, MTF_ERR_NOMEM, "assign: out of memory");
      return g->error.code;
    }
    g->assigns = assigns;
    g->cap_assigns = cap;
  }
  g->assigns[g->n_assigns++] = (mtf_assign_pair){var, value};
  return MTF_OK;
}

float mtf_variable_value(const mtf_graph *g, const mtf_node *var, int64_t index) {
  uint64_t stream = mtf_name_hash(var->name);
  switch (var->init) {
    case MTF_INIT_ZEROS: return 0.0f;
    case MTF_INIT_ONES: return var->a != 0.0f ? var->a : 1.0f;
    case MTF_INIT_NORMAL: return (float)(var->a * mtf_normal(g->seed, stream, (uint64_t)index));
    case MTF_INIT_UNIFORM: return (float)(var->a * (2.0 * mtf_uniform01(g->seed, stream, (uint64_t)index) - 1.0));
  }
  return 0.0f;
}
