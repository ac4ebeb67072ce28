/* The pjrt backend's program session (exec/session_impl.h): one process owning every device of the mesh,
 * the per-rank plans compiled into one program (program.h) on first use. The executor's host plan is the
 * graph's plan on a one-rank mesh, so the run layer's slices (inputs, checkpoints) are whole tensors; this file
 * cuts them into the devices' slices and assembles them back. Made through the registry (exec/registry.c). */
#ifndef MTF_EXEC_PJRT_SESSION_H
#define MTF_EXEC_PJRT_SESSION_H

#include "exec/pjrt/program.h"
#include "exec/session_impl.h"

/* options->share: a pjrt program session whose runtime and variables this one uses (NULL: opens the plugin). */
int mtf_pjrt_program_session_create(mtf_plan *const *device_plans, int n_devices,
                                    const mtf_program_session_options *options, mtf_session_impl **out,
                                    mtf_error *err);

#endif
