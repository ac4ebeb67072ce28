/* The memory planner on random buffer lifetimes, checked without trusting it: no two buffers alive at the
 * same step share an element, every buffer lies inside the arena, and the arena holds at least the most
 * elements ever alive at once (a lower bound for any placement). Patterns: short random lifetimes (few
 * buffers alive together), a training-like nest (forward activations read again in the backward pass, so
 * most pairs are alive together) and a large nest that must still be planned fast; and with an alignment (the
 * cuda backend's 256 bytes, 64 words): every offset a multiple, the bound counted with sizes rounded up. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "../check.h"
#include "lower/plan.h"

static uint64_t rng_state;

static uint64_t next_random(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int64_t uniform(int64_t lo, int64_t hi) { return lo + (int64_t)(next_random() % (uint64_t)(hi - lo + 1)); }

typedef struct span {
  int64_t begin, end; /* elements [begin, end) */
  int first, last;    /* steps [first, last] */
} span;

static int by_begin(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

typedef struct change {
  int step;
  int64_t delta;
} change;

static int by_step(const void *a, const void *b) {
  const change *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->delta < y->delta ? -1 : x->delta > y->delta; /* frees (negative) first */
}

/* Plans `plan`, whose lifetimes `first`/`last` are also kept by the caller, and checks the placement. */
static void plan_and_check(mtf_plan *plan, const char *name, double max_over_bound, int64_t align) {
  int n = plan->n_buffers;
  int *first = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
  for (int b = 0; b < n; b++) {
    first[b] = plan->buffers[b].first_step;
    last[b] = plan->buffers[b].last_step < first[b] ? first[b] : plan->buffers[b].last_step;
  }
  clock_t start = clock();
  int64_t arena = mtf_plan_assign_memory(plan, align);
  double seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
  CHECK(arena >= 0);

  span *spans = malloc(sizeof(span) * (size_t)n);
  change *changes = malloc(sizeof(change) * 2 * (size_t)n);
  int n_spans = 0, n_changes = 0, outside = 0, misaligned = 0;
  for (int b = 0; b < n; b++) {
    const mtf_buffer *buf = &plan->buffers[b];
    if (buf->kind != MTF_BUF_ARENA || buf->elements == 0) continue;
    int64_t size = (buf->elements + align - 1) / align * align; /* float32 buffers: one word per element */
    outside += buf->offset < 0 || buf->offset + buf->elements > arena;
    misaligned += buf->offset % align != 0;
    spans[n_spans++] = (span){buf->offset, buf->offset + buf->elements, first[b], last[b]};
    changes[n_changes++] = (change){first[b], size};
    if (last[b] != INT_MAX) changes[n_changes++] = (change){last[b] + 1, -size};
  }
  CHECK(outside == 0);
  CHECK(misaligned == 0);

  /* Every pair sharing memory, found by a sweep over offsets, must be alive at disjoint steps. */
  qsort(spans, (size_t)n_spans, sizeof(span), by_begin);
  int64_t clashes = 0;
  for (int i = 0; i < n_spans; i++)
    for (int j = i + 1; j < n_spans && spans[j].begin < spans[i].end; j++)
      clashes += spans[i].first <= spans[j].last && spans[j].first <= spans[i].last;
  CHECK(clashes == 0);

  /* Most elements alive at one step. */
  qsort(changes, (size_t)n_changes, sizeof(change), by_step);
  int64_t alive = 0, most = 0;
  for (int i = 0; i < n_changes; i++) {
    alive += changes[i].delta;
    if (i + 1 == n_changes || changes[i + 1].step != changes[i].step)
      if (alive > most) most = alive;
  }
  CHECK(arena >= most);
  CHECK(arena <= (int64_t)(max_over_bound * (double)most) + 1);
  printf("%s: %d buffers, arena %lld elements, lower bound %lld (x%.4f), %.3f s\n", name, n, (long long)arena,
         (long long)most, most ? (double)arena / (double)most : 1.0, seconds);
  free(first);
  free(last);
  free(spans);
  free(changes);
}

static mtf_plan *new_plan(int n_buffers, int n_steps) {
  mtf_plan *plan = calloc(1, sizeof(mtf_plan));
  plan->buffers = calloc((size_t)n_buffers, sizeof(mtf_buffer));
  plan->n_buffers = n_buffers;
  plan->n_steps = n_steps;
  return plan;
}

static void free_plan(mtf_plan *plan) {
  free(plan->buffers);
  free(plan);
}

/* Short lifetimes at random steps, random sizes; some written and never read, some read after the run,
 * some empty, some variables and inputs (which the planner must leave alone). */
static void test_random(uint64_t seed, int n, int steps, int max_life, int64_t align) {
  rng_state = seed;
  mtf_plan *plan = new_plan(n, steps);
  for (int b = 0; b < n; b++) {
    mtf_buffer *buf = &plan->buffers[b];
    int r = (int)uniform(0, 99);
    buf->kind = r < 3 ? MTF_BUF_VARIABLE : r < 5 ? MTF_BUF_INPUT : MTF_BUF_ARENA;
    buf->offset = buf->kind == MTF_BUF_ARENA ? -1 : b;
    buf->elements = uniform(0, 9) == 0 ? uniform(1, 8) : uniform(1, 1 << uniform(4, 16));
    if (uniform(0, 199) == 0) buf->elements = 0;
    buf->first_step = (int)uniform(0, steps - 1);
    r = (int)uniform(0, 99);
    buf->last_step = r < 5 ? buf->first_step - 1 : r < 7 ? INT_MAX : buf->first_step + (int)uniform(0, max_life);
  }
  char name[64];
  snprintf(name, sizeof name, "random (seed %llu, aligned to %lld words)", (unsigned long long)seed, (long long)align);
  plan_and_check(plan, name, 1.5, align);
  int untouched = 0;
  for (int b = 0; b < n; b++) untouched += plan->buffers[b].kind == MTF_BUF_ARENA || plan->buffers[b].offset == b;
  CHECK(untouched == n);
  free_plan(plan);
}

/* A forward pass of `layers` layers leaves activations that the mirrored backward step reads, with
 * short-lived temporaries and gradients around them: the pattern of a training step. */
static void test_training_like(uint64_t seed, int layers, double max_over_bound, int64_t align) {
  rng_state = seed;
  int per_layer = 6, n = layers * per_layer * 2, steps = 2 * layers * per_layer + 2;
  mtf_plan *plan = new_plan(n, steps);
  int b = 0;
  for (int l = 0; l < layers; l++)
    for (int k = 0; k < per_layer; k++) {
      int step = l * per_layer + k, mirror = steps - 1 - step;
      int64_t size = (int64_t)1 << uniform(8, 14);
      plan->buffers[b++] = (mtf_buffer){.kind = MTF_BUF_ARENA, .elements = size, .first_step = step,
                                        .last_step = k % 3 == 0 ? mirror : step + (int)uniform(1, 3)};
      plan->buffers[b++] = (mtf_buffer){.kind = MTF_BUF_ARENA, .elements = size * uniform(1, 4),
                                        .first_step = mirror - (int)uniform(1, 3), .last_step = mirror};
    }
  char name[64];
  snprintf(name, sizeof name, "training-like, %d layers, aligned to %lld words", layers, (long long)align);
  plan_and_check(plan, name, max_over_bound, align);
  free_plan(plan);
}

int main(void) {
  test_random(1, 4000, 3000, 20, 1);
  test_random(2, 6000, 500, 200, 1);
  test_random(3, 3000, 100, 5000, 1);
  test_training_like(4, 50, 1.25, 1);   /* few enough pairs for the offline greedy too */
  test_training_like(5, 3000, 1.25, 1); /* 36000 buffers, ~10^8 pairs alive together */
  test_random(6, 4000, 3000, 20, 64);
  test_random(7, 3000, 100, 5000, 64);
  test_training_like(8, 50, 1.25, 64);
  test_training_like(9, 3000, 1.25, 64);
  return check_summary();
}
