/* The one random-number module: deterministic, counter-based randomness for the whole program (variable
 * initialisation, dropout masks, the data path, sampling). Nothing here keeps hidden state between
 * calls: a value depends only on its key and counter, so every rank, every mesh shape and a resumed run
 * compute the same numbers without communicating.
 *
 * mtf_permutation is a keyed bijection of [0, n): a Feistel network over the smallest power-of-two domain
 * that holds n, with cycle-walking back into [0, n). It gives "position i of this epoch's shuffle" in O(1)
 * time and memory, so the loader never materialises an order over millions of windows. */
#ifndef MTF_CORE_RNG_H
#define MTF_CORE_RNG_H

#include <stdint.h>

#include "core/host_device.h"

/* A 64-bit mix of a key and a counter (SplitMix64 finaliser over key ^ golden-ratio-scaled counter). */
uint64_t mtf_hash64(uint64_t key, uint64_t counter);

/* A sequential generator for tools that want a stream (synthetic data): state advances by one counter. */
typedef struct mtf_rng {
  uint64_t key;
  uint64_t counter;
} mtf_rng;

mtf_rng mtf_rng_make(uint64_t seed, uint64_t stream);
uint64_t mtf_rng_next(mtf_rng *rng);
/* Uniform in [0, bound) for bound >= 1 (rejection sampling, no modulo bias). */
uint64_t mtf_rng_below(mtf_rng *rng, uint64_t bound);

/* SplitMix64's finaliser: a bijection of 64-bit words (the mixing step of everything here, and of
 * checkpoint checksums). */
static inline MTF_HOST_DEVICE uint64_t mtf_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Counter-based values for tensors: a pure function of (seed, stream, index). Inline for the device too:
 * every backend's random kernels (dropout masks) call these, so masks agree bit for bit. */
static inline MTF_HOST_DEVICE uint64_t mtf_hash3(uint64_t seed, uint64_t stream, uint64_t index) {
  return mtf_mix64(mtf_mix64(mtf_mix64(seed + 0x9e3779b97f4a7c15ULL) ^ stream) + index * 0x9e3779b97f4a7c15ULL);
}
static inline MTF_HOST_DEVICE double mtf_uniform01(uint64_t seed, uint64_t stream, uint64_t index) { /* in (0, 1) */
  return ((double)(mtf_hash3(seed, stream, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
double mtf_normal(uint64_t seed, uint64_t stream, uint64_t index);    /* Box-Muller over two uniforms */
/* The key of a random op in run `run` (dropout differs per step, yet not per layout). */
static inline uint64_t mtf_run_key(uint64_t key, uint64_t run) { return key + run * 0x9e3779b97f4a7c15ULL; }

/* A stream key from a name (FNV-1a), so a variable's values follow its name, not its creation order. */
uint64_t mtf_name_hash(const char *name);

typedef struct mtf_permutation {
  uint64_t n;
  int half_bits; /* the Feistel domain is 2^(2*half_bits) >= n */
  uint64_t round_keys[6];
} mtf_permutation;

/* A permutation of [0, n) (n >= 1) keyed by (seed, epoch). */
mtf_permutation mtf_permutation_make(uint64_t n, uint64_t seed, uint64_t epoch);
/* The element at position i (0 <= i < n). */
uint64_t mtf_permutation_at(const mtf_permutation *perm, uint64_t i);

#endif
