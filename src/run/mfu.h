/* The ceiling for model FLOPs utilisation: per rank either backend.peak_gflops or a cblas_sgemm rate
 * measured at start-up, summed over the job. */
#ifndef MTF_RUN_MFU_H
#define MTF_RUN_MFU_H

#include <stddef.h>

typedef struct mtf_mfu_peak {
  double job;      /* FLOP/s summed over the ranks */
  double per_rank; /* FLOP/s, the mean over the ranks */
  int ranks;
  int measured;    /* 1: the sgemm below; 0: backend.peak_gflops */
  int unknown;     /* 1: none (a device backend without backend.peak_gflops: the host's sgemm is no ceiling) */
  int n;           /* the sgemm's size n (an n^3 product): MTF_MFU_SGEMM_N, or half that when only the warm-up ran */
  int timed_calls; /* n^3 calls timed after the warm-up (0: the warm-up's rate, on a slow or busy machine) */
  int bf16;        /* measured with bfloat16 operands (backend.precision bf16 on cpu), not cblas_sgemm */
} mtf_mfu_peak;

/* The sgemm measured: large enough (2 x 2048^3 = 17 GFLOP) that OpenBLAS reaches its steady rate, which a
 * 512^3 product does not (it undercounts the peak and inflates MFU). */
enum { MTF_MFU_SGEMM_N = 2048 };

/* FLOP/s of cblas_sgemm on an n^3 product with this rank's BLAS threads: a warm-up (an (n/2)^3 product),
 * then `max_timed` n^3 calls, the best of them; bounded: fewer, down to none when the warm-up predicts a slow
 * call, and then the rate is the warm-up's (*measured_n = n/2). With sync every rank starts each call
 * together (collective), so ranks sharing a node compete as they do in training. *timed gets the n^3 calls
 * timed. tools/bench_sgemm.c runs it unbounded. */
double mtf_mfu_measure_peak(int n, int max_timed, int bounded, int sync, int *timed, int *measured_n);
/* The same with bfloat16 operands and fp32 accumulation (mtf_cpu_bf16_matmul: oneDNN, AMX where there is one) on
 * `threads` threads: the ceiling of a bf16 run's products. */
double mtf_mfu_measure_peak_bf16(int n, int max_timed, int bounded, int sync, int threads, int *timed, int *measured_n);
/* Collective: the job's peak. peak_gflops > 0 (backend.peak_gflops, per rank) is taken as given; 0 measures
 * (MTF_MFU_SGEMM_N; about 0.4 s on a quiet 100 GFLOP/s rank, at most about 1.3 s) when the backend computes
 * on the host (host_compute), and is unknown otherwise (MFU then 0, the header says why). */
mtf_mfu_peak mtf_mfu_job_peak(double peak_gflops, int host_compute, int bf16_threads);
/* bf16_threads > 0: the bf16 products (mtf_mfu_measure_peak_bf16 on that many threads) instead of sgemm. */
/* "2x110.3 GFLOP/s measured by cblas_sgemm 2048^3 ..." or "... from backend.peak_gflops". */
void mtf_mfu_describe(const mtf_mfu_peak *peak, char *buf, size_t size);
/* Model FLOPs per second over the job's peak (0 when the peak is unknown). */
double mtf_mfu(double flops_per_token, double tokens_per_second, double job_peak);

#endif
