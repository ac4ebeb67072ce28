#include "model/transformer.h"
#include "model/segments.h"

#include "model/attention_block.h"
#include "model/blocks.h"
#include "model/encoder_decoder.h"
#include "model/position.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
  mtf_model_builder base; /* graph, config, parameter list, dropout (model/blocks.h) */
  mtf_transformer_mode mode;
  /* DECODE: each row's position as one-hot [batch, memory_length] and the memory positions it may attend
   * to (<= its position) [memory_length, batch]. */
  mtf_tensor position_hot, attend;
  /* TRAIN with data.pack: the segment inputs, mask and loss weights (model/segments.h). */
  int packed;
  mtf_segment_inputs segments;
  mtf_tensor relative_bias; /* model.position relative_bias: the stack's bias on the logits (else none) */
} builder;

/* Norm, the attention block (model/attention_block.h), dropout, residual. */
static mtf_tensor attention(builder *b, mtf_tensor x, int layer, const mtf_shape *activations) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "layer_%03d/attn", layer);
  mtf_tensor h = mtf_model_norm(&b->base, x, prefix);
  mtf_attention_env env = {.g = b->base.g, .model = b->base.m, .param = mtf_model_param_fn, .param_ctx = &b->base,
                           .mode = b->mode, .batch = activations->dims[0].size, .dropout = b->base.dropout,
                           .dropout_key = &b->base.dropout_key, .n_assigns = &b->base.t->n_assigns,
                           .positions = b->base.t->positions, .attend = b->attend};
  mtf_attention_options options = mtf_attention_defaults();
  options.rotary = b->base.m->position == MTF_POSITION_ROTARY;
  options.bias = b->relative_bias;
  /* Packed sequences: attention stays inside each document (model/segments.h). */
  if (b->packed) {
    options.mask = b->segments.same_document;
    options.segments = b->segments.ids;
  }
  mtf_tensor out = mtf_attention_block(&env, h, prefix, &options);
  return mtf_add(b->base.g, x, b->mode == MTF_MODE_DECODE ? out : mtf_model_dropout(&b->base, out));
}

static mtf_tensor feed_forward(builder *b, mtf_tensor x, int layer, const mtf_shape *activations) {
  const mtf_model_config *m = b->base.m;
  mtf_graph *g = b->base.g;
  char prefix[64];
  if (mtf_moe_is_layer(m, layer)) {
    snprintf(prefix, sizeof prefix, "layer_%03d/moe", layer);
    mtf_tensor h = mtf_model_norm(&b->base, x, prefix);
    mtf_moe_layer moe = mtf_moe_feed_forward(g, m, h, layer, mtf_model_param_fn, &b->base);
    b->base.t->moe[b->base.t->n_moe++] = moe;
    return mtf_add(g, x, mtf_model_dropout(&b->base, moe.output));
  }
  snprintf(prefix, sizeof prefix, "layer_%03d/mlp", layer);
  return mtf_model_feed_forward(&b->base, x, prefix, activations);
}

/* The output layer: tied (the embedding scaled by d_model^-0.5) or unembed/w, into `shape` (h's dims with
 * vocab for d_model). */
static mtf_tensor unembed(builder *b, mtf_tensor h, mtf_tensor wte, const mtf_shape *shape) {
  const mtf_model_config *m = b->base.m;
  if (m->tie_embeddings)
    return mtf_model_tied_logits(&b->base, h, wte, shape);
  mtf_shape w_shape = mtf_model_shape("d_model:%lld,vocab:%lld", (long long)m->d_model, (long long)m->vocab);
  mtf_tensor w = mtf_model_param(&b->base, "unembed/w", &w_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_model));
  return mtf_einsum2(b->base.g, h, w, shape);
}

/* DECODE: the embedded new tokens [batch, length:1, d_model] at their positions, and the builder's
 * position masks. */
static mtf_tensor decode_inputs(builder *b, int64_t batch, mtf_tensor wte, mtf_tensor wpe) {
  const mtf_model_config *m = b->base.m;
  mtf_graph *g = b->base.g;
  mtf_shape tokens = mtf_model_shape("batch:%lld,length:1", (long long)batch);
  mtf_shape rows = mtf_model_shape("batch:%lld", (long long)batch);
  b->base.t->tokens = mtf_input_int(g, "decode_tokens", &tokens);
  b->base.t->positions = mtf_input_int(g, "decode_positions", &rows);
  mtf_dim memory = mtf_dim_make("memory_length", m->length);
  mtf_tensor memory_index = mtf_range(g, &memory);
  b->position_hot = mtf_one_hot(g, b->base.t->positions, &memory);
  mtf_tensor position = mtf_reduce_sum(g, mtf_multiply(g, b->position_hot, memory_index), &rows);
  b->attend = mtf_less_equal(g, memory_index, position);
  mtf_tensor x = mtf_gather(g, wte, b->base.t->tokens, "vocab");
  return wpe == MTF_NO_TENSOR ? x : mtf_add(g, x, mtf_gather(g, wpe, b->base.t->positions, "length"));
}

/* model.position relative_bias: T5 shares one table [heads, relative_buckets] across the layers of a stack
 * (relative_bias/decoder) and adds its lookup at each (query, memory) pair's relative position to every
 * layer's logits: [heads, memory_length, length], or in DECODE [heads, memory_length, batch] at each row's
 * position. */
static mtf_tensor relative_bias(builder *b, const char *stack, int bidirectional) {
  mtf_graph *g = b->base.g;
  char name[96];
  snprintf(name, sizeof name, "relative_bias/%s", stack);
  mtf_dim query = mtf_dim_make("length", b->base.m->length);
  mtf_tensor query_position = b->mode == MTF_MODE_DECODE ? mtf_to_float(g, b->base.t->positions) : mtf_range(g, &query);
  return mtf_model_relative_bias(&b->base, name, query_position, bidirectional);
}

/* scale times the mean of a per-position value [batch, length]: over every position, or with data.pack
 * over the positions the loss counts (model/segments.h). */
static mtf_tensor token_mean(builder *b, mtf_tensor per_position, int64_t batch, float scale) {
  if (b->packed) {
    mtf_tensor mean = mtf_segments_mean(b->base.g, &b->segments, per_position);
    return scale == 1.0f ? mean : mtf_scalar_multiply(b->base.g, mean, scale);
  }
  mtf_shape scalar = {0};
  float per_token = 1.0f / (float)(batch * b->base.m->length);
  return mtf_scalar_multiply(b->base.g, mtf_reduce_sum(b->base.g, per_position, &scalar), scale * per_token);
}

int mtf_transformer_build(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                          mtf_transformer *out, mtf_error *err) {
  return mtf_transformer_build_mode(g, m, batch, dropout_rate, MTF_MODE_TRAIN, out, err);
}

static int build_mode(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                      mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err);

/* backend.precision bf16: the model's products take bfloat16 operands; what the caller adds to the graph
 * afterwards (the optimizer's statistics, gradient norms) stays float32. */
int mtf_transformer_build_mode(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                               mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err) {
  mtf_dtype before = mtf_graph_matmul_dtype(g);
  mtf_graph_set_matmul_dtype(g, m->bf16_matmuls ? MTF_BF16 : MTF_F32);
  int rc = build_mode(g, m, batch, dropout_rate, mode, out, err);
  mtf_graph_set_matmul_dtype(g, before);
  return rc;
}

static int build_mode(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                      mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err) {
  /* A config that did not go through mtf_config_validate (library callers, tests) has kv_heads 0: as many
   * K/V heads as heads, as validation would resolve it. */
  mtf_model_config resolved = *m;
  if (resolved.kv_heads <= 0) resolved.kv_heads = resolved.heads;
  m = &resolved;
  memset(out, 0, sizeof *out);
  out->positions = out->next_logits = out->logits = out->loss = out->token_loss = out->targets = MTF_NO_TENSOR;
  out->segments = out->target_segments = out->segment_positions = out->loss_sum = out->loss_count = MTF_NO_TENSOR;
  out->encoder_tokens = out->loss_weights = out->exact_rows = MTF_NO_TENSOR;
  if (mtf_is_encoder_decoder(m)) return mtf_encoder_decoder_build(g, m, batch, dropout_rate, mode, out, err);
  out->first_assign = mtf_graph_num_assigns(g);
  builder b = {.base = {.g = g, .m = m, .t = out, .dropout = dropout_rate, .dropout_key = 1000}, .mode = mode};
  int64_t length = mode == MTF_MODE_DECODE ? 1 : m->length;
  mtf_shape tokens = mtf_model_shape("batch:%lld,length:%lld", (long long)batch, (long long)m->length);
  mtf_shape activations = mtf_model_shape("batch:%lld,length:%lld,d_model:%lld", (long long)batch, (long long)length,
                                   (long long)m->d_model);
  mtf_shape embed = mtf_model_shape("vocab:%lld,d_model:%lld", (long long)m->vocab, (long long)m->d_model);
  mtf_shape positions = mtf_model_shape("length:%lld,d_model:%lld", (long long)m->length, (long long)m->d_model);
  if (mtf_moe_layers(m) > 0 && (batch * length) % mtf_moe_group_size(m) != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "model.moe.group_size (%lld) does not divide the %lld x %lld tokens the "
                         "model is built for: pick a divisor of %lld", (long long)mtf_moe_group_size(m),
                         (long long)batch, (long long)length, (long long)(batch * length));
  out->moe = calloc((size_t)mtf_moe_layers(m) + 1, sizeof *out->moe);
  if (!out->moe) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  mtf_shape rows = mtf_model_shape("batch:%lld", (long long)batch);
  if (mode == MTF_MODE_TRAIN) {
    out->tokens = mtf_input_int(g, "tokens", &tokens);
    out->targets = mtf_input_int(g, "targets", &tokens);
    b.packed = mtf_segments_enabled(m);
    if (b.packed) {
      b.segments = mtf_segments_build(g, m, batch);
      out->segments = b.segments.segments;
      out->target_segments = b.segments.target_segments;
      out->segment_positions = b.segments.positions;
    }
  } else if (mode == MTF_MODE_PREFILL) {
    out->tokens = mtf_input_int(g, "prefill_tokens", &tokens);
    out->positions = mtf_input_int(g, "prefill_last", &rows);
  }
  mtf_tensor wte = mtf_model_param(&b.base, "embed/wte", &embed, MTF_INIT_NORMAL, 1.0f);
  /* The learned position embedding exists only for model.position learned (model/position.h: the others). */
  int learned = m->position == MTF_POSITION_LEARNED;
  mtf_tensor wpe = learned ? mtf_model_param(&b.base, "embed/wpe", &positions, MTF_INIT_NORMAL, 0.1f) : MTF_NO_TENSOR;
  mtf_tensor x;
  if (mode == MTF_MODE_DECODE) {
    x = decode_inputs(&b, batch, wte, wpe);
  } else {
    x = mtf_gather(g, wte, out->tokens, "vocab");
    /* Packed: each token's position in its document picks its row of wpe (renamed, so the lookup's dim is
     * not the ids' own `length`). Relative bias and rotary see only differences of positions, which inside
     * a document (all attention reaches, under the segment mask) are those of the per-document positions. */
    if (learned && b.packed)
      wpe = mtf_gather(g, mtf_rename(g, wpe, "length", "position"), out->segment_positions, "position");
    x = mtf_model_dropout(&b.base, learned ? mtf_add(g, x, wpe) : x);
  }
  b.relative_bias = m->position == MTF_POSITION_RELATIVE_BIAS ? relative_bias(&b, "decoder", 0) : MTF_NO_TENSOR;
  /* Each layer is a recompute block: with train.recompute: block, its activations are computed again from
   * its input x in the backward pass (mtf_gradients_recompute); otherwise the marks change nothing. */
  for (int layer = 0; layer < m->layers; layer++) {
    mtf_recompute_begin(g);
    x = feed_forward(&b, attention(&b, x, layer, &activations), layer, &activations);
    mtf_recompute_end(g);
  }
  mtf_tensor h = mtf_model_norm(&b.base, x, "final");
  if (mode != MTF_MODE_TRAIN) {
    /* The next token's logits only: PREFILL picks each row's last prompt position by a one-hot sum (exact),
     * DECODE drops the length:1 dimension. */
    mtf_shape last_shape = mtf_model_shape("batch:%lld,d_model:%lld", (long long)batch, (long long)m->d_model);
    mtf_shape next_shape = mtf_model_shape("batch:%lld,vocab:%lld", (long long)batch, (long long)m->vocab);
    mtf_dim length_dim = mtf_dim_make("length", m->length);
    mtf_tensor last = mode == MTF_MODE_PREFILL
                          ? mtf_einsum2(g, h, mtf_one_hot(g, out->positions, &length_dim), &last_shape)
                          : mtf_einsum(g, 1, &h, &last_shape);
    out->next_logits = mtf_set_name(g, unembed(&b, last, wte, &next_shape), "next_logits");
    int rc = mtf_graph_status(g, err);
    if (rc) mtf_transformer_free(out);
    return rc;
  }
  mtf_shape logits_shape = mtf_model_shape("batch:%lld,length:%lld,vocab:%lld", (long long)batch, (long long)m->length,
                                    (long long)m->vocab);
  out->logits = unembed(&b, h, wte, &logits_shape);
  mtf_set_name(g, out->logits, "logits");
  mtf_tensor xent = mtf_softmax_cross_entropy(g, out->logits, out->targets, "vocab", 0.0f);
  out->token_loss = mtf_set_name(g, token_mean(&b, xent, batch, 1.0f), "token_loss");
  if (b.packed) {
    /* Evaluation sums these over its batches: the mean over every counted token, however rows are cut. */
    out->loss_sum = mtf_segments_sum(g, &b.segments, xent);
    out->loss_count = b.segments.count;
  }
  out->loss = out->token_loss;
  if (m->label_smoothing > 0) {
    /* (1-eps) xent + eps * mean over vocab of -log_softmax(logits), one fused op (its own pass over the
     * logits; token_loss stays the plain cross-entropy, outside the gradient). */
    mtf_tensor smoothed = mtf_softmax_cross_entropy_smoothed(g, out->logits, out->targets, "vocab", 0.0f,
                                                             (float)m->label_smoothing);
    out->loss = mtf_set_name(g, token_mean(&b, smoothed, batch, 1.0f), "loss");
  }
  if (m->z_loss > 0) {
    mtf_tensor lse = mtf_logsumexp(g, out->logits, "vocab");
    mtf_tensor z = token_mean(&b, mtf_square(g, lse), batch, (float)m->z_loss);
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

int mtf_activation_is_gated(mtf_activation_kind activation) {
  return activation == MTF_ACTIVATION_SWIGLU || activation == MTF_ACTIVATION_GEGLU;
}

double mtf_transformer_flops_per_token(const mtf_model_config *m, int64_t param_count) {
  double active = (double)(param_count - mtf_moe_inactive_params(m)); /* an MoE token uses k experts of each layer */
  /* Attention layers: the decoder-only model's; the encoder's, the decoder's and its cross-attention. */
  double attention_layers = mtf_is_encoder_decoder(m)
                                ? (double)(mtf_encoder_layers(m) + 2 * mtf_decoder_layers(m)) : (double)m->layers;
  return 6.0 * active + 12.0 * attention_layers * (double)m->length * (double)(m->heads * m->d_kv);
}
