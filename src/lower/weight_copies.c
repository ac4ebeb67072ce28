/* bfloat16 weight copies written by the optimizer (mtf_plan_options.bf16_weight_copies). Under the bf16 policy
 * every product reads a weight W through cast(W, bf16), one cast per weight per step (mtf_cast_shared). The
 * step that writes W's new value at the end of the step (its last writer: AdamW's adam_update, Adafactor's or
 * SGD's update written in place, or an assign's COPY) writes round(W) too, into the cast's buffer: adam_update's
 * kernel in the same pass, any other step's rounded by the executor right after it (the backend's cast
 * kernel). The memory plan then keeps that buffer for the whole run (never shared):
 * the next run's cast step finds its value there and is skipped. The session runs the cast again whenever
 * the copy may be stale: on its first run and after anything else wrote the variables (mtf_session_run). The
 * values are the cast's exactly (the same rounding of the same float32 values), so losses are bit for bit
 * those of the plan without copies. Run on the finished step list, before buckets and the memory plan. */
#include <limits.h>

#include "lower/lower_internal.h"

/* The one kernel step that casts the variable `variable` (its buffer `var_buffer`) to bfloat16, before step
 * `before`; -1 when there is none or more than one (separate recompute blocks: left as they are). */
static int cast_of(const mtf_plan *p, int variable, int var_buffer, int before) {
  int found = -1;
  for (int t = 0; t < before; t++) {
    const mtf_step *s = &p->steps[t];
    if (s->kind != MTF_STEP_KERNEL || s->op != MTF_OP_CAST || s->out_dtype != MTF_BF16) continue;
    if (p->graph->nodes[s->node].inputs[0] != variable || s->in[0] != var_buffer) continue;
    if (found >= 0) return -1;
    found = t;
  }
  return found;
}

/* The last step of the plan that writes buffer b (a kernel writing in place, or the COPY of an assign), or -1. */
static int last_writer(const mtf_plan *p, int b) {
  for (int t = p->n_steps - 1; t >= 0; t--)
    if (p->steps[t].out == b && (p->steps[t].kind == MTF_STEP_KERNEL || p->steps[t].kind == MTF_STEP_COPY)) return t;
  return -1;
}

void mtf_lw_weight_copies(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  const mtf_graph *g = p->graph;
  for (int a = lw->first_assign; a < lw->end_assign; a++) {
    int variable = g->assigns[a].variable, var_buffer = p->value_buffer[variable];
    if (g->nodes[variable].kind != MTF_OP_VARIABLE || var_buffer < 0) continue;
    int t = last_writer(p, var_buffer);
    if (t < 0) continue;
    mtf_step *update = &p->steps[t];
    if (update->kind == MTF_STEP_KERNEL && update->out_dtype != MTF_F32) continue;
    int c = cast_of(p, variable, var_buffer, t);
    if (c < 0) continue;
    mtf_step *cast = &p->steps[c];
    mtf_buffer *copy = &p->buffers[cast->out];
    /* Every reader of the copy runs before the update overwrites it, and nothing reads it after the run. */
    if (copy->kind != MTF_BUF_ARENA || copy->bucket || copy->last_step >= t || copy->last_step == INT_MAX) continue;
    if (!mtf_shape_equal(&cast->out_shape, &update->out_shape)) continue;
    cast->skip_when_copy_current = 1;
    update->bf16_copy = 1 + cast->out;
    copy->first_step = 0; /* alive for the whole run, so kept between runs */
    copy->last_step = INT_MAX;
    p->stats.bf16_weight_copies++;
    p->stats.bf16_weight_copy_bytes += copy->elements * (int64_t)sizeof(uint16_t);
  }
}
