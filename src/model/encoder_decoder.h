/* The encoder-decoder (T5) of model.architecture: encoder_decoder, built with the decoder-only model's
 * parts (the attention block of model/attention_block.h, the same norms and feed-forward layers):
 *
 *   encoder_tokens [batch, length] -> embedding + encoder/embed/wpe -> encoder_layers x (norm ->
 *   bidirectional self-attention -> residual; norm -> feed-forward -> residual) -> encoder/final norm
 *   = memory [batch, length, d_model];
 *   tokens (the decoder input: the answer shifted right behind a start token) -> embedding +
 *   decoder/embed/wpe -> decoder_layers x (norm -> causal self-attention -> residual; norm ->
 *   cross-attention: queries from the decoder, keys and values from the memory, its length renamed to
 *   memory_length -> residual; norm -> feed-forward -> residual) -> decoder/final norm -> logits
 *   (tied: embed/wte scaled by d_model^-0.5, or unembed/w).
 *
 * The loss is over the answer tokens only: loss_weights (int32 [batch, length], 1 on answer tokens, 0 on
 * padding) weigh each position's cross-entropy (and z-loss, label smoothing), and the sum is divided by the
 * sum of the weights (at least 1). Encoder and decoder both have model.length positions.
 *
 * model.position: learned adds <stack>/embed/wpe at the embedding; relative_bias gives each stack one T5
 * table <stack>/relative_bias [heads, relative_buckets] shared by its layers' self-attention
 * (bidirectional buckets in the encoder, causal in the decoder); rotary rotates the self-attentions'
 * queries and keys; cross-attention has no position signal.
 *
 * Variables: embed/wte (shared by encoder, decoder and the tied output; with model.shared_embeddings
 * false the encoder has encoder/embed/wte), encoder/embed/wpe, decoder/embed/wpe (learned positions),
 * encoder/relative_bias, decoder/relative_bias (relative_bias),
 * encoder/layer_NNN/{attn, mlp}/..., decoder/layer_NNN/{attn, cross_attn, mlp}/... (attn and cross_attn:
 * norm_scale, norm_bias, wq, wk, wv, wo; mlp: norm_scale, norm_bias, wi or wi_0 and wi_1, wo),
 * encoder/final/{norm_scale, norm_bias}, decoder/final/{norm_scale, norm_bias}, unembed/w (untied).
 *
 * PREFILL and DECODE (mtf generate): the prompt is encoder_tokens (input prefill_encoder_tokens), the
 * decoder's tokens the start token and what was generated. PREFILL runs the encoder once and keeps its
 * output in the transient variable encoder/memory [batch, length, d_model], fills the decoder's
 * self-attention caches and gives next_logits at each row's position (prefill_last); DECODE takes one
 * decoder token per row (decode_tokens, decode_positions), its self-attention reading the caches and its
 * cross-attention the kept memory (keys and values computed from it each step). */
#ifndef MTF_MODEL_ENCODER_DECODER_H
#define MTF_MODEL_ENCODER_DECODER_H

#include "model/transformer.h"

/* Whether model.architecture is encoder_decoder. */
int mtf_is_encoder_decoder(const mtf_model_config *model);
/* model.encoder_layers and model.decoder_layers with 0 meaning model.layers. */
int64_t mtf_encoder_layers(const mtf_model_config *model);
int64_t mtf_decoder_layers(const mtf_model_config *model);

int mtf_encoder_decoder_build(mtf_graph *g, const mtf_model_config *model, int64_t batch, float dropout,
                              mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err);

#endif
