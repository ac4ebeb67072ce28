/* Everything a run computes, built from the config: the transformer (with dropout, for training), its
 * gradients and optimizer update, an evaluation forward pass without dropout over the same variables,
 * and the plans of both for one mesh rank. Used by `mtf train`, `mtf eval` and (without sessions)
 * `mtf plan`. No MPI here. */
#ifndef MTF_RUN_PROGRAM_H
#define MTF_RUN_PROGRAM_H

#include "config/config.h"
#include "model/transformer.h"
#include "mtf.h"

typedef struct mtf_program {
  mtf_graph *graph;
  mtf_transformer train_model, eval_model;
  mtf_tensor learning_rate, step; /* scalar inputs of the optimizer */
  mtf_tensor grad_norm;
  mtf_plan *train_plan, *eval_plan;
} mtf_program;

/* Builds the graph and both plans for mesh rank `rank` of cfg->mesh_shape under cfg->layout. */
int mtf_program_build(const mtf_config *cfg, int rank, mtf_program *out, mtf_error *err);
void mtf_program_free(mtf_program *p);

/* Bytes this rank holds for model parameters and for optimizer slots. */
void mtf_program_variable_bytes(const mtf_program *p, int64_t *param_bytes, int64_t *slot_bytes);

#endif
