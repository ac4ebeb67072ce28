#include "model/moe.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


int mtf_moe_is_layer(const mtf_model_config *m, int layer) {
  return m->moe.experts > 0 && m->moe.every > 0 && (layer + 1) % m->moe.every == 0;
}

int mtf_moe_layers(const mtf_model_config *m) {
  int n = 0;
  for (int layer = 0; layer < m->layers; layer++) n += mtf_moe_is_layer(m, layer);
  return n;
}

int mtf_moe_k(const mtf_model_config *m) { return m->moe.gating == MTF_GATING_SWITCH ? 1 : 2; }

int64_t mtf_moe_group_size(const mtf_model_config *m) { return m->moe.group_size > 0 ? m->moe.group_size : m->length; }

int64_t mtf_moe_capacity(const mtf_model_config *m) {
  int64_t group = mtf_moe_group_size(m);
  if (m->moe.dropless || m->moe.experts <= 0) return group;
  double wanted = ceil((double)group * mtf_moe_k(m) * m->moe.capacity_factor / (double)m->moe.experts);
  int64_t capacity = wanted < 1 ? 1 : (int64_t)wanted;
  return capacity < group ? capacity : group;
}

int64_t mtf_moe_inactive_params(const mtf_model_config *m) {
  if (m->moe.experts <= 0) return 0;
  int64_t unused = m->moe.experts - mtf_moe_k(m);
  return (int64_t)mtf_moe_layers(m) * (unused > 0 ? unused : 0) * 2 * m->d_model * m->d_ff;
}

static mtf_shape shape_of(int n, ...) {
  mtf_shape s;
  memset(&s, 0, sizeof s);
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) s.dims[s.rank++] = *va_arg(ap, const mtf_dim *);
  va_end(ap);
  return s;
}

/* 1 where dim `k` is i (a [k] tensor): picks one choice out of [..., top_k, ...]. */
static mtf_tensor unit(mtf_graph *g, const mtf_dim *k, int i) {
  mtf_shape scalar = {0};
  return mtf_equal(g, mtf_range(g, k), mtf_constant(g, &scalar, (float)i));
}

mtf_moe_layer mtf_moe_feed_forward(mtf_graph *g, const mtf_model_config *m, mtf_tensor x, int layer,
                                   mtf_moe_param_fn param, void *ctx) {
  mtf_moe_layer out = {.layer = layer, .output = MTF_NO_TENSOR, .aux_loss = MTF_NO_TENSOR,
                       .router_z_loss = MTF_NO_TENSOR, .dropped = MTF_NO_TENSOR, .max_load = MTF_NO_TENSOR};
  const mtf_shape *xs = mtf_tensor_shape(g, x);
  if (!xs || xs->rank != 3) return out;
  const mtf_shape activations = *xs;
  int64_t tokens_n = activations.dims[0].size * activations.dims[1].size, S = mtf_moe_group_size(m);
  int64_t E = m->moe.experts, K = mtf_moe_k(m), C = mtf_moe_capacity(m), G = tokens_n / S;
  mtf_dim batch = mtf_dim_make("batch", G), group = mtf_dim_make("group", S), d_model = activations.dims[2];
  mtf_dim experts_unsplit = mtf_dim_make("experts_unsplit", E), experts = mtf_dim_make("experts", E);
  mtf_dim batch_unsplit = mtf_dim_make("batch_unsplit", G), capacity = mtf_dim_make("capacity", C);
  mtf_dim top = mtf_dim_make("top_k", K), d_ff = mtf_dim_make("d_ff", m->d_ff);
  mtf_shape scalar = {0};
  char name[96];

  /* Groups of tokens. One sequence per group is a rename (no data moves); otherwise a reshape. */
  mtf_shape grouped = shape_of(3, &batch, &group, &d_model);
  mtf_tensor tokens = S == activations.dims[1].size && G == activations.dims[0].size
                          ? mtf_rename(g, x, activations.dims[1].name, "group")
                          : mtf_reshape(g, x, &grouped);

  /* The router: a softmax over the experts per token, and each token's k best. */
  snprintf(name, sizeof name, "layer_%03d/moe/router", layer);
  mtf_shape router_shape = shape_of(2, &d_model, &experts_unsplit);
  mtf_tensor router = param(ctx, name, &router_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)d_model.size));
  mtf_shape logits_shape = shape_of(3, &batch, &group, &experts_unsplit);
  mtf_tensor logits = mtf_einsum2(g, tokens, router, &logits_shape);
  mtf_tensor probs = mtf_softmax(g, logits, "experts_unsplit");
  mtf_tensor choice = MTF_NO_TENSOR;
  mtf_tensor best = mtf_top_k(g, probs, "experts_unsplit", &top, &choice); /* [batch, group, top_k] */
  mtf_tensor gates = K > 1 ? mtf_divide(g, best, mtf_scalar_add(g, mtf_reduce_sum_dim(g, best, "top_k"), 1e-9f)) : best;
  mtf_tensor mask = mtf_one_hot(g, choice, &experts_unsplit); /* [batch, group, top_k, experts_unsplit] */

  /* Positions in the experts: every token's first choice before any second choice, tokens in order; the
   * routings at or past capacity are dropped. */
  mtf_tensor per_choice = mtf_reduce_sum_dim(g, mask, "group"); /* [batch, top_k, experts_unsplit] */
  mtf_tensor earlier = mtf_add(g, mtf_cumsum(g, mask, "group", 1), mtf_cumsum(g, per_choice, "top_k", 1));
  mtf_tensor position = mtf_multiply(g, earlier, mask);
  mtf_tensor kept = mtf_multiply(g, mask, mtf_less(g, position, mtf_constant(g, &scalar, (float)C)));
  /* [batch, group, top_k, capacity]: positions past capacity have no slot */
  mtf_tensor slot = mtf_one_hot(g, mtf_reduce_sum_dim(g, position, "experts_unsplit"), &capacity);
  mtf_shape routes = shape_of(4, &batch, &group, &experts_unsplit, &capacity);
  mtf_tensor dispatch = mtf_stop_gradient(g, mtf_einsum2(g, kept, slot, &routes));
  mtf_tensor combine = mtf_einsum2(g, mtf_multiply(g, kept, gates), slot, &routes);

  /* The experts. The reshape moves the split of the groups (batch) to the experts. */
  mtf_shape in_shape = shape_of(4, &experts_unsplit, &batch, &capacity, &d_model);
  mtf_shape moved_shape = shape_of(4, &experts, &batch_unsplit, &capacity, &d_model);
  mtf_shape hidden_shape = shape_of(4, &experts, &batch_unsplit, &capacity, &d_ff);
  mtf_tensor expert_in = mtf_reshape(g, mtf_einsum2(g, dispatch, tokens, &in_shape), &moved_shape);
  mtf_shape wi_shape = shape_of(3, &experts, &d_model, &d_ff), wo_shape = shape_of(3, &experts, &d_ff, &d_model);
  snprintf(name, sizeof name, "layer_%03d/moe/wi", layer);
  mtf_tensor wi = param(ctx, name, &wi_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)d_model.size));
  snprintf(name, sizeof name, "layer_%03d/moe/wo", layer);
  mtf_tensor wo = param(ctx, name, &wo_shape, MTF_INIT_NORMAL, 1.0f / sqrtf((float)d_ff.size));
  mtf_tensor pre = mtf_einsum2(g, expert_in, wi, &hidden_shape);
  mtf_tensor act = m->activation == MTF_ACTIVATION_RELU ? mtf_relu(g, pre) : mtf_gelu(g, pre);
  mtf_tensor expert_out = mtf_reshape(g, mtf_einsum2(g, act, wo, &moved_shape), &in_shape);
  mtf_tensor combined = mtf_einsum2(g, expert_out, combine, &grouped);
  out.output = S == activations.dims[1].size && G == activations.dims[0].size
                   ? mtf_rename(g, combined, "group", activations.dims[1].name)
                   : mtf_reshape(g, combined, &activations);

  /* Load balancing: experts * sum_e density_e * mean probability_e, averaged over groups, with density the
   * fraction of the group's tokens whose first choice is e. */
  /* [batch, group, experts_unsplit]: the first choices alone */
  mtf_tensor first = mtf_reduce_sum_dim(g, mtf_multiply(g, mask, unit(g, &top, 0)), "top_k");
  mtf_tensor density = mtf_reduce_sum_dim(g, first, "group"), proxy = mtf_reduce_sum_dim(g, probs, "group");
  out.aux_loss = mtf_reduce_sum(g, mtf_multiply(g, density, proxy), &scalar);
  out.aux_loss = mtf_scalar_multiply(g, out.aux_loss, (float)((double)E / ((double)G * (double)S * (double)S)));
  mtf_tensor lse = mtf_logsumexp(g, logits, "experts_unsplit");
  out.router_z_loss = mtf_scalar_multiply(g, mtf_reduce_sum(g, mtf_square(g, lse), &scalar), 1.0f / (float)tokens_n);

  /* Metrics (no gradient): routings dropped, and the busiest expert against the mean. */
  double routings = (double)tokens_n * (double)K;
  mtf_tensor kept_all = mtf_reduce_sum(g, mtf_stop_gradient(g, kept), &scalar);
  out.dropped = mtf_scalar_add(g, mtf_scalar_multiply(g, kept_all, (float)(-1.0 / routings)), 1.0f);
  mtf_shape per_expert = shape_of(1, &experts_unsplit);
  mtf_tensor load = mtf_reduce_sum(g, mtf_stop_gradient(g, mask), &per_expert);
  out.max_load = mtf_scalar_multiply(g, mtf_reduce_max(g, load, &scalar), (float)((double)E / routings));
  snprintf(name, sizeof name, "layer_%03d/moe/aux_loss", layer);
  mtf_set_name(g, out.aux_loss, name);
  snprintf(name, sizeof name, "layer_%03d/moe/dropped", layer);
  mtf_set_name(g, out.dropped, name);
  snprintf(name, sizeof name, "layer_%03d/moe/max_load", layer);
  mtf_set_name(g, out.max_load, name);
  return out;
}
