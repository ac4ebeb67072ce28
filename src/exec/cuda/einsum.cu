/* Einsum on the GPU, by the same decomposition as the CPU (ops/einsum_dims.h): one operand is a strided sum
 * (mtf_cuda_reduce_into); two operands become one cuBLAS strided-batched GEMM over the batch dims, operands
 * used in place with transpose flags where their dim order allows, else packed into [batch][m][k] /
 * [batch][k][n] order in the step's planned scratch, and the product unpacked into the output's order when
 * that is not [batch][m][n].
 *
 * cuBLAS is column-major: a row-major R x C matrix with leading dimension C is, to cuBLAS, its C x R
 * transpose. So the row-major C[M][N] = op(A)[M][K] op(B)[K][N] is computed as the column-major
 * C^T (N x M, ld N) = op(B)^T (N x K) op(A)^T (K x M): B comes first, A second, the flags carry over.
 *
 * fp32: cublasSgemmStridedBatched, TF32 tensor cores only when backend.tf32 set the handle's math mode.
 * bf16 (backend.precision): both operands are rounded to bf16 in the backend's workspace and multiplied by
 * cublasGemmStridedBatchedEx with fp32 accumulation (CUBLAS_COMPUTE_32F) and an fp32 product. */
#include "exec/cuda/cuda_kernel.h"
#include "exec/cuda/k_kernels.h"

#include <cuda_bf16.h>
#include <limits.h>

extern "C" {
#include "ops/einsum_dims.h"
}

MTF_CUDA_BEGIN

__global__ void to_bf16_kernel(const float *in, __nv_bfloat16 *out, int64_t n) {
  MTF_GRID_STRIDE(i, n) out[i] = __float2bfloat16(in[i]);
}

static int to_bf16(mtf_backend *b, const float *in, __nv_bfloat16 *out, int64_t n) {
  if (n == 0) return MTF_OK;
  MTF_LAUNCH(to_bf16_kernel, mtf_cuda_blocks(n, MTF_CUDA_THREADS), MTF_CUDA_THREADS, 0, mtf_cuda_stream(b), in, out, n);
  MTF_CUDA_CHECK_LAUNCH(b, "to_bf16_kernel");
  return MTF_OK;
}

/* An operand in the GEMM's order: in place, or a transposed copy into `scratch` (no dim is summed). */
static int prepare(mtf_backend *b, const mtf_shape *shape, const float *data, const mtf_shape *batch,
                   const mtf_shape *outer, const mtf_shape *inner, int packed, float *scratch, const float **out) {
  *out = data;
  if (!packed) return MTF_OK;
  mtf_shape order = mtf_einsum_concat3(batch, outer, inner);
  MTF_CHECK(mtf_cuda_reduce_into(b, shape, data, &order, scratch));
  *out = scratch;
  return MTF_OK;
}

/* C (row-major nb x M x N) = op(A) op(B) per batch, as the file's comment says. */
static int gemm(mtf_backend *b, int ta, int tb, int64_t nb, int64_t M, int64_t N, int64_t K, const float *A,
                const float *B, float *C) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || nb > INT_MAX)
    return mtf_cuda_refuse(b, "einsum: a GEMM of %lld x %lld x %lld (batch %lld) passes cuBLAS's int sizes",
                           (long long)M, (long long)N, (long long)K, (long long)nb);
  cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ld_b = tb ? (int)K : (int)N, ld_a = ta ? (int)M : (int)K;
  long long stride_a = (long long)(M * K), stride_b = (long long)(K * N), stride_c = (long long)(M * N);
  const float one = 1.0f, zero = 0.0f;
  if (c->precision != MTF_PRECISION_BF16) {
    MTF_CUBLAS_CHECK(b, cublasSgemmStridedBatched(c->cublas, op_b, op_a, (int)N, (int)M, (int)K, &one, B, ld_b, stride_b,
                                                  A, ld_a, stride_a, &zero, C, (int)N, stride_c, (int)nb));
    return MTF_OK;
  }
  /* bf16 copies, A's then B's, each 256-byte aligned for the tensor cores. */
  size_t a_bytes = ((size_t)(nb * M * K) * sizeof(__nv_bfloat16) + 255) / 256 * 256;
  size_t b_bytes = (size_t)(nb * K * N) * sizeof(__nv_bfloat16);
  char *work = (char *)mtf_cuda_workspace(b, a_bytes + b_bytes);
  if (!work) return MTF_ERR_NOMEM;
  __nv_bfloat16 *A16 = (__nv_bfloat16 *)work, *B16 = (__nv_bfloat16 *)(work + a_bytes);
  MTF_CHECK(to_bf16(b, A, A16, nb * M * K));
  MTF_CHECK(to_bf16(b, B, B16, nb * K * N));
  MTF_CUBLAS_CHECK(b, cublasGemmStridedBatchedEx(c->cublas, op_b, op_a, (int)N, (int)M, (int)K, &one, B16, CUDA_R_16BF,
                                                 ld_b, stride_b, A16, CUDA_R_16BF, ld_a, stride_a, &zero, C, CUDA_R_32F,
                                                 (int)N, stride_c, (int)nb, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MTF_OK;
}

static int einsum2(mtf_backend *b, const mtf_step *st, const float *a, const float *bm, float *out, float *scratch) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  if (d.scratch_elements > 0 && !scratch)
    return mtf_cuda_refuse(b, "einsum: the step needs %lld elements of scratch and has none (a lowering bug)",
                           (long long)d.scratch_elements);
  float *part[5] = {NULL, NULL, NULL, NULL, NULL};
  for (int i = 0; i < 5 && scratch; i++) part[i] = scratch + d.scratch_offset[i];
  if (d.a_summed) { /* dims only one operand has and the output lacks: summed out first */
    MTF_CHECK(mtf_cuda_reduce_into(b, &st->in_shape[0], a, &d.a_kept, part[0]));
    a = part[0];
  }
  if (d.b_summed) {
    MTF_CHECK(mtf_cuda_reduce_into(b, &st->in_shape[1], bm, &d.b_kept, part[1]));
    bm = part[1];
  }
  const float *ap, *bp;
  MTF_CHECK(prepare(b, &d.a_kept, a, &d.batch, &d.m, &d.k, d.a_packed, part[2], &ap));
  MTF_CHECK(prepare(b, &d.b_kept, bm, &d.batch, &d.k, &d.n, d.b_packed, part[3], &bp));
  float *c = d.c_packed ? part[4] : out;
  int64_t c_elements = d.nb * d.M * d.N;
  if (c_elements == 0) return MTF_OK;
  if (d.K == 0) { /* an empty sum: zeros (cuBLAS would leave C untouched) */
    MTF_CHECK(b->mem->fill_f32(b, out, 0.0f, mtf_shape_num_elements(&st->out_shape)));
    return MTF_OK;
  }
  MTF_CHECK(gemm(b, d.a_transposed, d.b_transposed, d.nb, d.M, d.N, d.K, ap, bp, c));
  if (d.c_packed) {
    mtf_shape c_shape = mtf_einsum_concat3(&d.batch, &d.m, &d.n);
    MTF_CHECK(mtf_cuda_reduce_into(b, &c_shape, c, &st->out_shape, out));
  }
  return MTF_OK;
}

static int k_einsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *args) {
  if (st->n_in == 1)
    return mtf_cuda_reduce_into(b, &st->in_shape[0], (const float *)args->in[0], &st->out_shape, (float *)args->out);
  return einsum2(b, st, (const float *)args->in[0], (const float *)args->in[1], (float *)args->out,
                 (float *)args->scratch);
}

void mtf_cuda_register_einsum(mtf_kernel_fn *kernels) { kernels[MTF_OP_EINSUM] = k_einsum; }

MTF_CUDA_END
