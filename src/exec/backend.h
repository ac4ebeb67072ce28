/* The compute backend vtable: the local kernels a plan's steps call, on one rank's slices. Shapes are
 * local (slice) shapes whose dimension names say how operands line up. The CPU backend (cpu/) runs on
 * host memory with OpenBLAS; a CUDA backend implements the same table. */
#ifndef MTF_EXEC_BACKEND_H
#define MTF_EXEC_BACKEND_H

#include <stdint.h>

#include "core/shape.h"

typedef struct mtf_backend_ops {
  const char *name;
  float *(*alloc)(int64_t elements);
  void (*release)(float *p);
  /* out = sum over dims absent from out of the product of the inputs (1 or 2). Returns MTF_OK, or
   * MTF_ERR_NOMEM when scratch space for transposed operands cannot be had. */
  int (*einsum)(int n_in, const mtf_shape *in_shapes, const float *const *in, const mtf_shape *out_shape,
                 float *out);
  void (*reduce_max)(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out);
  void (*broadcast)(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, float *out);
  void (*binary)(int kind, const mtf_shape *a_shape, const float *a, const mtf_shape *b_shape, const float *b,
                 const mtf_shape *out_shape, float *out);
  void (*unary)(int kind, float alpha, float beta, int64_t n, const float *in, float *out);
  void (*fill)(float value, int64_t n, float *out);
  void (*range)(int64_t start, int64_t n, float *out);
  /* out[..., j] = (in[...] == dim_offset + j) along out's dimension dim_index. */
  void (*one_hot)(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, int dim_index,
                  int64_t dim_offset, float *out);
  /* 1 with probability keep, keyed on each element's index in the global tensor. */
  void (*random_keep)(uint64_t seed, uint64_t key, float keep, const mtf_shape *global_shape,
                      const mtf_shape *out_shape, const int64_t *offsets, float *out);
  /* out = in[offsets + i] for every index i of out. */
  void (*slice)(const mtf_shape *in_shape, const float *in, const mtf_shape *out_shape, const int64_t *offsets,
                float *out);
  void (*copy)(int64_t n, const float *in, float *out);
} mtf_backend_ops;

const mtf_backend_ops *mtf_cpu_backend(void);
/* Sets the CPU backend's threads (BLAS) for this process; 0 keeps the current setting. Returns the count. */
int mtf_cpu_set_threads(int threads);

#endif
