/* Einsum on the CPU: two operands become a batched matrix product for cblas_sgemm by the decomposition of
 * ops/einsum_dims.h, with packed copies in the step's planned scratch; one operand is a strided sum.
 * bfloat16 operands go to bf16.c. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/cpu/bf16.h"
#include "exec/cpu/cpu.h"
#include "exec/cpu/rowops.h"
#include "ops/einsum_dims.h"

static const float *prepare(int threads, const mtf_shape *shape, const float *data, const mtf_shape *batch,
                            const mtf_shape *outer, const mtf_shape *inner, int packed, float *scratch) {
  if (!packed) return data;
  mtf_shape order = mtf_einsum_concat3(batch, outer, inner);
  mtf_cpu_reduce_into(threads, shape, data, &order, scratch); /* a pure transpose: no dim is summed */
  return scratch;
}

int mtf_cpu_einsum_f32(int threads, const mtf_step *st, const float *a, const float *b, float *out, float *scratch) {
  mtf_einsum_dims d;
  mtf_einsum_dims_make(&st->in_shape[0], &st->in_shape[1], &st->out_shape, &d);
  if (d.scratch_elements > 0 && !scratch) return MTF_ERR_INVALID;
  const mtf_shape *a_shape = &st->in_shape[0], *b_shape = &st->in_shape[1];
  float *part[5] = {NULL, NULL, NULL, NULL, NULL}; /* the scratch parts (no pointer arithmetic on NULL) */
  for (int i = 0; i < 5 && scratch; i++) part[i] = scratch + d.scratch_offset[i];
  if (d.a_summed) { /* sum away dims that only one operand has */
    float *summed = part[0];
    mtf_cpu_reduce_into(threads, a_shape, a, &d.a_kept, summed);
    a = summed;
  }
  if (d.b_summed) {
    float *summed = part[1];
    mtf_cpu_reduce_into(threads, b_shape, b, &d.b_kept, summed);
    b = summed;
  }
  const float *ap = prepare(threads, &d.a_kept, a, &d.batch, &d.m, &d.k, d.a_packed, part[2]);
  const float *bp = prepare(threads, &d.b_kept, b, &d.batch, &d.k, &d.n, d.b_packed, part[3]);
  int ta = d.a_transposed, tb = d.b_transposed;
  int64_t M = d.M, N = d.N, K = d.K;
  float *c = d.c_packed ? part[4] : out;
  /* A product with one row or one column is a matrix-vector product: sgemv streams the matrix once, where
   * OpenBLAS's sgemm packs it first (decoding one token at a time, the weights are such matrices: 5x). */
  if (M == 1 && N == 1) { /* a dot product (a gradient norm, Adafactor's rms): lanes at memory speed, where a one-row
                           * sgemv runs at 1 GFLOP/s, and blocks summed in double, where OpenBLAS's generic kernel
                           * (a CPU its build does not know) lost 1e-4 over 2M terms */
    for (int64_t i = 0; i < d.nb; i++) c[i] = (float)mtf_dot_blocked(ap + i * K, bp + i * K, K);
  } else if (M == 1 || N == 1) {
    for (int64_t i = 0; i < d.nb; i++) {
      const float *A = ap + i * M * K, *B = bp + i * K * N;
      float *C = c + i * M * N;
      if (M == 1) /* c[N] = a[K] . op(B): B is K x N (tb 0) or N x K (tb 1), row-major */
        cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, tb ? (int)N : (int)K, tb ? (int)K : (int)N, 1.0f, B,
                    tb ? (int)K : (int)N, A, 1, 0.0f, C, 1);
      else /* c[M] = op(A) . b[K]: A is M x K (ta 0) or K x M (ta 1) */
        cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, ta ? (int)K : (int)M, ta ? (int)M : (int)K, 1.0f, A,
                    ta ? (int)M : (int)K, B, 1, 0.0f, C, 1);
    }
  } else {
    for (int64_t i = 0; i < d.nb; i++)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                  (int)K, 1.0f, ap + i * M * K, ta ? (int)M : (int)K, bp + i * K * N, tb ? (int)K : (int)N, 0.0f,
                  c + i * M * N, (int)N);
  }
  if (d.c_packed) {
    mtf_shape c_shape = mtf_einsum_concat3(&d.batch, &d.m, &d.n);
    mtf_cpu_reduce_into(threads, &c_shape, c, &st->out_shape, out);
  }
  return MTF_OK;
}

/* float32 operands into a float32 result `out` */
static int float_einsum(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *args, float *out) {
  if (st->n_in == 1) {
    mtf_cpu_reduce_into(be->threads, &st->in_shape[0], args->in[0], &st->out_shape, out);
    return MTF_OK;
  }
  return mtf_cpu_einsum_f32(be->threads, st, args->in[0], args->in[1], out, args->scratch);
}

static int k_einsum(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *args) {
  if (st->n_in == 2 && st->in_dtype[0] == MTF_BF16) return mtf_cpu_einsum_bf16(be, st, args);
  if (st->out_dtype == MTF_BF16) return mtf_cpu_float_then_round(be, st, args, float_einsum);
  return float_einsum(be, st, args, args->out);
}

void mtf_cpu_register_einsum(mtf_kernel_fn *kernels) { kernels[MTF_OP_EINSUM] = k_einsum; }
