/* Sums and maxima over named dims, and transposed copies (a sum over no dim), on the GPU: the reduce_max op
 * and mtf_cuda_reduce_into, which einsum.cu uses for one-operand einsums, its operands' summed dims and its
 * packing transposes. The output's dims (matched by name in the input) are the kept axes, the input's dims
 * absent from the output the reduced ones, walked in the input's order. Each output element is reduced by
 * one thread (few reduced elements, or many outputs) or by one block (few outputs with long reductions: a
 * bias gradient); sums in double as the CPU's row sums, maxima in float skipping NaN. */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"

MTF_CUDA_BEGIN

typedef struct k_reduce_axes {
  int n_kept, n_reduced;
  int64_t kept_size[MTF_MAX_RANK], kept_stride[MTF_MAX_RANK];       /* output order, input strides */
  int64_t reduced_size[MTF_MAX_RANK], reduced_stride[MTF_MAX_RANK]; /* input order */
  int64_t reduced_count;
} k_reduce_axes;

/* Drops size-1 axes and merges neighbours whose input strides make them one axis (the output's kept axes are
 * contiguous in the output by construction), so each element costs fewer divisions. */
static void merge_axes(int *n, int64_t *size, int64_t *stride) {
  int m = 0;
  for (int d = 0; d < *n; d++) {
    if (size[d] == 1) continue;
    if (m > 0 && stride[m - 1] == stride[d] * size[d]) {
      size[m - 1] *= size[d];
      stride[m - 1] = stride[d];
      continue;
    }
    size[m] = size[d];
    stride[m] = stride[d];
    m++;
  }
  *n = m;
}

static k_reduce_axes reduce_axes(const mtf_shape *in, const mtf_shape *out) {
  k_reduce_axes a;
  memset(&a, 0, sizeof a);
  int64_t in_strides[MTF_MAX_RANK];
  mtf_row_major_strides(in, in_strides);
  mtf_strides_by_name(out, in, a.kept_stride);
  for (int d = 0; d < out->rank; d++) a.kept_size[d] = out->dims[d].size;
  a.n_kept = out->rank;
  a.reduced_count = 1;
  for (int d = 0; d < in->rank; d++) {
    if (mtf_shape_index_of(out, in->dims[d].name) >= 0 || in->dims[d].size == 1) continue;
    a.reduced_size[a.n_reduced] = in->dims[d].size;
    a.reduced_stride[a.n_reduced] = in_strides[d];
    a.reduced_count *= in->dims[d].size;
    a.n_reduced++;
  }
  merge_axes(&a.n_kept, a.kept_size, a.kept_stride);
  merge_axes(&a.n_reduced, a.reduced_size, a.reduced_stride);
  return a;
}

/* The offset of index i of n merged axes (sizes, strides), the last axis fastest: the kept and the reduced
 * axes are walked alike. */
__device__ inline int64_t axes_offset(int n, const int64_t *size, const int64_t *stride, int64_t i) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    off += (i % size[d]) * stride[d];
    i /= size[d];
  }
  return off;
}
__device__ inline int64_t kept_offset(const k_reduce_axes &a, int64_t e) {
  return axes_offset(a.n_kept, a.kept_size, a.kept_stride, e);
}
__device__ inline int64_t reduced_offset(const k_reduce_axes &a, int64_t r) {
  return axes_offset(a.n_reduced, a.reduced_size, a.reduced_stride, r);
}

/* One thread per output element. */
/* out float32, or bf16-stored where out_bf16 (an einsum's bf16-stored result, lower/storage.c). */
__global__ void k_reduce_thread_kernel(k_reduce_axes a, int64_t n_out, int is_max, const float *in, void *out,
                                       int out_bf16) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_out; e += (int64_t)blockDim.x * gridDim.x) {
    const float *base = in + kept_offset(a, e);
    if (a.n_reduced == 0) { /* a copy: the transpose case */
      k_store(out, out_bf16, e, is_max ? k_max_step(-INFINITY, base[0]) : base[0]);
      continue;
    }
    double sum = 0.0;
    float max = -INFINITY;
    for (int64_t r = 0; r < a.reduced_count; r++) {
      float v = base[reduced_offset(a, r)];
      if (is_max) max = k_max_step(max, v);
      else sum += v;
    }
    k_store(out, out_bf16, e, is_max ? max : (float)sum);
  }
}

/* One block per output element: the threads split the reduced elements, then a block reduction. */
__global__ void k_reduce_block_kernel(k_reduce_axes a, int64_t n_out, int is_max, const float *in, void *out,
                                      int out_bf16) {
  for (int64_t e = blockIdx.x; e < n_out; e += gridDim.x) {
    const float *base = in + kept_offset(a, e);
    double sum = 0.0;
    float max = -INFINITY;
    for (int64_t r = threadIdx.x; r < a.reduced_count; r += blockDim.x) {
      float v = base[reduced_offset(a, r)];
      if (is_max) max = k_max_step(max, v);
      else sum += v;
    }
    if (is_max) {
      float m = mtf_block_max(max);
      if (threadIdx.x == 0) k_store(out, out_bf16, e, m);
    } else {
      double s = mtf_block_sum_double(sum);
      if (threadIdx.x == 0) k_store(out, out_bf16, e, (float)s);
    }
  }
}

static int reduce(mtf_backend *b, int is_max, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                  void *out, int out_bf16) {
  k_reduce_axes a = reduce_axes(in_shape, out_shape);
  int64_t n_out = mtf_shape_num_elements(out_shape);
  if (n_out == 0) return MTF_OK;
  if (a.reduced_count >= 256 && n_out < 16384)
    MTF_LAUNCH(k_reduce_block_kernel, k_row_blocks(n_out), K_THREADS, 0, K_STREAM(b), a, n_out, is_max, in, out,
               out_bf16);
  else
    MTF_LAUNCH(k_reduce_thread_kernel, mtf_cuda_blocks(n_out, K_THREADS), K_THREADS, 0, K_STREAM(b), a, n_out, is_max, in,
               out, out_bf16);
  K_DONE(b, is_max ? "reduce_max" : "reduce_sum");
}

int mtf_cuda_reduce_into(mtf_backend *b, const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape,
                         void *out, int out_bf16) {
  return reduce(b, 0, in_shape, in, out_shape, out, out_bf16);
}

static int k_reduce_max(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  return reduce(b, 1, &st->in_shape[0], (const float *)a->in[0], &st->out_shape, a->out, 0);
}

void mtf_cuda_register_reduce(mtf_kernel_fn *k) { k[MTF_OP_REDUCE_MAX] = k_reduce_max; }

MTF_CUDA_END
