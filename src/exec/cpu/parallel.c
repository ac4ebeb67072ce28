/* The CPU kernels' thread pool (parallel.h): workers are started on first use and live for the process,
 * as OpenBLAS' do. One loop runs at a time; its chunks are handed out by a generation counter: a worker
 * waits for the generation to change (spinning briefly, then on a condition variable), runs its chunk if
 * its id is below the loop's thread count, and counts itself done. */
#define _POSIX_C_SOURCE 200809L
#include "exec/cpu/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* How long an idle thread (a worker between loops, the caller waiting for the workers) spins before it
 * sleeps: long enough to catch back-to-back kernels without a wake-up, short enough not to matter to the
 * thread that needs the core (an sgemm's, another rank's). */
#define MTF_CPU_SPIN_NS 20000

static struct {
  pthread_mutex_t lock; /* guards the job fields and the condition variables */
  pthread_cond_t start, done;
  atomic_uint_fast64_t generation; /* bumped when a job is published */
  atomic_int pending;              /* workers still running the current job */
  int workers;                     /* started, ids 1..workers */
  int nt;
  int64_t n;
  mtf_cpu_chunk_fn fn;
  void *ctx;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0};

/* Held by the thread whose loop is running: a second caller (another thread, or a chunk calling a kernel)
 * does not wait for it but runs its loop serially. */
static pthread_mutex_t caller = PTHREAD_MUTEX_INITIALIZER;

typedef struct worker_arg {
  int id;
  uint_fast64_t seen; /* the generation when it was started: it takes part from the next job on */
} worker_arg;

static worker_arg worker_args[MTF_CPU_MAX_THREADS];

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spins until *flag differs from `value` or MTF_CPU_SPIN_NS pass; whether it changed. */
static int spin_while_u64(atomic_uint_fast64_t *flag, uint_fast64_t value) {
  int64_t end = now_ns() + MTF_CPU_SPIN_NS;
  for (int i = 1;; i++) {
    if (atomic_load_explicit(flag, memory_order_acquire) != value) return 1;
    cpu_relax();
    if (i % 64 == 0 && now_ns() > end) return 0;
  }
}

static int spin_while_positive(atomic_int *count) {
  int64_t end = now_ns() + MTF_CPU_SPIN_NS;
  for (int i = 1;; i++) {
    if (atomic_load_explicit(count, memory_order_acquire) <= 0) return 1;
    cpu_relax();
    if (i % 64 == 0 && now_ns() > end) return 0;
  }
}

static void run_chunk(mtf_cpu_chunk_fn fn, void *ctx, int64_t n, int i, int nt) {
  int64_t lo = n * i / nt, hi = n * (i + 1) / nt;
  if (lo < hi) fn(ctx, lo, hi);
}

static void *worker_main(void *p) {
  worker_arg *arg = p;
  uint_fast64_t seen = arg->seen;
  for (;;) {
    spin_while_u64(&pool.generation, seen);
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.start, &pool.lock);
    seen = atomic_load(&pool.generation);
    int nt = pool.nt;
    int64_t n = pool.n;
    mtf_cpu_chunk_fn fn = pool.fn;
    void *ctx = pool.ctx;
    pthread_mutex_unlock(&pool.lock);
    if (arg->id >= nt) continue;
    run_chunk(fn, ctx, n, arg->id, nt);
    if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&pool.lock);
      pthread_cond_signal(&pool.done);
      pthread_mutex_unlock(&pool.lock);
    }
  }
  return NULL;
}

/* A child of fork() has none of the workers (nor a running loop): it starts from an empty pool. */
static void reset_in_child(void) {
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.start, NULL);
  pthread_cond_init(&pool.done, NULL);
  pthread_mutex_init(&caller, NULL);
  atomic_store(&pool.pending, 0);
  pool.workers = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_in_child); }

/* Starts workers up to id nt - 1 (the caller holds `caller`); how many threads the loop can use. */
static int ensure_workers(int nt) {
  pthread_once(&atfork_once, register_atfork);
  while (pool.workers < nt - 1) {
    int id = pool.workers + 1;
    worker_args[id] = (worker_arg){id, atomic_load(&pool.generation)};
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, worker_main, &worker_args[id]);
    pthread_attr_destroy(&attr);
    if (rc != 0) break; /* fewer threads; the results are the same */
    pool.workers = id;
  }
  return pool.workers + 1 < nt ? pool.workers + 1 : nt;
}

void mtf_cpu_parallel_for(int nt, int64_t n, mtf_cpu_chunk_fn fn, void *ctx) {
  if (nt > MTF_CPU_MAX_THREADS) nt = MTF_CPU_MAX_THREADS;
  if (nt > n) nt = (int)n;
  if (nt <= 1 || pthread_mutex_trylock(&caller) != 0) {
    if (n > 0) fn(ctx, 0, n);
    return;
  }
  nt = ensure_workers(nt);
  if (nt > 1) {
    pthread_mutex_lock(&pool.lock);
    pool.nt = nt;
    pool.n = n;
    pool.fn = fn;
    pool.ctx = ctx;
    atomic_store(&pool.pending, nt - 1);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
  }
  run_chunk(fn, ctx, n, 0, nt);
  if (nt > 1 && !spin_while_positive(&pool.pending)) {
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.pending) > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
  }
  pthread_mutex_unlock(&caller);
}
