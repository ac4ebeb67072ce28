/* The decoder-only language model of the config's `model` section, built with named dimensions:
 * tokens [batch, length] -> embedding [vocab, d_model] + positions [length, d_model] -> layers x
 * (norm -> causal self-attention (wq, wk, wv [d_model, heads, d_kv], wo [heads, d_kv, d_model], keys and
 * values renamed to memory_length) -> residual; norm -> wi [d_model, d_ff], activation, wo [d_ff, d_model]
 * -> residual; with a gated activation (swiglu, geglu) act(h wi_0) * (h wi_1) instead, wi_0 and wi_1
 * [d_model, d_ff]) -> final norm -> logits (tied: embedding scaled by d_model^-0.5; else unembed/w
 * [d_model, vocab]) -> mean softmax cross-entropy (+ z-loss), with train.label_smoothing eps
 * (1-eps) xent + eps mean_vocab(-log_softmax) in the training loss (token_loss stays plain cross-entropy).
 *
 * The attention block is model/attention_block.h (model.kv_heads: wk, wv [d_model, kv_heads, d_kv]);
 * model.position (model/position.h) picks the position signal: embed/wpe (learned), a relative bias table
 * relative_bias/decoder [heads, relative_buckets] shared by the layers, rotary q and k, or none.
 *
 * Variable names are stable, since checkpoints use them: embed/wte, embed/wpe (learned positions only),
 * relative_bias/decoder (relative_bias only),
 * layer_NNN/attn/{norm_scale, norm_bias, wq, wk, wv, wo}, layer_NNN/mlp/{norm_scale, norm_bias, wi, wo}
 * (wi_0 and wi_1 in place of wi when gated),
 * final/{norm_scale, norm_bias}, unembed/w (norm_bias only with layer norm, unembed/w only untied).
 * With model.moe.experts > 0, every model.moe.every-th layer's feed-forward is a mixture of experts
 * (model/moe.h), layer_NNN/moe/{norm_scale, norm_bias, router, wi, wo}, and the loss adds each MoE layer's
 * load-balancing and router z-losses times model.moe.aux_loss and model.moe.router_z_loss.
 * With model.architecture: encoder_decoder the build is model/encoder_decoder.h's, variables embed/wte
 * (shared; encoder/embed/wte with model.shared_embeddings false), {encoder, decoder}/embed/wpe (learned
 * positions) or {encoder, decoder}/relative_bias (relative_bias), encoder/layer_NNN/{attn, mlp}/...,
 * decoder/layer_NNN/{attn, cross_attn, mlp}/..., {encoder, decoder}/final/..., unembed/w. */
#ifndef MTF_MODEL_TRANSFORMER_H
#define MTF_MODEL_TRANSFORMER_H

#include "config/config.h"
#include "model/moe.h"
#include "mtf.h"

/* What one build computes. TRAIN: the full forward over [batch, length] (loss, logits), for training and
 * evaluation (and generate --no-cache). PREFILL: the same forward over a prompt, which also writes every
 * layer's keys and values into its cache (transient variables layer_NNN/attn/cache_{k,v} [batch, kv_heads,
 * memory_length, d_kv]) and gives the logits at each row's last prompt position. DECODE: one new token per
 * row at its own position: the layer's key and value are written into the caches at that position and
 * attention reads the filled prefix only. Builds of one graph share the weights and the caches. */
typedef enum mtf_transformer_mode { MTF_MODE_TRAIN = 0, MTF_MODE_PREFILL, MTF_MODE_DECODE } mtf_transformer_mode;

typedef struct mtf_transformer {
  mtf_tensor tokens, targets; /* int32 inputs [batch, length] holding token ids (mtf_input_int) */
  mtf_tensor logits;          /* [batch, length, vocab] */
  mtf_tensor loss;            /* scalar: mean cross-entropy, label-smoothed (+ z-loss) */
  mtf_tensor token_loss;      /* scalar: mean cross-entropy alone (for eval and perplexity) */
  int n_params;
  mtf_tensor *params;         /* the model's variables (malloc'd) */
  int64_t param_count;        /* elements in all params */
  int n_moe;
  mtf_moe_layer *moe;         /* the mixture-of-experts layers (model.moe; malloc'd), their losses and metrics */
  /* PREFILL and DECODE (MTF_NO_TENSOR in TRAIN). positions: int32 [batch]: PREFILL the last prompt position of
   * each row, DECODE the position of each row's new token (its tokens input is [batch, length:1]).
   * next_logits: [batch, vocab] at those positions. The build's cache writes are the graph's assigns
   * [first_assign, first_assign + n_assigns) (mtf_plan_create_with_assigns). */
  mtf_tensor positions, next_logits;
  int first_assign, n_assigns;
  /* model.architecture: encoder_decoder (model/encoder_decoder.h; MTF_NO_TENSOR for the decoder-only model):
   * the encoder's int32 input [batch, length], the int32 loss weights [batch, length] (1 on answer tokens),
   * and the scalar count of rows whose answer tokens are all their logits' argmax (teacher-forced exact
   * match). tokens is then the decoder's input. */
  mtf_tensor encoder_tokens, loss_weights, exact_rows;
  /* TRAIN with data.pack (model/segments.h; MTF_NO_TENSOR otherwise): the int32 inputs [batch, length] of
   * the tokens' and targets' segments and the tokens' positions in their documents, and the scalars
   * loss_sum (cross-entropy summed over counted positions) and loss_count (positions counted); token_loss
   * is loss_sum / max(loss_count, 1). */
  mtf_tensor segments, target_segments, segment_positions, loss_sum, loss_count;
} mtf_transformer;

/* Builds into g. `dropout` overrides the config's rate (0 in eval); `batch` is the global batch. */
int mtf_transformer_build(mtf_graph *g, const mtf_model_config *model, int64_t batch, float dropout,
                          mtf_transformer *out, mtf_error *err);
/* The same, for a mode; TRAIN is mtf_transformer_build. PREFILL and DECODE have no loss and no targets. */
int mtf_transformer_build_mode(mtf_graph *g, const mtf_model_config *model, int64_t batch, float dropout,
                               mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err);
void mtf_transformer_free(mtf_transformer *t);

/* Whether model.activation is a gated one (swiglu, geglu): two input projections wi_0, wi_1. */
int mtf_activation_is_gated(mtf_activation_kind activation);

/* Model FLOPs per token for training (forward + backward): 6 N + 12 layers length heads d_kv, where N
 * counts the experts a token uses (k of each MoE layer), not all of them. */
double mtf_transformer_flops_per_token(const mtf_model_config *model, int64_t param_count);

#endif
