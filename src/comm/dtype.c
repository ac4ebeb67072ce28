#include "comm/dtype.h"

#include <stdint.h>

#include "core/bf16.h"

size_t mtf_dtype_size(mtf_dtype dtype) {
  switch (dtype) {
    case MTF_F32: return sizeof(float);
    case MTF_F64: return sizeof(double);
    case MTF_I32: return sizeof(int32_t);
    case MTF_BF16: return sizeof(uint16_t);
  }
  return 0;
}

const char *mtf_dtype_name(mtf_dtype dtype) {
  switch (dtype) {
    case MTF_F32: return "float32";
    case MTF_F64: return "float64";
    case MTF_I32: return "int32";
    case MTF_BF16: return "bfloat16";
  }
  return "?";
}

const char *mtf_reduce_op_name(mtf_reduce_op op) {
  switch (op) {
    case MTF_REDUCE_SUM: return "sum";
    case MTF_REDUCE_MAX: return "max";
    case MTF_REDUCE_MIN: return "min";
  }
  return "?";
}

#define REDUCE_LOOP(T)                                                                                       \
  do {                                                                                                       \
    T *a = (T *)acc;                                                                                         \
    const T *b = (const T *)in;                                                                              \
    if (op == MTF_REDUCE_SUM)                                                                                \
      for (size_t i = 0; i < count; i++) a[i] += b[i];                                                       \
    else if (op == MTF_REDUCE_MAX)                                                                           \
      for (size_t i = 0; i < count; i++) a[i] = b[i] > a[i] ? b[i] : a[i];                                   \
    else                                                                                                     \
      for (size_t i = 0; i < count; i++) a[i] = b[i] < a[i] ? b[i] : a[i];                                   \
  } while (0)

void mtf_reduce_into(void *acc, const void *in, size_t count, mtf_dtype dtype, mtf_reduce_op op) {
  switch (dtype) {
    case MTF_F32: REDUCE_LOOP(float); break;
    case MTF_F64: REDUCE_LOOP(double); break;
    case MTF_I32: REDUCE_LOOP(int32_t); break;
    case MTF_BF16: /* sums only (mtf_comm refuses the others): in float, rounded back */
      for (size_t i = 0; i < count; i++) {
        uint16_t *a = (uint16_t *)acc;
        const uint16_t *b = (const uint16_t *)in;
        a[i] = mtf_bf16_from_float(mtf_float_from_bf16(a[i]) + mtf_float_from_bf16(b[i]));
      }
      break;
  }
}
