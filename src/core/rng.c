#include "core/rng.h"

#include <math.h>

uint64_t mtf_hash64(uint64_t key, uint64_t counter) {
  /* Two rounds: one alone lets nearby keys with equal counters correlate in the low bits. */
  return mtf_mix64(mtf_mix64(key ^ (counter * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull)));
}

mtf_rng mtf_rng_make(uint64_t seed, uint64_t stream) {
  mtf_rng rng = {mtf_hash64(seed, stream), 0};
  return rng;
}

uint64_t mtf_rng_next(mtf_rng *rng) { return mtf_hash64(rng->key, rng->counter++); }

uint64_t mtf_rng_below(mtf_rng *rng, uint64_t bound) {
  if (bound <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound; /* values >= limit would favour small results */
  for (;;) {
    uint64_t value = mtf_rng_next(rng);
    if (value < limit) return value % bound;
  }
}

#define FEISTEL_ROUNDS 6

mtf_permutation mtf_permutation_make(uint64_t n, uint64_t seed, uint64_t epoch) {
  mtf_permutation perm = {.n = n ? n : 1};
  int bits = 2; /* at least 1 bit per half so tiny domains still shuffle */
  while (bits < 64 && (1ull << bits) < perm.n) bits += 2;
  perm.half_bits = bits / 2;
  uint64_t key = mtf_hash64(seed, epoch ^ 0x5DEECE66Dull);
  for (int r = 0; r < FEISTEL_ROUNDS; r++) perm.round_keys[r] = mtf_hash64(key, (uint64_t)r);
  return perm;
}

static uint64_t feistel(const mtf_permutation *perm, uint64_t x) {
  uint64_t mask = (1ull << perm->half_bits) - 1;
  uint64_t left = (x >> perm->half_bits) & mask, right = x & mask;
  for (int r = 0; r < FEISTEL_ROUNDS; r++) {
    uint64_t next = left ^ (mtf_hash64(perm->round_keys[r], right) & mask);
    left = right;
    right = next;
  }
  return (left << perm->half_bits) | right;
}

uint64_t mtf_permutation_at(const mtf_permutation *perm, uint64_t i) {
  /* Cycle-walking: the Feistel domain is < 4n, so this loops fewer than 4 times on average, and it ends
   * because following a permutation from a point in [0, n) must come back into [0, n). */
  uint64_t x = feistel(perm, i);
  while (x >= perm->n) x = feistel(perm, x);
  return x;
}

double mtf_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = mtf_uniform01(seed, stream, 2 * index), u2 = mtf_uniform01(seed, stream, 2 * index + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t mtf_name_hash(const char *name) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ULL;
  return h;
}
