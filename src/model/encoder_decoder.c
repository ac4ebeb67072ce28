/* The encoder-decoder of model.architecture: encoder_decoder (see encoder_decoder.h). */
#include "model/encoder_decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/attention_block.h"
#include "model/blocks.h"
#include "model/position.h"

typedef struct builder {
  mtf_model_builder base; /* graph, config, parameter list, dropout (model/blocks.h) */
  int64_t batch;
  mtf_transformer_mode mode;
  mtf_shape activations;         /* [batch, length, d_model] (the encoder's; the decoder's in TRAIN and PREFILL) */
  mtf_shape decoder_activations; /* DECODE: [batch, length:1, d_model] */
  mtf_tensor attend;             /* DECODE: [memory_length, batch], 1 where memory position <= the row's */
} builder;

int mtf_is_encoder_decoder(const mtf_model_config *m) { return m->architecture == MTF_ARCHITECTURE_ENCODER_DECODER; }
int64_t mtf_encoder_layers(const mtf_model_config *m) { return m->encoder_layers > 0 ? m->encoder_layers : m->layers; }
int64_t mtf_decoder_layers(const mtf_model_config *m) { return m->decoder_layers > 0 ? m->decoder_layers : m->layers; }

/* Norm, an attention block (self or cross), dropout, residual. mode: the encoder's is always TRAIN (a whole
 * prompt, no cache); the decoder's is the build's (PREFILL fills its self-attention caches, DECODE reads
 * them). */
static mtf_tensor attention(builder *b, mtf_tensor x, const char *prefix, const mtf_attention_options *options,
                            mtf_transformer_mode mode) {
  mtf_tensor h = mtf_model_norm(&b->base, x, prefix);
  mtf_attention_env env = {.g = b->base.g, .model = b->base.m, .param = mtf_model_param_fn, .param_ctx = &b->base,
                           .mode = mode, .batch = b->batch, .dropout = b->base.dropout, .dropout_key = &b->base.dropout_key,
                           .n_assigns = &b->base.t->n_assigns,
                           .positions = mode == MTF_MODE_DECODE ? b->base.t->positions : MTF_NO_TENSOR,
                           .attend = mode == MTF_MODE_DECODE ? b->attend : MTF_NO_TENSOR};
  mtf_tensor out = mtf_attention_block(&env, h, prefix, options);
  return mtf_add(b->base.g, x, mode == MTF_MODE_DECODE ? out : mtf_model_dropout(&b->base, out));
}

/* Token embedding plus, with model.position learned, the stack's positions <stack>/embed/wpe; dropout. */
static mtf_tensor embed(builder *b, mtf_tensor wte, mtf_tensor tokens, const char *stack) {
  char name[96];
  mtf_tensor x = mtf_gather(b->base.g, wte, tokens, "vocab");
  if (b->base.m->position == MTF_POSITION_LEARNED) {
    mtf_shape positions = mtf_model_shape("length:%lld,d_model:%lld", (long long)b->base.m->length,
                                          (long long)b->base.m->d_model);
    snprintf(name, sizeof name, "%s/embed/wpe", stack);
    x = mtf_add(b->base.g, x, mtf_model_param(&b->base, name, &positions, MTF_INIT_NORMAL, 0.1f));
  }
  return mtf_model_dropout(&b->base, x);
}

/* The self-attention options of a stack: bidirectional (encoder) or causal; with model.position
 * relative_bias, T5's table <stack>/relative_bias [heads, relative_buckets], one per stack shared by its
 * layers, looked up at each (query, memory) pair's memory - query position (model/position.h); with
 * rotary, rotated queries and keys. */
static mtf_attention_options self_attention(builder *b, const char *stack, int bidirectional, mtf_transformer_mode mode) {
  const mtf_model_config *m = b->base.m;
  mtf_graph *g = b->base.g;
  mtf_attention_options options = mtf_attention_defaults();
  options.bidirectional = bidirectional;
  options.rotary = m->position == MTF_POSITION_ROTARY;
  if (m->position == MTF_POSITION_RELATIVE_BIAS) {
    char name[96];
    snprintf(name, sizeof name, "%s/relative_bias", stack);
    mtf_dim query = mtf_dim_make("length", m->length);
    /* DECODE: the one query of each row sits at its position ([heads, memory_length, batch]). */
    mtf_tensor query_position = mode == MTF_MODE_DECODE ? mtf_to_float(g, b->base.t->positions) : mtf_range(g, &query);
    options.bias = mtf_model_relative_bias(&b->base, name, query_position, bidirectional);
  }
  return options;
}

static mtf_tensor encoder(builder *b, mtf_tensor wte) {
  mtf_graph *g = b->base.g;
  mtf_tensor x = embed(b, wte, b->base.t->encoder_tokens, "encoder");
  mtf_attention_options self = self_attention(b, "encoder", 1, MTF_MODE_TRAIN);
  char prefix[96];
  for (int64_t layer = 0; layer < mtf_encoder_layers(b->base.m); layer++) {
    mtf_recompute_begin(g);
    snprintf(prefix, sizeof prefix, "encoder/layer_%03lld/attn", (long long)layer);
    x = attention(b, x, prefix, &self, MTF_MODE_TRAIN);
    snprintf(prefix, sizeof prefix, "encoder/layer_%03lld/mlp", (long long)layer);
    x = mtf_model_feed_forward(&b->base, x, prefix, &b->activations);
    mtf_recompute_end(g);
  }
  return mtf_model_norm(&b->base, x, "encoder/final");
}

/* DECODE: each row's new token [batch, length:1] embedded at its position (decoder/embed/wpe's row), and the
 * builder's mask of the memory positions it may attend to. */
static mtf_tensor decode_embed(builder *b, mtf_tensor wte) {
  const mtf_model_config *m = b->base.m;
  mtf_graph *g = b->base.g;
  mtf_shape rows = mtf_model_shape("batch:%lld", (long long)b->batch);
  mtf_dim memory = mtf_dim_make("memory_length", m->length);
  mtf_tensor memory_index = mtf_range(g, &memory);
  mtf_tensor position = mtf_reduce_sum(g, mtf_multiply(g, mtf_one_hot(g, b->base.t->positions, &memory), memory_index),
                                       &rows);
  b->attend = mtf_less_equal(g, memory_index, position);
  mtf_tensor x = mtf_gather(g, wte, b->base.t->tokens, "vocab");
  if (m->position != MTF_POSITION_LEARNED) return x;
  mtf_shape positions = mtf_model_shape("length:%lld,d_model:%lld", (long long)m->length, (long long)m->d_model);
  mtf_tensor wpe = mtf_model_param(&b->base, "decoder/embed/wpe", &positions, MTF_INIT_NORMAL, 0.1f);
  return mtf_add(g, x, mtf_gather(g, wpe, b->base.t->positions, "length"));
}

static mtf_tensor decoder(builder *b, mtf_tensor wte, mtf_tensor memory) {
  mtf_graph *g = b->base.g;
  int decode = b->mode == MTF_MODE_DECODE;
  mtf_tensor x = decode ? decode_embed(b, wte) : embed(b, wte, b->base.t->tokens, "decoder");
  const mtf_shape *activations = decode ? &b->decoder_activations : &b->activations;
  mtf_attention_options self = self_attention(b, "decoder", 0, b->mode), cross = mtf_attention_defaults();
  cross.bidirectional = 1; /* every answer position sees the whole prompt; no position signal (T5) */
  cross.memory = memory;
  cross.memory_dim = "length";
  char prefix[96];
  for (int64_t layer = 0; layer < mtf_decoder_layers(b->base.m); layer++) {
    mtf_recompute_begin(g);
    snprintf(prefix, sizeof prefix, "decoder/layer_%03lld/attn", (long long)layer);
    x = attention(b, x, prefix, &self, b->mode);
    snprintf(prefix, sizeof prefix, "decoder/layer_%03lld/cross_attn", (long long)layer);
    x = attention(b, x, prefix, &cross, b->mode);
    snprintf(prefix, sizeof prefix, "decoder/layer_%03lld/mlp", (long long)layer);
    x = mtf_model_feed_forward(&b->base, x, prefix, activations);
    mtf_recompute_end(g);
  }
  return mtf_model_norm(&b->base, x, "decoder/final");
}

/* The weighted means of the loss (encoder_decoder.h), and the rows whose answer tokens are all the argmax
 * of their logits (teacher-forced exact match). */
static void losses(builder *b) {
  const mtf_model_config *m = b->base.m;
  mtf_graph *g = b->base.g;
  mtf_transformer *t = b->base.t;
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
  mtf_shape rows = mtf_model_shape("batch:%lld", (long long)b->batch);
  mtf_tensor right = mtf_equal(g, mtf_to_float(g, mtf_argmax(g, t->logits, "vocab")), mtf_to_float(g, t->targets));
  mtf_tensor wrong = mtf_reduce_sum(g, mtf_multiply(g, weights, mtf_scalar_add(g, mtf_scalar_multiply(g, right, -1.0f), 1.0f)),
                                    &rows);
  mtf_tensor row_right = mtf_less(g, wrong, mtf_constant(g, &rows, 0.5f));
  t->exact_rows = mtf_set_name(g, mtf_reduce_sum(g, row_right, &scalar), "exact_rows");
}

/* The encoder's output kept between the PREFILL and DECODE builds of one graph (transient, like the caches):
 * written once per prompt by PREFILL, read by every DECODE step's cross-attention. */
static mtf_tensor memory_variable(builder *b) {
  mtf_tensor v = mtf_find_variable(b->base.g, "encoder/memory");
  return v != MTF_NO_TENSOR ? v : mtf_transient_variable(b->base.g, "encoder/memory", &b->activations);
}

/* The output layer: tied (embed/wte scaled by d_model^-0.5) or unembed/w, h's dims with vocab for d_model. */
static mtf_tensor unembed(builder *b, mtf_tensor h, mtf_tensor wte, const mtf_shape *shape) {
  const mtf_model_config *m = b->base.m;
  if (m->tie_embeddings) return mtf_model_tied_logits(&b->base, h, wte, shape);
  mtf_shape w_shape = mtf_model_shape("d_model:%lld,vocab:%lld", (long long)m->d_model, (long long)m->vocab);
  mtf_tensor w = mtf_model_param(&b->base, "unembed/w", &w_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_model));
  return mtf_einsum2(b->base.g, h, w, shape);
}

/* PREFILL and DECODE (mtf generate): the prompt is the encoder's input, the decoder's tokens are the start
 * token and what was generated. PREFILL runs the encoder once, keeps its output (encoder/memory) and fills
 * the decoder's self-attention caches over its tokens; DECODE takes one decoder token per row, its
 * cross-attention reading the kept memory (keys and values recomputed from it). next_logits at each row's
 * position, as the decoder-only model gives them. */
static int build_generation(builder *b, mtf_transformer *out, mtf_error *err) {
  const mtf_model_config *m = b->base.m;
  mtf_graph *g = b->base.g;
  int64_t batch = b->batch;
  mtf_shape tokens = mtf_model_shape("batch:%lld,length:%lld", (long long)batch, (long long)m->length);
  mtf_shape rows = mtf_model_shape("batch:%lld", (long long)batch);
  mtf_shape embed_shape = mtf_model_shape("vocab:%lld,d_model:%lld", (long long)m->vocab, (long long)m->d_model);
  mtf_tensor memory;
  if (b->mode == MTF_MODE_PREFILL) {
    out->encoder_tokens = mtf_input_int(g, "prefill_encoder_tokens", &tokens);
    out->tokens = mtf_input_int(g, "prefill_tokens", &tokens);
    out->positions = mtf_input_int(g, "prefill_last", &rows);
  } else {
    mtf_shape one = mtf_model_shape("batch:%lld,length:1", (long long)batch);
    out->tokens = mtf_input_int(g, "decode_tokens", &one);
    out->positions = mtf_input_int(g, "decode_positions", &rows);
  }
  mtf_tensor wte = mtf_model_param(&b->base, "embed/wte", &embed_shape, MTF_INIT_NORMAL, 1.0f);
  if (b->mode == MTF_MODE_PREFILL) {
    mtf_tensor encoder_wte =
        m->shared_embeddings ? wte : mtf_model_param(&b->base, "encoder/embed/wte", &embed_shape, MTF_INIT_NORMAL, 1.0f);
    memory = encoder(b, encoder_wte);
    if (mtf_assign(g, memory_variable(b), memory) == MTF_OK) out->n_assigns++;
  } else {
    memory = memory_variable(b);
  }
  mtf_tensor h = decoder(b, wte, memory);
  mtf_shape last_shape = mtf_model_shape("batch:%lld,d_model:%lld", (long long)batch, (long long)m->d_model);
  mtf_shape next_shape = mtf_model_shape("batch:%lld,vocab:%lld", (long long)batch, (long long)m->vocab);
  mtf_dim length_dim = mtf_dim_make("length", m->length);
  mtf_tensor last = b->mode == MTF_MODE_PREFILL ? mtf_einsum2(g, h, mtf_one_hot(g, out->positions, &length_dim), &last_shape)
                                                : mtf_einsum(g, 1, &h, &last_shape);
  out->next_logits = mtf_set_name(g, unembed(b, last, wte, &next_shape), "next_logits");
  int rc = mtf_graph_status(g, err);
  if (rc) mtf_transformer_free(out);
  return rc;
}

int mtf_encoder_decoder_build(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                              mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err) {
  out->first_assign = mtf_graph_num_assigns(g);
  out->moe = calloc(1, sizeof *out->moe);
  if (!out->moe) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  builder b = {.base = {.g = g, .m = m, .t = out, .dropout = dropout_rate, .dropout_key = 1000}, .batch = batch,
               .mode = mode, .attend = MTF_NO_TENSOR};
  b.activations = mtf_model_shape("batch:%lld,length:%lld,d_model:%lld", (long long)batch, (long long)m->length,
                           (long long)m->d_model);
  b.decoder_activations = mtf_model_shape("batch:%lld,length:1,d_model:%lld", (long long)batch, (long long)m->d_model);
  if (mode != MTF_MODE_TRAIN) return build_generation(&b, out, err);
  mtf_shape tokens = mtf_model_shape("batch:%lld,length:%lld", (long long)batch, (long long)m->length);
  out->encoder_tokens = mtf_input_int(g, "encoder_tokens", &tokens);
  out->tokens = mtf_input_int(g, "tokens", &tokens);
  out->targets = mtf_input_int(g, "targets", &tokens);
  out->loss_weights = mtf_input_int(g, "loss_weights", &tokens);
  mtf_shape embed_shape = mtf_model_shape("vocab:%lld,d_model:%lld", (long long)m->vocab, (long long)m->d_model);
  mtf_tensor wte = mtf_model_param(&b.base, "embed/wte", &embed_shape, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor encoder_wte =
      m->shared_embeddings ? wte : mtf_model_param(&b.base, "encoder/embed/wte", &embed_shape, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor h = decoder(&b, wte, encoder(&b, encoder_wte));
  mtf_shape logits_shape = mtf_model_shape("batch:%lld,length:%lld,vocab:%lld", (long long)batch, (long long)m->length,
                                    (long long)m->vocab);
  out->logits = mtf_set_name(g, unembed(&b, h, wte, &logits_shape), "logits");
  losses(&b);
  int rc = mtf_graph_status(g, err);
  if (rc) mtf_transformer_free(out);
  return rc;
}
