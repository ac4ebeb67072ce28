/* bfloat16 on the CPU (bf16.c): the cast kernel and the two-operand einsum of bfloat16 operands. */
#ifndef MTF_EXEC_CPU_BF16_H
#define MTF_EXEC_CPU_BF16_H

#include "exec/backend.h"

/* How this process multiplies bfloat16 (oneDNN and the ISA it runs, or conversion to fp32 and why), for the
 * run's backend line. The choice is made once: oneDNN's ISA (AMX enabled unless ONEDNN_MAX_CPU_ISA caps it),
 * and MTF_CPU_BF16=convert forces the conversion path. */
const char *mtf_cpu_bf16_path(void);
void mtf_cpu_cast(int threads, const void *in, mtf_dtype from, void *out, mtf_dtype to, int64_t n);
int mtf_cpu_einsum_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a);
/* The float32 two-operand einsum (einsum.c), which the conversion path runs on widened operands. */
int mtf_cpu_einsum_f32(int threads, const mtf_step *st, const float *a, const float *b, float *out, float *scratch);
/* Whether oneDNN runs bfloat16 products on this CPU (not under MTF_CPU_BF16=convert). */
int mtf_cpu_bf16_native(void);
/* c [m, n] (fp32, row-major) = a [m, k] b [k, n] of bfloat16 operands, row-major, or stored transposed ([k, m],
 * [n, k]) where a_transposed, b_transposed: on oneDNN, or widened to fp32 for sgemm on the conversion path. */
int mtf_cpu_bf16_product(int threads, int64_t m, int64_t n, int64_t k, int a_transposed, int b_transposed,
                         const void *a, const void *b, float *c);
void mtf_cpu_register_bf16(mtf_kernel_fn *kernels);

#endif
