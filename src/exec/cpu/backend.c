/* The CPU backend: host memory (64-byte aligned; 2 MiB pages for large buffers), OpenBLAS threads per rank,
 * and the kernel table. */
#define _DEFAULT_SOURCE /* madvise */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm/tensor_pack.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"

/* Buffers of 2 MiB and more (the plan's arena, the embedding and its slots) start on a 2 MiB boundary and ask
 * the kernel for transparent huge pages (Linux's default THP mode, "madvise", gives them only to regions that
 * ask): the AMX products walk their operands across many 4 KiB pages, and each TLB miss costs a two-level walk
 * in a virtual machine. A 1024 x 1024 x 256 bf16 product measured 482 -> 815 GFLOP/s (docs/PERFORMANCE.md).
 * At most 2 MiB of rounding per such buffer; the advice failing (no THP) changes nothing else. */
#define CPU_HUGE_PAGE ((size_t)2 << 20)

static void *cpu_allocate(mtf_backend *b, size_t bytes) {
  (void)b;
  bytes = (bytes ? bytes : 1);
  if (bytes < CPU_HUGE_PAGE) return aligned_alloc(64, (bytes + 63) / 64 * 64);
  bytes = (bytes + CPU_HUGE_PAGE - 1) / CPU_HUGE_PAGE * CPU_HUGE_PAGE;
  void *p = aligned_alloc(CPU_HUGE_PAGE, bytes);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

static void cpu_release(mtf_backend *b, void *p) {
  (void)b;
  free(p);
}

static int cpu_copy(mtf_backend *b, void *dst, const void *src, size_t bytes) {
  (void)b;
  if (dst != src) memmove(dst, src, bytes);
  return MTF_OK;
}

static int cpu_fill_f32(mtf_backend *b, void *dst, float value, int64_t count) {
  mtf_cpu_fill_parallel(b->threads, value, count, dst);
  return MTF_OK;
}

static int cpu_synchronize(mtf_backend *b) {
  (void)b;
  return MTF_OK;
}

static int cpu_slice(mtf_backend *b, const mtf_shape *in_shape, const void *in, const mtf_shape *out_shape,
                     const int64_t *offsets, void *out, size_t elem_size) {
  (void)b;
  mtf_cpu_slice(in_shape, in, out_shape, offsets, out, elem_size);
  return MTF_OK;
}

static int cpu_concat_blocks(mtf_backend *b, const void *blocks, void *out, size_t elem_size, int rank,
                             const int64_t *dims, int axis, int parts) {
  (void)b;
  mtf_pack_concat(blocks, out, elem_size, rank, dims, axis, parts);
  return MTF_OK;
}

static int cpu_split_blocks(mtf_backend *b, const void *in, void *blocks, size_t elem_size, int rank,
                            const int64_t *dims, int axis, int parts) {
  (void)b;
  mtf_pack_split(in, blocks, elem_size, rank, dims, axis, parts);
  return MTF_OK;
}

static const mtf_backend_memory cpu_memory = {
    .allocate = cpu_allocate,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .fill_f32 = cpu_fill_f32,
    .synchronize = cpu_synchronize,
    .slice = cpu_slice,
    .concat_blocks = cpu_concat_blocks,
    .split_blocks = cpu_split_blocks,
};

static void cpu_destroy(mtf_backend *b) { free(b); }

static const char *cpu_bf16_text(mtf_backend *b) {
  (void)b;
  return mtf_cpu_bf16_path();
}

int mtf_cpu_backend_create(int threads, mtf_backend **out, mtf_error *err) {
  mtf_backend *b = calloc(1, sizeof *b);
  if (!b) return mtf_error_set(err, MTF_ERR_NOMEM, "cpu backend: out of memory");
  b->name = "cpu";
  b->mem = &cpu_memory;
  b->destroy = cpu_destroy;
  b->bf16_text = cpu_bf16_text;
  b->bf16_storage = 1;
  b->plan_fusions = MTF_FUSES_ALL;
  mtf_cpu_register_elementwise(b->kernels);
  mtf_cpu_register_einsum(b->kernels);
  mtf_cpu_register_fused(b->kernels);
  mtf_cpu_register_optimizer(b->kernels);
  mtf_cpu_register_attention(b->kernels);
  mtf_cpu_register_fused_grad(b->kernels);
  mtf_cpu_register_select(b->kernels);
  mtf_cpu_register_write_at(b->kernels);
  mtf_cpu_register_bf16(b->kernels);
  /* OpenBLAS' thread count is per process: one rank is one process. The kernels' own thread pool
   * (parallel.h) has as many threads; Debian's default OpenBLAS is the pthreads build, and the two take
   * turns (a kernel and an sgemm never run at the same time). */
  if (threads > 0) openblas_set_num_threads(threads);
  b->threads = openblas_get_num_threads();
  *out = b;
  return MTF_OK;
}
