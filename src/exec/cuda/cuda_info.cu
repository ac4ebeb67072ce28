#include "exec/cuda/cuda_kernel.h" /* first: names the entry point for the emulator */
#include "exec/cuda/cuda_info.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

extern "C" void mtf_cuda_describe(char *buf, size_t size) {
  int runtime = 0, nccl = 0, devices = 0;
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  cudaError_t rc = cudaGetDeviceCount(&devices);
  int used = snprintf(buf, size, "CUDA runtime %d.%d, NCCL %d.%d.%d, cuBLAS %d: ", runtime / 1000,
                      (runtime % 1000) / 10, nccl / 10000, (nccl % 10000) / 100, nccl % 100, CUBLAS_VERSION);
  if (used < 0 || (size_t)used >= size) return;
  if (rc != cudaSuccess) {
    snprintf(buf + used, size - used, "no usable GPU (%s)", cudaGetErrorString(rc));
    return;
  }
  for (int d = 0; d < devices && (size_t)used < size; d++) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    used += snprintf(buf + used, size - used, "%sGPU %d %s (sm_%d%d, %.0f GiB)", d ? "; " : "", d, prop.name,
                     prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  }
}
