/* Position signals of the attention block other than the learned embedding (model.position; internal to
 * src/model). Both are built from ranges and elementwise ops of the public graph API, so every layout
 * lowers them like any other tensor and the decoder's one-token step uses the same functions at its row's
 * position.
 *
 * relative_bias (T5): a learned table [heads, relative_buckets] indexed by the bucket of each (query,
 * memory) pair's relative position r = memory - query, added to the attention logits. With n = -r
 * (how far back the memory is): bidirectional, half of the buckets are for n < 0 (offset num_buckets/2),
 * n = |n| and num_buckets is halved; causal, n = max(n, 0). Then, with max_exact = num_buckets/2,
 * bucket = n if n < max_exact, else min(num_buckets - 1,
 *          max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (num_buckets - max_exact))).
 * The buckets are found in the graph as a count of thresholds passed (bucket(n) = #{j >= 1: n >= t_j},
 * t_j the first distance of bucket j, computed on the host in double), so no float rounding of the log in
 * the graph can move a distance to another bucket.
 *
 * rotary (RoPE, the "rotate half" form): each head's d_kv components are d/2 pairs (i, i + d/2), pair i
 * rotated by the angle position * base^(-2i/d), base 10000:
 *   x' = x * cos(angle) + rotate_half(x) * sin(angle), rotate_half(x) = (-x[d/2:], x[:d/2]),
 * applied to queries and keys (not values), so q' . k' depends on the positions' difference only. */
#ifndef MTF_MODEL_POSITION_H
#define MTF_MODEL_POSITION_H

#include <stdint.h>

#include "mtf.h"

#define MTF_ROTARY_BASE 10000.0

/* The T5 bucket of relative position `relative` (memory - query), in double (the specification above). */
int64_t mtf_relative_bucket(int64_t relative, int bidirectional, int64_t num_buckets, int64_t max_distance);

/* table [heads, relative_buckets] looked up at the buckets of `relative` (a float tensor of memory -
 * query positions, integers with |relative| <= max_relative): [heads, relative's dims]. Differentiable in
 * the table. */
mtf_tensor mtf_relative_bias(mtf_graph *g, mtf_tensor table, mtf_tensor relative, int bidirectional,
                             int64_t num_buckets, int64_t max_distance, int64_t max_relative);

/* x rotated along depth_dim (even size) by `positions` (float, its dims a subset of x's): RoPE above. */
mtf_tensor mtf_rotary(mtf_graph *g, mtf_tensor x, mtf_tensor positions, const char *depth_dim);

#endif
