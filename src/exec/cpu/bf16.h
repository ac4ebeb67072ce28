/* bfloat16 on the CPU (bf16.c): the cast kernel and the two-operand einsum of bfloat16 operands. */
#ifndef MTF_EXEC_CPU_BF16_H
#define MTF_EXEC_CPU_BF16_H

#include "core/bf16.h"
#include "exec/backend.h"

/* Blocks of bf16-stored activations (lower/storage.c) into float32 and back, for kernels that read or write
 * them with fp32 math; loops that vectorise. */
#define MTF_CPU_BF16_BLOCK 512
static inline void mtf_cpu_widen(const mtf_bf16 *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = mtf_float_from_bf16(in[i]);
}
/* n values `stride` apart (a fused op's row) into out, contiguous */
static inline void mtf_cpu_widen_row(const mtf_bf16 *in, int64_t stride, float *out, int64_t n) {
  if (stride == 1) mtf_cpu_widen(in, out, n);
  else
    for (int64_t i = 0; i < n; i++) out[i] = mtf_float_from_bf16(in[i * stride]);
}
static inline void mtf_cpu_round(const float *in, mtf_bf16 *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = mtf_bf16_from_float(in[i]);
}

/* How this process multiplies bfloat16 (oneDNN and the ISA it runs, or conversion to fp32 and why), for the
 * run's backend line. The choice is made once: oneDNN's ISA (AMX enabled unless ONEDNN_MAX_CPU_ISA caps it),
 * and MTF_CPU_BF16=convert forces the conversion path. */
const char *mtf_cpu_bf16_path(void);
void mtf_cpu_cast(int threads, const void *in, mtf_dtype from, void *out, mtf_dtype to, int64_t n);
int mtf_cpu_einsum_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a);
/* The float32 two-operand einsum (einsum.c), which the conversion path runs on widened operands. */
int mtf_cpu_einsum_f32(int threads, const mtf_step *st, const float *a, const float *b, float *out, float *scratch);
/* c [m, n] (fp32, row-major) = a [m, k] b [k, n] of bfloat16 operands, row-major, or stored transposed ([k, m],
 * [n, k]) where a_transposed, b_transposed: on oneDNN, or widened to fp32 for sgemm on the conversion path. */
int mtf_cpu_bf16_product(int threads, int64_t m, int64_t n, int64_t k, int a_transposed, int b_transposed,
                         const void *a, const void *b, float *c);
/* Sums over k of at least twice this many terms into a float32 result run slice by slice (MTF_CPU_BF16_K_SLICE,
 * 2048; 0: never); returns the setting before. For tests, which slice small products. */
#define MTF_CPU_BF16_K_SLICE 2048
int64_t mtf_cpu_bf16_set_k_slice(int64_t k_slice);
/* The same for `batch` problems, problem i at a + i a_step, b + i b_step, c + i c_step (elements; the rows
 * within a problem as above): one oneDNN call for all of them. */
int mtf_cpu_bf16_product_batch(int threads, int64_t batch, int64_t m, int64_t n, int64_t k, int a_transposed,
                               int b_transposed, const void *a, int64_t a_step, const void *b, int64_t b_step, float *c,
                               int64_t c_step);
/* A kernel whose step writes a bfloat16 value (out_dtype, a bf16-stored activation) through a float32 result:
 * `compute` writes the float32 value into out (a temporary), which is then rounded into a->out. For the
 * paths that have no bfloat16 writer of their own. */
int mtf_cpu_float_then_round(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a,
                             int (*compute)(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a, float *out));
void mtf_cpu_register_bf16(mtf_kernel_fn *kernels);

#endif
