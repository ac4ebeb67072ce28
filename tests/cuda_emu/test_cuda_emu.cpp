/* The CUDA emulator's own test: what the backend's conformance on it relies on. Kernels that cooperate
 * through shared memory and __syncthreads (block reductions of cuda_kernel.h, a reversal that is wrong
 * without the barrier), dynamic shared memory, 2-D blocks, a barrier some threads never reach (reported,
 * as a GPU's undefined behaviour must be), copies in the wrong direction refused, and the GEMMs: every
 * transpose pair, leading dimensions larger than the rows, strided batches, alpha/beta, beta = 0 ignoring
 * NaN in C, bf16 and TF32 operands, each against a naive column-major product in double. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "exec/cuda/cuda_kernel.h"

#include "emu_expect.h"

__global__ void block_sums(const float *in, int n, float *sums, double *sums_double, float *maxima) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  float s = MTF_CUDA_NS::mtf_block_sum(v);
  double d = MTF_CUDA_NS::mtf_block_sum_double((double)v);
  float m = MTF_CUDA_NS::mtf_block_max(i < n ? v : -INFINITY);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = s;
    sums_double[blockIdx.x] = d;
    maxima[blockIdx.x] = m;
  }
}

__global__ void reverse_in_shared(const int *in, int *out) {
  __shared__ int buf[256];
  unsigned t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = buf[blockDim.x - 1 - t];
}

__global__ void rotate_dynamic(const float *in, float *out) {
  MTF_DYNAMIC_SHARED(float, tile);
  unsigned t = threadIdx.x;
  tile[t] = in[t];
  __syncthreads();
  out[t] = tile[(t + 1) % blockDim.x];
}

__global__ void coordinates(int *out) {
  unsigned linear = threadIdx.z * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x;
  unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  out[block * blockDim.x * blockDim.y * blockDim.z + linear] = (int)(1000 * block + 100 * threadIdx.z + 10 * threadIdx.y + threadIdx.x);
}

__global__ void early_return_then_barrier(int skip, float *out) {
  if ((int)threadIdx.x == skip) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

/* Reads the previous thread's value with no barrier between its write and the read: a race, which the
 * emulator must expose (thread t - 1 writes first only in one of the sweep orders). */
__global__ void racy_previous(const int *in, int *out) {
  __shared__ int buf[64];
  unsigned t = threadIdx.x;
  buf[t] = -1;
  __syncthreads();
  buf[t] = in[t];
  out[t] = t > 0 ? buf[t - 1] : in[t];
}

__global__ void accumulate(float *total, int *count) {
  atomicAdd(total, 0.5f);
  atomicAdd(count, 1);
}

static void test_kernels(void) {
  const int n = 700, threads = 200, blocks = 4; /* 800 threads, the last 100 past n: not a power of two */
  std::vector<float> host(n);
  for (int i = 0; i < n; i++) host[i] = (float)((i * 37) % 101) - 50.0f;
  float *in, *sums, *maxima;
  double *sums_double;
  cudaMalloc(&in, n * sizeof(float));
  cudaMalloc(&sums, blocks * sizeof(float));
  cudaMalloc(&maxima, blocks * sizeof(float));
  cudaMalloc(&sums_double, blocks * sizeof(double));
  cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  MTF_LAUNCH(block_sums, blocks, threads, 0, nullptr, in, n, sums, sums_double, maxima);
  EXPECT(cudaGetLastError() == cudaSuccess, "block_sums launch failed: %s", mtf_emu_last_detail());
  float got[blocks], got_max[blocks];
  double got_double[blocks];
  cudaMemcpy(got, sums, sizeof got, cudaMemcpyDeviceToHost);
  cudaMemcpy(got_max, maxima, sizeof got_max, cudaMemcpyDeviceToHost);
  cudaMemcpy(got_double, sums_double, sizeof got_double, cudaMemcpyDeviceToHost);
  for (int b = 0; b < blocks; b++) {
    double want = 0;
    float want_max = -INFINITY;
    for (int i = b * threads; i < (b + 1) * threads && i < n; i++) want += host[i], want_max = fmaxf(want_max, host[i]);
    EXPECT(got[b] == (float)want && got_double[b] == want && got_max[b] == want_max,
           "block %d: sum %g / %g, max %g; want %g, %g", b, got[b], got_double[b], got_max[b], want, want_max);
  }

  std::vector<int> values(512), reversed(512);
  for (int i = 0; i < 512; i++) values[i] = i * 3 + 1;
  int *vin, *vout;
  cudaMalloc(&vin, 512 * sizeof(int));
  cudaMalloc(&vout, 512 * sizeof(int));
  cudaMemcpy(vin, values.data(), 512 * sizeof(int), cudaMemcpyHostToDevice);
  MTF_LAUNCH(reverse_in_shared, 2, 256, 0, nullptr, vin, vout);
  cudaMemcpy(reversed.data(), vout, 512 * sizeof(int), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < 512; i++) wrong += reversed[i] != values[(i / 256) * 256 + 255 - i % 256];
  EXPECT(wrong == 0, "shared-memory reversal: %d of 512 wrong", wrong);

  float *fin, *fout;
  float fh[96], fr[96];
  for (int i = 0; i < 96; i++) fh[i] = (float)i;
  cudaMalloc(&fin, sizeof fh);
  cudaMalloc(&fout, sizeof fh);
  cudaMemcpy(fin, fh, sizeof fh, cudaMemcpyHostToDevice);
  MTF_LAUNCH(rotate_dynamic, 1, 96, 96 * sizeof(float), nullptr, (const float *)fin, fout);
  cudaMemcpy(fr, fout, sizeof fr, cudaMemcpyDeviceToHost);
  wrong = 0;
  for (int i = 0; i < 96; i++) wrong += fr[i] != fh[(i + 1) % 96];
  EXPECT(wrong == 0 && cudaGetLastError() == cudaSuccess, "dynamic shared rotation: %d of 96 wrong", wrong);

  int *coords;
  cudaMalloc(&coords, 2 * 3 * 24 * sizeof(int));
  MTF_LAUNCH(coordinates, dim3(2, 3), dim3(4, 3, 2), 0, nullptr, coords);
  std::vector<int> ch(2 * 3 * 24);
  cudaMemcpy(ch.data(), coords, ch.size() * sizeof(int), cudaMemcpyDeviceToHost);
  wrong = 0;
  for (int b = 0; b < 6; b++)
    for (int z = 0; z < 2; z++)
      for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) wrong += ch[b * 24 + z * 12 + y * 4 + x] != 1000 * b + 100 * z + 10 * y + x;
  EXPECT(wrong == 0, "2-D grid, 3-D block coordinates: %d wrong", wrong);

  /* A barrier not every thread reaches: thread 7 returning (fiber path), thread 0 returning (the threads
   * after it run directly and reach the barrier alone) */
  for (int skip : {7, 0}) {
    MTF_LAUNCH(early_return_then_barrier, 2, 32, 0, nullptr, skip, fout);
    cudaError_t e = cudaGetLastError();
    EXPECT(e == cudaErrorLaunchFailure, "a barrier thread %d never reaches: %s", skip, cudaGetErrorName(e));
    EXPECT(cudaGetLastError() == cudaSuccess, "the error is not cleared by reading it");
  }
  MTF_LAUNCH(early_return_then_barrier, 1, 32, 0, nullptr, -1, fout);
  EXPECT(cudaGetLastError() == cudaSuccess, "a barrier every thread reaches: %s", mtf_emu_last_detail());
  MTF_LAUNCH(early_return_then_barrier, 1, 2048, 0, nullptr, -1, fout);
  EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block accepted");

  MTF_LAUNCH(racy_previous, 1, 64, 0, nullptr, (const int *)vin, vout);
  cudaMemcpy(reversed.data(), vout, 64 * sizeof(int), cudaMemcpyDeviceToHost);
  wrong = 0;
  for (int i = 1; i < 64; i++) wrong += reversed[i] != values[i - 1];
  EXPECT(wrong > 0, "a read racing a write (no barrier between) went unnoticed: the sweeps do not alternate");

  float *total;
  int *count;
  cudaMalloc(&total, sizeof(float));
  cudaMalloc(&count, sizeof(int));
  cudaMemset(total, 0, sizeof(float));
  cudaMemset(count, 0, sizeof(int));
  MTF_LAUNCH(accumulate, 3, 64, 0, nullptr, total, count);
  float th;
  int cnt;
  cudaMemcpy(&th, total, sizeof th, cudaMemcpyDeviceToHost);
  cudaMemcpy(&cnt, count, sizeof cnt, cudaMemcpyDeviceToHost);
  EXPECT(th == 96.0f && cnt == 192, "atomicAdd: %g, %d (want 96, 192)", th, cnt);

  /* Copies checked for direction: host memory where device memory belongs, and past a block's end. */
  EXPECT(cudaMemcpy(fh, fin, sizeof fh, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "H2D into host memory");
  EXPECT(cudaMemcpy(fin, fh, sizeof fh, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "D2H from host memory");
  EXPECT(cudaMemcpy(fin, fh, sizeof fh + 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "H2D past the block");
  EXPECT(cudaMemcpy(fout, fin, sizeof fh, cudaMemcpyDeviceToDevice) == cudaSuccess, "D2D within blocks");
  EXPECT(cudaFree(fh) == cudaErrorInvalidDevicePointer, "cudaFree of host memory");
  cudaGetLastError();
  for (void *p : {(void *)in, (void *)sums, (void *)maxima, (void *)sums_double, (void *)vin, (void *)vout,
                  (void *)fin, (void *)fout, (void *)coords, (void *)total, (void *)count})
    cudaFree(p);
}

/* ---- GEMMs ---- */

static float bf16_round(float f) { return __bfloat162float(__float2bfloat16(f)); }

static void test_gemm_case(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, bool bf16, bool tf32) {
  const int m = 3, n = 4, k = 5, batch = 2;
  int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  int lda = a_rows + 2, ldb = b_rows + 1, ldc = m + 3;
  long long sa = (long long)lda * a_cols + 7, sb = (long long)ldb * b_cols + 5, sc = (long long)ldc * n + 2;
  std::vector<float> A(sa * batch), B(sb * batch), C(sc * batch);
  for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 7) % 13) / 7.0f - 0.9f + 1e-4f * (float)i;
  for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 5) % 11) / 5.0f - 1.1f + 1e-4f * (float)i;
  for (size_t i = 0; i < C.size(); i++) C[i] = (float)i * 0.25f;
  float alpha = 1.5f, beta = 0.5f;
  std::vector<__nv_bfloat16> Ab(A.size()), Bb(B.size());
  for (size_t i = 0; i < A.size(); i++) Ab[i] = __float2bfloat16(A[i]);
  for (size_t i = 0; i < B.size(); i++) Bb[i] = __float2bfloat16(B[i]);
  size_t elem = bf16 ? 2 : 4;
  void *dA, *dB;
  float *dC;
  cudaMalloc(&dA, A.size() * elem);
  cudaMalloc(&dB, B.size() * elem);
  cudaMalloc(&dC, C.size() * sizeof(float));
  cudaMemcpy(dA, bf16 ? (const void *)Ab.data() : (const void *)A.data(), A.size() * elem, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, bf16 ? (const void *)Bb.data() : (const void *)B.data(), B.size() * elem, cudaMemcpyHostToDevice);
  cudaMemcpy(dC, C.data(), C.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasStatus_t st = cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, dA, t, lda, sa, dB, t, ldb, sb, &beta,
                                                 dC, CUDA_R_32F, ldc, sc, batch,
                                                 tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT);
  EXPECT(st == CUBLAS_STATUS_SUCCESS, "GEMM status %d", (int)st);
  std::vector<float> got(C.size());
  cudaMemcpy(got.data(), dC, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
  double worst = 0;
  int untouched_wrong = 0;
  for (int bi = 0; bi < batch; bi++) {
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int p = 0; p < k; p++) {
          /* op(A)[i][p], op(B)[p][j] of column-major storage */
          double a = A[bi * sa + (ta == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda)];
          double b = B[bi * sb + (tb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb)];
          if (bf16) a = bf16_round((float)a), b = bf16_round((float)b);
          acc += a * b;
        }
        size_t e = bi * sc + i + (size_t)j * ldc;
        double want = alpha * acc + beta * C[e];
        worst = fmax(worst, fabs(got[e] - want) / (1.0 + fabs(want)));
      }
    for (long long e = 0; e < sc; e++) {
      bool inside = e % ldc < m && e / ldc < n;
      if (!inside) untouched_wrong += got[bi * sc + e] != C[bi * sc + e];
    }
  }
  /* fp32: float accumulation error; TF32: operands rounded to 10 mantissa bits (2^-11 relative). */
  double bound = tf32 ? 2e-3 : 1e-5;
  EXPECT(worst <= bound && untouched_wrong == 0, "GEMM %c%c%s%s: worst error %.2e (bound %.0e), %d elements outside C changed",
         ta == CUBLAS_OP_N ? 'N' : 'T', tb == CUBLAS_OP_N ? 'N' : 'T', bf16 ? " bf16" : "", tf32 ? " tf32" : "", worst,
         bound, untouched_wrong);
  if (tf32 && !bf16) EXPECT(worst > 1e-6, "TF32 GEMM as exact as fp32 (%.2e): operands not rounded", worst);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
}

static void test_gemm(void) {
  cublasHandle_t h;
  EXPECT(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
  cublasOperation_t ops[2] = {CUBLAS_OP_N, CUBLAS_OP_T};
  for (cublasOperation_t ta : ops)
    for (cublasOperation_t tb : ops) {
      test_gemm_case(h, ta, tb, false, false);
      test_gemm_case(h, ta, tb, true, false);
      test_gemm_case(h, ta, tb, false, true);
    }
  /* cublasSgemm, beta = 0 with NaN in C (not read), and lda smaller than the rows refused */
  float A[6] = {1, 2, 3, 4, 5, 6}, B[2] = {1, -1}, C[3] = {NAN, NAN, NAN}, out[3];
  float *dA, *dB, *dC, one = 1.0f, zero = 0.0f;
  cudaMalloc(&dA, sizeof A);
  cudaMalloc(&dB, sizeof B);
  cudaMalloc(&dC, sizeof C);
  cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
  cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice);
  /* A is 3 x 2 column-major: C = A * (1, -1) = (1-4, 2-5, 3-6) */
  EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, dA, 3, dB, 2, &zero, dC, 3) == CUBLAS_STATUS_SUCCESS, "sgemm");
  cudaMemcpy(out, dC, sizeof out, cudaMemcpyDeviceToHost);
  EXPECT(out[0] == -3 && out[1] == -3 && out[2] == -3, "sgemm beta 0 over NaN: %g %g %g", out[0], out[1], out[2]);
  EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, dA, 2, dB, 2, &zero, dC, 3) == CUBLAS_STATUS_INVALID_VALUE,
         "lda < m accepted");
  EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, A, 3, dB, 2, &zero, dC, 3) == CUBLAS_STATUS_EXECUTION_FAILED,
         "a host operand accepted");
  cudaGetLastError();
  /* A bfloat16 C (the einsum's bf16-stored results): the fp32 accumulation rounded once; fp32 operands with a
   * bf16 C are refused as cuBLAS refuses them. A = [[1 + 2^-7, 3], [1, 4]] (column-major 1 + 2^-7, 1, 3, 4),
   * B = (1, 1): C = (4 + 2^-7, 5), and 4 + 2^-7 is not a bfloat16 (2^-7 is below half an ulp of 4, 2^-6): it
   * rounds to 4. */
  float A2[4] = {1.0078125f, 1.0f, 3.0f, 4.0f}, B2[2] = {1.0f, 1.0f};
  __nv_bfloat16 A2b[4], B2b[2], C2b[2];
  for (int i = 0; i < 4; i++) A2b[i] = __float2bfloat16(A2[i]);
  for (int i = 0; i < 2; i++) B2b[i] = __float2bfloat16(B2[i]);
  void *dA2, *dB2, *dC2;
  cudaMalloc(&dA2, sizeof A2b);
  cudaMalloc(&dB2, sizeof B2b);
  cudaMalloc(&dC2, sizeof C2b);
  cudaMemcpy(dA2, A2b, sizeof A2b, cudaMemcpyHostToDevice);
  cudaMemcpy(dB2, B2b, sizeof B2b, cudaMemcpyHostToDevice);
  EXPECT(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 2, &one, dA2, CUDA_R_16BF, 2, dB2, CUDA_R_16BF, 2, &zero, dC2,
                      CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS, "bf16 C GEMM");
  cudaMemcpy(C2b, dC2, sizeof C2b, cudaMemcpyDeviceToHost);
  EXPECT(__bfloat162float(C2b[0]) == 4.0f && __bfloat162float(C2b[1]) == 5.0f, "bf16 C: %g %g (want 4 5)",
         __bfloat162float(C2b[0]), __bfloat162float(C2b[1]));
  EXPECT(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, dA, CUDA_R_32F, 3, dB, CUDA_R_32F, 2, &zero, dC2,
                      CUDA_R_16BF, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
         "fp32 x fp32 -> bf16 GEMM accepted (cuBLAS has none)");
  cudaFree(dA2);
  cudaFree(dB2);
  cudaFree(dC2);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cublasDestroy(h);
}

static void test_bf16(void) {
  const float half_ulp = 1.0f / 256; /* bf16 has 8 significant bits: 1 + 2^-8 is halfway */
  EXPECT(bf16_round(1.0f + half_ulp) == 1.0f, "halfway rounds to even (down)");
  EXPECT(bf16_round(1.0f + 3 * half_ulp) == 1.0f + 4 * half_ulp, "halfway rounds to even (up)");
  EXPECT(bf16_round(1.0f + 1.5f * half_ulp) == 1.0f + 2 * half_ulp, "above halfway rounds up");
  EXPECT(isnan(bf16_round(NAN)) && isinf(bf16_round(INFINITY)), "NaN and inf kept");
}

int main(void) {
  test_kernels();
  test_gemm();
  test_bf16();
  printf("%s: cuda emulator self-test\n", failed ? "FAIL" : "ok");
  return failed ? 1 : 0;
}
