/* AdamW in one pass per variable (mtf_plan_options.fuse_optimizer). The optimizer's graph updates a variable w
 * with three ops, each a pass over the variable's memory: m' = moving_average(m, g; beta1), v' =
 * moving_average(v, g^2; beta2) (both written over their slots, overwrite.c) and w' = adam_update(w, m', v').
 * Here the adam_update step takes over the two moving averages: it reads g and writes m and v in place before
 * using them, element by element, with the same arithmetic as their own kernels, so the results are the same
 * bits; the moving averages' steps are marked `fused` and skipped. That reads g, m, v and w once and writes m, v
 * and w once, where three passes read 7 and wrote 3 arrays. Only where nothing between the moving averages
 * and the update reads or writes m or v or writes g, so that moving their work later changes nothing. Run on
 * the finished step list, before buckets and the memory plan (the gradient's lifetime grows to the update). */
#include "lower/lower_internal.h"

/* A moving average of `slot` with the given power, in place, of one float32 gradient and no decay input. */
static int plain_moving_average(const mtf_step *s, int slot, int power) {
  return s->kind == MTF_STEP_KERNEL && s->op == MTF_OP_MOVING_AVERAGE && s->phase == MTF_PHASE_WHOLE && s->n_in == 2 &&
         s->params.moment.power == power && s->out == slot && s->in[0] == slot && s->out_dtype == MTF_F32 &&
         s->in_dtype[0] == MTF_F32 && s->in_dtype[1] == MTF_F32 && mtf_shape_equal(&s->in_shape[1], &s->out_shape);
}

void mtf_lw_fuse_moments(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    mtf_step *adam = &p->steps[t];
    if (adam->kind != MTF_STEP_KERNEL || adam->op != MTF_OP_ADAM_UPDATE || adam->phase != MTF_PHASE_WHOLE) continue;
    int m = adam->in[1], v = adam->in[2];
    int tm = mtf_lw_writer_before(p, m, t), tv = mtf_lw_writer_before(p, v, t);
    if (tm < 0 || tv < 0 || m == v) continue;
    const mtf_step *sm = &p->steps[tm], *sv = &p->steps[tv];
    if (!plain_moving_average(sm, m, 1) || !plain_moving_average(sv, v, 2) || sm->in[1] != sv->in[1]) continue;
    if (!mtf_shape_equal(&sm->out_shape, &adam->out_shape) || !mtf_shape_equal(&sv->out_shape, &adam->out_shape)) continue;
    int grad = sm->in[1], first = tm < tv ? tm : tv, clear = 1;
    for (int u = first + 1; u < t && clear; u++) {
      if (u == tm || u == tv) continue;
      const mtf_step *s = &p->steps[u];
      clear = !mtf_lw_step_touches(s, m, 1, 1) && !mtf_lw_step_touches(s, v, 1, 1) &&
              !mtf_lw_step_touches(s, grad, 0, 1);
    }
    if (!clear) continue;
    adam->fused_moments = 1;
    adam->moments_grad = grad;
    adam->moments_keep[0] = sm->params.moment.beta;
    adam->moments_add[0] = sm->params.moment.add;
    adam->moments_keep[1] = sv->params.moment.beta;
    adam->moments_add[1] = sv->params.moment.add;
    p->steps[tm].fused = 1;
    p->steps[tv].fused = 1;
    if (p->buffers[grad].last_step < t) p->buffers[grad].last_step = t;
    p->stats.fused_optimizer_updates++;
  }
}

/* The bf16 policy's sum of squares of `grad`: an einsum of it with itself to a scalar (float32 throughout). */
static int policy_squares(const mtf_step *s, int grad) {
  return s->kind == MTF_STEP_KERNEL && s->op == MTF_OP_EINSUM && s->phase == MTF_PHASE_WHOLE && s->n_in == 2 &&
         s->in[0] == grad && s->in[1] == grad && s->bf16_policy && s->out_shape.rank == 0 && s->out_dtype == MTF_F32 &&
         s->in_dtype[0] == MTF_F32 && s->in_dtype[1] == MTF_F32 && !s->fused;
}

/* A bf16 run's gradient norm without clipping is built after the updates (train/optimizer.c): each gradient's
 * sum of squares, an einsum that reads the gradient again from memory, can be summed by the fused adam_update
 * that reads it anyway, with the einsum kernel's blocked lanes (the same bits). Only where no step between the
 * update and the einsum writes the gradient; the einsum's result buffer then lives from the update on. */
void mtf_lw_fuse_grad_norm(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    mtf_step *adam = &p->steps[t];
    if (adam->kind != MTF_STEP_KERNEL || adam->op != MTF_OP_ADAM_UPDATE || !adam->fused_moments) continue;
    int grad = adam->moments_grad;
    for (int e = t + 1; e < p->n_steps; e++) {
      mtf_step *sum = &p->steps[e];
      if (policy_squares(sum, grad) && mtf_shape_num_elements(&sum->in_shape[0]) ==
                                           mtf_shape_num_elements(&adam->out_shape)) {
        adam->squares_out = sum->out + 1;
        sum->fused = 1;
        if (p->buffers[sum->out].first_step > t) p->buffers[sum->out].first_step = t;
        p->stats.fused_grad_norm_squares++;
        break;
      }
      if (mtf_lw_step_touches(sum, grad, 0, 1)) break;
    }
  }
}
