/* Linked into a test program, this makes the kind "cuda-emu" exist before main runs: the CUDA backend of
 * src/exec/cuda compiled against the host emulator (mtf_cuda_emu, this folder). A constructor, so that a test
 * program shared with the other backends (backend_conformance.c) needs no change to get it. */
#include "exec/backend.h"

int mtf_cuda_emu_backend_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err);

__attribute__((constructor)) static void register_cuda_emu(void) {
  mtf_backend_register("cuda-emu", mtf_cuda_emu_backend_create);
}
