/* supports_op: a session on a backend without a kernel for one of the plan's ops is refused when it is made,
 * naming the backend, the op and the step, not found missing in the middle of a run. The kind "cpu-no-softmax" is
 * the cpu backend with its softmax kernel taken out (registered here); the same plan on "cpu" is accepted. Likewise
 * a plan with a fused step (its softmax step marked `accumulate`, as lower/fuse_add.c marks a product) on
 * "cpu-no-fusions", the cpu backend whose plan_fusions are cleared. */
#include <stdio.h>
#include <string.h>

#include "exec/backend.h"
#include "mtf.h"

static int cpu_no_softmax_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  MTF_CHECK(mtf_cpu_backend_create(options->threads, out, err));
  (*out)->name = "cpu-no-softmax";
  (*out)->kernels[MTF_OP_SOFTMAX] = NULL;
  return MTF_OK;
}

static int cpu_no_fusions_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  MTF_CHECK(mtf_cpu_backend_create(options->threads, out, err));
  (*out)->name = "cpu-no-fusions";
  (*out)->plan_fusions = 0;
  return MTF_OK;
}

static int session_on(const char *kind, const mtf_plan *plan, mtf_comm *comm, mtf_error *err) {
  mtf_session_options options = {.backend = kind};
  mtf_session *s = NULL;
  int rc = mtf_session_create((mtf_plan *)plan, comm, &options, &s, err);
  mtf_session_destroy(s);
  return rc;
}

int main(int argc, char **argv) {
  mtf_world_init(&argc, &argv);
  mtf_backend_caps caps = *mtf_backend_capabilities("cpu");
  caps.kind = "cpu-no-softmax";
  mtf_backend_register(&caps, cpu_no_softmax_create);
  caps.kind = "cpu-no-fusions";
  mtf_backend_register(&caps, cpu_no_fusions_create);
  mtf_error err = {0};
  mtf_shape mesh, xs;
  mtf_comm *comm = NULL;
  mtf_layout_rules rules;
  mtf_plan *plan = NULL;
  mtf_graph *g = mtf_graph_create(1);
  int ok = mtf_mesh_parse("", &mesh, &err) == MTF_OK && mtf_shape_parse("batch:4,d:8", "x", &xs, &err) == MTF_OK;
  mtf_tensor y = ok ? mtf_softmax(g, mtf_input(g, "x", &xs), "d") : MTF_NO_TENSOR;
  ok = ok && y != MTF_NO_TENSOR && mtf_layout_rules_parse("", &rules, &err) == MTF_OK &&
       mtf_comm_world_create(&mesh, &comm, &err) == MTF_OK &&
       mtf_plan_create(g, &mesh, &rules, 0, 1, &y, &plan, &err) == MTF_OK;
  if (!ok) {
    fprintf(stderr, "setup failed: %s\n", err.msg);
    return 1;
  }
  int failures = 0;
  int rc = session_on("cpu", plan, comm, &err);
  printf("%s cpu: the plan's session is made (%s)\n", rc == MTF_OK ? "ok  " : "FAIL", rc == MTF_OK ? "" : err.msg);
  failures += rc != MTF_OK;
  mtf_error_clear(&err);
  rc = session_on("cpu-no-softmax", plan, comm, &err);
  int named = rc != MTF_OK && strstr(err.msg, "backend 'cpu-no-softmax' has no kernel for op 'softmax' (step ") != NULL;
  printf("%s cpu-no-softmax: refused when the session is made: %s\n", named ? "ok  " : "FAIL", err.msg);
  failures += !named;

  mtf_error_clear(&err);
  rc = session_on("cpu-no-fusions", plan, comm, &err);
  printf("%s cpu-no-fusions: a plan without fused steps is accepted (%s)\n", rc == MTF_OK ? "ok  " : "FAIL",
         rc == MTF_OK ? "" : err.msg);
  failures += rc != MTF_OK;
  int marked = 0;
  for (int i = 0; i < plan->n_steps && !marked; i++)
    if (plan->steps[i].kind == MTF_STEP_KERNEL && plan->steps[i].op == MTF_OP_SOFTMAX) marked = plan->steps[i].accumulate = 1;
  mtf_error_clear(&err);
  rc = session_on("cpu", plan, comm, &err);
  printf("%s cpu: a plan with a fused step is accepted (%s)\n", marked && rc == MTF_OK ? "ok  " : "FAIL",
         rc == MTF_OK ? "" : err.msg);
  failures += !marked || rc != MTF_OK;
  mtf_error_clear(&err);
  rc = session_on("cpu-no-fusions", plan, comm, &err);
  named = rc != MTF_OK && strstr(err.msg, "backend 'cpu-no-fusions' does not run the fused step ") &&
          strstr(err.msg, "(op 'softmax', mtf_plan_options.fuse_product_add)");
  printf("%s cpu-no-fusions: a plan with a fused step is refused when the session is made: %s\n",
         named ? "ok  " : "FAIL", err.msg);
  failures += !named;
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  mtf_comm_destroy(comm);
  mtf_world_finalize();
  return failures ? 1 : 0;
}
