/* The PJRT emitter: mtf's per-rank plans -> the StableHLO text (MLIR, format "mlir") of ONE SPMD module
 * that every device of the mesh runs. mtf's lowering stays the source of truth for communication: each
 * plan step becomes StableHLO ops (kernels as dot_general, reduce, elementwise ops, ...; collectives as
 * stablehlo.all_reduce / all_gather / all_to_all / reduce_scatter over replica groups computed from the
 * mesh's groups for the step's axes, the same groups src/comm builds). No GSPMD/Shardy propagation:
 * compile with num_replicas = n_devices, num_partitions = 1, use_spmd_partitioning = false.
 *
 * SPMD by construction: the caller makes one plan per mesh rank (mtf_plan_create with mesh_rank = r; no
 * MPI needed). The emitter checks that they have the same steps, shapes and buffers, and emits from plan
 * 0; every integer that differs between ranks (slice offsets, the global offsets of random/range/one_hot
 * slices, dim_offset of a split vocabulary) is read from a constant table indexed by
 * stablehlo.replica_id. Device d (replica d) runs mesh rank d (row-major coordinates).
 *
 * Program I/O, in this order:
 *   parameters: the variables the plan reads or writes (ascending storage slot), then the inputs
 *               (ascending storage slot), then RANDOM_OFFSET and MICROBATCH (always present);
 *   results:    the variables the plan writes (ascending slot; `aliases` names their parameter, so the
 *               runtime can donate it and carry the result to the next run), then the fetches (plan order).
 * Every value is the device's local slice (shape mtf_layout_slice_shape of the node's layout), row-major,
 * the same shape on every device. Variables not written stay as they are on the device. */
#ifndef MTF_EXEC_PJRT_EMIT_H
#define MTF_EXEC_PJRT_EMIT_H

#include <stddef.h>
#include <stdint.h>

#include "exec/pjrt/runtime.h"
#include "lower/plan.h"

typedef enum mtf_pjrt_value_kind {
  MTF_PJRT_VARIABLE,      /* a variable's slice: slot = its storage index (mtf_buffer.offset) */
  MTF_PJRT_INPUT,         /* an input's slice, uploaded before each run: slot = its storage index */
  MTF_PJRT_RANDOM_OFFSET, /* s32 [2]: mtf_session_set_random_offset's u64 value as its low and high 32-bit words
                           * (bit patterns; same on every device) */
  MTF_PJRT_MICROBATCH,    /* scalar s32, mtf_session_set_microbatch's index (0 without microbatches) */
  MTF_PJRT_FETCH,         /* results only: a fetched tensor's slice; slot = index into plan->fetch_nodes */
} mtf_pjrt_value_kind;

typedef struct mtf_pjrt_value {
  mtf_pjrt_value_kind kind;
  int node;            /* graph node (variable, input, fetched tensor); -1 for the scalars */
  int slot;            /* see the kinds */
  mtf_pjrt_type elem;  /* runtime.h's F32 or S32 */
  mtf_shape shape;     /* local shape on each device (RANDOM_OFFSET: [2], MICROBATCH: rank 0) */
  int64_t elements;
  int aliases;         /* results: index of the parameter this result replaces (a written variable), else -1 */
} mtf_pjrt_value;

typedef struct mtf_pjrt_emit_options {
  /* As mtf_session_set_microbatch's dim and count: random ops number microbatch_dim as rows of the whole
   * batch; the index is the MICROBATCH parameter. NULL / count <= 1: none. */
  const char *microbatch_dim;
  int microbatches;
  /* 1: a product of bfloat16 operands (the plan's einsum in_dtypes) is a dot_general of the bf16 values with an
   * f32 result, as GPU and TPU plugins run on tensor cores / the MXU; 0: the operands are converted to f32
   * first, for the XLA CPU plugin, which compiles a bf16 x bf16 = f32 dot but fails at run time once it is large
   * enough for its Eigen kernel ("Unsupported element type for DotThunk::Execute"). mtf_pjrt_session_create
   * sets it for every platform but "cpu". */
  int bf16_dots;
} mtf_pjrt_emit_options;

typedef struct mtf_pjrt_module {
  char *text;    /* NUL-terminated StableHLO MLIR; its entry function is @main */
  size_t length; /* strlen(text) */
  int n_devices; /* mesh size = num_replicas to compile with */
  int n_collectives; /* collective ops in the module (all_reduce, reduce_scatter, all_gather, all_to_all):
                      * how many a device may have in flight at once (mtf_pjrt_threads_needed) */
  int n_params, n_results;
  mtf_pjrt_value *params, *results;
} mtf_pjrt_module;

/* One module from the n_plans per-rank plans of one graph, mesh and layout (plans[r] for mesh rank r,
 * n_plans = mesh size). Errors (plans that differ in structure, a step the emitter lacks): MTF_ERR_INVALID
 * with the step and op named. `options` may be NULL. */
int mtf_pjrt_emit(const mtf_plan *const *plans, int n_plans, const mtf_pjrt_emit_options *options,
                  mtf_pjrt_module *out, mtf_error *err);
void mtf_pjrt_module_free(mtf_pjrt_module *m);

/* Convenience for tests and the runtime: the mesh's per-rank plans of a graph (mtf_plan_create_with_options
 * for every rank, with the graph's assigns; options NULL: the defaults). *plans is an array of *n_plans =
 * mesh-size plans; free with mtf_pjrt_plans_destroy. */
int mtf_pjrt_plans_create(const mtf_graph *g, const mtf_shape *mesh, const mtf_layout_rules *rules, int n_fetches,
                          const mtf_tensor *fetches, const mtf_plan_options *options, mtf_plan ***plans, int *n_plans,
                          mtf_error *err);
void mtf_pjrt_plans_destroy(mtf_plan **plans, int n_plans);

#endif
