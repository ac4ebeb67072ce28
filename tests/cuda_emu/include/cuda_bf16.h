/* The CUDA emulator's cuda_bf16.h (tests/cuda_emu): bfloat16 as the top 16 bits of a float, converted with
 * round-to-nearest-even as __float2bfloat16 does (NaN stays NaN). */
#ifndef MTF_CUDA_EMU_BF16_H
#define MTF_CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16;
inline __nv_bfloat16 __float2bfloat16(float f);
inline float __bfloat162float(__nv_bfloat16 h);

struct __nv_bfloat16 {
  uint16_t x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) { *this = __float2bfloat16(f); }
  operator float() const { return __bfloat162float(*this); }
};
typedef __nv_bfloat16 nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.x = (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return h;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  h.x = (uint16_t)(u >> 16);
  return h;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
