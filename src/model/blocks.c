#include "model/blocks.h"

#include "model/position.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mtf_shape mtf_model_shape(const char *fmt, ...) {
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

mtf_tensor mtf_model_param(mtf_model_builder *b, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
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

mtf_tensor mtf_model_tied_logits(mtf_model_builder *b, mtf_tensor h, mtf_tensor wte, const mtf_shape *shape) {
  float scale = 1.0f / sqrtf((float)b->m->d_model);
  if (mtf_graph_matmul_dtype(b->g) == MTF_BF16) return mtf_einsum2(b->g, mtf_scalar_multiply(b->g, h, scale), wte, shape);
  return mtf_scalar_multiply(b->g, mtf_einsum2(b->g, h, wte, shape), scale);
}

mtf_tensor mtf_model_param_fn(void *ctx, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  return mtf_model_param(ctx, name, shape, init, scale);
}

mtf_tensor mtf_model_dropout(mtf_model_builder *b, mtf_tensor x) {
  return mtf_dropout(b->g, x, b->dropout, b->dropout_key++);
}

mtf_tensor mtf_model_norm(mtf_model_builder *b, mtf_tensor x, const char *prefix) {
  char name[96];
  mtf_shape d = mtf_model_shape("d_model:%lld", (long long)b->m->d_model);
  snprintf(name, sizeof name, "%s/norm_scale", prefix);
  mtf_tensor scale = mtf_model_param(b, name, &d, MTF_INIT_ONES, 1.0f);
  if (b->m->norm == MTF_NORM_LAYER) {
    snprintf(name, sizeof name, "%s/norm_bias", prefix);
    return mtf_layer_norm(b->g, x, "d_model", scale, mtf_model_param(b, name, &d, MTF_INIT_ZEROS, 0.0f), 1e-6f);
  }
  return mtf_rms_norm(b->g, x, "d_model", scale, 1e-6f);
}

mtf_tensor mtf_model_feed_forward(mtf_model_builder *b, mtf_tensor x, const char *prefix,
                                  const mtf_shape *activations) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  char name[96];
  mtf_tensor h = mtf_model_norm(b, x, prefix);
  mtf_shape wi_shape = mtf_model_shape("d_model:%lld,d_ff:%lld", (long long)m->d_model, (long long)m->d_ff);
  mtf_shape wo_shape = mtf_model_shape("d_ff:%lld,d_model:%lld", (long long)m->d_ff, (long long)m->d_model);
  float in_scale = 1.0f / sqrtf((float)m->d_model);
  mtf_shape hidden = *activations;
  hidden.dims[2] = mtf_dim_make("d_ff", m->d_ff);
  mtf_tensor act;
  if (mtf_activation_is_gated(m->activation)) {
    /* Shazeer's GLU variants (T5 v1.1): act(h wi_0) * (h wi_1), act = swish (x sigmoid(x)) or gelu. */
    snprintf(name, sizeof name, "%s/wi_0", prefix);
    mtf_tensor wi_0 = mtf_model_param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    snprintf(name, sizeof name, "%s/wi_1", prefix);
    mtf_tensor wi_1 = mtf_model_param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    mtf_tensor gate = mtf_einsum2(g, h, wi_0, &hidden), linear = mtf_einsum2(g, h, wi_1, &hidden);
    gate = m->activation == MTF_ACTIVATION_SWIGLU ? mtf_swish(g, gate) : mtf_gelu(g, gate);
    act = mtf_multiply(g, gate, linear);
  } else {
    snprintf(name, sizeof name, "%s/wi", prefix);
    mtf_tensor wi = mtf_model_param(b, name, &wi_shape, MTF_INIT_NORMAL, in_scale);
    mtf_tensor pre = mtf_einsum2(g, h, wi, &hidden);
    act = m->activation == MTF_ACTIVATION_RELU ? mtf_relu(g, pre) : mtf_gelu(g, pre);
  }
  /* Made after the input projections: variables keep the order of earlier versions (checkpoints list them,
   * and a restore reports the first that differs). */
  snprintf(name, sizeof name, "%s/wo", prefix);
  mtf_tensor wo = mtf_model_param(b, name, &wo_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)m->d_ff));
  return mtf_add(g, x, mtf_model_dropout(b, mtf_einsum2(g, mtf_model_dropout(b, act), wo, activations)));
}

mtf_tensor mtf_model_relative_bias(mtf_model_builder *b, const char *name, mtf_tensor query_position,
                                   int bidirectional) {
  const mtf_model_config *m = b->m;
  mtf_graph *g = b->g;
  mtf_shape table_shape = mtf_model_shape("heads:%lld,relative_buckets:%lld", (long long)m->heads,
                                          (long long)m->relative_num_buckets);
  mtf_tensor table = mtf_model_param(b, name, &table_shape, MTF_INIT_NORMAL, 0.1f);
  mtf_dim memory = mtf_dim_make("memory_length", m->length);
  mtf_tensor relative = mtf_subtract(g, mtf_range(g, &memory), query_position);
  return mtf_relative_bias(g, table, relative, bidirectional, m->relative_num_buckets, m->relative_max_distance,
                           m->length - 1);
}
