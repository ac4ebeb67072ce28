/* Threads for the CPU kernels: a loop of n independent iterations split into `nt` contiguous chunks, run
 * on a small process-wide pool of pthreads (the calling thread takes chunk 0), serial when the work is
 * small (handing a chunk to a thread costs microseconds; most of a model's small tensors are not worth it).
 *
 * Why not OpenMP: libgomp's idle threads spin for milliseconds after each parallel region (unless
 * OMP_WAIT_POLICY=passive is in the environment before the program starts), and that spinning takes the
 * core away from OpenBLAS' threads in the sgemm that follows, or from another rank on the same node: on the
 * 2-core benchmark machine 1 rank x 2 threads ran 2-4x slower than with one thread. This pool's idle
 * threads spin for at most MTF_CPU_SPIN_NS and then sleep on a condition variable.
 *
 * Every kernel splits only loops whose iterations write disjoint outputs and computes each output element
 * by one thread in a fixed order, so results do not depend on the thread count
 * (tests/engine/test_cpu_kernels.c compares 1, 2 and 3 threads bitwise). */
#ifndef MTF_EXEC_CPU_PARALLEL_H
#define MTF_EXEC_CPU_PARALLEL_H

#include <stdint.h>

/* Elements below which a kernel stays on one thread (about 10 us of elementwise work). */
#define MTF_CPU_PARALLEL_MIN 32768
#define MTF_CPU_MAX_THREADS 64

/* Threads for a kernel touching `elements` elements: 1 when small, else up to `threads`, each with at
 * least half the threshold's elements. */
static inline int mtf_cpu_threads(int threads, int64_t elements) {
  if (threads <= 1 || elements < MTF_CPU_PARALLEL_MIN) return 1;
  int64_t useful = elements / (MTF_CPU_PARALLEL_MIN / 2);
  int nt = useful < threads ? (int)useful : threads;
  return nt < MTF_CPU_MAX_THREADS ? nt : MTF_CPU_MAX_THREADS;
}

/* One chunk of a parallel loop: iterations [lo, hi). */
typedef void (*mtf_cpu_chunk_fn)(void *ctx, int64_t lo, int64_t hi);

/* Runs fn over [0, n) in nt chunks [n*i/nt, n*(i+1)/nt), chunk 0 on the calling thread; returns when all
 * are done. nt <= 1, a call from inside a chunk, or a call while another thread's loop runs: one chunk
 * [0, n) on the calling thread. */
void mtf_cpu_parallel_for(int nt, int64_t n, mtf_cpu_chunk_fn fn, void *ctx);

#endif
