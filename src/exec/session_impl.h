/* What a session runs on: the one interface both implementations of mtf_session have. The step executor
 * (exec/steps.c: a plan's steps on one rank, kernels through its backend, collectives through its communicator)
 * and a one-program backend's session (exec/pjrt/session.c: every device's plan compiled into one program, from
 * one process). The public mtf_session_* calls (exec/session.c) check the caller's tensors against the session's
 * plan and hand them to this interface; they name no backend. Slices are the session plan's: a one-program
 * session's plan is the host plan, a one-rank plan whose slices are whole tensors. A kind that runs as one program
 * has `one_program` among its capabilities and a constructor in its registry entry
 * (mtf_backend_program_session_create); the others make step executors. */
#ifndef MTF_EXEC_SESSION_IMPL_H
#define MTF_EXEC_SESSION_IMPL_H

#include <stdint.h>

#include "lower/plan.h"

typedef struct mtf_session_impl mtf_session_impl;

typedef struct mtf_session_impl_ops {
  void (*destroy)(mtf_session_impl *p);
  /* An input's slice (checked by the caller: an input of the plan, of the tensor's dtype). */
  int (*set_input)(mtf_session_impl *p, mtf_tensor input, const void *slice, mtf_error *err);
  int (*run)(mtf_session_impl *p, uint64_t random_offset, mtf_error *err);
  /* The slice of a variable, or of a fetch of the last run (checked by the caller). */
  int (*read)(mtf_session_impl *p, mtf_tensor t, void *slice, mtf_error *err);
  /* A variable's slice (a one-program session gives every device its part of it). */
  int (*write_variable)(mtf_session_impl *p, mtf_tensor var, const float *slice, mtf_error *err);
  /* mtf_session_set_microbatch's numbering for the random ops of the next runs (checked by the caller: count >= 1,
   * 0 <= index < count, dim a name when count > 1); an error where it cannot. */
  int (*set_microbatch)(mtf_session_impl *p, const char *dim, int index, int count, mtf_error *err);
  int (*devices)(const mtf_session_impl *p);
  /* The host threads it computes on (0: the runtime's own default). */
  int (*threads)(const mtf_session_impl *p);
} mtf_session_impl_ops;

struct mtf_session_impl {
  const mtf_session_impl_ops *ops;
  const char *kind; /* the backend kind it runs on */
};

typedef struct mtf_program_session_options {
  const char *plugin;           /* the runtime's plugin (pjrt), NULL: its default */
  int local_devices;            /* devices to ask the runtime for (0: all) */
  mtf_session_impl *share;      /* the session whose runtime and variables this one uses, or NULL */
} mtf_program_session_options;

typedef int (*mtf_program_session_create_fn)(mtf_plan *const *device_plans, int n_devices,
                                             const mtf_program_session_options *options, mtf_session_impl **out,
                                             mtf_error *err);

/* The registry's: a program session of backend `kind` over the device plans (one per device of the mesh); an
 * error for a kind that has no such constructor (it runs plans step by step) or is not built in. */
int mtf_backend_program_session_create(const char *kind, mtf_plan *const *device_plans, int n_devices,
                                       const mtf_program_session_options *options, mtf_session_impl **out,
                                       mtf_error *err);

#endif
