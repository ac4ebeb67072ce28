/* The MFU probe (see mfu.h). */
#include "run/mfu.h"

#include <cblas.h>
#include <stdlib.h>

#include "comm/world.h"
#include "core/clock.h"

double mtf_mfu_measure_peak(void) {
  const int n = 512;
  float *a = calloc((size_t)n * n, sizeof(float)), *b = calloc((size_t)n * n, sizeof(float)),
        *c = calloc((size_t)n * n, sizeof(float));
  double best = 0;
  for (int r = 0; r < 4 && a && b && c; r++) {
    double start = mtf_now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double flops = 2.0 * n * n * n / (mtf_now_seconds() - start);
    if (flops > best) best = flops;
  }
  free(a);
  free(b);
  free(c);
  return best;
}

double mtf_mfu_job_peak(void) { return mtf_world_sum(mtf_mfu_measure_peak()); }

double mtf_mfu(double flops_per_token, double tokens_per_second, double job_peak) {
  return job_peak > 0 ? flops_per_token * tokens_per_second / job_peak : 0;
}
