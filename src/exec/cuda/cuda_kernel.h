/* The conventions every CUDA source of the backend (every .cu of src/exec/cuda/) follows, so that the same files
 * compile with nvcc for a GPU and with g++ against the emulator's fake CUDA headers (tests/cuda_emu/,
 * which defines MTF_CUDA_EMU) and run there on the host:
 *  - kernels are launched only through MTF_LAUNCH, never with <<< >>> written out;
 *  - dynamic shared memory is declared only through MTF_DYNAMIC_SHARED;
 *  - blocks cooperate only through __shared__ memory and __syncthreads (no warp intrinsics, cooperative
 *    groups, dynamic parallelism, inline PTX or textures); atomicAdd on float and int only;
 *  - 1-D blocks and grids, grid-stride loops (MTF_GRID_STRIDE) with int64 indices;
 *  - every CUDA / cuBLAS call and every launch is checked (MTF_CUDA_CHECK, MTF_CUBLAS_CHECK,
 *    MTF_CUDA_CHECK_LAUNCH): a failure returns an mtf error code and keeps its text in the backend's
 *    context (mtf_cuda_fail), which the executor adds to its message.
 *  - everything a .cu file defines for the other .cu files lies between MTF_CUDA_BEGIN and MTF_CUDA_END
 *    (a namespace with C++ linkage); only the C entry points (mtf_cuda_backend_create, _probe, _describe)
 *    are extern "C". Under the emulator the namespace and those two names differ, so a test program can
 *    link the emulated backend next to the real one of a build that has nvcc.
 * C++17; the C headers of mtf are included inside extern "C". */
#ifndef MTF_EXEC_CUDA_CUDA_KERNEL_H
#define MTF_EXEC_CUDA_CUDA_KERNEL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef MTF_CUDA_EMU
#define MTF_CUDA_NS mtf_cuda_emu
#define mtf_cuda_backend_create mtf_cuda_emu_backend_create
#define mtf_cuda_describe mtf_cuda_emu_describe
#define mtf_cuda_probe mtf_cuda_emu_probe
#else
#define MTF_CUDA_NS mtf_cuda_gpu
#endif
#define MTF_CUDA_BEGIN namespace MTF_CUDA_NS {
#define MTF_CUDA_END }

extern "C" {
#include "exec/backend.h"
}

/* ---- launching ---- */

#ifdef MTF_CUDA_EMU
/* The emulator (tests/cuda_emu/) runs kernel(args...) for every thread of every block on the host. */
#define MTF_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  MTF_CUDA_EMU_LAUNCH(kernel, grid, block, shared_bytes, stream, __VA_ARGS__)
#define MTF_DYNAMIC_SHARED(type, name) type *name = (type *)MTF_CUDA_EMU_DYNAMIC_SHARED()
#else
#define MTF_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)
/* One extern array of bytes for every kernel of a translation unit (extern __shared__ arrays of different
 * types under one name would clash), viewed as `type`; 128-byte aligned: float4, double, and wmma tiles (32 bytes). */
#define MTF_DYNAMIC_SHARED(type, name)                                  \
  extern __shared__ __align__(128) unsigned char mtf_dynamic_shared_[]; \
  type *name = reinterpret_cast<type *>(mtf_dynamic_shared_)
#endif

/* Threads of a block for elementwise kernels, and the most a block has (the block reductions' scratch). */
#define MTF_CUDA_THREADS 256
#define MTF_CUDA_MAX_THREADS 1024
/* Blocks of a grid-stride launch at most (the emulator may lower it: each block is work on the host). */
#ifndef MTF_CUDA_MAX_BLOCKS
#define MTF_CUDA_MAX_BLOCKS 65535
#endif

/* Blocks for n elements at `threads` per block, one element per thread, capped (grid-stride loops take the
 * rest); at least 1, so a launch over nothing is still a valid launch. */
static inline unsigned mtf_cuda_blocks(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > MTF_CUDA_MAX_BLOCKS) blocks = MTF_CUDA_MAX_BLOCKS;
  return (unsigned)blocks;
}

/* for (i = this thread's first element; i < n; i += the grid's threads), i an int64_t. */
#define MTF_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n); \
       i += (int64_t)blockDim.x * gridDim.x)

MTF_CUDA_BEGIN

/* ---- the backend's context (backend.cu makes it; b->ctx) ---- */

typedef struct mtf_cuda_context {
  int device;              /* CUDA ordinal this rank computes on */
  cudaStream_t compute;    /* every kernel and GEMM of the plan, in plan order */
  cudaStream_t comm;       /* collectives (exec/cuda/ NCCL communicator), ordered against compute by events */
  cublasHandle_t cublas;   /* bound to `compute` */
  int tf32;                /* backend.tf32: cuBLAS may use TF32 tensor cores for fp32 GEMMs (bfloat16 GEMMs
                            * come from the graph: einsums of MTF_BF16 operands, einsum.cu) */
  int sm_count;            /* multiprocessors (grid sizing) */
  void *comm_state;        /* the NCCL communicator's, when one is bound to this backend */
  void *gemm_workspace;    /* cuBLAS's, set once at creation so that no GEMM allocates one mid-step */
  size_t gemm_workspace_bytes;
  cudaEvent_t *marks;      /* MTF_PROFILE's device timeline (mtf_backend.profile_mark), grown as needed */
  int n_marks;
  char last_error[512];    /* what the last failed CUDA or cuBLAS call said, with where */
} mtf_cuda_context;

static inline mtf_cuda_context *mtf_cuda_ctx(mtf_backend *b) { return (mtf_cuda_context *)b->ctx; }
static inline cudaStream_t mtf_cuda_stream(mtf_backend *b) { return mtf_cuda_ctx(b)->compute; }

/* Records what failed (the call's text, the file and line, CUDA's or cuBLAS' own message) in the context
 * and returns the mtf error code for it (backend.cu). */
int mtf_cuda_fail(mtf_backend *b, cudaError_t code, const char *call, const char *file, int line);
int mtf_cublas_fail(mtf_backend *b, cublasStatus_t status, const char *call, const char *file, int line);
/* A failure that is no CUDA error (a shape a kernel does not handle, ...): the text and MTF_ERR_INVALID. */
int mtf_cuda_refuse(mtf_backend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MTF_CUDA_CHECK(b, call)                                                   \
  do {                                                                            \
    cudaError_t mtf_cuda_rc_ = (call);                                            \
    if (mtf_cuda_rc_ != cudaSuccess)                                              \
      return mtf_cuda_fail((b), mtf_cuda_rc_, #call, __FILE__, __LINE__);         \
  } while (0)

#define MTF_CUBLAS_CHECK(b, call)                                                 \
  do {                                                                            \
    cublasStatus_t mtf_cublas_rc_ = (call);                                       \
    if (mtf_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                  \
      return mtf_cublas_fail((b), mtf_cublas_rc_, #call, __FILE__, __LINE__);     \
  } while (0)

/* After every MTF_LAUNCH: a bad configuration (too much shared memory, ...) shows here. */
#define MTF_CUDA_CHECK_LAUNCH(b, kernel_name) MTF_CUDA_CHECK((b), cudaGetLastError())

/* ---- block-wide reductions (1-D blocks of up to MTF_CUDA_MAX_THREADS threads) ----
 * Every thread of the block must call them, with its own value; every thread gets the result. A tree over
 * __shared__ memory with __syncthreads between levels; blockDim.x need not be a power of two. The trailing
 * barrier lets a kernel call them again at once (the scratch is shared by every call in the kernel). */

#define MTF_BLOCK_REDUCE_BODY(type, value, combine)                                   \
  __shared__ type mtf_partial_[MTF_CUDA_MAX_THREADS];                                 \
  unsigned mtf_t_ = threadIdx.x, mtf_n_ = blockDim.x;                                 \
  mtf_partial_[mtf_t_] = (value);                                                     \
  __syncthreads();                                                                    \
  unsigned mtf_half_ = 1;                                                             \
  while (mtf_half_ * 2 < mtf_n_) mtf_half_ *= 2;                                      \
  for (; mtf_half_ > 0; mtf_half_ /= 2) {                                             \
    if (mtf_t_ < mtf_half_ && mtf_t_ + mtf_half_ < mtf_n_)                            \
      mtf_partial_[mtf_t_] = combine(mtf_partial_[mtf_t_], mtf_partial_[mtf_t_ + mtf_half_]); \
    __syncthreads();                                                                  \
  }                                                                                   \
  type mtf_result_ = mtf_partial_[0];                                                 \
  __syncthreads();                                                                    \
  return mtf_result_

__device__ inline float mtf_add_f32_(float a, float b) { return a + b; }
__device__ inline double mtf_add_f64_(double a, double b) { return a + b; }
/* fmaxf returns the other operand when one is NaN: the max skips NaN like the CPU's (-inf if all are). */
__device__ inline float mtf_max_f32_(float a, float b) { return fmaxf(a, b); }

__device__ inline float mtf_block_sum(float value) { MTF_BLOCK_REDUCE_BODY(float, value, mtf_add_f32_); }
/* In double, where the CPU kernel accumulates in double (to stay within the conformance bounds). */
__device__ inline double mtf_block_sum_double(double value) { MTF_BLOCK_REDUCE_BODY(double, value, mtf_add_f64_); }
/* Threads with nothing to contribute pass -INFINITY. */
__device__ inline float mtf_block_max(float value) { MTF_BLOCK_REDUCE_BODY(float, value, mtf_max_f32_); }

/* cuda_info.cu: the GPU this rank computes on: options->device, else its local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID, else 0) modulo the visible GPUs; no usable GPU is an error naming what was looked for. */
int mtf_cuda_pick_device(const mtf_backend_options *options, int *device, mtf_error *err);

/* ---- the kernel table ---- */

/* register.cu: fills kernels[] with every CUDA kernel of the op table (backend.cu calls it). */
void mtf_cuda_register_kernels(mtf_kernel_fn *kernels);

MTF_CUDA_END

#endif
