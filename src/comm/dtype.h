/* Element types and reductions that collectives and kernels agree on. */
#ifndef MTF_COMM_DTYPE_H
#define MTF_COMM_DTYPE_H

#include <stddef.h>

/* MTF_BF16: bfloat16 (core/bf16.h), the matmul operands of backend.precision bf16; collectives move it and
 * reduce it only by sums (backend.grad_reduce bf16). */
typedef enum mtf_dtype { MTF_F32 = 0, MTF_F64 = 1, MTF_I32 = 2, MTF_BF16 = 3 } mtf_dtype;
typedef enum mtf_reduce_op { MTF_REDUCE_SUM = 0, MTF_REDUCE_MAX = 1, MTF_REDUCE_MIN = 2 } mtf_reduce_op;

size_t mtf_dtype_size(mtf_dtype dtype);
const char *mtf_dtype_name(mtf_dtype dtype);
const char *mtf_reduce_op_name(mtf_reduce_op op);

/* acc[i] = op(acc[i], in[i]) for count elements. */
void mtf_reduce_into(void *acc, const void *in, size_t count, mtf_dtype dtype, mtf_reduce_op op);

#endif
