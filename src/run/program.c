#include "run/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/world.h"
#include "train/optimizer.h"

static int optimizer_config(const mtf_config *cfg, mtf_optimizer_config *opt, mtf_error *err) {
  mtf_optimizer_kind kind = cfg->train.optimizer;
  mtf_optimizer_defaults(kind, opt);
  opt->clip_grad_norm = (float)cfg->train.clip_grad_norm;
  opt->policy_sums = cfg->model.bf16_matmuls;
  if (kind == MTF_OPT_ADAMW) {
    opt->beta1 = (float)cfg->train.beta1;
    opt->beta2 = (float)cfg->train.beta2;
    opt->weight_decay = (float)cfg->train.weight_decay;
  }
  if (kind == MTF_OPT_SGD) opt->momentum = (float)cfg->train.momentum;
  return mtf_optimizer_validate(opt, err);
}

/* The accumulators of microbatching: acc = grad + accumulate * acc, assigned at the end of each run of
 * the train plan (accumulate 0 on a step's first microbatch overwrites the previous step's sum). */
static int add_accumulators(mtf_program *p, const mtf_tensor *grads, mtf_error *err) {
  mtf_graph *g = p->graph;
  int n = p->train_model.n_params;
  p->accumulators = malloc(sizeof(mtf_tensor) * ((size_t)n + 1));
  if (!p->accumulators) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  mtf_shape scalar = {0};
  p->accumulate = mtf_input(g, "accumulate", &scalar);
  for (int i = 0; i < n; i++) {
    mtf_tensor param = p->train_model.params[i];
    char name[128];
    snprintf(name, sizeof name, "%s/grad_accum", mtf_tensor_name(g, param));
    mtf_tensor acc = mtf_transient_variable(g, name, mtf_tensor_shape(g, param));
    if (acc != MTF_NO_TENSOR && strcmp(mtf_tensor_name(g, acc), name) != 0)
      return mtf_error_set(err, MTF_ERR_INVALID, "gradient accumulator '%s' is longer than a tensor name may be: give "
                           "variable '%s' a shorter name", name, mtf_tensor_name(g, param));
    p->accumulators[i] = acc;
    mtf_assign(g, acc, mtf_add(g, grads[i], mtf_multiply(g, acc, p->accumulate)));
  }
  return mtf_graph_status(g, err);
}

/* Forward, backward and update of the training step (the graph; the plans are training_plans'). */
static int build_training(const mtf_config *cfg, mtf_program *p, int64_t rows, mtf_error *err) {
  mtf_graph *g = p->graph;
  mtf_optimizer_config opt;
  MTF_CHECK(optimizer_config(cfg, &opt, err));
  MTF_CHECK(mtf_transformer_build(g, &cfg->model, rows, (float)cfg->model.dropout, &p->train_model, err));
  mtf_shape scalar = {0};
  p->learning_rate = mtf_input(g, "learning_rate", &scalar);
  p->step = mtf_input(g, "step", &scalar);
  int n = p->train_model.n_params, N = p->microbatches;
  mtf_tensor *grads = malloc(sizeof(mtf_tensor) * ((size_t)n + 1));
  if (!grads) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  /* Each microbatch's loss is its own mean; the step's loss is their mean. */
  mtf_tensor loss = N > 1 ? mtf_scalar_multiply(g, p->train_model.loss, 1.0f / (float)N) : p->train_model.loss;
  int recompute = cfg->train.recompute == MTF_RECOMPUTE_BLOCK;
  int rc = recompute ? mtf_gradients_recompute(g, loss, n, p->train_model.params, grads)
                     : mtf_gradients(g, loss, n, p->train_model.params, grads);
  if (rc) rc = mtf_graph_status(g, err);
  int first_accumulate = mtf_graph_num_assigns(g);
  if (rc == MTF_OK && N > 1) rc = add_accumulators(p, grads, err);
  int first_update = mtf_graph_num_assigns(g);
  if (rc == MTF_OK)
    rc = mtf_optimizer_apply(g, &opt, n, p->train_model.params, N > 1 ? p->accumulators : grads, p->learning_rate,
                             p->step, &p->grad_norm, err);
  free(grads);
  if (rc) return rc;
  p->first_accumulate = first_accumulate;
  p->first_update = first_update;
  return MTF_OK;
}

/* What the config's backend kind does (its registry entry); a kind this build lacks (a plan made for a cluster's
 * build, `mtf plan` here) plans as cpu does. */
static const mtf_backend_caps *caps_of(const mtf_config *cfg) {
  const mtf_backend_caps *caps = mtf_backend_capabilities(cfg->backend);
  return caps ? caps : mtf_backend_capabilities("cpu");
}

/* The backends that run a plan step by step (cpu, cuda), not one compiled program per step (pjrt): those skip
 * a cast whose weight copy is current (mtf_plan_options.bf16_weight_copies) and a moving average fused into its
 * adam_update (fuse_optimizer). */
static int runs_step_by_step(const mtf_config *cfg) { return !caps_of(cfg)->one_program; }

static int host_fusions(const mtf_config *cfg) { return caps_of(cfg)->host_fusions; }

int mtf_run_arena_alignment(const mtf_config *cfg) { return caps_of(cfg)->arena_alignment; }

/* auto: MPI moves a non-blocking collective only inside MPI calls, so between ranks of one node the copies run
 * on the cores that compute, and Open MPI's non-blocking allreduce copies more than its blocking one (the
 * small GPT on b:2, bf16: 6% less wall time blocking, docs/PERFORMANCE.md). Across nodes the network moves
 * the bytes, and NCCL (cuda) has its own engine; bf16 on the wire needs the buckets. Without MPI (mtf plan)
 * the job's placement is unknown and the plan shows the buckets. */
int mtf_run_overlap_by_placement(const mtf_config *cfg) {
  return cfg->train.allreduce_overlap == MTF_OVERLAP_AUTO && caps_of(cfg)->host_memory &&
         cfg->grad_reduce != MTF_NUMBERS_BF16;
}

int mtf_run_overlaps_gradients(const mtf_config *cfg) {
  if (cfg->train.allreduce_overlap == MTF_OVERLAP_OFF) return 0;
  if (!mtf_run_overlap_by_placement(cfg)) return 1;
  int world = mtf_world_size();
  return world == 1 || mtf_world_ranks_on_node() < world;
}

/* The train (and apply) plan of p's graph for `rank` of `mesh` under `rules`. */
static int training_plans(const mtf_program *p, const mtf_config *cfg, const mtf_shape *mesh,
                          const mtf_layout_rules *rules, int rank, mtf_plan **train, mtf_plan **apply, mtf_error *err) {
  const mtf_graph *g = p->graph;
  int N = p->microbatches;
  /* The MoE layers' metrics are fetched from the train plan: the last microbatch's with microbatches. */
  int n_moe = p->train_model.n_moe, n_fetches = 3 + 3 * n_moe;
  mtf_tensor *fetches = malloc(sizeof(mtf_tensor) * (size_t)n_fetches);
  if (!fetches) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  fetches[0] = p->train_model.loss;
  fetches[1] = p->train_model.token_loss;
  for (int i = 0; i < n_moe; i++) {
    fetches[2 + 3 * i] = p->train_model.moe[i].dropped;
    fetches[3 + 3 * i] = p->train_model.moe[i].max_load;
    fetches[4 + 3 * i] = p->train_model.moe[i].aux_loss;
  }
  fetches[n_fetches - 1] = p->grad_norm;
  mtf_plan_options options = {.allreduce_bucket_bytes = mtf_run_overlaps_gradients(cfg)
                                                            ? (int64_t)(cfg->train.allreduce_bucket_mb * 1048576.0)
                                                            : 0,
                              .bucket_wire_dtype = cfg->grad_reduce == MTF_NUMBERS_BF16 ? MTF_BF16 : MTF_F32,
                              .bf16_storage = 1, /* every backend reads and writes bf16-stored activations */
                              .bf16_weight_copies = runs_step_by_step(cfg),
                              .arena_alignment = mtf_run_arena_alignment(cfg),
                              .fuse_optimizer = runs_step_by_step(cfg),
                              .fuse_grad_norm = host_fusions(cfg),
                              .xent_grad_from_loss = host_fusions(cfg),
                              .fuse_scatter_add = host_fusions(cfg),
                              .fuse_product_add = host_fusions(cfg)};
  int rc;
  if (N == 1) {
    rc = mtf_plan_create_with_options(g, mesh, rules, rank, n_fetches, fetches, &options, train, err);
    free(fetches);
    return rc;
  }
  rc = mtf_plan_create_with_assigns(g, mesh, rules, rank, n_fetches - 1, fetches, p->first_accumulate,
                                    p->first_update - p->first_accumulate, &options, train, err);
  free(fetches);
  mtf_plan_options apply_options = {.arena_alignment = options.arena_alignment, .fuse_optimizer = options.fuse_optimizer,
                                    .fuse_grad_norm = options.fuse_grad_norm};
  if (rc == MTF_OK)
    rc = mtf_plan_create_with_assigns(g, mesh, rules, rank, 1, &p->grad_norm, p->first_update,
                                      mtf_graph_num_assigns(g) - p->first_update, &apply_options, apply, err);
  return rc;
}

/* The evaluation (and dropless) plan of p's graph for `rank` of `mesh` under `rules`. */
static int evaluation_plans(const mtf_program *p, const mtf_config *cfg, const mtf_shape *mesh,
                            const mtf_layout_rules *rules, int rank, mtf_plan **eval, mtf_plan **dropless,
                            mtf_error *err) {
  mtf_plan_options options = {.bf16_storage = 1, .arena_alignment = mtf_run_arena_alignment(cfg)};
  MTF_CHECK(mtf_plan_create_with_assigns(p->graph, mesh, rules, rank, 1, &p->eval_model.token_loss, 0, 0, &options,
                                         eval, err));
  if (!dropless) return MTF_OK;
  return mtf_plan_create_with_assigns(p->graph, mesh, rules, rank, 1, &p->dropless_model.token_loss, 0, 0, &options,
                                      dropless, err);
}

int mtf_program_plans_for(const mtf_program *p, const mtf_config *cfg, const mtf_shape *mesh,
                          const mtf_layout_rules *rules, int rank, mtf_program_plans *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  int rc = training_plans(p, cfg, mesh, rules, rank, &out->train, &out->apply, err);
  if (rc == MTF_OK) rc = evaluation_plans(p, cfg, mesh, rules, rank, &out->eval, p->dropless_plan ? &out->dropless : NULL, err);
  if (rc != MTF_OK) mtf_program_plans_free(out);
  return rc;
}

void mtf_program_plans_free(mtf_program_plans *plans) {
  mtf_plan_destroy(plans->train);
  mtf_plan_destroy(plans->apply);
  mtf_plan_destroy(plans->eval);
  mtf_plan_destroy(plans->dropless);
  memset(plans, 0, sizeof *plans);
}

int mtf_program_build(const mtf_config *cfg, int rank, mtf_program *p, mtf_error *err) {
  memset(p, 0, sizeof *p);
  p->microbatches = (int)cfg->train.microbatches;
  p->accumulate = MTF_NO_TENSOR;
  if (p->microbatches < 1 || cfg->train.batch % p->microbatches != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "train.microbatches (%lld) does not divide train.batch (%lld)",
                         (long long)cfg->train.microbatches, (long long)cfg->train.batch);
  int64_t rows = cfg->train.batch / p->microbatches;
  p->graph = mtf_graph_create((uint64_t)cfg->train.seed);
  if (!p->graph) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  int rc = build_training(cfg, p, rows, err);
  if (rc == MTF_OK) rc = training_plans(p, cfg, &cfg->mesh_shape, &cfg->layout, rank, &p->train_plan, &p->apply_plan, err);
  mtf_model_config eval_model = cfg->model, dropless = cfg->model;
  eval_model.moe.capacity_factor = cfg->model.moe.eval_capacity_factor;
  dropless.moe.dropless = 1;
  if (rc == MTF_OK) rc = mtf_transformer_build(p->graph, &eval_model, rows, 0.0f, &p->eval_model, err);
  /* Evaluation also fetches the counted loss's sum and count (packed sequences, model/segments.h; the
   * encoder-decoder's answer tokens) and the encoder-decoder's exact-match count. */
  mtf_tensor eval_fetches[4] = {p->eval_model.token_loss};
  int n_eval_fetches = 1;
  if (p->eval_model.loss_count != MTF_NO_TENSOR) {
    eval_fetches[n_eval_fetches++] = p->eval_model.loss_sum;
    eval_fetches[n_eval_fetches++] = p->eval_model.loss_count;
  }
  if (p->eval_model.exact_rows != MTF_NO_TENSOR) eval_fetches[n_eval_fetches++] = p->eval_model.exact_rows;
  mtf_plan_options eval_options = {.bf16_storage = 1, .arena_alignment = mtf_run_arena_alignment(cfg)};
  if (rc == MTF_OK)
    rc = mtf_plan_create_with_assigns(p->graph, &cfg->mesh_shape, &cfg->layout, rank, n_eval_fetches, eval_fetches, 0,
                                      0, &eval_options, &p->eval_plan, err);
  if (rc == MTF_OK && eval_model.moe.experts > 0 && mtf_moe_capacity(&eval_model) < mtf_moe_capacity(&dropless)) {
    rc = mtf_transformer_build(p->graph, &dropless, rows, 0.0f, &p->dropless_model, err);
    if (rc == MTF_OK)
      rc = mtf_plan_create_with_assigns(p->graph, &cfg->mesh_shape, &cfg->layout, rank, 1, &p->dropless_model.token_loss,
                                        0, 0, &eval_options, &p->dropless_plan, err);
  }
  /* A microbatch too small for the mesh axis that splits the batch is refused by the layout: say why. */
  if (rc != MTF_OK && p->microbatches > 1)
    mtf_error_prefix(err, "train.microbatches %d (%lld sequences per microbatch)", p->microbatches, (long long)rows);
  if (rc != MTF_OK) mtf_program_free(p);
  return rc;
}

void mtf_program_free(mtf_program *p) {
  mtf_plan_destroy(p->train_plan);
  mtf_plan_destroy(p->apply_plan);
  mtf_plan_destroy(p->eval_plan);
  mtf_plan_destroy(p->dropless_plan);
  mtf_transformer_free(&p->train_model);
  mtf_transformer_free(&p->eval_model);
  mtf_transformer_free(&p->dropless_model);
  free(p->accumulators);
  mtf_graph_destroy(p->graph);
  memset(p, 0, sizeof *p);
}

const mtf_plan *mtf_program_state_plan(const mtf_program *p) { return p->apply_plan ? p->apply_plan : p->train_plan; }

static int64_t slice_bytes(const mtf_plan *plan, mtf_tensor t) {
  return plan && t != MTF_NO_TENSOR ? mtf_plan_slice_elements(plan, t) * (int64_t)sizeof(float) : 0;
}

static int64_t arena(const mtf_plan *plan) { return plan ? mtf_plan_get_stats(plan)->peak_bytes : 0; }
static int64_t allreduce_block(const mtf_plan *plan) {
  return plan ? mtf_plan_get_stats(plan)->largest_allreduce_block : 0;
}

/* What a rank holds besides tensors once it has trained a step: the mapped code and libraries (about 20 MiB),
 * the heap of graph and plans, MPI's buffers and OpenBLAS's packing buffers. Measured on the project's
 * machine as 60-85 MiB per rank for models from the test model to GPT-2 small (docs/ARCHITECTURE.md,
 * "Memory"); an estimate of the runtime, not a property of the plan. */
#define RUNTIME_BYTES ((int64_t)80 << 20)

void mtf_program_memory_of(const mtf_program *p, const mtf_config *cfg, mtf_program_memory *m) {
  memset(m, 0, sizeof *m);
  const mtf_graph *g = p->graph;
  const mtf_plan *state = mtf_program_state_plan(p);
  int64_t largest = 0;
  for (int i = 0; i < mtf_graph_num_variables(g); i++) {
    mtf_tensor var = mtf_graph_variable(g, i);
    int64_t bytes = slice_bytes(state, var);
    int is_param = 0;
    for (int k = 0; k < p->train_model.n_params; k++) is_param |= p->train_model.params[k] == var;
    if (mtf_variable_is_transient(g, var)) m->accumulators += bytes;
    else *(is_param ? &m->parameters : &m->optimizer_state) += bytes;
    if (!mtf_variable_is_transient(g, var) && bytes > largest) largest = bytes;
  }
  m->train_arena = arena(p->train_plan);
  m->apply_arena = arena(p->apply_plan);
  m->eval_arena = arena(p->eval_plan) + arena(p->dropless_plan);
  /* Each session stores the inputs its plan reads (int32 and float are both 4 bytes). */
  const mtf_tensor train_inputs[] = {p->train_model.tokens, p->train_model.targets, p->learning_rate, p->step,
                                     p->accumulate, p->train_model.encoder_tokens, p->train_model.loss_weights};
  for (size_t i = 0; i < sizeof train_inputs / sizeof train_inputs[0]; i++)
    m->inputs += slice_bytes(p->train_plan, train_inputs[i]) + slice_bytes(p->apply_plan, train_inputs[i]);
  m->inputs += slice_bytes(p->eval_plan, p->eval_model.tokens) + slice_bytes(p->eval_plan, p->eval_model.targets) +
               slice_bytes(p->eval_plan, p->eval_model.encoder_tokens) +
               slice_bytes(p->eval_plan, p->eval_model.loss_weights);
  /* Packed sequences: three more int32 inputs of the tokens' shape (data.pack, model/segments.h). */
  const mtf_tensor segment_inputs[][3] = {
      {p->train_model.segments, p->train_model.target_segments, p->train_model.segment_positions},
      {p->eval_model.segments, p->eval_model.target_segments, p->eval_model.segment_positions}};
  for (int i = 0; i < 3 && p->train_model.segments != MTF_NO_TENSOR; i++)
    m->inputs += slice_bytes(p->train_plan, segment_inputs[0][i]) + slice_bytes(p->eval_plan, segment_inputs[1][i]);
  m->inputs += slice_bytes(p->dropless_plan, p->dropless_model.tokens) +
               slice_bytes(p->dropless_plan, p->dropless_model.targets);
  /* The loop's rows (raw, inputs, targets) and the loader's prefetch slots: this rank's share of a whole
   * batch each, T + 1 tokens a row. */
  int64_t batch_rows = slice_bytes(p->train_plan, p->train_model.tokens) / (int64_t)sizeof(float) /
                       cfg->model.length * p->microbatches;
  int64_t row_bytes = (cfg->model.length + 1) * (int64_t)sizeof(int32_t);
  m->host = batch_rows * row_bytes * (3 + (cfg->train.prefetch > 0 ? cfg->train.prefetch : 1));
  /* An encoder-decoder's rows are 4 T values (encoder input, decoder input, targets, weights), split into
   * four arrays of T. */
  if (p->train_model.encoder_tokens != MTF_NO_TENSOR)
    m->host = batch_rows * 4 * cfg->model.length * (int64_t)sizeof(int32_t) *
              (2 + (cfg->train.prefetch > 0 ? cfg->train.prefetch : 1));
  m->runtime = RUNTIME_BYTES;
  m->allreduce_scratch = allreduce_block(p->train_plan);
  if (allreduce_block(p->apply_plan) > m->allreduce_scratch) m->allreduce_scratch = allreduce_block(p->apply_plan);
  if (cfg->data_eval[0] && allreduce_block(p->eval_plan) > m->allreduce_scratch)
    m->allreduce_scratch = allreduce_block(p->eval_plan);
  if (cfg->train.checkpoint_every > 0) m->staging = largest;
  m->total = m->parameters + m->optimizer_state + m->accumulators + m->train_arena + m->apply_arena + m->inputs +
             m->host + m->runtime + (cfg->data_eval[0] ? m->eval_arena : 0) +
             (m->staging > m->allreduce_scratch ? m->staging : m->allreduce_scratch);
}
