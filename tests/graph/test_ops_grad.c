/* Every op and its gradient: the graph's autodiff gradients, evaluated by the double-precision reference
 * evaluator, against central finite differences of that evaluator; and the engine (lowered, float32,
 * one rank) against the reference for the op's value and its gradients. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>

#include "../check.h"
#include "comm/mpi_comm.h"
#include "ref_eval.h"

#define MAX_VARS 3

typedef struct op_case {
  const char *name;
  const char *var_shapes[MAX_VARS];
  mtf_tensor (*build)(mtf_graph *g, const mtf_tensor *v);
} op_case;

static mtf_shape S(const char *text) {
  mtf_shape s;
  mtf_shape_parse(text, "test", &s, NULL);
  return s;
}

static mtf_dim D(const char *name, int64_t size) { return mtf_dim_make(name, size); }

/* Positive values for log/sqrt/rsqrt/div. */
static mtf_tensor positive(mtf_graph *g, mtf_tensor x) { return mtf_scalar_add(g, mtf_square(g, x), 0.5f); }

static mtf_tensor b_matmul(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("a:3,c:2"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor b_batch_matmul(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("c:2,a:3,d:2"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor b_outer(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("b:4,a:3"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor b_einsum_lonely(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("c:2"); return mtf_einsum2(g, v[0], v[1], &o); }
static mtf_tensor b_transpose(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("b:4,a:3"); return mtf_einsum(g, 1, v, &o); }
static mtf_tensor b_add(mtf_graph *g, const mtf_tensor *v) { return mtf_add(g, v[0], v[1]); }
static mtf_tensor b_subtract(mtf_graph *g, const mtf_tensor *v) { return mtf_subtract(g, v[1], v[0]); }
static mtf_tensor b_multiply(mtf_graph *g, const mtf_tensor *v) { return mtf_multiply(g, v[0], v[1]); }
static mtf_tensor b_divide(mtf_graph *g, const mtf_tensor *v) { return mtf_divide(g, v[0], positive(g, v[1])); }
static mtf_tensor b_scalars(mtf_graph *g, const mtf_tensor *v) { return mtf_scalar_add(g, mtf_scalar_multiply(g, v[0], -1.5f), 0.25f); }
static mtf_tensor b_exp(mtf_graph *g, const mtf_tensor *v) { return mtf_exp(g, v[0]); }
static mtf_tensor b_log(mtf_graph *g, const mtf_tensor *v) { return mtf_log(g, positive(g, v[0])); }
static mtf_tensor b_rsqrt(mtf_graph *g, const mtf_tensor *v) { return mtf_rsqrt(g, positive(g, v[0])); }
static mtf_tensor b_sqrt(mtf_graph *g, const mtf_tensor *v) { return mtf_sqrt(g, positive(g, v[0])); }
static mtf_tensor b_square(mtf_graph *g, const mtf_tensor *v) { return mtf_square(g, v[0]); }
static mtf_tensor b_tanh(mtf_graph *g, const mtf_tensor *v) { return mtf_tanh(g, v[0]); }
static mtf_tensor b_sigmoid(mtf_graph *g, const mtf_tensor *v) { return mtf_sigmoid(g, v[0]); }
static mtf_tensor b_relu(mtf_graph *g, const mtf_tensor *v) { return mtf_relu(g, v[0]); }
static mtf_tensor b_gelu(mtf_graph *g, const mtf_tensor *v) { return mtf_gelu(g, v[0]); }
static mtf_tensor b_swish(mtf_graph *g, const mtf_tensor *v) { return mtf_swish(g, v[0]); }
static mtf_tensor b_reduce_sum(mtf_graph *g, const mtf_tensor *v) { return mtf_reduce_sum_dim(g, v[0], "b"); }
static mtf_tensor b_reduce_mean(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("b:4"); return mtf_reduce_mean(g, v[0], &o); }
static mtf_tensor b_reduce_max(mtf_graph *g, const mtf_tensor *v) { return mtf_reduce_max_dim(g, v[0], "a"); }
static mtf_tensor b_logsumexp(mtf_graph *g, const mtf_tensor *v) { return mtf_logsumexp(g, v[0], "b"); }
static mtf_tensor b_softmax(mtf_graph *g, const mtf_tensor *v) { return mtf_softmax(g, v[0], "b"); }
static mtf_tensor b_log_softmax(mtf_graph *g, const mtf_tensor *v) { return mtf_log_softmax(g, v[0], "a"); }
static mtf_tensor b_rms_norm(mtf_graph *g, const mtf_tensor *v) { return mtf_rms_norm(g, v[0], "b", v[1], 1e-6f); }
static mtf_tensor b_layer_norm(mtf_graph *g, const mtf_tensor *v) { return mtf_layer_norm(g, v[0], "b", v[1], v[2], 1e-6f); }
static mtf_tensor b_one_hot(mtf_graph *g, const mtf_tensor *v) {
  mtf_dim a = D("a", 3), vocab = D("v", 5);
  return mtf_multiply(g, mtf_one_hot(g, mtf_scalar_add(g, mtf_range(g, &a), 1.0f), &vocab), v[0]);
}
static mtf_tensor b_gather(mtf_graph *g, const mtf_tensor *v) {
  mtf_dim a = D("a", 3), c = D("c", 2);
  mtf_tensor ids = mtf_add(g, mtf_range(g, &a), mtf_scalar_multiply(g, mtf_range(g, &c), 2.0f)); /* 0..4 */
  return mtf_gather(g, v[0], ids, "v");
}
static mtf_tensor b_xent(mtf_graph *g, const mtf_tensor *v) {
  mtf_dim a = D("a", 3);
  mtf_tensor labels = mtf_scalar_add(g, mtf_range(g, &a), 1.0f);
  return mtf_softmax_cross_entropy(g, v[0], labels, "v", 1e-2f);
}
static mtf_tensor b_xent_smoothed(mtf_graph *g, const mtf_tensor *v) {
  mtf_dim a = D("a", 3);
  mtf_tensor labels = mtf_scalar_add(g, mtf_range(g, &a), 1.0f);
  return mtf_softmax_cross_entropy_smoothed(g, v[0], labels, "v", 1e-2f, 0.3f);
}
static mtf_tensor b_causal(mtf_graph *g, const mtf_tensor *v) {
  return mtf_softmax(g, mtf_causal_mask(g, v[0], "q", "m"), "m");
}
static mtf_tensor b_masked_fill(mtf_graph *g, const mtf_tensor *v) {
  mtf_dim b = D("b", 4), one = D("a", 3);
  mtf_tensor mask = mtf_less_equal(g, mtf_range(g, &b), mtf_scalar_add(g, mtf_range(g, &one), 0.5f));
  return mtf_masked_fill(g, v[0], mask, 3.0f);
}
static mtf_tensor b_dropout(mtf_graph *g, const mtf_tensor *v) { return mtf_dropout(g, v[0], 0.4f, 7); }
static mtf_tensor b_rename(mtf_graph *g, const mtf_tensor *v) {
  mtf_tensor r = mtf_rename(g, v[0], "a", "z");
  mtf_shape o = S("z:3,b:4");
  return mtf_einsum2(g, r, v[1], &o); /* v[1] is [b] */
}
static mtf_tensor b_reshape(mtf_graph *g, const mtf_tensor *v) {
  mtf_shape s = S("c:2,b:6");
  return mtf_multiply(g, mtf_reshape(g, v[0], &s), v[1]);
}
static mtf_tensor b_replace(mtf_graph *g, const mtf_tensor *v) {
  mtf_shape old = S("a:3,b:4"), new_dims = S("h:2,k:6");
  return mtf_square(g, mtf_replace_dimensions(g, v[0], &old, &new_dims));
}
static mtf_tensor b_stop(mtf_graph *g, const mtf_tensor *v) { return mtf_multiply(g, mtf_stop_gradient(g, v[0]), v[0]); }
static mtf_tensor b_broadcast(mtf_graph *g, const mtf_tensor *v) { mtf_shape o = S("c:2,a:3,b:4"); return mtf_broadcast(g, v[0], &o); }
static mtf_tensor b_constants(mtf_graph *g, const mtf_tensor *v) {
  mtf_shape s = S("a:3");
  return mtf_multiply(g, v[0], mtf_constant(g, &s, 2.5f));
}
static mtf_tensor b_equal_max(mtf_graph *g, const mtf_tensor *v) {
  return mtf_multiply(g, v[0], mtf_equal(g, v[0], mtf_reduce_max_dim(g, v[0], "b")));
}

static const op_case cases[] = {
    {"einsum matmul", {"a:3,b:4", "b:4,c:2"}, b_matmul},
    {"einsum batch matmul", {"c:2,a:3,b:4", "b:4,d:2,c:2"}, b_batch_matmul},
    {"einsum outer", {"a:3", "b:4"}, b_outer},
    {"einsum lonely dims", {"a:3,b:4", "c:2,d:2"}, b_einsum_lonely},
    {"einsum transpose", {"a:3,b:4"}, b_transpose},
    {"add broadcast", {"a:3,b:4", "b:4"}, b_add},
    {"subtract broadcast", {"a:3", "b:4,a:3"}, b_subtract},
    {"multiply broadcast", {"a:3,b:4", "c:2,a:3"}, b_multiply},
    {"divide", {"a:3,b:4", "b:4"}, b_divide},
    {"scalar add/multiply", {"a:3,b:4"}, b_scalars},
    {"exp", {"a:3,b:4"}, b_exp},
    {"log", {"a:3,b:4"}, b_log},
    {"rsqrt", {"a:3,b:4"}, b_rsqrt},
    {"sqrt", {"a:3,b:4"}, b_sqrt},
    {"square", {"a:3,b:4"}, b_square},
    {"tanh", {"a:3,b:4"}, b_tanh},
    {"sigmoid", {"a:3,b:4"}, b_sigmoid},
    {"relu", {"a:3,b:4"}, b_relu},
    {"gelu", {"a:3,b:4"}, b_gelu},
    {"swish", {"a:3,b:4"}, b_swish},
    {"reduce_sum", {"a:3,b:4"}, b_reduce_sum},
    {"reduce_mean", {"a:3,b:4"}, b_reduce_mean},
    {"reduce_max", {"a:3,b:4"}, b_reduce_max},
    {"logsumexp", {"a:3,b:4"}, b_logsumexp},
    {"softmax", {"a:3,b:4"}, b_softmax},
    {"log_softmax", {"a:3,b:4"}, b_log_softmax},
    {"rms_norm", {"a:3,b:4", "b:4"}, b_rms_norm},
    {"layer_norm", {"a:3,b:4", "b:4", "b:4"}, b_layer_norm},
    {"one_hot + range", {"a:3,v:5"}, b_one_hot},
    {"gather", {"v:5,b:4"}, b_gather},
    {"softmax_cross_entropy + z_loss", {"a:3,v:5"}, b_xent},
    {"softmax_cross_entropy + label smoothing + z_loss", {"a:3,v:5"}, b_xent_smoothed},
    {"causal mask", {"q:3,m:3,b:2"}, b_causal},
    {"masked_fill", {"a:3,b:4"}, b_masked_fill},
    {"dropout", {"a:3,b:4"}, b_dropout},
    {"rename", {"a:3,b:4", "b:4"}, b_rename},
    {"reshape", {"c:2,b:2,a:3", "b:6"}, b_reshape},
    {"replace_dimensions", {"c:2,a:3,b:4"}, b_replace},
    {"stop_gradient", {"a:3,b:4"}, b_stop},
    {"broadcast", {"a:3"}, b_broadcast},
    {"constant", {"a:3"}, b_constants},
    {"equal + reduce_max", {"a:3,b:4"}, b_equal_max},
};

static double max_abs(const double *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

/* max |engine - reference| relative to the reference's scale. */
static double engine_error(const float *got, const double *want, int64_t n) {
  double scale = fmax(1.0, max_abs(want, n)), err = 0;
  for (int64_t i = 0; i < n; i++) err = fmax(err, fabs((double)got[i] - want[i]));
  return err / scale;
}

static void run_case(const op_case *c, mtf_comm *comm) {
  mtf_graph *g = mtf_graph_create(1234);
  mtf_tensor vars[MAX_VARS], grads[MAX_VARS];
  int n_vars = 0;
  for (int i = 0; i < MAX_VARS && c->var_shapes[i]; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    mtf_shape s = S(c->var_shapes[i]);
    vars[n_vars++] = mtf_variable(g, name, &s, MTF_INIT_NORMAL, 1.0f);
  }
  mtf_tensor y = c->build(g, vars);
  mtf_error err;
  if (mtf_graph_status(g, &err)) {
    fprintf(stderr, "%s: graph error: %s\n", c->name, err.msg);
    CHECK(0);
    mtf_graph_destroy(g);
    return;
  }
  mtf_shape ys = *mtf_tensor_shape(g, y), scalar = {0};
  mtf_tensor projection = mtf_variable(g, "projection", &ys, MTF_INIT_NORMAL, 1.0f);
  mtf_tensor loss = mtf_reduce_sum(g, mtf_multiply(g, y, projection), &scalar);
  CHECK(mtf_gradients(g, loss, n_vars, vars, grads) == MTF_OK);

  /* Autodiff (reference-evaluated) against central differences, all in double. */
  ref_values ref = ref_evaluate(g, NULL, NULL);
  double worst_fd = 0;
  if (c->build == b_stop) {
    /* Finite differences see through stop_gradient; its defined gradient of sg(x)*x is x (times the
     * projection), which is what autodiff must give. */
    int64_t n = mtf_shape_num_elements(&ys);
    for (int64_t e = 0; e < n; e++)
      worst_fd = fmax(worst_fd, fabs(ref.value[grads[0]][e] - ref.value[vars[0]][e] * ref.value[projection][e]));
  }
  for (int v = 0; v < n_vars && c->build != b_stop; v++)
    worst_fd = fmax(worst_fd, ref_gradient_error(g, loss, vars[v], grads[v], NULL, ref.value));

  /* The engine, lowered for one rank, against the reference. */
  mtf_tensor fetches[1 + MAX_VARS] = {y};
  for (int v = 0; v < n_vars; v++) fetches[1 + v] = grads[v];
  mtf_shape mesh = {0};
  mtf_layout_rules rules = {0};
  mtf_plan *plan = NULL;
  mtf_session *session = NULL;
  double worst_engine = 0;
  int ok = mtf_plan_create(g, &mesh, &rules, 0, 1 + n_vars, fetches, &plan, &err) == MTF_OK &&
           mtf_session_create(plan, comm, NULL, &session, &err) == MTF_OK && mtf_session_run(session, &err) == MTF_OK;
  if (!ok) fprintf(stderr, "%s: engine: %s\n", c->name, err.msg);
  for (int f = 0; ok && f < 1 + n_vars; f++) {
    int64_t n = mtf_shape_num_elements(mtf_tensor_shape(g, fetches[f]));
    float *got = malloc(sizeof(float) * (size_t)n);
    ok = mtf_session_fetch(session, fetches[f], got, &err) == MTF_OK;
    if (ok) worst_engine = fmax(worst_engine, engine_error(got, ref.value[fetches[f]], n));
    free(got);
  }
  CHECK(ok);
  if (worst_fd > 1e-6 || worst_engine > 2e-5 || !ok)
    fprintf(stderr, "FAIL %-32s finite-difference error %.2e, engine error %.2e\n", c->name, worst_fd, worst_engine);
  else
    printf("ok   %-32s finite-difference error %.2e, engine error %.2e\n", c->name, worst_fd, worst_engine);
  CHECK(worst_fd <= 1e-6);
  CHECK(worst_engine <= 2e-5);
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  ref_free(&ref);
  mtf_graph_destroy(g);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mtf_shape mesh = {0};
  mtf_comm *comm;
  mtf_error err;
  if (mtf_comm_mpi_create(MPI_COMM_SELF, &mesh, &comm, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 2;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], comm);
  mtf_comm_destroy(comm);
  MPI_Finalize();
  return check_summary();
}
