/* bfloat16: the top 16 bits of an IEEE float32 (8 exponent bits, 7 mantissa bits). One definition of the
 * rounding for every backend and the double reference, so a cast gives the same bits everywhere: round to
 * nearest, ties to even; NaN stays NaN (quiet); infinities and overflow to infinity as IEEE rounding does. */
#ifndef MTF_CORE_BF16_H
#define MTF_CORE_BF16_H

#include <stdint.h>
#include <string.h>

#include "core/host_device.h"

typedef uint16_t mtf_bf16;

static inline MTF_HOST_DEVICE mtf_bf16 mtf_bf16_from_float(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (mtf_bf16)((u >> 16) | 0x0040u); /* NaN: keep it a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                              /* nearest, ties to even */
  return (mtf_bf16)(u >> 16);
}

static inline MTF_HOST_DEVICE float mtf_float_from_bf16(mtf_bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* x rounded to the nearest bfloat16, as a float (the reference's model of a cast). */
static inline MTF_HOST_DEVICE float mtf_bf16_round(float x) { return mtf_float_from_bf16(mtf_bf16_from_float(x)); }

#endif
