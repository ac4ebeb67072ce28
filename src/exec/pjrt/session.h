/* The pjrt side of an mtf_session (exec.c dispatches to it): one process owning every device of the mesh,
 * the per-rank plans compiled into one program (program.h) on first use. The session's own plan is the
 * graph's plan on a one-rank "host" mesh, so the run layer's slices (inputs, checkpoints) are whole
 * tensors; this file cuts them into the devices' slices and assembles them back. */
#ifndef MTF_EXEC_PJRT_SESSION_H
#define MTF_EXEC_PJRT_SESSION_H

#include "exec/pjrt/program.h"

typedef struct mtf_pjrt_session mtf_pjrt_session;

/* share: the session whose runtime and variables this one uses (NULL: opens the plugin itself). */
int mtf_pjrt_session_create(mtf_plan *const *device_plans, int n_devices, const char *plugin, int local_devices,
                            mtf_pjrt_session *share, mtf_pjrt_session **out, mtf_error *err);
void mtf_pjrt_session_destroy(mtf_pjrt_session *s);
int mtf_pjrt_session_set_input(mtf_pjrt_session *s, mtf_tensor input, const void *full, mtf_error *err);
int mtf_pjrt_session_run(mtf_pjrt_session *s, uint64_t random_offset, mtf_error *err);
/* The whole tensor (a variable, or a fetch of the last run). */
int mtf_pjrt_session_fetch(mtf_pjrt_session *s, mtf_tensor t, void *full, mtf_error *err);
/* A variable's whole value: every device gets its slice. */
int mtf_pjrt_session_write_variable(mtf_pjrt_session *s, mtf_tensor var, const float *full, mtf_error *err);
int mtf_pjrt_session_devices(const mtf_pjrt_session *s);
/* The host threads of the plugin's pools as mtf set them (mtf_pjrt_threads_needed) or the user did
 * ($PJRT_NPROC / $NPROC); 0 = the plugin's own default. */
int mtf_pjrt_session_threads(const mtf_pjrt_session *s);

#endif
