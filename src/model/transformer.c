#include "model/transformer.h"
#include "model/segments.h"

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
  mtf_transformer_mode mode;
  /* DECODE: each row's position as one-hot [batch, memory_length] and the memory positions it may attend
   * to (<= its position) [memory_length, batch]. */
  mtf_tensor position_hot, attend;
  /* TRAIN with data.pack: the segment inputs, mask and loss weights (model/segments.h). */
  int packed;
  mtf_segment_inputs segments;
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

/* A layer's key or value cache (transient: not model state, never checkpointed), shared by every build of
 * the graph. */
static mtf_tensor cache_variable(builder *b, const char *prefix, const char *which, int64_t batch) {
  char name[96];
  snprintf(name, sizeof name, "%s/cache_%s", prefix, which);
  mtf_tensor v = mtf_find_variable(b->g, name);
  if (v != MTF_NO_TENSOR) return v;
  mtf_shape shape = shape_of("batch:%lld,heads:%lld,memory_length:%lld,d_kv:%lld", (long long)batch,
                             (long long)b->m->heads, (long long)b->m->length, (long long)b->m->d_kv);
  return mtf_transient_variable(b->g, name, &shape);
}

/* PREFILL: the prompt's keys or values [batch, memory_length, heads, d_kv] become the cache. */
static void cache_fill(builder *b, const char *prefix, const char *which, mtf_tensor kv, int64_t batch) {
  mtf_tensor cache = cache_variable(b, prefix, which, batch);
  mtf_tensor reordered = mtf_einsum(b->g, 1, &kv, mtf_tensor_shape(b->g, cache));
  if (mtf_assign(b->g, cache, reordered) == MTF_OK) b->t->n_assigns++;
}

/* DECODE: the new key or value [batch, heads, d_kv] written at each row's position along memory_length
 * (write_at: assigned back to the cache variable, it writes in place, one row per (batch, head), not a pass
 * over the cache). Returns the updated cache, which attention reads. */
static mtf_tensor cache_write(builder *b, const char *prefix, const char *which, mtf_tensor kv, int64_t batch) {
  mtf_graph *g = b->g;
  mtf_tensor cache = cache_variable(b, prefix, which, batch);
  mtf_tensor updated = mtf_write_at(g, cache, kv, b->t->positions, "memory_length");
  if (mtf_assign(g, cache, updated) == MTF_OK) b->t->n_assigns++;
  return updated;
}

/* DECODE: attention of each row's one new token over its cache prefix (memory positions <= its position);
 * the same function as the training path's row at that position. Returns [batch, d_model]. */
static mtf_tensor decode_attention(builder *b, mtf_tensor h, const mtf_tensor w[4], const char *prefix,
                                   int64_t batch) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  mtf_shape bhd = shape_of("batch:%lld,heads:%lld,d_kv:%lld", (long long)batch, (long long)m->heads,
                           (long long)m->d_kv);
  mtf_shape scores_shape = shape_of("batch:%lld,heads:%lld,memory_length:%lld", (long long)batch,
                                    (long long)m->heads, (long long)m->length);
  mtf_shape out_shape = shape_of("batch:%lld,d_model:%lld", (long long)batch, (long long)m->d_model);
  mtf_tensor q = mtf_einsum2(g, h, w[0], &bhd);
  mtf_tensor k = cache_write(b, prefix, "k", mtf_einsum2(g, h, w[1], &bhd), batch);
  mtf_tensor v = cache_write(b, prefix, "v", mtf_einsum2(g, h, w[2], &bhd), batch);
  mtf_tensor scores = mtf_masked_fill(g, mtf_einsum2(g, q, k, &scores_shape), b->attend, -1e9f);
  mtf_tensor o = mtf_einsum2(g, mtf_softmax(g, scores, "memory_length"), v, &bhd);
  return mtf_einsum2(g, o, w[3], &out_shape);
}

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
  if (b->mode == MTF_MODE_DECODE) {
    const mtf_tensor w[4] = {wq, wk, wv, wo};
    return mtf_add(g, x, decode_attention(b, h, w, prefix, activations->dims[0].size));
  }

  mtf_shape qkv = shape_of("batch:%lld,length:%lld,heads:%lld,d_kv:%lld", (long long)activations->dims[0].size,
                           (long long)m->length, (long long)m->heads, (long long)m->d_kv);
  mtf_tensor q = mtf_einsum2(g, h, wq, &qkv);
  mtf_tensor k = mtf_rename(g, mtf_einsum2(g, h, wk, &qkv), "length", "memory_length");
  mtf_tensor v = mtf_rename(g, mtf_einsum2(g, h, wv, &qkv), "length", "memory_length");
  if (b->mode == MTF_MODE_PREFILL) {
    cache_fill(b, prefix, "k", k, activations->dims[0].size);
    cache_fill(b, prefix, "v", v, activations->dims[0].size);
  }
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
    if (b->packed) logits = mtf_segments_mask(g, &b->segments, logits);
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
  /* Made after the input projections: variables keep the order of earlier versions (checkpoints list them,
   * and a restore reports the first that differs). */
  snprintf(name, sizeof name, "%s/wo", prefix);
  mtf_tensor wo = param(b, name, &wo_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_ff));
  return mtf_add(g, x, dropout(b, mtf_einsum2(g, dropout(b, act), wo, activations)));
}

/* The output layer: tied (the embedding scaled by d_model^-0.5) or unembed/w, into `shape` (h's dims with
 * vocab for d_model). */
static mtf_tensor unembed(builder *b, mtf_tensor h, mtf_tensor wte, const mtf_shape *shape) {
  const mtf_model_config *m = b->m;
  if (m->tie_embeddings)
    return mtf_scalar_multiply(b->g, mtf_einsum2(b->g, h, wte, shape), 1.0f / sqrtf((float)m->d_model));
  mtf_shape w_shape = shape_of("d_model:%lld,vocab:%lld", (long long)m->d_model, (long long)m->vocab);
  mtf_tensor w = param(b, "unembed/w", &w_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_model));
  return mtf_einsum2(b->g, h, w, shape);
}

/* DECODE: the embedded new tokens [batch, length:1, d_model] at their positions, and the builder's
 * position masks. */
static mtf_tensor decode_inputs(builder *b, int64_t batch, mtf_tensor wte, mtf_tensor wpe) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  mtf_shape tokens = shape_of("batch:%lld,length:1", (long long)batch);
  mtf_shape rows = shape_of("batch:%lld", (long long)batch);
  b->t->tokens = mtf_input_int(g, "decode_tokens", &tokens);
  b->t->positions = mtf_input_int(g, "decode_positions", &rows);
  mtf_dim memory = mtf_dim_make("memory_length", m->length);
  mtf_tensor memory_index = mtf_range(g, &memory);
  b->position_hot = mtf_one_hot(g, b->t->positions, &memory);
  mtf_tensor position = mtf_reduce_sum(g, mtf_multiply(g, b->position_hot, memory_index), &rows);
  b->attend = mtf_less_equal(g, memory_index, position);
  return mtf_add(g, mtf_gather(g, wte, b->t->tokens, "vocab"), mtf_gather(g, wpe, b->t->positions, "length"));
}

/* scale times the mean of a per-position value [batch, length]: over every position, or with data.pack
 * over the positions the loss counts (model/segments.h). */
static mtf_tensor token_mean(builder *b, mtf_tensor per_position, int64_t batch, float scale) {
  if (b->packed) {
    mtf_tensor mean = mtf_segments_mean(b->g, &b->segments, per_position);
    return scale == 1.0f ? mean : mtf_scalar_multiply(b->g, mean, scale);
  }
  mtf_shape scalar = {0};
  float per_token = 1.0f / (float)(batch * b->m->length);
  return mtf_scalar_multiply(b->g, mtf_reduce_sum(b->g, per_position, &scalar), scale * per_token);
}

int mtf_transformer_build(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                          mtf_transformer *out, mtf_error *err) {
  return mtf_transformer_build_mode(g, m, batch, dropout_rate, MTF_MODE_TRAIN, out, err);
}

int mtf_transformer_build_mode(mtf_graph *g, const mtf_model_config *m, int64_t batch, float dropout_rate,
                               mtf_transformer_mode mode, mtf_transformer *out, mtf_error *err) {
  memset(out, 0, sizeof *out);
  out->positions = out->next_logits = out->logits = out->loss = out->token_loss = out->targets = MTF_NO_TENSOR;
  out->segments = out->target_segments = out->segment_positions = out->loss_sum = out->loss_count = MTF_NO_TENSOR;
  out->first_assign = mtf_graph_num_assigns(g);
  builder b = {.g = g, .m = m, .t = out, .dropout = dropout_rate, .dropout_key = 1000, .mode = mode};
  int64_t length = mode == MTF_MODE_DECODE ? 1 : m->length;
  mtf_shape tokens = shape_of("batch:%lld,length:%lld", (long long)batch, (long long)m->length);
  mtf_shape activations = shape_of("batch:%lld,length:%lld,d_model:%lld", (long long)batch, (long long)length,
                                   (long long)m->d_model);
  mtf_shape embed = shape_of("vocab:%lld,d_model:%lld", (long long)m->vocab, (long long)m->d_model);
  mtf_shape positions = shape_of("length:%lld,d_model:%lld", (long long)m->length, (long long)m->d_model);
  if (mtf_moe_layers(m) > 0 && (batch * length) % mtf_moe_group_size(m) != 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "model.moe.group_size (%lld) does not divide the %lld x %lld tokens the "
                         "model is built for: pick a divisor of %lld", (long long)mtf_moe_group_size(m),
                         (long long)batch, (long long)length, (long long)(batch * length));
  out->moe = calloc((size_t)mtf_moe_layers(m) + 1, sizeof *out->moe);
  if (!out->moe) return mtf_error_set(err, MTF_ERR_NOMEM, "out of memory");
  mtf_shape rows = shape_of("batch:%lld", (long long)batch);
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
  mtf_tensor wte = param(&b, "embed/wte", &embed, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor wpe = param(&b, "embed/wpe", &positions, MTF_INIT_NORMAL, 0.1f);
  /* Packed: each token's position in its document picks its row of wpe (renamed, so the lookup's dim is
   * not the ids' own `length`). */
  mtf_tensor position_embedding =
      b.packed ? mtf_gather(g, mtf_rename(g, wpe, "length", "position"), out->segment_positions, "position") : wpe;
  mtf_tensor x = mode == MTF_MODE_DECODE
                     ? decode_inputs(&b, batch, wte, wpe)
                     : dropout(&b, mtf_add(g, mtf_gather(g, wte, out->tokens, "vocab"), position_embedding));
  /* Each layer is a recompute block: with train.recompute: block, its activations are computed again from
   * its input x in the backward pass (mtf_gradients_recompute); otherwise the marks change nothing. */
  for (int layer = 0; layer < m->layers; layer++) {
    mtf_recompute_begin(g);
    x = feed_forward(&b, attention(&b, x, layer, &activations), layer, &activations);
    mtf_recompute_end(g);
  }
  mtf_tensor h = norm(&b, x, "final");
  if (mode != MTF_MODE_TRAIN) {
    /* The next token's logits only: PREFILL picks each row's last prompt position by a one-hot sum (exact),
     * DECODE drops the length:1 dimension. */
    mtf_shape last_shape = shape_of("batch:%lld,d_model:%lld", (long long)batch, (long long)m->d_model);
    mtf_shape next_shape = shape_of("batch:%lld,vocab:%lld", (long long)batch, (long long)m->vocab);
    mtf_dim length_dim = mtf_dim_make("length", m->length);
    mtf_tensor last = mode == MTF_MODE_PREFILL
                          ? mtf_einsum2(g, h, mtf_one_hot(g, out->positions, &length_dim), &last_shape)
                          : mtf_einsum(g, 1, &h, &last_shape);
    out->next_logits = mtf_set_name(g, unembed(&b, last, wte, &next_shape), "next_logits");
    int rc = mtf_graph_status(g, err);
    if (rc) mtf_transformer_free(out);
    return rc;
  }
  mtf_shape logits_shape = shape_of("batch:%lld,length:%lld,vocab:%lld", (long long)batch, (long long)m->length,
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

int mtf_activation_is_gated(const char *activation) {
  return strcmp(activation, "swiglu") == 0 || strcmp(activation, "geglu") == 0;
}

double mtf_transformer_flops_per_token(const mtf_model_config *m, int64_t param_count) {
  double active = (double)(param_count - mtf_moe_inactive_params(m)); /* an MoE token uses k experts of each layer */
  return 6.0 * active + 12.0 * (double)m->layers * (double)m->length * (double)(m->heads * m->d_kv);
}
