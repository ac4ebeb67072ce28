/* The MoE layer (src/model/moe.c) against a plain double-precision implementation of the same routing,
 * written here from the definition (model/moe.h): each group's tokens in order, first choices before
 * second choices, an expert's slots filled until capacity. Checks the output, the load-balancing and
 * router z-losses and the metrics (top2 and switch, with capacity that drops routings, with one group per
 * sequence and with groups that cross sequences), and the gradients of a weighted sum of the output with
 * respect to the router and the experts' weights against central differences of the reference; and the FLOPs
 * per token, which count only the experts a token uses. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "model/moe.h"
#include "model/transformer.h"

enum { B = 4, L = 8, M = 6, F = 5, E = 4 };

typedef struct params {
  mtf_graph *g;
  mtf_tensor router, wi, wo;
} params;

static mtf_tensor make_param(void *ctx, const char *name, const mtf_shape *shape, mtf_init init, float scale) {
  params *p = ctx;
  mtf_tensor v = mtf_variable(p->g, name, shape, init, scale * 2.0f); /* larger than the model's: routing varies */
  if (strstr(name, "/router")) p->router = v;
  if (strstr(name, "/wi")) p->wi = v;
  if (strstr(name, "/wo")) p->wo = v;
  return v;
}

typedef struct reference {
  double out[B * L * M], aux, z, dropped, max_load;
} reference;

static double gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

/* x [B*L, M] (token-major), router [M, E], wi [E, M, F], wo [E, F, M] */
static void reference_layer(const double *x, const double *router, const double *wi, const double *wo, int k,
                            int64_t group, int64_t capacity, reference *r) {
  int tokens = B * L, groups = tokens / (int)group;
  memset(r, 0, sizeof *r);
  double load[E] = {0}, kept = 0;
  for (int gi = 0; gi < groups; gi++) {
    int count[E] = {0};
    double density[E] = {0}, proxy[E] = {0};
    int choice[64][2];
    double gate[64][2];
    for (int t = 0; t < group; t++) {
      const double *xt = x + (gi * group + t) * M;
      double logit[E], p[E], mx = -1e300, sum = 0;
      for (int e = 0; e < E; e++) {
        logit[e] = 0;
        for (int m = 0; m < M; m++) logit[e] += xt[m] * router[m * E + e];
        if (logit[e] > mx) mx = logit[e];
      }
      for (int e = 0; e < E; e++) sum += (p[e] = exp(logit[e] - mx));
      for (int e = 0; e < E; e++) p[e] /= sum;
      r->z += pow(mx + log(sum), 2) / tokens;
      int first = 0, second = -1;
      for (int e = 1; e < E; e++)
        if (p[e] > p[first]) first = e;
      for (int e = 0; e < E; e++)
        if (e != first && (second < 0 || p[e] > p[second])) second = e;
      choice[t][0] = first;
      choice[t][1] = second;
      double norm = k == 2 ? p[first] + p[second] + 1e-9 : 1.0;
      gate[t][0] = p[first] / norm;
      gate[t][1] = p[second] / norm;
      density[first] += 1.0 / group;
      for (int e = 0; e < E; e++) proxy[e] += p[e] / group;
    }
    for (int e = 0; e < E; e++) r->aux += E * density[e] * proxy[e] / groups;
    for (int c = 0; c < k; c++)
      for (int t = 0; t < group; t++) {
        int e = choice[t][c];
        load[e] += 1;
        if (count[e]++ >= capacity) continue; /* dropped */
        kept += 1;
        const double *xt = x + (gi * group + t) * M;
        double *ot = r->out + (gi * group + t) * M;
        for (int f = 0; f < F; f++) {
          double h = 0;
          for (int m = 0; m < M; m++) h += xt[m] * wi[(e * M + m) * F + f];
          h = gelu(h);
          for (int m = 0; m < M; m++) ot[m] += gate[t][c] * h * wo[(e * F + f) * M + m];
        }
      }
  }
  double most = 0;
  for (int e = 0; e < E; e++) most = load[e] > most ? load[e] : most;
  r->dropped = 1 - kept / (tokens * k);
  r->max_load = most * E / (tokens * k);
}

static double weighted(const double *out, const double *w) {
  double s = 0;
  for (int i = 0; i < B * L * M; i++) s += out[i] * w[i];
  return s;
}

static void fail(const char *what, const mtf_error *err) {
  fprintf(stderr, "%s: %s\n", what, err->msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static void to_double(const float *f, double *d, int n) {
  for (int i = 0; i < n; i++) d[i] = f[i];
}

static void check_case(mtf_comm *comm, const char *gating, int64_t group, double capacity_factor) {
  mtf_model_config m;
  memset(&m, 0, sizeof m);
  m.d_model = M;
  m.d_ff = F;
  m.length = L;
  m.layers = 1;
  m.activation = MTF_ACTIVATION_GELU;
  m.moe.experts = E;
  m.moe.every = 1;
  m.moe.gating = strcmp(gating, "switch") == 0 ? MTF_GATING_SWITCH : MTF_GATING_TOP2;
  m.moe.capacity_factor = capacity_factor;
  m.moe.group_size = group;
  int k = mtf_moe_k(&m);
  int64_t capacity = mtf_moe_capacity(&m);

  params p = {.g = mtf_graph_create(7)};
  mtf_shape xs, scalar = {0};
  mtf_shape_parse("batch:4,length:8,d_model:6", "x", &xs, NULL);
  mtf_tensor x = mtf_input(p.g, "x", &xs), w = mtf_input(p.g, "w", &xs);
  mtf_moe_layer layer = mtf_moe_feed_forward(p.g, &m, x, 0, make_param, &p);
  mtf_tensor objective = mtf_reduce_sum(p.g, mtf_multiply(p.g, layer.output, w), &scalar);
  mtf_tensor wrt[3] = {p.router, p.wi, p.wo}, grads[3];
  mtf_error err;
  if (mtf_gradients(p.g, objective, 3, wrt, grads) || mtf_graph_status(p.g, &err)) {
    mtf_graph_status(p.g, &err);
    fail("build", &err);
  }
  mtf_tensor fetches[] = {layer.output, layer.aux_loss, layer.router_z_loss, layer.dropped, layer.max_load,
                          grads[0], grads[1], grads[2]};
  int n_fetches = (int)(sizeof fetches / sizeof fetches[0]);
  mtf_shape mesh;
  mtf_shape_parse("b:1", "mesh", &mesh, NULL);
  mtf_layout_rules rules = {0};
  mtf_plan *plan;
  mtf_session *s;
  if (mtf_plan_create(p.g, &mesh, &rules, 0, n_fetches, fetches, &plan, &err)) fail("plan", &err);
  if (mtf_session_create(plan, comm, NULL, &s, &err)) fail("session", &err);

  float xf[B * L * M], wf[B * L * M], router_f[M * E], wi_f[E * M * F], wo_f[E * F * M];
  for (int i = 0; i < B * L * M; i++) {
    xf[i] = (float)sin(0.7 * i + 0.3) * 1.5f;
    wf[i] = (float)cos(0.37 * i);
  }
  if (mtf_session_set_input(s, x, xf, &err) || mtf_session_set_input(s, w, wf, &err) || mtf_session_run(s, &err))
    fail("run", &err);
  float out[B * L * M], aux, z, dropped, max_load, g_router[M * E], g_wi[E * M * F], g_wo[E * F * M];
  if (mtf_session_fetch(s, layer.output, out, &err) || mtf_session_fetch(s, layer.aux_loss, &aux, &err) ||
      mtf_session_fetch(s, layer.router_z_loss, &z, &err) || mtf_session_fetch(s, layer.dropped, &dropped, &err) ||
      mtf_session_fetch(s, layer.max_load, &max_load, &err) || mtf_session_fetch(s, p.router, router_f, &err) ||
      mtf_session_fetch(s, p.wi, wi_f, &err) || mtf_session_fetch(s, p.wo, wo_f, &err) ||
      mtf_session_fetch(s, grads[0], g_router, &err) || mtf_session_fetch(s, grads[1], g_wi, &err) ||
      mtf_session_fetch(s, grads[2], g_wo, &err))
    fail("fetch", &err);

  double xd[B * L * M], wd[B * L * M], router[M * E], wi[E * M * F], wo[E * F * M];
  to_double(xf, xd, B * L * M);
  to_double(wf, wd, B * L * M);
  to_double(router_f, router, M * E);
  to_double(wi_f, wi, E * M * F);
  to_double(wo_f, wo, E * F * M);
  reference r;
  reference_layer(xd, router, wi, wo, k, group, capacity, &r);
  double worst = 0;
  for (int i = 0; i < B * L * M; i++) worst = fmax(worst, fabs(out[i] - r.out[i]));
  printf("%s, group %lld, capacity %lld of %lld: dropped %.4f (reference %.4f), max_load %.4f (%.4f), aux %.6f (%.6f), "
         "z %.6f (%.6f), output max |difference| %.2e\n", gating, (long long)group, (long long)capacity,
         (long long)group, dropped, r.dropped, max_load, r.max_load, aux, r.aux, z, r.z, worst);
  CHECK(worst < 1e-4);
  CHECK(fabs(aux - r.aux) < 1e-5 * fmax(1, r.aux));
  CHECK(fabs(z - r.z) < 1e-5 * fmax(1, r.z));
  CHECK(fabs(dropped - r.dropped) < 1e-6);
  CHECK(fabs(max_load - r.max_load) < 1e-6);

  /* Gradients against central differences of the reference (routing does not change within eps). */
  struct {
    const char *name;
    double *values;
    const float *grad;
    int n;
  } wrts[3] = {{"router", router, g_router, M * E}, {"wi", wi, g_wi, E * M * F}, {"wo", wo, g_wo, E * F * M}};
  for (int v = 0; v < 3; v++) {
    double worst_grad = 0, largest = 0;
    for (int i = 0; i < wrts[v].n; i++) {
      double keep = wrts[v].values[i], eps = 1e-5, up, down;
      reference rr;
      wrts[v].values[i] = keep + eps;
      reference_layer(xd, router, wi, wo, k, group, capacity, &rr);
      up = weighted(rr.out, wd);
      wrts[v].values[i] = keep - eps;
      reference_layer(xd, router, wi, wo, k, group, capacity, &rr);
      down = weighted(rr.out, wd);
      wrts[v].values[i] = keep;
      double numeric = (up - down) / (2 * eps);
      worst_grad = fmax(worst_grad, fabs(numeric - wrts[v].grad[i]));
      largest = fmax(largest, fabs(numeric));
    }
    printf("  d/d %s: max |mtf - finite difference| %.2e (largest %.3f)\n", wrts[v].name, worst_grad, largest);
    CHECK(largest > 1e-3); /* the gradient is not trivially zero */
    CHECK(worst_grad < 1e-3 * fmax(1, largest));
  }
  mtf_session_destroy(s);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(p.g);
}

/* FLOPs per token count the experts a token uses: 6 x (all parameters - the unused experts of each MoE
 * layer) + attention's, here from the sizes by hand. */
static void check_flops(void) {
  mtf_model_config m;
  memset(&m, 0, sizeof m);
  m.d_model = 32;
  m.d_ff = 64;
  m.heads = 4;
  m.d_kv = 8;
  m.length = 16;
  m.layers = 4;
  m.moe.experts = 8;
  m.moe.every = 2; /* layers 1 and 3 */
  int64_t total = 100000;
  double attention = 12.0 * 4 * 16 * (4 * 8);
  for (int top2 = 0; top2 < 2; top2++) {
    m.moe.gating = top2 ? MTF_GATING_TOP2 : MTF_GATING_SWITCH;
    int64_t unused = 2 * (8 - (top2 ? 2 : 1)) * (2 * 32 * 64);
    double want = 6.0 * (double)(total - unused) + attention, got = mtf_transformer_flops_per_token(&m, total);
    printf("flops per token, %s: %.0f (by hand %.0f)\n", top2 ? "top2" : "switch", got, want);
    CHECK(fabs(got - want) < 1e-6 * want);
  }
  m.moe.experts = 0;
  CHECK(fabs(mtf_transformer_flops_per_token(&m, total) - (6.0 * (double)total + attention)) < 1e-6 * attention);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mtf_shape mesh;
  mtf_shape_parse("b:1", "mesh", &mesh, NULL);
  mtf_comm *comm;
  mtf_error err;
  if (mtf_comm_mpi_create(MPI_COMM_WORLD, &mesh, &comm, &err)) fail("comm", &err);
  check_flops();
  check_case(comm, "top2", L, 1.0);      /* capacity 4 of 8: routings dropped */
  check_case(comm, "switch", L, 1.0);    /* capacity 2 of 8 */
  check_case(comm, "top2", 2 * L, 1.5);  /* groups of two sequences: a reshape */
  check_case(comm, "switch", 2 * L, 8.0); /* capacity the whole group: nothing dropped */
  mtf_comm_destroy(comm);
  MPI_Finalize();
  return check_summary();
}
