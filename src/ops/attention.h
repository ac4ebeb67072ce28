/* Where fused causal attention's operands live in memory, shared by the op's reference and scratch rule
 * (ops/attention.c) and the backends' kernels. Tensors may order their dims freely: every dim other than
 * the positions (query dim in q, o, the stacked outputs; memory dim in k, v) and the features (depth) is a
 * "batch" dim, walked in q's order; a view gives each tensor's strides for those, its position stride, its
 * feature stride and, for the stacked tensors ([_attn:2, ...] = o, logsumexp; [_attn_grad:3, ...] = dq,
 * dk, dv), the offset of one slice of the stack. */
#ifndef MTF_OPS_ATTENTION_H
#define MTF_OPS_ATTENTION_H

#include <math.h>

#include "core/host_device.h"
#include "core/shape.h"

#define MTF_ATTENTION_STACK "_attn"      /* forward: index 0 o, index 1 the row's logsumexp (along depth) */
#define MTF_ATTENTION_GRAD_STACK "_attn_grad" /* backward: 0 dq, 1 dk, 2 dv (dk, dv by memory position) */
#define MTF_ATTENTION_TILE 64            /* query rows x memory rows per block of the kernels */

typedef struct mtf_attention_geometry {
  mtf_shape batch;       /* q's dims other than the query dim and depth, in q's order */
  int64_t count;         /* elements of batch: independent attention problems */
  int64_t length, depth; /* positions (query = memory) and features */
} mtf_attention_geometry;

typedef struct mtf_attention_view {
  int64_t batch_stride[MTF_MAX_RANK]; /* stride of geometry.batch's dim i in this tensor */
  int64_t pos_stride, depth_stride, offset;
} mtf_attention_view;

void mtf_attention_geometry_make(const mtf_shape *q, const char *query_dim, const char *depth_dim,
                                 mtf_attention_geometry *geo);
/* The view of a tensor of shape s whose positions are along pos_dim; with `stack`, of its slice `index`
 * along that dim (NULL: not stacked). */
mtf_attention_view mtf_attention_view_make(const mtf_attention_geometry *geo, const mtf_shape *s, const char *pos_dim,
                                           const char *depth_dim, const char *stack, int index);
/* Offset of problem b's element (position 0, feature 0). */
int64_t mtf_attention_base(const mtf_attention_geometry *geo, const mtf_attention_view *v, int64_t b);

/* The optional inputs (params.attention.bias, .segments) follow q, k, v; the backward ops then take the
 * forward value F and its gradient dF:
 *   attention            q, k, v [, bias] [, segments]
 *   attention_grad       q, k, v [, bias] [, segments], F, dF   -> [_attn_grad:3, q dims]
 *   attention_bias_grad  the same inputs                        -> d bias, at the bias's shape
 * The bias is added to the scaled scores: its dims are the query and memory dims and any of q's batch dims
 * (broadcast over the others); its view (mtf_attention_bias_view) has the query stride in pos_stride and the
 * memory stride in depth_stride. Segments hold one id per query position (a batch dim subset and the query
 * dim; the memory's ids are the same ids: self-attention); a visible pair whose ids differ gets the score
 * MTF_ATTENTION_MASKED, as the general path's masked_fill does, so the softmax gives it weight 0 (and the
 * diagonal, always in its own segment, keeps every row's maximum finite). */
#define MTF_ATTENTION_MASKED (-1e9f)

/* Memory positions query row i sees (params.attention.causal: those up to i; else all), and the pairs of a
 * problem's score matrix that are computed. */
static inline MTF_HOST_DEVICE int64_t mtf_attention_visible(int causal, int64_t i, int64_t length) {
  return causal ? i + 1 : length;
}
static inline int64_t mtf_attention_pairs(int causal, int64_t length) {
  return causal ? length * (length + 1) / 2 : length * length;
}

typedef struct mtf_attention_inputs {
  int bias, segments, forward, forward_grad; /* input indices, -1 where absent */
} mtf_attention_inputs;

mtf_attention_inputs mtf_attention_inputs_of(int has_bias, int has_segments, int backward);
mtf_attention_view mtf_attention_bias_view(const mtf_attention_geometry *geo, const mtf_shape *bias,
                                           const char *query_dim, const char *memory_dim);
mtf_attention_view mtf_attention_segments_view(const mtf_attention_geometry *geo, const mtf_shape *segments,
                                               const char *query_dim);

/* Dropout of the attention weights: the mask mtf_dropout(weights, 1 - keep, key) would draw, over the
 * weights of the general path, [batch dims (q's order), query, memory], from global indices, so it is the
 * same on every layout: weight (i, j) of problem b is kept when
 *   mtf_uniform01(seed, key, mtf_attention_mask_base(b) + i * length + j) < keep, and then scaled by 1 / keep. */
typedef struct mtf_attention_mask {
  uint64_t seed, key; /* key: with the run's offset mixed in (mtf_run_key) */
  float keep, scale;
  int64_t global_size[MTF_MAX_RANK], offset[MTF_MAX_RANK]; /* per batch dim: whole size, this slice's start */
} mtf_attention_mask;

/* From a step's output shape, global dims and offsets (NULL, NULL: whole tensors, as the reference sees them
 * unless given a slice's). */
void mtf_attention_mask_make(const mtf_attention_geometry *geo, const mtf_shape *out_shape, const int64_t *global_dims,
                             const int64_t *offsets, uint64_t seed, uint64_t key, float keep, mtf_attention_mask *mask);
uint64_t mtf_attention_mask_base(const mtf_attention_geometry *geo, const mtf_attention_mask *mask, int64_t b);

/* Scratch of one kernel step (elements), laid out by the kernels as
 *   forward:  q, k, v packed [length, depth] | accumulator [TILE, depth] | scores [TILE, TILE]
 *   backward: q, k, v, do, dq, dk, dv packed [length, depth] | lse, delta [length] | p, dp, p dropped
 *             [TILE, TILE] */
int64_t mtf_attention_scratch_forward(int64_t length, int64_t depth);
int64_t mtf_attention_scratch_backward(int64_t length, int64_t depth);

/* The bfloat16 path (params.attention.bf16 on a backend with bf16 products): blocks of R =
 * mtf_attention_block_rows(length) query rows against every memory row they may see, for a group of G =
 * mtf_attention_bf16_group(count, length) of the step's count problems at once (one product call per block
 * for the whole group; G R length stays within MTF_ATTENTION_BF16_GROUP_WORDS, a core's L2). Scratch words
 * (bf16 arrays take half a word per value, rounded up), laid out by the kernels as
 *   forward:  q block-major, k, v, k's and v's prefix bf16 [G, length, depth] | scores [G, R, length] |
 *             weights bf16 [G, R, length] | o [G, R, depth]
 *   backward: q, k, v, k's and v's prefix, do bf16 [G, length, depth] (q, do block-major) | dq (block-major),
 *             dk, dv, product [G, length, depth] | lse, delta [G, length] | p, p dropped, dp [G, R, length] |
 *             p dropped, ds bf16 [G, R, length] */
#define MTF_ATTENTION_BF16_ROWS 128
#define MTF_ATTENTION_BF16_GROUP_WORDS ((int64_t)1 << 17)
int64_t mtf_attention_block_rows(int64_t length);
int64_t mtf_attention_bf16_group(int64_t count, int64_t length);
int64_t mtf_attention_scratch_forward_bf16(int64_t count, int64_t length, int64_t depth);
int64_t mtf_attention_scratch_backward_bf16(int64_t count, int64_t length, int64_t depth);

/* One query row of a score tile in the kernels' online softmax: `row` holds the scaled scores, the first n
 * visible (causal); they become exp(score - running max), the rest up to `width` zeros; the row's running
 * max *m and sum *l (of the weights before dropout) take the tile in. Returns the factor, exp(old max - new
 * max), by which the row's accumulated output must be scaled (0 on the first tile, where *m = -inf). */
static inline MTF_HOST_DEVICE float mtf_attention_online_softmax_row(float *row, int64_t n, int64_t width, float *m,
                                                                     double *l) {
  float max = *m;
  for (int64_t c = 0; c < n; c++) max = row[c] > max ? row[c] : max;
  float correction = expf(*m - max);
  double sum = 0.0;
  for (int64_t c = 0; c < n; c++) sum += (row[c] = expf(row[c] - max));
  for (int64_t c = n; c < width; c++) row[c] = 0.0f;
  *l = *l * correction + sum;
  *m = max;
  return correction;
}

#endif
