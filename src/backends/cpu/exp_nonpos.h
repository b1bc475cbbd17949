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
 * unsigned arithmetic, so a NaN passes through without undefined behaviour.
 * conv_softargmax.c has the same steps on 16 lanes, with these constants. */
#define EXP_NONPOS_MAGIC 12582912.0f   /* 1.5 * 2^23, whose bits are 0x4B400000 */
#define EXP_NONPOS_LN2_HI 0.693359375f /* ln 2 split in two so n * hi is exact */
#define EXP_NONPOS_LN2_LO (-2.12194440e-4f)
/* exp(r) = 1 + r + r^2 (c0 r^4 + c1 r^3 + ... + c5), Horner from c0. */
static const float exp_nonpos_c[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

static inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  union {
    float f;
    uint32_t u;
  } t = {.f = x * 1.44269504f + EXP_NONPOS_MAGIC}, two_n;
  const float n = t.f - EXP_NONPOS_MAGIC;
  const float r = x - n * EXP_NONPOS_LN2_HI - n * EXP_NONPOS_LN2_LO;
  float p = exp_nonpos_c[0];
  for (int i = 1; i < 6; i++) p = p * r + exp_nonpos_c[i];
  two_n.u = (t.u - 0x4B400000u + 127u) << 23;
  return (p * r * r + r + 1.0f) * two_n.f;
}

#endif
