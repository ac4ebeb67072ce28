/* What the CUDA side of this build can see (runtime, driver, cuBLAS and NCCL versions, the visible GPUs),
 * the GPU a rank picks, and the `cuda` backend's probe (mtf --version, the start of a run). All of it is
 * safe on a machine without a GPU or driver: it then says so, naming what was looked for. */
#include "exec/cuda/cuda_kernel.h" /* first: names the entry points for the emulator */
#include "exec/cuda/cuda_info.h"

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int *value) {
  const char *text = getenv(name);
  if (!text || !*text) return 0;
  char *end;
  long v = strtol(text, &end, 10);
  if (*end || v < 0 || v > 1 << 20) return 0;
  *value = (int)v;
  return 1;
}

static void versions(char *buf, size_t size) {
  int runtime = 0, driver = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  ncclGetVersion(&nccl);
  char driver_text[64];
  if (driver > 0)
    snprintf(driver_text, sizeof driver_text, "driver CUDA %d.%d", driver / 1000, (driver % 1000) / 10);
  else
    snprintf(driver_text, sizeof driver_text, "no NVIDIA driver (libcuda.so.1 not found)");
  snprintf(buf, size, "%s, CUDA runtime %d.%d, cuBLAS %d.%d.%d, NCCL %d.%d.%d", driver_text, runtime / 1000,
           (runtime % 1000) / 10, CUBLAS_VERSION / 10000, (CUBLAS_VERSION % 10000) / 100, CUBLAS_VERSION % 100,
           nccl / 10000, (nccl % 10000) / 100, nccl % 100);
}

extern "C" void mtf_cuda_describe(char *buf, size_t size) {
  int devices = 0;
  cudaError_t rc = cudaGetDeviceCount(&devices);
  versions(buf, size);
  size_t used = strlen(buf);
  if (used + 2 >= size) return;
  if (rc != cudaSuccess || devices == 0) {
    snprintf(buf + used, size - used, ": no usable GPU (%s)", rc != cudaSuccess ? cudaGetErrorString(rc) : "none visible");
    return;
  }
  for (int d = 0; d < devices && used + 2 < size; d++) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    int n = snprintf(buf + used, size - used, "%sGPU %d %s (sm_%d%d, %.0f GiB)", d ? "; " : ": ", d, prop.name,
                     prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    if (n < 0) return;
    used += (size_t)n;
  }
}

MTF_CUDA_BEGIN

int mtf_cuda_pick_device(const mtf_backend_options *o, int *device, mtf_error *err) {
  int devices = 0;
  cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    char v[256];
    versions(v, sizeof v);
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "backend.kind cuda: no usable GPU: cudaGetDeviceCount says %s (looked for NVIDIA GPUs through "
                         "the driver's libcuda.so.1, CUDA_VISIBLE_DEVICES %s%s%s; %s). Run on a node with a GPU, or "
                         "use backend.kind: cpu",
                         rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices", visible ? "= '" : "unset",
                         visible ? visible : "", visible ? "'" : "", v);
  }
  if (o->device >= 0) {
    if (o->device >= devices)
      return mtf_error_set(err, MTF_ERR_INVALID, "backend.device: %d, but this node shows %d GPU%s (0..%d)", o->device,
                           devices, devices == 1 ? "" : "s", devices - 1);
    *device = o->device;
    return MTF_OK;
  }
  int local = 0;
  if (!env_int("OMPI_COMM_WORLD_LOCAL_RANK", &local) && !env_int("SLURM_LOCALID", &local)) local = 0;
  /* More ranks than GPUs share them (the communicator then stages through MPI: NCCL refuses shared GPUs). */
  *device = local % devices;
  return MTF_OK;
}

MTF_CUDA_END

extern "C" int mtf_cuda_probe(const mtf_backend_options *o, char *out, size_t cap, mtf_error *err) {
  if (cap) out[0] = 0;
  int device = 0;
  MTF_CHECK(MTF_CUDA_NS::mtf_cuda_pick_device(o, &device, err));
  cudaDeviceProp prop;
  cudaError_t rc = cudaGetDeviceProperties(&prop, device);
  if (rc != cudaSuccess)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.kind cuda: GPU %d: cudaGetDeviceProperties: %s", device,
                         cudaGetErrorString(rc));
  char v[256];
  versions(v, sizeof v);
  snprintf(out, cap, "cuda: GPU %d %s (sm_%d%d, %.0f GiB, %d SMs); %s; %s, tf32 %s", device, prop.name, prop.major,
           prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.multiProcessorCount, v,
           o->precision == MTF_PRECISION_BF16 ? "bf16 einsums (fp32 accumulate)" : "fp32", o->tf32 ? "on" : "off");
  return MTF_OK;
}
