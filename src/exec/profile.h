/* An optional per-op profile of a session (MTF_PROFILE=1 in the environment): time per kernel op and phase,
 * and per kind of data movement (allreduce, allgather, slice, copy), summed over the session's runs and
 * printed as a table, largest first, when the session is destroyed. On the host clock, timing wraps each step
 * as the executor runs it; a backend whose kernels run after their launch returns (cuda) gives device time
 * instead: a mark on its timeline after every step (mtf_backend.profile_mark), read after the run. */
#ifndef MTF_EXEC_PROFILE_H
#define MTF_EXEC_PROFILE_H

#include <stdio.h>

#include "exec/backend.h"
#include "lower/plan.h"

typedef struct mtf_profile mtf_profile;

/* A profile when MTF_PROFILE is set to something other than "0" or "", else NULL (and then nothing is
 * timed: the executor checks the pointer). */
mtf_profile *mtf_profile_from_env(void);
void mtf_profile_add(mtf_profile *p, const mtf_step *st, double seconds);
/* Device time (where be->profile_mark and profile_seconds exist, else these do nothing and return 0): begin
 * marks the run's start, step follows each step the run executes, end synchronizes the backend and adds each
 * step's time between its marks. A backend that fails a mark leaves the profile to the host clock from then
 * on (a note once). */
int mtf_profile_device_begin(mtf_profile *p, mtf_backend *be);
void mtf_profile_device_step(mtf_profile *p, mtf_backend *be, const mtf_step *st);
void mtf_profile_device_end(mtf_profile *p, mtf_backend *be);
/* Counts one run of the whole plan. */
void mtf_profile_run(mtf_profile *p);
void mtf_profile_print(const mtf_profile *p, FILE *out, const char *title);
void mtf_profile_destroy(mtf_profile *p);

#endif
