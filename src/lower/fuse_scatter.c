/* A scatter_add into the other term of its sum (mtf_plan_options.fuse_scatter_add). A tied embedding's gradient
 * is the sum of two: the logits' product's (a table-shaped einsum) and the lookup's, a scatter_add of the rows'
 * gradients into a zeroed table. The scatter_add zeroes its table, the add reads both tables and writes a
 * third. Here a scatter_add of the bf16 policy whose value only an add of the same shape reads gets that add's
 * output and the other term as its base: its kernel starts from the term and the add is skipped. Only where no
 * step between them reads or writes the term or the add's output; the add's output then lives from the
 * scatter_add on. Where the term's buffer dies at the add it becomes the sum's: the scatter_add adds into the
 * term where it lies, with no copy of the table. Run on the finished step list, before buckets
 * and the memory plan. */
#include <limits.h>

#include "lower/lower_internal.h"

/* Steps other than `except` that read buffer b. */
static int other_readers(const mtf_plan *p, int b, int except) {
  int n = 0;
  for (int t = 0; t < p->n_steps; t++)
    for (int k = 0; t != except && k < p->steps[t].n_in; k++) n += p->steps[t].in[k] == b;
  return n;
}

void mtf_lw_fuse_scatter(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    mtf_step *add = &p->steps[t];
    if (add->kind != MTF_STEP_KERNEL || add->op != MTF_OP_BINARY || add->params.binary.fn != MTF_BIN_ADD ||
        add->phase != MTF_PHASE_WHOLE || add->n_in != 2 || add->fused || add->out_dtype != MTF_F32 ||
        !mtf_shape_equal(&add->in_shape[0], &add->out_shape) || !mtf_shape_equal(&add->in_shape[1], &add->out_shape))
      continue;
    for (int k = 0; k < 2; k++) {
      int scattered = add->in[k], term = add->in[1 - k], s = mtf_lw_writer_before(p, scattered, t);
      if (s < 0 || term == scattered || add->in_dtype[1 - k] != MTF_F32) continue;
      mtf_step *scatter = &p->steps[s];
      if (scatter->kind != MTF_STEP_KERNEL || scatter->op != MTF_OP_SCATTER_ADD || scatter->phase != MTF_PHASE_WHOLE ||
          !scatter->bf16_policy || scatter->scatter_base || scatter->out_dtype != MTF_F32 ||
          !mtf_shape_equal(&scatter->out_shape, &add->out_shape) || other_readers(p, scattered, t) > 0 ||
          p->buffers[scattered].last_step == INT_MAX)
        continue;
      int clear = 1;
      for (int u = s + 1; u < t && clear; u++)
        clear = !mtf_lw_step_touches(&p->steps[u], term, 1, 1) && !mtf_lw_step_touches(&p->steps[u], add->out, 1, 1);
      for (int k2 = 0; k2 < scatter->n_in && clear; k2++) clear = scatter->in[k2] != add->out;
      if (!clear) continue;
      scatter->scatter_base = term + 1;
      scatter->out = add->out;
      add->fused = 1;
      if (p->buffers[add->out].first_step > s) p->buffers[add->out].first_step = s;
      p->stats.fused_scatter_adds++;
      mtf_buffer *base = &p->buffers[term], *sum = &p->buffers[add->out];
      if (base->kind == MTF_BUF_ARENA && sum->kind == MTF_BUF_ARENA && base->last_step == t &&
          base->elements == sum->elements && base->dtype == sum->dtype) { /* the sum in the term's buffer */
        int out = add->out;
        base->last_step = sum->last_step;
        mtf_lw_rename_buffer(p, out, term, s - 1);
        mtf_lw_drop_buffer(p, out);
        p->stats.scatter_adds_in_place++;
      }
      break;
    }
  }
}
