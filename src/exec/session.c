/* mtf_session, the public calls of mtf.h: each checks the caller's tensors against the session's plan, then hands
 * them to the session's implementation (exec/session_impl.h): the step executor (exec/steps.c) for a kind that
 * runs plans step by step, or the program session the registry makes for a kind that runs the whole mesh as one
 * program (exec/pjrt/session.c). Nothing here names a backend. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"
#include "exec/session_impl.h"
#include "exec/steps.h"

#define ELEM 4 /* float32 and int32: variables, inputs and what the host reads and writes */

struct mtf_session {
  mtf_plan *plan; /* a one-program session's is the host plan: one rank, whose slices are whole tensors */
  mtf_comm *comm; /* the job's, on host memory: fetches gather over it */
  mtf_session_options options;
  mtf_session_impl *impl;
  struct mtf_session *owner; /* the session whose variables this one shares, or NULL */
  int borrowers;             /* sessions sharing this one's variables */
  uint64_t random_offset;
};

static mtf_session *session_new(mtf_plan *plan, mtf_comm *comm, const mtf_session_options *options) {
  mtf_session *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->plan = plan;
  s->comm = comm;
  if (options) s->options = *options;
  return s;
}

static void share_with(mtf_session *s, const mtf_session *other) {
  if (!other) return;
  s->owner = (mtf_session *)other;
  s->owner->borrowers++;
}

int mtf_session_create(mtf_plan *plan, mtf_comm *comm, const mtf_session_options *options, mtf_session **out,
                       mtf_error *err) {
  *out = NULL;
  if (!mtf_shape_equal(&comm->mesh, &plan->mesh) || comm->rank != plan->mesh_rank)
    return mtf_error_set(err, MTF_ERR_INVALID, "session: the plan was made for rank %d of another mesh than the "
                         "communicator's (rank %d)", plan->mesh_rank, comm->rank);
  const mtf_session *other = options ? options->share_variables_with : NULL;
  if (other && (other->plan->graph != plan->graph || !mtf_shape_equal(&other->plan->mesh, &plan->mesh)))
    return mtf_error_set(err, MTF_ERR_INVALID, "session: variables can only be shared between plans of one graph and mesh");
  mtf_session *s = session_new(plan, comm, options);
  if (!s) return mtf_error_set(err, MTF_ERR_NOMEM, "session: out of memory");
  int rc = mtf_steps_create(plan, comm, &s->options, other ? other->impl : NULL, &s->impl, err);
  if (rc != MTF_OK) {
    free(s);
    return rc;
  }
  share_with(s, other);
  *out = s;
  return MTF_OK;
}

int mtf_session_create_spmd(mtf_plan *host_plan, mtf_plan *const *device_plans, int n_devices, mtf_comm *comm,
                            const mtf_session_options *options, mtf_session **out, mtf_error *err) {
  *out = NULL;
  if (comm->size != 1 || !mtf_shape_equal(&comm->mesh, &host_plan->mesh) || mtf_shape_num_elements(&host_plan->mesh) != 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "session: an spmd session's host plan and communicator are one rank's");
  for (int r = 0; r < n_devices; r++)
    if (device_plans[r]->graph != host_plan->graph)
      return mtf_error_set(err, MTF_ERR_INVALID, "session: the device plans are of another graph than the host plan");
  const mtf_session *other = options ? options->share_variables_with : NULL;
  if (other && (mtf_steps_backend(other->impl) || other->plan->graph != host_plan->graph))
    return mtf_error_set(err, MTF_ERR_INVALID, "session: an spmd session shares variables only with one of the same graph");
  mtf_session *s = session_new(host_plan, comm, options);
  if (!s) return mtf_error_set(err, MTF_ERR_NOMEM, "session: out of memory");
  mtf_program_session_options program_options = {.plugin = s->options.plugin, .local_devices = s->options.local_devices,
                                                 .share = other ? other->impl : NULL};
  /* the one-program kind the caller named (the run layer: backend.kind), pjrt by default */
  const char *kind = s->options.backend && s->options.backend[0] ? s->options.backend : "pjrt";
  int rc = mtf_backend_program_session_create(kind, device_plans, n_devices, &program_options, &s->impl, err);
  if (rc != MTF_OK) {
    free(s);
    return rc;
  }
  share_with(s, other);
  *out = s;
  return MTF_OK;
}

void mtf_session_destroy(mtf_session *s) {
  if (!s) return;
  if (s->borrowers > 0) {
    /* Their variables (and backend) are this session's memory: destroying it first would leave them dangling. */
    fprintf(stderr, "mtf: mtf_session_destroy: %d session(s) still share this session's variables; destroy them "
            "first\n", s->borrowers);
    abort();
  }
  if (s->owner) s->owner->borrowers--;
  s->impl->ops->destroy(s->impl);
  free(s);
}

/* Fails unless t is an input of the plan holding dtype values. */
static int check_input(const mtf_session *s, mtf_tensor t, mtf_dtype dtype, mtf_error *err) {
  const mtf_plan *p = s->plan;
  if (t < 0 || t >= p->graph->n_nodes || p->graph->nodes[t].kind != MTF_OP_INPUT)
    return mtf_error_set(err, MTF_ERR_INVALID, "set_input: tensor %d is not an input", t);
  if (p->graph->nodes[t].dtype != dtype)
    return mtf_error_set(err, MTF_ERR_INVALID, "set_input: '%s' holds %s values, not %s", p->graph->nodes[t].name,
                         mtf_dtype_name(p->graph->nodes[t].dtype), mtf_dtype_name(dtype));
  return MTF_OK;
}

static int set_input_full(mtf_session *s, mtf_tensor input, const void *full, mtf_dtype dtype, mtf_error *err) {
  MTF_CHECK(check_input(s, input, dtype, err));
  const mtf_plan *p = s->plan;
  /* one rank's plan (a one-program session's host plan too): its slice is the whole tensor */
  if (mtf_shape_num_elements(&p->mesh) == 1) return s->impl->ops->set_input(s->impl, input, full, err);
  if (p->value_buffer[input] < 0) return MTF_OK; /* the plan does not read it */
  mtf_shape local = mtf_layout_slice_shape(&p->layouts[input], &p->mesh);
  char *slice = malloc((size_t)mtf_shape_num_elements(&local) * ELEM + 1);
  if (!slice) return mtf_error_set(err, MTF_ERR_NOMEM, "set_input: out of memory");
  mtf_plan_slice_of_whole(p, input, full, slice, ELEM);
  int rc = s->impl->ops->set_input(s->impl, input, slice, err);
  free(slice);
  return rc;
}

static int set_input_slice(mtf_session *s, mtf_tensor input, const void *slice, mtf_dtype dtype, mtf_error *err) {
  MTF_CHECK(check_input(s, input, dtype, err));
  return s->impl->ops->set_input(s->impl, input, slice, err);
}

int mtf_session_set_input(mtf_session *s, mtf_tensor input, const float *full, mtf_error *err) {
  return set_input_full(s, input, full, MTF_F32, err);
}
int mtf_session_set_input_slice(mtf_session *s, mtf_tensor input, const float *slice, mtf_error *err) {
  return set_input_slice(s, input, slice, MTF_F32, err);
}
int mtf_session_set_input_int(mtf_session *s, mtf_tensor input, const int32_t *full, mtf_error *err) {
  return set_input_full(s, input, full, MTF_I32, err);
}
int mtf_session_set_input_slice_int(mtf_session *s, mtf_tensor input, const int32_t *slice, mtf_error *err) {
  return set_input_slice(s, input, slice, MTF_I32, err);
}

int mtf_session_run(mtf_session *s, mtf_error *err) { return s->impl->ops->run(s->impl, s->random_offset, err); }

/* Fails unless t's value is defined after a run: a fetch, a variable or an input (other arena buffers are
 * reused by the memory plan, or may hold partial sums), of 4-byte elements. */
static int check_result(const mtf_session *s, mtf_tensor t, const char *op, mtf_error *err) {
  int b = mtf_plan_value_buffer(s->plan, t);
  if (b < 0) return mtf_error_set(err, MTF_ERR_INVALID, "%s: tensor %d is not computed by this plan", op, t);
  const mtf_buffer *buf = &s->plan->buffers[b];
  if (buf->kind == MTF_BUF_ARENA && buf->last_step != INT_MAX)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' is not one of the plan's fetches or variables", op,
                         s->plan->graph->nodes[t].name);
  if (mtf_dtype_size(buf->dtype) != ELEM)
    return mtf_error_set(err, MTF_ERR_INVALID, "%s: '%s' holds %s values; fetch float32 or int32 tensors (mtf_cast "
                         "converts)", op, s->plan->graph->nodes[t].name, mtf_dtype_name(buf->dtype));
  return MTF_OK;
}

int mtf_session_read_slice(const mtf_session *s, mtf_tensor t, float *out, mtf_error *err) {
  MTF_CHECK(check_result(s, t, "read_slice", err));
  return s->impl->ops->read(s->impl, t, out, err);
}

int mtf_session_write_variable(mtf_session *s, mtf_tensor var, const float *slice, mtf_error *err) {
  if (mtf_plan_value_buffer(s->plan, var) < 0 || s->plan->graph->nodes[var].kind != MTF_OP_VARIABLE)
    return mtf_error_set(err, MTF_ERR_INVALID, "write_variable: tensor %d is not a variable of this plan", var);
  return s->impl->ops->write_variable(s->impl, var, slice, err);
}

int mtf_session_fetch(mtf_session *s, mtf_tensor t, float *full, mtf_error *err) {
  const mtf_plan *p = s->plan;
  MTF_CHECK(check_result(s, t, "fetch", err));
  const mtf_tensor_layout *layout = &p->layouts[t];
  mtf_shape shape = mtf_layout_slice_shape(layout, &p->mesh);
  int64_t dims[MTF_MAX_RANK], total = mtf_shape_num_elements(&layout->shape);
  float *current = malloc(sizeof(float) * (size_t)total + 1), *next = malloc(sizeof(float) * (size_t)total + 1);
  if (!current || !next) {
    free(current);
    free(next);
    return mtf_error_set(err, MTF_ERR_NOMEM, "fetch: out of memory");
  }
  int rc = s->impl->ops->read(s->impl, t, current, err);
  /* Same order on every rank: tensor dims in order, gathering each split one over its mesh axis. */
  for (int d = 0; d < shape.rank && rc == MTF_OK; d++) {
    int axis = layout->mesh_axis[d];
    if (axis < 0) continue;
    for (int e = 0; e < shape.rank; e++) dims[e] = shape.dims[e].size;
    rc = mtf_comm_allgather(s->comm, 1u << axis, current, next, p->graph->nodes[t].dtype, shape.rank, dims, d, err);
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

int mtf_session_set_microbatch(mtf_session *s, const char *dim, int index, int count, mtf_error *err) {
  if (count < 1 || index < 0 || index >= count)
    return mtf_error_set(err, MTF_ERR_INVALID, "set_microbatch: microbatch %d of %d does not exist", index, count);
  if (count > 1 && (!dim || !mtf_name_is_valid(dim)))
    return mtf_error_set(err, MTF_ERR_INVALID, "set_microbatch: '%s' is not a dimension name", dim ? dim : "(null)");
  return s->impl->ops->set_microbatch(s->impl, dim, index, count, err);
}

const float *mtf_session_slice(const mtf_session *s, mtf_tensor t) { return mtf_steps_slice(s->impl, t); }
float *mtf_session_variable_slice(mtf_session *s, mtf_tensor t) { return mtf_steps_variable_slice(s->impl, t); }
double mtf_session_comm_seconds(const mtf_session *s) { return mtf_steps_comm_seconds(s->impl); }
double mtf_session_progress_seconds(const mtf_session *s) { return mtf_steps_progress_seconds(s->impl); }
int64_t mtf_session_allocated_bytes(const mtf_session *s) { return mtf_steps_allocated_bytes(s->impl); }
mtf_backend *mtf_session_backend_instance(mtf_session *s) { return mtf_steps_backend(s->impl); }

const char *mtf_session_collectives(const mtf_session *s) {
  const char *steps = mtf_steps_collectives(s->impl);
  return steps ? steps : s->comm->ops->name;
}

const char *mtf_session_bf16_text(const mtf_session *s) {
  return s->options.precision == MTF_PRECISION_BF16 ? mtf_steps_bf16_text(s->impl) : NULL;
}

const char *mtf_session_backend(const mtf_session *s) { return s->impl->kind; }
int mtf_session_threads(const mtf_session *s) { return s->impl->ops->threads(s->impl); }
int mtf_session_devices(const mtf_session *s) { return s->impl->ops->devices(s->impl); }
