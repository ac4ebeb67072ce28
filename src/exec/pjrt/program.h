/* A whole program on PJRT devices: the per-rank plans of one graph, mesh and layout, emitted as ONE SPMD
 * StableHLO module (emit.h), compiled once for the mesh's devices (device d runs mesh rank d) and run
 * once per step. This is what a session on backend.kind pjrt computes with, instead of the step
 * executor (exec/steps.c):
 *   - variables (and optimizer state) live on the devices as buffers, carried from run to run: a result
 *     that replaces a variable (the module's alias) becomes that variable's buffer, its old buffer being
 *     donated to the run; variables the program only reads stay as they are;
 *   - inputs are uploaded when set (each device its slice) and stay until set again;
 *   - the random offset and microbatch index are tiny per-run uploads;
 *   - fetched tensors are results, downloaded on request (a slice per device, or the whole tensor);
 *   - checkpoints stage variables through read_slice / write_variable, as on cpu (same HDF5 format).
 * Programs of one graph share their variables (share_with): an eval program reads what training wrote.
 * The plans stay the caller's and must outlive the program; the module is only read during create. */
#ifndef MTF_EXEC_PJRT_PROGRAM_H
#define MTF_EXEC_PJRT_PROGRAM_H

#include <stdint.h>

#include "exec/pjrt/emit.h"
#include "exec/pjrt/runtime.h"

typedef struct mtf_pjrt_program mtf_pjrt_program;

/* Compiles `module` (emitted from plans[0..n_plans), n_plans = the mesh size, at most rt's devices) and
 * creates its buffers: variables from share_with's (when given: same graph and mesh) or their initial
 * values (mtf_plan_initial_slice: the same as on cpu), inputs as zeros. */
int mtf_pjrt_program_create(mtf_pjrt_runtime *rt, mtf_plan *const *plans, int n_plans, const mtf_pjrt_module *module,
                            mtf_pjrt_program *share_with, mtf_pjrt_program **out, mtf_error *err);
/* In any order: shared variables live until the last program holding them goes. */
void mtf_pjrt_program_destroy(mtf_pjrt_program *p);

/* A whole input tensor (row-major over its global shape; f32 or int32 bits as the input's dtype): each
 * device gets its slice. Inputs the program does not read are ignored, as on cpu. */
int mtf_pjrt_program_set_input(mtf_pjrt_program *p, mtf_tensor input, const void *full, mtf_error *err);
void mtf_pjrt_program_set_random_offset(mtf_pjrt_program *p, uint64_t offset);
void mtf_pjrt_program_set_microbatch(mtf_pjrt_program *p, int index);

/* One run of the executable on all devices; waits for it. */
int mtf_pjrt_program_run(mtf_pjrt_program *p, mtf_error *err);

/* Mesh rank `rank`'s slice of a variable or of a fetched tensor (after a run), to the host
 * (mtf_plan_slice_elements values). */
int mtf_pjrt_program_read_slice(mtf_pjrt_program *p, int rank, mtf_tensor t, void *out, mtf_error *err);
/* The whole fetched tensor or variable, assembled from every rank's slice (row-major, global shape). */
int mtf_pjrt_program_fetch(mtf_pjrt_program *p, mtf_tensor t, void *full, mtf_error *err);
/* Replaces rank `rank`'s slice of variable `var` (checkpoint restore). */
int mtf_pjrt_program_write_variable(mtf_pjrt_program *p, int rank, mtf_tensor var, const float *slice,
                                    mtf_error *err);

#endif
