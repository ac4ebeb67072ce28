/* Signal flags for a clean stop of the training loop (see signals.h). */
#define _POSIX_C_SOURCE 200809L
#include "run/signals.h"

#include <signal.h>
#include <string.h>

#include "comm/world.h"

static volatile sig_atomic_t stop_requested;

static void request_stop(int signal_number) {
  stop_requested |= MTF_STOP_CHECKPOINT;
  if (signal_number == SIGINT) {
    stop_requested |= MTF_STOP_INTERRUPT;
    signal(SIGINT, SIG_DFL); /* a second Ctrl-C stops at once (async-signal-safe) */
  }
}

/* Each handler blocks the others while it runs, so the flag's read-modify-write cannot be interrupted by a
 * second signal. */
void mtf_signals_handle(int install) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = install ? request_stop : SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaddset(&action.sa_mask, SIGUSR1);
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGUSR1, &action, NULL);
}

int mtf_signals_agreed_stop(void) {
  /* One reduction per step: every request is MTF_STOP_CHECKPOINT (2) or with MTF_STOP_INTERRUPT (3), so the
   * maximum is nonzero whenever any rank asked to stop, and has the interrupt bit when any rank had one. */
  return (int)mtf_world_max((double)stop_requested);
}
