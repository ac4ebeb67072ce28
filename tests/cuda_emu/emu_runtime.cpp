/* The CUDA emulator's runtime API (tests/cuda_emu): one emulated device, memory from malloc tracked by
 * address so that copies check their direction (a host pointer where a device one belongs is the mix-up a GPU
 * reports as an invalid argument or an illegal address), the sticky last error, streams and events that are
 * handles only (every operation completes before it returns). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <chrono>
#include <map>

#include "cuda_runtime.h"

struct CUstream_st {
  int id;
};
struct CUevent_st {
  int recorded;
  unsigned flags;
  std::chrono::steady_clock::time_point when; /* the host's clock: the emulator's work is done when recorded */
};

namespace {

std::map<uintptr_t, size_t> &allocations() {
  static std::map<uintptr_t, size_t> live; /* start -> bytes of every cudaMalloc block */
  return live;
}
cudaError_t last_error = cudaSuccess;
char last_detail[512];
int current_device = 0;
const size_t EMULATED_MEMORY = (size_t)16 << 30;
size_t allocated_bytes = 0;

cudaError_t fail(cudaError_t e, const char *detail) {
  mtf_emu_set_error(e, detail);
  return e;
}

/* The allocation holding [p, p + bytes), or none. */
bool inside_device(const void *p, size_t bytes) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto &live = allocations();
  auto it = live.upper_bound(a);
  if (it == live.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  char detail[200];
  bool dst_device = inside_device(dst, bytes ? bytes : 1), src_device = inside_device(src, bytes ? bytes : 1);
  bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) return cudaSuccess;
  if (kind > cudaMemcpyDefault) return fail(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: invalid kind");
  if (bytes == 0) return cudaSuccess;
  if (want_dst != dst_device || want_src != src_device) {
    snprintf(detail, sizeof detail,
             "cudaMemcpy of %zu bytes, kind %d: destination %p is %s memory, source %p is %s memory", bytes,
             (int)kind, dst, dst_device ? "device" : "host (or not a whole device block)", src,
             src_device ? "device" : "host (or not a whole device block)");
    return fail(cudaErrorInvalidValue, detail);
  }
  return cudaSuccess;
}

}  // namespace

void mtf_emu_set_error(cudaError_t e, const char *detail) {
  if (last_error == cudaSuccess) last_error = e;
  snprintf(last_detail, sizeof last_detail, "%s", detail ? detail : "");
  if (getenv("MTF_CUDA_EMU_VERBOSE")) fprintf(stderr, "cuda emulator: %s\n", last_detail);
}

const char *mtf_emu_last_detail(void) { return last_detail; }

int mtf_emu_is_device(const void *p, size_t bytes) { return inside_device(p, bytes) ? 1 : 0; }

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t e) {
  static char text[640];
  if (e == cudaSuccess) return "no error";
  snprintf(text, sizeof text, "%s (emulated%s%s)", cudaGetErrorName(e), last_detail[0] ? ": " : "", last_detail);
  return text;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaSetDevice: the emulator has one device, 0");
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: the emulator has one device, 0");
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "mtf CUDA emulator (host)");
  prop->totalGlobalMem = EMULATED_MEMORY;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  prop->l2CacheSize = 1 << 20;
  prop->memoryBusWidth = 64;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  cudaError_t rc = cudaGetDeviceProperties(&p, device);
  if (rc != cudaSuccess) return rc;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId: the emulator has one device, 0");
  /* One GPU for the whole host, as ranks sharing a GPU see it (NCCL refuses that, so backend.comm auto stages);
   * MTF_EMU_GPUS=per-process gives each process a GPU of its own, as one GPU per rank does. */
  const char *gpus = getenv("MTF_EMU_GPUS");
  unsigned bus = gpus && strcmp(gpus, "per-process") == 0 ? (unsigned)getpid() : 0u;
  snprintf(bus_id, (size_t)(len > 0 ? len : 0), "%04x:%02x:00.0", (bus >> 8) & 0xffffu, bus & 0xffu);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  *total_bytes = EMULATED_MEMORY;
  *free_bytes = EMULATED_MEMORY > allocated_bytes ? EMULATED_MEMORY - allocated_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  /* 256-byte aligned as cudaMalloc's, never NULL for 0 bytes (a block of 1) so every block has an address.
   * Exactly `bytes` long, so that under AddressSanitizer a kernel reading or writing past a buffer's end is
   * caught. Filled with 0xff bytes (float NaN, int32 -1): device memory starts as garbage, and a kernel that
   * reads what nobody wrote must not pass because fresh host pages happen to be zeros. */
  void *block = nullptr;
  *p = nullptr;
  if (bytes > EMULATED_MEMORY - (allocated_bytes < EMULATED_MEMORY ? allocated_bytes : EMULATED_MEMORY))
    return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of the emulated device's memory");
  if (posix_memalign(&block, 256, bytes ? bytes : 1) != 0) block = nullptr;
  *p = block;
  if (!block) return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of host memory");
  memset(block, 0xff, bytes ? bytes : 1);
  allocations()[reinterpret_cast<uintptr_t>(block)] = bytes ? bytes : 1;
  allocated_bytes += bytes;
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  auto &live = allocations();
  auto it = live.find(reinterpret_cast<uintptr_t>(p));
  if (it == live.end()) return fail(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
  allocated_bytes -= it->second;
  live.erase(it);
  free(p);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMallocHost(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaMallocHost: out of host memory");
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  cudaError_t rc = check_copy(dst, src, bytes, kind);
  if (rc != cudaSuccess) return rc;
  if (bytes) memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  if (bytes && !inside_device(p, bytes)) return fail(cudaErrorInvalidValue, "cudaMemset of memory that is not the device's");
  if (bytes) memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *p) {
  bool device = inside_device(p, 1);
  attr->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  attr->device = 0;
  attr->devicePointer = device ? const_cast<void *>(p) : nullptr;
  attr->hostPointer = device ? nullptr : const_cast<void *>(p);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
  static int streams;
  *s = new CUstream_st{++streams};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned, int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on a null event");
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new CUevent_st{0, 0, {}};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  *e = new CUevent_st{0, flags, {}};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord on a null event");
  e->recorded = 1;
  e->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
/* As CUDA: both events recorded and made with timing (not cudaEventDisableTiming). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on a null event");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event made with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
namespace {
const int SHARED_DEFAULT = 48 * 1024, SHARED_OPTIN = 227 * 1024; /* an H100's per-block limits */
std::map<const void *, int> &dynamic_shared_limits() {
  static std::map<const void *, int> limits; /* kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize */
  return limits;
}
}  // namespace

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute of a null function");
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute not emulated");
  if (value < 0 || value > SHARED_OPTIN) {
    char detail[160];
    snprintf(detail, sizeof detail,
             "cudaFuncSetAttribute: %d bytes of dynamic shared memory (a block has at most %d)", value, SHARED_OPTIN);
    return fail(cudaErrorInvalidValue, detail);
  }
  dynamic_shared_limits()[func] = value;
  return cudaSuccess;
}

cudaError_t mtf_emu_check_dynamic_shared(const void *func, size_t shared_bytes) {
  auto &limits = dynamic_shared_limits();
  auto it = limits.find(func);
  size_t limit = (size_t)(it == limits.end() ? SHARED_DEFAULT : it->second);
  if (shared_bytes <= limit) return cudaSuccess;
  char detail[240];
  snprintf(detail, sizeof detail,
           "launch asks %zu bytes of dynamic shared memory, more than the kernel's %zu (above 48 KiB only after "
           "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))",
           shared_bytes, limit);
  return fail(cudaErrorInvalidValue, detail);
}
