#include "model/position.h"

#include <math.h>
#include <string.h>

int64_t mtf_relative_bucket(int64_t relative, int bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0, n = -relative;
  if (bidirectional) {
    num_buckets /= 2;
    if (n < 0) bucket += num_buckets;
    n = n < 0 ? -n : n;
  } else if (n < 0) {
    n = 0;
  }
  int64_t max_exact = num_buckets / 2;
  if (max_exact < 1) return bucket; /* one bucket per direction: every distance in it */
  if (n < max_exact) return bucket + n;
  int64_t large = max_exact + (int64_t)floor(log((double)n / (double)max_exact) /
                                             log((double)max_distance / (double)max_exact) *
                                             (double)(num_buckets - max_exact));
  return bucket + (large < num_buckets - 1 ? large : num_buckets - 1);
}

static mtf_tensor scalar(mtf_graph *g, float value) {
  mtf_shape none;
  memset(&none, 0, sizeof none);
  return mtf_constant(g, &none, value);
}

mtf_tensor mtf_relative_bias(mtf_graph *g, mtf_tensor table, mtf_tensor relative, int bidirectional,
                             int64_t num_buckets, int64_t max_distance, int64_t max_relative) {
  mtf_tensor n = mtf_scalar_multiply(g, relative, -1.0f), bucket;
  int64_t half = bidirectional ? num_buckets / 2 : num_buckets;
  if (bidirectional) {
    bucket = mtf_scalar_multiply(g, mtf_less(g, n, scalar(g, 0.0f)), (float)half);
    n = mtf_maximum(g, n, mtf_scalar_multiply(g, n, -1.0f));
  } else {
    n = mtf_maximum(g, n, scalar(g, 0.0f));
    bucket = mtf_scalar_multiply(g, n, 0.0f);
  }
  /* bucket(n) counts the thresholds n has reached: t_j is the first distance (up to max_relative) whose
   * bucket is j; buckets no distance in range reaches add nothing. The sign offset is added above. */
  int64_t previous = 0;
  for (int64_t distance = 1; distance <= max_relative; distance++) {
    int64_t b = mtf_relative_bucket(-distance, 0, half, max_distance);
    for (; previous < b; previous++) bucket = mtf_add(g, bucket, mtf_less_equal(g, scalar(g, (float)distance), n));
  }
  /* Shapes are copied: adding nodes may move the graph's storage. */
  const mtf_shape *table_at = mtf_tensor_shape(g, table), *rel_at = mtf_tensor_shape(g, relative);
  if (!table_at || !rel_at) return mtf_add(g, table, relative);
  mtf_shape table_copy = *table_at, rel_copy = *rel_at;
  const mtf_shape *table_shape = &table_copy, *rel_shape = &rel_copy;
  int bucket_axis = mtf_shape_index_of(table_shape, "relative_buckets");
  if (bucket_axis < 0) return mtf_add(g, table, MTF_NO_TENSOR); /* keeps the graph's error path */
  mtf_tensor one_hot = mtf_one_hot(g, bucket, &table_shape->dims[bucket_axis]);
  mtf_shape out;
  memset(&out, 0, sizeof out);
  for (int d = 0; d < table_shape->rank; d++)
    if (d != bucket_axis) out.dims[out.rank++] = table_shape->dims[d];
  for (int d = 0; d < rel_shape->rank; d++) out.dims[out.rank++] = rel_shape->dims[d];
  return mtf_einsum2(g, table, one_hot, &out);
}

mtf_tensor mtf_rotary(mtf_graph *g, mtf_tensor x, mtf_tensor positions, const char *depth_dim) {
  const mtf_shape *at = mtf_tensor_shape(g, x);
  if (!at) return x;
  mtf_shape copy = *at; /* adding nodes may move the graph's storage */
  const mtf_shape *shape = &copy;
  int axis = mtf_shape_index_of(shape, depth_dim);
  if (axis < 0) return mtf_add(g, x, MTF_NO_TENSOR);
  int64_t d = shape->dims[axis].size, half = d / 2;
  mtf_dim depth = shape->dims[axis], rotated_depth = mtf_dim_make("d_kv_rotated", d);
  mtf_tensor i = mtf_range(g, &depth);
  /* Component i belongs to pair i mod d/2, whose frequency is base^(-2 (i mod d/2) / d). */
  mtf_tensor pair = mtf_subtract(g, i, mtf_scalar_multiply(g, mtf_less_equal(g, scalar(g, (float)half), i),
                                                           (float)half));
  mtf_tensor frequency = mtf_exp(g, mtf_scalar_multiply(g, pair, (float)(-2.0 * log(MTF_ROTARY_BASE) / (double)d)));
  mtf_tensor angle = mtf_multiply(g, positions, frequency);
  /* rotate_half as a [depth, d_kv_rotated] matrix: output i takes -x[i + d/2] (i < d/2) or x[i - d/2]. */
  mtf_tensor j = mtf_range(g, &rotated_depth);
  mtf_tensor from_upper = mtf_equal(g, i, mtf_scalar_add(g, j, (float)half));
  mtf_tensor from_lower = mtf_equal(g, i, mtf_scalar_add(g, j, (float)-half));
  mtf_tensor rotate = mtf_subtract(g, from_lower, from_upper);
  mtf_shape rotated_shape = *shape;
  rotated_shape.dims[axis] = rotated_depth;
  mtf_tensor rotated = mtf_rename(g, mtf_einsum2(g, x, rotate, &rotated_shape), "d_kv_rotated", depth_dim);
  return mtf_add(g, mtf_multiply(g, x, mtf_cos(g, angle)), mtf_multiply(g, rotated, mtf_sin(g, angle)));
}
