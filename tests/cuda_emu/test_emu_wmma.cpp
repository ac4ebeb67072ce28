/* The emulator's warp matrix API (include/mma.h) and dynamic shared memory above 48 KiB: a 32x48 by 48x32 bf16
 * product plus a 32x32 fp32 accumulator read from memory, by 2 warps of 16x16x16 mma_sync, for every pair of
 * row- and column-major a/b fragments and both accumulator layouts, from global memory and staged in 64 KiB of
 * dynamic shared memory (allowed by cudaFuncSetAttribute), each element against a double-precision sum of the
 * same bf16 products. And what must fail: a mismatched fragment layout (the check notices), a launch asking more
 * than 48 KiB without the attribute, a misaligned tile pointer or ldm, and x[] read outside lane 0 of a warp
 * (NaN there: the emulator's rule for fragments, see mma.h). */
#include <math.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "exec/cuda/cuda_kernel.h"

using namespace nvcuda;

#include "emu_expect.h"

enum { M = 32, N = 32, K = 48, LDA = K + 8, LDB = K + 16, LDC = M + 8, LDD = N + 4 };
/* Row-major A is M rows of LDA, column-major A is K columns of LDA (>= M); B is K rows or N columns of LDB. */
enum { A_ELEMS = LDA * K, B_ELEMS = LDB * K, C_ELEMS = LDC * N, D_ELEMS = LDD * N };
/* Staged operands: A at the start of the dynamic shared memory, B past 48 KiB. */
enum { B_SHARED_OFFSET = 52 * 1024, SHARED_BYTES = 64 * 1024 };
const float SCALE = 0.5f;

template <typename L> struct is_col { static const bool value = false; };
template <> struct is_col<wmma::col_major> { static const bool value = true; };

/* Element (r, c) of a matrix stored row-major (rows ld apart) or column-major (columns ld apart). */
static size_t at(int r, int c, int ld, bool col_major) { return col_major ? (size_t)c * ld + r : (size_t)r * ld + c; }

/* D = SCALE (A B + C): warp w computes the tiles of rows 16w..16w+15, one column tile after the other. A and B
 * are stored as LA and LB say, unless wrong_b (B's fragments declared with the other layout than its storage's).
 * C is read with c_layout and D written with d_layout; staged: A and B copied to dynamic shared memory first. */
template <typename LA, typename LB, typename LB_FRAG>
__global__ void wmma_gemm(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const float *C, wmma::layout_t c_layout,
                          float *D, wmma::layout_t d_layout, int staged) {
  if (staged) {
    MTF_DYNAMIC_SHARED(unsigned char, shared);
    __nv_bfloat16 *sa = (__nv_bfloat16 *)shared, *sb = (__nv_bfloat16 *)(shared + B_SHARED_OFFSET);
    for (int i = threadIdx.x; i < A_ELEMS; i += blockDim.x) sa[i] = A[i];
    for (int i = threadIdx.x; i < B_ELEMS; i += blockDim.x) sb[i] = B[i];
    __syncthreads();
    A = sa;
    B = sb;
  }
  int warp = threadIdx.x / 32;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB_FRAG> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  bool c_col = c_layout == wmma::mem_col_major, d_col = d_layout == wmma::mem_col_major;
  for (int tn = 0; tn < N / 16; tn++) {
    int row = 16 * warp, col = 16 * tn;
    wmma::load_matrix_sync(acc, C + at(row, col, LDC, c_col), LDC, c_layout);
    for (int k = 0; k < K; k += 16) {
      wmma::load_matrix_sync(a, A + at(row, k, LDA, is_col<LA>::value), LDA);
      wmma::load_matrix_sync(b, B + at(k, col, LDB, is_col<LB>::value), LDB);
      wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= SCALE; /* uniform elementwise: allowed */
    wmma::store_matrix_sync(D + at(row, col, LDD, d_col), acc, LDD, d_layout);
  }
}

/* Every thread writes x[0] of its accumulator to out[linear index] (breaking the rule: results leave through
 * store_matrix_sync only); 2-D block, so lane 0 is by linear index. */
__global__ void read_x_directly(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *out) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(a, A, LDA);
  wmma::load_matrix_sync(b, B, LDB);
  wmma::mma_sync(acc, a, b, acc);
  out[threadIdx.y * blockDim.x + threadIdx.x] = acc.x[0];
}

/* fill_fragment and a store with no product: every lane's fill, lane 0's store. */
__global__ void fill_and_store(float *out, int offset_elements, unsigned ldm) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 2.5f);
  wmma::store_matrix_sync(out + offset_elements, acc, ldm, wmma::mem_row_major);
}

/* Host data: bf16 operands (in the layouts' storage), an fp32 C, D's sentinel. */
struct problem {
  std::vector<float> a, b, c; /* a[r][k], b[k][n] (bf16 values), c[r][n] */
  __nv_bfloat16 *dA_row, *dA_col, *dB_row, *dB_col;
  float *dC_row, *dC_col, *dD;
};

static const float SENTINEL = -12345.0f;

static void upload_bf16(__nv_bfloat16 **dst, const std::vector<float> &m, int rows, int cols, int ld, bool col_major,
                        int elems) {
  std::vector<__nv_bfloat16> h(elems, __float2bfloat16(SENTINEL)); /* padding: large, so reading it shows */
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) h[at(r, c, ld, col_major)] = __float2bfloat16(m[(size_t)r * cols + c]);
  cudaMalloc(dst, elems * sizeof(__nv_bfloat16));
  cudaMemcpy(*dst, h.data(), elems * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
}

static void upload_f32(float **dst, const std::vector<float> &m, int rows, int cols, int ld, bool col_major, int elems) {
  std::vector<float> h(elems, SENTINEL);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) h[at(r, c, ld, col_major)] = m[(size_t)r * cols + c];
  cudaMalloc(dst, elems * sizeof(float));
  cudaMemcpy(*dst, h.data(), elems * sizeof(float), cudaMemcpyHostToDevice);
}

static problem make_problem(void) {
  problem p;
  p.a.resize(M * K);
  p.b.resize(K * N);
  p.c.resize(M * N);
  /* bf16 values with full 8-bit significands and mixed signs and exponents */
  for (int i = 0; i < M * K; i++)
    p.a[i] = __bfloat162float(__float2bfloat16(((float)((i * 37) % 101) - 50.0f) / 23.0f * (1.0f + (float)(i % 7) / 64)));
  for (int i = 0; i < K * N; i++)
    p.b[i] = __bfloat162float(__float2bfloat16(((float)((i * 53) % 97) - 48.0f) / 31.0f * (1.0f + (float)(i % 5) / 32)));
  for (int i = 0; i < M * N; i++) p.c[i] = (float)((i * 29) % 83) / 7.0f - 5.9f + 1e-3f * (float)i;
  upload_bf16(&p.dA_row, p.a, M, K, LDA, false, A_ELEMS);
  upload_bf16(&p.dA_col, p.a, M, K, LDA, true, A_ELEMS);
  upload_bf16(&p.dB_row, p.b, K, N, LDB, false, B_ELEMS);
  upload_bf16(&p.dB_col, p.b, K, N, LDB, true, B_ELEMS);
  upload_f32(&p.dC_row, p.c, M, N, LDC, false, C_ELEMS);
  upload_f32(&p.dC_col, p.c, M, N, LDC, true, C_ELEMS);
  cudaMalloc(&p.dD, D_ELEMS * sizeof(float));
  return p;
}

/* D against SCALE (sum of the bf16 products in double + C), with the bound of an fp32 sum of K exact products and
 * C in any order: (K + 1) 2^-24 (sum |a b| + |c|) per element (scaled: SCALE is a power of two); D's padding
 * untouched. Returns the worst error relative to that sum, or +inf when the padding changed. */
static double check(const problem &p, bool d_col, const char *what, bool expect_wrong) {
  std::vector<float> got(D_ELEMS);
  cudaMemcpy(got.data(), p.dD, D_ELEMS * sizeof(float), cudaMemcpyDeviceToHost);
  double worst = 0;
  int outside = 0;
  for (int r = 0; r < M; r++)
    for (int n = 0; n < N; n++) {
      double sum = p.c[r * N + n], mag = fabs(p.c[r * N + n]);
      for (int k = 0; k < K; k++) {
        double prod = (double)p.a[r * K + k] * p.b[k * N + n];
        sum += prod;
        mag += fabs(prod);
      }
      double e = fabs((double)got[at(r, n, LDD, d_col)] - SCALE * sum) / (SCALE * mag);
      if (isnan(e) || e > worst) worst = e; /* a NaN stays */
    }
  for (int e = 0; e < D_ELEMS; e++) {
    int r = d_col ? e % LDD : e / LDD, n = d_col ? e / LDD : e % LDD;
    if (r >= M || n >= N) outside += got[e] != SENTINEL;
  }
  const double bound = (K + 1) * ldexp(1.0, -24);
  if (expect_wrong)
    EXPECT(worst > 1e-2, "%s: a mismatched b layout went unnoticed (worst relative error %.2e)", what, worst);
  else
    EXPECT(worst <= bound && outside == 0, "%s: worst relative error %.2e (bound %.2e), %d elements outside D written",
           what, worst, bound, outside);
  return outside ? INFINITY : worst;
}

static void reset_d(const problem &p) {
  std::vector<float> h(D_ELEMS, SENTINEL);
  cudaMemcpy(p.dD, h.data(), D_ELEMS * sizeof(float), cudaMemcpyHostToDevice);
}

template <typename LA, typename LB, typename LB_FRAG>
static double run_case(const problem &p, wmma::layout_t c_layout, wmma::layout_t d_layout, bool staged,
                       bool expect_wrong = false) {
  bool a_col = is_col<LA>::value, b_col = is_col<LB>::value;
  char what[160];
  snprintf(what, sizeof what, "A %s, B %s%s, C %s, D %s%s", a_col ? "col" : "row", b_col ? "col" : "row",
           expect_wrong ? " (fragments declared the other way)" : "", c_layout == wmma::mem_col_major ? "col" : "row",
           d_layout == wmma::mem_col_major ? "col" : "row", staged ? ", staged in 64 KiB of shared memory" : "");
  reset_d(p);
  if (staged) {
    EXPECT(cudaFuncSetAttribute(wmma_gemm<LA, LB, LB_FRAG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                SHARED_BYTES) == cudaSuccess,
           "%s: cudaFuncSetAttribute(%d bytes): %s", what, (int)SHARED_BYTES, mtf_emu_last_detail());
  }
  MTF_LAUNCH((wmma_gemm<LA, LB, LB_FRAG>), 1, 64, staged ? SHARED_BYTES : 0, nullptr,
             a_col ? p.dA_col : p.dA_row, b_col ? p.dB_col : p.dB_row,
             c_layout == wmma::mem_col_major ? p.dC_col : p.dC_row, c_layout, p.dD, d_layout, staged ? 1 : 0);
  cudaError_t e = cudaGetLastError();
  EXPECT(e == cudaSuccess, "%s: launch: %s", what, cudaGetErrorString(e));
  return check(p, d_layout == wmma::mem_col_major, what, expect_wrong);
}

static void test_products(const problem &p) {
  double worst = 0;
  for (int staged = 0; staged < 2; staged++)
    for (int c = 0; c < 2; c++) {
      wmma::layout_t cl = c ? wmma::mem_col_major : wmma::mem_row_major;
      wmma::layout_t dl = c ? wmma::mem_row_major : wmma::mem_col_major; /* the other one */
      worst = fmax(worst, run_case<wmma::row_major, wmma::row_major, wmma::row_major>(p, cl, dl, staged));
      worst = fmax(worst, run_case<wmma::row_major, wmma::col_major, wmma::col_major>(p, cl, dl, staged));
      worst = fmax(worst, run_case<wmma::col_major, wmma::row_major, wmma::row_major>(p, cl, dl, staged));
      worst = fmax(worst, run_case<wmma::col_major, wmma::col_major, wmma::col_major>(p, cl, dl, staged));
    }
  printf("wmma products: worst error %.2e of the sum of |products| (bound %.2e)\n", worst, (K + 1) * ldexp(1.0, -24));
  /* Planted: B stored column-major, its fragments declared row-major. */
  run_case<wmma::row_major, wmma::col_major, wmma::row_major>(p, wmma::mem_row_major, wmma::mem_row_major, false, true);
}

static void test_shared_limit(const problem &p) {
  typedef void (*kernel_t)(const __nv_bfloat16 *, const __nv_bfloat16 *, const float *, wmma::layout_t, float *,
                           wmma::layout_t, int);
  kernel_t k = wmma_gemm<wmma::col_major, wmma::row_major, wmma::row_major>; /* no attribute set for this one */
  reset_d(p);
  MTF_LAUNCH(k, 1, 64, SHARED_BYTES, nullptr, p.dA_col, p.dB_row, p.dC_row, wmma::mem_row_major, p.dD,
             wmma::mem_row_major, 1);
  cudaError_t e = cudaGetLastError();
  EXPECT(e == cudaErrorInvalidValue, "64 KiB of dynamic shared memory without cudaFuncSetAttribute: %s",
         cudaGetErrorName(e));
  std::vector<float> got(D_ELEMS);
  cudaMemcpy(got.data(), p.dD, D_ELEMS * sizeof(float), cudaMemcpyDeviceToHost);
  int written = 0;
  for (float v : got) written += v != SENTINEL;
  EXPECT(written == 0, "the refused launch ran anyway (%d elements written)", written);
  MTF_LAUNCH(k, 1, 64, 48 * 1024, nullptr, p.dA_col, p.dB_row, p.dC_row, wmma::mem_row_major, p.dD,
             wmma::mem_row_major, 0);
  EXPECT(cudaGetLastError() == cudaSuccess, "48 KiB without the attribute refused: %s", mtf_emu_last_detail());
  EXPECT(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024) == cudaErrorInvalidValue,
         "228 KiB of dynamic shared memory accepted (an H100 block has at most 227 KiB)");
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "the refused attribute not the last error");
  EXPECT(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) == cudaSuccess,
         "227 KiB refused: %s", mtf_emu_last_detail());
  reset_d(p);
  MTF_LAUNCH(k, 1, 64, 227 * 1024, nullptr, p.dA_col, p.dB_row, p.dC_row, wmma::mem_row_major, p.dD,
             wmma::mem_row_major, 1);
  e = cudaGetLastError();
  EXPECT(e == cudaSuccess, "a 227 KiB launch after the attribute: %s", cudaGetErrorString(e));
  check(p, false, "A col, B row, C row, D row, 227 KiB of shared memory", false);
  cudaGetLastError();
}

static void test_misuse(const problem &p) {
  /* A tile pointer off by one element (2 bytes); a store with ldm 16 floats (fine), 6 floats (24 bytes: not a
   * multiple of 16) and 16 bytes off alignment. */
  reset_d(p);
  MTF_LAUNCH((wmma_gemm<wmma::row_major, wmma::row_major, wmma::row_major>), 1, 64, 0, nullptr, p.dA_row + 1,
             p.dB_row, p.dC_row, wmma::mem_row_major, p.dD, wmma::mem_row_major, 0);
  cudaError_t e = cudaGetLastError();
  EXPECT(e == cudaErrorMisalignedAddress, "a tile pointer 2 bytes off 32-byte alignment: %s", cudaGetErrorName(e));
  float *out;
  cudaMalloc(&out, 16 * 16 * sizeof(float) + 64);
  MTF_LAUNCH(fill_and_store, 1, 32, 0, nullptr, out, 0, 16u);
  e = cudaGetLastError();
  float h[256];
  cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (float v : h) wrong += v != 2.5f;
  EXPECT(e == cudaSuccess && wrong == 0, "fill_fragment then store_matrix_sync: %s, %d of 256 wrong",
         cudaGetErrorName(e), wrong);
  MTF_LAUNCH(fill_and_store, 1, 32, 0, nullptr, out, 0, 6u);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorMisalignedAddress, "store_matrix_sync with ldm 6 floats (24 bytes): %s", cudaGetErrorName(e));
  MTF_LAUNCH(fill_and_store, 1, 32, 0, nullptr, out, 4, 16u);
  e = cudaGetLastError();
  EXPECT(e == cudaErrorMisalignedAddress, "store_matrix_sync 16 bytes off 32-byte alignment: %s", cudaGetErrorName(e));
  cudaFree(out);

  /* x[] read directly: lane 0 of each warp (linear index 0 and 32 of a 16 x 4 block) has the tile, others NaN. */
  float *xs;
  cudaMalloc(&xs, 64 * sizeof(float));
  MTF_LAUNCH(read_x_directly, 1, dim3(16, 4), 0, nullptr, (const __nv_bfloat16 *)p.dA_row,
             (const __nv_bfloat16 *)p.dB_row, xs);
  e = cudaGetLastError();
  float got[64];
  cudaMemcpy(got, xs, sizeof got, cudaMemcpyDeviceToHost);
  double want = 0;
  for (int k = 0; k < 16; k++) want += (double)p.a[k] * p.b[k * N];
  int finite_elsewhere = 0;
  for (int t = 0; t < 64; t++)
    if (t % 32) finite_elsewhere += !isnan(got[t]);
  EXPECT(e == cudaSuccess && fabs(got[0] - want) <= 1e-5 * (1 + fabs(want)) && got[32] == got[0] &&
             finite_elsewhere == 0,
         "x[0] read directly: lanes 0 give %g and %g (want %g), %d other lanes not NaN (%s)", got[0], got[32], want,
         finite_elsewhere, cudaGetErrorName(e));
  cudaFree(xs);
  cudaGetLastError();
}

int main(void) {
  problem p = make_problem();
  test_shared_limit(p); /* first: no kernel has the attribute yet */
  test_products(p);
  test_misuse(p);
  for (void *d : {(void *)p.dA_row, (void *)p.dA_col, (void *)p.dB_row, (void *)p.dB_col, (void *)p.dC_row,
                  (void *)p.dC_col, (void *)p.dD})
    cudaFree(d);
  printf("%s: cuda emulator wmma (bf16 16x16x16, fp32 accumulation) and dynamic shared memory limits\n",
         failed ? "FAIL" : "ok");
  return failed ? 1 : 0;
}
