/* Composite ops: each is a small subgraph of primitives, so it lowers (communication included) and
 * differentiates exactly like them. Fused kernels can replace them later behind the same API. */
#include "graph/graph.h"

#include <string.h>

static const mtf_dim *find_dim(mtf_graph *g, mtf_tensor x, const char *dim, const char *op) {
  if (!mtf_graph_check(g, x, op)) return NULL;
  int i = mtf_shape_index_of(&g->nodes[x].shape, dim);
  if (i < 0) {
    char s[MTF_SHAPE_STR_MAX];
    mtf_graph_fail(g, MTF_ERR_INVALID, "%s of '%s' %s: no dimension '%s'", op, g->nodes[x].name,
                   mtf_shape_format(&g->nodes[x].shape, s, sizeof s), dim);
    return NULL;
  }
  return &g->nodes[x].shape.dims[i];
}

mtf_tensor mtf_logsumexp(mtf_graph *g, mtf_tensor x, const char *dim) {
  if (!find_dim(g, x, dim, "logsumexp")) return MTF_NO_TENSOR;
  /* The max only keeps exp() in range; it carries no gradient of its own. */
  mtf_tensor max = mtf_stop_gradient(g, mtf_reduce_max_dim(g, x, dim));
  mtf_tensor sum = mtf_reduce_sum_dim(g, mtf_exp(g, mtf_subtract(g, x, max)), dim);
  return mtf_add(g, mtf_log(g, sum), max);
}

mtf_tensor mtf_log_softmax(mtf_graph *g, mtf_tensor x, const char *dim) {
  return mtf_subtract(g, x, mtf_logsumexp(g, x, dim));
}

mtf_tensor mtf_softmax(mtf_graph *g, mtf_tensor x, const char *dim) { return mtf_exp(g, mtf_log_softmax(g, x, dim)); }

mtf_tensor mtf_rms_norm(mtf_graph *g, mtf_tensor x, const char *dim, mtf_tensor scale, float epsilon) {
  mtf_shape reduced;
  if (!find_dim(g, x, dim, "rms_norm") || mtf_shape_remove(&g->nodes[x].shape, dim, &reduced, NULL)) return MTF_NO_TENSOR;
  mtf_tensor mean_square = mtf_reduce_mean(g, mtf_square(g, x), &reduced);
  mtf_tensor y = mtf_multiply(g, x, mtf_rsqrt(g, mtf_scalar_add(g, mean_square, epsilon)));
  return scale == MTF_NO_TENSOR ? y : mtf_multiply(g, y, scale);
}

mtf_tensor mtf_layer_norm(mtf_graph *g, mtf_tensor x, const char *dim, mtf_tensor scale, mtf_tensor bias,
                          float epsilon) {
  mtf_shape reduced;
  if (!find_dim(g, x, dim, "layer_norm") || mtf_shape_remove(&g->nodes[x].shape, dim, &reduced, NULL)) return MTF_NO_TENSOR;
  mtf_tensor centred = mtf_subtract(g, x, mtf_reduce_mean(g, x, &reduced));
  mtf_tensor variance = mtf_reduce_mean(g, mtf_square(g, centred), &reduced);
  mtf_tensor y = mtf_multiply(g, centred, mtf_rsqrt(g, mtf_scalar_add(g, variance, epsilon)));
  if (scale != MTF_NO_TENSOR) y = mtf_multiply(g, y, scale);
  if (bias != MTF_NO_TENSOR) y = mtf_add(g, y, bias);
  return y;
}

mtf_tensor mtf_gather(mtf_graph *g, mtf_tensor table, mtf_tensor ids, const char *vocab_dim) {
  const mtf_dim *vocab = find_dim(g, table, vocab_dim, "gather");
  if (!vocab || !mtf_graph_check(g, ids, "gather")) return MTF_NO_TENSOR;
  mtf_dim vocab_copy = *vocab;
  mtf_shape rest, out;
  if (mtf_shape_remove(&g->nodes[table].shape, vocab_dim, &rest, NULL)) return MTF_NO_TENSOR;
  mtf_error err;
  if (mtf_shape_concat(&g->nodes[ids].shape, &rest, &out, &err)) return mtf_graph_fail(g, err.code, "gather: %s", err.msg);
  /* A one-hot contraction: with a split vocabulary each rank matches its own id range, and the
   * contraction's allreduce assembles the rows. */
  return mtf_einsum2(g, mtf_one_hot(g, ids, &vocab_copy), table, &out);
}

mtf_tensor mtf_softmax_cross_entropy(mtf_graph *g, mtf_tensor logits, mtf_tensor labels, const char *vocab_dim,
                                     float z_loss) {
  const mtf_dim *vocab = find_dim(g, logits, vocab_dim, "softmax_cross_entropy");
  if (!vocab) return MTF_NO_TENSOR;
  mtf_dim vocab_copy = *vocab;
  mtf_tensor lse = mtf_logsumexp(g, logits, vocab_dim);
  if (lse < 0) return MTF_NO_TENSOR;
  mtf_shape out = g->nodes[lse].shape;
  mtf_tensor target = mtf_einsum2(g, mtf_one_hot(g, labels, &vocab_copy), logits, &out);
  mtf_tensor loss = mtf_subtract(g, lse, target);
  if (z_loss != 0.0f) loss = mtf_add(g, loss, mtf_scalar_multiply(g, mtf_square(g, lse), z_loss));
  return loss;
}

mtf_tensor mtf_masked_fill(mtf_graph *g, mtf_tensor x, mtf_tensor mask, float fill) {
  mtf_tensor inverse = mtf_scalar_add(g, mtf_scalar_multiply(g, mask, -1.0f), 1.0f);
  return mtf_add(g, mtf_multiply(g, x, mask), mtf_scalar_multiply(g, inverse, fill));
}

mtf_tensor mtf_causal_mask(mtf_graph *g, mtf_tensor x, const char *query_dim, const char *memory_dim) {
  const mtf_dim *q = find_dim(g, x, query_dim, "causal_mask"), *m = find_dim(g, x, memory_dim, "causal_mask");
  if (!q || !m) return MTF_NO_TENSOR;
  mtf_dim qd = *q, md = *m;
  mtf_tensor allowed = mtf_less_equal(g, mtf_range(g, &md), mtf_range(g, &qd)); /* [memory, query] */
  return mtf_masked_fill(g, x, allowed, -1e9f);
}

mtf_tensor mtf_dropout(mtf_graph *g, mtf_tensor x, float rate, uint64_t key) {
  if (!mtf_graph_check(g, x, "dropout")) return MTF_NO_TENSOR;
  if (rate <= 0.0f) return x;
  if (rate >= 1.0f) return mtf_graph_fail(g, MTF_ERR_INVALID, "dropout rate %g must be below 1", (double)rate);
  mtf_shape shape = g->nodes[x].shape;
  mtf_tensor keep = mtf_random_keep(g, &shape, 1.0f - rate, key);
  return mtf_multiply(g, x, mtf_scalar_multiply(g, keep, 1.0f / (1.0f - rate)));
}
