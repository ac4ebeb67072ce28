/* The pjrt side of an mtf_session (see session.h). */
#include "exec/pjrt/session.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mtf_pjrt_session {
  mtf_pjrt_runtime *rt;
  int owns_runtime;
  mtf_plan **plans;
  int n;
  mtf_pjrt_program *program;
};

int mtf_pjrt_session_create(mtf_plan *const *device_plans, int n_devices, const char *plugin, int local_devices,
                            mtf_pjrt_session *share, mtf_pjrt_session **out, mtf_error *err) {
  *out = NULL;
  mtf_pjrt_session *s = calloc(1, sizeof *s);
  if (!s) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt session");
  s->n = n_devices;
  s->plans = malloc(sizeof *s->plans * (size_t)n_devices);
  int rc = s->plans ? MTF_OK : mtf_error_set(err, MTF_ERR_NOMEM, "pjrt session");
  if (rc == MTF_OK) memcpy(s->plans, device_plans, sizeof *s->plans * (size_t)n_devices);
  /* The module first: its collectives size the client's thread pool (mtf_pjrt_threads_needed). */
  mtf_pjrt_module module = {0};
  if (rc == MTF_OK) rc = mtf_pjrt_emit((const mtf_plan *const *)device_plans, n_devices, NULL, &module, err);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = rc == MTF_OK ? mtf_pjrt_threads_needed(n_devices, module.n_collectives, cores > 0 ? (int)cores : 1) : 0;
  if (rc == MTF_OK && share) {
    s->rt = share->rt;
    /* The pool was sized for the first session's program (training, the one with the most collectives);
     * a pool the user sized is the user's call. */
    int have = mtf_pjrt_threads_set(s->rt);
    if (have > 0 && have < threads)
      rc = mtf_error_set(err, MTF_ERR_INVALID,
                         "pjrt: this program has %d collectives on %d devices and needs %d host threads, but the "
                         "plugin's pool has %d (%s): export %s=%d",
                         module.n_collectives, n_devices, threads, have, MTF_PJRT_THREADS_ENV, MTF_PJRT_THREADS_ENV,
                         threads);
  } else if (rc == MTF_OK) {
    /* As configured: 0 asks for no count (a TPU or GPU plugin uses all its chips; "cpu_device_count" is
     * only the CPU plugin's option), and too few devices is compile's clear error. */
    mtf_pjrt_options options = {.plugin_path = plugin, .local_devices = local_devices, .threads = threads};
    rc = mtf_pjrt_open(&options, &s->rt, err);
    s->owns_runtime = rc == MTF_OK;
  }
  /* Products of bfloat16 operands stay bf16 on the plugins whose dots take them (bf16_dots): every platform but
   * the XLA CPU plugin's; the same module otherwise, so its collectives still size the pool. */
  if (rc == MTF_OK && strcmp(mtf_pjrt_platform_name(s->rt), "cpu") != 0) {
    mtf_pjrt_emit_options bf16_dots = {.bf16_dots = 1};
    mtf_pjrt_module_free(&module);
    rc = mtf_pjrt_emit((const mtf_plan *const *)device_plans, n_devices, &bf16_dots, &module, err);
  }
  if (rc == MTF_OK)
    rc = mtf_pjrt_program_create(s->rt, s->plans, n_devices, &module, share ? share->program : NULL, &s->program, err);
  mtf_pjrt_module_free(&module);
  if (rc != MTF_OK) {
    mtf_pjrt_session_destroy(s);
    return rc;
  }
  *out = s;
  return MTF_OK;
}

void mtf_pjrt_session_destroy(mtf_pjrt_session *s) {
  if (!s) return;
  mtf_pjrt_program_destroy(s->program);
  if (s->owns_runtime) mtf_pjrt_close(s->rt);
  free(s->plans);
  free(s);
}

int mtf_pjrt_session_set_input(mtf_pjrt_session *s, mtf_tensor input, const void *full, mtf_error *err) {
  return mtf_pjrt_program_set_input(s->program, input, full, err);
}

int mtf_pjrt_session_run(mtf_pjrt_session *s, uint64_t random_offset, mtf_error *err) {
  mtf_pjrt_program_set_random_offset(s->program, random_offset);
  return mtf_pjrt_program_run(s->program, err);
}

int mtf_pjrt_session_fetch(mtf_pjrt_session *s, mtf_tensor t, void *full, mtf_error *err) {
  return mtf_pjrt_program_fetch(s->program, t, full, err);
}

int mtf_pjrt_session_write_variable(mtf_pjrt_session *s, mtf_tensor var, const float *full, mtf_error *err) {
  const mtf_graph *g = s->plans[0]->graph;
  int rc = MTF_OK;
  float *slice = NULL;
  for (int r = 0; rc == MTF_OK && r < s->n; r++) {
    const mtf_plan *plan = s->plans[r];
    const mtf_tensor_layout *layout = &plan->layouts[var];
    mtf_shape local = mtf_layout_slice_shape(layout, &plan->mesh);
    float *grown = realloc(slice, sizeof(float) * (size_t)mtf_shape_num_elements(&local) + 1);
    if (!grown) {
      rc = mtf_error_set(err, MTF_ERR_NOMEM, "pjrt write_variable");
      break;
    }
    slice = grown;
    int64_t offsets[MTF_MAX_RANK], strides[MTF_MAX_RANK], stride = 1, index[MTF_MAX_RANK] = {0};
    mtf_layout_slice_offset(layout, &plan->mesh, plan->coord, offsets);
    const mtf_shape *global = &g->nodes[var].shape;
    for (int d = global->rank - 1; d >= 0; d--) {
      strides[d] = stride;
      stride *= global->dims[d].size;
    }
    int64_t n = mtf_shape_num_elements(&local);
    for (int64_t e = 0; e < n; e++) {
      int64_t at = 0;
      for (int d = 0; d < local.rank; d++) at += (index[d] + offsets[d]) * strides[d];
      slice[e] = full[at];
      for (int d = local.rank - 1; d >= 0; d--) {
        if (++index[d] < local.dims[d].size) break;
        index[d] = 0;
      }
    }
    rc = mtf_pjrt_program_write_variable(s->program, r, var, slice, err);
  }
  free(slice);
  return rc;
}

int mtf_pjrt_session_devices(const mtf_pjrt_session *s) { return s->n; }
int mtf_pjrt_session_threads(const mtf_pjrt_session *s) { return mtf_pjrt_threads(s->rt); }
