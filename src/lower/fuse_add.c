/* A product or a norm's gradient added into the other term of its sum (mtf_plan_options.fuse_product_add). In
 * the backward pass the residual stream's gradient is a sum at every block (the gradient through a norm plus
 * the one past it) and so is each block input's (the three projections of q, k and v): the add reads both
 * terms, one of them written just before, and writes a third buffer. Here an add of two float32 tensors of
 * its shape, one of them the output of a bf16-policy einsum of bfloat16 operands or norm gradient that nothing
 * else reads, the other a term that dies at the add, becomes that step adding its result into the term's
 * buffer (the kernel accumulates: on cpu oneDNN's sum post-op for the product), and the add is skipped; the
 * add's output buffer is renamed to the term's in every later step. Only where no step between the two touches
 * either buffer, the term is complete before the producer and not one of its operands, and neither buffer
 * outlives the run. The sum is the same, term + result, in float32 (oneDNN's post-op gave the same bits in the
 * small GPT's runs). Run on the finished step list, before buckets and the memory plan. */
#include <limits.h>

#include "lower/lower_internal.h"

static int is_plain_add(const mtf_step *s) {
  return s->kind == MTF_STEP_KERNEL && s->op == MTF_OP_BINARY && s->params.binary.fn == MTF_BIN_ADD &&
         s->phase == MTF_PHASE_WHOLE && s->n_in == 2 && !s->fused && s->out_dtype == MTF_F32 &&
         s->in_dtype[0] == MTF_F32 && s->in_dtype[1] == MTF_F32 && s->scratch < 0 &&
         mtf_shape_equal(&s->in_shape[0], &s->out_shape) && mtf_shape_equal(&s->in_shape[1], &s->out_shape);
}

/* The steps whose kernels can add into their output: a product of bfloat16 operands, a norm's gradient. */
static int may_accumulate(const mtf_step *s) {
  if (s->kind != MTF_STEP_KERNEL || s->phase != MTF_PHASE_WHOLE || !s->bf16_policy || s->fused || s->accumulate ||
      s->out_dtype != MTF_F32 || (s->scratch >= 0 && s->op != MTF_OP_EINSUM))
    return 0;
  if (s->op == MTF_OP_EINSUM) return s->n_in == 2 && s->in_dtype[0] == MTF_BF16 && s->in_dtype[1] == MTF_BF16;
  return (s->op == MTF_OP_LAYER_NORM_GRAD || s->op == MTF_OP_RMS_NORM_GRAD) && s->in_dtype[0] == MTF_F32 &&
         s->in_dtype[1] == MTF_F32;
}

static int arena_dying_at(const mtf_plan *p, int b, int step) {
  return p->buffers[b].kind == MTF_BUF_ARENA && p->buffers[b].last_step == step;
}

void mtf_lw_fuse_product_add(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    mtf_step *add = &p->steps[t];
    if (!is_plain_add(add)) continue;
    for (int k = 0; k < 2; k++) {
      int product = add->in[k], term = add->in[1 - k], out = add->out, e = mtf_lw_writer_before(p, product, t);
      if (e < 0 || term == product || out == term || out == product || !may_accumulate(&p->steps[e])) continue;
      mtf_step *producer = &p->steps[e];
      if (!arena_dying_at(p, product, t) || !arena_dying_at(p, term, t) || p->buffers[out].kind != MTF_BUF_ARENA ||
          p->buffers[out].first_step != t || p->buffers[product].first_step != e ||
          mtf_lw_writer_before(p, term, e) < 0 || mtf_lw_step_touches(producer, term, 1, 0))
        continue;
      int clear = 1;
      for (int u = e + 1; u < t && clear; u++)
        clear = !mtf_lw_step_touches(&p->steps[u], term, 1, 1) && !mtf_lw_step_touches(&p->steps[u], product, 1, 1);
      if (!clear) continue;
      producer->out = term;
      producer->accumulate = 1;
      add->fused = 1;
      p->buffers[term].last_step = p->buffers[out].last_step;
      mtf_lw_rename_buffer(p, out, term, t);
      mtf_lw_drop_buffer(p, product);
      mtf_lw_drop_buffer(p, out);
      p->stats.fused_product_adds++;
      break;
    }
  }
}
