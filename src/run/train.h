/* `mtf train` and `mtf eval` (the caller has started the job: mtf_world_init). The training loop is in
 * train_loop.c, evaluation in eval.c; what both share (communicator, sessions, loader) in setup.c. */
#ifndef MTF_RUN_TRAIN_H
#define MTF_RUN_TRAIN_H

#include "config/config.h"

/* Returned by mtf_train_run when SIGINT stopped the run cleanly after a step, without a checkpoint (the
 * CLI exits with 130, as a shell does for Ctrl-C). */
#define MTF_RUN_INTERRUPTED 130
/* Returned when SIGUSR1 or SIGTERM (Slurm's warning before a time limit or preemption) stopped the run
 * after writing a checkpoint: `mtf train` again resumes it. 75 is EX_TEMPFAIL ("try again later"), so a
 * job script can requeue on it. */
#define MTF_RUN_PREEMPTED 75
/* Returned when the run resumed from a checkpoint at or past train.steps, so it had nothing to train (a
 * finished run started again): said, not silently done, unless the caller asked (mtf_train_options.done_ok). */
#define MTF_RUN_NOTHING_TO_TRAIN 103 /* not an mtf_error code (those are small) */
#define MTF_EXIT_NOTHING_TO_TRAIN 3   /* the exit status it becomes */

typedef struct mtf_train_options {
  const char *resume_from; /* --from PATH: this checkpoint instead of RUN_DIR/checkpoints' latest */
  int fresh;               /* --fresh: start at step 0 whatever the run directory holds */
  int done_ok;             /* --done-ok: a checkpoint already at train.steps is success (a requeued finished job) */
} mtf_train_options;

int mtf_train_run(const mtf_config *cfg, const mtf_train_options *options, mtf_error *err);
/* checkpoint: the one to evaluate; NULL for RUN_DIR/checkpoints' latest good one. */
int mtf_eval_run(const mtf_config *cfg, int json, const char *checkpoint, mtf_error *err);

#endif
