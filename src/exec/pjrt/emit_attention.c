/* StableHLO for fused causal attention and its gradient (exec/cpu/attention.c). Not emitted yet: the
 * emitter reports the op by name (e_fail), so a plan with attention fails to emit with a clear message. */
#include "exec/pjrt/emit_internal.h"

int e_kernel_attention(h_emitter *E, const mtf_step *st, int *handled) {
  (void)E;
  *handled = 0;
  (void)st;
  return MTF_OK;
}
