/* The step executor: a session implementation (exec/session_impl.h) that runs a plan's steps on one rank through
 * its backend's kernels and the job's communicator (exec/steps.c). exec/session.c makes one for every kind
 * whose registry entry lacks `one_program`. */
#ifndef MTF_EXEC_STEPS_H
#define MTF_EXEC_STEPS_H

#include "exec/backend.h"
#include "exec/session_impl.h"

/* The plan's memory on its backend (options->backend; share: the step executor whose variables, backend and
 * collectives this one uses, or NULL). plan and comm were checked against each other by the caller. */
int mtf_steps_create(mtf_plan *plan, mtf_comm *comm, const mtf_session_options *options, mtf_session_impl *share,
                     mtf_session_impl **out, mtf_error *err);

/* What only the step executor has: host pointers into its memory, its time in collectives, its backend. Each is
 * 0 or NULL for another kind of session. */
const float *mtf_steps_slice(const mtf_session_impl *impl, mtf_tensor t);
float *mtf_steps_variable_slice(mtf_session_impl *impl, mtf_tensor t);
double mtf_steps_comm_seconds(const mtf_session_impl *impl);
double mtf_steps_progress_seconds(const mtf_session_impl *impl);
const char *mtf_steps_collectives(const mtf_session_impl *impl);
const char *mtf_steps_bf16_text(const mtf_session_impl *impl);
int64_t mtf_steps_allocated_bytes(const mtf_session_impl *impl);
mtf_backend *mtf_steps_backend(mtf_session_impl *impl);

#endif
