#include "model/attention_block.h"

#include "model/blocks.h"
#include "model/position.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

mtf_attention_options mtf_attention_defaults(void) {
  mtf_attention_options o = {.bidirectional = 0, .rotary = 0, .memory = MTF_NO_TENSOR, .memory_dim = "length",
                             .bias = MTF_NO_TENSOR, .mask = MTF_NO_TENSOR, .segments = MTF_NO_TENSOR};
  return o;
}

static mtf_tensor param(const mtf_attention_env *env, const char *prefix, const char *which, const mtf_shape *shape,
                        float scale) {
  char name[96];
  snprintf(name, sizeof name, "%s/%s", prefix, which);
  return env->param(env->param_ctx, name, shape, MTF_INIT_NORMAL, scale);
}

static mtf_tensor dropout(const mtf_attention_env *env, mtf_tensor x) {
  return mtf_dropout(env->g, x, env->dropout, (*env->dropout_key)++);
}

/* The dimension of the key/value heads: `heads` when there are as many as query heads (every model before
 * kv_heads, so their variables keep their shapes), else `kv_heads`. */
static const char *kv_dim(const mtf_model_config *m) { return m->kv_heads < m->heads ? "kv_heads" : "heads"; }

/* A layer's key or value cache [batch, kv heads, memory_length, d_kv] (transient: not model state, never
 * checkpointed), shared by every build of the graph. It holds kv_heads heads, not heads: what multi-query
 * and grouped attention save. */
static mtf_tensor cache_variable(const mtf_attention_env *env, const char *prefix, const char *which) {
  const mtf_model_config *m = env->model;
  char name[96];
  snprintf(name, sizeof name, "%s/cache_%s", prefix, which);
  mtf_tensor v = mtf_find_variable(env->g, name);
  if (v != MTF_NO_TENSOR) return v;
  mtf_shape shape = mtf_model_shape("batch:%lld,%s:%lld,memory_length:%lld,d_kv:%lld", (long long)env->batch, kv_dim(m),
                             (long long)m->kv_heads, (long long)m->length, (long long)m->d_kv);
  return mtf_transient_variable(env->g, name, &shape);
}

/* PREFILL: the prompt's keys or values [batch, memory_length, kv heads, d_kv] become the cache. */
static void cache_fill(const mtf_attention_env *env, const char *prefix, const char *which, mtf_tensor kv) {
  mtf_tensor cache = cache_variable(env, prefix, which);
  mtf_tensor reordered = mtf_einsum(env->g, 1, &kv, mtf_tensor_shape(env->g, cache));
  if (mtf_assign(env->g, cache, reordered) == MTF_OK) (*env->n_assigns)++;
}

/* DECODE: the new key or value [batch, kv heads, d_kv] written at each row's position along memory_length
 * (write_at: assigned back to the cache variable, it writes in place, one row per (batch, head), not a pass
 * over the cache). Returns the updated cache, which attention reads. */
static mtf_tensor cache_write(const mtf_attention_env *env, const char *prefix, const char *which, mtf_tensor kv) {
  mtf_graph *g = env->g;
  mtf_tensor cache = cache_variable(env, prefix, which);
  mtf_tensor updated = mtf_write_at(g, cache, kv, env->positions, "memory_length");
  if (mtf_assign(g, cache, updated) == MTF_OK) (*env->n_assigns)++;
  return updated;
}

/* [kv_heads, q_group]: the query heads of each K/V head, in the order of heads. */
static mtf_shape grouped_heads(const mtf_model_config *m) {
  return mtf_model_shape("kv_heads:%lld,q_group:%lld", (long long)m->kv_heads, (long long)(m->heads / m->kv_heads));
}

/* Grouped keys or values [..., kv_heads, ...] as [..., heads, ...]: query head h reads key/value head
 * h / (heads / kv_heads). A broadcast to [..., kv_heads, q_group, ...] and a reshape of that run into
 * heads: with heads split and kv_heads not, each rank takes the slice its query heads read (the K/V heads
 * replicated, the multi-query way); with both split on one axis (kv_heads divisible by it) the groups are
 * already local. Identity when there are as many K/V heads as query heads. */
static mtf_tensor expand_heads(const mtf_attention_env *env, mtf_tensor x) {
  const mtf_model_config *m = env->model;
  if (m->kv_heads == m->heads) return x;
  mtf_graph *g = env->g;
  const mtf_shape *shape = mtf_tensor_shape(g, x);
  if (!shape) return x; /* an earlier error, kept in the graph */
  int at = mtf_shape_index_of(shape, "kv_heads");
  if (at < 0) return mtf_add(g, x, MTF_NO_TENSOR);
  mtf_shape wide = *shape;
  for (int d = wide.rank; d > at + 1; d--) wide.dims[d] = wide.dims[d - 1];
  wide.dims[at + 1] = mtf_dim_make("q_group", m->heads / m->kv_heads);
  wide.rank++;
  mtf_shape grouped = grouped_heads(m);
  mtf_shape heads = mtf_model_shape("heads:%lld", (long long)m->heads);
  return mtf_replace_dimensions(g, mtf_broadcast(g, x, &wide), &grouped, &heads);
}

/* DECODE with grouped K/V heads: x's heads as [kv_heads, q_group] (join: back), so the scores read the
 * cache of kv_heads heads as it is instead of a copy broadcast to every query head. */
static mtf_tensor regroup_heads(const mtf_attention_env *env, mtf_tensor x, int join) {
  const mtf_model_config *m = env->model;
  const mtf_shape *shape = mtf_tensor_shape(env->g, x);
  if (m->kv_heads == m->heads || !shape || mtf_shape_index_of(shape, join ? "q_group" : "heads") < 0) return x;
  mtf_shape grouped = grouped_heads(m);
  mtf_shape heads = mtf_model_shape("heads:%lld", (long long)m->heads);
  return join ? mtf_replace_dimensions(env->g, x, &grouped, &heads)
              : mtf_replace_dimensions(env->g, x, &heads, &grouped);
}

/* DECODE: attention of each row's one new token over its cache prefix (memory positions <= its position);
 * the same function as the training path's row at that position. Returns [batch, d_model]. */
static mtf_tensor decode_attention(const mtf_attention_env *env, mtf_tensor h, const mtf_tensor w[4],
                                   const char *prefix, const mtf_attention_options *options) {
  const mtf_model_config *m = env->model;
  mtf_graph *g = env->g;
  int64_t batch = env->batch;
  mtf_shape bhd = mtf_model_shape("batch:%lld,heads:%lld,d_kv:%lld", (long long)batch, (long long)m->heads,
                           (long long)m->d_kv);
  mtf_shape bkd = mtf_model_shape("batch:%lld,%s:%lld,d_kv:%lld", (long long)batch, kv_dim(m), (long long)m->kv_heads,
                           (long long)m->d_kv);
  mtf_shape out_shape = mtf_model_shape("batch:%lld,d_model:%lld", (long long)batch, (long long)m->d_model);
  mtf_tensor q = mtf_einsum2(g, h, w[0], &bhd), k, v;
  int64_t memory_length = m->length;
  if (options->memory != MTF_NO_TENSOR) { /* cross-attention: the memory's keys and values, not cached */
    const mtf_shape *ms = mtf_tensor_shape(g, options->memory);
    int at = ms ? mtf_shape_index_of(ms, options->memory_dim) : -1;
    memory_length = at >= 0 ? ms->dims[at].size : 0;
    mtf_shape kv = mtf_model_shape("batch:%lld,%s:%lld,%s:%lld,d_kv:%lld", (long long)batch, options->memory_dim,
                            (long long)memory_length, kv_dim(m), (long long)m->kv_heads, (long long)m->d_kv);
    k = mtf_rename(g, mtf_einsum2(g, options->memory, w[1], &kv), options->memory_dim, "memory_length");
    v = mtf_rename(g, mtf_einsum2(g, options->memory, w[2], &kv), options->memory_dim, "memory_length");
  } else {
    mtf_tensor k_new = mtf_einsum2(g, h, w[1], &bkd);
    if (options->rotary) {
      mtf_tensor position = mtf_to_float(g, env->positions);
      q = mtf_rotary(g, q, position, "d_kv");
      k_new = mtf_rotary(g, k_new, position, "d_kv");
    }
    k = cache_write(env, prefix, "k", k_new);
    v = cache_write(env, prefix, "v", mtf_einsum2(g, h, w[2], &bkd));
  }
  char heads[96];
  if (m->kv_heads < m->heads)
    snprintf(heads, sizeof heads, "kv_heads:%lld,q_group:%lld", (long long)m->kv_heads,
             (long long)(m->heads / m->kv_heads));
  else
    snprintf(heads, sizeof heads, "heads:%lld", (long long)m->heads);
  mtf_shape scores_shape = mtf_model_shape("batch:%lld,%s,memory_length:%lld", (long long)batch, heads,
                                    (long long)memory_length);
  mtf_shape o_shape = mtf_model_shape("batch:%lld,%s,d_kv:%lld", (long long)batch, heads, (long long)m->d_kv);
  mtf_tensor scores = mtf_einsum2(g, regroup_heads(env, q, 0), k, &scores_shape);
  if (options->bias != MTF_NO_TENSOR) scores = mtf_add(g, scores, regroup_heads(env, options->bias, 0));
  if (!options->bidirectional && options->memory == MTF_NO_TENSOR)
    scores = mtf_masked_fill(g, scores, env->attend, -1e9f);
  if (options->mask != MTF_NO_TENSOR) scores = mtf_masked_fill(g, scores, options->mask, -1e9f);
  mtf_tensor o = mtf_einsum2(g, mtf_softmax(g, scores, "memory_length"), v, &o_shape);
  return mtf_einsum2(g, regroup_heads(env, o, 1), w[3], &out_shape);
}

mtf_tensor mtf_attention_block(const mtf_attention_env *env, mtf_tensor h, const char *prefix,
                               const mtf_attention_options *options) {
  const mtf_model_config *m = env->model;
  mtf_graph *g = env->g;
  mtf_shape q_shape = mtf_model_shape("d_model:%lld,heads:%lld,d_kv:%lld", (long long)m->d_model, (long long)m->heads,
                               (long long)m->d_kv);
  mtf_shape kv_shape = mtf_model_shape("d_model:%lld,%s:%lld,d_kv:%lld", (long long)m->d_model, kv_dim(m),
                                (long long)m->kv_heads, (long long)m->d_kv);
  mtf_shape o_shape = mtf_model_shape("heads:%lld,d_kv:%lld,d_model:%lld", (long long)m->heads, (long long)m->d_kv,
                               (long long)m->d_model);
  float in_scale = 1.0f / sqrtf((float)m->d_model);
  mtf_tensor wq = param(env, prefix, "wq", &q_shape, in_scale / sqrtf((float)m->d_kv));
  mtf_tensor wk = param(env, prefix, "wk", &kv_shape, in_scale);
  mtf_tensor wv = param(env, prefix, "wv", &kv_shape, in_scale);
  mtf_tensor wo = param(env, prefix, "wo", &o_shape, 1.0f / sqrtf((float)(m->heads * m->d_kv)));
  if (env->mode == MTF_MODE_DECODE) {
    const mtf_tensor w[4] = {wq, wk, wv, wo};
    return decode_attention(env, h, w, prefix, options);
  }

  if (!mtf_tensor_shape(g, h)) return h; /* an earlier error, kept in the graph */
  mtf_shape activations = *mtf_tensor_shape(g, h);
  int self = options->memory == MTF_NO_TENSOR;
  mtf_tensor source = self ? h : options->memory;
  const char *source_dim = self ? "length" : options->memory_dim;
  const mtf_shape *source_shape = mtf_tensor_shape(g, source);
  int at = source_shape ? mtf_shape_index_of(source_shape, source_dim) : -1;
  int64_t memory_length = at >= 0 ? source_shape->dims[at].size : 0;
  mtf_shape q_out = mtf_model_shape("batch:%lld,length:%lld,heads:%lld,d_kv:%lld", (long long)env->batch,
                             (long long)m->length, (long long)m->heads, (long long)m->d_kv);
  mtf_shape kv_out = mtf_model_shape("batch:%lld,%s:%lld,%s:%lld,d_kv:%lld", (long long)env->batch, source_dim,
                              (long long)memory_length, kv_dim(m), (long long)m->kv_heads, (long long)m->d_kv);
  mtf_tensor q = mtf_einsum2(g, h, wq, &q_out);
  mtf_tensor k = mtf_rename(g, mtf_einsum2(g, source, wk, &kv_out), source_dim, "memory_length");
  mtf_tensor v = mtf_rename(g, mtf_einsum2(g, source, wv, &kv_out), source_dim, "memory_length");
  if (options->rotary) {
    mtf_dim query_dim = mtf_dim_make("length", m->length), memory_dim = mtf_dim_make("memory_length", memory_length);
    q = mtf_rotary(g, q, mtf_range(g, &query_dim), "d_kv");
    k = mtf_rotary(g, k, mtf_range(g, &memory_dim), "d_kv");
  }
  if (env->mode == MTF_MODE_PREFILL && self) {
    cache_fill(env, prefix, "k", k);
    cache_fill(env, prefix, "v", v);
  }
  k = expand_heads(env, k);
  v = expand_heads(env, v);
  mtf_tensor o;
  int fusable = self && (options->mask == MTF_NO_TENSOR || options->segments != MTF_NO_TENSOR);
  if (m->fused_attention && fusable) {
    /* The same function, bias, document mask and dropout mask included (the same key), without the [batch,
     * heads, length, memory_length] tensors; the scores' scale is in wq's initialisation. */
    mtf_fused_attention_options fused = {"length", "memory_length", "d_kv", !options->bidirectional, 1.0f, env->dropout,
                                         (*env->dropout_key)++, options->bias, options->segments};
    o = mtf_fused_attention(g, q, k, v, &fused);
  } else {
    mtf_shape logits_shape = mtf_model_shape("batch:%lld,heads:%lld,length:%lld,memory_length:%lld",
                                      (long long)env->batch, (long long)m->heads, (long long)m->length,
                                      (long long)memory_length);
    mtf_tensor logits = mtf_einsum2(g, q, k, &logits_shape);
    if (options->bias != MTF_NO_TENSOR) logits = mtf_add(g, logits, options->bias);
    if (self && !options->bidirectional) logits = mtf_causal_mask(g, logits, "length", "memory_length");
    if (options->mask != MTF_NO_TENSOR) logits = mtf_masked_fill(g, logits, options->mask, -1e9f);
    mtf_tensor weights = dropout(env, mtf_softmax(g, logits, "memory_length"));
    o = mtf_einsum2(g, weights, v, &q_out);
  }
  return mtf_einsum2(g, o, wo, &activations);
}
