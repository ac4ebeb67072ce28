#include "model/attention_block.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

mtf_attention_options mtf_attention_defaults(void) {
  mtf_attention_options o = {.bidirectional = 0, .memory = MTF_NO_TENSOR, .memory_dim = "length",
                             .bias = MTF_NO_TENSOR, .mask = MTF_NO_TENSOR};
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

/* A layer's key or value cache (transient: not model state, never checkpointed), shared by every build of
 * the graph. */
static mtf_tensor cache_variable(const mtf_attention_env *env, const char *prefix, const char *which) {
  const mtf_model_config *m = env->model;
  char name[96];
  snprintf(name, sizeof name, "%s/cache_%s", prefix, which);
  mtf_tensor v = mtf_find_variable(env->g, name);
  if (v != MTF_NO_TENSOR) return v;
  mtf_shape shape = shape_of("batch:%lld,heads:%lld,memory_length:%lld,d_kv:%lld", (long long)env->batch,
                             (long long)m->heads, (long long)m->length, (long long)m->d_kv);
  return mtf_transient_variable(env->g, name, &shape);
}

/* PREFILL: the prompt's keys or values [batch, memory_length, heads, d_kv] become the cache. */
static void cache_fill(const mtf_attention_env *env, const char *prefix, const char *which, mtf_tensor kv) {
  mtf_tensor cache = cache_variable(env, prefix, which);
  mtf_tensor reordered = mtf_einsum(env->g, 1, &kv, mtf_tensor_shape(env->g, cache));
  if (mtf_assign(env->g, cache, reordered) == MTF_OK) (*env->n_assigns)++;
}

/* DECODE: the new key or value [batch, heads, d_kv] written at each row's position along memory_length
 * (write_at: assigned back to the cache variable, it writes in place, one row per (batch, head), not a pass
 * over the cache). Returns the updated cache, which attention reads. */
static mtf_tensor cache_write(const mtf_attention_env *env, const char *prefix, const char *which, mtf_tensor kv) {
  mtf_graph *g = env->g;
  mtf_tensor cache = cache_variable(env, prefix, which);
  mtf_tensor updated = mtf_write_at(g, cache, kv, env->positions, "memory_length");
  if (mtf_assign(g, cache, updated) == MTF_OK) (*env->n_assigns)++;
  return updated;
}

/* DECODE: attention of each row's one new token over its cache prefix (memory positions <= its position);
 * the same function as the training path's row at that position. Returns [batch, d_model]. */
static mtf_tensor decode_attention(const mtf_attention_env *env, mtf_tensor h, const mtf_tensor w[4],
                                   const char *prefix) {
  const mtf_model_config *m = env->model;
  mtf_graph *g = env->g;
  int64_t batch = env->batch;
  mtf_shape bhd = shape_of("batch:%lld,heads:%lld,d_kv:%lld", (long long)batch, (long long)m->heads,
                           (long long)m->d_kv);
  mtf_shape scores_shape = shape_of("batch:%lld,heads:%lld,memory_length:%lld", (long long)batch,
                                    (long long)m->heads, (long long)m->length);
  mtf_shape out_shape = shape_of("batch:%lld,d_model:%lld", (long long)batch, (long long)m->d_model);
  mtf_tensor q = mtf_einsum2(g, h, w[0], &bhd);
  mtf_tensor k = cache_write(env, prefix, "k", mtf_einsum2(g, h, w[1], &bhd));
  mtf_tensor v = cache_write(env, prefix, "v", mtf_einsum2(g, h, w[2], &bhd));
  mtf_tensor scores = mtf_masked_fill(g, mtf_einsum2(g, q, k, &scores_shape), env->attend, -1e9f);
  mtf_tensor o = mtf_einsum2(g, mtf_softmax(g, scores, "memory_length"), v, &bhd);
  return mtf_einsum2(g, o, w[3], &out_shape);
}

mtf_tensor mtf_attention_block(const mtf_attention_env *env, mtf_tensor h, const char *prefix,
                               const mtf_attention_options *options) {
  (void)options;
  const mtf_model_config *m = env->model;
  mtf_graph *g = env->g;
  mtf_shape w_shape = shape_of("d_model:%lld,heads:%lld,d_kv:%lld", (long long)m->d_model, (long long)m->heads,
                               (long long)m->d_kv);
  mtf_shape o_shape = shape_of("heads:%lld,d_kv:%lld,d_model:%lld", (long long)m->heads, (long long)m->d_kv,
                               (long long)m->d_model);
  float in_scale = 1.0f / sqrtf((float)m->d_model);
  mtf_tensor wq = param(env, prefix, "wq", &w_shape, in_scale / sqrtf((float)m->d_kv));
  mtf_tensor wk = param(env, prefix, "wk", &w_shape, in_scale);
  mtf_tensor wv = param(env, prefix, "wv", &w_shape, in_scale);
  mtf_tensor wo = param(env, prefix, "wo", &o_shape, 1.0f / sqrtf((float)(m->heads * m->d_kv)));
  if (env->mode == MTF_MODE_DECODE) {
    const mtf_tensor w[4] = {wq, wk, wv, wo};
    return decode_attention(env, h, w, prefix);
  }

  mtf_shape activations = *mtf_tensor_shape(g, h);
  mtf_shape qkv = shape_of("batch:%lld,length:%lld,heads:%lld,d_kv:%lld", (long long)env->batch,
                           (long long)m->length, (long long)m->heads, (long long)m->d_kv);
  mtf_tensor q = mtf_einsum2(g, h, wq, &qkv);
  mtf_tensor k = mtf_rename(g, mtf_einsum2(g, h, wk, &qkv), "length", "memory_length");
  mtf_tensor v = mtf_rename(g, mtf_einsum2(g, h, wv, &qkv), "length", "memory_length");
  if (env->mode == MTF_MODE_PREFILL) {
    cache_fill(env, prefix, "k", k);
    cache_fill(env, prefix, "v", v);
  }
  mtf_tensor o;
  if (m->fused_attention) {
    /* The same function, dropout mask included (the same key), without the [batch, heads, length,
     * memory_length] tensors; the scores' scale is in wq's initialisation. */
    o = mtf_causal_attention(g, q, k, v, "length", "memory_length", "d_kv", 1.0f, env->dropout,
                             (*env->dropout_key)++);
  } else {
    mtf_shape logits_shape = shape_of("batch:%lld,heads:%lld,length:%lld,memory_length:%lld",
                                      (long long)env->batch, (long long)m->heads, (long long)m->length,
                                      (long long)m->length);
    mtf_tensor logits = mtf_causal_mask(g, mtf_einsum2(g, q, k, &logits_shape), "length", "memory_length");
    mtf_tensor weights = dropout(env, mtf_softmax(g, logits, "memory_length"));
    o = mtf_einsum2(g, weights, v, &qkv);
  }
  return mtf_einsum2(g, o, wo, &activations);
}
