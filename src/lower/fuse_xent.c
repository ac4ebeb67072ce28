/* The cross-entropy gradient from the forward's loss (mtf_plan_options.xent_grad_from_loss). The forward's
 * kernel reads each row of logits to find its max and its sum of exponentials, and writes loss = lse - x[label];
 * the gradient's kernel used to read the row again for the same max and sum before writing
 * dlogits = (exp(x - lse) - one_hot(label)) dy. A gradient step of the bf16 policy (no label smoothing, no
 * z-loss, the vocab whole on the rank: phase WHOLE) whose logits and labels are a forward step's is fused with it
 * in one of two ways, on the finished step list, before buckets and the memory plan:
 *
 * Merged (the usual case in training): the gradient step computes the loss as well, in the same pass over each
 * row (exp(x - max) kept in the row's buffer, then scaled), and the forward step is marked `fused` and skipped.
 * This needs dy before the forward's consumers: the steps between the two that the gradient depends on (dy's
 * chain: the loss's seed gradient, a constant, broadcast) move before the forward, and the steps that read the
 * loss (its mean) move after the gradient. Allowed only where those dy steps do not read the loss, no step that
 * moves later reads or writes what the gradient or the dy steps write, and every step of the window is a plain
 * kernel (no other pass's fields). The loss equals the forward kernel's bit for bit (the same max, float lanes
 * and formula); the gradient differs by float roundings (exp(x - max) dy / sum for exp(x - lse) dy).
 *
 * From the loss (where the merge is not allowed): the gradient step gets the forward's loss buffer, lse =
 * loss + x[label], one pass over the row. Only where no step in between writes the loss, the logits or the
 * labels; the loss's lifetime grows to the gradient. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lower/lower_internal.h"

static int plain_xent(const mtf_step *s, mtf_op_kind op) {
  return s->kind == MTF_STEP_KERNEL && s->op == op && s->phase == MTF_PHASE_WHOLE &&
         s->params.xent.label_smoothing == 0.0f && s->params.xent.z_loss == 0.0f;
}

/* A kernel or a blocking allreduce (every rank reorders its plan alike, so the collectives stay in one order
 * everywhere) that no other post-pass has given fields the reordering would have to follow. */
static int plain_step(const mtf_step *s) {
  return (s->kind == MTF_STEP_KERNEL || s->kind == MTF_STEP_ALLREDUCE) && !s->fused && !s->fused_moments &&
         !s->squares_out && !s->xent_loss && !s->scatter_base && !s->bf16_copy && !s->skip_when_copy_current;
}

/* Buffers step s writes (its output and scratch; a merged gradient also its loss). */
static int writes(const mtf_step *s, int b) {
  return s->out == b || (s->scratch >= 0 && s->scratch == b) || (s->xent_writes_loss && s->xent_loss == b + 1);
}

static int touches(const mtf_step *s, int b) { return writes(s, b) || mtf_lw_step_touches(s, b, 1, 0); }

/* Whether any step of `set` (n of them, step indices) reads or writes a buffer that step u writes, or writes a
 * buffer u reads. */
static int conflicts(const mtf_plan *p, const int *set, int n, int u) {
  const mtf_step *x = &p->steps[u];
  for (int i = 0; i < n; i++) {
    const mtf_step *y = &p->steps[set[i]];
    if (touches(y, x->out) || writes(x, y->out)) return 1;
    for (int k = 0; k < y->n_in; k++)
      if (writes(x, y->in[k])) return 1;
    for (int k = 0; k < x->n_in; k++)
      if (writes(y, x->in[k])) return 1;
  }
  return 0;
}

/* Steps f .. t (forward, gradient) reordered as: dy's steps, the forward (skipped), the gradient (now also
 * writing the loss), the rest; 1 when done, 0 (nothing changed) when not allowed. */
static int merge(mtf_plan *p, int f, int t) {
  int n = t - f + 1, loss = p->steps[f].out;
  int *before = malloc(sizeof(int) * (size_t)n), *after = malloc(sizeof(int) * (size_t)n), *needed = calloc((size_t)n, sizeof(int));
  mtf_step *window = malloc(sizeof(mtf_step) * (size_t)n);
  int ok = before && after && needed && window, n_before = 0, n_after = 0;
  for (int u = f + 1; u < t && ok; u++) ok = plain_step(&p->steps[u]);
  /* dy's steps: those in the window the gradient depends on, found backwards */
  needed[n - 1] = 1;
  for (int u = t - 1; u > f && ok; u--) {
    for (int v = u + 1; v <= t && !needed[u - f]; v++)
      if (needed[v - f] && mtf_lw_step_touches(&p->steps[v], p->steps[u].out, 1, 0)) needed[u - f] = 1;
    if (needed[u - f] && mtf_lw_step_touches(&p->steps[u], loss, 1, 0)) ok = 0; /* dy from the loss */
  }
  for (int u = f + 1; u < t && ok; u++) {
    if (needed[u - f]) before[n_before++] = u;
    else after[n_after++] = u;
  }
  /* what moves later must not meet what moves earlier (or the gradient, which moves earlier than they) */
  for (int i = 0; i < n_after && ok; i++) {
    before[n_before] = t;
    ok = !conflicts(p, before, n_before + 1, after[i]);
  }
  if (ok) {
    int k = 0;
    for (int i = 0; i < n_before; i++) window[k++] = p->steps[before[i]];
    window[k++] = p->steps[f];
    window[k] = p->steps[t];
    window[k].xent_loss = loss + 1;
    window[k].xent_writes_loss = 1;
    window[k - 1].fused = 1;
    k++;
    for (int i = 0; i < n_after; i++) window[k++] = p->steps[after[i]];
    memcpy(&p->steps[f], window, sizeof(mtf_step) * (size_t)n);
    /* lifetimes that began or ended inside the window, from the new order */
    for (int b = 0; b < p->n_buffers; b++) {
      mtf_buffer *buf = &p->buffers[b];
      int first_inside = buf->first_step >= f && buf->first_step <= t, last_inside = buf->last_step >= f && buf->last_step <= t;
      if (!first_inside && !last_inside) continue;
      int first = INT_MAX, last = -1;
      for (int u = f; u <= t; u++) {
        const mtf_step *s = &p->steps[u];
        if (s->fused) continue;
        if (writes(s, b) && first == INT_MAX) first = u;
        if (touches(s, b)) last = u;
      }
      if (first_inside && first != INT_MAX) buf->first_step = first;
      if (last_inside && last >= 0) buf->last_step = last;
    }
  }
  free(before);
  free(after);
  free(needed);
  free(window);
  return ok;
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
        if (merge(p, f, t)) {
          p->stats.xent_merged++;
          break;
        }
        grad->xent_loss = loss + 1;
        if (p->buffers[loss].last_step < t) p->buffers[loss].last_step = t;
        p->stats.xent_grads_from_loss++;
        break;
      }
      if (mtf_lw_step_touches(fwd, logits, 0, 1) || mtf_lw_step_touches(fwd, labels, 0, 1)) break;
    }
  }
}
