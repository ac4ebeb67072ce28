/* The CUDA backend object: one GPU per rank, a compute stream (every kernel and GEMM of the plan, in plan
 * order) and a communication stream, a cuBLAS handle on the compute stream, and the memory operations the
 * executor and lowering's data movement need, as device kernels on the compute stream. Uploads and downloads
 * wait for the stream (the host buffer may be reused at once); everything else is asynchronous until
 * synchronize. */
#include "exec/cuda/cuda_kernel.h"
#include "exec/cuda/cuda_comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

MTF_CUDA_BEGIN

/* ---- errors ---- */

int mtf_cuda_fail(mtf_backend *b, cudaError_t code, const char *call, const char *file, int line) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  snprintf(c->last_error, sizeof c->last_error, "%s: %s (%s, %s:%d)", cudaGetErrorName(code), cudaGetErrorString(code),
           call, file, line);
  return code == cudaErrorMemoryAllocation ? MTF_ERR_NOMEM : MTF_ERR_INVALID;
}

static const char *cublas_status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (a size or leading dimension cuBLAS refuses)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH (the GPU lacks the feature)";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

int mtf_cublas_fail(mtf_backend *b, cublasStatus_t status, const char *call, const char *file, int line) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  snprintf(c->last_error, sizeof c->last_error, "%s (%d) (%s, %s:%d)", cublas_status_text(status), (int)status, call,
           file, line);
  return status == CUBLAS_STATUS_ALLOC_FAILED ? MTF_ERR_NOMEM : MTF_ERR_INVALID;
}

int mtf_cuda_refuse(mtf_backend *b, const char *fmt, ...) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
  va_end(ap);
  return MTF_ERR_INVALID;
}

static const char *cuda_error_text(mtf_backend *b) { return mtf_cuda_ctx(b)->last_error; }

/* ---- memory kernels ---- */

__global__ void fill_kernel(float *out, float value, int64_t n) {
  MTF_GRID_STRIDE(i, n) out[i] = value;
}

/* A strided walk over `rank` dims in row-major order: element i of the walk is at sum_d index_d * stride[d]. */
typedef struct strided_view {
  int rank;
  int64_t dims[MTF_MAX_RANK + 1];
  int64_t strides[MTF_MAX_RANK + 1];
} strided_view;

template <typename T>
__global__ void slice_kernel(strided_view v, const T *in, T *out, int64_t n) {
  MTF_GRID_STRIDE(i, n) {
    int64_t rest = i, at = 0;
    for (int d = v.rank - 1; d >= 0; d--) {
      at += (rest % v.dims[d]) * v.strides[d];
      rest /= v.dims[d];
    }
    out[i] = in[at];
  }
}

/* concat_blocks / split_blocks (comm/tensor_pack.c's move_blocks): the tensor is [outer][parts * len][inner],
 * the blocks [parts][outer][len][inner]. One thread per element of the output. */
template <typename T>
__global__ void blocks_kernel(const T *in, T *out, int64_t outer, int64_t len, int64_t inner, int parts, int to_blocks,
                              int64_t n) {
  MTF_GRID_STRIDE(i, n) {
    int64_t x = i % inner, rest = i / inner, l, o, p;
    int64_t tensor_at, blocks_at;
    if (to_blocks) { /* i walks the blocks' layout */
      l = rest % len;
      rest /= len;
      o = rest % outer;
      p = rest / outer;
    } else { /* i walks the tensor's layout */
      int64_t along = rest % (parts * len);
      o = rest / (parts * len);
      p = along / len;
      l = along % len;
    }
    tensor_at = ((o * parts + p) * len + l) * inner + x;
    blocks_at = ((p * outer + o) * len + l) * inner + x;
    if (to_blocks)
      out[blocks_at] = in[tensor_at];
    else
      out[tensor_at] = in[blocks_at];
  }
}

/* ---- the memory operations ---- */

static void *cuda_allocate(mtf_backend *b, size_t bytes) {
  void *p = NULL;
  cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
  size_t free_bytes = 0, total_bytes = 0;
  if (rc == cudaErrorMemoryAllocation && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    cudaGetLastError(); /* the failed allocation's error is reported here, with the device's figures */
    mtf_cuda_refuse(b, "cudaMalloc of %.2f GiB: the GPU has %.2f GiB free of %.2f GiB", (double)bytes / (1 << 30),
                    (double)free_bytes / (1 << 30), (double)total_bytes / (1 << 30));
    return NULL;
  }
  if (rc != cudaSuccess) {
    mtf_cuda_fail(b, rc, "cudaMalloc", __FILE__, __LINE__);
    return NULL;
  }
  return p;
}

static void cuda_release(mtf_backend *b, void *p) {
  if (!p) return;
  /* cudaFree waits for the device; memory still in use by queued work is never handed back early. */
  cudaError_t rc = cudaFree(p);
  if (rc != cudaSuccess) mtf_cuda_fail(b, rc, "cudaFree", __FILE__, __LINE__);
}

static int cuda_upload(mtf_backend *b, void *dst, const void *host_src, size_t bytes) {
  if (!bytes) return MTF_OK;
  MTF_CUDA_CHECK(b, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, mtf_cuda_stream(b)));
  MTF_CUDA_CHECK(b, cudaStreamSynchronize(mtf_cuda_stream(b)));
  return MTF_OK;
}

static int cuda_download(mtf_backend *b, void *host_dst, const void *src, size_t bytes) {
  if (!bytes) return MTF_OK;
  MTF_CUDA_CHECK(b, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, mtf_cuda_stream(b)));
  MTF_CUDA_CHECK(b, cudaStreamSynchronize(mtf_cuda_stream(b)));
  return MTF_OK;
}

static int cuda_copy(mtf_backend *b, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return MTF_OK;
  MTF_CUDA_CHECK(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, mtf_cuda_stream(b)));
  return MTF_OK;
}

static int cuda_fill_f32(mtf_backend *b, void *dst, float value, int64_t count) {
  if (count <= 0) return MTF_OK;
  MTF_LAUNCH(fill_kernel, mtf_cuda_blocks(count, MTF_CUDA_THREADS), MTF_CUDA_THREADS, 0, mtf_cuda_stream(b),
             (float *)dst, value, count);
  MTF_CUDA_CHECK_LAUNCH(b, "fill_kernel");
  return MTF_OK;
}

static int cuda_synchronize(mtf_backend *b) {
  MTF_CUDA_CHECK(b, cudaStreamSynchronize(mtf_cuda_ctx(b)->compute));
  MTF_CUDA_CHECK(b, cudaStreamSynchronize(mtf_cuda_ctx(b)->comm));
  return MTF_OK;
}

/* Elements are moved as 4-byte words when elem_size allows (every mtf dtype), else as bytes: `scale` words
 * per element, walked as one more innermost dim. */
static int word_scale(size_t elem_size, int *words) {
  if (elem_size % 4 == 0) {
    *words = 1;
    return (int)(elem_size / 4);
  }
  *words = 0;
  return (int)elem_size;
}

template <typename T>
static int launch_slice(mtf_backend *b, const strided_view &v, const void *in, void *out, int64_t n) {
  MTF_LAUNCH(slice_kernel<T>, mtf_cuda_blocks(n, MTF_CUDA_THREADS), MTF_CUDA_THREADS, 0, mtf_cuda_stream(b), v,
             (const T *)in, (T *)out, n);
  MTF_CUDA_CHECK_LAUNCH(b, "slice_kernel");
  return MTF_OK;
}

static int cuda_slice(mtf_backend *b, const mtf_shape *in_shape, const void *in, const mtf_shape *out_shape,
                      const int64_t *offsets, void *out, size_t elem_size) {
  if (in_shape->rank != out_shape->rank)
    return mtf_cuda_refuse(b, "slice: ranks %d and %d differ", in_shape->rank, out_shape->rank);
  int words;
  int scale = word_scale(elem_size, &words);
  strided_view v;
  memset(&v, 0, sizeof v);
  int64_t in_strides[MTF_MAX_RANK + 1], stride = scale, base = 0;
  for (int d = in_shape->rank - 1; d >= 0; d--) {
    in_strides[d] = stride;
    stride *= in_shape->dims[d].size;
  }
  v.rank = out_shape->rank + 1;
  for (int d = 0; d < out_shape->rank; d++) {
    if (offsets[d] < 0 || offsets[d] + out_shape->dims[d].size > in_shape->dims[d].size)
      return mtf_cuda_refuse(b, "slice: dim %d: [%lld, %lld) outside 0..%lld", d, (long long)offsets[d],
                             (long long)(offsets[d] + out_shape->dims[d].size), (long long)in_shape->dims[d].size);
    v.dims[d] = out_shape->dims[d].size;
    v.strides[d] = in_strides[d];
    base += offsets[d] * in_strides[d];
  }
  v.dims[out_shape->rank] = scale;
  v.strides[out_shape->rank] = 1;
  int64_t n = mtf_shape_num_elements(out_shape) * scale;
  if (n == 0) return MTF_OK;
  if (words) return launch_slice<uint32_t>(b, v, (const uint32_t *)in + base, out, n);
  return launch_slice<unsigned char>(b, v, (const unsigned char *)in + base, out, n);
}

static int move_blocks(mtf_backend *b, const void *in, void *out, size_t elem_size, int rank, const int64_t *dims,
                       int axis, int parts, int to_blocks) {
  int words;
  int64_t scale = word_scale(elem_size, &words);
  int64_t outer = 1, inner = scale;
  for (int d = 0; d < axis; d++) outer *= dims[d];
  for (int d = axis + 1; d < rank; d++) inner *= dims[d];
  /* split: dims are the whole tensor's (its axis parts blocks long); concat: one block's */
  int64_t len = to_blocks ? dims[axis] / parts : dims[axis];
  int64_t n = outer * len * inner * parts;
  if (n == 0) return MTF_OK;
  unsigned grid = mtf_cuda_blocks(n, MTF_CUDA_THREADS);
  if (words)
    MTF_LAUNCH(blocks_kernel<uint32_t>, grid, MTF_CUDA_THREADS, 0, mtf_cuda_stream(b), (const uint32_t *)in,
               (uint32_t *)out, outer, len, inner, parts, to_blocks, n);
  else
    MTF_LAUNCH(blocks_kernel<unsigned char>, grid, MTF_CUDA_THREADS, 0, mtf_cuda_stream(b), (const unsigned char *)in,
               (unsigned char *)out, outer, len, inner, parts, to_blocks, n);
  MTF_CUDA_CHECK_LAUNCH(b, "blocks_kernel");
  return MTF_OK;
}

static int cuda_concat_blocks(mtf_backend *b, const void *blocks, void *out, size_t elem_size, int rank,
                              const int64_t *dims, int axis, int parts) {
  return move_blocks(b, blocks, out, elem_size, rank, dims, axis, parts, 0);
}

static int cuda_split_blocks(mtf_backend *b, const void *in, void *blocks, size_t elem_size, int rank,
                             const int64_t *dims, int axis, int parts) {
  if (dims[axis] % parts != 0)
    return mtf_cuda_refuse(b, "split_blocks: dim %d (%lld) is not divisible by %d parts", axis, (long long)dims[axis],
                           parts);
  return move_blocks(b, in, blocks, elem_size, rank, dims, axis, parts, 1);
}

static const mtf_backend_memory cuda_memory = {
    cuda_allocate, cuda_release, cuda_upload, cuda_download, cuda_copy, cuda_fill_f32, cuda_synchronize,
    cuda_slice, cuda_concat_blocks, cuda_split_blocks,
};

static void cuda_destroy(mtf_backend *b) {
  if (!b) return;
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  if (c) {
    if (c->compute) cudaStreamSynchronize(c->compute);
    if (c->comm) cudaStreamSynchronize(c->comm);
    if (c->cublas) cublasDestroy(c->cublas);
    if (c->gemm_workspace) cudaFree(c->gemm_workspace);
    for (int i = 0; i < c->n_marks; i++) cudaEventDestroy(c->marks[i]);
    free(c->marks);
    if (c->compute) cudaStreamDestroy(c->compute);
    if (c->comm) cudaStreamDestroy(c->comm);
    free(c);
  }
  free(b);
}

/* What the constructor's failures say: the call and CUDA's message, in the caller's error. */
static int create_failed(mtf_backend *b, mtf_error *err, int device) {
  int rc = mtf_error_set(err, MTF_ERR_INVALID, "backend cuda: GPU %d: %s", device, mtf_cuda_ctx(b)->last_error);
  cuda_destroy(b);
  return rc;
}

static int setup(mtf_backend *b, const mtf_backend_options *o) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  MTF_CUDA_CHECK(b, cudaSetDevice(c->device));
  cudaDeviceProp prop;
  MTF_CUDA_CHECK(b, cudaGetDeviceProperties(&prop, c->device));
  c->sm_count = prop.multiProcessorCount;
  MTF_CUDA_CHECK(b, cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  MTF_CUDA_CHECK(b, cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking));
  MTF_CUBLAS_CHECK(b, cublasCreate(&c->cublas));
  MTF_CUBLAS_CHECK(b, cublasSetStream(c->cublas, c->compute));
  /* TF32 only when asked for: cuBLAS's default math is full fp32. */
  MTF_CUBLAS_CHECK(b, cublasSetMathMode(c->cublas, o->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  /* cuBLAS's workspace, the size its documentation recommends (32 MiB from Hopper on, 4 MiB before), made here:
   * left to itself cuBLAS allocates one on a stream's first GEMMs, with cudaMalloc (and its synchronisation)
   * in the middle of a step. cudaMalloc's 256-byte alignment is what cuBLAS asks of it. */
  c->gemm_workspace_bytes = (size_t)(prop.major >= 9 ? 32 : 4) << 20;
  MTF_CUDA_CHECK(b, cudaMalloc(&c->gemm_workspace, c->gemm_workspace_bytes));
  MTF_CUBLAS_CHECK(b, cublasSetWorkspace(c->cublas, c->gemm_workspace, c->gemm_workspace_bytes));
  return MTF_OK;
}

/* MTF_PROFILE's device timeline: event i recorded on the compute stream (events made as marks need them). */
static int cuda_profile_mark(mtf_backend *b, int i) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  if (i < 0) return mtf_cuda_refuse(b, "profile mark %d", i);
  if (i >= c->n_marks) {
    int n = i < 2 * c->n_marks ? 2 * c->n_marks : i + 64;
    cudaEvent_t *grown = (cudaEvent_t *)realloc(c->marks, sizeof *grown * (size_t)n);
    if (!grown) return mtf_cuda_refuse(b, "profile marks: out of host memory");
    c->marks = grown;
    for (; c->n_marks < n; c->n_marks++) MTF_CUDA_CHECK(b, cudaEventCreate(&c->marks[c->n_marks]));
  }
  MTF_CUDA_CHECK(b, cudaEventRecord(c->marks[i], c->compute));
  return MTF_OK;
}

static int cuda_profile_seconds(mtf_backend *b, int i, double *seconds) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  if (i < 0 || i + 1 >= c->n_marks) return mtf_cuda_refuse(b, "profile: no marks %d and %d", i, i + 1);
  float ms = 0.0f;
  MTF_CUDA_CHECK(b, cudaEventElapsedTime(&ms, c->marks[i], c->marks[i + 1]));
  *seconds = ms * 1e-3;
  return MTF_OK;
}

MTF_CUDA_END

extern "C" int mtf_cuda_backend_create(const mtf_backend_options *options, mtf_backend **out, mtf_error *err) {
  using namespace MTF_CUDA_NS;
  *out = NULL;
  int device = 0;
  MTF_CHECK(mtf_cuda_pick_device(options, &device, err));
  mtf_backend *b = (mtf_backend *)calloc(1, sizeof *b);
  mtf_cuda_context *c = (mtf_cuda_context *)calloc(1, sizeof *c);
  if (!b || !c) {
    free(b);
    free(c);
    return mtf_error_set(err, MTF_ERR_NOMEM, "cuda backend: out of memory");
  }
  b->name = "cuda";
  b->threads = 1;
  b->mem = &cuda_memory;
  b->destroy = cuda_destroy;
  b->error_text = cuda_error_text;
  b->device_comm = mtf_cuda_device_comm; /* collectives on device memory: NCCL or staged MPI (cuda_comm.cu) */
  b->bf16_storage = 1; /* the kernels read and write bf16-stored activations; adam_update writes weight copies */
  b->plan_fusions = MTF_FUSES_MOMENTS; /* k_optimizer.cu; the others are the cpu's (host_fusions) */
  b->profile_mark = cuda_profile_mark;
  b->profile_seconds = cuda_profile_seconds;
  b->ctx = c;
  c->device = device;
  c->tf32 = options->tf32;
  if (setup(b, options) != MTF_OK) return create_failed(b, err, device);
  mtf_cuda_register_kernels(b->kernels);
  *out = b;
  return MTF_OK;
}
