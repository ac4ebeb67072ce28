/* The CPU kernels of fused causal attention (forward, backward) and of take (exec/cpu/attention.c). */
#ifndef MTF_EXEC_CPU_ATTENTION_H
#define MTF_EXEC_CPU_ATTENTION_H

#include "exec/backend.h"
#include "ops/attention.h"

/* One step's attention problems: geometry, dropout mask, length L and depth D, where its inputs are, and its
 * bias and segment ids (NULL where the op has none; float32: the ops never read them as bfloat16). */
typedef struct mtf_cpu_attention_problem {
  mtf_attention_geometry geo;
  mtf_attention_mask mask;
  int dropout, causal;
  int64_t L, D;
  mtf_attention_inputs in;
  const float *bias, *segments;
  mtf_attention_view bias_view, segments_view;
} mtf_cpu_attention_problem;

mtf_cpu_attention_problem mtf_cpu_attention_problem_of(const mtf_step *st, const mtf_kernel_args *a);

/* Where a step's operands live: q, k (v alike), F = [o | lse] (the forward step's output, the backward steps'
 * input `in.forward`), and for the backward step dF = [dO | dlse] and its output G = [dq | dk | dv]. */
typedef struct mtf_cpu_attention_views {
  mtf_attention_view q, k, f[2], d[2], g[3];
} mtf_cpu_attention_views;

mtf_cpu_attention_views mtf_cpu_attention_views_of(const mtf_step *st, const mtf_cpu_attention_problem *p);
/* row[j] *= the dropout factor of weight (i, j0 + j), j < n (base: mtf_attention_mask_base of the problem). */
void mtf_cpu_attention_drop_row(const mtf_cpu_attention_problem *p, uint64_t base, int64_t i, int64_t j0, int64_t n,
                                float *row);
/* Scores row[0 .. n) of query row i against memory rows j0 .. j0 + n of problem b, scaled: plus the bias,
 * MTF_ATTENTION_MASKED where the segment ids differ (nothing when the op has neither). */
void mtf_cpu_attention_adjust_row(const mtf_cpu_attention_problem *p, int64_t b, int64_t i, int64_t j0, int64_t n,
                                  float *row);
/* The bfloat16 path (attention_bf16.c), for steps with params.attention.bf16. */
int mtf_cpu_attention_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a);
int mtf_cpu_attention_grad_bf16(mtf_backend *be, const mtf_step *st, const mtf_kernel_args *a);

void mtf_cpu_register_attention(mtf_kernel_fn *kernels);

#endif
