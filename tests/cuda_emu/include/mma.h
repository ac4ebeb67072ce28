/* The CUDA emulator's mma.h (tests/cuda_emu): the part of CUDA's warp matrix API (nvcuda::wmma) that bf16 tiles
 * with fp32 accumulation need, declared as the real header declares it, so that a kernel written against it
 * compiles unchanged with nvcc for sm_80 and later:
 *   fragment<matrix_a | matrix_b, 16, 16, 16, __nv_bfloat16, row_major | col_major>  (x[]: __nv_bfloat16)
 *   fragment<accumulator, 16, 16, 16, float>                                         (x[]: float)
 *   fill_fragment(f, v); load_matrix_sync(a_or_b, const __nv_bfloat16 *p, ldm);
 *   load_matrix_sync(acc, const float *p, ldm, mem_row_major | mem_col_major);
 *   mma_sync(d, a, b, c)  (d = a b + c, any of the four a/b layout pairs);
 *   store_matrix_sync(float *p, acc, ldm, mem_row_major | mem_col_major).
 * Other shapes and element types are not declared: using them fails to compile here as it would for a GPU that
 * lacks them.
 *
 * How a warp's tile is held. On a GPU these calls are warp-collective and each lane holds an unspecified part
 * (8 elements) of the 16x16 tile. Here LANE 0 of each warp (the thread whose linear index in the block,
 * threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z), is a multiple of 32) holds the whole tile
 * (num_elements 256, x[16 r + c] = element (r, c) of the tile whatever the layout in memory) and does the warp's
 * loads, products and stores. The other 31 lanes' load_matrix_sync and mma_sync fill their fragments with NaN,
 * and their store_matrix_sync writes nothing; fill_fragment (a per-thread operation on a GPU too) fills every
 * lane's fragment. Every lane doing the whole tile would cost 32 times the arithmetic for the same result; the
 * NaN makes a kernel that breaks the rules below fail loudly instead of passing by luck. The rules, which a
 * kernel for a GPU must keep anyway since the element-to-lane mapping is unspecified there:
 *  - every lane of a warp calls the _sync functions, with the same arguments (warp-uniform control flow);
 *  - x[] is used only elementwise and uniformly: the same operation on every element, depending on nothing but
 *    that element, the same elements of other fragments and warp-uniform values (scaling by a constant,
 *    rounding, ...): no per-lane decision on x[] values, no row- or column-wise operation on x[] (store the
 *    tile to shared memory for those), no assumption about which element x[i] is;
 *  - results leave a fragment only through store_matrix_sync (x[] read directly is NaN on lanes 1..31);
 *  - memory written by some threads and then loaded by a warp with load_matrix_sync, and memory a warp stores
 *    with store_matrix_sync and other threads then read, are separated by __syncthreads (lane 0 loads and
 *    stores at its own turn; the emulator has no __syncwarp, and its sweeps alternate so a missing barrier shows).
 *
 * Checks a GPU makes by faulting: p must be 32-byte (256-bit) aligned and ldm a multiple of 16 bytes (8 bf16
 * or 4 float elements); otherwise the call records cudaErrorMisalignedAddress (the sticky error the launch's
 * cudaGetLastError returns, with the detail) and does nothing but poison the fragment. Static __shared__ tiles
 * therefore need __align__(32).
 *
 * Arithmetic: the products of bf16 values are exact in fp32 and are added to c's element in fp32, in k order,
 * each addition rounded to nearest. A GPU's tensor cores sum groups of products in one step with their own
 * rounding, so results agree with a GPU's within fp32 accumulation error, not bit for bit. */
#ifndef MTF_CUDA_EMU_MMA_H
#define MTF_CUDA_EMU_MMA_H

#include <stdint.h>
#include <stdio.h>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace nvcuda {
namespace wmma {

/* tags */
struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;

enum layout_t { mem_row_major, mem_col_major };

/* The base of every fragment: the whole 16x16 tile, x[16 r + c] = element (r, c). */
template <typename T, int size> struct mtf_emu_frag_base {
  enum { num_elements = size };
  enum { num_storage_elements = size };
  typedef T element_type;
  typedef T storage_element_type;
  alignas(16) T x[size];
};

template <typename Use, int m, int n, int k, typename T, typename Layout = void> class fragment;

template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major>
    : public mtf_emu_frag_base<__nv_bfloat16, 256> {};
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major>
    : public mtf_emu_frag_base<__nv_bfloat16, 256> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major>
    : public mtf_emu_frag_base<__nv_bfloat16, 256> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major>
    : public mtf_emu_frag_base<__nv_bfloat16, 256> {};
template <> class fragment<accumulator, 16, 16, 16, float> : public mtf_emu_frag_base<float, 256> {};

template <typename T> struct helper_traits {
  typedef T element_type;
  typedef T storage_element_type;
  typedef T fill_argument_type;
};

/* As the real fill_fragment: the value's type is not deduced but the element type (a float converts to
 * __nv_bfloat16). */
template <typename T, int size>
inline void fill_fragment(mtf_emu_frag_base<T, size> &f, const typename helper_traits<T>::fill_argument_type &v) {
  for (int i = 0; i < size; i++) f.x[i] = v;
}

namespace mtf_emu {

/* Is the running thread lane 0 of its warp? */
inline bool leader(void) {
  unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return linear % (unsigned)warpSize == 0;
}

inline void poison(mtf_emu_frag_base<float, 256> &f) {
  for (int i = 0; i < 256; i++) f.x[i] = __builtin_nanf("");
}
inline void poison(mtf_emu_frag_base<__nv_bfloat16, 256> &f) {
  __nv_bfloat16 nan;
  nan.x = 0x7fc0; /* a quiet NaN */
  for (int i = 0; i < 256; i++) f.x[i] = nan;
}

/* The GPU's requirements on p and ldm; a violation is recorded as a GPU reports it (the operation is skipped). */
inline bool aligned(const char *call, const void *p, unsigned ldm, size_t element_bytes) {
  if ((uintptr_t)p % 32 == 0 && (ldm * element_bytes) % 16 == 0) return true;
  char detail[200];
  snprintf(detail, sizeof detail,
           "wmma::%s(p = %p, ldm = %u): p must be 32-byte aligned and ldm a multiple of 16 bytes (%u elements)", call,
           p, ldm, (unsigned)(16 / element_bytes));
  mtf_emu_set_error(cudaErrorMisalignedAddress, detail);
  return false;
}

/* Element (r, c) of a tile at p: row-major (rows ldm apart) or column-major (columns ldm apart). */
inline size_t at(int r, int c, unsigned ldm, bool col_major) {
  return col_major ? (size_t)c * ldm + (size_t)r : (size_t)r * ldm + (size_t)c;
}

template <typename T, int size> inline void load(mtf_emu_frag_base<T, size> &f, const T *p, unsigned ldm,
                                                 bool col_major, const char *call) {
  if (!aligned(call, p, ldm, sizeof(T)) || !leader()) {
    poison(f);
    return;
  }
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) f.x[16 * r + c] = p[at(r, c, ldm, col_major)];
}

/* d = a b + c on lane 0 (products exact in fp32, summed in fp32 in k order); NaN on the other lanes. d may be c. */
inline void mma(mtf_emu_frag_base<float, 256> &d, const mtf_emu_frag_base<__nv_bfloat16, 256> &a,
                const mtf_emu_frag_base<__nv_bfloat16, 256> &b, const mtf_emu_frag_base<float, 256> &c) {
  if (!leader()) {
    poison(d);
    return;
  }
  float fa[256], fb[256];
  for (int i = 0; i < 256; i++) fa[i] = __bfloat162float(a.x[i]), fb[i] = __bfloat162float(b.x[i]);
  for (int r = 0; r < 16; r++) {
    float row[16];
    for (int col = 0; col < 16; col++) row[col] = c.x[16 * r + col];
    for (int k = 0; k < 16; k++) {
      float ark = fa[16 * r + k];
      for (int col = 0; col < 16; col++) row[col] += ark * fb[16 * k + col];
    }
    for (int col = 0; col < 16; col++) d.x[16 * r + col] = row[col];
  }
}

}  // namespace mtf_emu

inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &a, const __nv_bfloat16 *p,
                             unsigned ldm) {
  mtf_emu::load(a, p, ldm, false, "load_matrix_sync");
}
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major> &a, const __nv_bfloat16 *p,
                             unsigned ldm) {
  mtf_emu::load(a, p, ldm, true, "load_matrix_sync");
}
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> &b, const __nv_bfloat16 *p,
                             unsigned ldm) {
  mtf_emu::load(b, p, ldm, false, "load_matrix_sync");
}
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &b, const __nv_bfloat16 *p,
                             unsigned ldm) {
  mtf_emu::load(b, p, ldm, true, "load_matrix_sync");
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &c, const float *p, unsigned ldm,
                             layout_t layout) {
  mtf_emu::load(c, p, ldm, layout == mem_col_major, "load_matrix_sync");
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &c, unsigned ldm,
                              layout_t layout) {
  if (!mtf_emu::aligned("store_matrix_sync", p, ldm, sizeof(float)) || !mtf_emu::leader()) return;
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++) p[mtf_emu::at(r, col, ldm, layout == mem_col_major)] = c.x[16 * r + col];
}

inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  mtf_emu::mma(d, a, b, c);
}
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  mtf_emu::mma(d, a, b, c);
}
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  mtf_emu::mma(d, a, b, c);
}
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  mtf_emu::mma(d, a, b, c);
}

}  // namespace wmma
}  // namespace nvcuda

#endif
