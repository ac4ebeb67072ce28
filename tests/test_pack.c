/* Axis split/concat packing used by the tensor collectives, against element-by-element index arithmetic. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "comm/tensor_pack.h"

static int64_t flat_index(int rank, const int64_t *dims, const int64_t *index) {
  int64_t flat = 0;
  for (int d = 0; d < rank; d++) flat = flat * dims[d] + index[d];
  return flat;
}

static void unflatten(int rank, const int64_t *dims, int64_t flat, int64_t *index) {
  for (int d = rank - 1; d >= 0; d--) {
    index[d] = flat % dims[d];
    flat /= dims[d];
  }
}

static void test_case(int rank, const int64_t *dims, int axis, int parts) {
  int64_t n = mtf_dims_count(rank, dims);
  int32_t *in = malloc(sizeof(int32_t) * (size_t)n), *blocks = malloc(sizeof(int32_t) * (size_t)n),
          *back = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) in[i] = (int32_t)(i * 7 + 3);
  mtf_pack_split(in, blocks, sizeof(int32_t), rank, dims, axis, parts);

  int64_t block_dims[8];
  memcpy(block_dims, dims, sizeof(int64_t) * (size_t)rank);
  block_dims[axis] /= parts;
  int64_t block_n = n / parts;
  int wrong = 0;
  for (int p = 0; p < parts; p++)
    for (int64_t e = 0; e < block_n; e++) {
      int64_t index[8];
      unflatten(rank, block_dims, e, index);
      index[axis] += p * block_dims[axis];
      wrong += blocks[p * block_n + e] != in[flat_index(rank, dims, index)];
    }
  CHECK(wrong == 0);
  mtf_pack_concat(blocks, back, sizeof(int32_t), rank, block_dims, axis, parts);
  CHECK(memcmp(back, in, sizeof(int32_t) * (size_t)n) == 0);
  free(in);
  free(blocks);
  free(back);
}

int main(void) {
  int64_t d1[1] = {12}, d3[3] = {4, 6, 10}, d4[4] = {2, 3, 4, 5};
  test_case(1, d1, 0, 1);
  test_case(1, d1, 0, 4);
  for (int axis = 0; axis < 3; axis++) test_case(3, d3, axis, 2);
  test_case(3, d3, 2, 5);
  test_case(3, d3, 1, 3);
  for (int axis = 0; axis < 4; axis++) test_case(4, d4, axis, (int)d4[axis]);
  return check_summary();
}
