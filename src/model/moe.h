/* The mixture-of-experts feed-forward layer (model.moe), after Mesh TensorFlow's moe.py
 * (transformer_moe_layer_v1 with _top_2_gating / _switch_gating).
 *
 * Tokens [batch, length, d_model] are cut into groups of group_size: [batch: groups, group: group_size,
 * d_model] (the groups keep the name `batch`, so the layout that splits the batch splits them). A router
 * [d_model, experts_unsplit] gives each token a softmax over the experts; top2 sends it to its two best
 * experts with gates renormalised over the two, switch to its best with the gate as it is. Each expert
 * takes at most `capacity` tokens of a group, first choices of all tokens before second choices, tokens in
 * order (exclusive cumulative sums); the rest are dropped (their gate is 0: the residual carries them).
 * dispatch and combine [batch, group, experts_unsplit, capacity] move tokens to the experts and back:
 *
 *   expert inputs [experts_unsplit, batch, capacity, d_model]  (einsum of dispatch and the tokens)
 *     -> reshape to [experts, batch_unsplit, capacity, d_model]  (the split moves from batch to experts:
 *        the alltoall of expert parallelism when the layout maps both to one mesh axis)
 *     -> wi [experts, d_model, d_ff], activation, wo [experts, d_ff, d_model]
 *     -> reshape back, einsum with combine to [batch, group, d_model] -> [batch, length, d_model].
 *
 * No tensor has two dimensions that a layout `batch:b;experts:b` maps to one axis: the router side uses
 * experts_unsplit, the expert side batch_unsplit. Layouts: `batch:b;experts:b` (expert parallelism),
 * `batch:b;experts:b;d_ff:m` (and model parallelism inside each expert); without `experts:<the batch
 * axis>` every rank computes every expert on all groups (correct, not parallel).
 *
 * capacity = min(group_size, ceil(group_size * k * capacity_factor / experts)), k = 2 (top2) or 1
 * (switch); dropless: capacity = group_size, no token is ever dropped. Losses (unweighted here; the
 * transformer adds them times model.moe.aux_loss and router_z_loss): the load-balancing loss experts *
 * sum_e (fraction of the group's tokens whose first choice is e) * (mean router probability of e),
 * averaged over groups; the router z-loss, the mean over tokens of logsumexp(router logits)^2.
 *
 * Variables: layer_NNN/moe/{router [d_model, experts_unsplit], wi, wo} (the norm before it,
 * layer_NNN/moe/norm_scale, is the transformer's). */
#ifndef MTF_MODEL_MOE_H
#define MTF_MODEL_MOE_H

#include "config/config.h"
#include "mtf.h"

/* Makes (or finds) a variable of the model: the transformer's parameter list keeps it. */
typedef mtf_tensor (*mtf_moe_param_fn)(void *ctx, const char *name, const mtf_shape *shape, mtf_init init, float scale);

typedef struct mtf_moe_layer {
  int layer;
  mtf_tensor output;        /* [batch, length, d_model]: the layer's output, before dropout and the residual */
  mtf_tensor aux_loss;      /* scalar load-balancing loss */
  mtf_tensor router_z_loss; /* scalar */
  mtf_tensor dropped;       /* scalar: fraction of the (token, choice) routings beyond capacity (no gradient) */
  mtf_tensor max_load;      /* scalar: the busiest expert's routings (before capacity) over the mean */
} mtf_moe_layer;

/* Whether layer (from 0) has an MoE feed-forward: experts > 0 and (layer + 1) % every == 0. */
int mtf_moe_is_layer(const mtf_model_config *m, int layer);
int mtf_moe_layers(const mtf_model_config *m);
/* Experts per token: 2 (top2) or 1 (switch). */
int mtf_moe_k(const mtf_model_config *m);
int64_t mtf_moe_group_size(const mtf_model_config *m);
/* Tokens per expert and group, from capacity_factor (or group_size when dropless). */
int64_t mtf_moe_capacity(const mtf_model_config *m);
/* Parameters of all MoE layers that a token does not use (experts - k of each): not in the FLOPs. */
int64_t mtf_moe_inactive_params(const mtf_model_config *m);

/* The layer on normalised activations x [batch, length, d_model] (batch * length a multiple of
 * group_size). Errors are kept in the graph, as for any builder call. */
mtf_moe_layer mtf_moe_feed_forward(mtf_graph *g, const mtf_model_config *m, mtf_tensor x, int layer,
                                   mtf_moe_param_fn param, void *ctx);

#endif
