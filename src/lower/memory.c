/* The memory planner: arena buffers whose lifetimes [first write, last read] overlap get disjoint ranges;
 * others may share. Greedy best-known heuristic: place the largest first, each at the lowest offset that
 * does not collide with an already placed buffer alive at the same time. */
#include <stdlib.h>

#include "lower/plan.h"

typedef struct placed {
  int64_t begin, end;
  int first, last;
} placed;

static const mtf_plan *sort_plan;

static int larger_first(const void *a, const void *b) {
  int64_t ea = sort_plan->buffers[*(const int *)a].elements, eb = sort_plan->buffers[*(const int *)b].elements;
  if (ea != eb) return ea > eb ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

static int cmp_begin(const void *a, const void *b) {
  int64_t x = ((const placed *)a)->begin, y = ((const placed *)b)->begin;
  return x < y ? -1 : x > y;
}

int64_t mtf_plan_assign_memory(mtf_plan *plan) {
  int *order = malloc(sizeof(int) * ((size_t)plan->n_buffers + 1));
  placed *done = malloc(sizeof(placed) * ((size_t)plan->n_buffers + 1));
  placed *overlapping = malloc(sizeof(placed) * ((size_t)plan->n_buffers + 1));
  if (!order || !done || !overlapping) {
    free(order);
    free(done);
    free(overlapping);
    return -1;
  }
  int n = 0, n_done = 0;
  for (int b = 0; b < plan->n_buffers; b++)
    if (plan->buffers[b].kind == MTF_BUF_ARENA) order[n++] = b;
  sort_plan = plan;
  qsort(order, (size_t)n, sizeof(int), larger_first);
  int64_t arena = 0;
  for (int i = 0; i < n; i++) {
    mtf_buffer *buf = &plan->buffers[order[i]];
    if (buf->last_step < buf->first_step) buf->last_step = buf->first_step; /* written, never read */
    int k = 0;
    for (int j = 0; j < n_done; j++)
      if (done[j].first <= buf->last_step && buf->first_step <= done[j].last) overlapping[k++] = done[j];
    qsort(overlapping, (size_t)k, sizeof(placed), cmp_begin);
    int64_t offset = 0;
    for (int j = 0; j < k; j++) {
      if (offset + buf->elements <= overlapping[j].begin) break;
      if (overlapping[j].end > offset) offset = overlapping[j].end;
    }
    buf->offset = offset;
    done[n_done++] = (placed){offset, offset + buf->elements, buf->first_step, buf->last_step};
    if (offset + buf->elements > arena) arena = offset + buf->elements;
  }
  free(order);
  free(done);
  free(overlapping);
  return arena;
}
