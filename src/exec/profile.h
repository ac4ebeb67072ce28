/* An optional per-op profile of a session (MTF_PROFILE=1 in the environment): wall time per kernel op and
 * phase, and per kind of data movement (allreduce, allgather, slice, copy), summed over the session's runs
 * and printed as a table, largest first, when the session is destroyed. Timing wraps each step as the
 * executor runs it, so on an asynchronous backend a kernel's time lands on the next synchronising step. */
#ifndef MTF_EXEC_PROFILE_H
#define MTF_EXEC_PROFILE_H

#include <stdio.h>

#include "lower/plan.h"

typedef struct mtf_profile mtf_profile;

/* A profile when MTF_PROFILE is set to something other than "0" or "", else NULL (and then nothing is
 * timed: the executor checks the pointer). */
mtf_profile *mtf_profile_from_env(void);
void mtf_profile_add(mtf_profile *p, const mtf_step *st, double seconds);
/* Counts one run of the whole plan. */
void mtf_profile_run(mtf_profile *p);
void mtf_profile_print(const mtf_profile *p, FILE *out, const char *title);
void mtf_profile_destroy(mtf_profile *p);

#endif
