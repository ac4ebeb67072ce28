/* The MFU probe (see mfu.h). */
#include "run/mfu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/world.h"
#include "core/bf16.h"
#include "core/clock.h"
#include "mtf.h"

/* Start-up stays under about 2 s. The warm-up is an (n/2)^3 product (1/8 of the work: it starts BLAS's
 * threads and faults the pages in); the n^3 call it predicts (8 x its time, on the slowest rank) decides how
 * many n^3 calls are timed: all asked for when fast, one when slow, none when very slow (busy or oversubscribed
 * cores), and then the warm-up's rate is the peak (which understates it, so MFU reads high). */
static const double slow_call_seconds = 0.4, very_slow_call_seconds = 1.0;

/* c = a b for n x n blocks of row-major matrices (leading dimension n for the full size; the half-size warm-up
 * multiplies the leading n/2 x n/2 blocks, which for bf16 are packed anew: oneDNN takes dense operands here). */
typedef struct operands {
  const float *a, *b;
  const uint16_t *a16, *b16; /* bf16 copies, or NULL for sgemm */
  float *c;
  int threads;
} operands;

/* Seconds, or 0 when the bf16 product failed (the caller then reports no rate: MFU 0, not a made-up peak). */
static double gemm_seconds(int n, int ld, const operands *o, int sync) {
  if (sync) mtf_world_max(0.0); /* every rank starts together */
  double start = mtf_now_seconds();
  if (o->a16) {
    if (mtf_cpu_bf16_matmul(n, n, n, o->a16, o->b16, o->c, o->threads) != MTF_OK) return 0.0;
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, o->a, ld, o->b, ld, 0.0f, o->c, ld);
  }
  return mtf_now_seconds() - start;
}

static double measure(int n, int max_timed, int bounded, int sync, int bf16_threads, int *timed, int *measured_n);

double mtf_mfu_measure_peak(int n, int max_timed, int bounded, int sync, int *timed, int *measured_n) {
  return measure(n, max_timed, bounded, sync, 0, timed, measured_n);
}

double mtf_mfu_measure_peak_bf16(int n, int max_timed, int bounded, int sync, int threads, int *timed, int *measured_n) {
  return measure(n, max_timed, bounded, sync, threads > 0 ? threads : 1, timed, measured_n);
}

static double measure(int n, int max_timed, int bounded, int sync, int bf16_threads, int *timed, int *measured_n) {
  size_t elements = (size_t)n * (size_t)n;
  float *a = calloc(elements, sizeof(float)), *b = calloc(elements, sizeof(float)), *c = calloc(elements, sizeof(float));
  uint16_t *a16 = bf16_threads ? calloc(elements, sizeof(uint16_t)) : NULL;
  uint16_t *b16 = bf16_threads ? calloc(elements, sizeof(uint16_t)) : NULL;
  if (bf16_threads && (!a16 || !b16)) { /* counts as out of memory below */
    free(a);
    a = NULL;
  }
  int ok = a && b && c;
  if (sync) ok = !mtf_world_any(!ok); /* a rank out of memory: nobody measures, so the collectives match */
  *timed = 0;
  *measured_n = n;
  if (!ok) {
    free(a);
    free(b);
    free(c);
    free(a16);
    free(b16);
    return 0;
  }
  /* Written values, not calloc's shared zero pages, so the operands really occupy memory and cache. */
  for (size_t i = 0; i < elements; i++) {
    a[i] = 1.0f / (float)(1 + i % 7);
    b[i] = a[i];
    c[i] = 0.0f;
  }
  if (bf16_threads)
    for (size_t i = 0; i < elements; i++) a16[i] = b16[i] = mtf_bf16_from_float(a[i]);
  operands o = {a, b, a16, b16, c, bf16_threads};
  int half = n / 2 > 0 ? n / 2 : 1;
  double warm = gemm_seconds(half, n, &o, sync);
  /* The slowest rank decides, so every rank makes the same number of calls. */
  double predicted = 8.0 * (sync ? mtf_world_max(warm) : warm);
  int calls = max_timed;
  if (bounded && predicted > very_slow_call_seconds) calls = 0;
  else if (bounded && predicted > slow_call_seconds && max_timed > 1) calls = 1;
  double best = 0;
  for (int r = 0; r < calls; r++) {
    double t = gemm_seconds(n, n, &o, sync);
    if (t < best || r == 0) best = t;
  }
  *timed = calls;
  free(a);
  free(b);
  free(c);
  free(a16);
  free(b16);
  if (calls == 0) {
    *measured_n = half;
    return warm > 0 ? 2.0 * half * (double)half * half / warm : 0;
  }
  return best > 0 ? 2.0 * n * (double)n * n / best : 0;
}

mtf_mfu_peak mtf_mfu_job_peak(double peak_gflops, int host_compute, int bf16_threads) {
  mtf_mfu_peak p = {.ranks = mtf_world_size(), .n = MTF_MFU_SGEMM_N, .bf16 = bf16_threads > 0};
  if (peak_gflops > 0) {
    p.per_rank = peak_gflops * 1e9;
  } else if (!host_compute) {
    p.unknown = 1;
  } else {
    p.measured = 1;
    p.per_rank = measure(MTF_MFU_SGEMM_N, 2, 1, 1, bf16_threads, &p.timed_calls, &p.n);
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
    snprintf(buf, size, "%dx%.1f GFLOP/s measured by %s %d^3 (all ranks at once; the best of %d timed "
             "call%s after a half-size warm-up)", p->ranks, p->per_rank / 1e9, p->bf16 ? "bf16 matmul" : "cblas_sgemm", p->n, p->timed_calls, p->timed_calls > 1 ? "s" : "");
  else
    snprintf(buf, size, "%dx%.1f GFLOP/s measured by %s %d^3 (all ranks at once; the warm-up only: a "
             "%d^3 call would have been slow; set backend.peak_gflops for a truer ceiling)", p->ranks,
             p->per_rank / 1e9, p->bf16 ? "bf16 matmul" : "cblas_sgemm", p->n, 2 * p->n);
}

double mtf_mfu(double flops_per_token, double tokens_per_second, double job_peak) {
  return job_peak > 0 ? flops_per_token * tokens_per_second / job_peak : 0;
}
