/* Stop requests for `mtf train`: SIGINT stops cleanly after the current step; SIGUSR1 and SIGTERM (Slurm's
 * warning before a time limit or preemption) save a checkpoint first. A signal is only noted in a flag;
 * the training loop asks at each step boundary, and every rank learns of any rank's request. */
#ifndef MTF_RUN_SIGNALS_H
#define MTF_RUN_SIGNALS_H

enum { MTF_STOP_CLEAN = 1, MTF_STOP_CHECKPOINT = 2 };

/* Installs (install 1) or removes (0) the handlers of SIGINT, SIGTERM and SIGUSR1. */
void mtf_signals_handle(int install);
/* Collective: 0 when no rank has a request; otherwise MTF_STOP_* bits, with MTF_STOP_CHECKPOINT set when
 * any rank asked for a checkpoint (it takes precedence over a clean stop). */
int mtf_signals_agreed_stop(void);

#endif
