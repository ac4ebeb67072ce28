/* The encoder-decoder of model.architecture: encoder_decoder (see encoder_decoder.h). */
#include "model/encoder_decoder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attention_block.h"
#include "model/position.h"

typedef struct builder {
  mtf_graph *g;
  const mtf_model_config *m;
  mtf_transformer *t;
  int cap;
  int64_t batch;
  float dropout;
  uint64_t dropout_key;
  mtf_shape activations; /* [batch, length, d_model] */
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

int mtf_is_encoder_decoder(const mtf_model_config *m) { return strcmp(m->architecture, "encoder_decoder") == 0; }
int64_t mtf_encoder_layers(const mtf_model_config *m) { return m->encoder_layers > 0 ? m->encoder_layers : m->layers; }
int64_t mtf_decoder_layers(const mtf_model_config *m) { return m->decoder_layers > 0 ? m->decoder_layers : m->layers; }

/* Makes a variable, or finds it when an earlier build of the graph (evaluation) made it. */
static mtf_tensor param(builder *b, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  if (b->t->n_params == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 64;
    b->t->params = realloc(b->t->params, sizeof(mtf_tensor) * (size_t)b->cap);
  }
  mtf_tensor v = mtf_find_variable(b->g, name);
  if (v == MTF_NO_TENSOR) v = mtf_variable(b->g, name, shape, init, scale);
  b->t->params[b->t->n_params++] = v;
  b->t->param_count += mtf_shape_num_elements(shape);
  return v;
}

static mtf_tensor param_fn(void *ctx, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  return param(ctx, name, shape, init, scale);
}

static mtf_tensor dropout(builder *b, mtf_tensor x) { return mtf_dropout(b->g, x, b->dropout, b->dropout_key++); }

/* The decoder-only model's norm (model.norm), under prefix. */
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

/* Norm, an attention block (self or cross), dropout, residual. */
static mtf_tensor attention(builder *b, mtf_tensor x, const char *prefix, const mtf_attention_options *options) {
  mtf_tensor h = norm(b, x, prefix);
  mtf_attention_env env = {.g = b->g, .model = b->m, .param = param_fn, .param_ctx = b, .mode = MTF_MODE_TRAIN,
                           .batch = b->batch, .dropout = b->dropout, .dropout_key = &b->dropout_key,
                           .n_assigns = &b->t->n_assigns, .positions = MTF_NO_TENSOR, .attend = MTF_NO_TENSOR};
  return mtf_add(b->g, x, dropout(b, mtf_attention_block(&env, h, prefix, options)));
}

/* The dense feed-forward layer of the decoder-only model (model.activation, gated or not), with its
 * residual: the same function and variable names under prefix. */
static mtf_tensor feed_forward(builder *b, mtf_tensor x, const char *prefix) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  char name[96];
  mtf_tensor h = norm(b, x, prefix);
  mtf_shape wi_shape = shape_of("d_model:%lld,d_ff:%lld", (long long)m->d_model, (long long)m->d_ff);
  mtf_shape wo_shape = shape_of("d_ff:%lld,d_model:%lld", (long long)m->d_ff, (long long)m->d_model);
  float in_scale = 1.0f / sqrtf((float)m->d_model);
  mtf_shape hidden = b->activations;
  hidden.dims[2] = mtf_dim_make("d_ff", m->d_ff);
  mtf_tensor act;
  if (mtf_activation_is_gated(m->activation)) {
    snprintf(name, sizeof name, "%s/wi_0", prefix);
    mtf_tensor wi_0 = param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    snprintf(name, sizeof name, "%s/wi_1", prefix);
    mtf_tensor wi_1 = param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    mtf_tensor gate = mtf_einsum2(g, h, wi_0, &hidden), linear = mtf_einsum2(g, h, wi_1, &hidden);
    gate = strcmp(m->activation, "swiglu") == 0 ? mtf_swish(g, gate) : mtf_gelu(g, gate);
    act = mtf_multiply(g, gate, linear);
  } else {
    snprintf(name, sizeof name, "%s/wi", prefix);
    mtf_tensor pre = mtf_einsum2(g, h, param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale), &hidden);
    act = strcmp(m->activation, "relu") == 0 ? mtf_relu(g, pre) : mtf_gelu(g, pre);
  }
  snprintf(name, sizeof name, "%s/wo", prefix);
  mtf_tensor wo = param(b, name, &wo_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_ff));
  return mtf_add(g, x, dropout(b, mtf_einsum2(g, dropout(b, act), wo, &b->activations)));
}

/* Token embedding plus, with model.position learned, the stack's positions <stack>/embed/wpe; dropout. */
static mtf_tensor embed(builder *b, mtf_tensor wte, mtf_tensor tokens, const char *stack) {
  char name[96];
  mtf_tensor x = mtf_gather(b->g, wte, tokens, "vocab");
  if (strcmp(b->m->position, "learned") == 0) {
    mtf_shape positions = shape_of("length:%lld,d_model:%lld", (long long)b->m->length, (long long)b->m->d_model);
    snprintf(name, sizeof name, "%s/embed/wpe", stack);
    x = mtf_add(b->g, x, param(b, name, &positions, MTF_INIT_NORMAL, 0.1f));
  }
  return dropout(b, x);
}

/* The self-attention options of a stack: bidirectional (encoder) or causal; with model.position
 * relative_bias, T5's table <stack>/relative_bias [heads, relative_buckets], one per stack shared by its
 * layers, looked up at each (query, memory) pair's memory - query position (model/position.h); with
 * rotary, rotated queries and keys. */
static mtf_attention_options self_attention(builder *b, const char *stack, int bidirectional) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  mtf_attention_options options = mtf_attention_defaults();
  options.bidirectional = bidirectional;
  options.rotary = strcmp(m->position, "rotary") == 0;
  if (strcmp(m->position, "relative_bias") == 0) {
    char name[96];
    snprintf(name, sizeof name, "%s/relative_bias", stack);
    mtf_shape table_shape = shape_of("heads:%lld,relative_buckets:%lld", (long long)m->heads,
                                     (long long)m->relative_num_buckets);
    mtf_tensor table = param(b, name, &table_shape, MTF_INIT_NORMAL, 0.1f);
    mtf_dim memory = mtf_dim_make("memory_length", m->length), query = mtf_dim_make("length", m->length);
    mtf_tensor relative = mtf_subtract(g, mtf_range(g, &memory), mtf_range(g, &query));
    options.bias = mtf_relative_bias(g, table, relative, bidirectional, m->relative_num_buckets,
                                     m->relative_max_distance, m->length - 1);
  }
  return options;
}

static mtf_tensor encoder(builder *b, mtf_tensor wte) {
  mtf_graph *g = b->g;
  mtf_tensor x = embed(b, wte, b->t->encoder_tokens, "encoder");
  mtf_attention_options self = self_attention(b, "encoder", 1);
  char prefix[96];
  for (int64_t layer = 0; layer < mtf_encoder_layers(b->m); layer++) {
    mtf_recompute_begin(g);
    snprintf(prefix, sizeof prefix, "encoder/layer_%03lld/attn", (long long)layer);
    x = attention(b, x, prefix, &self);
    snprintf(prefix, sizeof prefix, "encoder/layer_%03lld/mlp", (long long)layer);
    x = feed_forward(b, x, prefix);
    mtf_recompute_end(g);
  }
  return norm(b, x, "encoder/final");
}

static mtf_tensor decoder(builder *b, mtf_tensor wte, mtf_tensor memory) {
  mtf_graph *g = b->g;
  mtf_tensor x = embed(b, wte, b->t->tokens, "decoder");
  mtf_attention_options self = self_attention(b, "decoder", 0), cross = mtf_attention_defaults();
  cross.bidirectional = 1; /* every answer position sees the whole prompt; no position signal (T5) */
  cross.memory = memory;
  cross.memory_dim = "length";
  char prefix[96];
  for (int64_t layer = 0; layer < mtf_decoder_layers(b->m); layer++) {
    mtf_recompute_begin(g);
    snprintf(prefix, sizeof prefix, "decoder/layer_%03lld/attn", (long long)layer);
    x = attention(b, x, prefix, &self);
    snprintf(prefix, sizeof prefix, "decoder/layer_%03lld/cross_attn", (long long)layer);
    x = attention(b, x, prefix, &cross);
    snprintf(prefix, sizeof prefix, "decoder/layer_%03lld/mlp", (long long)layer);
    x = feed_forward(b, x, prefix);
    mtf_recompute_end(g);
  }
  return norm(b, x, "decoder/final");
}

/* The weighted means of the loss (encoder_decoder.h), and the rows whose answer tokens are all the argmax
 * of their logits (teacher-forced exact match). */
static void losses(builder *b) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  mtf_transformer *t = b->t;
  mtf_shape scalar = {0};
  mtf_tensor weights = mtf_to_float(g, t->loss_weights);
  /* loss_sum and loss_count as packed sequences have them (transformer.h): evaluation divides their sums over
   * all batches. */
  t->loss_count = mtf_set_name(g, mtf_reduce_sum(g, weights, &scalar), "loss_count");
  mtf_tensor count = mtf_maximum(g, t->loss_count, mtf_constant(g, &scalar, 1.0f));
  mtf_tensor xent = mtf_softmax_cross_entropy(g, t->logits, t->targets, "vocab", 0.0f);
  t->loss_sum = mtf_set_name(g, mtf_reduce_sum(g, mtf_multiply(g, xent, weights), &scalar), "loss_sum");
  t->token_loss = mtf_set_name(g, mtf_divide(g, t->loss_sum, count), "token_loss");
  t->loss = t->token_loss;
  if (m->label_smoothing > 0) {
    mtf_tensor smoothed = mtf_softmax_cross_entropy_smoothed(g, t->logits, t->targets, "vocab", 0.0f,
                                                             (float)m->label_smoothing);
    t->loss = mtf_divide(g, mtf_reduce_sum(g, mtf_multiply(g, smoothed, weights), &scalar), count);
  }
  if (m->z_loss > 0) {
    mtf_tensor lse = mtf_logsumexp(g, t->logits, "vocab");
    mtf_tensor z = mtf_divide(g, mtf_reduce_sum(g, mtf_multiply(g, mtf_square(g, lse), weights), &scalar), count);
    t->loss = mtf_add(g, t->loss, mtf_scalar_multiply(g, z, (float)m->z_loss));
  }
  t->loss = mtf_set_name(g, t->loss, "loss");
  /* A row is right when no weighted position's argmax differs from its target. */
  mtf_shape rows = shape_of("batch:%lld", (long long)b->batch);
  mtf_tensor right = mtf_equal(g, mtf_to_float(g, mtf_argmax(g, t->logits, "vocab")), mtf_to_float(g, t->targets));
  mtf_tensor wrong = mtf_reduce_sum(g, mtf_multiply(g, weights, mtf_scalar_add(g, mtf_scalar_multiply(g, right, -1.0f), 1.0f)),
                                    &rows);
  mtf_tensor row_right = mtf_less(g, wrong, mtf_constant(g, &rows, 0.5f));
  t->exact_rows = mtf_set_name(g, mtf_reduce_sum(g, row_right, &scalar), "exact_rows");
}

int mtf_encoder_decoder_build(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                              mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err) {
  if (mode != MTF_MODE_TRAIN)
    return mtf_error_set(err, MTF_ERR_INVALID, "model.architecture is encoder_decoder, and cached decoding (mtf "
                         "generate) is not implemented for it yet: evaluate it with 'mtf eval' (which reports the "
                         "answers' exact match), or generate with a decoder-only model");
  out->first_assign = mtf_graph_num_assigns(g);
  out->moe = calloc(1, sizeof *out->moe);
  if (!out->moe) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  builder b = {.g = g, .m = m, .t = out, .batch = batch, .dropout = dropout_rate, .dropout_key = 1000};
  b.activations = shape_of("batch:%lld,length:%lld,d_model:%lld", (long long)batch, (long long)m->length,
                           (long long)m->d_model);
  mtf_shape tokens = shape_of("batch:%lld,length:%lld", (long long)batch, (long long)m->length);
  out->encoder_tokens = mtf_input_int(g, "encoder_tokens", &tokens);
  out->tokens = mtf_input_int(g, "tokens", &tokens);
  out->targets = mtf_input_int(g, "targets", &tokens);
  out->loss_weights = mtf_input_int(g, "loss_weights", &tokens);
  mtf_shape embed_shape = shape_of("vocab:%lld,d_model:%lld", (long long)m->vocab, (long long)m->d_model);
  mtf_tensor wte = param(&b, "embed/wte", &embed_shape, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor encoder_wte =
      m->shared_embeddings ? wte : param(&b, "encoder/embed/wte", &embed_shape, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor h = decoder(&b, wte, encoder(&b, encoder_wte));
  mtf_shape logits_shape = shape_of("batch:%lld,length:%lld,vocab:%lld", (long long)batch, (long long)m->length,
                                    (long long)m->vocab);
  if (m->tie_embeddings) {
    out->logits = mtf_scalar_multiply(g, mtf_einsum2(g, h, wte, &logits_shape), 1.0f / sqrtf((float)m->d_model));
  } else {
    mtf_shape w_shape = shape_of("d_model:%lld,vocab:%lld", (long long)m->d_model, (long long)m->vocab);
    mtf_tensor w = param(&b, "unembed/w", &w_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_model));
    out->logits = mtf_einsum2(g, h, w, &logits_shape);
  }
  mtf_set_name(g, out->logits, "logits");
  losses(&b);
  int rc = mtf_graph_status(g, err);
  if (rc) mtf_transformer_free(out);
  return rc;
}
