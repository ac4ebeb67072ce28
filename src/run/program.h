/* Everything a run computes, built from the config: the transformer (with dropout, for training), its
 * gradients and optimizer update, an evaluation forward pass without dropout over the same variables,
 * and the plans for one mesh rank. Used by `mtf train`, `mtf eval` and (without sessions) `mtf plan`.
 * No MPI here.
 *
 * train.microbatches 1: one plan does a whole step (forward, backward, update) over train.batch rows.
 * train.microbatches N > 1: the model is built for batch/N rows; the train plan runs forward and backward
 * over one microbatch and adds its gradients into transient accumulator variables ("<param>/grad_accum",
 * left out of checkpoints), and the apply plan (the optimizer, reading the accumulators) runs once after
 * the N microbatches. The microbatch loss is scaled by 1/N before differentiation, so the accumulated
 * gradient is the gradient of the mean loss over the whole batch: the same update as one big batch, within
 * float rounding. The first microbatch of a step overwrites the accumulators (the `accumulate` input is 0,
 * then 1), so nothing has to zero them. The evaluation pass is built for batch/N rows too.
 * train.recompute block: gradients by mtf_gradients_recompute over the model's layers.
 * model.moe: the train plan also fetches each MoE layer's metrics (dropped, max_load, aux_loss); the
 * evaluation pass routes with model.moe.eval_capacity_factor. */
#ifndef MTF_RUN_PROGRAM_H
#define MTF_RUN_PROGRAM_H

#include "config/config.h"
#include "model/transformer.h"
#include "mtf.h"

typedef struct mtf_program {
  mtf_graph *graph;
  mtf_transformer train_model, eval_model; /* each over batch / microbatches rows */
  mtf_tensor learning_rate, step; /* scalar inputs of the optimizer */
  mtf_tensor grad_norm;
  int microbatches;               /* train.microbatches */
  mtf_tensor accumulate;          /* microbatches > 1: scalar input, 0 on a step's first microbatch, else 1 */
  mtf_tensor *accumulators;       /* microbatches > 1: per parameter (train_model.params order); else NULL */
  mtf_plan *train_plan;           /* a whole step, or (microbatches > 1) one microbatch into the accumulators */
  mtf_plan *apply_plan;           /* microbatches > 1: the optimizer update from the accumulators; else NULL */
  mtf_plan *eval_plan;
  /* MoE whose evaluation capacity can drop tokens: the evaluation pass once more with capacity for every
   * token (model.moe, "dropless"), over the same variables; else dropless_plan is NULL. */
  mtf_transformer dropless_model;
  mtf_plan *dropless_plan;
  int first_accumulate, first_update; /* the graph's assigns: accumulators [first_accumulate, first_update), then the update */
} mtf_program;

/* The four plans of one mesh rank (those the program has; the others NULL). */
typedef struct mtf_program_plans {
  mtf_plan *train, *apply, *eval, *dropless;
} mtf_program_plans;

/* Builds the graph and the plans for mesh rank `rank` of cfg->mesh_shape under cfg->layout. */
int mtf_program_build(const mtf_config *cfg, int rank, mtf_program *out, mtf_error *err);
/* The arena alignment the config's backend wants (mtf_plan_options.arena_alignment): 256 bytes for cuda. */
int mtf_run_arena_alignment(const mtf_config *cfg);

/* Whether the gradient allreduces go in non-blocking buckets (train.allreduce_overlap; its auto asks the MPI
 * world: call it where every rank does, after mtf_world_ranks_on_node's first, collective call). */
int mtf_run_overlaps_gradients(const mtf_config *cfg);
/* Whether that answer depends on where the job's ranks run (auto, on cpu, fp32 on the wire): mtf plan says so. */
int mtf_run_overlap_by_placement(const mtf_config *cfg);
void mtf_program_free(mtf_program *p);
/* The same plans as mtf_program_build's (fetches, assigns, options) for p's graph on another mesh and rank:
 * the pjrt backend runs every rank of the device mesh from one process, so it makes them all on one graph. */
int mtf_program_plans_for(const mtf_program *p, const mtf_config *cfg, const mtf_shape *mesh,
                          const mtf_layout_rules *rules, int rank, mtf_program_plans *out, mtf_error *err);
void mtf_program_plans_free(mtf_program_plans *plans);

/* The plan that holds every variable that is model state (parameters and optimizer slots): the one to
 * checkpoint the training session through. */
const mtf_plan *mtf_program_state_plan(const mtf_program *p);

/* What one rank of a training run holds at its peak, in bytes (mtf plan prints it; docs/ARCHITECTURE.md,
 * "Memory"). Backend memory is allocated once and stays: the arenas are resident from their first run. */
typedef struct mtf_program_memory {
  int64_t parameters, optimizer_state, accumulators; /* variables */
  int64_t train_arena, apply_arena, eval_arena;       /* the sessions' planned activation arenas */
  int64_t inputs;          /* the sessions' input buffers (token ids, targets, scalars) */
  int64_t host;            /* the loop's and the loader's row buffers */
  int64_t runtime;         /* not tensors: code, libraries, MPI's and OpenBLAS's own buffers (an estimate) */
  /* Held for a moment, never together: MPI's scratch for the largest allreduce (one block of a ring), and the
   * checkpoint staging buffer (the largest variable slice, when train.checkpoint_every > 0). */
  int64_t allreduce_scratch, staging;
  int64_t total;           /* all of it at the peak: the eval arena only when data.eval is set (only an
                            * evaluation touches it), the larger of the two transients */
} mtf_program_memory;
void mtf_program_memory_of(const mtf_program *p, const mtf_config *cfg, mtf_program_memory *m);

#endif
