/* The MFU probe (see mfu.h). */
#include "run/mfu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/world.h"
#include "core/clock.h"

/* Start-up stays under about 2 s: after a warm-up slower than the first bound (a busy or slow rank) one call
 * is timed, after one slower than the second none (the warm-up's rate is taken, which understates the peak). */
static const double slow_call_seconds = 0.4, very_slow_call_seconds = 0.8;

static double sgemm_seconds(int n, const float *a, const float *b, float *c, int sync) {
  if (sync) mtf_world_max(0.0); /* every rank starts together */
  double start = mtf_now_seconds();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  return mtf_now_seconds() - start;
}

double mtf_mfu_measure_peak(int n, int max_timed, int bounded, int sync, int *timed) {
  size_t elements = (size_t)n * (size_t)n;
  float *a = calloc(elements, sizeof(float)), *b = calloc(elements, sizeof(float)), *c = calloc(elements, sizeof(float));
  int ok = a && b && c;
  if (sync) ok = !mtf_world_any(!ok); /* a rank out of memory: nobody measures, so the collectives match */
  *timed = 0;
  if (!ok) {
    free(a);
    free(b);
    free(c);
    return 0;
  }
  /* Written values, not calloc's shared zero pages, so the operands really occupy memory and cache. */
  for (size_t i = 0; i < elements; i++) {
    a[i] = 1.0f / (float)(1 + i % 7);
    b[i] = a[i];
  }
  double flops = 2.0 * n * (double)n * n;
  double warm = sgemm_seconds(n, a, b, c, sync);
  /* The slowest rank decides, so every rank makes the same number of calls. */
  double slowest = sync ? mtf_world_max(warm) : warm;
  int calls = max_timed;
  if (bounded && slowest > very_slow_call_seconds) calls = 0;
  else if (bounded && slowest > slow_call_seconds && max_timed > 1) calls = 1;
  double best = warm;
  for (int r = 0; r < calls; r++) {
    double t = sgemm_seconds(n, a, b, c, sync);
    if (t < best || r == 0) best = t;
  }
  *timed = calls;
  free(a);
  free(b);
  free(c);
  return best > 0 ? flops / best : 0;
}

mtf_mfu_peak mtf_mfu_job_peak(double peak_gflops) {
  mtf_mfu_peak p = {.ranks = mtf_world_size(), .n = MTF_MFU_SGEMM_N};
  if (peak_gflops > 0) {
    p.per_rank = peak_gflops * 1e9;
  } else {
    p.measured = 1;
    p.per_rank = mtf_mfu_measure_peak(MTF_MFU_SGEMM_N, 2, 1, 1, &p.timed_calls);
    p.per_rank = mtf_world_sum(p.per_rank) / p.ranks;
  }
  p.job = p.per_rank * p.ranks;
  return p;
}

void mtf_mfu_describe(const mtf_mfu_peak *p, char *buf, size_t size) {
  if (!p->measured)
    snprintf(buf, size, "%dx%.1f GFLOP/s from backend.peak_gflops", p->ranks, p->per_rank / 1e9);
  else if (p->timed_calls > 0)
    snprintf(buf, size, "%dx%.1f GFLOP/s measured by cblas_sgemm %d^3 (all ranks at once; the best of %d timed "
             "call%s after a warm-up)", p->ranks, p->per_rank / 1e9, p->n, p->timed_calls, p->timed_calls > 1 ? "s" : "");
  else
    snprintf(buf, size, "%dx%.1f GFLOP/s measured by cblas_sgemm %d^3 (all ranks at once, the warm-up call only: "
             "it was slow; set backend.peak_gflops for a better ceiling)", p->ranks, p->per_rank / 1e9, p->n);
}

double mtf_mfu(double flops_per_token, double tokens_per_second, double job_peak) {
  return job_peak > 0 ? flops_per_token * tokens_per_second / job_peak : 0;
}
