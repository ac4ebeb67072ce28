/* Benchmark: a 1024x1024x1024 contraction written as mtf_einsum (planned and run by the engine on one
 * rank) against a raw cblas_sgemm of the same size, on the same OpenBLAS thread count.
 *   OPENBLAS_NUM_THREADS=1 build/src/mtf_bench_einsum [N] [REPEATS]
 * Prints the median time and GFLOP/s of each and the ratio einsum / sgemm. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "core/clock.h"
#include "mtf.h"

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof(double), by_value);
  return t[n / 2];
}

int main(int argc, char **argv) {
  mtf_cli_choose_blas_kernels(argv); /* the kernels mtf itself runs with (src/cli/blas_kernels.c) */
  mtf_world_init(&argc, &argv);
  int n = argc > 1 ? atoi(argv[1]) : 1024, repeats = argc > 2 ? atoi(argv[2]) : 7;
  if (n < 1 || repeats < 1 || repeats > 100) {
    fprintf(stderr, "usage: mtf_bench_einsum [N >= 1] [REPEATS 1..100]\n");
    return 2;
  }
  double flops = 2.0 * n * n * n, sgemm_times[100], einsum_times[100];

  float *a = malloc(sizeof(float) * (size_t)n * (size_t)n), *b = malloc(sizeof(float) * (size_t)n * (size_t)n),
        *c = malloc(sizeof(float) * (size_t)n * (size_t)n);
  for (long i = 0; i < (long)n * n; i++) {
    a[i] = (float)((i * 7) % 13) / 13.0f;
    b[i] = (float)((i * 5) % 11) / 11.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm-up */
  for (int r = 0; r < repeats; r++) {
    double start = mtf_now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    sgemm_times[r] = mtf_now_seconds() - start;
  }

  mtf_graph *g = mtf_graph_create(1);
  char text[128];
  mtf_shape as, bs, cs, one = {0};
  snprintf(text, sizeof text, "i:%d,k:%d", n, n);
  mtf_shape_parse(text, "a", &as, NULL);
  snprintf(text, sizeof text, "k:%d,j:%d", n, n);
  mtf_shape_parse(text, "b", &bs, NULL);
  snprintf(text, sizeof text, "i:%d,j:%d", n, n);
  mtf_shape_parse(text, "c", &cs, NULL);
  mtf_tensor ta = mtf_input(g, "a", &as), tb = mtf_input(g, "b", &bs);
  mtf_tensor tc = mtf_einsum2(g, ta, tb, &cs);
  mtf_layout_rules rules = {0};
  mtf_comm *comm;
  mtf_plan *plan;
  mtf_session *session;
  mtf_error err;
  if (mtf_comm_self_create(&one, &comm, &err) || mtf_plan_create(g, &one, &rules, 0, 1, &tc, &plan, &err) ||
      mtf_session_create(plan, comm, NULL, &session, &err) || mtf_session_set_input(session, ta, a, &err) ||
      mtf_session_set_input(session, tb, b, &err) || mtf_session_run(session, &err)) {
    fprintf(stderr, "mtf_bench_einsum: %s\n", err.msg);
    return 1;
  }
  for (int r = 0; r < repeats; r++) {
    double start = mtf_now_seconds();
    mtf_session_run(session, &err);
    einsum_times[r] = mtf_now_seconds() - start;
  }
  float *result = malloc(sizeof(float) * (size_t)n * (size_t)n);
  if (!result || mtf_session_read_slice(session, tc, result, &err)) {
    fprintf(stderr, "mtf_bench_einsum: %s\n", result ? err.msg : "out of memory");
    return 1;
  }
  double max_diff = 0;
  for (long i = 0; i < (long)n * n; i += 4099) {
    double d = result[i] - c[i];
    max_diff = d > max_diff ? d : (-d > max_diff ? -d : max_diff);
  }
  double ts = median(sgemm_times, repeats), te = median(einsum_times, repeats);
  printf("threads %d, %dx%dx%d, median of %d\n", openblas_get_num_threads(), n, n, n, repeats);
  printf("cblas_sgemm  %8.2f ms  %7.1f GFLOP/s\n", ts * 1e3, flops / ts / 1e9);
  printf("mtf_einsum   %8.2f ms  %7.1f GFLOP/s\n", te * 1e3, flops / te / 1e9);
  printf("einsum / sgemm throughput: %.1f%%  (max |difference| %.2e)\n", 100.0 * ts / te, max_diff);
  mtf_session_destroy(session);
  mtf_plan_destroy(plan);
  mtf_graph_destroy(g);
  mtf_comm_destroy(comm);
  free(a);
  free(b);
  free(c);
  free(result);
  mtf_world_finalize();
  return 0;
}
