/* The cross-entropy gradient from the forward's loss (mtf_plan_options.xent_grad_from_loss). The forward's
 * kernel reads each row of logits to find its max and its sum of exponentials, and writes loss = lse - x[label];
 * the gradient's kernel used to read the row again for the same max and sum before writing
 * dlogits = (exp(x - lse) - one_hot(label)) dy. Here a gradient step of the bf16 policy (no label smoothing, no
 * z-loss, the vocab whole on the rank: phase WHOLE) whose logits and labels are a forward step's gets that
 * step's loss buffer as well: lse = loss + x[label], one pass over the row. Only where no step in between
 * writes the loss, the logits or the labels; the loss's lifetime grows to the gradient. Run on the finished
 * step list, before buckets and the memory plan. */
#include <string.h>

#include "lower/lower_internal.h"

static int plain_xent(const mtf_step *s, mtf_op_kind op) {
  return s->kind == MTF_STEP_KERNEL && s->op == op && s->phase == MTF_PHASE_WHOLE &&
         s->params.xent.label_smoothing == 0.0f && s->params.xent.z_loss == 0.0f;
}

void mtf_lw_fuse_xent(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    mtf_step *grad = &p->steps[t];
    if (!plain_xent(grad, MTF_OP_SOFTMAX_XENT_GRAD) || !grad->bf16_policy || grad->n_in != 3) continue;
    int logits = grad->in[0], labels = grad->in[1];
    for (int f = t - 1; f >= 0; f--) {
      const mtf_step *fwd = &p->steps[f];
      if (plain_xent(fwd, MTF_OP_SOFTMAX_XENT) && fwd->n_in == 2 && fwd->in[0] == logits && fwd->in[1] == labels &&
          fwd->out_dtype == MTF_F32 && strcmp(fwd->params.xent.dim, grad->params.xent.dim) == 0) {
        int loss = fwd->out, clear = 1;
        for (int u = f + 1; u < t && clear; u++) clear = !mtf_lw_step_touches(&p->steps[u], loss, 0, 1);
        if (!clear) break;
        grad->xent_loss = loss + 1;
        if (p->buffers[loss].last_step < t) p->buffers[loss].last_step = t;
        p->stats.xent_grads_from_loss++;
        break;
      }
      if (mtf_lw_step_touches(fwd, logits, 0, 1) || mtf_lw_step_touches(fwd, labels, 0, 1)) break;
    }
  }
}
