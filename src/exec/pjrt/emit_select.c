/* StableHLO for the selection ops (exec/cpu/select.c): top-k and argmax as a stable two-operand sort
 * (values, positions) whose comparator is the CPU's order (larger first, ties by lower position, NaN last),
 * and running sums as a product with a triangular 0/1 matrix in f64 (the CPU scans in double), in the
 * phases of a split dim: STATS writes this rank's candidates (totals) into its slot of a zeroed buffer,
 * APPLY selects from all of them (scans from the totals of the slices before this one). */
#include <math.h>

#include "exec/pjrt/emit_internal.h"

static const h_shape SCALAR = {0, {0}};

/* Sorts [R, L] values with s32 positions along dim 1 in the CPU's rank order; returns both, sorted. */
static void sort_ranked(h_emitter *E, int values, int positions, int *sorted_values, int *sorted_positions) {
  const h_type *tv = h_t(E, values);
  int res = h_new(E, tv->s, H_F32); /* the sort's pair of results, named %v<res>#0 and #1 */
  h_new(E, tv->s, H_S32);
  int v = h_new(E, SCALAR, H_F32), u = h_new(E, SCALAR, H_F32), i = h_new(E, SCALAR, H_S32), j = h_new(E, SCALAR, H_S32);
  char t1[160], t2[160];
  h_type_text(tv, t1);
  h_type_text(h_t(E, positions), t2);
  h_printf(E, "    %%v%d:2 = \"stablehlo.sort\"(%%v%d, %%v%d) ({\n    ^bb0(%%v%d: tensor<f32>, %%v%d: tensor<f32>, "
           "%%v%d: tensor<i32>, %%v%d: tensor<i32>):\n", res, values, positions, v, u, i, j);
  /* the comparator's body: scalar ops */
  int nv = h_compare(E, "NE", v, v), nu = h_compare(E, "NE", u, u);
  int any = h_binop(E, "or", nv, nu), same = h_compare(E, "EQ", nv, nu), before = h_compare(E, "LT", i, j);
  int nan_case = h_select(E, same, before, h_unop(E, "not", nv));
  int num_case = h_binop(E, "or", h_compare(E, "GT", v, u), h_binop(E, "and", h_compare(E, "EQ", v, u), before));
  int p = h_select(E, any, nan_case, num_case);
  h_printf(E, "      \"stablehlo.return\"(%%v%d) : (tensor<i1>) -> ()\n    }) {dimension = 1 : i64, is_stable = true} : "
           "(%s, %s) -> (%s, %s)\n", p, t1, t2, t1, t2);
  *sorted_values = h_new(E, tv->s, H_F32);
  h_printf(E, "    %%v%d = \"stablehlo.reshape\"(%%v%d#0) : (%s) -> %s\n", *sorted_values, res, t1, t1);
  *sorted_positions = h_new(E, tv->s, H_S32);
  h_printf(E, "    %%v%d = \"stablehlo.reshape\"(%%v%d#1) : (%s) -> %s\n", *sorted_positions, res, t2, t2);
}

/* Columns [0, k) of [R, n]. */
static int first_columns(h_emitter *E, int x, int64_t k) {
  int64_t start[2] = {0, 0}, limit[2] = {h_t(E, x)->s.d[0], k};
  return h_slice(E, x, start, limit);
}

/* [R, k] (rows named `rows`, in order) to the step's output, k_dim placed by name; argmax: [R]. */
static void out_selected(h_emitter *E, const mtf_step *st, int x, const mtf_shape *rows) {
  mtf_shape named = *rows;
  if (st->params.top_k.k_dim[0]) mtf_shape_append(&named, st->params.top_k.k_dim, h_t(E, x)->s.d[1], NULL);
  e_output(E, st, n_to(E, h_reshape(E, x, h_shape_of(&named)), &named, &st->out_shape));
}

static int64_t get_dim_offset(const mtf_step *st, void *arg) {
  (void)arg;
  return st->dim_offset;
}

static int top_k(h_emitter *E, const mtf_step *st) {
  int argmax = st->params.top_k.k_dim[0] == 0;
  int64_t k = argmax ? 1 : st->params.top_k.k;
  int indices = st->op == MTF_OP_TOP_K_INDICES;
  const mtf_shape *xs = &st->in_shape[0];
  if (st->phase == MTF_PHASE_APPLY) { /* candidates [2C, rows]: C values, then their global positions */
    int64_t C = xs->dims[0].size / 2, R = mtf_shape_num_elements(xs) / (2 * C);
    mtf_shape rows = {0};
    for (int d = 1; d < xs->rank; d++) rows.dims[rows.rank++] = xs->dims[d];
    h_shape flat = {2, {2 * C, R}};
    int perm[2] = {1, 0};
    int c = h_transpose(E, h_reshape(E, e_input(E, st, 0), flat), perm); /* [R, 2C] */
    int64_t s0[2] = {0, 0}, l0[2] = {R, C}, s1[2] = {0, C}, l1[2] = {R, 2 * C};
    int vals = h_slice(E, c, s0, l0), pos = h_convert(E, h_unop(E, "round_nearest_even", h_slice(E, c, s1, l1)), H_S32);
    int sv, sp;
    sort_ranked(E, vals, pos, &sv, &sp);
    out_selected(E, st, first_columns(E, indices ? sp : sv, k), &rows);
    return MTF_OK;
  }
  mtf_shape rows;
  int x = n_dim_last(E, e_input(E, st, 0), xs, st->params.top_k.dim, &rows);
  int64_t L = xs->dims[mtf_shape_index_of(xs, st->params.top_k.dim)].size, R = mtf_shape_num_elements(&rows);
  h_shape flat = {2, {R, L}};
  x = h_reshape(E, x, flat);
  int sv, sp;
  sort_ranked(E, x, h_iota(E, flat, 1, H_S32), &sv, &sp);
  if (st->phase == MTF_PHASE_WHOLE) {
    out_selected(E, st, first_columns(E, indices ? sp : sv, k), &rows);
    return MTF_OK;
  }
  /* STATS: this rank's k' best into slot dim_offset / L of the zeroed [2 parts k', R] */
  int64_t kk = k < L ? k : L, n = st->out_shape.dims[0].size / 2;
  int perm[2] = {1, 0};
  int vals = h_transpose(E, first_columns(E, sv, kk), perm); /* [k', R] */
  int64_t offsets[1024], slots[1024];
  e_rank_values(E, get_dim_offset, NULL, offsets);
  for (int r = 0; r < E->n_plans; r++) slots[r] = offsets[r] / L * kk;
  int off = h_rank_int(E, offsets), at = h_rank_int(E, slots);
  h_shape ks = {2, {kk, R}};
  int pos = h_binop(E, "add", h_convert(E, h_transpose(E, first_columns(E, sp, kk), perm), H_S64),
                    h_broadcast_scalar(E, off, ks));
  h_shape all = {2, {2 * n, R}};
  int buf = h_splat(E, 0.0, H_F32, all), zero = h_splat(E, 0.0, H_S64, SCALAR);
  int starts[2] = {at, zero};
  buf = h_dynamic_update_slice(E, buf, vals, starts);
  starts[0] = h_binop(E, "add", at, h_splat(E, (double)n, H_S64, SCALAR));
  buf = h_dynamic_update_slice(E, buf, h_convert(E, pos, H_F32), starts);
  e_output(E, st, buf);
  return MTF_OK;
}

/* Prefix sums of [R, L] along L in f64: x T, T[j, t] = 1 where j is summed into t. */
static int scan(h_emitter *E, int x64, int64_t L, int exclusive, int reverse) {
  h_shape sq = {2, {L, L}};
  int j = h_iota(E, sq, 0, H_S64), t = h_iota(E, sq, 1, H_S64);
  const char *dir = reverse ? (exclusive ? "GT" : "GE") : (exclusive ? "LT" : "LE");
  int tri = h_select(E, h_compare(E, dir, j, t), h_splat(E, 1.0, H_F64, sq), h_splat(E, 0.0, H_F64, sq));
  int ac[1] = {1}, bc[1] = {0};
  return h_dot_general(E, x64, tri, 0, NULL, NULL, 1, ac, bc);
}

static int cumsum(h_emitter *E, const mtf_step *st) {
  const mtf_shape *xs = &st->in_shape[0];
  const char *dim = st->params.scan.dim;
  mtf_shape rows;
  int64_t L = xs->dims[mtf_shape_index_of(xs, dim)].size, R = mtf_shape_num_elements(xs) / (L ? L : 1);
  h_shape flat = {2, {R, L}}, rs = {1, {R}};
  int x = h_convert(E, h_reshape(E, n_dim_last(E, e_input(E, st, 0), xs, dim, &rows), flat), H_F64);
  int64_t offsets[1024], slots[1024];
  e_rank_values(E, get_dim_offset, NULL, offsets);
  for (int r = 0; r < E->n_plans; r++) slots[r] = offsets[r] / (L ? L : 1);
  if (st->phase == MTF_PHASE_STATS) { /* this rank's row totals in its slot of [parts, R] */
    int64_t parts = st->out_shape.dims[0].size;
    h_shape all = {2, {parts, R}}, one = {2, {1, R}};
    int total = h_reshape(E, h_convert(E, h_reduce(E, x, 2u, "add", 0.0), H_F32), one);
    int starts[2] = {h_rank_int(E, slots), h_splat(E, 0.0, H_S64, SCALAR)};
    e_output(E, st, h_dynamic_update_slice(E, h_splat(E, 0.0, H_F32, all), total, starts));
    return MTF_OK;
  }
  int y = scan(E, x, L, st->params.scan.exclusive, st->params.scan.reverse);
  if (st->phase == MTF_PHASE_APPLY) { /* start from the totals of the slices before this one (after, reversed) */
    int64_t parts = st->in_shape[1].dims[0].size;
    h_shape all = {2, {parts, R}};
    int totals = h_convert(E, h_reshape(E, e_input(E, st, 1), all), H_F64);
    int q = h_iota(E, all, 0, H_S64), slot = h_broadcast_scalar(E, h_rank_int(E, slots), all);
    int before = h_compare(E, st->params.scan.reverse ? "GT" : "LT", q, slot);
    int start = h_reduce(E, h_select(E, before, totals, h_splat(E, 0.0, H_F64, all)), 1u, "add", 0.0);
    int dims[1] = {0};
    y = h_binop(E, "add", y, h_broadcast_in_dim(E, h_reshape(E, start, rs), flat, dims));
  }
  /* [R, L] back to the input's order */
  h_shape named = h_shape_of(&rows);
  named.d[named.rank++] = L;
  e_output(E, st, n_dim_back(E, h_reshape(E, h_convert(E, y, H_F32), named), xs, dim));
  return MTF_OK;
}

void e_ops_select(e_op_fn *table) {
  table[MTF_OP_TOP_K] = top_k;
  table[MTF_OP_TOP_K_INDICES] = top_k;
  table[MTF_OP_CUMSUM] = cumsum;
}
