/* The memory planner: arena buffers whose lifetimes [first write, last read] overlap get disjoint ranges;
 * others may share. It replays the steps in order as an allocator would: before step t it frees every
 * buffer last read before t, then places the buffers first written at t (largest first) at the lowest free
 * offset where they fit (first fit). Free space is a set of disjoint holes ordered by offset, kept in a
 * treap whose nodes also know the largest hole below them, so finding the first fit, and freeing with
 * coalescing of neighbours, each take O(log n); the whole plan takes O(n log n). The last hole reaches
 * to INT64_MAX, so a buffer always fits; the arena is the highest end ever handed out. The gradients of a
 * bucket (buckets.c) are not placed on their own: their bucket's range buffer is, and they lie inside it. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "lower/plan.h"

typedef struct hole {
  int64_t begin, end; /* [begin, end) is free */
  int64_t max_size;   /* largest end - begin in this subtree */
  uint32_t priority;
  int left, right;    /* -1: none */
} hole;

typedef struct holes {
  hole *nodes;
  int *unused; /* stack of free node indices */
  int n_unused;
  uint32_t rng;
} holes;

static int64_t size_of(const holes *h, int t) { return t < 0 ? 0 : h->nodes[t].max_size; }

static void update(holes *h, int t) {
  hole *n = &h->nodes[t];
  int64_t m = n->end - n->begin, l = size_of(h, n->left), r = size_of(h, n->right);
  n->max_size = m > l ? (m > r ? m : r) : (l > r ? l : r);
}

/* Joins two treaps where every key of a is below every key of b. */
static int merge(holes *h, int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (h->nodes[a].priority > h->nodes[b].priority) {
    h->nodes[a].right = merge(h, h->nodes[a].right, b);
    update(h, a);
    return a;
  }
  h->nodes[b].left = merge(h, a, h->nodes[b].left);
  update(h, b);
  return b;
}

/* Splits t into holes beginning below `key` (*lo) and the rest (*hi). */
static void split(holes *h, int t, int64_t key, int *lo, int *hi) {
  if (t < 0) {
    *lo = *hi = -1;
  } else if (h->nodes[t].begin < key) {
    split(h, h->nodes[t].right, key, &h->nodes[t].right, hi);
    update(h, t);
    *lo = t;
  } else {
    split(h, h->nodes[t].left, key, lo, &h->nodes[t].left);
    update(h, t);
    *hi = t;
  }
}

/* Detaches the last (first when `first`) hole of t into *taken; returns the rest. */
static int take_end(holes *h, int t, int first, int *taken) {
  hole *n = &h->nodes[t];
  int *child = first ? &n->left : &n->right;
  if (*child < 0) {
    int rest = first ? n->right : n->left;
    *taken = t;
    n->left = n->right = -1;
    n->max_size = n->end - n->begin;
    return rest;
  }
  *child = take_end(h, *child, first, taken);
  update(h, t);
  return t;
}

/* Cuts `size` words off the front of the first hole (by offset) that holds them; returns the new root. */
static int first_fit(holes *h, int t, int64_t size, int64_t *offset) {
  hole *n = &h->nodes[t];
  if (n->left >= 0 && h->nodes[n->left].max_size >= size) {
    n->left = first_fit(h, n->left, size, offset);
  } else if (n->end - n->begin >= size) {
    *offset = n->begin;
    n->begin += size;
    if (n->begin == n->end) {
      h->unused[h->n_unused++] = t;
      return merge(h, n->left, n->right);
    }
  } else {
    n->right = first_fit(h, n->right, size, offset);
  }
  update(h, t);
  return t;
}

static int new_hole(holes *h, int64_t begin, int64_t end) {
  int t = h->unused[--h->n_unused];
  h->rng ^= h->rng << 13;
  h->rng ^= h->rng >> 17;
  h->rng ^= h->rng << 5;
  h->nodes[t] = (hole){begin, end, end - begin, h->rng, -1, -1};
  return t;
}

/* Returns [begin, end) to the free set, merged with the holes that touch it. */
static int release(holes *h, int root, int64_t begin, int64_t end) {
  int lo, hi, t;
  split(h, root, begin, &lo, &hi);
  if (lo >= 0) {
    lo = take_end(h, lo, 0, &t);
    if (h->nodes[t].end == begin) {
      begin = h->nodes[t].begin;
      h->unused[h->n_unused++] = t;
    } else {
      lo = merge(h, lo, t);
    }
  }
  if (hi >= 0) {
    hi = take_end(h, hi, 1, &t);
    if (h->nodes[t].begin == end) {
      end = h->nodes[t].end;
      h->unused[h->n_unused++] = t;
    } else {
      hi = merge(h, t, hi);
    }
  }
  return merge(h, merge(h, lo, new_hole(h, begin, end)), hi);
}

typedef struct lifetime {
  int64_t words; /* mtf_buffer_words */
  int first, last, buffer;
} lifetime;

static int by_first(const void *a, const void *b) {
  const lifetime *x = a, *y = b;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  if (x->words != y->words) return x->words > y->words ? -1 : 1;
  return x->buffer - y->buffer;
}

static int by_last(const void *a, const void *b) {
  const lifetime *x = a, *y = b;
  if (x->last != y->last) return x->last < y->last ? -1 : 1;
  return x->buffer - y->buffer;
}

/* Before each step, frees the buffers last read before it; then places the buffers first written there.
 * `starts` is by first step, `ends` by last step. Also returns the most elements alive at once, a lower
 * bound for any placement. */
static int64_t first_fit_over_time(mtf_plan *plan, const lifetime *starts, int n, const lifetime *ends, int n_ends,
                                   int64_t *most_alive) {
  size_t cap = (size_t)n + 2; /* k live buffers leave at most k + 1 holes */
  holes h = {malloc(sizeof(hole) * cap), malloc(sizeof(int) * cap), 0, 0x9e3779b9u};
  if (!h.nodes || !h.unused) {
    free(h.nodes);
    free(h.unused);
    return -1;
  }
  for (size_t i = 0; i < cap; i++) h.unused[h.n_unused++] = (int)(cap - 1 - i);
  int root = new_hole(&h, 0, INT64_MAX);
  int64_t arena = 0, alive = 0;
  *most_alive = 0;
  for (int i = 0, e = 0; i < n; i++) {
    for (; e < n_ends && ends[e].last < starts[i].first; e++) {
      const mtf_buffer *dead = &plan->buffers[ends[e].buffer];
      int64_t words = ends[e].words;
      root = release(&h, root, dead->offset, dead->offset + words);
      alive -= words;
    }
    mtf_buffer *buf = &plan->buffers[starts[i].buffer];
    int64_t words = starts[i].words;
    root = first_fit(&h, root, words, &buf->offset);
    if (buf->offset + words > arena) arena = buf->offset + words;
    alive += words;
    if (alive > *most_alive) *most_alive = alive;
  }
  free(h.nodes);
  free(h.unused);
  return arena;
}

/* The offline greedy, run only where few pairs of buffers are alive together (plans without a backward
 * pass, small plans): largest first, each at the lowest offset clear of the placed buffers alive with it.
 * Its cost grows with the number of such pairs, not with n^2. */
enum { MAX_PAIRS = 1 << 22 };

typedef struct range {
  int64_t begin, end;
} range;

static int larger_first(const void *a, const void *b) {
  const lifetime *x = a, *y = b;
  if (x->words != y->words) return x->words > y->words ? -1 : 1;
  return x->buffer - y->buffer;
}

static int by_begin(const void *a, const void *b) {
  int64_t x = ((const range *)a)->begin, y = ((const range *)b)->begin;
  return x < y ? -1 : x > y;
}

/* Places into `offsets` (by position in `starts`); returns the arena, -1 when out of memory, -2 when there
 * are too many pairs alive together. */
static int64_t largest_first(const lifetime *starts, int n, int64_t *offsets) {
  int *end = malloc(sizeof(int) * ((size_t)n + 1)), *n_before = calloc((size_t)n + 1, sizeof(int));
  lifetime *order = malloc(sizeof(lifetime) * ((size_t)n + 1));
  char *placed = calloc((size_t)n + 1, 1);
  int *before = NULL;
  range *near = NULL;
  int64_t arena = -1, pairs = 0;
  if (!end || !n_before || !order || !placed) goto done;
  /* Buffers alive with starts[i] that start no earlier are starts[i + 1 .. end[i] - 1]; the ones that start
   * earlier are listed in before[] (n_before[i] .. n_before[i + 1] - 1). */
  for (int i = 0; i < n; i++) {
    int lo = i + 1, hi = n;
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (starts[mid].first <= starts[i].last) lo = mid + 1;
      else hi = mid;
    }
    end[i] = lo;
    pairs += lo - i - 1;
    for (int j = i + 1; j < lo && pairs <= MAX_PAIRS; j++) n_before[j + 1]++;
    if (pairs > MAX_PAIRS) {
      arena = -2;
      goto done;
    }
  }
  for (int i = 0; i < n; i++) n_before[i + 1] += n_before[i];
  before = malloc(sizeof(int) * ((size_t)pairs + 1));
  near = malloc(sizeof(range) * ((size_t)n + 1));
  if (!before || !near) goto done;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < end[i]; j++) before[n_before[j]++] = i;
  for (int i = n - 1; i >= 0; i--) n_before[i + 1] = n_before[i]; /* the fill moved each start to the next */
  n_before[0] = 0;
  for (int i = 0; i < n; i++) order[i] = (lifetime){starts[i].words, 0, 0, i};
  qsort(order, (size_t)n, sizeof(lifetime), larger_first);
  arena = 0;
  for (int o = 0; o < n; o++) {
    int i = order[o].buffer, k = 0;
    for (int j = i + 1; j < end[i]; j++)
      if (placed[j]) near[k++] = (range){offsets[j], offsets[j] + starts[j].words};
    for (int x = n_before[i]; x < n_before[i + 1]; x++)
      if (placed[before[x]]) near[k++] = (range){offsets[before[x]], offsets[before[x]] + starts[before[x]].words};
    qsort(near, (size_t)k, sizeof(range), by_begin);
    int64_t offset = 0, size = starts[i].words;
    for (int j = 0; j < k && offset + size > near[j].begin; j++)
      if (near[j].end > offset) offset = near[j].end;
    offsets[i] = offset;
    placed[i] = 1;
    if (offset + size > arena) arena = offset + size;
  }
done:
  free(end);
  free(n_before);
  free(order);
  free(placed);
  free(before);
  free(near);
  return arena;
}

/* A buffer's words rounded up to the alignment: with every size a multiple of it and the arena starting at 0,
 * every hole's ends and so every offset are multiples of it too. */
static int64_t aligned_words(const mtf_buffer *b, int64_t align_words) {
  int64_t words = mtf_buffer_words(b);
  return align_words > 1 ? (words + align_words - 1) / align_words * align_words : words;
}

int64_t mtf_plan_assign_memory(mtf_plan *plan, int64_t align_words) {
  size_t cap = (size_t)plan->n_buffers + 1;
  lifetime *starts = malloc(sizeof(lifetime) * cap), *ends = malloc(sizeof(lifetime) * cap);
  int64_t *offsets = malloc(sizeof(int64_t) * cap);
  int64_t arena = -1, most_alive = 0;
  if (!starts || !ends || !offsets) goto done;
  int n = 0;
  for (int b = 0; b < plan->n_buffers; b++) {
    mtf_buffer *buf = &plan->buffers[b];
    if (buf->kind != MTF_BUF_ARENA) continue;
    if (buf->last_step < buf->first_step) buf->last_step = buf->first_step; /* written, never read */
    buf->offset = 0;
    if (buf->elements > 0 && !buf->bucket) /* a bucket's members are placed with their range, below */ starts[n++] = (lifetime){aligned_words(buf, align_words), buf->first_step, buf->last_step, b};
  }
  qsort(starts, (size_t)n, sizeof(lifetime), by_first);
  int n_ends = 0;
  for (int i = 0; i < n; i++)
    if (starts[i].last != INT_MAX) ends[n_ends++] = starts[i];
  qsort(ends, (size_t)n_ends, sizeof(lifetime), by_last);
  arena = first_fit_over_time(plan, starts, n, ends, n_ends, &most_alive);
  if (arena > most_alive) { /* first fit left gaps; the offline greedy may do better where it is cheap */
    int64_t greedy = largest_first(starts, n, offsets);
    if (greedy == -1) arena = -1;
    if (greedy >= 0 && greedy < arena) {
      arena = greedy;
      for (int i = 0; i < n; i++) plan->buffers[starts[i].buffer].offset = offsets[i];
    }
  }
  for (int b = 0; b < plan->n_buffers && arena >= 0; b++) {
    mtf_buffer *buf = &plan->buffers[b];
    if (buf->kind == MTF_BUF_ARENA && buf->bucket)
      buf->offset = plan->buffers[plan->buckets[buf->bucket - 1].buffer].offset + buf->bucket_offset;
  }
done:
  free(starts);
  free(ends);
  free(offsets);
  return arena;
}
