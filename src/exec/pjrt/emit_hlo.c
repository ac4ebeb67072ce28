/* One StableHLO op per helper, printed in MLIR's generic form ("stablehlo.add"(%a, %b) : (...) -> ...),
 * which every StableHLO parser reads whatever its pretty syntax; each result's type is recorded so that
 * callers never spell types. Non-finite constants are printed as their bit patterns (MLIR's hex form). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "exec/pjrt/emit_internal.h"

void h_printf(h_emitter *E, const char *fmt, ...) {
  if (E->nomem) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = E->cap - E->len;
    int n = vsnprintf(E->text ? E->text + E->len : NULL, E->text ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      E->nomem = 1;
      return;
    }
    if (E->text && (size_t)n < room) {
      E->len += (size_t)n;
      return;
    }
    size_t cap = E->cap ? E->cap * 2 : 1 << 16;
    while (cap < E->len + (size_t)n + 1) cap *= 2;
    char *t = realloc(E->text, cap);
    if (!t) {
      E->nomem = 1;
      return;
    }
    E->text = t;
    E->cap = cap;
  }
}

const char *h_elem_name(h_elem e) {
  switch (e) {
    case H_F32: return "f32";
    case H_F64: return "f64";
    case H_S32: return "i32";
    case H_S64: return "i64";
    case H_U64: return "ui64";
    case H_U32: return "ui32";
    case H_PRED: return "i1";
    case H_BF16: return "bf16";
  }
  return "?";
}

const char *h_type_text(const h_type *t, char *buf) {
  size_t n = (size_t)snprintf(buf, 160, "tensor<");
  for (int d = 0; d < t->s.rank; d++) n += (size_t)snprintf(buf + n, 160 - n, "%lldx", (long long)t->s.d[d]);
  snprintf(buf + n, 160 - n, "%s>", h_elem_name(t->e));
  return buf;
}

h_shape h_shape_of(const mtf_shape *s) {
  h_shape h = {s->rank, {0}};
  for (int d = 0; d < s->rank; d++) h.d[d] = s->dims[d].size;
  return h;
}

h_shape h_shape_make(int rank, const int64_t *d) {
  h_shape h = {rank, {0}};
  for (int i = 0; i < rank; i++) h.d[i] = d[i];
  return h;
}

int64_t h_shape_count(const h_shape *s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++) n *= s->d[d];
  return n;
}

h_elem h_elem_of(mtf_dtype d) {
  switch (d) {
    case MTF_I32: return H_S32;
    case MTF_F64: return H_F64;
    case MTF_BF16: return H_BF16;
    case MTF_F32: break;
  }
  return H_F32;
}

int h_new(h_emitter *E, h_shape s, h_elem e) {
  if (E->n_values == E->cap_values) {
    int cap = E->cap_values ? 2 * E->cap_values : 4096;
    h_type *t = realloc(E->types, sizeof(h_type) * (size_t)cap);
    if (!t) {
      E->nomem = 1;
      return 0;
    }
    E->types = t;
    E->cap_values = cap;
  }
  E->types[E->n_values].s = s;
  E->types[E->n_values].e = e;
  return E->n_values++;
}

const h_type *h_t(const h_emitter *E, int id) {
  static const h_type none = {{0, {0}}, H_F32};
  return id >= 0 && id < E->n_values ? &E->types[id] : &none;
}

#define T(id, buf) h_type_text(h_t(E, id), buf)

static void print_number(h_emitter *E, double v, h_elem e) {
  if (e == H_PRED) {
    h_printf(E, "%s", v != 0 ? "true" : "false");
  } else if (e == H_F32 || e == H_F64 || e == H_BF16) {
    if (isfinite(v)) {
      h_printf(E, "%.17e", v);
    } else if (e == H_BF16) {
      h_printf(E, "0x%04X", (unsigned)mtf_bf16_from_float((float)v));
    } else if (e == H_F32) {
      float f = (float)v;
      uint32_t bits;
      memcpy(&bits, &f, sizeof bits);
      h_printf(E, "0x%08X", bits);
    } else {
      uint64_t bits;
      memcpy(&bits, &v, sizeof bits);
      h_printf(E, "0x%016llX", (unsigned long long)bits);
    }
  } else {
    h_printf(E, "%lld", (long long)v);
  }
}

int h_splat(h_emitter *E, double value, h_elem e, h_shape s) {
  int id = h_new(E, s, e);
  char t[160];
  h_printf(E, "    %%v%d = \"stablehlo.constant\"() {value = dense<", id);
  print_number(E, e == H_F32 ? (double)(float)value : e == H_BF16 ? (double)mtf_bf16_round((float)value) : value, e);
  h_printf(E, "> : %s} : () -> %s\n", T(id, t), t);
  return id;
}

int h_splat_u64(h_emitter *E, uint64_t value, h_shape s) {
  int id = h_new(E, s, H_U64);
  char t[160];
  h_printf(E, "    %%v%d = \"stablehlo.constant\"() {value = dense<%llu> : %s} : () -> %s\n", id,
           (unsigned long long)value, T(id, t), t);
  return id;
}

int h_const_i64_vector(h_emitter *E, const int64_t *v, int n) {
  h_shape s = {1, {n}};
  int id = h_new(E, s, H_S64);
  char t[160];
  h_printf(E, "    %%v%d = \"stablehlo.constant\"() {value = dense<[", id);
  for (int i = 0; i < n; i++) h_printf(E, "%s%lld", i ? ", " : "", (long long)v[i]);
  h_printf(E, "]> : %s} : () -> %s\n", T(id, t), t);
  return id;
}

int h_binop(h_emitter *E, const char *op, int a, int b) {
  int id = h_new(E, h_t(E, a)->s, h_t(E, a)->e);
  char ta[160], tb[160];
  h_printf(E, "    %%v%d = \"stablehlo.%s\"(%%v%d, %%v%d) : (%s, %s) -> %s\n", id, op, a, b, T(a, ta), T(b, tb), ta);
  return id;
}

int h_unop(h_emitter *E, const char *op, int a) {
  int id = h_new(E, h_t(E, a)->s, h_t(E, a)->e);
  char ta[160];
  h_printf(E, "    %%v%d = \"stablehlo.%s\"(%%v%d) : (%s) -> %s\n", id, op, a, T(a, ta), ta);
  return id;
}

int h_compare(h_emitter *E, const char *dir, int a, int b) {
  int id = h_new(E, h_t(E, a)->s, H_PRED);
  char ta[160], tb[160], to[160];
  h_printf(E, "    %%v%d = \"stablehlo.compare\"(%%v%d, %%v%d) {comparison_direction = #stablehlo<comparison_direction %s>} "
           ": (%s, %s) -> %s\n", id, a, b, dir, T(a, ta), T(b, tb), T(id, to));
  return id;
}

int h_select(h_emitter *E, int pred, int a, int b) {
  int id = h_new(E, h_t(E, a)->s, h_t(E, a)->e);
  char tp[160], ta[160];
  h_printf(E, "    %%v%d = \"stablehlo.select\"(%%v%d, %%v%d, %%v%d) : (%s, %s, %s) -> %s\n", id, pred, a, b, T(pred, tp),
           T(a, ta), ta, ta);
  return id;
}

int h_convert(h_emitter *E, int a, h_elem e) {
  if (h_t(E, a)->e == e) return a;
  int id = h_new(E, h_t(E, a)->s, e);
  char ta[160], to[160];
  h_printf(E, "    %%v%d = \"stablehlo.convert\"(%%v%d) : (%s) -> %s\n", id, a, T(a, ta), T(id, to));
  return id;
}

static int same_shape(const h_shape *a, const h_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->d[d] != b->d[d]) return 0;
  return 1;
}

int h_reshape(h_emitter *E, int a, h_shape s) {
  if (same_shape(&h_t(E, a)->s, &s)) return a;
  int id = h_new(E, s, h_t(E, a)->e);
  char ta[160], to[160];
  h_printf(E, "    %%v%d = \"stablehlo.reshape\"(%%v%d) : (%s) -> %s\n", id, a, T(a, ta), T(id, to));
  return id;
}

static void print_i64_array(h_emitter *E, const char *name, const int64_t *v, int n) {
  h_printf(E, "%s = array<i64", name);
  for (int i = 0; i < n; i++) h_printf(E, "%s %lld", i ? "," : ":", (long long)v[i]);
  h_printf(E, ">");
}

int h_transpose(h_emitter *E, int a, const int *perm) {
  const h_type *ta = h_t(E, a);
  int identity = 1;
  h_shape s = {ta->s.rank, {0}};
  int64_t p[MTF_MAX_RANK];
  for (int d = 0; d < s.rank; d++) {
    s.d[d] = ta->s.d[perm[d]];
    p[d] = perm[d];
    identity &= perm[d] == d;
  }
  if (identity) return a;
  int id = h_new(E, s, ta->e);
  char t1[160], t2[160];
  h_printf(E, "    %%v%d = \"stablehlo.transpose\"(%%v%d) {", id, a);
  print_i64_array(E, "permutation", p, s.rank);
  h_printf(E, "} : (%s) -> %s\n", T(a, t1), T(id, t2));
  return id;
}

int h_broadcast_in_dim(h_emitter *E, int a, h_shape s, const int *dims) {
  const h_type *ta = h_t(E, a);
  if (same_shape(&ta->s, &s)) return a;
  int64_t p[MTF_MAX_RANK];
  for (int d = 0; d < ta->s.rank; d++) p[d] = dims[d];
  int id = h_new(E, s, ta->e);
  char t1[160], t2[160];
  h_printf(E, "    %%v%d = \"stablehlo.broadcast_in_dim\"(%%v%d) {", id, a);
  print_i64_array(E, "broadcast_dimensions", p, h_t(E, a)->s.rank);
  h_printf(E, "} : (%s) -> %s\n", T(a, t1), T(id, t2));
  return id;
}

int h_broadcast_scalar(h_emitter *E, int a, h_shape s) { return h_broadcast_in_dim(E, a, s, NULL); }

int h_iota(h_emitter *E, h_shape s, int dim, h_elem e) {
  int id = h_new(E, s, e);
  char t[160];
  h_printf(E, "    %%v%d = \"stablehlo.iota\"() {iota_dimension = %d : i64} : () -> %s\n", id, dim, T(id, t));
  return id;
}

int h_reduce(h_emitter *E, int a, unsigned dims, const char *op, double init) {
  if (!dims) return a;
  const h_type *ta = h_t(E, a);
  h_elem e = ta->e;
  h_shape s = {0, {0}};
  int64_t list[MTF_MAX_RANK];
  int n = 0;
  for (int d = 0; d < ta->s.rank; d++) {
    if (dims & (1u << d)) list[n++] = d;
    else s.d[s.rank++] = ta->s.d[d];
  }
  h_shape scalar = {0, {0}};
  int start = h_splat(E, init, e, scalar);
  int x = h_new(E, scalar, e), y = h_new(E, scalar, e), r = h_new(E, scalar, e), id = h_new(E, s, e);
  char ts[160], t1[160], t2[160];
  T(start, ts);
  h_printf(E, "    %%v%d = \"stablehlo.reduce\"(%%v%d, %%v%d) ({\n    ^bb0(%%v%d: %s, %%v%d: %s):\n", id, a, start, x, ts, y, ts);
  h_printf(E, "      %%v%d = \"stablehlo.%s\"(%%v%d, %%v%d) : (%s, %s) -> %s\n", r, op, x, y, ts, ts, ts);
  h_printf(E, "      \"stablehlo.return\"(%%v%d) : (%s) -> ()\n    }) {", r, ts);
  print_i64_array(E, "dimensions", list, n);
  h_printf(E, "} : (%s, %s) -> %s\n", T(a, t1), ts, T(id, t2));
  return id;
}

int h_slice(h_emitter *E, int a, const int64_t *start, const int64_t *limit) {
  const h_type *ta = h_t(E, a);
  h_shape s = {ta->s.rank, {0}};
  int64_t strides[MTF_MAX_RANK];
  int whole = 1;
  for (int d = 0; d < s.rank; d++) {
    s.d[d] = limit[d] - start[d];
    strides[d] = 1;
    whole &= start[d] == 0 && limit[d] == ta->s.d[d];
  }
  if (whole) return a;
  int id = h_new(E, s, ta->e);
  char t1[160], t2[160];
  h_printf(E, "    %%v%d = \"stablehlo.slice\"(%%v%d) {", id, a);
  print_i64_array(E, "start_indices", start, s.rank);
  h_printf(E, ", ");
  print_i64_array(E, "limit_indices", limit, s.rank);
  h_printf(E, ", ");
  print_i64_array(E, "strides", strides, s.rank);
  h_printf(E, "} : (%s) -> %s\n", T(a, t1), T(id, t2));
  return id;
}

int h_dynamic_slice(h_emitter *E, int a, const int *starts, const int64_t *sizes) {
  const h_type *ta = h_t(E, a);
  h_shape s = h_shape_make(ta->s.rank, sizes);
  if (same_shape(&ta->s, &s)) return a;
  int id = h_new(E, s, ta->e);
  char t1[160], t2[160];
  h_printf(E, "    %%v%d = \"stablehlo.dynamic_slice\"(%%v%d", id, a);
  for (int d = 0; d < s.rank; d++) h_printf(E, ", %%v%d", starts[d]);
  h_printf(E, ") {");
  print_i64_array(E, "slice_sizes", sizes, s.rank);
  h_printf(E, "} : (%s", T(a, t1));
  for (int d = 0; d < s.rank; d++) h_printf(E, ", tensor<i64>");
  h_printf(E, ") -> %s\n", T(id, t2));
  return id;
}

int h_dynamic_update_slice(h_emitter *E, int a, int update, const int *starts) {
  const h_type *ta = h_t(E, a);
  int id = h_new(E, ta->s, ta->e);
  char t1[160], t2[160];
  h_printf(E, "    %%v%d = \"stablehlo.dynamic_update_slice\"(%%v%d, %%v%d", id, a, update);
  for (int d = 0; d < ta->s.rank; d++) h_printf(E, ", %%v%d", starts[d]);
  h_printf(E, ") : (%s, %s", T(a, t1), T(update, t2));
  for (int d = 0; d < ta->s.rank; d++) h_printf(E, ", tensor<i64>");
  h_printf(E, ") -> %s\n", t1);
  return id;
}

int h_concatenate(h_emitter *E, const int *ids, int n, int dim) {
  if (n == 1) return ids[0];
  h_shape s = h_t(E, ids[0])->s;
  s.d[dim] = 0;
  for (int i = 0; i < n; i++) s.d[dim] += h_t(E, ids[i])->s.d[dim];
  int id = h_new(E, s, h_t(E, ids[0])->e);
  char t[160];
  h_printf(E, "    %%v%d = \"stablehlo.concatenate\"(", id);
  for (int i = 0; i < n; i++) h_printf(E, "%s%%v%d", i ? ", " : "", ids[i]);
  h_printf(E, ") {dimension = %d : i64} : (", dim);
  for (int i = 0; i < n; i++) h_printf(E, "%s%s", i ? ", " : "", T(ids[i], t));
  h_printf(E, ") -> %s\n", T(id, t));
  return id;
}

static void print_int_list(h_emitter *E, const char *name, const int *v, int n, int *first) {
  if (n == 0) return;
  h_printf(E, "%s%s = [", *first ? "" : ", ", name);
  for (int i = 0; i < n; i++) h_printf(E, "%s%d", i ? ", " : "", v[i]);
  h_printf(E, "]");
  *first = 0;
}

/* Result: [batch dims, a's free dims in order, b's free dims in order]. */
int h_dot_general(h_emitter *E, int a, int b, int nbatch, const int *abatch, const int *bbatch, int ncontract,
                  const int *acontract, const int *bcontract) {
  const h_type *ta = h_t(E, a), *tb = h_t(E, b);
  h_shape s = {0, {0}};
  unsigned used_a = 0, used_b = 0;
  for (int i = 0; i < nbatch; i++) {
    s.d[s.rank++] = ta->s.d[abatch[i]];
    used_a |= 1u << abatch[i];
    used_b |= 1u << bbatch[i];
  }
  for (int i = 0; i < ncontract; i++) {
    used_a |= 1u << acontract[i];
    used_b |= 1u << bcontract[i];
  }
  for (int d = 0; d < ta->s.rank; d++)
    if (!(used_a & (1u << d))) s.d[s.rank++] = ta->s.d[d];
  for (int d = 0; d < tb->s.rank; d++)
    if (!(used_b & (1u << d))) s.d[s.rank++] = tb->s.d[d];
  /* bfloat16 operands give an f32 result (exact products, fp32 accumulation: a bf16 GEMM's numbers) */
  int id = h_new(E, s, ta->e == H_BF16 ? H_F32 : ta->e);
  char t1[160], t2[160], t3[160];
  int first = 1;
  h_printf(E, "    %%v%d = \"stablehlo.dot_general\"(%%v%d, %%v%d) {dot_dimension_numbers = #stablehlo.dot<", id, a, b);
  print_int_list(E, "lhs_batching_dimensions", abatch, nbatch, &first);
  print_int_list(E, "rhs_batching_dimensions", bbatch, nbatch, &first);
  print_int_list(E, "lhs_contracting_dimensions", acontract, ncontract, &first);
  print_int_list(E, "rhs_contracting_dimensions", bcontract, ncontract, &first);
  h_printf(E, ">} : (%s, %s) -> %s\n", T(a, t1), T(b, t2), T(id, t3));
  return id;
}

int h_rank_int(h_emitter *E, const int64_t *values) {
  int same = 1;
  for (int r = 1; r < E->n_plans; r++) same &= values[r] == values[0];
  h_shape scalar = {0, {0}};
  if (same) return h_splat(E, (double)values[0], H_S64, scalar);
  if (E->replica < 0) { /* emitted at the first need; dominates every later use in the one block of @main */
    h_shape one = {0, {0}};
    int r = h_new(E, one, H_U32);
    h_printf(E, "    %%v%d = \"stablehlo.replica_id\"() : () -> tensor<ui32>\n", r);
    E->replica = h_convert(E, r, H_S64);
  }
  int table = h_const_i64_vector(E, values, E->n_plans);
  int64_t one = 1;
  int picked = h_dynamic_slice(E, table, &E->replica, &one);
  return h_reshape(E, picked, scalar);
}
