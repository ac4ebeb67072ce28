/* Linked into a test program, this makes the kind "cuda-emu" exist before main runs: the CUDA backend of
 * src/exec/cuda compiled against the host emulator (mtf_cuda_emu, this folder). A constructor, so that a test
 * program shared with the other backends (backend_conformance.c) needs no change to get it. */
#include "exec/backend.h"

int mtf_cuda_emu_backend_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err);

__attribute__((constructor)) static void register_cuda_emu(void) {
  /* the cuda backend's abilities (exec/registry.c), computing on the host's cores; no GPU, so the GPU keys
   * (backend.device, backend.tf32, backend.comm: nccl) stay cuda's own and its backend line is the host one */
  static const mtf_backend_caps caps = {.kind = "cuda-emu", .bf16 = 1, .bf16_grad_reduce = 1, .microbatches = 1,
                                        .generate = 1, .arena_alignment = 256, .host_peak = 1};
  mtf_backend_register(&caps, mtf_cuda_emu_backend_create);
}
