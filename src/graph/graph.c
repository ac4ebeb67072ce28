/* Graph storage, error handling, inspection, and the named sources (inputs and variables, which the graph
 * indexes by name). Every node is added through mtf_graph_add_op, which asks the op's table entry to validate
 * it; the builders of the other ops live beside their entries in src/ops. */
#include "graph/graph.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_def.h"


mtf_graph *mtf_graph_create(uint64_t seed) {
  mtf_graph *g = calloc(1, sizeof *g);
  if (g) g->seed = seed;
  return g;
}

void mtf_graph_destroy(mtf_graph *g) {
  if (!g) return;
  free(g->nodes);
  free(g->assigns);
  free(g->variables);
  free(g->variable_index);
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

static int grow(mtf_graph *g, void **array, int *cap, int need, size_t elem) {
  if (need <= *cap) return 1;
  int cap2 = *cap ? 2 * *cap : 256;
  while (cap2 < need) cap2 *= 2;
  void *p = realloc(*array, elem * (size_t)cap2);
  if (!p) {
    mtf_graph_fail(g, MTF_ERR_NOMEM, "graph: out of memory at %d tensors", g->n_nodes);
    return 0;
  }
  *array = p;
  *cap = cap2;
  return 1;
}

int mtf_graph_add_op(mtf_graph *g, mtf_op_kind kind, int n_inputs, const int *inputs, const mtf_op_params *params,
                     const mtf_shape *shape) {
  if (g->error.code != MTF_OK) return MTF_NO_TENSOR;
  const mtf_op_def *def = mtf_op(kind);
  mtf_node n;
  memset(&n, 0, sizeof n);
  n.kind = kind;
  n.n_inputs = n_inputs;
  for (int k = 0; k < n_inputs; k++) {
    if (!mtf_graph_check(g, inputs[k], def->name)) return MTF_NO_TENSOR;
    n.inputs[k] = inputs[k];
  }
  if (params) n.params = *params;
  if (shape) n.shape = *shape;
  for (int k = 0; k < n_inputs && !def->takes_bf16; k++)
    if (g->nodes[inputs[k]].dtype == MTF_BF16)
      return mtf_graph_fail(g, MTF_ERR_INVALID, "%s: '%s' holds bfloat16 values; only einsum (of two bfloat16 operands) "
                            "and cast take them: mtf_cast it to float32 first", def->name, g->nodes[inputs[k]].name);
  if (def->infer && def->infer(g, &n) != MTF_OK) return MTF_NO_TENSOR;
  if (!grow(g, (void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(mtf_node))) return MTF_NO_TENSOR;
  if (kind == MTF_OP_VARIABLE &&
      !grow(g, (void **)&g->variables, &g->cap_variables, g->n_variables + 1, sizeof(int)))
    return MTF_NO_TENSOR;
  int id = g->n_nodes++;
  n.block = g->current_block;
  n.bf16_policy = g->matmul_dtype == MTF_BF16 || g->policy_sums;
  if (!n.name[0]) snprintf(n.name, sizeof n.name, "%s_%d", def->name, id);
  g->nodes[id] = n;
  if (kind == MTF_OP_VARIABLE) g->variables[g->n_variables++] = id;
  return id;
}

const mtf_shape *mtf_tensor_shape(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes ? &g->nodes[t].shape : NULL;
}

const char *mtf_tensor_name(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes ? g->nodes[t].name : "(no tensor)";
}

/* The hash slot of `name`: where it is, or the empty slot where it would go. */
static int variable_slot(const mtf_graph *g, const char *name) {
  unsigned mask = (unsigned)g->cap_index - 1, i = (unsigned)mtf_name_hash(name) & mask;
  while (g->variable_index[i] >= 0 && strcmp(g->nodes[g->variable_index[i]].name, name) != 0) i = (i + 1) & mask;
  return (int)i;
}

/* Keeps the variable index at most half full. */
static int index_variable(mtf_graph *g, int id) {
  if (2 * (g->n_variables + 1) > g->cap_index) {
    int cap = g->cap_index ? 2 * g->cap_index : 256;
    int *slots = malloc(sizeof(int) * (size_t)cap);
    if (!slots) return 0;
    free(g->variable_index);
    g->variable_index = slots;
    g->cap_index = cap;
    for (int i = 0; i < cap; i++) slots[i] = -1;
    for (int v = 0; v < g->n_variables; v++) slots[variable_slot(g, g->nodes[g->variables[v]].name)] = g->variables[v];
  }
  g->variable_index[variable_slot(g, g->nodes[id].name)] = id;
  return 1;
}

mtf_tensor mtf_find_variable(const mtf_graph *g, const char *name) {
  if (!g->cap_index) return MTF_NO_TENSOR;
  int found = g->variable_index[variable_slot(g, name)];
  return found >= 0 ? found : MTF_NO_TENSOR;
}

mtf_tensor mtf_set_name(mtf_graph *g, mtf_tensor t, const char *name) {
  if (!mtf_graph_check(g, t, "set_name")) return MTF_NO_TENSOR;
  snprintf(g->nodes[t].name, sizeof g->nodes[t].name, "%s", name);
  if (g->nodes[t].kind == MTF_OP_VARIABLE) { /* its name is its key: rebuild the index */
    free(g->variable_index);
    g->variable_index = NULL;
    g->cap_index = 0;
    if (!index_variable(g, t)) return mtf_graph_fail(g, MTF_ERR_NOMEM, "graph: out of memory");
  }
  return t;
}

static mtf_tensor named_source(mtf_graph *g, mtf_op_kind kind, const char *name, const mtf_shape *shape,
                               const mtf_op_params *params) {
  int id = mtf_graph_add_op(g, kind, 0, NULL, params, shape);
  if (id >= 0 && name) snprintf(g->nodes[id].name, sizeof g->nodes[id].name, "%s", name);
  if (id >= 0 && kind == MTF_OP_VARIABLE && !index_variable(g, id))
    return mtf_graph_fail(g, MTF_ERR_NOMEM, "graph: out of memory at %d variables", g->n_variables);
  return id;
}

mtf_tensor mtf_input(mtf_graph *g, const char *name, const mtf_shape *shape) {
  return named_source(g, MTF_OP_INPUT, name, shape, NULL);
}

mtf_tensor mtf_input_int(mtf_graph *g, const char *name, const mtf_shape *shape) {
  int id = named_source(g, MTF_OP_INPUT, name, shape, NULL);
  if (id >= 0) g->nodes[id].dtype = MTF_I32;
  return id;
}

mtf_dtype mtf_tensor_dtype(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes ? g->nodes[t].dtype : MTF_F32;
}

int mtf_tensor_is_variable(const mtf_graph *g, mtf_tensor t) {
  return t >= 0 && t < g->n_nodes && g->nodes[t].kind == MTF_OP_VARIABLE;
}

int mtf_graph_num_variables(const mtf_graph *g) { return g->n_variables; }

mtf_tensor mtf_graph_variable(const mtf_graph *g, int index) {
  return index >= 0 && index < g->n_variables ? g->variables[index] : MTF_NO_TENSOR;
}

int mtf_graph_dim_names(const mtf_graph *g, const char **names, int max) {
  int n_names = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int d = 0; d < g->nodes[i].shape.rank; d++) {
      const char *name = g->nodes[i].shape.dims[d].name;
      int seen = 0;
      for (int k = 0; k < n_names && !seen; k++) seen = strcmp(names[k], name) == 0;
      if (!seen && n_names < max) names[n_names++] = name;
    }
  return n_names;
}

mtf_tensor mtf_variable(mtf_graph *g, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  if (g->error.code == MTF_OK && mtf_find_variable(g, name) != MTF_NO_TENSOR)
    return mtf_graph_fail(g, MTF_ERR_INVALID, "variable '%s' is defined twice; variable names must be unique", name);
  mtf_op_params p = {.variable = {init, scale}};
  return named_source(g, MTF_OP_VARIABLE, name, shape, &p);
}

mtf_tensor mtf_transient_variable(mtf_graph *g, const char *name, const mtf_shape *shape) {
  mtf_tensor t = mtf_variable(g, name, shape, MTF_INIT_ZEROS, 0.0f);
  if (t >= 0) g->nodes[t].params.variable.transient = 1;
  return t;
}

int mtf_variable_is_transient(const mtf_graph *g, mtf_tensor t) {
  return mtf_tensor_is_variable(g, t) && g->nodes[t].params.variable.transient;
}

int mtf_recompute_begin(mtf_graph *g) {
  if (g->error.code != MTF_OK) return 0;
  if (g->current_block) {
    mtf_graph_fail(g, MTF_ERR_INVALID, "recompute_begin: block %d is still open; recompute blocks do not nest",
                   g->current_block);
    return 0;
  }
  return g->current_block = ++g->n_blocks;
}

void mtf_recompute_end(mtf_graph *g) { g->current_block = 0; }

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
  float scale = var->params.variable.scale;
  switch (var->params.variable.init) {
    case MTF_INIT_ZEROS: return 0.0f;
    case MTF_INIT_ONES: return scale != 0.0f ? scale : 1.0f;
    case MTF_INIT_NORMAL: return (float)(scale * mtf_normal(g->seed, stream, (uint64_t)index));
    case MTF_INIT_UNIFORM: return (float)(scale * (2.0 * mtf_uniform01(g->seed, stream, (uint64_t)index) - 1.0));
  }
  return 0.0f;
}
