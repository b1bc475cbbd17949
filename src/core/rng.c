/* SplitMix64-based counter RNG: tiny state, good statistical quality for
 * augmentation and initialisation, and trivially reproducible per sample. */
#include "spry/rng.h"

#include <math.h>

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t sp_rng_key(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ull);
  k = mix64(k ^ (a + 0x632be59bd9b4e019ull));
  return mix64(k ^ (b + 0x85157af5ull));
}

sp_rng sp_rng_make(uint64_t key) {
  sp_rng r = {key};
  return r;
}

uint64_t sp_rng_u64(sp_rng *r) { return mix64(r->state += 0x9e3779b97f4a7c15ull); }

float sp_rng_uniform(sp_rng *r) { return (float)(sp_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float sp_rng_range(sp_rng *r, float lo, float hi) { return lo + (hi - lo) * sp_rng_uniform(r); }

uint32_t sp_rng_below(sp_rng *r, uint32_t n) {
  /* Multiply-shift (Lemire); the tiny bias is irrelevant for n << 2^32. */
  return n ? (uint32_t)(((sp_rng_u64(r) >> 32) * (uint64_t)n) >> 32) : 0;
}

float sp_rng_normal(sp_rng *r) {
  double u1 = ((double)(sp_rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(sp_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void sp_rng_shuffle(sp_rng *r, int32_t *idx, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(sp_rng_u64(r) % (uint64_t)(i + 1));
    int32_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}
