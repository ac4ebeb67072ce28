/* What every model builder of src/model shares (internal): the graph and config being built, the model's
 * parameter list, the dropout keys, and the blocks both the decoder-only model (transformer.c) and the
 * encoder-decoder (encoder_decoder.c) are made of: the norm of model.norm and the dense feed-forward layer
 * of model.activation. One definition each, so the two architectures cannot drift apart (the reference
 * model in tests/model describes both with the same words). */
#ifndef MTF_MODEL_BLOCKS_H
#define MTF_MODEL_BLOCKS_H

#include "model/transformer.h"

typedef struct mtf_model_builder {
  mtf_graph *g;
  const mtf_model_config *m;
  mtf_transformer *t; /* its params / param_count collect every variable made or found */
  int cap;            /* allocated entries of t->params */
  float dropout;      /* rate (0 in evaluation) */
  uint64_t dropout_key;
} mtf_model_builder;

/* A shape from a printf-style "name:size,..." text (the builders' sizes are valid by config validation). */
mtf_shape mtf_model_shape(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Makes the variable, or finds it when an earlier build of the graph (evaluation, decode) made it, and adds it
 * to the model's parameter list. */
mtf_tensor mtf_model_param(mtf_model_builder *b, const char *name, const mtf_shape *shape, mtf_init init, float scale);
/* The same as a callback (mtf_moe_param_fn) for the attention block and the MoE layer; ctx is the builder. */
mtf_tensor mtf_model_param_fn(void *ctx, const char *name, const mtf_shape *shape, mtf_init init, float scale);
/* Dropout at the builder's rate with its next key. */
mtf_tensor mtf_model_dropout(mtf_model_builder *b, mtf_tensor x);
/* model.norm over d_model: <prefix>/norm_scale (and <prefix>/norm_bias for layer norm). */
mtf_tensor mtf_model_norm(mtf_model_builder *b, mtf_tensor x, const char *prefix);
/* The dense feed-forward layer with its norm and residual: x + dropout(dropout(act(norm(x) wi)) wo), or with a
 * gated activation (swiglu, geglu) act(h wi_0) * (h wi_1); variables <prefix>/{norm_*, wi | wi_0, wi_1, wo}.
 * activations is x's shape [batch, length, d_model]. */
mtf_tensor mtf_model_feed_forward(mtf_model_builder *b, mtf_tensor x, const char *prefix, const mtf_shape *activations);

/* Tied output logits, h wte d_model^-0.5, into `shape` (h's dims with vocab for d_model). Under the bf16 policy
 * the scale goes onto h (d_model values per position) before the product rather than onto the logits (vocab
 * values): two passes over the largest activation (forward and gradient) fewer. The bf16 operand is then
 * round(h s) rather than round(h) s: the same where s is a power of two (d_model a power of 4: 256, 1024),
 * one rounding apart otherwise. fp32 keeps the scale on the logits, as it always had. */
mtf_tensor mtf_model_tied_logits(mtf_model_builder *b, mtf_tensor h, mtf_tensor wte, const mtf_shape *shape);

/* model.position relative_bias: the stack's shared T5 table `name` [heads, relative_buckets] looked up at each
 * (query, memory) pair's memory - query position; query_position is the queries' positions (a range over
 * `length`, or in DECODE each row's position as float). The bias broadcasts onto the attention logits. */
mtf_tensor mtf_model_relative_bias(mtf_model_builder *b, const char *name, mtf_tensor query_position,
                                   int bidirectional);

#endif
