/* Which values a plan stores as bfloat16 (mtf_plan_options.bf16_storage, which the run layer sets where the
 * backend's kernels read and write bfloat16 activations). Under the bf16 policy every product's operands are
 * casts to bfloat16; a cast reading a float32 value is a pass over memory, and the float32 value itself is
 * twice the bytes of what the products need. So a float32 value is stored as bfloat16 when
 *   - its node was built under the bf16 policy (mtf_node.bf16_policy: the model's forward ops and their
 *     gradients; never the optimizer, the loss's reductions or anything of an fp32 run),
 *   - its op's kernels write bfloat16 (op table: bf16_output),
 *   - every reader in the plan reads it as bfloat16: a cast to bfloat16 (which then aliases it: no step), an
 *     op under the policy whose kernels read that input as bfloat16 (op table: reads_bf16), or a reshape (a
 *     rename: the same bytes under other dim names, resharded by dtype-blind steps where layouts differ) all
 *     of whose own readers do (attention's keys and values are renamed from length to memory_length),
 *   - and it is not fetched, assigned or a source.
 * Lowering may still keep one float32 (mtf_lw_keep_float): a value left as partial sums is summed in fp32. */
#include <stdlib.h>

#include "lower/lower_internal.h"
#include "ops/op_def.h"

static int reads_bf16(const mtf_node *reader, int k) {
  if (reader->kind == MTF_OP_CAST) return reader->params.cast.to == MTF_BF16;
  const mtf_op_def *def = mtf_op(reader->kind);
  return reader->bf16_policy && def->reads_bf16 && def->reads_bf16(reader, k);
}

int mtf_lw_choose_dtypes(mtf_lowering *lw, int bf16_storage, int n_fetches, const int *fetches) {
  const mtf_graph *g = lw->g;
  int count = g->n_nodes;
  lw->dtype = malloc(sizeof(mtf_dtype) * ((size_t)count + 1));
  if (!lw->dtype) return mtf_error_set(lw->err, MTF_ERR_NOMEM, "plan: out of memory");
  for (int i = 0; i < count; i++) lw->dtype[i] = g->nodes[i].dtype;
  if (!bf16_storage) return MTF_OK;
  /* readers[i]: 1 while every reader so far reads node i as bfloat16, 2 once one does not; 0 unread */
  unsigned char *readers = calloc((size_t)count + 1, 1);
  if (!readers) return mtf_error_set(lw->err, MTF_ERR_NOMEM, "plan: out of memory");
  const char *needed = (const char *)lw->plan->needed;
  for (int i = 0; i < count; i++) {
    if (!needed[i]) continue;
    const mtf_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++) {
      int x = n->inputs[k];
      if (n->kind == MTF_OP_RESHAPE) continue; /* below, from the reshape's own readers */
      if (!reads_bf16(n, k)) readers[x] = 2;
      else if (readers[x] == 0) readers[x] = 1;
    }
  }
  for (int f = 0; f < n_fetches; f++) readers[fetches[f]] = 2;
  for (int a = lw->first_assign; a < lw->end_assign; a++) {
    readers[g->assigns[a].value] = 2;
    readers[g->assigns[a].variable] = 2;
  }
  /* A reshape reads its input as its own readers do; later nodes first, so chains of reshapes resolve. */
  for (int i = count - 1; i >= 0; i--) {
    const mtf_node *n = &g->nodes[i];
    if (!needed[i] || n->kind != MTF_OP_RESHAPE) continue;
    int x = n->inputs[0];
    if (readers[i] != 1 || !n->bf16_policy) readers[x] = 2;
    else if (readers[x] == 0) readers[x] = 1;
  }
  for (int i = 0; i < count; i++) {
    const mtf_node *n = &g->nodes[i];
    if (needed[i] && readers[i] == 1 && n->dtype == MTF_F32 && n->bf16_policy && mtf_op(n->kind)->bf16_output)
      lw->dtype[i] = MTF_BF16;
    if (needed[i] && n->kind == MTF_OP_RESHAPE && lw->dtype[n->inputs[0]] == MTF_BF16 && n->dtype == MTF_F32)
      lw->dtype[i] = MTF_BF16; /* the same bytes as its input (inputs come first: already decided) */
  }
  for (int i = 0; i < count; i++) lw->plan->stats.bf16_values += lw->dtype[i] == MTF_BF16 && g->nodes[i].dtype == MTF_F32;
  free(readers);
  return MTF_OK;
}

void mtf_lw_keep_float(mtf_lowering *lw, int node) {
  if (lw->dtype[node] != MTF_BF16 || lw->g->nodes[node].dtype != MTF_F32) return;
  lw->dtype[node] = MTF_F32;
  lw->plan->stats.bf16_values--;
}

mtf_dtype mtf_lowering_dtype(const mtf_lowering *lw, int node) { return lw->dtype[node]; }
