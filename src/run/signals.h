/* Stop requests for `mtf train`: SIGINT (Ctrl-C), SIGUSR1 and SIGTERM (Slurm's warning before a time limit
 * or preemption) each stop the run after the current step with a checkpoint of it; SIGINT's run exits 130,
 * the others' 75. A second SIGINT stops the process at once (its default action), for one who cannot wait
 * for the checkpoint. A signal is only noted in a flag; the training loop asks at each step boundary, and
 * every rank learns of any rank's request. */
#ifndef MTF_RUN_SIGNALS_H
#define MTF_RUN_SIGNALS_H

enum { MTF_STOP_INTERRUPT = 1, MTF_STOP_CHECKPOINT = 2 };

/* Installs (install 1) or removes (0) the handlers of SIGINT, SIGTERM and SIGUSR1. */
void mtf_signals_handle(int install);
/* Collective: 0 when no rank has a request; otherwise MTF_STOP_CHECKPOINT, with MTF_STOP_INTERRUPT too when
 * any rank had a SIGINT. */
int mtf_signals_agreed_stop(void);

#endif
