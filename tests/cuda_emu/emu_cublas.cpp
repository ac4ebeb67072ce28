/* The CUDA emulator's cuBLAS (tests/cuda_emu): the GEMM subset through OpenBLAS's cblas_sgemm in column-major
 * order, so the caller's transposes, leading dimensions and strides mean exactly what they mean to cuBLAS.
 * Arguments are checked as cuBLAS checks them (CUBLAS_STATUS_INVALID_VALUE), and operands must be device
 * memory: a host pointer passed to a GEMM is the mix-up this catches. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cublas_v2.h"

struct cublasContext {
  cudaStream_t stream;
  cublasMath_t math;
};

namespace {

float tf32_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) { /* finite: round to nearest even at mantissa bit 13 */
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
  }
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Elements an operand of `rows` x `cols` (column-major, leading dimension ld) spans. */
size_t extent(int rows, int cols, int ld) { return rows && cols ? (size_t)ld * (size_t)(cols - 1) + (size_t)rows : 0; }

bool is_float_type(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }

/* The operand as floats (widened from bf16, rounded to TF32 when asked). */
std::vector<float> widen(const void *p, cudaDataType type, size_t n, bool tf32) {
  std::vector<float> out(n);
  if (type == CUDA_R_32F) memcpy(out.data(), p, n * sizeof(float));
  else
    for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  if (tf32)
    for (float &v : out) v = tf32_round(v);
  return out;
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const void *A, cudaDataType at, int lda, long long sa, const void *B, cudaDataType bt, int ldb,
                    long long sb, float beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
                    bool tf32_compute) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
      k < 0 || batch < 0 || !is_float_type(at) || !is_float_type(bt) || !is_float_type(ct))
    return CUBLAS_STATUS_INVALID_VALUE;
  /* cuBLAS's type combinations for an fp32 compute type: A and B of one type, and a bfloat16 C only from
   * bfloat16 A and B (there is no fp32 x fp32 -> bf16 GEMM) */
  if (at != bt || (ct == CUDA_R_16BF && at != CUDA_R_16BF)) return CUBLAS_STATUS_NOT_SUPPORTED;
  int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  size_t a_n = extent(a_rows, a_cols, lda), b_n = extent(b_rows, b_cols, ldb), c_n = extent(m, n, ldc);
  size_t a_size = at == CUDA_R_32F ? 4 : 2, b_size = bt == CUDA_R_32F ? 4 : 2, c_size = ct == CUDA_R_32F ? 4 : 2;
  bool tf32 = tf32_compute || h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  for (int i = 0; i < batch; i++) {
    const char *a = static_cast<const char *>(A) + (size_t)(sa * i) * a_size;
    const char *b = static_cast<const char *>(B) + (size_t)(sb * i) * b_size;
    char *c = static_cast<char *>(C) + (size_t)(sc * i) * c_size;
    if ((k > 0 && (!mtf_emu_is_device(a, a_n * a_size) || !mtf_emu_is_device(b, b_n * b_size))) ||
        !mtf_emu_is_device(c, c_n * c_size)) {
      mtf_emu_set_error(cudaErrorIllegalAddress, "cuBLAS GEMM: an operand is not (wholly) device memory");
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    std::vector<float> out(c_n, 0.0f); /* beta == 0: C is not read (its NaNs do not count), as cuBLAS */
    if (beta != 0.0f) out = widen(c, ct, c_n, false);
    if (k > 0) {
      std::vector<float> a_f = widen(a, at, a_n, tf32), b_f = widen(b, bt, b_n, tf32);
      cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                  tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, a_f.data(), lda, b_f.data(), ldb,
                  beta, out.data(), ldc);
    } else {
      for (float &v : out) v *= beta;
    }
    /* Write back only the m x n elements (the gaps of ldc > m are not cuBLAS's to touch). */
    for (int col = 0; col < n; col++)
      for (int row = 0; row < m; row++) {
        size_t e = (size_t)col * (size_t)ldc + (size_t)row;
        if (ct == CUDA_R_32F) reinterpret_cast<float *>(c)[e] = out[e];
        else reinterpret_cast<__nv_bfloat16 *>(c)[e] = __float2bfloat16(out[e]);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool float_compute(cublasComputeType_t t) {
  return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC || t == CUBLAS_COMPUTE_32F_FAST_TF32 ||
         t == CUBLAS_COMPUTE_32F_FAST_16BF;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
  *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetVersion(cublasHandle_t, int *version) {
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = static_cast<cublasMath_t>(mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t, cublasPointerMode_t mode) {
  return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
/* As cuBLAS asks: device memory, 256-byte aligned, a size that is a multiple of 256. */
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes && (!mtf_emu_is_device(workspace, bytes) || (uintptr_t)workspace % 256 != 0 || bytes % 256 != 0))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char *cublasGetStatusString(cublasStatus_t status) { return cublasGetStatusName(status); }

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc) {
  return gemm(handle, transa, transb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, *beta, C,
              CUDA_R_32F, ldc, 0, 1, false);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float *alpha, const float *A, int lda,
                                         long long strideA, const float *B, int ldb, long long strideB,
                                         const float *beta, float *C, int ldc, long long strideC, int batchCount) {
  return gemm(handle, transa, transb, m, n, k, *alpha, A, CUDA_R_32F, lda, strideA, B, CUDA_R_32F, ldb, strideB,
              *beta, C, CUDA_R_32F, ldc, strideC, batchCount, false);
}
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (!float_compute(computeType)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(handle, transa, transb, m, n, k, *static_cast<const float *>(alpha), A, Atype, lda, 0, B, Btype, ldb, 0,
              *static_cast<const float *>(beta), C, Ctype, ldc, 0, 1, computeType == CUBLAS_COMPUTE_32F_FAST_TF32);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long strideA, const void *B, cudaDataType Btype, int ldb,
                                          long long strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  if (!float_compute(computeType)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(handle, transa, transb, m, n, k, *static_cast<const float *>(alpha), A, Atype, lda, strideA, B, Btype,
              ldb, strideB, *static_cast<const float *>(beta), C, Ctype, ldc, strideC, batchCount,
              computeType == CUBLAS_COMPUTE_32F_FAST_TF32);
}
