/* The executor: owns a plan's memory on one rank and runs its steps in order, kernels through the
 * backend vtable and collectives through the communicator. Nothing is decided per step at run time. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "exec/backend.h"
#include "lower/plan.h"

struct mtf_session {
  mtf_plan *plan;
  mtf_comm *comm;
  const mtf_backend_ops *ops;
  mtf_session_options options;
  float *arena;
  float **variables; /* by storage slot */
  float **inputs;
  int *poison_start, *poison_list; /* CSR: arena buffers whose last reader is step s */
  char *borrowed;                  /* per variable slot: storage owned by another session */
  uint64_t random_offset;
  int threads;
  double comm_seconds;
  int64_t allocated_bytes;
};

static float *buffer_data(const mtf_session *s, int buffer) {
  const mtf_buffer *b = &s->plan->buffers[buffer];
  switch (b->kind) {
    case MTF_BUF_ARENA: return s->arena + b->offset;
    case MTF_BUF_VARIABLE: return s->variables[b->offset];
    case MTF_BUF_INPUT: return s->inputs[b->offset];
  }
  return NULL;
}

/* A variable's initial slice: each element from its global index, so every layout starts equal. */
static void init_variable(mtf_session *s, int node, float *data) {
  const mtf_plan *p = s->plan;
  const mtf_node *var = &p->graph->nodes[node];
  const mtf_tensor_layout *layout = &p->layouts[node];
  mtf_shape local = mtf_layout_slice_shape(layout, &p->mesh);
  int64_t offsets[MTF_MAX_RANK], strides[MTF_MAX_RANK], stride = 1, index[MTF_MAX_RANK] = {0};
  mtf_layout_slice_offset(layout, &p->mesh, p->coord, offsets);
  for (int d = var->shape.rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= var->shape.dims[d].size;
  }
  int64_t n = mtf_shape_num_elements(&local);
  for (int64_t e = 0; e < n; e++) {
    int64_t global = 0;
    for (int d = 0; d < local.rank; d++) global += (index[d] + offsets[d]) * strides[d];
    data[e] = mtf_variable_value(p->graph, var, global);
    for (int d = local.rank - 1; d >= 0; d--) {
      if (++index[d] < local.dims[d].size) break;
      index[d] = 0;
    }
  }
}

static int build_poison_lists(mtf_session *s) {
  const mtf_plan *p = s->plan;
  s->poison_start = calloc((size_t)p->n_steps + 2, sizeof(int));
  s->poison_list = malloc(sizeof(int) * ((size_t)p->n_buffers + 1));
  if (!s->poison_start || !s->poison_list) return MTF_ERR_NOMEM;
  for (int b = 0; b < p->n_buffers; b++) {
    const mtf_buffer *buf = &p->buffers[b];
    if (buf->kind == MTF_BUF_ARENA && buf->last_step >= 0 && buf->last_step < p->n_steps)
      s->poison_start[buf->last_step + 1]++;
  }
  for (int i = 0; i < p->n_steps; i++) s->poison_start[i + 1] += s->poison_start[i];
  int *fill = calloc((size_t)p->n_steps + 1, sizeof(int));
  if (!fill) return MTF_ERR_NOMEM;
  for (int b = 0; b < p->n_buffers; b++) {
    const mtf_buffer *buf = &p->buffers[b];
    if (buf->kind == MTF_BUF_ARENA && buf->last_step >= 0 && buf->last_step < p->n_steps)
      s->poison_list[s->poison_start[buf->last_step] + fill[buf->last_step]++] = b;
  }
  free(fill);
  return MTF_OK;
}

int mtf_session_create(mtf_plan *plan, mtf_comm *comm, const mtf_session_options *options, mtf_session **out,
                       mtf_error *err) {
  *out = NULL;
  if (!mtf_shape_equal(&comm->mesh, &plan->mesh) || comm->rank != plan->mesh_rank)
    return mtf_error_set(err, MTF_ERR_INVALID, "session: the plan was made for rank %d of another mesh than the "
                         "communicator's (rank %d)", plan->mesh_rank, comm->rank);
  mtf_session *s = calloc(1, sizeof *s);
  if (!s) return mtf_error_set(err, MTF_ERR_NOMEM, "session: out of memory");
  s->plan = plan;
  s->comm = comm;
  if (options) s->options = *options;
  int brc = mtf_backend_check(s->options.backend, err);
  if (brc) {
    free(s);
    return brc;
  }
  s->ops = mtf_cpu_backend();
  s->threads = mtf_cpu_set_threads(s->options.threads);
  s->arena = s->ops->alloc(plan->arena_elements);
  s->allocated_bytes = plan->arena_elements * (int64_t)sizeof(float);
  s->variables = calloc((size_t)plan->n_variables + 1, sizeof(float *));
  s->inputs = calloc((size_t)plan->n_inputs + 1, sizeof(float *));
  s->borrowed = calloc((size_t)plan->n_variables + 1, 1);
  int ok = s->arena && s->variables && s->inputs && s->borrowed && build_poison_lists(s) == MTF_OK;
  const mtf_session *other = s->options.share_variables_with;
  if (other && (other->plan->graph != plan->graph || !mtf_shape_equal(&other->plan->mesh, &plan->mesh))) {
    mtf_session_destroy(s);
    return mtf_error_set(err, MTF_ERR_INVALID, "session: variables can only be shared between plans of one graph and mesh");
  }
  for (int b = 0; b < plan->n_buffers && ok; b++) {
    const mtf_buffer *buf = &plan->buffers[b];
    if (buf->kind == MTF_BUF_ARENA) continue;
    if (buf->kind == MTF_BUF_VARIABLE && other && other->plan->value_buffer[buf->node] >= 0) {
      s->variables[buf->offset] = buffer_data(other, other->plan->value_buffer[buf->node]);
      s->borrowed[buf->offset] = 1;
      continue;
    }
    float *data = s->ops->alloc(buf->elements);
    s->allocated_bytes += buf->elements * (int64_t)sizeof(float);
    if (!data) {
      ok = 0;
      break;
    }
    if (buf->kind == MTF_BUF_VARIABLE) {
      s->variables[buf->offset] = data;
      init_variable(s, buf->node, data);
    } else {
      s->inputs[buf->offset] = data;
      s->ops->fill(0.0f, buf->elements, data);
    }
  }
  if (!ok) {
    mtf_session_destroy(s);
    return mtf_error_set(err, MTF_ERR_NOMEM, "session: cannot allocate %lld bytes of activations and the variables",
                         (long long)plan->arena_elements * 4);
  }
  *out = s;
  return MTF_OK;
}

void mtf_session_destroy(mtf_session *s) {
  if (!s) return;
  if (s->variables)
    for (int i = 0; i < s->plan->n_variables; i++)
      if (!s->borrowed || !s->borrowed[i]) s->ops->release(s->variables[i]);
  if (s->inputs)
    for (int i = 0; i < s->plan->n_inputs; i++) s->ops->release(s->inputs[i]);
  s->ops->release(s->arena);
  free(s->variables);
  free(s->inputs);
  free(s->poison_start);
  free(s->poison_list);
  free(s->borrowed);
  free(s);
}

static int input_buffer(const mtf_session *s, mtf_tensor t, mtf_error *err) {
  const mtf_plan *p = s->plan;
  if (t < 0 || t >= p->graph->n_nodes || p->graph->nodes[t].kind != MTF_OP_INPUT)
    return -mtf_error_set(err, MTF_ERR_INVALID, "set_input: tensor %d is not an input", t); /* never -1 */
  return p->value_buffer[t]; /* -1: the plan does not read this input, so there is nothing to set */
}

int mtf_session_set_input(mtf_session *s, mtf_tensor input, const float *full, mtf_error *err) {
  int b = input_buffer(s, input, err);
  if (b < 0) return b == -1 ? MTF_OK : -b;
  const mtf_plan *p = s->plan;
  int64_t offsets[MTF_MAX_RANK];
  mtf_layout_slice_offset(&p->layouts[input], &p->mesh, p->coord, offsets);
  mtf_shape local = mtf_layout_slice_shape(&p->layouts[input], &p->mesh);
  s->ops->slice(&p->graph->nodes[input].shape, full, &local, offsets, buffer_data(s, b));
  return MTF_OK;
}

int mtf_session_set_input_slice(mtf_session *s, mtf_tensor input, const float *slice, mtf_error *err) {
  int b = input_buffer(s, input, err);
  if (b < 0) return b == -1 ? MTF_OK : -b;
  s->ops->copy(s->plan->buffers[b].elements, slice, buffer_data(s, b));
  return MTF_OK;
}

static int run_kernel(mtf_session *s, const mtf_step *st) {
  const mtf_plan *p = s->plan;
  const mtf_node *n = &p->graph->nodes[st->node];
  const mtf_backend_ops *ops = s->ops;
  float *out = buffer_data(s, st->out);
  const float *in[2] = {st->n_in > 0 ? buffer_data(s, st->in[0]) : NULL, st->n_in > 1 ? buffer_data(s, st->in[1]) : NULL};
  int64_t count = mtf_shape_num_elements(&st->out_shape);
  switch (n->kind) {
    case MTF_OP_CONSTANT: ops->fill(n->a, count, out); break;
    case MTF_OP_RANGE: ops->range(st->offsets[0], count, out); break;
    case MTF_OP_EINSUM: return ops->einsum(st->n_in, st->in_shape, in, &st->out_shape, out);
    case MTF_OP_BROADCAST: ops->broadcast(&st->in_shape[0], in[0], &st->out_shape, out); break;
    case MTF_OP_REDUCE_MAX: ops->reduce_max(&st->in_shape[0], in[0], &st->out_shape, out); break;
    case MTF_OP_BINARY: ops->binary(n->sub, &st->in_shape[0], in[0], &st->in_shape[1], in[1], &st->out_shape, out); break;
    case MTF_OP_UNARY: ops->unary(n->sub, n->a, n->b, count, in[0], out); break;
    case MTF_OP_ONE_HOT: {
      int d = mtf_shape_index_of(&st->out_shape, n->dim_name);
      ops->one_hot(&st->in_shape[0], in[0], &st->out_shape, d, st->offsets[d], out);
      break;
    }
    case MTF_OP_RANDOM_KEEP:
      ops->random_keep(p->graph->seed, n->key + s->random_offset * 0x9e3779b97f4a7c15ULL, n->a, &n->shape,
                       &st->out_shape, st->offsets, out);
      break;
    default: return MTF_ERR_INVALID;
  }
  return MTF_OK;
}

static int run_step(mtf_session *s, const mtf_step *st, mtf_error *err) {
  float *out = buffer_data(s, st->out);
  int64_t dims[MTF_MAX_RANK];
  switch (st->kind) {
    case MTF_STEP_KERNEL: {
      int rc = run_kernel(s, st);
      if (rc == MTF_ERR_NOMEM)
        return mtf_error_set(err, rc, "out of memory for the scratch space of '%s'", s->plan->graph->nodes[st->node].name);
      if (rc != MTF_OK)
        return mtf_error_set(err, rc, "internal: no kernel for '%s'", s->plan->graph->nodes[st->node].name);
      return MTF_OK;
    }
    case MTF_STEP_ALLREDUCE: {
      double start = MPI_Wtime();
      int rc = mtf_comm_allreduce(s->comm, st->axes, out, out, (size_t)mtf_shape_num_elements(&st->out_shape), MTF_F32,
                                  st->reduce_op, err);
      s->comm_seconds += MPI_Wtime() - start;
      return rc;
    }
    case MTF_STEP_ALLGATHER: {
      for (int d = 0; d < st->in_shape[0].rank; d++) dims[d] = st->in_shape[0].dims[d].size;
      double start = MPI_Wtime();
      int rc = mtf_comm_allgather(s->comm, st->axes, buffer_data(s, st->in[0]), out, MTF_F32, st->in_shape[0].rank,
                                  dims, st->tensor_axis, err);
      s->comm_seconds += MPI_Wtime() - start;
      return rc;
    }
    case MTF_STEP_SLICE:
      s->ops->slice(&st->in_shape[0], buffer_data(s, st->in[0]), &st->out_shape, st->offsets, out);
      return MTF_OK;
    case MTF_STEP_COPY:
      s->ops->copy(mtf_shape_num_elements(&st->out_shape), buffer_data(s, st->in[0]), out);
      return MTF_OK;
  }
  return MTF_OK;
}

int mtf_session_run(mtf_session *s, mtf_error *err) {
  const mtf_plan *p = s->plan;
  for (int i = 0; i < p->n_steps; i++) {
    const mtf_step *st = &p->steps[i];
    int rc = run_step(s, st, err);
    if (rc) return mtf_error_prefix(err, "step %d (%s)", i, p->graph->nodes[st->node].name);
    if (s->options.poison_freed)
      for (int k = s->poison_start[i]; k < s->poison_start[i + 1]; k++) {
        const mtf_buffer *b = &p->buffers[s->poison_list[k]];
        s->ops->fill(NAN, b->elements, buffer_data(s, s->poison_list[k]));
      }
  }
  return MTF_OK;
}

const float *mtf_session_slice(const mtf_session *s, mtf_tensor t) {
  const mtf_plan *p = s->plan;
  if (t < 0 || t >= p->graph->n_nodes || p->value_buffer[t] < 0) return NULL;
  return buffer_data(s, p->value_buffer[t]);
}

float *mtf_session_variable_slice(mtf_session *s, mtf_tensor t) {
  const mtf_plan *p = s->plan;
  if (t < 0 || t >= p->graph->n_nodes || p->graph->nodes[t].kind != MTF_OP_VARIABLE || p->value_buffer[t] < 0 ||
      p->buffers[p->value_buffer[t]].kind != MTF_BUF_VARIABLE)
    return NULL;
  return buffer_data(s, p->value_buffer[t]);
}

int mtf_session_fetch(mtf_session *s, mtf_tensor t, float *full, mtf_error *err) {
  const mtf_plan *p = s->plan;
  const float *slice = mtf_session_slice(s, t);
  if (!slice) return mtf_error_set(err, MTF_ERR_INVALID, "fetch: tensor %d is not computed by this plan", t);
  const mtf_tensor_layout *layout = &p->layouts[t];
  mtf_shape shape = mtf_layout_slice_shape(layout, &p->mesh);
  int64_t dims[MTF_MAX_RANK], n = mtf_shape_num_elements(&shape), total = mtf_shape_num_elements(&layout->shape);
  float *current = malloc(sizeof(float) * (size_t)total + 1), *next = malloc(sizeof(float) * (size_t)total + 1);
  if (!current || !next) {
    free(current);
    free(next);
    return mtf_error_set(err, MTF_ERR_NOMEM, "fetch: out of memory");
  }
  memcpy(current, slice, sizeof(float) * (size_t)n);
  int rc = MTF_OK;
  /* Same order on every rank: tensor dims in order, gathering each split one over its mesh axis. */
  for (int d = 0; d < shape.rank && rc == MTF_OK; d++) {
    int axis = layout->mesh_axis[d];
    if (axis < 0) continue;
    for (int e = 0; e < shape.rank; e++) dims[e] = shape.dims[e].size;
    rc = mtf_comm_allgather(s->comm, 1u << axis, current, next, MTF_F32, shape.rank, dims, d, err);
    shape.dims[d].size *= p->mesh.dims[axis].size;
    float *swap = current;
    current = next;
    next = swap;
  }
  if (rc == MTF_OK) memcpy(full, current, sizeof(float) * (size_t)total);
  free(current);
  free(next);
  return rc;
}

void mtf_session_set_random_offset(mtf_session *s, uint64_t offset) { s->random_offset = offset; }

double mtf_session_comm_seconds(const mtf_session *s) { return s->comm_seconds; }

int64_t mtf_session_allocated_bytes(const mtf_session *s) { return s->allocated_bytes; }

static const char *const builtin_backends[] = {"cpu"};

const char *mtf_backend_kinds(void) { return "cpu"; }

int mtf_backend_check(const char *kind, mtf_error *err) {
  if (!kind || !kind[0]) return MTF_OK;
  for (size_t i = 0; i < sizeof builtin_backends / sizeof builtin_backends[0]; i++)
    if (strcmp(kind, builtin_backends[i]) == 0) return MTF_OK;
  return mtf_error_set(err, MTF_ERR_INVALID, "unknown backend '%s' (built in: %s)", kind, mtf_backend_kinds());
}

int mtf_backend_resolve_threads(int requested, int ranks_per_node) {
  if (requested > 0) return requested;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  if (ranks_per_node < 1) ranks_per_node = 1;
  long per_rank = cores / ranks_per_node;
  return per_rank < 1 ? 1 : (int)per_rank;
}

const char *mtf_session_backend(const mtf_session *s) { return s->ops->name; }
int mtf_session_threads(const mtf_session *s) { return s->threads; }

static int int_input(const mtf_session *s, mtf_tensor t, int64_t n, const int32_t *values, float **converted,
                     mtf_error *err) {
  (void)s;
  (void)t;
  *converted = malloc(sizeof(float) * (size_t)n + 1);
  if (!*converted) return mtf_error_set(err, MTF_ERR_NOMEM, "set_input: out of memory");
  for (int64_t i = 0; i < n; i++) (*converted)[i] = (float)values[i];
  return MTF_OK;
}

int mtf_session_set_input_int(mtf_session *s, mtf_tensor input, const int32_t *full, mtf_error *err) {
  const mtf_shape *shape = mtf_tensor_shape(s->plan->graph, input);
  if (!shape) return mtf_error_set(err, MTF_ERR_INVALID, "set_input: tensor %d is not an input", input);
  float *converted;
  MTF_CHECK(int_input(s, input, mtf_shape_num_elements(shape), full, &converted, err));
  int rc = mtf_session_set_input(s, input, converted, err);
  free(converted);
  return rc;
}

int mtf_session_set_input_slice_int(mtf_session *s, mtf_tensor input, const int32_t *slice, mtf_error *err) {
  float *converted;
  MTF_CHECK(int_input(s, input, mtf_plan_slice_elements(s->plan, input), slice, &converted, err));
  int rc = mtf_session_set_input_slice(s, input, converted, err);
  free(converted);
  return rc;
}

int mtf_session_read_slice(const mtf_session *s, mtf_tensor t, float *out, mtf_error *err) {
  const float *slice = mtf_session_slice(s, t);
  if (!slice) return mtf_error_set(err, MTF_ERR_INVALID, "read_slice: tensor %d is not computed by this plan", t);
  s->ops->copy(mtf_plan_slice_elements(s->plan, t), slice, out);
  return MTF_OK;
}

int mtf_session_write_variable(mtf_session *s, mtf_tensor var, const float *slice, mtf_error *err) {
  float *data = mtf_session_variable_slice(s, var);
  if (!data) return mtf_error_set(err, MTF_ERR_INVALID, "write_variable: tensor %d is not a variable of this plan", var);
  s->ops->copy(mtf_plan_slice_elements(s->plan, var), slice, data);
  return MTF_OK;
}
