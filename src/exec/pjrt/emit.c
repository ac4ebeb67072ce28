/* The emitter's driver: checks that the per-rank plans are one SPMD program, lays out the module's
 * parameters and results (emit.h), walks plan 0's steps keeping the current SSA value of every buffer,
 * and hands each step to the file of its concern (emit_ops.c, emit_fused.c, emit_select.c,
 * emit_attention.c, emit_comm.c). Buffers are values, not memory: the memory planner's reuse of arena
 * offsets does not matter here, only which buffer a step reads and writes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mesh.h"
#include "exec/pjrt/emit_internal.h"
#include "ops/op_def.h"

int e_fail(h_emitter *E, const mtf_step *st, const char *what) {
  const mtf_plan *p = E->plans[0];
  return mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: step %d (%s, op %s, phase %d): %s", E->step,
                       st->node >= 0 && st->node < p->graph->n_nodes ? p->graph->nodes[st->node].name : "?",
                       st->kind == MTF_STEP_KERNEL ? mtf_op(st->op)->name : "collective", (int)st->phase, what);
}

void e_rank_values(h_emitter *E, int64_t (*get)(const mtf_step *st, void *arg), void *arg, int64_t *values) {
  for (int r = 0; r < E->n_plans; r++) values[r] = get(&E->plans[r]->steps[E->step], arg);
}

/* A kernel's operands and result have the step's dtypes; the data movement steps (slices, copies,
 * collectives) carry none and move their buffers' values as they are: bfloat16 stays bf16. */
static h_elem in_elem(const h_emitter *E, const mtf_step *st, int k) {
  return h_elem_of(st->kind == MTF_STEP_KERNEL ? st->in_dtype[k] : E->plans[0]->buffers[st->in[k]].dtype);
}

static h_elem out_elem(const h_emitter *E, const mtf_step *st) {
  return h_elem_of(st->kind == MTF_STEP_KERNEL ? st->out_dtype : E->plans[0]->buffers[st->out].dtype);
}

int e_input(h_emitter *E, const mtf_step *st, int k) {
  if (k < 0 || k >= st->n_in) {
    e_fail(E, st, "the emitter reads an input the step does not have");
    return h_splat(E, 0.0, H_F32, h_shape_of(&st->out_shape));
  }
  int b = st->in[k], v = E->buffer_value[b];
  h_shape s = h_shape_of(&st->in_shape[k]);
  h_elem e = in_elem(E, st, k);
  if (v < 0) return h_splat(E, 0.0, e, s); /* never written: the executor's zero-filled inputs */
  if (h_shape_count(&h_t(E, v)->s) != h_shape_count(&s)) {
    e_fail(E, st, "an input buffer holds a value of another size");
    return h_splat(E, 0.0, e, s);
  }
  v = h_convert(E, h_reshape(E, v, s), e);
  /* A bf16-stored activation (lower/storage.c) read by an op whose math is fp32 (every kernel but the cast and
   * the einsum, which take bfloat16 as such): widened here, as the cpu and cuda kernels widen it. */
  if (e == H_BF16 && st->kind == MTF_STEP_KERNEL && st->op != MTF_OP_CAST && st->op != MTF_OP_EINSUM)
    v = h_convert(E, v, H_F32);
  return v;
}

void e_output(h_emitter *E, const mtf_step *st, int value) {
  E->buffer_value[st->out] = h_convert(E, h_reshape(E, value, h_shape_of(&st->out_shape)), out_elem(E, st));
}

/* Same steps, kinds, ops, phases, buffers and local shapes on every rank: only integers may differ. */
static int check_spmd(h_emitter *E) {
  const mtf_plan *p0 = E->plans[0];
  if (E->n_plans != mtf_mesh_size(&p0->mesh))
    return mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: %d plans for a mesh of %d ranks", E->n_plans,
                         mtf_mesh_size(&p0->mesh));
  for (int r = 0; r < E->n_plans; r++) {
    const mtf_plan *p = E->plans[r];
    if (p->mesh_rank != r)
      return mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: plan %d is for mesh rank %d", r, p->mesh_rank);
    if (p->n_steps != p0->n_steps || p->n_buffers != p0->n_buffers || p->n_fetches != p0->n_fetches)
      return mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: the plan of rank %d has %d steps and %d buffers, "
                           "rank 0's %d and %d: not one SPMD program", r, p->n_steps, p->n_buffers, p0->n_steps,
                           p0->n_buffers);
    for (int i = 0; i < p0->n_steps; i++) {
      const mtf_step *a = &p0->steps[i], *b = &p->steps[i];
      int same = a->kind == b->kind && a->op == b->op && a->phase == b->phase && a->out == b->out &&
                 a->n_in == b->n_in && a->axes == b->axes && a->tensor_axis == b->tensor_axis &&
                 a->concat_axis == b->concat_axis && mtf_shape_equal(&a->out_shape, &b->out_shape);
      for (int k = 0; same && k < a->n_in; k++)
        same = a->in[k] == b->in[k] && mtf_shape_equal(&a->in_shape[k], &b->in_shape[k]);
      if (!same)
        return mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: step %d differs between ranks 0 and %d beyond "
                             "offsets: not one SPMD program", i, r);
    }
  }
  return MTF_OK;
}

static mtf_shape node_local_shape(const mtf_plan *p, int node) {
  return mtf_layout_slice_shape(&p->layouts[node], &p->mesh);
}

static int add_value(mtf_pjrt_value **list, int *n, mtf_pjrt_value v) {
  mtf_pjrt_value *grown = realloc(*list, sizeof(mtf_pjrt_value) * (size_t)(*n + 1));
  if (!grown) return MTF_ERR_NOMEM;
  grown[(*n)++] = v;
  *list = grown;
  return MTF_OK;
}

static h_elem h_of_pjrt(mtf_pjrt_type e) { return e == MTF_PJRT_S32 ? H_S32 : H_F32; }

/* Parameters and results (emit.h's order); param_of_buffer[b]: the parameter holding buffer b's initial value. */
static int layout_io(h_emitter *E, mtf_pjrt_module *m, int *param_of_buffer, int *written) {
  const mtf_plan *p = E->plans[0];
  for (int b = 0; b < p->n_buffers; b++) param_of_buffer[b] = -1;
  for (int i = 0; i < p->n_steps; i++) written[p->steps[i].out] = 1;
  for (int pass = 0; pass < 2; pass++) {
    mtf_buffer_kind kind = pass == 0 ? MTF_BUF_VARIABLE : MTF_BUF_INPUT;
    int n_slots = pass == 0 ? p->n_variables : p->n_inputs;
    for (int slot = 0; slot < n_slots; slot++)
      for (int b = 0; b < p->n_buffers; b++) {
        const mtf_buffer *buf = &p->buffers[b];
        if (buf->kind != kind || buf->offset != slot) continue;
        mtf_pjrt_value v = {.kind = pass == 0 ? MTF_PJRT_VARIABLE : MTF_PJRT_INPUT, .node = buf->node, .slot = slot,
                            .elem = buf->dtype == MTF_I32 ? MTF_PJRT_S32 : MTF_PJRT_F32,
                            .shape = node_local_shape(p, buf->node), .elements = buf->elements, .aliases = -1};
        param_of_buffer[b] = m->n_params;
        MTF_CHECK(add_value(&m->params, &m->n_params, v));
        break;
      }
  }
  mtf_pjrt_value offset = {.kind = MTF_PJRT_RANDOM_OFFSET, .node = -1, .slot = 0, .elem = MTF_PJRT_S32,
                           .elements = 2, .aliases = -1};
  mtf_shape_append(&offset.shape, "_words", 2, NULL);
  MTF_CHECK(add_value(&m->params, &m->n_params, offset));
  mtf_pjrt_value micro = {.kind = MTF_PJRT_MICROBATCH, .node = -1, .slot = 0, .elem = MTF_PJRT_S32, .elements = 1,
                          .aliases = -1};
  MTF_CHECK(add_value(&m->params, &m->n_params, micro));
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].kind == MTF_BUF_VARIABLE && written[b] && param_of_buffer[b] >= 0) {
      mtf_pjrt_value v = m->params[param_of_buffer[b]];
      v.aliases = param_of_buffer[b];
      MTF_CHECK(add_value(&m->results, &m->n_results, v));
    }
  for (int f = 0; f < p->n_fetches; f++) {
    int node = p->fetch_nodes[f], b = p->value_buffer[node];
    if (b < 0) return mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: fetch '%s' has no buffer", p->graph->nodes[node].name);
    mtf_pjrt_value v = {.kind = MTF_PJRT_FETCH, .node = node, .slot = f,
                        .elem = p->buffers[b].dtype == MTF_I32 ? MTF_PJRT_S32 : MTF_PJRT_F32,
                        .shape = node_local_shape(p, node), .elements = 0, .aliases = -1};
    v.elements = mtf_shape_num_elements(&v.shape);
    MTF_CHECK(add_value(&m->results, &m->n_results, v));
  }
  return MTF_OK;
}

static e_op_fn op_table[MTF_OP_COUNT];
static pthread_once_t op_table_once = PTHREAD_ONCE_INIT;

static void fill_op_table(void) {
  e_ops_elementwise(op_table);
  e_ops_fused(op_table);
  e_ops_select(op_table);
  e_ops_attention(op_table);
}

static int emit_step(h_emitter *E, const mtf_step *st) {
  if (st->kind != MTF_STEP_KERNEL) return e_collective(E, st);
  /* one program per step: nothing is skipped between runs, so no cast can rely on a copy an update wrote */
  if (st->bf16_copy || st->skip_when_copy_current)
    return e_fail(E, st, "a plan with bfloat16 weight copies (mtf_plan_options.bf16_weight_copies), which the "
                         "emitter does not compile: make pjrt plans without them");
  pthread_once(&op_table_once, fill_op_table);
  e_op_fn emit = st->op >= 0 && st->op < MTF_OP_COUNT ? op_table[st->op] : NULL;
  return emit ? emit(E, st) : e_fail(E, st, "the emitter has no StableHLO for this op");
}

static int emit_module(h_emitter *E, mtf_pjrt_module *m) {
  const mtf_plan *p = E->plans[0];
  int *param_of_buffer = malloc(sizeof(int) * ((size_t)p->n_buffers + 1));
  int *written = calloc((size_t)p->n_buffers + 1, sizeof(int));
  E->buffer_value = malloc(sizeof(int) * ((size_t)p->n_buffers + 1));
  if (!param_of_buffer || !written || !E->buffer_value) {
    free(param_of_buffer);
    free(written);
    return mtf_error_set(E->err, MTF_ERR_NOMEM, "pjrt emitter: out of memory");
  }
  int rc = layout_io(E, m, param_of_buffer, written);
  /* Parameters are %v0 .. %v(n_params - 1). */
  for (int i = 0; rc == MTF_OK && i < m->n_params; i++) h_new(E, h_shape_of(&m->params[i].shape), h_of_pjrt(m->params[i].elem));
  E->random_offset = m->n_params - 2;
  E->microbatch = m->n_params - 1;
  for (int b = 0; b < p->n_buffers; b++) E->buffer_value[b] = param_of_buffer[b];
  char t[160];
  if (rc == MTF_OK) {
    h_printf(E, "module @mtf_plan attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = %d : i32} {\n",
             E->n_plans);
    h_printf(E, "  func.func public @main(");
    for (int i = 0; i < m->n_params; i++) {
      h_printf(E, "%s%%v%d: %s", i ? ", " : "", i, h_type_text(h_t(E, i), t));
      /* A written variable's new value may take its old buffer (the runtime donates it): XLA then updates
       * the variable in place instead of allocating a result and copying (JAX's attribute for donation). */
      for (int r = 0; r < m->n_results; r++)
        if (m->results[r].aliases == i) h_printf(E, " {tf.aliasing_output = %d : i32}", r);
    }
    h_printf(E, ") -> (");
    for (int i = 0; i < m->n_results; i++) {
      h_type rt = {h_shape_of(&m->results[i].shape), h_of_pjrt(m->results[i].elem)};
      h_printf(E, "%s%s", i ? ", " : "", h_type_text(&rt, t));
    }
    h_printf(E, ") {\n");
  }
  for (int i = 0; rc == MTF_OK && i < p->n_steps; i++) {
    E->step = i;
    h_printf(E, "    // step %d: %s\n", i, p->graph->nodes[p->steps[i].node].name);
    rc = emit_step(E, &p->steps[i]);
    if (rc == MTF_OK && E->err->code) rc = E->err->code; /* a helper's recorded failure */
  }
  int *outs = malloc(sizeof(int) * ((size_t)m->n_results + 1));
  if (!outs && rc == MTF_OK) rc = mtf_error_set(E->err, MTF_ERR_NOMEM, "pjrt emitter: out of memory");
  for (int i = 0; rc == MTF_OK && i < m->n_results; i++) {
    const mtf_pjrt_value *r = &m->results[i];
    int b = r->kind == MTF_PJRT_FETCH ? p->value_buffer[r->node] : -1;
    for (int k = 0; b < 0 && k < p->n_buffers; k++)
      if (param_of_buffer[k] == r->aliases) b = k;
    int v = b >= 0 ? E->buffer_value[b] : -1;
    if (v < 0) {
      rc = mtf_error_set(E->err, MTF_ERR_INVALID, "pjrt emitter: result '%s' is never computed", p->graph->nodes[r->node].name);
      break;
    }
    outs[i] = h_convert(E, h_reshape(E, v, h_shape_of(&r->shape)), h_of_pjrt(r->elem));
  }
  if (rc == MTF_OK) {
    h_printf(E, "    \"func.return\"(");
    for (int i = 0; i < m->n_results; i++) h_printf(E, "%s%%v%d", i ? ", " : "", outs[i]);
    h_printf(E, ") : (");
    for (int i = 0; i < m->n_results; i++) h_printf(E, "%s%s", i ? ", " : "", h_type_text(h_t(E, outs[i]), t));
    h_printf(E, ") -> ()\n  }\n}\n");
  }
  free(outs);
  free(param_of_buffer);
  free(written);
  return rc;
}

int mtf_pjrt_emit(const mtf_plan *const *plans, int n_plans, const mtf_pjrt_emit_options *options,
                  mtf_pjrt_module *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  if (!plans || n_plans < 1 || !plans[0])
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt emitter: no plans");
  err->code = MTF_OK;
  h_emitter E = {.plans = plans, .n_plans = n_plans, .replica = -1, .err = err};
  if (options) E.options = *options;
  int rc = check_spmd(&E);
  if (rc == MTF_OK) rc = emit_module(&E, out);
  if (rc == MTF_OK && E.nomem) rc = mtf_error_set(err, MTF_ERR_NOMEM, "pjrt emitter: out of memory");
  free(E.types);
  free(E.buffer_value);
  if (rc != MTF_OK) {
    free(E.text);
    mtf_pjrt_module_free(out);
    return rc;
  }
  out->text = E.text;
  out->length = E.len;
  out->n_devices = n_plans;
  out->n_collectives = E.n_collectives;
  return MTF_OK;
}

void mtf_pjrt_module_free(mtf_pjrt_module *m) {
  if (!m) return;
  free(m->text);
  free(m->params);
  free(m->results);
  memset(m, 0, sizeof *m);
}

int mtf_pjrt_plans_create(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules, int n_fetches,
                          const mtf_tensor *fetches, const mtf_plan_options *options, mtf_plan ***plans, int *n_plans,
                          mtf_error *err) {
  int n = mtf_mesh_size(mesh);
  *plans = calloc((size_t)n, sizeof(mtf_plan *));
  *n_plans = 0;
  if (!*plans) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: out of memory");
  for (int r = 0; r < n; r++) {
    int rc = mtf_plan_create_with_options(g, mesh, rules, r, n_fetches, fetches, options, &(*plans)[r], err);
    if (rc) {
      mtf_pjrt_plans_destroy(*plans, r);
      *plans = NULL;
      return rc;
    }
  }
  *n_plans = n;
  return MTF_OK;
}

void mtf_pjrt_plans_destroy(mtf_plan **plans, int n_plans) {
  if (!plans) return;
  for (int r = 0; r < n_plans; r++) mtf_plan_destroy(plans[r]);
  free(plans);
}
