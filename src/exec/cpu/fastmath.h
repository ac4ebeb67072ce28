/* Single-precision exp and tanh for the CPU kernels' hot loops: libm's are calls the compiler cannot
 * vectorise (and glibc's tanhf/expf go through expm1/double paths), so every element of a softmax or a gelu
 * paid a function call. These are branch-free polynomials with range reduction (after Cephes' expf and
 * tanhf), static inline so that a loop calling them vectorises: no calls, no integer conversion of a
 * float that could be out of range (the rounding uses the 1.5 * 2^23 trick and the exponent is read from
 * the bits), and selects instead of branches.
 *
 * Accuracy (tests/engine/test_fastmath.c checks it against libm in double over a dense sweep and the
 * special values; measured in brackets): mtf_expf within 1.5e-7 relative where the result is a normal
 * float [8.2e-8], within one subnormal ulp where it is subnormal [0.75], exp(-inf) = 0, overflow to +inf,
 * NaN stays NaN; mtf_tanhf within 1e-6 absolute [7.7e-8] and 3e-7 relative [1.4e-7], odd, tanh(+-inf) = +-1.
 * Results may differ from libm's in the last bits, and between an FMA (-march=native) and a portable
 * build by rounding. */
#ifndef MTF_EXEC_CPU_FASTMATH_H
#define MTF_EXEC_CPU_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* a * b + c, fused where the target has FMA (fmaf is a library call where it has not, so not there). */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define MTF_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define MTF_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline float mtf_bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t mtf_float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* e^x. x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, so r is exact to fp32), e^r by Cephes' degree-6
 * polynomial, and 2^n applied as two factors 2^(n/2) 2^(n - n/2), each a normal float for n in
 * [-150, 128], so that underflow to subnormals and to 0, and overflow to inf, come out of the last
 * multiply by the usual rounding. x is clamped to [-104, 89] first (beyond, the result is 0 or inf
 * anyway), which keeps n in that range; a NaN passes the clamp (comparisons are false) and propagates. */
static inline float mtf_expf(float x) {
  x = x > 89.0f ? 89.0f : x;
  x = x < -104.0f ? -104.0f : x;
  const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits */
  float t = MTF_FMA(x, 1.44269504088896341f, shifter);
  float n = t - shifter;
  int32_t ni = (int32_t)(mtf_float_to_bits(t) - mtf_float_to_bits(shifter)); /* n as an integer */
  float r = MTF_FMA(n, -0.693359375f, x);
  r = MTF_FMA(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = MTF_FMA(p, r, 1.3981999507e-3f);
  p = MTF_FMA(p, r, 8.3334519073e-3f);
  p = MTF_FMA(p, r, 4.1665795894e-2f);
  p = MTF_FMA(p, r, 1.6666665459e-1f);
  p = MTF_FMA(p, r, 5.0000001201e-1f);
  p = MTF_FMA(p, r * r, r) + 1.0f;
  int32_t n1 = ni / 2, n2 = ni - n1; /* both in [-75, 64] */
  float s1 = mtf_bits_to_float((uint32_t)(n1 + 127) << 23), s2 = mtf_bits_to_float((uint32_t)(n2 + 127) << 23);
  return p * s1 * s2;
}

/* tanh(x): for |x| < 0.625 Cephes' odd polynomial x + x^3 P(x^2) (1 - 2/(e^2x + 1) would cancel there),
 * otherwise sign(x) (1 - 2 / (e^(2|x|) + 1)), which saturates to 1 as e^(2|x|) overflows to inf. Both
 * are computed and one selected, so the loop has no branch; a NaN propagates through both. */
static inline float mtf_tanhf(float x) {
  float a = x < 0.0f ? -x : x;
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = MTF_FMA(p, z, 2.06390887954e-2f);
  p = MTF_FMA(p, z, -5.37397155531e-2f);
  p = MTF_FMA(p, z, 1.33314422036e-1f);
  p = MTF_FMA(p, z, -3.33332819422e-1f);
  float small = MTF_FMA(p * z, x, x);
  small = x == 0.0f ? x : small; /* tanh(-0) = -0 (the sum above gives +0) */
  float e = mtf_expf(2.0f * a);
  float large = 1.0f - 2.0f / (e + 1.0f);
  large = x < 0.0f ? -large : large;
  return a < 0.625f ? small : large;
}

/* 1 / (1 + e^-x): 0 at -inf, 1 at +inf. */
static inline float mtf_sigmoidf(float x) { return 1.0f / (1.0f + mtf_expf(-x)); }

#define MTF_GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define MTF_GELU_A 0.044715f

/* The tanh approximation of gelu, and its derivative (the op table's definitions, ops/elementwise.c). */
static inline float mtf_geluf(float x) {
  float t = mtf_tanhf(MTF_GELU_C * (x + MTF_GELU_A * x * x * x));
  return 0.5f * x * (1.0f + t);
}

static inline float mtf_gelu_gradf(float x) {
  float t = mtf_tanhf(MTF_GELU_C * (x + MTF_GELU_A * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * MTF_GELU_C * (1.0f + 3.0f * MTF_GELU_A * x * x);
}

/* The same tanh approximation in its sigmoid form, 0.5 (1 + tanh u) = 1 / (1 + e^-2u): one exp and one
 * division where mtf_tanhf also evaluates its small-argument polynomial and a select, about half the work. Equal
 * up to rounding (checked to 1e-6 like the above, tests/engine/test_fastmath.c), but not bit for bit, so it is
 * for the kernels whose argument is a bf16-stored activation (lower/storage.c), which fp32 runs never have. */
static inline float mtf_gelu_sigmoid_formf(float x) {
  float u = MTF_GELU_C * (x + MTF_GELU_A * x * x * x);
  return x / (1.0f + mtf_expf(-2.0f * u));
}

static inline float mtf_gelu_grad_sigmoid_formf(float x) {
  float u = MTF_GELU_C * (x + MTF_GELU_A * x * x * x);
  float s = 1.0f / (1.0f + mtf_expf(-2.0f * u));
  return s + 2.0f * x * s * (1.0f - s) * MTF_GELU_C * (1.0f + 3.0f * MTF_GELU_A * x * x);
}

#endif
