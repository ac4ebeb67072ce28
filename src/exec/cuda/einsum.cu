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
 * (and in TF32).
 * A bf16-stored result (lower/storage.c: every reader takes it as bfloat16) is written by the GEMM itself
 * (CUDA_R_16BF C from the fp32 accumulation) or by the reorder that unpacks it; an fp32 GEMM's result is
 * formed in scratch and rounded. */
#include "exec/cuda/cuda_kernel.h"
#include "exec/cuda/k_kernels.h"

#include <limits.h>

extern "C" {
#include "core/bf16.h"
#include "ops/einsum_dims.h"
}

MTF_CUDA_BEGIN

/* An operand in the GEMM's order: in place, or a transposed copy into `scratch` (no dim is summed). */
static int prepare(mtf_backend *b, const mtf_shape *shape, const float *data, const mtf_shape *batch,
                   const mtf_shape *outer, const mtf_shape *inner, int packed, float *scratch, const float **out) {
  *out = data;
  if (!packed) return MTF_OK;
  mtf_shape order = mtf_einsum_concat3(batch, outer, inner);
  MTF_CHECK(mtf_cuda_reduce_into(b, shape, data, &order, scratch, 0));
  *out = scratch;
  return MTF_OK;
}

/* C (row-major nb x M x N, of c_type) = op(A) op(B) per batch, as the file's comment says; A and B of `type`
 * (CUDA_R_32F or CUDA_R_16BF). cuBLAS rounds a CUDA_R_16BF C from its fp32 accumulation; fp32 operands have
 * only a CUDA_R_32F C (cuBLAS has no fp32 x fp32 -> bf16 GEMM). */
static int gemm(mtf_backend *b, cudaDataType type, int ta, int tb, int64_t nb, int64_t M, int64_t N, int64_t K,
                const void *A, const void *B, void *C, cudaDataType c_type) {
  mtf_cuda_context *c = mtf_cuda_ctx(b);
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || nb > INT_MAX)
    return mtf_cuda_refuse(b, "einsum: a GEMM of %lld x %lld x %lld (batch %lld) passes cuBLAS's int sizes",
                           (long long)M, (long long)N, (long long)K, (long long)nb);
  cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ld_b = tb ? (int)K : (int)N, ld_a = ta ? (int)M : (int)K;
  long long stride_a = (long long)(M * K), stride_b = (long long)(K * N), stride_c = (long long)(M * N);
  const float one = 1.0f, zero = 0.0f;
  if (type == CUDA_R_32F) {
    if (c_type != CUDA_R_32F) return mtf_cuda_refuse(b, "einsum: a float32 GEMM writes float32 (a backend bug)");
    MTF_CUBLAS_CHECK(b, cublasSgemmStridedBatched(c->cublas, op_b, op_a, (int)N, (int)M, (int)K, &one, (const float *)B,
                                                  ld_b, stride_b, (const float *)A, ld_a, stride_a, &zero, (float *)C,
                                                  (int)N, stride_c, (int)nb));
    return MTF_OK;
  }
  MTF_CUBLAS_CHECK(b, cublasGemmStridedBatchedEx(c->cublas, op_b, op_a, (int)N, (int)M, (int)K, &one, B, type, ld_b,
                                                 stride_b, A, type, ld_a, stride_a, &zero, C, c_type, (int)N,
                                                 stride_c, (int)nb, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MTF_OK;
}

/* Where an einsum's result goes: out, float32 or bf16-stored (lower/storage.c); temp, float32 scratch for an
 * fp32 product that is then rounded into a bf16-stored out (ops/contraction.c's einsum_scratch counts it). */
typedef struct einsum_result {
  void *out;
  int bf16;
  float *temp;
} einsum_result;

/* The product into r's out: c (the GEMM's [batch][m][n] float32 result, or the output itself) reordered when it
 * is not in that order. A bf16 product whose output is in [batch][n][m] order (a weight's gradient, say) is the
 * same product with the operands' roles swapped, C^T = op(B)^T op(A)^T, computed in place; fp32 keeps its GEMM
 * and transpose, so its numbers stay those of before bf16 existed (cuBLAS may pick another algorithm for the
 * swapped shape). */
static int product(mtf_backend *b, const mtf_step *st, const mtf_einsum_dims *d, cudaDataType type, const void *ap,
                   const void *bp, float *c, const einsum_result *r) {
  if (d->nb * d->M * d->N == 0) return MTF_OK;
  cudaDataType out_type = r->bf16 ? CUDA_R_16BF : CUDA_R_32F;
  if (d->K == 0) { /* an empty sum: zeros, +0 in both dtypes (cuBLAS would leave C untouched) */
    size_t bytes = (size_t)mtf_shape_num_elements(&st->out_shape) * (r->bf16 ? sizeof(mtf_bf16) : sizeof(float));
    MTF_CUDA_CHECK(b, cudaMemsetAsync(r->out, 0, bytes, mtf_cuda_stream(b)));
    return MTF_OK;
  }
  if (type == CUDA_R_16BF && d->c_packed && mtf_einsum_order_is(&st->out_shape, &d->batch, &d->n, &d->m))
    return gemm(b, type, !d->b_transposed, !d->a_transposed, d->nb, d->N, d->M, d->K, bp, ap, r->out, out_type);
  if (!d->c_packed) {
    if (type == CUDA_R_16BF || !r->bf16)
      return gemm(b, type, d->a_transposed, d->b_transposed, d->nb, d->M, d->N, d->K, ap, bp, r->out, out_type);
    if (!r->temp)
      return mtf_cuda_refuse(b, "einsum: a float32 product rounded to bfloat16 needs scratch and the step has none "
                                "(a lowering bug)");
    MTF_CHECK(gemm(b, type, d->a_transposed, d->b_transposed, d->nb, d->M, d->N, d->K, ap, bp, r->temp, CUDA_R_32F));
    return mtf_cuda_k_cast(b, r->temp, MTF_F32, r->out, MTF_BF16, mtf_shape_num_elements(&st->out_shape));
  }
  MTF_CHECK(gemm(b, type, d->a_transposed, d->b_transposed, d->nb, d->M, d->N, d->K, ap, bp, c, CUDA_R_32F));
  mtf_shape c_shape = mtf_einsum_concat3(&d->batch, &d->m, &d->n);
  return mtf_cuda_reduce_into(b, &c_shape, c, &st->out_shape, r->out, r->bf16);
}

static int scratch_parts(mtf_backend *b, const mtf_einsum_dims *d, float *scratch, float **part) {
  if (d->scratch_elements > 0 && !scratch)
    return mtf_cuda_refuse(b, "einsum: the step needs %lld elements of scratch and has none (a lowering bug)",
                           (long long)d->scratch_elements);
  for (int i = 0; i < 5; i++) part[i] = scratch ? scratch + d->scratch_offset[i] : NULL;
  return MTF_OK;
}

/* float32 operands into out (bf16-stored where out_bf16). A bf16-stored result the GEMM cannot write itself
 * is formed in the scratch after the decomposition's part and the `widened` elements of widened operands. */
static int einsum2(mtf_backend *b, const mtf_step *st, const float *a, const float *bm, void *out, int out_bf16,
                   float *scratch, int64_t widened) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  float *part[5];
  MTF_CHECK(scratch_parts(b, &d, scratch, part));
  einsum_result r = {out, out_bf16, out_bf16 && !d.c_packed && scratch ? scratch + d.scratch_elements + widened : NULL};
  if (d.a_summed) { /* dims only one operand has and the output lacks: summed out first */
    MTF_CHECK(mtf_cuda_reduce_into(b, &st->in_shape[0], a, &d.a_kept, part[0], 0));
    a = part[0];
  }
  if (d.b_summed) {
    MTF_CHECK(mtf_cuda_reduce_into(b, &st->in_shape[1], bm, &d.b_kept, part[1], 0));
    bm = part[1];
  }
  const float *ap, *bp;
  MTF_CHECK(prepare(b, &d.a_kept, a, &d.batch, &d.m, &d.k, d.a_packed, part[2], &ap));
  MTF_CHECK(prepare(b, &d.b_kept, bm, &d.batch, &d.k, &d.n, d.b_packed, part[3], &bp));
  return product(b, st, &d, CUDA_R_32F, ap, bp, part[4], &r);
}

/* Both operands bfloat16: multiplied as they are when both are in the GEMM's order (the GEMM or the unpacking
 * reorder writing a bf16-stored result), else widened to float32 in the scratch after the decomposition's part
 * and multiplied in fp32 (see the file's comment). */
static int einsum2_bf16(mtf_backend *b, const mtf_step *st, const void *a, const void *bm, void *out, int out_bf16,
                        float *scratch) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  if (!d.a_summed && !d.b_summed && !d.a_packed && !d.b_packed) {
    float *part[5];
    MTF_CHECK(scratch_parts(b, &d, scratch, part));
    einsum_result r = {out, out_bf16, NULL};
    return product(b, st, &d, CUDA_R_16BF, a, bm, part[4], &r);
  }
  int64_t na = mtf_shape_num_elements(&st->in_shape[0]), nbm = mtf_shape_num_elements(&st->in_shape[1]);
  if (!scratch)
    return mtf_cuda_refuse(b, "einsum: bfloat16 operands to reorder need %lld elements of scratch and the step has "
                           "none (a lowering bug)", (long long)(d.scratch_elements + na + nbm));
  float *wa = scratch + d.scratch_elements, *wb = wa + na;
  MTF_CHECK(mtf_cuda_k_cast(b, a, MTF_BF16, wa, MTF_F32, na));
  MTF_CHECK(mtf_cuda_k_cast(b, bm, MTF_BF16, wb, MTF_F32, nbm));
  return einsum2(b, st, wa, wb, out, out_bf16, scratch, na + nbm);
}

static int k_einsum(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *args) {
  int out_bf16 = st->out_dtype == MTF_BF16;
  if (st->n_in == 1) {
    if (st->in_dtype[0] != MTF_F32)
      return mtf_cuda_refuse(b, "einsum: a one-operand einsum of %s; the CUDA backend sums float32",
                             mtf_dtype_name(st->in_dtype[0]));
    return mtf_cuda_reduce_into(b, &st->in_shape[0], (const float *)args->in[0], &st->out_shape, args->out, out_bf16);
  }
  if (st->in_dtype[0] == MTF_BF16 && st->in_dtype[1] == MTF_BF16)
    return einsum2_bf16(b, st, args->in[0], args->in[1], args->out, out_bf16, (float *)args->scratch);
  if (st->in_dtype[0] != MTF_F32 || st->in_dtype[1] != MTF_F32)
    return mtf_cuda_refuse(b, "einsum: operands %s and %s; the CUDA backend multiplies two float32 or two bfloat16",
                           mtf_dtype_name(st->in_dtype[0]), mtf_dtype_name(st->in_dtype[1]));
  return einsum2(b, st, (const float *)args->in[0], (const float *)args->in[1], args->out, out_bf16,
                 (float *)args->scratch, 0);
}

void mtf_cuda_register_einsum(mtf_kernel_fn *kernels) { kernels[MTF_OP_EINSUM] = k_einsum; }

MTF_CUDA_END
