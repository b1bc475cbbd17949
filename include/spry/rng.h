/* Counter-based randomness. Every random draw in spry is a pure function of
 * (seed, stream, counter...) so results never depend on which thread or
 * worker made them: sp_rng_key(seed, epoch, index) seeds one sample's stream. */
#ifndef SPRY_RNG_H
#define SPRY_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint64_t state;
} sp_rng;

/* Named streams: keys that can never collide with a sample's (seed, epoch,
 * index), so each use draws numbers of its own.
 * SP_RNG_EPOCH_ORDER: the epoch's shuffle, sp_rng_key(seed, epoch, it) (an
 *   index no dataset reaches).
 * SP_RNG_VIDEO_CROP_A/B: a clip's crop position and flip, apart from the
 *   frame sampler's use of (seed, epoch, entry): sp_rng_key(sp_rng_key(seed,
 *   A, B), epoch, entry) ("cr", "op"). */
#define SP_RNG_EPOCH_ORDER UINT64_C(0xFFFFFFFFFFFF)
#define SP_RNG_VIDEO_CROP_A 0x6372u
#define SP_RNG_VIDEO_CROP_B 0x6f70u

/* Mixes up to three 64-bit words into one well-distributed key. */
uint64_t sp_rng_key(uint64_t seed, uint64_t a, uint64_t b);
sp_rng sp_rng_make(uint64_t key);
uint64_t sp_rng_u64(sp_rng *r);
/* Uniform in [0, 1) with 24 random bits (exact in float). */
float sp_rng_uniform(sp_rng *r);
float sp_rng_range(sp_rng *r, float lo, float hi);
/* Uniform integer in [0, n). */
uint32_t sp_rng_below(sp_rng *r, uint32_t n);
/* Standard normal (Box-Muller). */
float sp_rng_normal(sp_rng *r);
/* Fisher-Yates shuffle of idx[0..n). */
void sp_rng_shuffle(sp_rng *r, int32_t *idx, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
