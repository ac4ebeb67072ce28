/* Gradient reduction overlapped with the backward pass (plan.h: mtf_plan_bucket_allreduces).
 *
 * Data parallelism leaves every weight gradient as partial sums over the batch axes, and lowering defers
 * each allreduce to the first reader of the sum, which is the optimizer: so without this pass all of them
 * are blocking calls after the whole backward pass. This pass starts them early instead, in buckets, and
 * waits for them only where the optimizer needs them.
 *
 * Which allreduces qualify. A candidate is an in-place sum-allreduce of an f32 arena buffer, the only
 * allreduce of that buffer, holding a tensor with the shape of a variable (a weight gradient; activations
 * carry batch or sequence dims). Its window is (w, r): w is the last step before it that touches the buffer
 * (the step that finished the partial sums), r the first step after it (the first reader of the sum, or
 * the end of the run for a fetch). The end of the backward pass is taken as the point E that the most
 * candidate bytes straddle (w < E <= r); the candidates that straddle it qualify. Their partial sums are
 * all complete before E and read only from E on, so any of them can share one collective. Every other
 * allreduce (activations in model parallelism, statistics of norms, optimizer-internal sums) stays
 * blocking where lowering put it.
 *
 * Buckets. Qualifying allreduces over the same axes are taken in the order their windows open (the order
 * in which the backward pass completes the gradients) and packed into buckets of at most bucket_bytes (a
 * larger gradient gets one of its own). A bucket's START goes right after the step that completes its last
 * member, its WAIT right before the first reader of any member, and the members' own allreduce steps go.
 * The members lie one after another in the bucket's range buffer, so one collective sums them all with no
 * copies: the memory planner places the range, alive from the first member's write to the last read of
 * any member, and the members inside it. Every rank lowers the same graph under the same layout, so all
 * build the same buckets and start them in the same order, as MPI requires. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lower/plan.h"

typedef struct candidate {
  int step, buffer;
  int open, close; /* w and r above */
  int bucket;
} candidate;

static int has_variable_shape(const mtf_graph *g, const mtf_shape *shape) {
  for (int i = 0; i < g->n_variables; i++)
    if (mtf_shape_equal(&g->nodes[g->variables[i]].shape, shape)) return 1;
  return 0;
}

/* The buffers a step reads or writes (at most MTF_MAX_OP_INPUTS + 2). */
static int touched(const mtf_step *s, int *buffers) {
  int n = 0;
  buffers[n++] = s->out;
  for (int k = 0; k < s->n_in; k++) buffers[n++] = s->in[k];
  if (s->scratch >= 0) buffers[n++] = s->scratch;
  return n;
}

/* Sum-allreduces of whole weight gradients, with their windows. */
static int find_candidates(const mtf_plan *p, candidate *out, int *reductions, int *seen) {
  int n = 0;
  for (int b = 0; b < p->n_buffers; b++) reductions[b] = 0;
  for (int i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == MTF_STEP_ALLREDUCE) reductions[p->steps[i].out]++;
  for (int i = 0; i < p->n_steps; i++) {
    const mtf_step *s = &p->steps[i];
    if (s->kind != MTF_STEP_ALLREDUCE || s->reduce_op != MTF_REDUCE_SUM || s->in[0] != s->out) continue;
    const mtf_buffer *b = &p->buffers[s->out];
    if (b->kind != MTF_BUF_ARENA || b->dtype != MTF_F32 || reductions[s->out] != 1 || b->elements <= 0) continue;
    if (!has_variable_shape(p->graph, &p->graph->nodes[b->node].shape)) continue;
    out[n++] = (candidate){.step = i, .buffer = s->out, .open = -1, .close = p->n_steps, .bucket = -1};
  }
  /* The windows: the last touch before each candidate, then the first touch after it. */
  for (int b = 0; b < p->n_buffers; b++) seen[b] = -1;
  for (int i = 0, c = 0; i < p->n_steps; i++) {
    if (c < n && out[c].step == i) out[c++].open = seen[p->steps[i].out];
    int list[MTF_MAX_OP_INPUTS + 2], k = touched(&p->steps[i], list);
    while (k--) seen[list[k]] = i;
  }
  for (int b = 0; b < p->n_buffers; b++) seen[b] = p->n_steps;
  for (int i = p->n_steps - 1, c = n - 1; i >= 0; i--) {
    if (c >= 0 && out[c].step == i) out[c--].close = seen[p->steps[i].out];
    int list[MTF_MAX_OP_INPUTS + 2], k = touched(&p->steps[i], list);
    while (k--) seen[list[k]] = i;
  }
  int kept = 0;
  for (int c = 0; c < n; c++)
    if (out[c].open >= 0) out[kept++] = out[c];
  return kept;
}

/* The point E that the most candidate elements straddle (the earliest of equals); -1 when none does. */
static int backward_end(const mtf_plan *p, const candidate *c, int n) {
  int64_t *delta = calloc((size_t)p->n_steps + 2, sizeof(int64_t));
  if (!delta) return -2;
  for (int i = 0; i < n; i++) {
    int64_t elements = p->buffers[c[i].buffer].elements;
    delta[c[i].open + 1] += elements;
    delta[c[i].close + 1] -= elements;
  }
  int64_t running = 0, best = 0;
  int at = -1;
  for (int e = 0; e <= p->n_steps; e++) {
    running += delta[e];
    if (running > best) {
      best = running;
      at = e;
    }
  }
  free(delta);
  return at;
}

static int by_open(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->open != y->open) return x->open < y->open ? -1 : 1;
  return x->step - y->step;
}

static int add_range_buffer(mtf_plan *p, int64_t elements, int node, mtf_dtype dtype) {
  if (p->n_buffers + 1 > p->cap_buffers) {
    int cap = p->cap_buffers ? 2 * p->cap_buffers : 64;
    mtf_buffer *grown = realloc(p->buffers, sizeof(mtf_buffer) * (size_t)cap);
    if (!grown) return -1;
    p->buffers = grown;
    p->cap_buffers = cap;
  }
  mtf_buffer *b = &p->buffers[p->n_buffers];
  memset(b, 0, sizeof *b);
  b->kind = MTF_BUF_ARENA;
  b->dtype = dtype;
  b->elements = elements;
  b->first_step = INT_MAX;
  b->last_step = -1;
  b->node = node;
  return p->n_buffers++;
}

static mtf_step bucket_step(const mtf_plan *p, mtf_step_kind kind, int k) {
  const mtf_bucket *bk = &p->buckets[k];
  mtf_step s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.node = p->buffers[bk->buffer].node;
  s.out = s.in[0] = bk->buffer;
  s.n_in = 1;
  s.out_dtype = s.in_dtype[0] = MTF_F32;
  mtf_shape_append(&s.out_shape, "bucket", bk->elements, NULL);
  s.in_shape[0] = s.out_shape;
  s.scratch = bk->staging;
  s.axes = bk->axes;
  s.reduce_op = MTF_REDUCE_SUM;
  s.bucket = k;
  return s;
}

/* Packs the qualifying candidates (sorted by open) into buckets; returns how many, or -1 (no memory).
 * start_gap / wait_gap: the new steps go before old step `gap` (n_steps: at the end). */
static int make_buckets(mtf_plan *p, candidate *q, int n, int64_t cap_elements, mtf_dtype wire, int *start_gap,
                        int *wait_gap) {
  int open_bucket[1u << MTF_MAX_MESH_AXES];
  for (unsigned a = 0; a < (1u << MTF_MAX_MESH_AXES); a++) open_bucket[a] = -1;
  p->buckets = calloc((size_t)n + 1, sizeof(mtf_bucket));
  if (!p->buckets) return -1;
  int nb = 0;
  for (int i = 0; i < n; i++) {
    const mtf_step *s = &p->steps[q[i].step];
    int64_t elements = p->buffers[q[i].buffer].elements;
    int k = open_bucket[s->axes];
    if (k >= 0 && p->buckets[k].elements + elements > cap_elements) k = -1;
    if (k < 0) {
      k = open_bucket[s->axes] = nb++;
      p->buckets[k] = (mtf_bucket){.buffer = -1, .staging = -1, .axes = s->axes};
      start_gap[k] = 0;
      wait_gap[k] = p->n_steps;
    }
    mtf_bucket *bk = &p->buckets[k];
    mtf_buffer *member = &p->buffers[q[i].buffer];
    member->bucket = k + 1;
    member->bucket_offset = bk->elements;
    bk->elements += elements;
    bk->n_members++;
    q[i].bucket = k;
    if (q[i].open + 1 > start_gap[k]) start_gap[k] = q[i].open + 1;
    if (q[i].close < wait_gap[k]) wait_gap[k] = q[i].close;
  }
  p->n_buckets = nb;
  for (int k = 0; k < nb; k++) {
    int first_member = -1;
    for (int i = 0; i < n && first_member < 0; i++)
      if (q[i].bucket == k) first_member = q[i].buffer;
    p->buckets[k].buffer = add_range_buffer(p, p->buckets[k].elements, p->buffers[first_member].node, MTF_F32);
    if (p->buckets[k].buffer < 0) return -1;
    if (wire == MTF_BF16) {
      p->buckets[k].staging = add_range_buffer(p, p->buckets[k].elements, p->buffers[first_member].node, MTF_BF16);
      if (p->buckets[k].staging < 0) return -1;
    }
  }
  return nb;
}

/* The new step list: old steps less the members' allreduces, with each gap's STARTs, then its WAITs.
 * map[old] = new index of a kept step, or of its bucket's WAIT for a removed one. */
static int rebuild_steps(mtf_plan *p, const candidate *q, int n, const int *start_gap, const int *wait_gap, int *map) {
  int total = p->n_steps - n + 2 * p->n_buckets;
  mtf_step *steps = malloc(sizeof(mtf_step) * ((size_t)total + 1));
  char *removed = calloc((size_t)p->n_steps + 1, 1);
  if (!steps || !removed) {
    free(steps);
    free(removed);
    return -1;
  }
  for (int i = 0; i < n; i++) removed[q[i].step] = 1;
  int t = 0;
  for (int gap = 0; gap <= p->n_steps; gap++) {
    for (int k = 0; k < p->n_buckets; k++)
      if (start_gap[k] == gap) {
        p->buckets[k].start_step = t;
        steps[t++] = bucket_step(p, MTF_STEP_ALLREDUCE_START, k);
      }
    for (int k = 0; k < p->n_buckets; k++)
      if (wait_gap[k] == gap) {
        p->buckets[k].wait_step = t;
        steps[t++] = bucket_step(p, MTF_STEP_ALLREDUCE_WAIT, k);
      }
    if (gap < p->n_steps && !removed[gap]) {
      map[gap] = t;
      steps[t++] = p->steps[gap];
    }
  }
  for (int i = 0; i < n; i++) map[q[i].step] = p->buckets[q[i].bucket].wait_step;
  free(removed);
  free(p->steps);
  p->steps = steps;
  p->n_steps = p->cap_steps = total;
  return 0;
}

/* Step indices of every lifetime follow the new list; a bucket's range lives from its first member's write
 * to the last read of any member, and no member dies before its bucket's WAIT. */
static void remap_lifetimes(mtf_plan *p, const int *map) {
  for (int b = 0; b < p->n_buffers; b++) {
    mtf_buffer *buf = &p->buffers[b];
    if (buf->first_step >= 0 && buf->first_step != INT_MAX) buf->first_step = map[buf->first_step];
    if (buf->last_step >= 0 && buf->last_step != INT_MAX) buf->last_step = map[buf->last_step];
  }
  for (int k = 0; k < p->n_buckets; k++) {
    mtf_buffer *range = &p->buffers[p->buckets[k].buffer];
    range->first_step = p->buckets[k].start_step;
    range->last_step = p->buckets[k].wait_step;
    if (p->buckets[k].staging >= 0) {
      p->buffers[p->buckets[k].staging].first_step = p->buckets[k].start_step;
      p->buffers[p->buckets[k].staging].last_step = p->buckets[k].wait_step;
    }
  }
  for (int b = 0; b < p->n_buffers; b++) {
    mtf_buffer *buf = &p->buffers[b];
    if (!buf->bucket) continue;
    const mtf_bucket *bk = &p->buckets[buf->bucket - 1];
    mtf_buffer *range = &p->buffers[bk->buffer];
    if (buf->last_step < bk->wait_step) buf->last_step = bk->wait_step;
    if (buf->first_step < range->first_step) range->first_step = buf->first_step;
    if (buf->last_step > range->last_step) range->last_step = buf->last_step;
  }
}

int mtf_plan_bucket_allreduces(mtf_plan *p, int64_t bucket_bytes, mtf_dtype wire, mtf_error *err) {
  if (bucket_bytes <= 0 || p->n_steps == 0) return MTF_OK;
  int64_t cap_elements = bucket_bytes / (int64_t)sizeof(float);
  if (cap_elements < 1) cap_elements = 1;
  size_t steps = (size_t)p->n_steps + 1, buffers = (size_t)p->n_buffers + 1;
  candidate *c = malloc(sizeof(candidate) * steps);
  int *reductions = malloc(sizeof(int) * buffers), *seen = malloc(sizeof(int) * buffers);
  int *start_gap = malloc(sizeof(int) * steps), *wait_gap = malloc(sizeof(int) * steps);
  int *map = malloc(sizeof(int) * steps);
  int rc = MTF_OK;
  if (!c || !reductions || !seen || !start_gap || !wait_gap || !map) {
    rc = MTF_ERR_NOMEM;
    goto done;
  }
  int n = find_candidates(p, c, reductions, seen);
  int end = n > 0 ? backward_end(p, c, n) : -1;
  if (end == -2) rc = MTF_ERR_NOMEM;
  if (end < 0) goto done;
  int kept = 0;
  for (int i = 0; i < n; i++)
    if (c[i].open < end && end <= c[i].close) c[kept++] = c[i];
  qsort(c, (size_t)kept, sizeof(candidate), by_open);
  if (make_buckets(p, c, kept, cap_elements, wire, start_gap, wait_gap) < 0 ||
      rebuild_steps(p, c, kept, start_gap, wait_gap, map) < 0) {
    rc = MTF_ERR_NOMEM;
    goto done;
  }
  remap_lifetimes(p, map);
  /* The same bytes cross the wire (the ring formula is linear in them), in fewer calls. */
  p->stats.comm_calls[MTF_COLL_ALLREDUCE] += p->n_buckets - kept;
  p->stats.allreduce_buckets = p->n_buckets;
  for (int k = 0; k < p->n_buckets; k++) {
    p->stats.bucketed_bytes += p->buckets[k].elements * (int64_t)sizeof(float);
    /* lowering counted the members' sums at 4 bytes an element; bfloat16 on the wire sends half */
    if (wire == MTF_BF16) {
      int group = mtf_mesh_group_size(&p->mesh, p->buckets[k].axes);
      p->stats.comm_bytes[MTF_COLL_ALLREDUCE] -=
          (int64_t)mtf_collective_bytes_sent(MTF_COLL_ALLREDUCE, group, (double)p->buckets[k].elements * 2.0);
    }
  }
done:
  free(c);
  free(reductions);
  free(seen);
  free(start_gap);
  free(wait_gap);
  free(map);
  return rc == MTF_OK ? MTF_OK : mtf_error_set(err, rc, "plan: out of memory while bucketing gradient allreduces");
}
