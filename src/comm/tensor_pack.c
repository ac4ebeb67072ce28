#include "comm/tensor_pack.h"

#include <string.h>

int64_t mtf_dims_count(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* Both directions are the same strided copy with the roles of the two layouts swapped. */
static void move_blocks(const char *in, char *out, size_t elem_size, int64_t outer, int64_t len, int64_t inner,
                        int parts, int to_blocks) {
  size_t row = (size_t)(len * inner) * elem_size; /* one [len][inner] run */
  for (int p = 0; p < parts; p++)
    for (int64_t o = 0; o < outer; o++) {
      size_t in_tensor = ((size_t)o * (size_t)parts + (size_t)p) * row;  /* [outer][parts*len][inner] */
      size_t in_blocks = ((size_t)p * (size_t)outer + (size_t)o) * row;  /* [parts][outer][len][inner] */
      if (to_blocks)
        memcpy(out + in_blocks, in + in_tensor, row);
      else
        memcpy(out + in_tensor, in + in_blocks, row);
    }
}

static void outer_inner(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *inner) {
  *outer = mtf_dims_count(axis, dims);
  *inner = mtf_dims_count(rank - axis - 1, dims + axis + 1);
}

void mtf_pack_split(const void *in, void *out, size_t elem_size, int rank, const int64_t *dims, int axis,
                    int parts) {
  int64_t outer, inner;
  outer_inner(rank, dims, axis, &outer, &inner);
  move_blocks(in, out, elem_size, outer, dims[axis] / parts, inner, parts, 1);
}

void mtf_pack_concat(const void *in, void *out, size_t elem_size, int rank, const int64_t *dims, int axis,
                     int parts) {
  int64_t outer, inner;
  outer_inner(rank, dims, axis, &outer, &inner);
  move_blocks(in, out, elem_size, outer, dims[axis], inner, parts, 0);
}
