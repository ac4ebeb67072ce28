/* The gated feed-forward layers' structure, counted by hand: with swiglu or geglu each layer has
 * layer_NNN/mlp/wi_0 and wi_1 [d_model, d_ff] and no wi (so an ungated checkpoint never loads into a gated
 * model by mistake), the parameter count grows by layers x d_model x d_ff, and the FLOPs per token by 6 x
 * that (the extra projection, forward and backward). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "config/config.h"
#include "model/transformer.h"

static int64_t build(const char *activation, int *has_wi, int *has_gated, double *flops) {
  mtf_config cfg;
  mtf_config_defaults(&cfg);
  mtf_model_config m = cfg.model;
  m.vocab = 64, m.d_model = 16, m.d_ff = 48, m.heads = 2, m.d_kv = 8, m.layers = 3, m.length = 8;
  char assignment[64];
  snprintf(assignment, sizeof assignment, "model.activation=%s", activation);
  CHECK(mtf_config_set(&cfg, assignment, &(mtf_error){0}) == MTF_OK);
  m.activation = cfg.model.activation;
  mtf_graph *g = mtf_graph_create(1);
  mtf_transformer t;
  mtf_error err = {0};
  int rc = mtf_transformer_build(g, &m, 2, 0.0f, &t, &err);
  CHECK(rc == 0);
  if (rc) fprintf(stderr, "%s: %s\n", activation, err.msg);
  *has_wi = *has_gated = 1;
  char name[64];
  for (int layer = 0; layer < m.layers; layer++) {
    snprintf(name, sizeof name, "layer_%03d/mlp/wi", layer);
    *has_wi &= mtf_find_variable(g, name) != MTF_NO_TENSOR;
    snprintf(name, sizeof name, "layer_%03d/mlp/wi_0", layer);
    *has_gated &= mtf_find_variable(g, name) != MTF_NO_TENSOR;
    snprintf(name, sizeof name, "layer_%03d/mlp/wi_1", layer);
    *has_gated &= mtf_find_variable(g, name) != MTF_NO_TENSOR;
  }
  int64_t count = rc ? 0 : t.param_count;
  *flops = mtf_transformer_flops_per_token(&m, count);
  if (!rc) mtf_transformer_free(&t);
  mtf_graph_destroy(g);
  return count;
}

int main(void) {
  int wi, gated;
  double base_flops, flops;
  int64_t base = build("gelu", &wi, &gated, &base_flops);
  CHECK(wi && !gated);
  const char *kinds[] = {"swiglu", "geglu"};
  for (int i = 0; i < 2; i++) {
    int64_t count = build(kinds[i], &wi, &gated, &flops);
    int64_t extra = 3 * 16 * 48;
    printf("%s: %lld parameters (gelu %lld, + %lld by hand), %.0f FLOPs per token (gelu %.0f)\n", kinds[i],
           (long long)count, (long long)base, (long long)extra, flops, base_flops);
    CHECK(!wi && gated);
    CHECK(count == base + extra);
    CHECK(fabs(flops - base_flops - 6.0 * (double)extra) < 1e-9 * flops);
  }
  CHECK(mtf_activation_is_gated(MTF_ACTIVATION_SWIGLU) && mtf_activation_is_gated(MTF_ACTIVATION_GEGLU));
  CHECK(!mtf_activation_is_gated(MTF_ACTIVATION_GELU) && !mtf_activation_is_gated(MTF_ACTIVATION_RELU));
  return check_summary();
}
