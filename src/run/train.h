/* `mtf train` and `mtf eval` under MPI (MPI_Init done by the caller): see train.c. */
#ifndef MTF_RUN_TRAIN_H
#define MTF_RUN_TRAIN_H

#include "config/config.h"

/* Returned by mtf_train_run when SIGINT/SIGTERM stopped the run cleanly (the CLI exits with 130). */
#define MTF_RUN_INTERRUPTED 130

int mtf_train_run(const mtf_config *cfg, mtf_error *err);
int mtf_eval_run(const mtf_config *cfg, int json, mtf_error *err);

#endif
