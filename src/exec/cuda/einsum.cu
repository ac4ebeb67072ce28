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
 * fp32 operands: cublasSgemmStridedBatched, TF32 tensor cores only when backend.tf32 set the handle's math mode.
 * bfloat16 operands (both: the graph casts them, mtf_graph_set_matmul_dtype): cublasGemmStridedBatchedEx on
 * the buffers as they are (CUDA_R_16BF), fp32 accumulation (CUBLAS_COMPUTE_32F) and a CUDA_R_32F product.
 * When an operand must be summed or reordered first, both are widened to float32 in the step's scratch (after
 * the decomposition's part: ops/contraction.c's einsum_scratch counts it) and the fp32 path runs: the same
 * numbers up to the order of the fp32 additions, since the product of two bfloat16 values is exact in fp32
 * (and in TF32). */
#include "exec/cuda/cuda_kernel.h"
#include "exec/cuda/k_kernels.h"

#include <limits.h>

extern "C" {
#include "ops/einsum_dims.h"
}

MTF_CUDA_BEGIN

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

/* C (row-major nb x M x N, float32) = op(A) op(B) per batch, as the file's comment says; A and B of `type`
 * (CUDA_R_32F or CUDA_R_16BF). */
static int gemm(mtf_backend *b, cudaDataType type, int ta, int tb, int64_t nb, int64_t M, int64_t N, int64_t K,
                const void *A, const void *B, float *C) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || nb > INT_MAX)
    return mtf_cuda_refuse(b, "einsum: a GEMM of %lld x %lld x %lld (batch %lld) passes cuBLAS's int sizes",
                           (long long)M, (long long)N, (long long)K, (long long)nb);
  cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ld_b = tb ? (int)K : (int)N, ld_a = ta ? (int)M : (int)K;
  long long stride_a = (long long)(M * K), stride_b = (long long)(K * N), stride_c = (long long)(M * N);
  const float one = 1.0f, zero = 0.0f;
  if (type == CUDA_R_32F) {
    MTF_CUBLAS_CHECK(b, cublasSgemmStridedBatched(c->cublas, op_b, op_a, (int)N, (int)M, (int)K, &one, (const float *)B,
                                                  ld_b, stride_b, (const float *)A, ld_a, stride_a, &zero, C, (int)N,
                                                  stride_c, (int)nb));
    return MTF_OK;
  }
  MTF_CUBLAS_CHECK(b, cublasGemmStridedBatchedEx(c->cublas, op_b, op_a, (int)N, (int)M, (int)K, &one, B, type, ld_b,
                                                 stride_b, A, type, ld_a, stride_a, &zero, C, CUDA_R_32F, (int)N,
                                                 stride_c, (int)nb, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MTF_OK;
}

/* The product into out: c (the GEMM's [batch][m][n] result, or out itself) reordered when it is not. A bf16
 * product whose output is in [batch][n][m] order (a weight's gradient, say) is the same product with the
 * operands' roles swapped, C^T = op(B)^T op(A)^T, computed in place; fp32 keeps its GEMM and transpose, so
 * its numbers stay those of before bf16 existed (cuBLAS may pick another algorithm for the swapped shape). */
static int product(mtf_backend *b, const mtf_step *st, const mtf_einsum_dims *d, cudaDataType type, const void *ap,
                   const void *bp, float *c, float *out) {
  if (d->nb * d->M * d->N == 0) return MTF_OK;
  if (d->K == 0) /* an empty sum: zeros (cuBLAS would leave C untouched) */
    return b->mem->fill_f32(b, out, 0.0f, mtf_shape_num_elements(&st->out_shape));
  if (type == CUDA_R_16BF && d->c_packed && mtf_einsum_order_is(&st->out_shape, &d->batch, &d->n, &d->m))
    return gemm(b, type, !d->b_transposed, !d->a_transposed, d->nb, d->N, d->M, d->K, bp, ap, out);
  MTF_CHECK(gemm(b, type, d->a_transposed, d->b_transposed, d->nb, d->M, d->N, d->K, ap, bp, c));
  if (d->c_packed) {
    mtf_shape c_shape = mtf_einsum_concat3(&d->batch, &d->m, &d->n);
    MTF_CHECK(mtf_cuda_reduce_into(b, &c_shape, c, &st->out_shape, out));
  }
  return MTF_OK;
}

static int scratch_parts(mtf_backend *b, const mtf_einsum_dims *d, float *scratch, float **part) {
  if (d->scratch_elements > 0 && !scratch)
    return mtf_cuda_refuse(b, "einsum: the step needs %lld elements of scratch and has none (a lowering bug)",
                           (long long)d->scratch_elements);
  for (int i = 0; i < 5; i++) part[i] = scratch ? scratch + d->scratch_offset[i] : NULL;
  return MTF_OK;
}

static int einsum2(mtf_backend *b, const mtf_step *st, const float *a, const float *bm, float *out, float *scratch) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  float *part[5];
  MTF_CHECK(scratch_parts(b, &d, scratch, part));
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
  return product(b, st, &d, CUDA_R_32F, ap, bp, d.c_packed ? part[4] : out, out);
}

/* Both operands bfloat16: multiplied as they are when both are in the GEMM's order, else widened to float32
 * in the scratch after the decomposition's part and multiplied in fp32 (see the file's comment). */
static int einsum2_bf16(mtf_backend *b, const mtf_step *st, const void *a, const void *bm, float *out, float *scratch) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  if (!d.a_summed && !d.b_summed && !d.a_packed && !d.b_packed) {
    float *part[5];
    MTF_CHECK(scratch_parts(b, &d, scratch, part));
    return product(b, st, &d, CUDA_R_16BF, a, bm, d.c_packed ? part[4] : out, out);
  }
  int64_t na = mtf_shape_num_elements(&st->in_shape[0]), nbm = mtf_shape_num_elements(&st->in_shape[1]);
  if (!scratch)
    return mtf_cuda_refuse(b, "einsum: bfloat16 operands to reorder need %lld elements of scratch and the step has "
                           "none (a lowering bug)", (long long)(d.scratch_elements + na + nbm));
  float *wa = scratch + d.scratch_elements, *wb = wa + na;
  MTF_CHECK(mtf_cuda_k_cast(b, a, MTF_BF16, wa, MTF_F32, na));
  MTF_CHECK(mtf_cuda_k_cast(b, bm, MTF_BF16, wb, MTF_F32, nbm));
  return einsum2(b, st, wa, wb, out, scratch);
}

static int k_einsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *args) {
  if (st->n_in == 1)
    return mtf_cuda_reduce_into(b, &st->in_shape[0], (const float *)args->in[0], &st->out_shape, (float *)args->out);
  if (st->in_dtype[0] == MTF_BF16 && st->in_dtype[1] == MTF_BF16)
    return einsum2_bf16(b, st, args->in[0], args->in[1], (float *)args->out, (float *)args->scratch);
  if (st->in_dtype[0] != MTF_F32 || st->in_dtype[1] != MTF_F32)
    return mtf_cuda_refuse(b, "einsum: operands %s and %s; the CUDA backend multiplies two float32 or two bfloat16",
                           mtf_dtype_name(st->in_dtype[0]), mtf_dtype_name(st->in_dtype[1]));
  return einsum2(b, st, (const float *)args->in[0], (const float *)args->in[1], (float *)args->out,
                 (float *)args->scratch);
}

void mtf_cuda_register_einsum(mtf_kernel_fn *kernels) { kernels[MTF_OP_EINSUM] = k_einsum; }

MTF_CUDA_END
