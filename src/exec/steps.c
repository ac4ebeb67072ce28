/* The step executor (exec/steps.h), one implementation of exec/session_impl.h: owns a plan's memory on one rank,
 * in its backend, and runs the plan's steps in order: kernels through the backend's kernel table, collectives
 * through the communicator. Every step carries its own parameters, so nothing here reads the graph while
 * running. Host data (initial values, inputs, reads) crosses into backend memory only through upload and
 * download. The caller (exec/session.c) has checked the tensors it hands over against the plan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/world.h"
#include "core/clock.h"
#include "exec/backend.h"
#include "exec/device_comm.h"
#include "exec/profile.h"
#include "exec/session_impl.h"
#include "exec/steps.h"
#include "ops/op_def.h"

typedef struct step_session {
  mtf_session_impl base; /* first: the interface exec/session.c calls */
  mtf_plan *plan;
  mtf_comm *comm; /* the job's, on host memory: fetches and what the caller does with it */
  /* The collective steps' on backend memory: comm itself on a host-memory backend, else the backend's device
   * communicator (NCCL, or comm through host staging), made by the session that owns the backend. */
  mtf_comm *step_comm;
  int owns_step_comm;
  mtf_backend *backend;
  int owns_backend;
  struct step_session *owner; /* the session whose variables (and backend) this one shares, or NULL */
  mtf_session_options options;
  char *arena;
  void **variables; /* by storage slot */
  void **inputs;
  int *poison_start, *poison_list; /* CSR: arena buffers whose last reader is step s */
  char *borrowed;                  /* per variable slot: storage owned by another session */
  uint64_t random_offset;
  mtf_comm_request *requests; /* per gradient bucket of the plan */
  int *in_flight, n_in_flight; /* buckets started and not yet known to be done, in start order */
  double comm_seconds;  /* blocked in collectives: blocking ones, and waits of non-blocking ones */
  double progress_seconds; /* starting non-blocking collectives and testing them between kernels */
  char microbatch_dim[MTF_NAME_MAX];
  int microbatch, microbatches;
  int64_t allocated_bytes;
  mtf_profile *profile; /* MTF_PROFILE=1, else NULL */
  /* bfloat16 weight copies (lower/weight_copies.c). The owner of the variables counts the writes to them
   * (variables_version: every run of a session sharing them and every write from outside); a session whose
   * plan's optimizer writes copies knows at which count it wrote them (copies_version, 0: never) and skips
   * the weights' casts while nothing else has written the variables since. */
  uint64_t variables_version, copies_version;
} step_session;

static const mtf_session_impl_ops step_ops;

/* The step executor behind an implementation, or NULL for another kind of session. */
static step_session *steps_of(const mtf_session_impl *impl) {
  return impl && impl->ops == &step_ops ? (step_session *)impl : NULL;
}

/* The session that allocated the variables: a session may share those of one that shares another's. */
static step_session *variables_owner(step_session *s) {
  while (s->owner) s = s->owner;
  return s;
}

#define ELEM 4 /* float32 and int32: variables, inputs and what the host reads and writes */

static void *buffer_data(const step_session *s, int buffer) {
  const mtf_buffer *b = &s->plan->buffers[buffer];
  switch (b->kind) {
    case MTF_BUF_ARENA: return s->arena + b->offset * MTF_ARENA_WORD;
    case MTF_BUF_VARIABLE: return s->variables[b->offset];
    case MTF_BUF_INPUT: return s->inputs[b->offset];
  }
  return NULL;
}

static int build_poison_lists(step_session *s) {
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

static int allocate_storage(step_session *s, mtf_error *err) {
  mtf_plan *plan = s->plan;
  mtf_backend *be = s->backend;
  const step_session *other = s->owner;
  s->arena = be->mem->allocate(be, (size_t)plan->arena_elements * MTF_ARENA_WORD);
  s->allocated_bytes = plan->arena_elements * (int64_t)MTF_ARENA_WORD;
  s->variables = calloc((size_t)plan->n_variables + 1, sizeof(void *));
  s->inputs = calloc((size_t)plan->n_inputs + 1, sizeof(void *));
  s->borrowed = calloc((size_t)plan->n_variables + 1, 1);
  s->requests = calloc((size_t)plan->n_buckets + 1, sizeof(mtf_comm_request));
  s->in_flight = calloc((size_t)plan->n_buckets + 1, sizeof(int));
  if (!s->arena || !s->variables || !s->inputs || !s->borrowed || !s->requests || !s->in_flight ||
      build_poison_lists(s) != MTF_OK)
    goto nomem;
  for (int b = 0; b < plan->n_buffers; b++) {
    const mtf_buffer *buf = &plan->buffers[b];
    if (buf->kind == MTF_BUF_ARENA) continue;
    if (buf->kind == MTF_BUF_VARIABLE && other && other->plan->value_buffer[buf->node] >= 0) {
      const mtf_tensor_layout *mine = &plan->layouts[buf->node], *theirs = &other->plan->layouts[buf->node];
      if (memcmp(mine->mesh_axis, theirs->mesh_axis, sizeof mine->mesh_axis) != 0)
        return mtf_error_set(err, MTF_ERR_INVALID, "session: variable '%s' is laid out differently in the session whose "
                             "variables it shares; shared variables need the same layout rules",
                             plan->graph->nodes[buf->node].name);
      s->variables[buf->offset] = buffer_data(other, other->plan->value_buffer[buf->node]);
      s->borrowed[buf->offset] = 1;
      continue;
    }
    size_t bytes = (size_t)buf->elements * ELEM;
    void *data = be->mem->allocate(be, bytes);
    s->allocated_bytes += (int64_t)bytes;
    if (!data) goto nomem;
    if (buf->kind == MTF_BUF_INPUT) {
      s->inputs[buf->offset] = data;
      be->mem->fill_f32(be, data, 0.0f, buf->elements); /* also int32 zeros */
      continue;
    }
    s->variables[buf->offset] = data;
    /* Constant initial values (zeros: optimizer slots, accumulators; ones: norm scales) are filled in place,
     * so only random ones pass through a host copy, which would otherwise add the largest variable to the
     * process's peak while the last variables are created. */
    const mtf_node *var = &plan->graph->nodes[buf->node];
    if (var->params.variable.init == MTF_INIT_ZEROS || var->params.variable.init == MTF_INIT_ONES) {
      int rc = be->mem->fill_f32(be, data, mtf_variable_value(plan->graph, var, 0), buf->elements);
      if (rc) return mtf_error_set(err, rc, "session: cannot set the initial value of '%s'", var->name);
      continue;
    }
    float *host = malloc(bytes + 1);
    if (!host) goto nomem;
    mtf_plan_initial_slice(plan, buf->node, host);
    int rc = be->mem->upload(be, data, host, bytes);
    free(host);
    if (rc) return mtf_error_set(err, rc, "session: cannot upload the initial value of '%s'",
                                 plan->graph->nodes[buf->node].name);
  }
  return MTF_OK;
nomem: {
  const char *why = be->error_text ? be->error_text(be) : NULL;
  return mtf_error_set(err, MTF_ERR_NOMEM, "session: backend '%s' cannot allocate the plan's %.2f GiB of activations "
                       "and its variables%s%s: lower the peak with train.microbatches, train.recompute: block, or a "
                       "layout that splits the model over more ranks (`mtf plan` shows the figures)", be->name,
                       (double)plan->arena_elements * MTF_ARENA_WORD / (1 << 30), why && why[0] ? ": " : "",
                       why ? why : "");
}
}

/* The plan fusions a kernel step needs its kernel to honour (MTF_FUSES_* bits). */
static unsigned step_fusions(const mtf_step *st) {
  return (st->fused_moments ? MTF_FUSES_MOMENTS : 0) | (st->squares_out > 0 ? MTF_FUSES_GRAD_NORM : 0) |
         (st->xent_loss > 0 ? MTF_FUSES_XENT_LOSS : 0) | (st->scatter_base > 0 ? MTF_FUSES_SCATTER_BASE : 0) |
         (st->accumulate ? MTF_FUSES_PRODUCT_ADD : 0);
}

/* The mtf_plan_options field that makes the lowest of these bits. */
static const char *fusion_option(unsigned bits) {
  return bits & MTF_FUSES_MOMENTS      ? "fuse_optimizer"
         : bits & MTF_FUSES_GRAD_NORM  ? "fuse_grad_norm"
         : bits & MTF_FUSES_XENT_LOSS  ? "xent_grad_from_loss"
         : bits & MTF_FUSES_SCATTER_BASE ? "fuse_scatter_add"
                                         : "fuse_product_add";
}

/* supports_op: every kernel step of the plan (and the cast a bf16 weight copy needs) has a kernel on this backend
 * that honours the step's fusions, checked when the session is made rather than found wrong in a step. */
static int check_kernels(const mtf_plan *plan, const mtf_backend *be, mtf_error *err) {
  for (int i = 0; i < plan->n_steps; i++) {
    const mtf_step *st = &plan->steps[i];
    if (st->fused || (st->kind != MTF_STEP_KERNEL && st->kind != MTF_STEP_COPY)) continue;
    /* a weight copy written after a kernel or a copy is the cast's (write_weight_copy); adam_update writes its own */
    int casts_copy = st->bf16_copy > 0 && !(st->kind == MTF_STEP_KERNEL && st->op == MTF_OP_ADAM_UPDATE);
    mtf_op_kind op;
    if (st->kind == MTF_STEP_KERNEL && !be->kernels[st->op]) {
      op = st->op;
    } else if (casts_copy && !be->kernels[MTF_OP_CAST]) {
      op = MTF_OP_CAST;
    } else {
      unsigned missing = st->kind == MTF_STEP_KERNEL ? step_fusions(st) & ~be->plan_fusions : 0;
      if (missing)
        return mtf_error_set(err, MTF_ERR_INVALID, "backend '%s' does not run the fused step %d of the plan (op '%s', "
                             "mtf_plan_options.%s): make the plan without that fusion for it, or implement it in the "
                             "backend's kernel and set the bit in its plan_fusions", be->name, i,
                             mtf_op(st->op)->name, fusion_option(missing));
      continue;
    }
    return mtf_error_set(err, MTF_ERR_INVALID, "backend '%s' has no kernel for op '%s' (step %d of the plan): it "
                         "cannot run this plan; add the kernel to the backend's table, or run on a backend that has "
                         "it (test_backend_conformance --backend %s lists what it runs)", be->name,
                         mtf_op(op)->name, i, be->name);
  }
  return MTF_OK;
}

static void steps_destroy(mtf_session_impl *impl);

int mtf_steps_create(mtf_plan *plan, mtf_comm *comm, const mtf_session_options *options, mtf_session_impl *share,
                     mtf_session_impl **out, mtf_error *err) {
  *out = NULL;
  mtf_session_options opts = *options;
  step_session *other = steps_of(share);
  if (share && !other)
    return mtf_error_set(err, MTF_ERR_INVALID, "session: a session that runs its plan step by step shares variables "
                         "only with another such session, not with one on backend '%s'", share->kind);
  step_session *s = calloc(1, sizeof *s);
  if (!s) return mtf_error_set(err, MTF_ERR_NOMEM, "session: out of memory");
  s->base.ops = &step_ops;
  s->plan = plan;
  s->comm = comm;
  s->options = opts;
  int rc;
  if (other) {
    const char *kind = opts.backend && opts.backend[0] ? opts.backend : "cpu";
    if (strcmp(kind, other->backend->name) != 0) {
      free(s);
      return mtf_error_set(err, MTF_ERR_INVALID, "session: backend '%s' cannot share the variables of a session on "
                           "backend '%s'", kind, other->backend->name);
    }
    s->backend = other->backend; /* variables live in its memory */
    s->owner = other;
  } else {
    mtf_backend_options backend_options = {.kind = opts.backend, .threads = opts.threads, .plugin = opts.plugin,
                                           .local_devices = opts.local_devices,
                                           .device = opts.device_set ? opts.device : MTF_DEVICE_FROM_LOCAL_RANK,
                                           .tf32 = opts.tf32, .precision = opts.precision};
    rc = mtf_backend_create(&backend_options, &s->backend, err);
    if (rc) {
      free(s);
      return rc;
    }
    s->owns_backend = 1;
  }
  s->base.kind = s->backend->name;
  if (other) {
    s->step_comm = other->step_comm;
  } else {
    rc = mtf_backend_step_comm(s->backend, comm, opts.comm, &s->step_comm, &s->owns_step_comm, err);
    if (rc) {
      steps_destroy(&s->base);
      return rc;
    }
  }
  if (plan->stats.bf16_values > 0 && !s->backend->bf16_storage) {
    rc = mtf_error_set(err, MTF_ERR_INVALID, "the plan stores %d activations as bfloat16 (mtf_plan_options.bf16_storage), "
                       "which backend '%s' does not read or write; make the plan without bf16_storage for it",
                       plan->stats.bf16_values, s->backend->name);
    steps_destroy(&s->base);
    return rc;
  }
  if (plan->stats.bf16_weight_copies > 0 && !s->backend->bf16_storage) {
    rc = mtf_error_set(err, MTF_ERR_INVALID, "the plan's optimizer writes bfloat16 copies of %d weights "
                       "(mtf_plan_options.bf16_weight_copies), which backend '%s' does not; make the plan without "
                       "bf16_weight_copies for it", plan->stats.bf16_weight_copies, s->backend->name);
    steps_destroy(&s->base);
    return rc;
  }
  rc = check_kernels(plan, s->backend, err);
  if (rc == MTF_OK) rc = allocate_storage(s, err);
  if (rc) {
    steps_destroy(&s->base);
    return rc;
  }
  s->profile = mtf_profile_from_env();
  *out = &s->base;
  return MTF_OK;
}


/* The caller (exec/session.c) destroys the sessions sharing this one's variables first. */
static void steps_destroy(mtf_session_impl *impl) {
  step_session *s = steps_of(impl);
  if (!s) return;
  if (s->profile && s->comm->rank == 0) {
    char title[96];
    snprintf(title, sizeof title, "session of %d steps on rank 0 of %d", s->plan->n_steps, s->comm->size);
    mtf_profile_print(s->profile, stderr, title);
  }
  mtf_profile_destroy(s->profile);
  mtf_backend *be = s->backend;
  if (be) {
    if (s->variables)
      for (int i = 0; i < s->plan->n_variables; i++)
        if (!s->borrowed || !s->borrowed[i]) be->mem->release(be, s->variables[i]);
    if (s->inputs)
      for (int i = 0; i < s->plan->n_inputs; i++) be->mem->release(be, s->inputs[i]);
    if (s->arena) be->mem->release(be, s->arena);
    /* Before the backend: a device communicator works on the backend's streams. */
    if (s->owns_step_comm) mtf_comm_destroy(s->step_comm);
    if (s->owns_backend) mtf_backend_destroy(be);
  }
  free(s->variables);
  free(s->inputs);
  free(s->poison_start);
  free(s->poison_list);
  free(s->borrowed);
  free(s->requests);
  free(s->in_flight);
  free(s);
}

static int steps_set_input(mtf_session_impl *impl, mtf_tensor input, const void *slice, mtf_error *err) {
  step_session *s = steps_of(impl);
  int b = s->plan->value_buffer[input];
  if (b < 0) return MTF_OK; /* the plan does not read it */
  int rc = s->backend->mem->upload(s->backend, buffer_data(s, b), slice, (size_t)s->plan->buffers[b].elements * ELEM);
  return rc ? mtf_error_set(err, rc, "set_input: upload failed") : MTF_OK;
}

/* Bytes per element of what a data-movement step moves (its output buffer's dtype: bfloat16 matmul operands
 * are gathered and resharded like float32 ones). */
static size_t step_elem_size(const step_session *s, const mtf_step *st) {
  return mtf_dtype_size(s->plan->buffers[st->out].dtype);
}

/* The dtype a reducing step hands the communicator: bfloat16 for a bfloat16 buffer, float32 otherwise, as
 * before bfloat16 existed (an int32 buffer's bits included), so fp32 sums stay what they were. */
static mtf_dtype reduction_dtype(const step_session *s, int buffer) {
  return s->plan->buffers[buffer].dtype == MTF_BF16 ? MTF_BF16 : MTF_F32;
}

static int run_allgather(step_session *s, const mtf_step *st, mtf_error *err) {
  mtf_backend *be = s->backend;
  int64_t dims[MTF_MAX_RANK], outer = 1;
  for (int d = 0; d < st->in_shape[0].rank; d++) dims[d] = st->in_shape[0].dims[d].size;
  for (int d = 0; d < st->tensor_axis; d++) outer *= dims[d];
  size_t elem = step_elem_size(s, st), block_bytes = (size_t)mtf_shape_num_elements(&st->in_shape[0]) * elem;
  const void *in = buffer_data(s, st->in[0]);
  void *out = buffer_data(s, st->out);
  if (outer == 1) return mtf_comm_allgather_blocks(s->step_comm, st->axes, in, out, block_bytes, err);
  /* Blocks arrive one after another; the backend reorders them into the concatenation. */
  void *blocks = buffer_data(s, st->scratch);
  MTF_CHECK(mtf_comm_allgather_blocks(s->step_comm, st->axes, in, blocks, block_bytes, err));
  int parts = mtf_comm_group_size(s->step_comm, st->axes);
  return be->mem->concat_blocks(be, blocks, out, elem, st->in_shape[0].rank, dims, st->tensor_axis, parts);
}

static void dims_of(const mtf_shape *shape, int64_t *dims) {
  for (int d = 0; d < shape->rank; d++) dims[d] = shape->dims[d].size;
}

static int64_t rows_before(const int64_t *dims, int axis) {
  int64_t outer = 1;
  for (int d = 0; d < axis; d++) outer *= dims[d];
  return outer;
}

/* Partial sums in, this rank's slice along tensor_axis out: the backend packs the slices into member
 * order (in the step's scratch) unless they already are, the communicator sums block p into member p. */
static int run_reduce_scatter(step_session *s, const mtf_step *st, mtf_error *err) {
  mtf_backend *be = s->backend;
  int64_t dims[MTF_MAX_RANK];
  dims_of(&st->in_shape[0], dims);
  int parts = mtf_comm_group_size(s->step_comm, st->axes);
  const void *blocks = buffer_data(s, st->in[0]);
  if (rows_before(dims, st->tensor_axis) > 1) {
    void *packed = buffer_data(s, st->scratch);
    MTF_CHECK(be->mem->split_blocks(be, blocks, packed, step_elem_size(s, st), st->in_shape[0].rank, dims,
                                    st->tensor_axis, parts));
    blocks = packed;
  }
  return mtf_comm_reduce_scatter_blocks(s->step_comm, st->axes, blocks, buffer_data(s, st->out),
                                        (size_t)mtf_shape_num_elements(&st->out_shape), reduction_dtype(s, st->out),
                                        st->reduce_op, err);
}

/* Slice p along tensor_axis to member p, what arrives concatenated along concat_axis. The send blocks are
 * packed first and the received ones unpacked after, each only where the tensor axis has outer rows (the
 * scratch holds the send blocks, then the received ones). */
static int run_alltoall(step_session *s, const mtf_step *st, mtf_error *err) {
  mtf_backend *be = s->backend;
  int rank = st->in_shape[0].rank, parts = mtf_comm_group_size(s->step_comm, st->axes);
  int64_t dims[MTF_MAX_RANK], block_dims[MTF_MAX_RANK], elements = mtf_shape_num_elements(&st->in_shape[0]);
  dims_of(&st->in_shape[0], dims);
  memcpy(block_dims, dims, sizeof dims);
  block_dims[st->tensor_axis] /= parts;
  size_t elem = step_elem_size(s, st);
  char *scratch = st->scratch >= 0 ? buffer_data(s, st->scratch) : NULL;
  const void *send = buffer_data(s, st->in[0]);
  void *out = buffer_data(s, st->out), *recv = out;
  if (rows_before(dims, st->tensor_axis) > 1) {
    MTF_CHECK(be->mem->split_blocks(be, send, scratch, elem, rank, dims, st->tensor_axis, parts));
    send = scratch;
    scratch += elements * elem;
  }
  int unpack = rows_before(block_dims, st->concat_axis) > 1;
  if (unpack) recv = scratch;
  MTF_CHECK(mtf_comm_alltoall_blocks(s->step_comm, st->axes, send, recv, (size_t)(elements / parts) * elem, err));
  return unpack ? be->mem->concat_blocks(be, recv, out, elem, rank, block_dims, st->concat_axis, parts) : MTF_OK;
}

/* backend.grad_reduce bf16: a bucket travels as its bfloat16 copy in the step's staging buffer (scratch),
 * cast by the backend's own cast kernel, so it works on any backend's memory. */
static int cast_bucket(step_session *s, const mtf_step *st, const void *in, mtf_dtype from, void *out, mtf_dtype to,
                       mtf_error *err) {
  mtf_step cast;
  memset(&cast, 0, sizeof cast);
  cast.kind = MTF_STEP_KERNEL;
  cast.op = MTF_OP_CAST;
  cast.node = st->node;
  cast.n_in = 1;
  cast.in_dtype[0] = from;
  cast.out_dtype = to;
  cast.in_shape[0] = cast.out_shape = st->out_shape;
  cast.params.cast.to = to;
  cast.scratch = -1;
  mtf_kernel_args args = {.out = out, .in = {in}};
  int rc = s->backend->kernels[MTF_OP_CAST](s->backend, &cast, &args);
  return rc ? mtf_error_set(err, rc, "gradient bucket: cast to %s failed", mtf_dtype_name(to)) : MTF_OK;
}

/* A bucket's allreduce, started in place over its range (or its bfloat16 staging copy); the backend's pending
 * work on that memory ends first, as before any collective. Starting does not block: its time counts as
 * progress, not comm. */
static int start_bucket(step_session *s, const mtf_step *st, mtf_error *err) {
  double start = mtf_now_seconds();
  void *range = buffer_data(s, st->out), *wire = range;
  mtf_dtype wire_dtype = MTF_F32;
  if (st->scratch >= 0) {
    wire = buffer_data(s, st->scratch);
    wire_dtype = reduction_dtype(s, st->scratch);
    MTF_CHECK(cast_bucket(s, st, range, MTF_F32, wire, wire_dtype, err));
  }
  MTF_CHECK(s->backend->mem->synchronize(s->backend));
  int rc = mtf_comm_iallreduce(s->step_comm, st->axes, wire, wire, (size_t)mtf_shape_num_elements(&st->out_shape),
                               wire_dtype, st->reduce_op, &s->requests[st->bucket], err);
  if (rc == MTF_OK && s->requests[st->bucket].active) s->in_flight[s->n_in_flight++] = st->bucket;
  s->progress_seconds += mtf_now_seconds() - start;
  return rc;
}

static void forget_in_flight(step_session *s, int bucket) {
  for (int i = 0; i < s->n_in_flight; i++)
    if (s->in_flight[i] == bucket) {
      memmove(&s->in_flight[i], &s->in_flight[i + 1], sizeof(int) * (size_t)(s->n_in_flight - i - 1));
      s->n_in_flight--;
      return;
    }
}

static int wait_bucket(step_session *s, int bucket, mtf_error *err) {
  double start = mtf_now_seconds();
  int rc = mtf_comm_wait(s->step_comm, &s->requests[bucket], err);
  forget_in_flight(s, bucket);
  s->comm_seconds += mtf_now_seconds() - start;
  return rc;
}

/* MPI moves a non-blocking collective on only inside MPI calls: one test per step in flight keeps the
 * buckets going while kernels run (the time is counted apart from the time blocked in collectives). */
static int progress_buckets(step_session *s, mtf_error *err) {
  double start = mtf_now_seconds();
  int rc = MTF_OK;
  for (int i = 0; i < s->n_in_flight && rc == MTF_OK;) {
    int done = 0;
    rc = mtf_comm_test(s->step_comm, &s->requests[s->in_flight[i]], &done, err);
    if (done) forget_in_flight(s, s->in_flight[i]);
    else i++;
  }
  s->progress_seconds += mtf_now_seconds() - start;
  return rc;
}

/* A weight's bfloat16 copy (step bf16_copy, lower/weight_copies.c) from the value step st just wrote, by the
 * backend's cast kernel, for the last writers whose kernel does not write it itself (all but adam_update). */
static int write_weight_copy(step_session *s, const mtf_step *st, void *out, mtf_error *err) {
  mtf_backend *be = s->backend;
  mtf_step cast = {.kind = MTF_STEP_KERNEL, .op = MTF_OP_CAST, .phase = MTF_PHASE_WHOLE, .node = st->node, .n_in = 1,
                   .out_shape = st->out_shape, .out_dtype = MTF_BF16, .scratch = -1};
  cast.in_shape[0] = st->out_shape;
  cast.in_dtype[0] = MTF_F32;
  cast.params.cast.to = MTF_BF16;
  mtf_kernel_args args = {.out = buffer_data(s, st->bf16_copy - 1)};
  args.in[0] = out;
  int rc = be->kernels[MTF_OP_CAST] ? be->kernels[MTF_OP_CAST](be, &cast, &args) : MTF_ERR_INVALID;
  if (rc == MTF_OK) return MTF_OK;
  const char *why = be->error_text ? be->error_text(be) : NULL;
  return mtf_error_set(err, rc, "backend '%s': the weight's bfloat16 copy%s%s", be->name, why && why[0] ? ": " : "",
                       why ? why : "");
}

static int run_step(step_session *s, const mtf_step *st, mtf_error *err) {
  mtf_backend *be = s->backend;
  void *out = buffer_data(s, st->out);
  switch (st->kind) {
    case MTF_STEP_KERNEL: {
      mtf_kernel_args args = {.out = out, .random_offset = s->random_offset, .microbatch_dim = s->microbatch_dim,
                              .microbatch = s->microbatch, .microbatches = s->microbatches};
      for (int k = 0; k < st->n_in; k++) args.in[k] = buffer_data(s, st->in[k]);
      if (st->scratch >= 0) args.scratch = buffer_data(s, st->scratch);
      if (st->bf16_copy > 0) args.bf16_copy = buffer_data(s, st->bf16_copy - 1);
      if (st->fused_moments) args.moments_grad = buffer_data(s, st->moments_grad);
      if (st->squares_out > 0) args.squares = buffer_data(s, st->squares_out - 1);
      if (st->xent_loss > 0 && st->xent_writes_loss) args.xent_loss_out = buffer_data(s, st->xent_loss - 1);
      else if (st->xent_loss > 0) args.xent_loss = buffer_data(s, st->xent_loss - 1);
      if (st->scatter_base > 0) args.scatter_base = buffer_data(s, st->scatter_base - 1);
      mtf_kernel_fn kernel = be->kernels[st->op];
      int rc = kernel ? kernel(be, st, &args) : MTF_ERR_INVALID;
      if (rc != MTF_OK) {
        const char *why = kernel && be->error_text ? be->error_text(be) : NULL;
        return mtf_error_set(err, rc, "backend '%s' %s%s%s", be->name, kernel ? "kernel failed" : "has no kernel for this op",
                             why && why[0] ? ": " : "", why ? why : "");
      }
      return st->bf16_copy > 0 && st->op != MTF_OP_ADAM_UPDATE ? write_weight_copy(s, st, out, err) : MTF_OK;
    }
    case MTF_STEP_ALLREDUCE: {
      double start = mtf_now_seconds();
      MTF_CHECK(be->mem->synchronize(be));
      int rc = mtf_comm_allreduce(s->step_comm, st->axes, out, out, (size_t)mtf_shape_num_elements(&st->out_shape),
                                  reduction_dtype(s, st->out), st->reduce_op, err);
      s->comm_seconds += mtf_now_seconds() - start;
      return rc;
    }
    case MTF_STEP_ALLGATHER: {
      double start = mtf_now_seconds();
      MTF_CHECK(be->mem->synchronize(be));
      int rc = run_allgather(s, st, err);
      s->comm_seconds += mtf_now_seconds() - start;
      return rc;
    }
    case MTF_STEP_ALLTOALL:
    case MTF_STEP_REDUCE_SCATTER: {
      double start = mtf_now_seconds();
      MTF_CHECK(be->mem->synchronize(be));
      int rc = st->kind == MTF_STEP_ALLTOALL ? run_alltoall(s, st, err) : run_reduce_scatter(s, st, err);
      s->comm_seconds += mtf_now_seconds() - start;
      return rc;
    }
    case MTF_STEP_ALLREDUCE_START:
      return start_bucket(s, st, err);
    case MTF_STEP_ALLREDUCE_WAIT:
      MTF_CHECK(wait_bucket(s, st->bucket, err));
      if (st->scratch < 0) return MTF_OK;
      return cast_bucket(s, st, buffer_data(s, st->scratch), s->plan->buffers[st->scratch].dtype, out, MTF_F32, err);
    case MTF_STEP_SLICE:
      return be->mem->slice(be, &st->in_shape[0], buffer_data(s, st->in[0]), &st->out_shape, st->offsets, out,
                            step_elem_size(s, st));
    case MTF_STEP_COPY:
      MTF_CHECK(be->mem->copy(be, out, buffer_data(s, st->in[0]),
                              (size_t)mtf_shape_num_elements(&st->out_shape) * step_elem_size(s, st)));
      return st->bf16_copy > 0 ? write_weight_copy(s, st, out, err) : MTF_OK;
  }
  return MTF_OK;
}


static int steps_run(mtf_session_impl *impl, uint64_t random_offset, mtf_error *err) {
  step_session *s = steps_of(impl);
  s->random_offset = random_offset;
  const mtf_plan *p = s->plan;
  step_session *owner = variables_owner(s);
  int copies_current = s->copies_version != 0 && s->copies_version == owner->variables_version;
  owner->variables_version++; /* this run writes the variables (or may, for all the other sessions know) */
  s->copies_version = 0;      /* until it has run to the end */
  int device_timed = mtf_profile_device_begin(s->profile, s->backend);
  for (int i = 0; i < p->n_steps; i++) {
    const mtf_step *st = &p->steps[i];
    if ((st->skip_when_copy_current && copies_current) || st->fused) continue;
    double start = s->profile ? mtf_now_seconds() : 0.0;
    int rc = run_step(s, st, err);
    if (device_timed) mtf_profile_device_step(s->profile, s->backend, st);
    else if (s->profile) mtf_profile_add(s->profile, st, mtf_now_seconds() - start);
    if (rc == MTF_OK && s->n_in_flight > 0 && st->kind == MTF_STEP_KERNEL) rc = progress_buckets(s, err);
    if (rc) {
      /* A memory call of the backend (copy, slice, synchronize, ...) returns its code alone. */
      if (err->code != rc) {
        const char *why = s->backend->error_text ? s->backend->error_text(s->backend) : NULL;
        mtf_error_set(err, rc, "backend '%s': %s", s->backend->name, why && why[0] ? why : "a memory operation failed");
      }
      mtf_error_prefix(err, "step %d (%s)", i, p->graph->nodes[st->node].name);
      /* The other ranks may already wait in this plan's next collective: end the job with the reason. */
      if (s->comm->size > 1) mtf_world_abort(1, "mtf_session_run", err);
      mtf_error ignored; /* one rank: its groups are itself, so what is in flight is done; free the requests */
      while (s->n_in_flight > 0) wait_bucket(s, s->in_flight[0], &ignored);
      return rc;
    }
    if (s->options.poison_freed)
      for (int k = s->poison_start[i]; k < s->poison_start[i + 1]; k++) {
        const mtf_buffer *b = &p->buffers[s->poison_list[k]];
        s->backend->mem->fill_f32(s->backend, buffer_data(s, s->poison_list[k]), NAN,
                                  b->kind == MTF_BUF_ARENA ? mtf_buffer_words(b) : b->elements);
      }
  }
  if (device_timed) mtf_profile_device_end(s->profile, s->backend);
  if (s->profile) mtf_profile_run(s->profile);
  if (p->stats.bf16_weight_copies > 0) s->copies_version = owner->variables_version;
  /* Every START has its WAIT in the plan; a bucket still in flight here would be a planner bug. */
  if (s->n_in_flight > 0) {
    int bucket = s->in_flight[0];
    while (s->n_in_flight > 0) wait_bucket(s, s->in_flight[0], err);
    return mtf_error_set(err, MTF_ERR_INVALID, "plan: gradient bucket %d was started but never waited for", bucket);
  }
  return s->backend->mem->synchronize(s->backend);
}


static float *variable_data(step_session *s, mtf_tensor t) {
  int b = mtf_plan_value_buffer(s->plan, t);
  if (b < 0 || s->plan->graph->nodes[t].kind != MTF_OP_VARIABLE || s->plan->buffers[b].kind != MTF_BUF_VARIABLE)
    return NULL;
  return buffer_data(s, b);
}

static int steps_read(mtf_session_impl *impl, mtf_tensor t, void *out, mtf_error *err) {
  step_session *s = steps_of(impl);
  int b = mtf_plan_value_buffer(s->plan, t);
  int rc = s->backend->mem->download(s->backend, out, buffer_data(s, b), (size_t)s->plan->buffers[b].elements * ELEM);
  return rc ? mtf_error_set(err, rc, "read_slice: download failed") : MTF_OK;
}

static int steps_write_variable(mtf_session_impl *impl, mtf_tensor var, const float *slice, mtf_error *err) {
  step_session *s = steps_of(impl);
  float *data = variable_data(s, var);
  if (!data) return mtf_error_set(err, MTF_ERR_INVALID, "write_variable: tensor %d is not a variable of this plan", var);
  int b = mtf_plan_value_buffer(s->plan, var);
  variables_owner(s)->variables_version++;
  int rc = s->backend->mem->upload(s->backend, data, slice, (size_t)s->plan->buffers[b].elements * ELEM);
  return rc ? mtf_error_set(err, rc, "write_variable: upload failed") : MTF_OK;
}

static int steps_set_microbatch(mtf_session_impl *impl, const char *dim, int index, int count, mtf_error *err) {
  (void)err;
  step_session *s = steps_of(impl);
  snprintf(s->microbatch_dim, sizeof s->microbatch_dim, "%s", count > 1 ? dim : "");
  s->microbatch = index;
  s->microbatches = count;
  return MTF_OK;
}

static int steps_devices(const mtf_session_impl *impl) {
  (void)impl;
  return 1;
}

static int steps_threads(const mtf_session_impl *impl) { return steps_of(impl)->backend->threads; }

static const mtf_session_impl_ops step_ops = {
    .destroy = steps_destroy,
    .set_input = steps_set_input,
    .run = steps_run,
    .read = steps_read,
    .write_variable = steps_write_variable,
    .set_microbatch = steps_set_microbatch,
    .devices = steps_devices,
    .threads = steps_threads,
};

/* ---- what only the step executor has (exec/steps.h): 0 or NULL for another kind of session ---- */
const float *mtf_steps_slice(const mtf_session_impl *impl, mtf_tensor t) {
  const step_session *s = steps_of(impl);
  int b = s ? mtf_plan_value_buffer(s->plan, t) : -1;
  return b >= 0 ? buffer_data(s, b) : NULL;
}

float *mtf_steps_variable_slice(mtf_session_impl *impl, mtf_tensor t) {
  step_session *s = steps_of(impl);
  if (!s) return NULL; /* device memory */
  variables_owner(s)->variables_version++; /* the caller may write through the pointer */
  return variable_data(s, t);
}

double mtf_steps_comm_seconds(const mtf_session_impl *impl) {
  const step_session *s = steps_of(impl);
  return s ? s->comm_seconds : 0.0;
}

double mtf_steps_progress_seconds(const mtf_session_impl *impl) {
  const step_session *s = steps_of(impl);
  return s ? s->progress_seconds : 0.0;
}

const char *mtf_steps_collectives(const mtf_session_impl *impl) {
  const step_session *s = steps_of(impl);
  if (!s) return NULL;
  const mtf_comm *c = s->step_comm ? s->step_comm : s->comm;
  return c->ops->name;
}

const char *mtf_steps_bf16_text(const mtf_session_impl *impl) {
  const step_session *s = steps_of(impl);
  return s && s->backend->bf16_text ? s->backend->bf16_text(s->backend) : NULL;
}

int64_t mtf_steps_allocated_bytes(const mtf_session_impl *impl) {
  const step_session *s = steps_of(impl);
  return s ? s->allocated_bytes : 0;
}

mtf_backend *mtf_steps_backend(mtf_session_impl *impl) {
  step_session *s = steps_of(impl);
  return s ? s->backend : NULL;
}
