/* The CUDA emulator's cuda_runtime.h (tests/cuda_emu): the subset of the CUDA runtime API, kernel qualifiers
 * and device built-ins that src/exec/cuda/ (every .cu) uses, so that g++ compiles those same files as C++ and their
 * kernels run on the host. Memory is host memory from malloc, tracked so that a device/host mix-up in a copy
 * is an error as on a GPU; launches run the blocks one after another and a block's threads as fibers that
 * meet at __syncthreads (emu_launch.h). Streams and events exist but everything is synchronous. */
#ifndef MTF_CUDA_EMU_RUNTIME_H
#define MTF_CUDA_EMU_RUNTIME_H

#ifndef MTF_CUDA_EMU
#define MTF_CUDA_EMU 1
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver_types.h"

/* ---- qualifiers: all code is host code; a block's __shared__ variables are statics, which its fibers (one OS
 * thread, blocks in turn) share as a block's threads share shared memory. ---- */
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__ static
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
#ifndef __restrict__
#define __restrict__ __restrict
#endif
#define __CUDACC_EMU__ 1

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
struct int2 {
  int x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline int2 make_int2(int x, int y) { return int2{x, y}; }

/* The running thread's coordinates, set by the launch before each fiber runs. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

void mtf_emu_syncthreads(void);
#define __syncthreads() mtf_emu_syncthreads()
inline void __threadfence(void) {}
inline void __threadfence_block(void) {}
template <typename T> inline T __ldg(const T *p) { return *p; }

/* Atomics: the fibers of a launch run on one OS thread and switch only at __syncthreads, so a plain
 * read-modify-write is atomic here. Only the ones the rules allow (float and int add). */
inline float atomicAdd(float *p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}
inline int atomicAdd(int *p, int v) {
  int old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) {
  unsigned old = *p;
  *p = old + v;
  return old;
}

/* ---- device math built-ins that the C library lacks ---- */
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __int_as_float(int v) {
  float f;
  memcpy(&f, &v, sizeof f);
  return f;
}
inline int __float_as_int(float f) {
  int v;
  memcpy(&v, &f, sizeof v);
  return v;
}
inline float __uint_as_float(unsigned v) {
  float f;
  memcpy(&f, &v, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned v;
  memcpy(&v, &f, sizeof v);
  return v;
}
/* CUDA's device min/max overloads. */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

/* ---- runtime API ----
 * C++ linkage on purpose (the real ones are extern "C"): a test program may link the real libcudart too,
 * in a build with nvcc, and the emulated sources then still call these. */
#define CUDART_VERSION 13000

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t stream);
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeAsync(void *p, cudaStream_t stream);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *p);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
/* cudaFuncAttributeMaxDynamicSharedMemorySize only, up to the device's opt-in 227 KiB (an H100's): a launch of
 * func may then ask that much dynamic shared memory; without it, at most 48 KiB (larger launches fail with
 * cudaErrorInvalidValue as on a GPU). */
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value);
template <typename F> inline cudaError_t cudaFuncSetAttribute(F *func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute((const void *)func, attr, value);
}

/* ---- emulator-only: what tests and the launch use ---- */
/* Is p inside memory from cudaMalloc (any byte of [p, p + bytes))? */
int mtf_emu_is_device(const void *p, size_t bytes);
/* Records a launch or API failure as the sticky-until-read error that cudaGetLastError returns. */
void mtf_emu_set_error(cudaError_t e, const char *detail);
/* The text of the last failure (what the launch found: a barrier not reached by every thread, ...). */
const char *mtf_emu_last_detail(void);
/* May a launch of func ask shared_bytes of dynamic shared memory (48 KiB, or what cudaFuncSetAttribute set)?
 * cudaSuccess, or cudaErrorInvalidValue, recorded with the detail. */
cudaError_t mtf_emu_check_dynamic_shared(const void *func, size_t shared_bytes);

#include "emu_launch.h"

#endif
