/* A whole program on PJRT devices (see program.h): buffers, donation and the host side of I/O. */
#include "exec/pjrt/program.h"

#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"

#define ELEM 4 /* f32 and int32: every tensor of a plan */

/* Variables by graph node, one buffer per device, shared by the programs of one graph: counted references, so
 * the programs may go in any order (the order of the sessions around them, whose runtime the first one owns, is
 * exec/session.c's to enforce, for every kind alike). */
typedef struct variable_store {
  int refs;
  int n_nodes, n_devices;
  mtf_pjrt_buffer **buffers; /* [node * n_devices + device], NULL where the node is no variable in use */
} variable_store;

struct mtf_pjrt_program {
  mtf_pjrt_runtime *rt;
  mtf_plan **plans;
  int n;
  int n_params, n_results;
  mtf_pjrt_value *params, *results;
  mtf_pjrt_executable *exe;
  variable_store *store;
  mtf_pjrt_buffer **inputs;  /* [param * n + device] for INPUT params */
  mtf_pjrt_buffer **fetched; /* [result * n + device] for FETCH results, after a run */
  unsigned char *keep;       /* per param: not donated (every param no result aliases) */
  uint64_t random_offset;
  int microbatch;
};

static int64_t *dims_of(const mtf_shape *s, int64_t *dims) {
  for (int d = 0; d < s->rank; d++) dims[d] = s->dims[d].size;
  return dims;
}

/* Copies between a whole tensor (global shape) and one slice of it (local shape at offsets), either way. */
static void copy_slice(const mtf_shape *global, const mtf_shape *local, const int64_t *offsets, char *whole,
                       char *slice, int to_whole) {
  int64_t strides[MTF_MAX_RANK], stride = 1, index[MTF_MAX_RANK] = {0};
  for (int d = global->rank - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= global->dims[d].size;
  }
  int64_t n = mtf_shape_num_elements(local);
  for (int64_t e = 0; e < n; e++) {
    int64_t at = 0;
    for (int d = 0; d < local->rank; d++) at += (index[d] + offsets[d]) * strides[d];
    if (to_whole) memcpy(whole + at * ELEM, slice + e * ELEM, ELEM);
    else memcpy(slice + e * ELEM, whole + at * ELEM, ELEM);
    for (int d = local->rank - 1; d >= 0; d--) {
      if (++index[d] < local->dims[d].size) break;
      index[d] = 0;
    }
  }
}

static mtf_shape local_shape(const mtf_plan *plan, mtf_tensor t) {
  return mtf_layout_slice_shape(&plan->layouts[t], &plan->mesh);
}

static int upload(mtf_pjrt_program *p, int device, mtf_pjrt_type type, const mtf_shape *shape, const void *data,
                  mtf_pjrt_buffer **out, mtf_error *err) {
  int64_t dims[MTF_MAX_RANK];
  return mtf_pjrt_buffer_from_host(p->rt, device, type, dims_of(shape, dims), shape->rank, data, out, err);
}

/* The variable's buffers on every device: already in the store (shared), or made from its initial value. */
static int ensure_variable(mtf_pjrt_program *p, const mtf_pjrt_value *v, mtf_error *err) {
  mtf_pjrt_buffer **slot = &p->store->buffers[(size_t)v->node * (size_t)p->n];
  if (slot[0]) return MTF_OK;
  float *host = malloc((size_t)v->elements * ELEM + 1);
  if (!host) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: the initial value of '%s'", p->plans[0]->graph->nodes[v->node].name);
  int rc = MTF_OK;
  for (int d = 0; rc == MTF_OK && d < p->n; d++) {
    mtf_plan_initial_slice(p->plans[d], v->node, host);
    rc = upload(p, d, MTF_PJRT_F32, &v->shape, host, &slot[d], err);
  }
  free(host);
  return rc ? mtf_error_prefix(err, "pjrt: variable '%s'", p->plans[0]->graph->nodes[v->node].name) : MTF_OK;
}

static int create_buffers(mtf_pjrt_program *p, mtf_error *err) {
  p->inputs = calloc((size_t)p->n_params * (size_t)p->n + 1, sizeof *p->inputs);
  p->fetched = calloc((size_t)p->n_results * (size_t)p->n + 1, sizeof *p->fetched);
  p->keep = calloc((size_t)p->n_params + 1, 1);
  if (!p->inputs || !p->fetched || !p->keep) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: program buffers");
  for (int i = 0; i < p->n_params; i++) p->keep[i] = 1;
  for (int j = 0; j < p->n_results; j++) {
    int a = p->results[j].aliases;
    if (a < 0) continue;
    if (a >= p->n_params || p->params[a].kind != MTF_PJRT_VARIABLE || p->params[a].node != p->results[j].node)
      return mtf_error_set(err, MTF_ERR_INVALID, "pjrt: result %d aliases parameter %d, which is not its variable", j, a);
    p->keep[a] = 0; /* donated: the result replaces it */
  }
  for (int i = 0; i < p->n_params; i++) {
    const mtf_pjrt_value *v = &p->params[i];
    if (v->kind == MTF_PJRT_VARIABLE) MTF_CHECK(ensure_variable(p, v, err));
    if (v->kind != MTF_PJRT_INPUT) continue;
    void *zeros = calloc((size_t)v->elements + 1, ELEM);
    if (!zeros) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: input buffers");
    int rc = MTF_OK;
    for (int d = 0; rc == MTF_OK && d < p->n; d++) rc = upload(p, d, v->elem, &v->shape, zeros, &p->inputs[i * p->n + d], err);
    free(zeros);
    MTF_CHECK(rc);
  }
  return MTF_OK;
}

int mtf_pjrt_program_create(mtf_pjrt_runtime *rt, mtf_plan *const *plans, int n_plans, const mtf_pjrt_module *module,
                            mtf_pjrt_program *share_with, mtf_pjrt_program **out, mtf_error *err) {
  *out = NULL;
  if (n_plans < 1 || module->n_devices != n_plans)
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt: a module for %d devices from %d plans", module->n_devices, n_plans);
  for (int r = 0; r < n_plans; r++)
    if (plans[r]->graph != plans[0]->graph || plans[r]->mesh_rank != r)
      return mtf_error_set(err, MTF_ERR_INVALID, "pjrt: plans[%d] is not mesh rank %d of the same graph", r, r);
  if (share_with && (share_with->plans[0]->graph != plans[0]->graph || share_with->n != n_plans))
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt: variables can only be shared between programs of one graph and mesh");
  mtf_pjrt_program *p = calloc(1, sizeof *p);
  if (!p) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: program");
  p->rt = rt;
  p->n = n_plans;
  p->n_params = module->n_params;
  p->n_results = module->n_results;
  p->plans = malloc(sizeof *p->plans * (size_t)n_plans);
  p->params = malloc(sizeof *p->params * ((size_t)module->n_params + 1));
  p->results = malloc(sizeof *p->results * ((size_t)module->n_results + 1));
  int rc = MTF_OK;
  if (!p->plans || !p->params || !p->results) rc = mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: program");
  if (rc == MTF_OK) {
    memcpy(p->plans, plans, sizeof *p->plans * (size_t)n_plans);
    memcpy(p->params, module->params, sizeof *p->params * (size_t)module->n_params);
    memcpy(p->results, module->results, sizeof *p->results * (size_t)module->n_results);
    if (share_with) {
      p->store = share_with->store;
      p->store->refs++;
    } else {
      p->store = calloc(1, sizeof *p->store);
      int n_nodes = plans[0]->graph->n_nodes;
      if (p->store) p->store->buffers = calloc((size_t)n_nodes * (size_t)n_plans + 1, sizeof *p->store->buffers);
      if (!p->store || !p->store->buffers) rc = mtf_error_set(err, MTF_ERR_NOMEM, "pjrt: variable store");
      else *p->store = (variable_store){.refs = 1, .n_nodes = n_nodes, .n_devices = n_plans, .buffers = p->store->buffers};
    }
  }
  if (rc == MTF_OK) rc = mtf_pjrt_compile(rt, module->text, module->length, n_plans, 1, &p->exe, err);
  if (rc == MTF_OK && mtf_pjrt_executable_num_outputs(p->exe) != p->n_results)
    rc = mtf_error_set(err, MTF_ERR_INVALID, "pjrt: the compiled module has %d results, its description %d",
                       mtf_pjrt_executable_num_outputs(p->exe), p->n_results);
  if (rc == MTF_OK) rc = create_buffers(p, err);
  if (rc != MTF_OK) {
    mtf_pjrt_program_destroy(p);
    return rc;
  }
  *out = p;
  return MTF_OK;
}

void mtf_pjrt_program_destroy(mtf_pjrt_program *p) {
  if (!p) return;
  if (p->inputs)
    for (int i = 0; i < p->n_params * p->n; i++) mtf_pjrt_buffer_destroy(p->rt, p->inputs[i]);
  if (p->fetched)
    for (int i = 0; i < p->n_results * p->n; i++) mtf_pjrt_buffer_destroy(p->rt, p->fetched[i]);
  if (p->store && --p->store->refs == 0) {
    for (int i = 0; i < p->store->n_nodes * p->store->n_devices; i++) mtf_pjrt_buffer_destroy(p->rt, p->store->buffers[i]);
    free(p->store->buffers);
    free(p->store);
  }
  mtf_pjrt_executable_destroy(p->rt, p->exe);
  free(p->inputs);
  free(p->fetched);
  free(p->keep);
  free(p->plans);
  free(p->params);
  free(p->results);
  free(p);
}

int mtf_pjrt_program_set_input(mtf_pjrt_program *p, mtf_tensor input, const void *full, mtf_error *err) {
  const mtf_graph *g = p->plans[0]->graph;
  if (input < 0 || input >= g->n_nodes || g->nodes[input].kind != MTF_OP_INPUT)
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt set_input: tensor %d is not an input", input);
  for (int i = 0; i < p->n_params; i++) {
    const mtf_pjrt_value *v = &p->params[i];
    if (v->kind != MTF_PJRT_INPUT || v->node != input) continue;
    char *slice = malloc((size_t)v->elements * ELEM + 1);
    if (!slice) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt set_input: out of memory");
    int rc = MTF_OK;
    for (int d = 0; rc == MTF_OK && d < p->n; d++) {
      const mtf_plan *plan = p->plans[d];
      int64_t offsets[MTF_MAX_RANK];
      mtf_layout_slice_offset(&plan->layouts[input], &plan->mesh, plan->coord, offsets);
      mtf_shape local = local_shape(plan, input);
      copy_slice(&g->nodes[input].shape, &local, offsets, (char *)full, slice, 0);
      mtf_pjrt_buffer *fresh = NULL;
      rc = upload(p, d, v->elem, &v->shape, slice, &fresh, err);
      if (rc == MTF_OK) {
        mtf_pjrt_buffer_destroy(p->rt, p->inputs[i * p->n + d]);
        p->inputs[i * p->n + d] = fresh;
      }
    }
    free(slice);
    return rc ? mtf_error_prefix(err, "pjrt set_input '%s'", g->nodes[input].name) : MTF_OK;
  }
  return MTF_OK; /* not read by this program */
}

void mtf_pjrt_program_set_random_offset(mtf_pjrt_program *p, uint64_t offset) { p->random_offset = offset; }
void mtf_pjrt_program_set_microbatch(mtf_pjrt_program *p, int index) { p->microbatch = index; }

int mtf_pjrt_program_run(mtf_pjrt_program *p, mtf_error *err) {
  size_t n_args = (size_t)p->n_params * (size_t)p->n, n_outs = (size_t)p->n_results * (size_t)p->n;
  mtf_pjrt_buffer **args = calloc(n_args + 1, sizeof *args), **outs = calloc(n_outs + 1, sizeof *outs);
  mtf_pjrt_buffer **scalars = calloc(n_args + 1, sizeof *scalars); /* made for this run only */
  int rc = args && outs && scalars ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "pjrt run");
  /* The offset's low and high 32-bit words, as bit patterns (emit.h's RANDOM_OFFSET). */
  int32_t words[2];
  uint32_t low = (uint32_t)(p->random_offset & 0xffffffffu), high = (uint32_t)(p->random_offset >> 32);
  memcpy(&words[0], &low, 4);
  memcpy(&words[1], &high, 4);
  int32_t microbatch = p->microbatch;
  for (int i = 0; rc == MTF_OK && i < p->n_params; i++) {
    const mtf_pjrt_value *v = &p->params[i];
    for (int d = 0; rc == MTF_OK && d < p->n; d++) {
      size_t at = (size_t)d * (size_t)p->n_params + (size_t)i;
      switch (v->kind) {
        case MTF_PJRT_VARIABLE: args[at] = p->store->buffers[(size_t)v->node * (size_t)p->n + (size_t)d]; break;
        case MTF_PJRT_INPUT: args[at] = p->inputs[i * p->n + d]; break;
        case MTF_PJRT_RANDOM_OFFSET:
        case MTF_PJRT_MICROBATCH:
          rc = upload(p, d, MTF_PJRT_S32, &v->shape, v->kind == MTF_PJRT_MICROBATCH ? (void *)&microbatch : (void *)words,
                      &scalars[at], err);
          args[at] = scalars[at];
          break;
        case MTF_PJRT_FETCH: rc = mtf_error_set(err, MTF_ERR_INVALID, "pjrt: parameter %d is a fetch", i); break;
      }
    }
  }
  if (rc == MTF_OK) rc = mtf_pjrt_execute(p->rt, p->exe, p->n_params, args, p->keep, outs, err);
  if (rc == MTF_OK) {
    for (int j = 0; j < p->n_results; j++) {
      const mtf_pjrt_value *v = &p->results[j];
      for (int d = 0; d < p->n; d++) {
        mtf_pjrt_buffer *result = outs[(size_t)d * (size_t)p->n_results + (size_t)j];
        mtf_pjrt_buffer **home = NULL;
        if (v->aliases >= 0) home = &p->store->buffers[(size_t)v->node * (size_t)p->n + (size_t)d];
        else if (v->kind == MTF_PJRT_FETCH) home = &p->fetched[j * p->n + d];
        if (!home) {
          mtf_pjrt_buffer_destroy(p->rt, result);
          continue;
        }
        mtf_pjrt_buffer_destroy(p->rt, *home); /* a donated variable's old handle, or the last run's fetch */
        *home = result;
      }
    }
  }
  for (size_t i = 0; scalars && i < n_args; i++) mtf_pjrt_buffer_destroy(p->rt, scalars[i]);
  free(args);
  free(outs);
  free(scalars);
  return rc;
}

/* The buffer holding rank's slice of t: a fetch of the last run, else a variable. */
static mtf_pjrt_buffer *slice_buffer(mtf_pjrt_program *p, int rank, mtf_tensor t) {
  for (int j = 0; j < p->n_results; j++)
    if (p->results[j].kind == MTF_PJRT_FETCH && p->results[j].node == t) return p->fetched[j * p->n + rank];
  if (t >= 0 && t < p->store->n_nodes) return p->store->buffers[(size_t)t * (size_t)p->n + (size_t)rank];
  return NULL;
}

int mtf_pjrt_program_read_slice(mtf_pjrt_program *p, int rank, mtf_tensor t, void *out, mtf_error *err) {
  if (rank < 0 || rank >= p->n) return mtf_error_set(err, MTF_ERR_INVALID, "pjrt read_slice: rank %d of %d", rank, p->n);
  mtf_pjrt_buffer *b = slice_buffer(p, rank, t);
  if (!b)
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt read_slice: tensor %d is neither a variable of the program nor "
                         "fetched by its last run", t);
  size_t bytes = mtf_pjrt_buffer_host_bytes(p->rt, b, err);
  return mtf_pjrt_buffer_to_host(p->rt, b, out, bytes, err);
}

int mtf_pjrt_program_fetch(mtf_pjrt_program *p, mtf_tensor t, void *full, mtf_error *err) {
  const mtf_graph *g = p->plans[0]->graph;
  if (t < 0 || t >= g->n_nodes) return mtf_error_set(err, MTF_ERR_INVALID, "pjrt fetch: no tensor %d", t);
  int rc = MTF_OK;
  char *slice = NULL;
  for (int d = 0; rc == MTF_OK && d < p->n; d++) {
    const mtf_plan *plan = p->plans[d];
    mtf_shape local = local_shape(plan, t);
    char *grown = realloc(slice, (size_t)mtf_shape_num_elements(&local) * ELEM + 1);
    if (!grown) {
      rc = mtf_error_set(err, MTF_ERR_NOMEM, "pjrt fetch: out of memory");
      break;
    }
    slice = grown;
    rc = mtf_pjrt_program_read_slice(p, d, t, slice, err);
    if (rc != MTF_OK) break;
    int64_t offsets[MTF_MAX_RANK];
    mtf_layout_slice_offset(&plan->layouts[t], &plan->mesh, plan->coord, offsets);
    copy_slice(&g->nodes[t].shape, &local, offsets, full, slice, 1);
  }
  free(slice);
  return rc;
}

int mtf_pjrt_program_write_variable(mtf_pjrt_program *p, int rank, mtf_tensor var, const float *slice, mtf_error *err) {
  if (rank < 0 || rank >= p->n || var < 0 || var >= p->store->n_nodes ||
      !p->store->buffers[(size_t)var * (size_t)p->n + (size_t)rank])
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt write_variable: tensor %d is not a variable of the program", var);
  mtf_shape local = local_shape(p->plans[rank], var);
  mtf_pjrt_buffer *fresh = NULL;
  MTF_CHECK(upload(p, rank, MTF_PJRT_F32, &local, slice, &fresh, err));
  mtf_pjrt_buffer **home = &p->store->buffers[(size_t)var * (size_t)p->n + (size_t)rank];
  mtf_pjrt_buffer_destroy(p->rt, *home);
  *home = fresh;
  return MTF_OK;
}
