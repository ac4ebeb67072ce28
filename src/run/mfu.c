/* The MFU probe (see mfu.h). */
#include "run/mfu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/world.h"
#include "core/clock.h"

/* Start-up stays under about 2 s. The warm-up is an (n/2)^3 product (1/8 of the work: it starts BLAS's
 * threads and faults the pages in); the n^3 call it predicts (8 x its time, on the slowest rank) decides how
 * many n^3 calls are timed: all asked for when fast, one when slow, none when very slow (busy or oversubscribed
 * cores), and then the warm-up's rate is the peak (which understates it, so MFU reads high). */
static const double slow_call_seconds = 0.4, very_slow_call_seconds = 1.0;

/* c = a b for n x n blocks of row-major matrices with leading dimension ld. */
static double sgemm_seconds(int n, int ld, const float *a, const float *b, float *c, int sync) {
  if (sync) mtf_world_max(0.0); /* every rank starts together */
  double start = mtf_now_seconds();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, ld, b, ld, 0.0f, c, ld);
  return mtf_now_seconds() - start;
}

double mtf_mfu_measure_peak(int n, int max_timed, int bounded, int sync, int *timed, int *measured_n) {
  size_t elements = (size_t)n * (size_t)n;
  float *a = calloc(elements, sizeof(float)), *b = calloc(elements, sizeof(float)), *c = calloc(elements, sizeof(float));
  int ok = a && b && c;
  if (sync) ok = !mtf_world_any(!ok); /* a rank out of memory: nobody measures, so the collectives match */
  *timed = 0;
  *measured_n = n;
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
    c[i] = 0.0f;
  }
  int half = n / 2 > 0 ? n / 2 : 1;
  double warm = sgemm_seconds(half, n, a, b, c, sync);
  /* The slowest rank decides, so every rank makes the same number of calls. */
  double predicted = 8.0 * (sync ? mtf_world_max(warm) : warm);
  int calls = max_timed;
  if (bounded && predicted > very_slow_call_seconds) calls = 0;
  else if (bounded && predicted > slow_call_seconds && max_timed > 1) calls = 1;
  double best = 0;
  for (int r = 0; r < calls; r++) {
    double t = sgemm_seconds(n, n, a, b, c, sync);
    if (t < best || r == 0) best = t;
  }
  *timed = calls;
  free(a);
  free(b);
  free(c);
  if (calls == 0) {
    *measured_n = half;
    return warm > 0 ? 2.0 * half * (double)half * half / warm : 0;
  }
  return best > 0 ? 2.0 * n * (double)n * n / best : 0;
}

mtf_mfu_peak mtf_mfu_job_peak(double peak_gflops, int host_compute) {
  mtf_mfu_peak p = {.ranks = mtf_world_size(), .n = MTF_MFU_SGEMM_N};
  if (peak_gflops > 0) {
    p.per_rank = peak_gflops * 1e9;
  } else if (!host_compute) {
    p.unknown = 1;
  } else {
    p.measured = 1;
    p.per_rank = mtf_mfu_measure_peak(MTF_MFU_SGEMM_N, 2, 1, 1, &p.timed_calls, &p.n);
    p.per_rank = mtf_world_sum(p.per_rank) / p.ranks;
  }
  p.job = p.per_rank * p.ranks;
  return p;
}

void mtf_mfu_describe(const mtf_mfu_peak *p, char *buf, size_t size) {
  if (p->unknown)
    snprintf(buf, size, "unknown (MFU shows 0): the backend computes on a device, whose peak a host sgemm does not "
             "measure; set backend.peak_gflops to the device's peak GFLOP/s (for its precision)");
  else if (!p->measured)
    snprintf(buf, size, "%dx%.1f GFLOP/s from backend.peak_gflops", p->ranks, p->per_rank / 1e9);
  else if (p->timed_calls > 0)
    snprintf(buf, size, "%dx%.1f GFLOP/s measured by cblas_sgemm %d^3 (all ranks at once; the best of %d timed "
             "call%s after a half-size warm-up)", p->ranks, p->per_rank / 1e9, p->n, p->timed_calls, p->timed_calls > 1 ? "s" : "");
  else
    snprintf(buf, size, "%dx%.1f GFLOP/s measured by cblas_sgemm %d^3 (all ranks at once; the warm-up only: a "
             "%d^3 call would have been slow; set backend.peak_gflops for a truer ceiling)", p->ranks,
             p->per_rank / 1e9, p->n, 2 * p->n);
}

double mtf_mfu(double flops_per_token, double tokens_per_second, double job_peak) {
  return job_peak > 0 ? flops_per_token * tokens_per_second / job_peak : 0;
}
