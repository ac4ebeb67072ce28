/* A session whose plans run as one compiled program over every device of the mesh, from one process (the
 * pjrt backend: exec/pjrt/session.c). The executor (exec.c) checks the caller's tensors against the session's
 * host plan, a one-rank plan whose slices are whole tensors, and hands those whole tensors to this interface;
 * it names no backend. A kind that runs this way has `one_program` among its capabilities and a constructor in
 * its registry entry (mtf_backend_program_session_create). */
#ifndef MTF_EXEC_PROGRAM_SESSION_H
#define MTF_EXEC_PROGRAM_SESSION_H

#include <stdint.h>

#include "lower/plan.h"

typedef struct mtf_program_session mtf_program_session;

typedef struct mtf_program_session_ops {
  void (*destroy)(mtf_program_session *p);
  int (*set_input)(mtf_program_session *p, mtf_tensor input, const void *whole, mtf_error *err);
  int (*run)(mtf_program_session *p, uint64_t random_offset, mtf_error *err);
  /* The whole tensor: a variable, or a fetch of the last run. */
  int (*fetch)(mtf_program_session *p, mtf_tensor t, void *whole, mtf_error *err);
  /* A variable's whole value: every device gets its slice. */
  int (*write_variable)(mtf_program_session *p, mtf_tensor var, const float *whole, mtf_error *err);
  int (*devices)(const mtf_program_session *p);
  /* The host threads its runtime computes on (0: the runtime's own default). */
  int (*threads)(const mtf_program_session *p);
} mtf_program_session_ops;

struct mtf_program_session {
  const mtf_program_session_ops *ops;
  const char *kind; /* the backend kind it runs on */
};

typedef struct mtf_program_session_options {
  const char *plugin;           /* the runtime's plugin (pjrt), NULL: its default */
  int local_devices;            /* devices to ask the runtime for (0: all) */
  mtf_program_session *share;   /* the session whose runtime and variables this one uses, or NULL */
} mtf_program_session_options;

typedef int (*mtf_program_session_create_fn)(mtf_plan *const *device_plans, int n_devices,
                                             const mtf_program_session_options *options, mtf_program_session **out,
                                             mtf_error *err);

/* The registry's: a program session of backend `kind` over the device plans (one per device of the mesh); an
 * error for a kind that has no such constructor (it runs plans step by step) or is not built in. */
int mtf_backend_program_session_create(const char *kind, mtf_plan *const *device_plans, int n_devices,
                                       const mtf_program_session_options *options, mtf_program_session **out,
                                       mtf_error *err);

#endif
