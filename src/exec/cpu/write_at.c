/* CPU kernel of write_at (ops/write_at.c): out = x with each row's value at its position along the dim.
 * Written in place (out == x, the variable's own storage: lowering decides) it touches only the rows'
 * elements, one per element of the value; otherwise x is copied first. Positions are global: the local part
 * of a split dim starts at st->dim_offset, and a position outside it is another rank's to write. */
#include <stdint.h>
#include <string.h>

#include "exec/cpu/cpu.h"
#include "exec/rows.h"

static int k_write_at(mtf_backend *b, const mtf_step *st, const mtf_kernel_args *a) {
  (void)b;
  const mtf_shape *x = &st->out_shape, *value = &st->in_shape[1], *positions = &st->in_shape[2];
  float *out = a->out;
  if (a->out != a->in[0]) memcpy(out, a->in[0], sizeof(float) * (size_t)mtf_shape_num_elements(x));
  int d = mtf_shape_index_of(x, st->params.along.dim);
  if (d < 0) return MTF_ERR_INVALID;
  int64_t size = x->dims[d].size, stride = mtf_stride_of(x, st->params.along.dim);
  /* The rows: x's other dims, walked in x's order with each operand's stride. */
  int n = 0;
  int64_t extent[MTF_MAX_RANK], xs[MTF_MAX_RANK], vs[MTF_MAX_RANK], ps[MTF_MAX_RANK], index[MTF_MAX_RANK] = {0};
  for (int i = 0; i < x->rank; i++) {
    if (i == d) continue;
    const char *name = x->dims[i].name;
    extent[n] = x->dims[i].size;
    xs[n] = mtf_stride_of(x, name);
    vs[n] = mtf_stride_of(value, name);
    ps[n] = mtf_stride_of(positions, name);
    if (extent[n] == 0) return MTF_OK;
    n++;
  }
  const float *v = a->in[1];
  const int32_t *p = a->in[2];
  int64_t xo = 0, vo = 0, po = 0;
  for (;;) {
    int64_t at = (int64_t)p[po] - st->dim_offset;
    if (at >= 0 && at < size) out[xo + at * stride] = v[vo];
    int i = n - 1; /* the next row: odometer over the rows' dims, offsets kept incrementally */
    for (; i >= 0; i--) {
      xo += xs[i], vo += vs[i], po += ps[i];
      if (++index[i] < extent[i]) break;
      xo -= xs[i] * extent[i], vo -= vs[i] * extent[i], po -= ps[i] * extent[i];
      index[i] = 0;
    }
    if (i < 0) return MTF_OK;
  }
}

void mtf_cpu_register_write_at(mtf_kernel_fn *k) { k[MTF_OP_WRITE_AT] = k_write_at; }
