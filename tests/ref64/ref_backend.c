/* Linked into a test program, this makes the kind "ref64" exist before main runs: a backend written only
 * against the backend interface (exec/backend.h), as a new backend would be, that computes every step in
 * double precision. Its memory is plain host memory of its own; a step on whole rows runs the op table's
 * double-precision reference on the step's local slices (ids shifted into the rank's part of a split dim,
 * random draws numbered by the slice's global extent); the phases of a fused op over a split dim
 * (lower/plan.h's MTF_PHASE_*, per-row statistics [k, rows] allreduced between them) are written here in
 * double, but for cumsum's, which follow the engine's one definition of them (exec/scan.h, sums in double). It has no plan fusions and no bfloat16 products (bfloat16 tensors are stored and converted, as
 * casts need). The backend conformance test on it is the check that adding a backend takes its own folder,
 * its registration and its CMake lines: nothing else. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/tensor_pack.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "exec/backend.h"
#include "exec/rows.h"
#include "exec/scan.h"
#include "ops/op_def.h"

/* ---- memory: host memory, byte copies ---- */
static void *mem_allocate(mtf_backend *b, size_t bytes) {
  (void)b;
  return malloc(bytes ? bytes : 1);
}
static void mem_release(mtf_backend *b, void *p) {
  (void)b;
  free(p);
}
static int mem_copy(mtf_backend *b, void *dst, const void *src, size_t bytes) {
  (void)b;
  if (dst != src) memmove(dst, src, bytes);
  return MTF_OK;
}
static int mem_fill(mtf_backend *b, void *dst, float value, int64_t count) {
  (void)b;
  for (int64_t i = 0; i < count; i++) ((float *)dst)[i] = value;
  return MTF_OK;
}
static int mem_synchronize(mtf_backend *b) {
  (void)b;
  return MTF_OK;
}

static int mem_slice(mtf_backend *b, const mtf_shape *in_shape, const void *in, const mtf_shape *out_shape,
                     const int64_t *offsets, void *out, size_t elem_size) {
  (void)b;
  int64_t in_strides[MTF_MAX_RANK], index[MTF_MAX_RANK] = {0}, n = mtf_shape_num_elements(out_shape);
  mtf_row_major_strides(in_shape, in_strides);
  for (int64_t e = 0; e < n; e++) {
    int64_t at = 0;
    for (int d = 0; d < out_shape->rank; d++) at += (offsets[d] + index[d]) * in_strides[d];
    memcpy((char *)out + e * elem_size, (const char *)in + at * elem_size, elem_size);
    for (int d = out_shape->rank - 1; d >= 0 && ++index[d] == out_shape->dims[d].size; d--) index[d] = 0;
  }
  return MTF_OK;
}

/* Gathered blocks to and from one tensor: the host packing every collective uses (comm/tensor_pack.h). */
static int mem_concat(mtf_backend *b, const void *blocks, void *out, size_t elem_size, int rank, const int64_t *dims,
                      int axis, int parts) {
  (void)b;
  mtf_pack_concat(blocks, out, elem_size, rank, dims, axis, parts);
  return MTF_OK;
}
static int mem_split(mtf_backend *b, const void *in, void *blocks, size_t elem_size, int rank, const int64_t *dims,
                     int axis, int parts) {
  (void)b;
  mtf_pack_split(in, blocks, elem_size, rank, dims, axis, parts);
  return MTF_OK;
}

static const mtf_backend_memory ref_memory = {mem_allocate, mem_release, mem_copy, mem_copy, mem_copy, mem_fill,
                                              mem_synchronize, mem_slice, mem_concat, mem_split};

/* ---- values in double ---- */
static double *widen(const void *p, mtf_dtype dtype, int64_t n, double shift) {
  double *x = malloc(sizeof(double) * (size_t)(n + 1));
  if (!x) return NULL;
  for (int64_t i = 0; i < n; i++) {
    double v = dtype == MTF_I32   ? ((const int32_t *)p)[i]
               : dtype == MTF_BF16 ? mtf_float_from_bf16(((const mtf_bf16 *)p)[i])
                                   : ((const float *)p)[i];
    x[i] = v - shift;
  }
  return x;
}

static void narrow(const double *x, int64_t n, mtf_dtype dtype, void *out) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype == MTF_I32) ((int32_t *)out)[i] = (int32_t)llround(x[i]);
    else if (dtype == MTF_BF16) ((mtf_bf16 *)out)[i] = mtf_bf16_from_float((float)x[i]);
    else ((float *)out)[i] = (float)x[i];
  }
}

/* The step's inputs widened (input `ids` less the step's dim_offset: a split dim's global ids made local, out
 * of range where another rank holds them). */
typedef struct ref_inputs {
  double *x[MTF_MAX_OP_INPUTS];
  int n;
} ref_inputs;

static int inputs_load(const mtf_step *st, const mtf_kernel_args *a, int ids, ref_inputs *in) {
  memset(in, 0, sizeof *in);
  in->n = st->n_in;
  for (int k = 0; k < st->n_in; k++) {
    in->x[k] = widen(a->in[k], st->in_dtype[k], mtf_shape_num_elements(&st->in_shape[k]),
                     k == ids ? (double)st->dim_offset : 0.0);
    if (!in->x[k]) return MTF_ERR_NOMEM;
  }
  return MTF_OK;
}

static void inputs_free(ref_inputs *in) {
  for (int k = 0; k < in->n; k++) free(in->x[k]);
}

/* Which input holds ids into the op's named dim (shifted by dim_offset), per op; -1: none. */
static int ids_input(mtf_op_kind op) {
  if (op == MTF_OP_ONE_HOT) return 0;
  if (op == MTF_OP_GATHER || op == MTF_OP_SCATTER_ADD || op == MTF_OP_SOFTMAX_XENT || op == MTF_OP_SOFTMAX_XENT_GRAD)
    return 1;
  if (op == MTF_OP_WRITE_AT) return 2;
  return -1;
}

/* A step on whole rows: the op's reference on the local slices, as if they were the whole tensors. */
static int k_reference(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  if (st->phase != MTF_PHASE_WHOLE) return MTF_ERR_INVALID;
  mtf_graph graph;
  memset(&graph, 0, sizeof graph);
  graph.seed = st->seed;
  mtf_node node;
  memset(&node, 0, sizeof node);
  node.kind = st->op;
  node.dtype = st->out_dtype;
  node.shape = st->out_shape;
  node.params = st->params;
  /* a run's draws: the op's key mixed with the session's random offset, as every backend's random kernels do */
  if (st->op == MTF_OP_RANDOM_KEEP) node.params.random.key = mtf_run_key(st->params.random.key, a->random_offset);
  if (st->op == MTF_OP_ATTENTION || st->op == MTF_OP_ATTENTION_GRAD || st->op == MTF_OP_ATTENTION_BIAS_GRAD)
    node.params.attention.key = mtf_run_key(st->params.attention.key, a->random_offset);
  node.n_inputs = st->n_in;
  node.bf16_policy = st->bf16_policy;
  ref_inputs in = {{0}, 0};
  int64_t n = mtf_shape_num_elements(&st->out_shape), offsets[MTF_MAX_RANK], dims[MTF_MAX_RANK];
  double *out = malloc(sizeof(double) * (size_t)(n + 1));
  int rc = out ? inputs_load(st, a, ids_input(st->op), &in) : MTF_ERR_NOMEM;
  if (rc == MTF_OK) {
    mtf_random_extent(st, a, offsets, dims);
    mtf_ref_args r = {.g = &graph, .n = &node, .out = out, .random_shape = mtf_random_extent_shape(st),
                      .random_offsets = offsets, .random_dims = dims};
    for (int k = 0; k < st->n_in; k++) r.in[k] = in.x[k], r.in_shape[k] = &st->in_shape[k];
    mtf_op(st->op)->reference(&r);
    narrow(out, n, st->out_dtype, a->out);
  }
  inputs_free(&in);
  free(out);
  return rc;
}

static int k_range(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  for (int64_t i = 0; i < st->out_shape.dims[0].size; i++) ((float *)a->out)[i] = (float)(st->offsets[0] + i);
  return MTF_OK;
}

/* ---- the phases of a fused op over a split dim, one row at a time ---- */
typedef struct phase_rows {
  mtf_rows r;
  double n;     /* the dim's global size */
  ref_inputs in;
  double *out;  /* [k, rows] statistics (MAX, SUM, STATS) or the output (APPLY) */
  int64_t out_n;
} phase_rows;

static int phase_begin(const mtf_step *st, const mtf_kernel_args *a, const char *dim, phase_rows *p) {
  memset(p, 0, sizeof *p);
  p->r = mtf_rows_of(&st->in_shape[0], dim);
  int d = mtf_shape_index_of(&st->in_shape[0], dim); /* absent from the statistics an APPLY phase reads */
  p->n = d >= 0 ? (double)st->global_dims[d] : 0.0;
  p->out_n = mtf_shape_num_elements(&st->out_shape);
  p->out = calloc((size_t)(p->out_n + 1), sizeof(double));
  return p->out ? inputs_load(st, a, -1, &p->in) : MTF_ERR_NOMEM;
}

static int phase_end(const mtf_step *st, const mtf_kernel_args *a, phase_rows *p, int rc) {
  if (rc == MTF_OK) narrow(p->out, p->out_n, st->out_dtype, a->out);
  inputs_free(&p->in);
  free(p->out);
  return rc;
}

/* Element j of row `row` of input k (shaped as input 0). */
static double at(const phase_rows *p, int k, int64_t row, int64_t j) {
  return p->in.x[k][mtf_row_base(&p->r, row) + j * p->r.inner];
}
static double *out_at(phase_rows *p, int64_t row, int64_t j) {
  return &p->out[mtf_row_base(&p->r, row) + j * p->r.inner];
}
static double row_max(const phase_rows *p, int k, int64_t row) {
  double m = -INFINITY;
  for (int64_t j = 0; j < p->r.len; j++) m = fmax(m, at(p, k, row, j));
  return m;
}
static double row_sum(const phase_rows *p, int k, int64_t row) {
  double s = 0;
  for (int64_t j = 0; j < p->r.len; j++) s += at(p, k, row, j);
  return s;
}
/* The rank holding index 0 of the dim contributes a value carried through a sum allreduce; others 0. */
static double carried(const mtf_step *st, double v) { return st->dim_offset == 0 ? v : 0.0; }

/* softmax, log-softmax: MAX(x); STATS(x, max) -> sum exp(x - max); APPLY(x, max, sum). */
static int k_softmax(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  phase_rows p;
  int rc = phase_begin(st, a, st->params.along.dim, &p);
  for (int64_t row = 0; rc == MTF_OK && row < p.r.count; row++) {
    if (st->phase == MTF_PHASE_MAX) {
      p.out[row] = row_max(&p, 0, row);
      continue;
    }
    double m = p.in.x[1][row], s = 0;
    if (st->phase == MTF_PHASE_STATS) {
      for (int64_t j = 0; j < p.r.len; j++) s += exp(at(&p, 0, row, j) - m);
      p.out[row] = s;
      continue;
    }
    s = p.in.x[2][row];
    for (int64_t j = 0; j < p.r.len; j++) {
      double x = at(&p, 0, row, j) - m;
      *out_at(&p, row, j) = st->op == MTF_OP_LOG_SOFTMAX ? x - log(s) : exp(x) / s;
    }
  }
  return phase_end(st, a, &p, rc);
}

/* layer / RMS norm: SUM(x) (layer); STATS(x[, sum]) -> sum (x - mean)^2; APPLY(x[, sum], squares). */
static int k_norm(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  int layer = st->op == MTF_OP_LAYER_NORM;
  phase_rows p;
  int rc = phase_begin(st, a, st->params.norm.dim, &p);
  for (int64_t row = 0; rc == MTF_OK && row < p.r.count; row++) {
    if (st->phase == MTF_PHASE_SUM) {
      p.out[row] = row_sum(&p, 0, row);
      continue;
    }
    double mean = layer ? p.in.x[1][row] / p.n : 0.0, squares = 0;
    if (st->phase == MTF_PHASE_STATS) {
      for (int64_t j = 0; j < p.r.len; j++) squares += (at(&p, 0, row, j) - mean) * (at(&p, 0, row, j) - mean);
      p.out[row] = squares;
      continue;
    }
    double inv = 1.0 / sqrt(p.in.x[layer ? 2 : 1][row] / p.n + st->params.norm.epsilon);
    for (int64_t j = 0; j < p.r.len; j++) *out_at(&p, row, j) = (at(&p, 0, row, j) - mean) * inv;
  }
  return phase_end(st, a, &p, rc);
}

/* The loss of a row: (1 - eps) (lse - x[label]) + eps (lse - sum(x) / vocab) + z lse^2. */
static double xent_value(const mtf_step *st, double lse, double target, double sum_x) {
  double eps = st->params.xent.label_smoothing, z = st->params.xent.z_loss;
  return (1.0 - eps) * (lse - target) + eps * (lse - sum_x / (double)st->params.xent.vocab) + z * lse * lse;
}

/* The label's position in this rank's part of the vocab, or -1. */
static int64_t local_label(const mtf_step *st, double label, int64_t len) {
  int64_t local = llround(label) - st->dim_offset;
  return local >= 0 && local < len ? local : -1;
}

/* cross-entropy: MAX(logits); STATS(logits, max, labels) -> [sum exp, target logit(, sum x)]; APPLY(max, stats). */
static int k_xent(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  int smoothed = st->params.xent.label_smoothing != 0.0f;
  phase_rows p;
  int rc = phase_begin(st, a, st->params.xent.dim, &p);
  if (rc == MTF_OK && st->phase == MTF_PHASE_APPLY) { /* in: max [rows], stats [k, rows]; out [rows] */
    const double *m = p.in.x[0], *stats = p.in.x[1];
    for (int64_t row = 0; row < p.out_n; row++)
      p.out[row] = xent_value(st, m[row] + log(stats[row]), stats[p.out_n + row], smoothed ? stats[2 * p.out_n + row] : 0);
    return phase_end(st, a, &p, rc);
  }
  for (int64_t row = 0; rc == MTF_OK && row < p.r.count; row++) {
    if (st->phase == MTF_PHASE_MAX) {
      p.out[row] = row_max(&p, 0, row);
      continue;
    }
    double m = p.in.x[1][row], s = 0;
    for (int64_t j = 0; j < p.r.len; j++) s += exp(at(&p, 0, row, j) - m);
    int64_t label = local_label(st, p.in.x[2][row], p.r.len);
    p.out[row] = s;
    p.out[p.r.count + row] = label >= 0 ? at(&p, 0, row, label) : 0.0;
    if (smoothed) p.out[2 * p.r.count + row] = row_sum(&p, 0, row);
  }
  return phase_end(st, a, &p, rc);
}

/* softmax / log-softmax gradient: STATS(y, dy) -> sum dy y (sum dy); APPLY(y, dy, sum). */
static int k_softmax_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  int log_form = st->op == MTF_OP_LOG_SOFTMAX_GRAD;
  phase_rows p;
  int rc = phase_begin(st, a, st->params.along.dim, &p);
  for (int64_t row = 0; rc == MTF_OK && row < p.r.count; row++) {
    if (st->phase == MTF_PHASE_STATS) {
      double s = 0;
      for (int64_t j = 0; j < p.r.len; j++) s += at(&p, 1, row, j) * (log_form ? 1.0 : at(&p, 0, row, j));
      p.out[row] = s;
      continue;
    }
    double s = p.in.x[2][row];
    for (int64_t j = 0; j < p.r.len; j++) {
      double y = at(&p, 0, row, j), dy = at(&p, 1, row, j);
      *out_at(&p, row, j) = log_form ? dy - exp(y) * s : y * (dy - s);
    }
  }
  return phase_end(st, a, &p, rc);
}

/* layer / RMS norm gradient: SUM(x) (layer); STATS(x, dy[, sum]) -> [sum x carried, sum c^2, sum dy, sum dy c]
 * (c = x - mean); APPLY(x, dy, those) -> r dy - r^3 c sum(dy c) / n - r sum(dy) / n (the last for layer norm). */
static int k_norm_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  int layer = st->op == MTF_OP_LAYER_NORM_GRAD;
  phase_rows p;
  int rc = phase_begin(st, a, st->params.norm.dim, &p);
  int64_t rows = p.r.count;
  for (int64_t row = 0; rc == MTF_OK && row < rows; row++) {
    if (st->phase == MTF_PHASE_SUM) {
      p.out[row] = row_sum(&p, 0, row);
      continue;
    }
    if (st->phase == MTF_PHASE_STATS) {
      double total = layer ? p.in.x[2][row] : 0.0, mean = total / p.n, squares = 0, dy = 0, dy_c = 0;
      for (int64_t j = 0; j < p.r.len; j++) {
        double c = at(&p, 0, row, j) - mean, g = at(&p, 1, row, j);
        squares += c * c, dy += g, dy_c += g * c;
      }
      p.out[row] = carried(st, total);
      p.out[rows + row] = squares, p.out[2 * rows + row] = dy, p.out[3 * rows + row] = dy_c;
      continue;
    }
    const double *s = p.in.x[2];
    double mean = s[row] / p.n, r = 1.0 / sqrt(s[rows + row] / p.n + st->params.norm.epsilon);
    double slope = r * r * r * s[3 * rows + row] / p.n, shift = layer ? r * s[2 * rows + row] / p.n : 0.0;
    for (int64_t j = 0; j < p.r.len; j++)
      *out_at(&p, row, j) = r * at(&p, 1, row, j) - slope * (at(&p, 0, row, j) - mean) - shift;
  }
  return phase_end(st, a, &p, rc);
}

/* cross-entropy gradient: MAX(logits); STATS(logits, max, dy) -> [sum exp, max carried, dy carried];
 * APPLY(logits, labels, those) -> exp(x - max) dy (1 + 2 z lse) / sum - eps dy / vocab - (1 - eps) dy at the label. */
static int k_xent_grad(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  double eps = st->params.xent.label_smoothing, z = st->params.xent.z_loss;
  phase_rows p;
  int rc = phase_begin(st, a, st->params.xent.dim, &p);
  int64_t rows = p.r.count;
  for (int64_t row = 0; rc == MTF_OK && row < rows; row++) {
    if (st->phase == MTF_PHASE_MAX) {
      p.out[row] = row_max(&p, 0, row);
      continue;
    }
    if (st->phase == MTF_PHASE_STATS) {
      double m = p.in.x[1][row], s = 0;
      for (int64_t j = 0; j < p.r.len; j++) s += exp(at(&p, 0, row, j) - m);
      p.out[row] = s, p.out[rows + row] = carried(st, m), p.out[2 * rows + row] = carried(st, p.in.x[2][row]);
      continue;
    }
    const double *s = p.in.x[2];
    double sum = s[row], m = s[rows + row], dy = s[2 * rows + row], lse = m + log(sum);
    double scale = dy * (1.0 + 2.0 * z * lse) / sum;
    for (int64_t j = 0; j < p.r.len; j++) *out_at(&p, row, j) = exp(at(&p, 0, row, j) - m) * scale - eps * dy / (double)st->params.xent.vocab;
    int64_t label = local_label(st, p.in.x[1][row], p.r.len);
    if (label >= 0) *out_at(&p, row, label) -= (1.0 - eps) * dy;
  }
  return phase_end(st, a, &p, rc);
}

/* ---- top-k over a split dim: STATS puts this rank's k best (values, global positions) in its slot of the
 * zeroed candidates [_stats: 2 parts k, rows]; APPLY selects the k best of all of them ---- */
typedef struct entry {
  double value;
  int64_t position;
} entry;

/* Larger first, equal ones by position, NaN below every number. */
static int entry_order(const void *pa, const void *pb) {
  const entry *x = pa, *y = pb;
  int xn = isnan(x->value), yn = isnan(y->value);
  if (xn != yn) return xn - yn;
  if (!xn && x->value != y->value) return x->value > y->value ? -1 : 1;
  return (x->position > y->position) - (x->position < y->position);
}

static int k_top_k(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  int argmax = st->params.top_k.k_dim[0] == 0, apply = st->phase == MTF_PHASE_APPLY;
  int64_t k = argmax ? 1 : st->params.top_k.k;
  phase_rows p;
  int rc = phase_begin(st, a, apply ? "_stats" : st->params.top_k.dim, &p);
  int64_t rows = p.r.count, len = p.r.len, candidates = apply ? len / 2 : len;
  entry *e = malloc(sizeof(entry) * (size_t)(candidates + 1));
  if (rc == MTF_OK && !e) rc = MTF_ERR_NOMEM;
  int64_t kept = k < candidates ? k : candidates, parts = apply ? 0 : p.out_n / rows / (2 * kept);
  int64_t slot = apply ? 0 : st->dim_offset / len;
  int64_t out_inner = argmax ? 1 : mtf_rows_of(&st->out_shape, st->params.top_k.k_dim).inner;
  for (int64_t row = 0; rc == MTF_OK && row < rows; row++) {
    for (int64_t j = 0; j < candidates; j++)
      e[j] = apply ? (entry){p.in.x[0][j * rows + row], llround(p.in.x[0][(candidates + j) * rows + row])}
                   : (entry){at(&p, 0, row, j), st->dim_offset + j};
    qsort(e, (size_t)candidates, sizeof(entry), entry_order);
    for (int64_t i = 0; i < kept; i++) {
      if (!apply) {
        p.out[(slot * kept + i) * rows + row] = e[i].value;
        p.out[(parts * kept + slot * kept + i) * rows + row] = (double)e[i].position;
        continue;
      }
      int64_t o = (row / out_inner) * kept * out_inner + row % out_inner + i * out_inner; /* k_dim in dim's place */
      p.out[o] = st->op == MTF_OP_TOP_K_INDICES ? (double)e[i].position : e[i].value;
    }
  }
  free(e);
  return phase_end(st, a, &p, rc);
}

/* running sums over a split dim: exec/scan.h's definition of the two phases (row sums in double). */
static int k_cumsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  if (st->phase == MTF_PHASE_WHOLE) return k_reference(b, st, a);
  mtf_scan_spec spec = mtf_scan_spec_of(st);
  if (spec.stats) memset(a->out, 0, sizeof(float) * (size_t)mtf_shape_num_elements(&st->out_shape));
  for (int64_t row = 0; row < spec.r.count; row++)
    mtf_scan_row(&spec, row, a->in[0], st->phase == MTF_PHASE_APPLY ? a->in[1] : NULL, a->out);
  return MTF_OK;
}

static void ref_destroy(mtf_backend *b) { free(b); }

static int ref_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  (void)options;
  mtf_backend *b = calloc(1, sizeof *b);
  if (!b) return mtf_error_set(err, MTF_ERR_NOMEM, "backend 'ref64': out of memory");
  b->name = "ref64";
  b->threads = 1;
  b->mem = &ref_memory;
  b->destroy = ref_destroy;
  for (int k = 0; k < MTF_OP_COUNT; k++) b->kernels[k] = k_reference;
  b->kernels[MTF_OP_RANGE] = k_range;
  b->kernels[MTF_OP_SOFTMAX] = b->kernels[MTF_OP_LOG_SOFTMAX] = k_softmax;
  b->kernels[MTF_OP_LAYER_NORM] = b->kernels[MTF_OP_RMS_NORM] = k_norm;
  b->kernels[MTF_OP_SOFTMAX_XENT] = k_xent;
  b->kernels[MTF_OP_SOFTMAX_GRAD] = b->kernels[MTF_OP_LOG_SOFTMAX_GRAD] = k_softmax_grad;
  b->kernels[MTF_OP_LAYER_NORM_GRAD] = b->kernels[MTF_OP_RMS_NORM_GRAD] = k_norm_grad;
  b->kernels[MTF_OP_SOFTMAX_XENT_GRAD] = k_xent_grad;
  b->kernels[MTF_OP_TOP_K] = b->kernels[MTF_OP_TOP_K_INDICES] = k_top_k;
  b->kernels[MTF_OP_CUMSUM] = k_cumsum;
  /* inputs and variables are placed by the executor: no kernel runs for them */
  b->kernels[MTF_OP_INPUT] = b->kernels[MTF_OP_VARIABLE] = NULL;
  *out = b;
  return MTF_OK;
}

__attribute__((constructor)) static void register_ref64(void) {
  /* fp32 step by step in this process's memory, collectives by MPI on it; nothing else */
  mtf_backend_caps caps = {.kind = "ref64", .host_memory = 1, .microbatches = 1};
  mtf_backend_register(&caps, ref_create);
}
