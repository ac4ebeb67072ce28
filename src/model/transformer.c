#include "model/transformer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
  mtf_graph *g;
  const mtf_model_config *m;
  mtf_transformer *t;
  int cap;
  float dropout;
  uint64_t dropout_key;
} builder;

static mtf_shape shape_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static mtf_shape shape_of(const char *fmt, ...) {
  char text[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  mtf_shape s;
  memset(&s, 0, sizeof s);
  mtf_shape_parse(text, "model shape", &s, NULL);
  return s;
}

static mtf_tensor param(builder *b, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  if (b->t->n_params == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 64;
    b->t->params = realloc(b->t->params, sizeof(mtf_tensor) * (size_t)b->cap);
  }
  /* A second pass (evaluation without dropout) reuses the variables of the first. */
  mtf_tensor v = mtf_find_variable(b->g, name);
  if (v == MTF_NO_TENSOR) v = mtf_variable(b->g, name, shape, init, scale);
  b->t->params[b->t->n_params++] = v;
  b->t->param_count += mtf_shape_num_elements(shape);
  return v;
}

static mtf_tensor norm(builder *b, mtf_tensor x, const char *prefix) {
  char name[96];
  mtf_shape d = shape_of("d_model:%lld", (long long)b->m->d_model);
  snprintf(name, sizeof name, "%s/norm_scale", prefix);
  mtf_tensor scale = param(b, name, &d, MTF_INIT_ONES, 1.0f);
  if (strcmp(b->m->norm, "layer") == 0) {
    snprintf(name, sizeof name, "%s/norm_bias", prefix);
    return mtf_layer_norm(b->g, x, "d_model", scale, param(b, name, &d, MTF_INIT_ZEROS, 0.0f), 1e-6f);
  }
  return mtf_rms_norm(b->g, x, "d_model", scale, 1e-6f);
}

static mtf_tensor dropout(builder *b, mtf_tensor x) { return mtf_dropout(b->g, x, b->dropout, b->dropout_key++); }

static mtf_tensor attention(builder *b, mtf_tensor x, int layer, const mtf_shape *activations) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  char prefix[64], name[96];
  snprintf(prefix, sizeof prefix, "layer_%03d/attn", layer);
  mtf_tensor h = norm(b, x, prefix);
  mtf_shape w_shape = shape_of("d_model:%lld,heads:%lld,d_kv:%lld", (long long)m->d_model, (long long)m->heads,
                               (long long)m->d_kv);
  mtf_shape o_shape = shape_of("heads:%lld,d_kv:%lld,d_model:%lld", (long long)m->heads, (long long)m->d_kv,
                               (long long)m->d_model);
  float in_scale = 1.0f / sqrtf((float)m->d_model);
  snprintf(name, sizeof name, "%s/wq", prefix);
  mtf_tensor wq = param(b, name, &w_shape, MTF_INIT_NORMAL, in_scale / sqrtf((float)m->d_kv));
  snprintf(name, sizeof name, "%s/wk", prefix);
  mtf_tensor wk = param(b, name, &w_shape, MTF_INIT_NORMAL, in_scale);
  snprintf(name, sizeof name, "%s/wv", prefix);
  mtf_tensor wv = param(b, name, &w_shape, MTF_INIT_NORMAL, in_scale);
  snprintf(name, sizeof name, "%s/wo", prefix);
  mtf_tensor wo = param(b, name, &o_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)(m->heads * m->d_kv)));

  mtf_shape qkv = shape_of("batch:%lld,length:%lld,heads:%lld,d_kv:%lld", (long long)activations->dims[0].size,
                           (long long)m->length, (long long)m->heads, (long long)m->d_kv);
  mtf_tensor q = mtf_einsum2(g, h, wq, &qkv);
  mtf_tensor k = mtf_rename(g, mtf_einsum2(g, h, wk, &qkv), "length", "memory_length");
  mtf_tensor v = mtf_rename(g, mtf_einsum2(g, h, wv, &qkv), "length", "memory_length");
  mtf_tensor o;
  if (m->fused_attention) {
    /* The same function, dropout mask included (the same key), without the [batch, heads, length,
     * memory_length] tensors; the scores' scale is in wq's initialisation. */
    o = mtf_causal_attention(g, q, k, v, "length", "memory_length", "d_kv", 1.0f, b->dropout, b->dropout_key++);
  } else {
    mtf_shape logits_shape = shape_of("batch:%lld,heads:%lld,length:%lld,memory_length:%lld",
                                      (long long)activations->dims[0].size, (long long)m->heads, (long long)m->length,
                                      (long long)m->length);
    mtf_tensor logits = mtf_causal_mask(g, mtf_einsum2(g, q, k, &logits_shape), "length", "memory_length");
    mtf_tensor weights = dropout(b, mtf_softmax(g, logits, "memory_length"));
    o = mtf_einsum2(g, weights, v, &qkv);
  }
  return mtf_add(g, x, dropout(b, mtf_einsum2(g, o, wo, activations)));
}

static mtf_tensor moe_param(void *ctx, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  return param(ctx, name, shape, init, scale);
}

static mtf_tensor feed_forward(builder *b, mtf_tensor x, int layer, const mtf_shape *activations) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  char prefix[64], name[96];
  if (mtf_moe_is_layer(m, layer)) {
    snprintf(prefix, sizeof prefix, "layer_%03d/moe", layer);
    mtf_moe_layer moe = mtf_moe_feed_forward(g, m, norm(b, x, prefix), layer, moe_param, b);
    b->t->moe[b->t->n_moe++] = moe;
    return mtf_add(g, x, dropout(b, moe.output));
  }
  snprintf(prefix, sizeof prefix, "layer_%03d/mlp", layer);
  mtf_tensor h = norm(b, x, prefix);
  mtf_shape wi_shape = shape_of("d_model:%lld,d_ff:%lld", (long long)m->d_model, (long long)m->d_ff);
  mtf_shape wo_shape = shape_of("d_ff:%lld,d_model:%lld", (long long)m->d_ff, (long long)m->d_model);
  float in_scale = 1.0f / sqrtf((float)m->d_model);
  snprintf(name, sizeof name, "%s/wo", prefix);
  mtf_tensor wo = param(b, name, &wo_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_ff));
  mtf_shape hidden = *activations;
  hidden.dims[2] = mtf_dim_make("d_ff", m->d_ff);
  mtf_tensor act;
  if (mtf_activation_is_gated(m->activation)) {
    /* Shazeer's GLU variants (T5 v1.1): act(h wi_0) * (h wi_1), act = swish (x sigmoid(x)) or gelu. */
    snprintf(name, sizeof name, "%s/wi_0", prefix);
    mtf_tensor wi_0 = param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    snprintf(name, sizeof name, "%s/wi_1", prefix);
    mtf_tensor wi_1 = param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    mtf_tensor gate = mtf_einsum2(g, h, wi_0, &hidden), linear = mtf_einsum2(g, h, wi_1, &hidden);
    gate = strcmp(m->activation, "swiglu") == 0 ? mtf_swish(g, gate) : mtf_gelu(g, gate);
    act = mtf_multiply(g, gate, linear);
  } else {
    snprintf(name, sizeof name, "%s/wi", prefix);
    mtf_tensor wi = param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    mtf_tensor pre = mtf_einsum2(g, h, wi, &hidden);
    act = strcmp(m->activation, "relu") == 0 ? mtf_relu(g, pre) : mtf_gelu(g, pre);
  }
  return mtf_add(g, x, dropout(b, mtf_einsum2(g, dropout(b, act), wo, activations)));
}

int mtf_transformer_build(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                          mtf_transformer *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  builder b = {.g = g, .m = m, .t = out, .dropout = dropout_rate, .dropout_key = 1000};
  mtf_shape tokens = shape_of("batch:%lld,length:%lld", (long long)batch, (long long)m->length);
  mtf_shape activations = shape_of("batch:%lld,length:%lld,d_model:%lld", (long long)batch, (long long)m->length,
                                   (long long)m->d_model);
  mtf_shape embed = shape_of("vocab:%lld,d_model:%lld", (long long)m->vocab, (long long)m->d_model);
  mtf_shape positions = shape_of("length:%lld,d_model:%lld", (long long)m->length, (long long)m->d_model);
  if (mtf_moe_layers(m) > 0 && (batch * m->length) % mtf_moe_group_size(m) != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "model.moe.group_size (%lld) does not divide the %lld x %lld tokens the "
                         "model is built for: pick a divisor of %lld", (long long)mtf_moe_group_size(m),
                         (long long)batch, (long long)m->length, (long long)(batch * m->length));
  out->moe = calloc((size_t)mtf_moe_layers(m) + 1, sizeof *out->moe);
  if (!out->moe) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  out->tokens = mtf_input_int(g, "tokens", &tokens);
  out->targets = mtf_input_int(g, "targets", &tokens);
  mtf_tensor wte = param(&b, "embed/wte", &embed, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor wpe = param(&b, "embed/wpe", &positions, MTF_INIT_NORMAL, 0.1f);
  mtf_tensor x = dropout(&b, mtf_add(g, mtf_gather(g, wte, out->tokens, "vocab"), wpe));
  /* Each layer is a recompute block: with train.recompute: block, its activations are computed again from
   * its input x in the backward pass (mtf_gradients_recompute); otherwise the marks change nothing. */
  for (int layer = 0; layer < m->layers; layer++) {
    mtf_recompute_begin(g);
    x = feed_forward(&b, attention(&b, x, layer, &activations), layer, &activations);
    mtf_recompute_end(g);
  }
  mtf_tensor h = norm(&b, x, "final");
  mtf_shape logits_shape = shape_of("batch:%lld,length:%lld,vocab:%lld", (long long)batch, (long long)m->length,
                                    (long long)m->vocab);
  if (m->tie_embeddings) {
    out->logits = mtf_scalar_multiply(g, mtf_einsum2(g, h, wte, &logits_shape), 1.0f / sqrtf((float)m->d_model));
  } else {
    mtf_shape unembed = shape_of("d_model:%lld,vocab:%lld", (long long)m->d_model, (long long)m->vocab);
    mtf_tensor w = param(&b, "unembed/w", &unembed, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_model));
    out->logits = mtf_einsum2(g, h, w, &logits_shape);
  }
  mtf_set_name(g, out->logits, "logits");
  mtf_shape scalar = {0};
  float per_token = 1.0f / (float)(batch * m->length);
  mtf_tensor xent = mtf_softmax_cross_entropy(g, out->logits, out->targets, "vocab", 0.0f);
  out->token_loss = mtf_set_name(g, mtf_scalar_multiply(g, mtf_reduce_sum(g, xent, &scalar), per_token), "token_loss");
  out->loss = out->token_loss;
  if (m->label_smoothing > 0) {
    /* (1-eps) xent + eps * mean over vocab of -log_softmax(logits), one fused op (its own pass over the
     * logits; token_loss stays the plain cross-entropy, outside the gradient). */
    mtf_tensor smoothed = mtf_softmax_cross_entropy_smoothed(g, out->logits, out->targets, "vocab", 0.0f,
                                                             (float)m->label_smoothing);
    out->loss = mtf_set_name(g, mtf_scalar_multiply(g, mtf_reduce_sum(g, smoothed, &scalar), per_token), "loss");
  }
  if (m->z_loss > 0) {
    mtf_tensor lse = mtf_logsumexp(g, out->logits, "vocab");
    mtf_tensor z = mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, lse), &scalar), (float)m->z_loss * per_token);
    out->loss = mtf_set_name(g, mtf_add(g, out->loss, z), "loss");
  }
  for (int i = 0; i < out->n_moe; i++) {
    mtf_tensor aux = mtf_scalar_multiply(g, out->moe[i].aux_loss, (float)m->moe.aux_loss);
    mtf_tensor z = mtf_scalar_multiply(g, out->moe[i].router_z_loss, (float)m->moe.router_z_loss);
    out->loss = mtf_set_name(g, mtf_add(g, out->loss, mtf_add(g, aux, z)), "loss");
  }
  int rc = mtf_graph_status(g, err);
  if (rc) mtf_transformer_free(out);
  return rc;
}

void mtf_transformer_free(mtf_transformer *t) {
  free(t->params);
  t->params = NULL;
  free(t->moe);
  t->moe = NULL;
  t->n_moe = 0;
  t->n_params = 0;
}

int mtf_activation_is_gated(const char *activation) {
  return strcmp(activation, "swiglu") == 0 || strcmp(activation, "geglu") == 0;
}

double mtf_transformer_flops_per_token(const mtf_model_config *m, int64_t param_count) {
  double active = (double)(param_count - mtf_moe_inactive_params(m)); /* an MoE token uses k experts of each layer */
  return 6.0 * active + 12.0 * (double)m->layers * (double)m->length * (double)(m->heads * m->d_kv);
}
