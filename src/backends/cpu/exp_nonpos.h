/* exp of a non-positive float (a logit minus its heatmap's max), branch-free
 * so loops over a heatmap's lanes vectorise. Shared by the soft-argmax
 * kernels (softargmax.c, conv_softargmax.c). */
#ifndef SPRY_BACKENDS_CPU_EXP_NONPOS_H
#define SPRY_BACKENDS_CPU_EXP_NONPOS_H

#include <stdint.h>

/* exp(x) for x <= 0 (the logit minus its heatmap's max): 2^n exp(r) with
 * n = round(x / ln 2), |r| <= ln2/2 and a degree-6 polynomial for exp(r)
 * (relative error below 1e-7); below -87 it returns exp(-87) ~ 1.6e-38,
 * which no sum notices. n is read from the bits of x / ln 2 + 1.5 * 2^23 (the
 * float whose last mantissa bits hold the rounded value) and 2^n is built in
 * unsigned arithmetic, so a NaN passes through without undefined behaviour. */
static inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  union {
    float f;
    uint32_t u;
  } t = {.f = x * 1.44269504f + 12582912.0f}, two_n;
  const float n = t.f - 12582912.0f;
  float r = x - n * 0.693359375f; /* ln 2 split in two so n * hi is exact */
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  two_n.u = (t.u - 0x4B400000u + 127u) << 23; /* 0x4B400000: the bits of 1.5 * 2^23 */
  return p * two_n.f;
}

#endif
