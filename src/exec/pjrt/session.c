/* The pjrt backend's program session (see session.h): exec/session_impl.h's interface. */
#include "exec/pjrt/session.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct mtf_pjrt_session {
  mtf_session_impl base; /* first: the interface the executor calls */
  mtf_pjrt_runtime *rt;
  int owns_runtime;
  mtf_plan **plans;
  int n;
  mtf_pjrt_program *program;
} mtf_pjrt_session;

static void session_destroy(mtf_session_impl *base);
static const mtf_session_impl_ops pjrt_session_ops;

int mtf_pjrt_program_session_create(mtf_plan *const *device_plans, int n_devices,
                                    const mtf_program_session_options *options, mtf_session_impl **out,
                                    mtf_error *err) {
  *out = NULL;
  const char *plugin = options ? options->plugin : NULL;
  int local_devices = options ? options->local_devices : 0;
  mtf_pjrt_session *share = options && options->share ? (mtf_pjrt_session *)options->share : NULL;
  if (share && share->base.ops != &pjrt_session_ops)
    return mtf_error_set(err, MTF_ERR_INVALID, "pjrt session: can share only another pjrt session's variables");
  mtf_pjrt_session *s = calloc(1, sizeof *s);
  if (!s) return mtf_error_set(err, MTF_ERR_NOMEM, "pjrt session");
  s->base.ops = &pjrt_session_ops;
  s->base.kind = "pjrt";
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
    mtf_pjrt_options runtime = {.plugin_path = plugin, .local_devices = local_devices, .threads = threads};
    rc = mtf_pjrt_open(&runtime, &s->rt, err);
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
    session_destroy(&s->base);
    return rc;
  }
  *out = &s->base;
  return MTF_OK;
}

static void session_destroy(mtf_session_impl *base) {
  mtf_pjrt_session *s = (mtf_pjrt_session *)base;
  if (!s) return;
  mtf_pjrt_program_destroy(s->program);
  if (s->owns_runtime) mtf_pjrt_close(s->rt);
  free(s->plans);
  free(s);
}

static int session_set_input(mtf_session_impl *base, mtf_tensor input, const void *full, mtf_error *err) {
  mtf_pjrt_session *s = (mtf_pjrt_session *)base;
  return mtf_pjrt_program_set_input(s->program, input, full, err);
}

static int session_run(mtf_session_impl *base, uint64_t random_offset, mtf_error *err) {
  mtf_pjrt_session *s = (mtf_pjrt_session *)base;
  mtf_pjrt_program_set_random_offset(s->program, random_offset);
  return mtf_pjrt_program_run(s->program, err);
}

static int session_read(mtf_session_impl *base, mtf_tensor t, void *full, mtf_error *err) {
  mtf_pjrt_session *s = (mtf_pjrt_session *)base;
  return mtf_pjrt_program_fetch(s->program, t, full, err);
}

static int session_write_variable(mtf_session_impl *base, mtf_tensor var, const float *full, mtf_error *err) {
  mtf_pjrt_session *s = (mtf_pjrt_session *)base;
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
    mtf_plan_slice_of_whole(plan, var, full, slice, sizeof(float));
    rc = mtf_pjrt_program_write_variable(s->program, r, var, slice, err);
  }
  free(slice);
  return rc;
}

static int session_set_microbatch(mtf_session_impl *base, const char *dim, int index, int count, mtf_error *err) {
  (void)dim, (void)index;
  if (count > 1)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend %s: train.microbatches > 1 is not supported yet (the "
                         "program is compiled once, without the microbatch numbering of random ops); use 1",
                         base->kind);
  return MTF_OK;
}

static int session_devices(const mtf_session_impl *base) { return ((const mtf_pjrt_session *)base)->n; }
static int session_threads(const mtf_session_impl *base) {
  return mtf_pjrt_threads(((const mtf_pjrt_session *)base)->rt);
}

static const mtf_session_impl_ops pjrt_session_ops = {
    .destroy = session_destroy,
    .set_input = session_set_input,
    .run = session_run,
    .read = session_read,
    .set_microbatch = session_set_microbatch,
    .write_variable = session_write_variable,
    .devices = session_devices,
    .threads = session_threads,
};
