/* StableHLO for the fused ops and their gradients in every phase the CPU kernels have (exec/cpu/fused.c,
 * fused_grad.c): the input is transposed to [rows, dim] and flattened to [R, L], row statistics are
 * reductions over L (in f64 where the CPU sums in double), statistics buffers are [k, rows] = [k, R], and
 * elementwise results are transposed back to the input's dim order. Values a sum-allreduce carries are
 * written by the rank holding index 0 of the dim (dim_offset 0), others write 0, as on the CPU. */
#include <math.h>

#include "exec/pjrt/emit_internal.h"

typedef struct rows2 {
  int64_t R, L;
  mtf_shape xs; /* the input's named shape */
  const char *dim;
} rows2;

static const h_shape SCALAR = {0, {0}};

/* Input k of the step as [R, L] (its dim last, rows in its order). */
static int as_rows(h_emitter *E, const mtf_step *st, int k, const char *dim, rows2 *r) {
  const mtf_shape *xs = &st->in_shape[k];
  int d = mtf_shape_index_of(xs, dim);
  r->xs = *xs;
  r->dim = dim;
  r->L = d >= 0 ? xs->dims[d].size : 1;
  r->R = r->L ? mtf_shape_num_elements(xs) / r->L : 0;
  int x = e_input(E, st, k);
  if (d >= 0) x = n_dim_last(E, x, xs, dim, NULL);
  h_shape s = {2, {r->R, r->L}};
  return h_reshape(E, x, s);
}

/* A per-row input ([rows]) as [R]; statistic i of a [k, rows] input as [R]. */
static int row_input(h_emitter *E, const mtf_step *st, int k, const rows2 *r) {
  h_shape s = {1, {r->R}};
  return h_reshape(E, e_input(E, st, k), s);
}

static int stat_input(h_emitter *E, const mtf_step *st, int k, int i, const rows2 *r) {
  int64_t kk = mtf_shape_num_elements(&st->in_shape[k]) / (r->R ? r->R : 1);
  h_shape s = {2, {kk, r->R}}, flat = {1, {r->R}};
  int v = h_reshape(E, e_input(E, st, k), s);
  int64_t start[2] = {i, 0}, limit[2] = {i + 1, r->R};
  return h_reshape(E, h_slice(E, v, start, limit), flat);
}

/* [R] -> [R, L] */
static int spread(h_emitter *E, int v, const rows2 *r) {
  h_shape s = {2, {r->R, r->L}};
  int dims[1] = {0};
  return h_broadcast_in_dim(E, v, s, dims);
}

static int row_reduce(h_emitter *E, int x, const char *op, double init) { return h_reduce(E, x, 2u, op, init); }
static int f64(h_emitter *E, int x) { return h_convert(E, x, H_F64); }
static int f32(h_emitter *E, int x) { return h_convert(E, x, H_F32); }
static int c64(h_emitter *E, double v, int like) { return h_splat(E, v, H_F64, h_t(E, like)->s); }
static int cf(h_emitter *E, double v, int like) { return h_splat(E, v, H_F32, h_t(E, like)->s); }
#define ADD(a, b) h_binop(E, "add", a, b)
#define SUB(a, b) h_binop(E, "subtract", a, b)
#define MUL(a, b) h_binop(E, "multiply", a, b)
#define DIV(a, b) h_binop(E, "divide", a, b)

/* [R, L] back to the input's named shape, then the step's output. */
static void out_elementwise(h_emitter *E, const mtf_step *st, int y, const rows2 *r) {
  mtf_shape rows;
  h_shape s = h_shape_of(&r->xs);
  if (mtf_shape_index_of(&r->xs, r->dim) >= 0) {
    int d = mtf_shape_index_of(&r->xs, r->dim), n = 0;
    for (int i = 0; i < r->xs.rank; i++)
      if (i != d) s.d[n++] = r->xs.dims[i].size;
    s.d[n] = r->L;
    y = n_dim_back(E, h_reshape(E, y, s), &r->xs, r->dim);
  }
  (void)rows;
  e_output(E, st, y);
}

/* Statistics [k, R] from k row vectors (f32). */
static void out_stats(h_emitter *E, const mtf_step *st, const int *v, int k, const rows2 *r) {
  int parts[4];
  h_shape one = {2, {1, r->R}};
  for (int i = 0; i < k; i++) parts[i] = h_reshape(E, f32(E, v[i]), one);
  e_output(E, st, h_concatenate(E, parts, k, 0));
}

static int rank0_of_dim(h_emitter *E, const mtf_step *st, int like) {
  (void)st;
  int off = e_rank_dim_offset(E);
  int p = h_compare(E, "EQ", off, h_splat(E, 0.0, H_S64, SCALAR));
  return h_broadcast_scalar(E, p, h_t(E, like)->s);
}
static int carried(h_emitter *E, const mtf_step *st, int v) {
  return h_select(E, rank0_of_dim(E, st, v), v, h_splat(E, 0.0, h_t(E, v)->e, h_t(E, v)->s));
}

/* [R, L] positions of the dim (global, s64) equal to each row's label. */
static int label_mask(h_emitter *E, const mtf_step *st, int k, const rows2 *r) {
  h_shape s = {2, {r->R, r->L}}, flat = {1, {r->R}};
  int labels = spread(E, h_reshape(E, h_as_index(E, e_input(E, st, k)), flat), r);
  int pos = h_binop(E, "add", h_iota(E, s, 1, H_S64), h_broadcast_scalar(E, e_rank_dim_offset(E), s));
  return h_compare(E, "EQ", labels, pos);
}

static int softmax(h_emitter *E, const mtf_step *st) {
  rows2 r;
  int x = as_rows(E, st, 0, st->params.along.dim, &r), log_form = st->op == MTF_OP_LOG_SOFTMAX;
  if (st->phase == MTF_PHASE_MAX) {
    e_output(E, st, row_reduce(E, x, "maximum", -INFINITY));
    return MTF_OK;
  }
  int m = st->phase == MTF_PHASE_WHOLE ? row_reduce(E, x, "maximum", -INFINITY) : row_input(E, st, 1, &r);
  int c = SUB(f64(E, x), f64(E, spread(E, m, &r)));
  if (st->phase == MTF_PHASE_STATS) {
    e_output(E, st, f32(E, row_reduce(E, h_unop(E, "exponential", c), "add", 0.0)));
    return MTF_OK;
  }
  int sum = st->phase == MTF_PHASE_WHOLE ? row_reduce(E, h_unop(E, "exponential", c), "add", 0.0)
                                         : f64(E, row_input(E, st, 2, &r));
  int y = log_form ? SUB(c, spread(E, h_unop(E, "log", sum), &r)) : DIV(h_unop(E, "exponential", c), spread(E, sum, &r));
  out_elementwise(E, st, f32(E, y), &r);
  return MTF_OK;
}

static int norm(h_emitter *E, const mtf_step *st) {
  rows2 r;
  int x = as_rows(E, st, 0, st->params.norm.dim, &r), layer = st->op == MTF_OP_LAYER_NORM;
  int x64 = f64(E, x);
  double n = (double)st->global_dims[mtf_shape_index_of(&st->in_shape[0], st->params.norm.dim)];
  if (st->phase == MTF_PHASE_SUM) {
    e_output(E, st, f32(E, row_reduce(E, x64, "add", 0.0)));
    return MTF_OK;
  }
  int mean;
  if (!layer) mean = h_splat(E, 0.0, H_F64, (h_shape){1, {r.R}});
  else if (st->phase == MTF_PHASE_WHOLE) mean = row_reduce(E, x64, "add", 0.0);
  else mean = f64(E, row_input(E, st, 1, &r));
  if (layer) mean = DIV(mean, c64(E, n, mean));
  int c = SUB(x64, spread(E, mean, &r));
  if (st->phase == MTF_PHASE_STATS) {
    e_output(E, st, f32(E, row_reduce(E, MUL(c, c), "add", 0.0)));
    return MTF_OK;
  }
  int sq = st->phase == MTF_PHASE_WHOLE ? row_reduce(E, MUL(c, c), "add", 0.0)
                                        : f64(E, row_input(E, st, layer ? 2 : 1, &r));
  int inv = DIV(c64(E, 1.0, sq), h_unop(E, "sqrt", ADD(DIV(sq, c64(E, n, sq)), c64(E, st->params.norm.epsilon, sq))));
  out_elementwise(E, st, f32(E, MUL(c, spread(E, inv, &r))), &r);
  return MTF_OK;
}

/* (1 - eps)(lse - target) + eps (lse - sum_x / vocab) + z lse^2, in f64 over [R]. */
static int xent_value(h_emitter *E, const mtf_step *st, int lse, int target, int sum_x) {
  double eps = st->params.xent.label_smoothing, z = st->params.xent.z_loss;
  int v = MUL(c64(E, 1.0 - eps, lse), SUB(lse, target));
  if (eps != 0.0) v = ADD(v, MUL(c64(E, eps, lse), SUB(lse, DIV(sum_x, c64(E, (double)st->params.xent.vocab, lse)))));
  return ADD(v, MUL(c64(E, z, lse), MUL(lse, lse)));
}

static int xent(h_emitter *E, const mtf_step *st) {
  int smoothed = st->params.xent.label_smoothing != 0.0f;
  if (st->phase == MTF_PHASE_APPLY) { /* in: max [rows], stats [k, rows] */
    rows2 r = {mtf_shape_num_elements(&st->out_shape), 1, st->out_shape, ""};
    int m = f64(E, row_input(E, st, 0, &r));
    int lse = ADD(m, h_unop(E, "log", f64(E, stat_input(E, st, 1, 0, &r))));
    int sx = smoothed ? f64(E, stat_input(E, st, 1, 2, &r)) : c64(E, 0.0, lse);
    e_output(E, st, f32(E, xent_value(E, st, lse, f64(E, stat_input(E, st, 1, 1, &r)), sx)));
    return MTF_OK;
  }
  rows2 r;
  int x = as_rows(E, st, 0, st->params.xent.dim, &r);
  int mx = row_reduce(E, x, "maximum", -INFINITY);
  if (st->phase == MTF_PHASE_MAX) {
    e_output(E, st, mx);
    return MTF_OK;
  }
  int stats = st->phase == MTF_PHASE_STATS;
  int m = stats ? row_input(E, st, 1, &r) : mx;
  int x64 = f64(E, x);
  int sum = row_reduce(E, h_unop(E, "exponential", SUB(x64, f64(E, spread(E, m, &r)))), "add", 0.0);
  int hit = label_mask(E, st, stats ? 2 : 1, &r);
  int target = row_reduce(E, h_select(E, hit, x64, c64(E, 0.0, x64)), "add", 0.0);
  int sum_x = smoothed ? row_reduce(E, x64, "add", 0.0) : c64(E, 0.0, sum);
  if (stats) {
    int v[3] = {sum, target, sum_x};
    out_stats(E, st, v, smoothed ? 3 : 2, &r);
    return MTF_OK;
  }
  int lse = ADD(f64(E, m), h_unop(E, "log", sum));
  e_output(E, st, f32(E, xent_value(E, st, lse, target, sum_x)));
  return MTF_OK;
}

static int softmax_grad(h_emitter *E, const mtf_step *st) {
  rows2 r;
  int log_form = st->op == MTF_OP_LOG_SOFTMAX_GRAD;
  int y = as_rows(E, st, 0, st->params.along.dim, &r), dy = as_rows(E, st, 1, st->params.along.dim, &r);
  int sum = st->phase == MTF_PHASE_APPLY
                ? row_input(E, st, 2, &r)
                : f32(E, row_reduce(E, log_form ? f64(E, dy) : MUL(f64(E, dy), f64(E, y)), "add", 0.0));
  if (st->phase == MTF_PHASE_STATS) {
    e_output(E, st, sum);
    return MTF_OK;
  }
  int s = spread(E, sum, &r);
  int out = log_form ? SUB(dy, MUL(h_unop(E, "exponential", y), s)) : MUL(y, SUB(dy, s));
  out_elementwise(E, st, out, &r);
  return MTF_OK;
}

static int norm_grad(h_emitter *E, const mtf_step *st) {
  rows2 r;
  int layer = st->op == MTF_OP_LAYER_NORM_GRAD;
  const char *dim = st->params.norm.dim;
  int x = as_rows(E, st, 0, dim, &r), x64 = f64(E, x);
  double n = (double)st->global_dims[mtf_shape_index_of(&st->in_shape[0], dim)];
  if (st->phase == MTF_PHASE_SUM) { /* the one input x */
    e_output(E, st, f32(E, row_reduce(E, x64, "add", 0.0)));
    return MTF_OK;
  }
  int dy = as_rows(E, st, 1, dim, &r), dy64 = f64(E, dy);
  h_shape rs = {1, {r.R}};
  int total, squares, sdy, sdyc, mean;
  if (st->phase == MTF_PHASE_APPLY) {
    total = f64(E, stat_input(E, st, 2, 0, &r));
    squares = f64(E, stat_input(E, st, 2, 1, &r));
    sdy = f64(E, stat_input(E, st, 2, 2, &r));
    sdyc = f64(E, stat_input(E, st, 2, 3, &r));
    mean = DIV(total, c64(E, n, total));
  } else {
    if (st->phase == MTF_PHASE_WHOLE) total = layer ? row_reduce(E, x64, "add", 0.0) : h_splat(E, 0.0, H_F64, rs);
    else total = layer ? f64(E, f32(E, row_input(E, st, 2, &r))) : h_splat(E, 0.0, H_F64, rs);
    mean = DIV(total, c64(E, n, total));
    int c = SUB(x64, spread(E, mean, &r));
    squares = row_reduce(E, MUL(c, c), "add", 0.0);
    sdy = row_reduce(E, dy64, "add", 0.0);
    sdyc = row_reduce(E, MUL(dy64, c), "add", 0.0);
    if (st->phase == MTF_PHASE_STATS) {
      int v[4] = {carried(E, st, total), squares, sdy, sdyc};
      out_stats(E, st, v, 4, &r);
      return MTF_OK;
    }
  }
  /* dx = scale dy - slope (x - m) - shift, the CPU's float expression */
  int rr = DIV(c64(E, 1.0, squares), h_unop(E, "sqrt", ADD(DIV(squares, c64(E, n, squares)), c64(E, st->params.norm.epsilon, squares))));
  int scale = f32(E, rr);
  int slope = f32(E, DIV(MUL(MUL(MUL(rr, rr), rr), sdyc), c64(E, n, rr)));
  int shift = layer ? f32(E, DIV(MUL(rr, sdy), c64(E, n, rr))) : h_splat(E, 0.0, H_F32, rs);
  int m = f32(E, mean);
  int out = SUB(SUB(MUL(spread(E, scale, &r), dy), MUL(spread(E, slope, &r), SUB(x, spread(E, m, &r)))), spread(E, shift, &r));
  out_elementwise(E, st, out, &r);
  return MTF_OK;
}

static int xent_grad(h_emitter *E, const mtf_step *st) {
  rows2 r;
  int x = as_rows(E, st, 0, st->params.xent.dim, &r);
  if (st->phase == MTF_PHASE_MAX) {
    e_output(E, st, row_reduce(E, x, "maximum", -INFINITY));
    return MTF_OK;
  }
  int m, sum, dy, labels_k = 1;
  if (st->phase == MTF_PHASE_WHOLE) {
    m = row_reduce(E, x, "maximum", -INFINITY);
    dy = row_input(E, st, 2, &r);
  } else if (st->phase == MTF_PHASE_STATS) {
    m = row_input(E, st, 1, &r);
    dy = row_input(E, st, 2, &r);
  } else {
    m = stat_input(E, st, 2, 1, &r);
    dy = stat_input(E, st, 2, 2, &r);
  }
  int e = h_unop(E, "exponential", SUB(x, spread(E, m, &r)));
  sum = st->phase == MTF_PHASE_APPLY ? f64(E, stat_input(E, st, 2, 0, &r)) : row_reduce(E, f64(E, e), "add", 0.0);
  if (st->phase == MTF_PHASE_STATS) {
    int v[3] = {sum, carried(E, st, m), carried(E, st, dy)};
    out_stats(E, st, v, 3, &r);
    return MTF_OK;
  }
  double z = st->params.xent.z_loss, eps = st->params.xent.label_smoothing;
  int lse = ADD(f64(E, m), h_unop(E, "log", sum));
  int dy64 = f64(E, dy);
  int scale = f32(E, DIV(MUL(dy64, ADD(c64(E, 1.0, lse), MUL(c64(E, 2.0 * z, lse), lse))), sum));
  int out = MUL(e, spread(E, scale, &r));
  if (eps != 0.0) out = SUB(out, spread(E, f32(E, DIV(MUL(c64(E, eps, dy64), dy64), c64(E, (double)st->params.xent.vocab, dy64))), &r));
  int hit = label_mask(E, st, labels_k, &r);
  int at_label = spread(E, MUL(cf(E, 1.0 - (double)(float)eps, dy), dy), &r);
  out = h_select(E, hit, SUB(out, at_label), out);
  out_elementwise(E, st, out, &r);
  return MTF_OK;
}

void e_ops_fused(e_op_fn *table) {
  table[MTF_OP_SOFTMAX] = softmax;
  table[MTF_OP_LOG_SOFTMAX] = softmax;
  table[MTF_OP_LAYER_NORM] = norm;
  table[MTF_OP_RMS_NORM] = norm;
  table[MTF_OP_SOFTMAX_XENT] = xent;
  table[MTF_OP_SOFTMAX_GRAD] = softmax_grad;
  table[MTF_OP_LOG_SOFTMAX_GRAD] = softmax_grad;
  table[MTF_OP_LAYER_NORM_GRAD] = norm_grad;
  table[MTF_OP_RMS_NORM_GRAD] = norm_grad;
  table[MTF_OP_SOFTMAX_XENT_GRAD] = xent_grad;
}
