#include "model_block.h"

#include <stdio.h>

static mtf_shape S(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "model", &s, NULL);
  return s;
}

static mtf_tensor var(model_block *m, const char *name, const char *shape, mtf_init init, float scale) {
  mtf_shape s = S(shape);
  mtf_tensor t = mtf_variable(m->graph, name, &s, init, scale);
  m->vars[m->n_vars++] = t;
  return t;
}

static mtf_tensor attention(model_block *m, int layer, mtf_tensor x, float dropout_rate) {
  mtf_graph *g = m->graph;
  char name[64];
  snprintf(name, sizeof name, "layer_%03d/attn/scale", layer);
  mtf_tensor h = mtf_rms_norm(g, x, "d_model", var(m, name, "d_model:8", MTF_INIT_ONES, 1.0f), 1e-6f);
  mtf_tensor w[3];
  const char *names[3] = {"wq", "wk", "wv"};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "layer_%03d/attn/%s", layer, names[i]);
    w[i] = var(m, name, "d_model:8,heads:4,d_kv:4", MTF_INIT_NORMAL, 0.35f);
  }
  mtf_shape qs = S("batch:4,length:4,heads:4,d_kv:4");
  mtf_tensor q = mtf_einsum2(g, h, w[0], &qs);
  mtf_tensor k = mtf_rename(g, mtf_einsum2(g, h, w[1], &qs), "length", "memory_length");
  mtf_tensor v = mtf_rename(g, mtf_einsum2(g, h, w[2], &qs), "length", "memory_length");
  snprintf(name, sizeof name, "layer_%03d/attn/k", layer);
  mtf_set_name(g, k, name);
  snprintf(name, sizeof name, "layer_%03d/attn/v", layer);
  mtf_set_name(g, v, name);
  mtf_shape ls = S("batch:4,heads:4,length:4,memory_length:4");
  mtf_tensor logits = mtf_scalar_multiply(g, mtf_einsum2(g, q, k, &ls), 0.5f);
  logits = mtf_causal_mask(g, logits, "length", "memory_length");
  mtf_tensor weights = mtf_dropout(g, mtf_softmax(g, logits, "memory_length"), dropout_rate, 100 + (uint64_t)layer);
  mtf_tensor o = mtf_einsum2(g, weights, v, &qs);
  mtf_shape out = S("batch:4,length:4,d_model:8");
  if (layer == 0) {
    snprintf(name, sizeof name, "layer_%03d/attn/wo", layer);
    return mtf_add(g, x, mtf_einsum2(g, o, var(m, name, "heads:4,d_kv:4,d_model:8", MTF_INIT_NORMAL, 0.25f), &out));
  }
  /* Layer 1 merges heads and d_kv into one dimension first, to exercise a real reshape. */
  mtf_shape old_dims = S("heads:4,d_kv:4"), merged = S("hd:16");
  mtf_tensor flat = mtf_replace_dimensions(g, o, &old_dims, &merged);
  snprintf(name, sizeof name, "layer_%03d/attn/wo", layer);
  return mtf_add(g, x, mtf_einsum2(g, flat, var(m, name, "hd:16,d_model:8", MTF_INIT_NORMAL, 0.25f), &out));
}

static mtf_tensor feed_forward(model_block *m, int layer, mtf_tensor x) {
  mtf_graph *g = m->graph;
  char name[64];
  snprintf(name, sizeof name, "layer_%03d/mlp/ln_scale", layer);
  mtf_tensor scale = var(m, name, "d_model:8", MTF_INIT_ONES, 1.0f);
  snprintf(name, sizeof name, "layer_%03d/mlp/ln_bias", layer);
  mtf_tensor bias = var(m, name, "d_model:8", MTF_INIT_NORMAL, 0.1f);
  mtf_tensor h = mtf_layer_norm(g, x, "d_model", scale, bias, 1e-5f);
  mtf_shape fs = S("batch:4,length:4,d_ff:8"), out = S("batch:4,length:4,d_model:8");
  snprintf(name, sizeof name, "layer_%03d/mlp/wi", layer);
  mtf_tensor pre = mtf_einsum2(g, h, var(m, name, "d_model:8,d_ff:8", MTF_INIT_NORMAL, 0.35f), &fs);
  mtf_tensor f;
  if (layer == 0) {
    f = mtf_gelu(g, pre);
  } else { /* a gated unit: relu * sigmoid, plus a tanh-squashed and exp/sqrt-scaled branch */
    snprintf(name, sizeof name, "layer_%03d/mlp/wg", layer);
    mtf_tensor gate = mtf_einsum2(g, h, var(m, name, "d_model:8,d_ff:8", MTF_INIT_NORMAL, 0.35f), &fs);
    f = mtf_multiply(g, mtf_relu(g, pre), mtf_sigmoid(g, gate));
    mtf_tensor positive = mtf_sqrt(g, mtf_scalar_add(g, mtf_exp(g, mtf_tanh(g, gate)), 1.0f));
    f = mtf_add(g, f, mtf_divide(g, mtf_square(g, f), positive));
  }
  snprintf(name, sizeof name, "layer_%03d/mlp/wo", layer);
  return mtf_add(g, x, mtf_einsum2(g, f, var(m, name, "d_ff:8,d_model:8", MTF_INIT_NORMAL, 0.35f), &out));
}

int model_block_build(model_block *m, float dropout_rate, mtf_error *err) {
  mtf_graph *g = mtf_graph_create(42);
  m->graph = g;
  m->n_vars = 0;
  mtf_shape tokens = S("batch:4,length:4");
  m->ids = mtf_input(g, "ids", &tokens);
  m->labels = mtf_input(g, "labels", &tokens);
  mtf_tensor wte = var(m, "embed/wte", "vocab:16,d_model:8", MTF_INIT_NORMAL, 0.5f);
  mtf_tensor wpe = var(m, "embed/wpe", "length:4,d_model:8", MTF_INIT_UNIFORM, 0.3f);
  mtf_tensor x = mtf_add(g, mtf_gather(g, wte, m->ids, "vocab"), wpe);
  for (int layer = 0; layer < 2; layer++) x = feed_forward(m, layer, attention(m, layer, x, dropout_rate));
  mtf_tensor final_scale = var(m, "final/scale", "d_model:8", MTF_INIT_ONES, 1.0f);
  mtf_tensor h = mtf_rms_norm(g, x, "d_model", final_scale, 1e-6f);
  mtf_shape ls = S("batch:4,length:4,vocab:16"), scalar = {0};
  /* Tied embedding; the max is subtracted under stop_gradient as a numerically neutral shift. */
  mtf_tensor logits = mtf_scalar_multiply(g, mtf_einsum2(g, h, wte, &ls), 0.35355339f);
  mtf_tensor shift = mtf_stop_gradient(g, mtf_reduce_max_dim(g, logits, "vocab"));
  m->logits = mtf_set_name(g, mtf_subtract(g, logits, shift), "logits");
  mtf_tensor per_token = mtf_softmax_cross_entropy(g, m->logits, m->labels, "vocab", 1e-3f);
  mtf_tensor count = mtf_constant(g, &scalar, 16.0f);
  m->loss = mtf_set_name(g, mtf_divide(g, mtf_reduce_sum(g, per_token, &scalar), count), "loss");
  mtf_gradients(g, m->loss, m->n_vars, m->vars, m->grads);
  return mtf_graph_status(g, err);
}

void model_block_inputs(const model_block *m, float *ids, float *labels) {
  (void)m;
  for (int b = 0; b < 4; b++)
    for (int l = 0; l < 4; l++) {
      ids[b * 4 + l] = (float)((b * 7 + l * 3) % 16);
      labels[b * 4 + l] = (float)((b * 5 + l * 11 + 1) % 16);
    }
}
