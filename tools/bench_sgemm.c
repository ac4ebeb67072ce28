/* The sgemm ceiling of this machine as `mtf train` measures it (src/run/mfu.c), for benchmarks that want it
 * in the same run as their timings (tools/bench_peers.sh):
 *
 *   OPENBLAS_NUM_THREADS=T mpiexec -n R mtf_bench_sgemm [N [CALLS [bf16]]]
 *
 * With bf16 the product takes bfloat16 operands the way a backend.precision bf16 run multiplies them
 * (mtf_cpu_bf16_matmul: oneDNN; AMX where the CPU has it) on T threads: the ceiling of the bf16 setups.
 * Every rank runs cblas_sgemm N^3 (default 2048) on its T threads at the same time: a (N/2)^3 warm-up, then CALLS
 * (default 5) timed calls, the best of them per rank. Prints one line on rank 0:
 *   sgemm 2048^3: 2 ranks x 1 threads: per rank 51.2 GFLOP/s (min 50.1, max 52.3), sum 102.4 GFLOP/s */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/world.h"
#include "run/mfu.h"

int main(int argc, char **argv) {
  mtf_cli_choose_blas_kernels(argv); /* the kernels mtf itself runs with (src/cli/blas_kernels.c) */
  if (mtf_world_init(&argc, &argv) != MTF_OK) return 1;
  int n = argc > 1 ? atoi(argv[1]) : MTF_MFU_SGEMM_N, calls = argc > 2 ? atoi(argv[2]) : 5;
  int bf16 = argc > 3 && strcmp(argv[3], "bf16") == 0;
  if (n < 1 || calls < 1 || (argc > 3 && !bf16) || argc > 4) {
    if (mtf_world_rank() == 0) fprintf(stderr, "usage: mpiexec -n R mtf_bench_sgemm [N >= 1 [CALLS >= 1 [bf16]]]\n");
    mtf_world_finalize();
    return 2;
  }
  int timed, measured_n;
  double rate = bf16 ? mtf_mfu_measure_peak_bf16(n, calls, 0, 1, openblas_get_num_threads(), &timed, &measured_n)
                     : mtf_mfu_measure_peak(n, calls, 0, 1, &timed, &measured_n);
  double sum = mtf_world_sum(rate), high = mtf_world_max(rate), low = -mtf_world_max(-rate);
  if (mtf_world_rank() == 0)
    printf("%s %d^3: %d ranks x %d threads: per rank %.1f GFLOP/s (min %.1f, max %.1f), sum %.1f GFLOP/s "
           "(best of %d timed calls after a half-size warm-up, all ranks at once)\n", bf16 ? "bf16 matmul" : "sgemm", n,
           mtf_world_size(),
           openblas_get_num_threads(), sum / mtf_world_size() / 1e9, low / 1e9, high / 1e9, sum / 1e9, timed);
  mtf_world_finalize();
  return rate > 0 ? 0 : 1;
}
