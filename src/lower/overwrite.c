/* Values written over their op's input 0 (op table: overwrites_input): where a kernel step of such an op is the
 * last reader of input 0's buffer and that buffer has the value's size and dtype, the step writes the value
 * there and the value's own buffer goes unused. The memory planner then needs one buffer where it needed two
 * at that moment: the logits and their gradient (the cross-entropy gradient) are the largest pair of a
 * language model's step, alive together at its peak. Run on the finished step list, before the memory plan. */
#include "lower/lower_internal.h"
#include "ops/op_def.h"

void mtf_lw_rename_buffer(mtf_plan *p, int from, int to, int after) {
  for (int t = after + 1; t < p->n_steps; t++) {
    mtf_step *s = &p->steps[t];
    if (s->out == from) s->out = to;
    for (int k = 0; k < s->n_in; k++)
      if (s->in[k] == from) s->in[k] = to;
    if (s->scratch == from) s->scratch = to;
    if (s->fused_moments && s->moments_grad == from) s->moments_grad = to;
    int *plus_one[] = {&s->squares_out, &s->xent_loss, &s->scatter_base, &s->bf16_copy};
    for (size_t k = 0; k < sizeof plus_one / sizeof plus_one[0]; k++)
      if (*plus_one[k] == from + 1) *plus_one[k] = to + 1;
  }
  for (int n = 0; n < p->graph->n_nodes; n++)
    if (p->value_buffer[n] == from) p->value_buffer[n] = to;
}

void mtf_lw_overwrite_inputs(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    const mtf_step *s = &p->steps[t];
    if (s->kind != MTF_STEP_KERNEL || !mtf_op(s->op)->overwrites_input || s->n_in < 1) continue;
    if (s->phase != MTF_PHASE_WHOLE && s->phase != MTF_PHASE_APPLY) continue; /* the value, not statistics */
    int in = s->in[0], out = s->out, alone = in != out && in != s->scratch;
    for (int k = 1; k < s->n_in; k++) alone &= s->in[k] != in;
    mtf_buffer *a = &p->buffers[in], *b = &p->buffers[out];
    if (!alone || a->kind != MTF_BUF_ARENA || b->kind != MTF_BUF_ARENA || a->bucket || b->bucket) continue;
    if (a->last_step != t || b->first_step != t || a->elements != b->elements || a->dtype != b->dtype) continue;
    a->last_step = b->last_step;
    b->elements = 0; /* unused: the memory planner skips it */
    b->first_step = b->last_step = t;
    mtf_lw_rename_buffer(p, out, in, t - 1);
  }
}
