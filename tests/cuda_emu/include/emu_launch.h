/* The CUDA emulator's kernel launch (tests/cuda_emu). MTF_LAUNCH (cuda_kernel.h) expands, under MTF_CUDA_EMU,
 * to mtf_emu_launch(kernel, grid, block, shared_bytes, stream, args...): the arguments are converted to the
 * kernel's parameter types once (as a launch copies them), then every thread of every block runs the kernel
 * on its own copy. Blocks run one after another; the threads of a block are fibers on one OS thread that run
 * until they finish or reach __syncthreads, so a barrier is where they meet, and shared memory (statics,
 * the dynamic buffer) is theirs alone for the block. A barrier that some of a block's threads never reach
 * (they returned) is reported as a launch failure: on a GPU that is undefined behaviour. More than 48 KiB of
 * dynamic shared memory needs cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
 * first, as on a GPU. */
#ifndef MTF_CUDA_EMU_LAUNCH_H
#define MTF_CUDA_EMU_LAUNCH_H

#include <tuple>
#include <utility>

/* Runs `body(closure)` as every thread of the grid (emu_fiber.cpp). Returns cudaSuccess or the error it also
 * records for cudaGetLastError. */
cudaError_t mtf_emu_run_grid(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, void (*body)(void *),
                             void *closure);
/* The launch's dynamic shared memory (shared_bytes of it, 128-byte aligned, 0xff bytes at each launch). */
void *mtf_emu_dynamic_shared(void);

template <typename... P> struct mtf_emu_closure {
  void (*kernel)(P...);
  std::tuple<P...> params;
  static void run(void *c) {
    mtf_emu_closure *self = static_cast<mtf_emu_closure *>(c);
    std::tuple<P...> own = self->params; /* each thread its own copy of the parameters */
    std::apply(self->kernel, own);
  }
};

template <typename... P, typename... A>
inline void mtf_emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                           A &&...args) {
  static_assert(sizeof...(P) == sizeof...(A), "MTF_LAUNCH: the kernel's parameter count differs from the arguments'");
  if (mtf_emu_check_dynamic_shared((const void *)kernel, shared_bytes) != cudaSuccess) return;
  mtf_emu_closure<P...> closure{kernel, std::tuple<P...>(static_cast<P>(std::forward<A>(args))...)};
  mtf_emu_run_grid(grid, block, shared_bytes, stream, &mtf_emu_closure<P...>::run, &closure);
}

/* cuda_kernel.h's MTF_LAUNCH and MTF_DYNAMIC_SHARED under MTF_CUDA_EMU. */
#define MTF_CUDA_EMU_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  mtf_emu_launch(kernel, grid, block, shared_bytes, stream, ##__VA_ARGS__)
#define MTF_CUDA_EMU_DYNAMIC_SHARED() mtf_emu_dynamic_shared()

#endif
