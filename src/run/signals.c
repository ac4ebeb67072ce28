/* Signal flags for a clean stop of the training loop (see signals.h). */
#define _POSIX_C_SOURCE 200809L
#include "run/signals.h"

#include <signal.h>
#include <string.h>

#include "comm/world.h"

static volatile sig_atomic_t stop_requested;

static void request_stop(int signal_number) {
  stop_requested |= signal_number == SIGINT ? MTF_STOP_CLEAN : MTF_STOP_CHECKPOINT;
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
  /* One reduction per step: MTF_STOP_CHECKPOINT is the larger bit, so the maximum has it whenever any rank
   * does, and is nonzero whenever any rank asked to stop at all. */
  return (int)mtf_world_max((double)stop_requested);
}
