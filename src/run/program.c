#include "run/program.h"

#include <stdlib.h>
#include <string.h>

#include "train/optimizer.h"

static int optimizer_config(const mtf_config *cfg, mtf_optimizer_config *opt, mtf_error *err) {
  mtf_optimizer_kind kind;
  MTF_CHECK(mtf_optimizer_parse_kind(cfg->train.optimizer, &kind, err));
  mtf_optimizer_defaults(kind, opt);
  opt->clip_grad_norm = (float)cfg->train.clip_grad_norm;
  if (kind == MTF_OPT_ADAMW) {
    opt->beta1 = (float)cfg->train.beta1;
    opt->beta2 = (float)cfg->train.beta2;
    opt->weight_decay = (float)cfg->train.weight_decay;
  }
  if (kind == MTF_OPT_SGD) opt->momentum = (float)cfg->train.momentum;
  return mtf_optimizer_validate(opt, err);
}

int mtf_program_build(const mtf_config *cfg, int rank, mtf_program *p, mtf_error *err) {
  memset(p, 0, sizeof *p);
  p->graph = mtf_graph_create((uint64_t)cfg->train.seed);
  if (!p->graph) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  mtf_optimizer_config opt;
  int rc = optimizer_config(cfg, &opt, err);
  if (rc == MTF_OK)
    rc = mtf_transformer_build(p->graph, &cfg->model, cfg->train.batch, (float)cfg->model.dropout, &p->train_model, err);
  if (rc == MTF_OK) {
    mtf_shape scalar = {0};
    p->learning_rate = mtf_input(p->graph, "learning_rate", &scalar);
    p->step = mtf_input(p->graph, "step", &scalar);
    mtf_tensor *grads = malloc(sizeof(mtf_tensor) * (size_t)p->train_model.n_params + 1);
    rc = grads ? mtf_gradients(p->graph, p->train_model.loss, p->train_model.n_params, p->train_model.params, grads)
               : MTF_ERR_NOMEM;
    if (rc == MTF_OK)
      rc = mtf_optimizer_apply(p->graph, &opt, p->train_model.n_params, p->train_model.params, grads, p->learning_rate,
                               p->step, &p->grad_norm, err);
    else
      mtf_graph_status(p->graph, err);
    free(grads);
  }
  if (rc == MTF_OK) rc = mtf_transformer_build(p->graph, &cfg->model, cfg->train.batch, 0.0f, &p->eval_model, err);
  if (rc == MTF_OK) {
    mtf_tensor fetches[3] = {p->train_model.loss, p->train_model.token_loss, p->grad_norm};
    mtf_plan_options options = {.allreduce_bucket_bytes = (int64_t)(cfg->train.allreduce_bucket_mb * 1048576.0)};
    rc = mtf_plan_create_with_options(p->graph, &cfg->mesh_shape, &cfg->layout, rank, 3, fetches, &options,
                                      &p->train_plan, err);
  }
  if (rc == MTF_OK)
    rc = mtf_plan_create_without_assigns(p->graph, &cfg->mesh_shape, &cfg->layout, rank, 1, &p->eval_model.token_loss,
                                         &p->eval_plan, err);
  if (rc != MTF_OK) mtf_program_free(p);
  return rc;
}

void mtf_program_free(mtf_program *p) {
  mtf_plan_destroy(p->train_plan);
  mtf_plan_destroy(p->eval_plan);
  mtf_transformer_free(&p->train_model);
  mtf_transformer_free(&p->eval_model);
  mtf_graph_destroy(p->graph);
  memset(p, 0, sizeof *p);
}

void mtf_program_variable_bytes(const mtf_program *p, int64_t *param_bytes, int64_t *slot_bytes) {
  *param_bytes = *slot_bytes = 0;
  const mtf_graph *g = p->graph;
  for (int i = 0; i < mtf_graph_num_variables(g); i++) {
    mtf_tensor var = mtf_graph_variable(g, i);
    if (!mtf_plan_layout(p->train_plan, var)) continue;
    int64_t bytes = mtf_plan_slice_elements(p->train_plan, var) * (int64_t)sizeof(float);
    int is_param = 0;
    for (int k = 0; k < p->train_model.n_params; k++) is_param |= p->train_model.params[k] == var;
    *(is_param ? param_bytes : slot_bytes) += bytes;
  }
}
