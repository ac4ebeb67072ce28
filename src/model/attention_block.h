/* The attention block of the transformer (internal to src/model): projections, scores, softmax, output
 * projection, and the key/value cache of the PREFILL and DECODE modes. The caller norms the input before
 * and adds the residual (with its dropout) after; the block returns the output projection, h's shape.
 *
 *   h [batch, length, d_model] -> q = h wq [batch, length, heads, d_kv]
 *   memory (h itself, or options.memory) -> k = m wk, v = m wv [batch, memory_length, heads, d_kv]
 *   logits = q . k [batch, heads, length, memory_length] (+ options.bias) masked by options.mask and,
 *   unless options.bidirectional, causally (memory position <= query position)
 *   -> softmax over memory_length -> dropout -> weights . v -> o wo [batch, length, d_model].
 *
 * Variables: <prefix>/{wq [d_model, heads, d_kv], wk, wv [d_model, kv_heads, d_kv], wo [heads, d_kv, d_model]}
 * (the caller's prefix, e.g. layer_003/attn); with model.kv_heads = heads the K/V dimension is named heads
 * (the variables of earlier versions), else kv_heads, and query head h reads K/V head h / (heads /
 * kv_heads) (expand_heads; DECODE regroups the query heads as [kv_heads, q_group] instead, so a step
 * reads the small cache as it is). The scores' 1/sqrt(d_kv) is in wq's initialisation. Caches: transient
 * <prefix>/cache_{k,v} [batch, kv_heads, memory_length, d_kv] (kv heads only: the point of multi-query).
 *
 * Calling it (h-encdec, h-packed): fill an mtf_attention_options with mtf_attention_defaults() and set
 *   bidirectional = 1        encoder self-attention (no causal mask);
 *   rotary = 1               model.position rotary: q and k rotated by their positions (DECODE: the row's);
 *   memory, memory_dim       cross-attention: keys and values from this tensor (e.g. the encoder output
 *                            [batch, <memory_dim>, d_model]; memory_dim is renamed to memory_length); no
 *                            cache is kept for it (recomputed in DECODE);
 *   bias                     added to the logits, broadcast by name (e.g. a relative position bias
 *                            [heads, length, memory_length]);
 *   mask                     1 where a query may attend, 0 where not, broadcast by name onto the logits
 *                            (e.g. a segment mask [batch, length, memory_length]).
 * With bias or mask set, the unfused path is taken (the fused kernel knows the causal mask alone). */
#ifndef MTF_MODEL_ATTENTION_BLOCK_H
#define MTF_MODEL_ATTENTION_BLOCK_H

#include "model/moe.h"
#include "model/transformer.h"
#include "mtf.h"

/* What the block needs of the model being built (transformer.c fills it from its builder). */
typedef struct mtf_attention_env {
  mtf_graph *g;
  const mtf_model_config *model;
  mtf_moe_param_fn param; /* makes or finds a variable (the model's parameter list keeps it) */
  void *param_ctx;
  mtf_transformer_mode mode;
  int64_t batch;          /* global batch */
  float dropout;          /* rate on the attention weights */
  uint64_t *dropout_key;  /* the model's next dropout key (the block takes one) */
  int *n_assigns;         /* cache writes made (PREFILL, DECODE) are counted here */
  /* DECODE: int32 [batch] each row's position, and [memory_length, batch] 1 where memory position <= it. */
  mtf_tensor positions, attend;
} mtf_attention_env;

typedef struct mtf_attention_options {
  int bidirectional;      /* 0: causal self-attention (the decoder) */
  int rotary;             /* rotate q and k by their positions (model/position.h; self-attention only) */
  mtf_tensor memory;      /* MTF_NO_TENSOR: self-attention over h */
  const char *memory_dim; /* memory's dimension that becomes memory_length (with memory) */
  mtf_tensor bias;        /* MTF_NO_TENSOR or added to the logits */
  mtf_tensor mask;        /* MTF_NO_TENSOR or 1 keep / 0 drop, broadcast onto the logits */
  mtf_tensor segments;    /* with a mask that is "same document": the ids [batch, length] it compares, for the
                           * fused attention (which takes ids, not an [length, memory_length] mask) */
} mtf_attention_options;

mtf_attention_options mtf_attention_defaults(void);

/* The block on normed input h under prefix (see above). Errors stay in the graph (mtf_graph_status). */
mtf_tensor mtf_attention_block(const mtf_attention_env *env, mtf_tensor h, const char *prefix,
                               const mtf_attention_options *options);

#endif
