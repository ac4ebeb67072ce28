/* The emitter's parts (emit*.c): an SSA value table with the type of every value emitted, helpers that
 * print one StableHLO op each (generic MLIR form, so the text never depends on a dialect's pretty syntax),
 * and helpers over named shapes (dims matched by name, as the CPU kernels walk them). */
#ifndef MTF_EXEC_PJRT_EMIT_INTERNAL_H
#define MTF_EXEC_PJRT_EMIT_INTERNAL_H

#include <stdarg.h>

#include "exec/pjrt/emit.h"

/* Element types inside the module. */
typedef enum h_elem { H_F32, H_F64, H_S32, H_S64, H_U64, H_U32, H_PRED, H_BF16 } h_elem;

typedef struct h_shape {
  int rank;
  int64_t d[MTF_MAX_RANK];
} h_shape;

typedef struct h_type {
  h_shape s;
  h_elem e;
} h_type;

typedef struct h_emitter {
  char *text;
  size_t len, cap;
  int nomem;
  h_type *types; /* per SSA id (%vN) */
  int n_values, cap_values;
  const mtf_plan *const *plans;
  int n_plans;
  mtf_pjrt_emit_options options;
  int step;           /* the step being emitted (for rank tables and messages) */
  int replica;        /* SSA id of the replica id as tensor<i64>, or -1 until first needed */
  int random_offset;  /* SSA ids of the scalar parameters */
  int microbatch;
  int *buffer_value;  /* per buffer of plan 0: SSA id of its current value, -1 */
  int n_collectives;  /* collective ops emitted so far (mtf_pjrt_module.n_collectives) */
  mtf_error *err;
} h_emitter;

/* ---- text ---- */
void h_printf(h_emitter *E, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *h_elem_name(h_elem e);
/* "tensor<3x4xf32>" into buf (>= 160 bytes). */
const char *h_type_text(const h_type *t, char *buf);
h_shape h_shape_of(const mtf_shape *s);
h_shape h_shape_make(int rank, const int64_t *d);
int64_t h_shape_count(const h_shape *s);
h_elem h_elem_of(mtf_dtype d);

/* A new SSA id of type t (its text is %v<id>). */
int h_new(h_emitter *E, h_shape s, h_elem e);
const h_type *h_t(const h_emitter *E, int id);

/* ---- one op each; results typed from operands ---- */
int h_splat(h_emitter *E, double value, h_elem e, h_shape s);          /* constant filled with value */
int h_splat_u64(h_emitter *E, uint64_t value, h_shape s);
int h_const_i64_vector(h_emitter *E, const int64_t *v, int n);          /* tensor<n x i64> */
int h_binop(h_emitter *E, const char *op, int a, int b);                /* "add", "multiply", "xor", ... */
int h_unop(h_emitter *E, const char *op, int a);                        /* "exponential", "negate", ... */
int h_compare(h_emitter *E, const char *dir, int a, int b);             /* EQ NE LT LE GT GE */
int h_select(h_emitter *E, int pred, int a, int b);
int h_convert(h_emitter *E, int a, h_elem e);
int h_reshape(h_emitter *E, int a, h_shape s);
int h_transpose(h_emitter *E, int a, const int *perm);
int h_broadcast_in_dim(h_emitter *E, int a, h_shape s, const int *dims); /* dims increasing */
int h_broadcast_scalar(h_emitter *E, int a, h_shape s);                /* a rank 0 */
int h_iota(h_emitter *E, h_shape s, int dim, h_elem e);
/* Reduces dims (a bitmask of a's dims) with "add", "maximum" or "minimum" from init. */
int h_reduce(h_emitter *E, int a, unsigned dims, const char *op, double init);
int h_slice(h_emitter *E, int a, const int64_t *start, const int64_t *limit);
int h_dynamic_slice(h_emitter *E, int a, const int *starts, const int64_t *sizes); /* starts: scalar i64 ids */
int h_dynamic_update_slice(h_emitter *E, int a, int update, const int *starts);
int h_concatenate(h_emitter *E, const int *ids, int n, int dim);
int h_dot_general(h_emitter *E, int a, int b, int nbatch, const int *abatch, const int *bbatch, int ncontract,
                  const int *acontract, const int *bcontract);
/* A scalar i64 that is values[r] on mesh rank r (a constant when all are equal; else a table indexed by
 * replica_id). */
int h_rank_int(h_emitter *E, const int64_t *values);

/* ---- named shapes ---- */
/* x (named shape from) transposed and broadcast to `to` by dim name (from's dims are in to). */
int n_to(h_emitter *E, int x, const mtf_shape *from, const mtf_shape *to);
/* x reduced over from's dims absent from `to`, the rest transposed to to's order. */
int n_reduce(h_emitter *E, int x, const mtf_shape *from, const mtf_shape *to, const char *op, double init);
/* x transposed so that `dim` is last: [rows in from's order, dim]; rows_shape gets the named rows. */
int n_dim_last(h_emitter *E, int x, const mtf_shape *from, const char *dim, mtf_shape *rows_shape);
/* The inverse of n_dim_last. */
int n_dim_back(h_emitter *E, int x, const mtf_shape *to, const char *dim);
/* An index tensor (int32, or floats holding integers: rounded) as s64. */
int h_as_index(h_emitter *E, int x);

/* ---- the steps ---- */
/* The SSA value of input k of the current step, shaped as its in_shape, of the step's in_dtype[k] (a data
 * movement step's: its buffer's dtype). */
int e_input(h_emitter *E, const mtf_step *st, int k);
/* Records the step's result (shape out_shape, dtype out_dtype; a data movement step's: its buffer's). */
void e_output(h_emitter *E, const mtf_step *st, int value);
/* values[r] = the field of step E->step on rank r's plan. */
void e_rank_values(h_emitter *E, int64_t (*get)(const mtf_step *st, void *arg), void *arg, int64_t *values);
int e_fail(h_emitter *E, const mtf_step *st, const char *what);
/* The current step's dim_offset on each rank, as a scalar s64 (emit_ops.c). */
int e_rank_dim_offset(h_emitter *E);
/* Along dim d of mtf_random_extent_shape(st): the global offset of this rank's slice (a scalar s64) and, in
 * *global_dim, the dim's global size, as mtf_random_extent numbers them (under microbatches, rows of the
 * whole batch) (emit_ops.c). */
int e_random_extent(h_emitter *E, const mtf_step *st, int d, int64_t *global_dim);
/* mtf_uniform01(seed, mtf_run_key(key, RANDOM_OFFSET), index) as f64, index a u64 tensor (emit_ops.c). */
int e_uniform01(h_emitter *E, uint64_t seed, uint64_t key, int index);
/* A unary function of the op table on x (f32), as the CPU kernel computes it (emit_ops.c). */
int e_unary_fn(h_emitter *E, mtf_unary_kind fn, float alpha, float beta, int x);

/* The StableHLO of one kernel step (its result recorded by e_output): one per op kind, in an op-indexed table
 * as the cpu and cuda backends' kernels are. Each file fills the entries of its ops. */
typedef int (*e_op_fn)(h_emitter *E, const mtf_step *st);
void e_ops_elementwise(e_op_fn *table); /* emit_ops.c */
void e_ops_fused(e_op_fn *table);       /* emit_fused.c */
void e_ops_select(e_op_fn *table);      /* emit_select.c */
void e_ops_attention(e_op_fn *table);   /* emit_attention.c */
int e_collective(h_emitter *E, const mtf_step *st);                       /* emit_comm.c */

#endif
