/* CUDA kernel of write_at (ops/write_at.c): out = x with each row's value at its position along the dim.
 * In place (out == x: lowering decides) it touches only the rows' elements, one thread per row; otherwise x
 * is copied first (device to device, on the compute stream). Positions are global int32: the local part of
 * a split dim starts at st->dim_offset, and a position outside it is another rank's to write. */
#include "exec/cuda/k_common.h"
#include "exec/cuda/k_kernels.h"

MTF_CUDA_BEGIN

/* The rows: x's dims but the written one, each with x's, the value's and the positions' stride. */
typedef struct write_rows {
  int n;
  int64_t extent[MTF_MAX_RANK], xs[MTF_MAX_RANK], vs[MTF_MAX_RANK], ps[MTF_MAX_RANK];
  int64_t size, stride, dim_offset, count;
} write_rows;

__global__ void k_write_at_kernel(write_rows w, const float *value, const int32_t *positions, float *out) {
  MTF_GRID_STRIDE(row, w.count) {
    int64_t rest = row, xo = 0, vo = 0, po = 0;
    for (int i = w.n - 1; i >= 0; i--) {
      int64_t idx = rest % w.extent[i];
      rest /= w.extent[i];
      xo += idx * w.xs[i];
      vo += idx * w.vs[i];
      po += idx * w.ps[i];
    }
    int64_t at = (int64_t)positions[po] - w.dim_offset;
    if (at >= 0 && at < w.size) out[xo + at * w.stride] = value[vo];
  }
}

static int k_write_at(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  const mtf_shape *x = &st->out_shape, *value = &st->in_shape[1], *positions = &st->in_shape[2];
  int d = mtf_shape_index_of(x, st->params.along.dim);
  if (d < 0) return mtf_cuda_refuse(b, "write_at: the output has no dim '%s'", st->params.along.dim);
  if (a->out != a->in[0])
    MTF_CUDA_CHECK(b, cudaMemcpyAsync(a->out, a->in[0], sizeof(float) * (size_t)mtf_shape_num_elements(x),
                                      cudaMemcpyDeviceToDevice, K_STREAM(b)));
  write_rows w;
  memset(&w, 0, sizeof w);
  w.size = x->dims[d].size;
  w.stride = mtf_stride_of(x, st->params.along.dim);
  w.dim_offset = st->dim_offset;
  w.count = 1;
  for (int i = 0; i < x->rank; i++) {
    if (i == d) continue;
    const char *name = x->dims[i].name;
    w.extent[w.n] = x->dims[i].size;
    w.xs[w.n] = mtf_stride_of(x, name);
    w.vs[w.n] = mtf_stride_of(value, name);
    w.ps[w.n] = mtf_stride_of(positions, name);
    w.count *= x->dims[i].size;
    w.n++;
  }
  if (w.count == 0) return MTF_OK;
  MTF_LAUNCH(k_write_at_kernel, mtf_cuda_blocks(w.count, K_THREADS), K_THREADS, 0, K_STREAM(b), w,
             (const float *)a->in[1], (const int32_t *)a->in[2], (float *)a->out);
  K_DONE(b, "write_at");
}

void mtf_cuda_register_write_at(mtf_kernel_fn *k) { k[MTF_OP_WRITE_AT] = k_write_at; }

MTF_CUDA_END
