/* A norm's scale and bias inside its kernel (mtf_plan_options.fuse_norm_affine). A layer norm with a scale and
 * a bias is three steps: the norm writes y (float32), a multiply by the scale [dim] writes y s, an add of the
 * bias [dim] writes y s + b (bfloat16 where only products read it). The backward pass reads y (the scale's
 * gradient), so the norm keeps writing it; here it also writes y s + b itself, in the same pass over the row, and
 * the multiply and the add are skipped (an RMS norm: the multiply alone). The products and sums are the skipped
 * steps' own, each rounded to float32 before the next (no fused multiply-add: the kernel keeps them in separate
 * loops), so the values are theirs bit for bit. Only for a bf16-policy norm over its last dim in one step (phase
 * WHOLE), a float32 multiply whose other operand has just that dim and whose result only the add reads (or which
 * ends the chain), and where no step in between touches those buffers. Run on the finished step list, before
 * buckets and the memory plan. */
#include <limits.h>
#include <string.h>

#include "lower/lower_internal.h"

/* Whether s is a float32 binary step `fn` of y (full shape) and a vector over y's last dim; *other is that
 * vector's buffer. */
static int by_vector(const mtf_step *s, mtf_binary_kind fn, int y, const mtf_shape *shape, int *other) {
  if (s->kind != MTF_STEP_KERNEL || s->op != MTF_OP_BINARY || s->params.binary.fn != fn || s->phase != MTF_PHASE_WHOLE ||
      s->n_in != 2 || s->fused || s->scratch >= 0 || !mtf_shape_equal(&s->out_shape, shape))
    return 0;
  for (int k = 0; k < 2; k++) {
    const mtf_shape *v = &s->in_shape[1 - k];
    if (s->in[k] != y || s->in_dtype[k] != MTF_F32 || s->in_dtype[1 - k] != MTF_F32 || !mtf_shape_equal(&s->in_shape[k], shape) ||
        v->rank != 1 || strcmp(v->dims[0].name, shape->dims[shape->rank - 1].name) != 0 ||
        v->dims[0].size != shape->dims[shape->rank - 1].size)
      continue;
    *other = s->in[1 - k];
    return 1;
  }
  return 0;
}

/* The only step after `after` that reads b, or -1 (also when none or several do). */
static int only_reader(const mtf_plan *p, int b, int after) {
  int found = -1;
  for (int t = after + 1; t < p->n_steps; t++)
    if (!p->steps[t].fused && mtf_lw_step_touches(&p->steps[t], b, 1, 0)) {
      if (found >= 0) return -1;
      found = t;
    }
  return found;
}

/* The first unfused step after `after` that reads b, or -1. */
static int next_reader(const mtf_plan *p, int b, int after) {
  for (int t = after + 1; t < p->n_steps; t++)
    if (!p->steps[t].fused && mtf_lw_step_touches(&p->steps[t], b, 1, 0)) return t;
  return -1;
}

static int untouched_between(const mtf_plan *p, int from, int to, const int *buffers, int n, int skip1, int skip2) {
  for (int u = from + 1; u < to; u++) {
    if (u == skip1 || u == skip2) continue;
    for (int i = 0; i < n; i++)
      if (buffers[i] >= 0 && mtf_lw_step_touches(&p->steps[u], buffers[i], 1, 1)) return 0;
  }
  return 1;
}

void mtf_lw_fuse_norm_affine(mtf_lowering *lw) {
  mtf_plan *p = lw->plan;
  for (int t = 0; t < p->n_steps; t++) {
    mtf_step *norm = &p->steps[t];
    const mtf_shape *shape = &norm->out_shape;
    if (norm->kind != MTF_STEP_KERNEL || (norm->op != MTF_OP_LAYER_NORM && norm->op != MTF_OP_RMS_NORM) ||
        norm->phase != MTF_PHASE_WHOLE || !norm->bf16_policy || norm->fused || norm->n_in != 1 || norm->scratch >= 0 ||
        norm->out_dtype != MTF_F32 || shape->rank < 1 || norm->affine_out ||
        strcmp(norm->params.norm.dim, shape->dims[shape->rank - 1].name) != 0)
      continue;
    int y = norm->out, m = next_reader(p, y, t), scale = -1, bias = -1;
    if (m < 0 || !by_vector(&p->steps[m], MTF_BIN_MUL, y, shape, &scale)) continue;
    int scaled = p->steps[m].out, a = only_reader(p, scaled, m), end = m, out = scaled;
    if (a >= 0 && by_vector(&p->steps[a], MTF_BIN_ADD, scaled, shape, &bias) && p->buffers[scaled].kind == MTF_BUF_ARENA &&
        p->buffers[scaled].last_step == a) {
      end = a;
      out = p->steps[a].out;
    } else {
      bias = -1;
    }
    const mtf_buffer *o = &p->buffers[out];
    int watched[5] = {y, scale, bias, out, end == a ? scaled : -1};
    if (o->kind != MTF_BUF_ARENA || o->first_step != end || o->last_step == INT_MAX || out == y || out == scale ||
        out == bias || !untouched_between(p, t, end + 1, watched, 5, m, end))
      continue;
    norm->affine_out = out + 1;
    norm->affine_scale = scale + 1;
    norm->affine_bias = bias + 1;
    norm->affine_dtype = p->steps[end].out_dtype;
    p->steps[m].fused = 1;
    p->steps[end].fused = 1;
    p->buffers[out].first_step = t;
    if (end == a) { /* y s: no longer written or read */
      p->buffers[scaled].elements = 0;
      p->buffers[scaled].first_step = INT_MAX;
      p->buffers[scaled].last_step = -1;
    }
    if (p->buffers[y].last_step == end || p->buffers[y].last_step == m) { /* y read by nothing else: the last read was the multiply */
      int last = t;
      for (int u = t + 1; u < p->n_steps; u++)
        if (!p->steps[u].fused && mtf_lw_step_touches(&p->steps[u], y, 1, 1)) last = u;
      p->buffers[y].last_step = last;
    }
    p->stats.fused_norm_affines++;
  }
}
