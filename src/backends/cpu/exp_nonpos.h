/* exp of a non-positive float (a logit minus its heatmap's max), branch-free
 * so loops over a heatmap's lanes vectorise. Shared by the soft-argmax
 * kernels (softargmax.c, conv_softargmax.c). */
#ifndef SPRY_BACKENDS_CPU_EXP_NONPOS_H
#define SPRY_BACKENDS_CPU_EXP_NONPOS_H

#include <stdint.h>

/* exp(x) for x <= 0 (the logit minus its heatmap's max): 2^n exp(r) with
 * n = round(x / ln 2), |r| <= ln2/2 and a degree-5 polynomial for exp(r)
 * (relative error 9e-8, 1.7e-7 evaluated in float: the coefficients fit to
 * the least maximum relative error on that range, 1 fixed as the constant
 * term so exp(0) = 1); below -87 it returns exp(-87) ~ 1.6e-38,
 * which no sum notices. n is read from the bits of x / ln 2 + 1.5 * 2^23 (the
 * float whose last mantissa bits hold the rounded value) and 2^n is built in
 * unsigned arithmetic, so a NaN passes through without undefined behaviour.
 * conv_softargmax.c has the same steps on 16 lanes, with these constants.
 * (Degree 7 before: two more products a value for accuracy a float sum of
 * thousands of terms never kept.) */
#define EXP_NONPOS_MAGIC 12582912.0f   /* 1.5 * 2^23, whose bits are 0x4B400000 */
#define EXP_NONPOS_LN2_HI 0.693359375f /* ln 2 split in two so n * hi is exact */
#define EXP_NONPOS_LN2_LO (-2.12194440e-4f)
/* exp(r) = 1 + r (c4 + r (c3 + r (c2 + r (c1 + r c0)))), Horner from c0. */
enum { EXP_NONPOS_TERMS = 5 };
static const float exp_nonpos_c[EXP_NONPOS_TERMS] = {8.2903150469e-03f, 4.1897930205e-02f, 1.6667635739e-01f,
                                                     4.9999150634e-01f, 9.9999970198e-01f};

static inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  union {
    float f;
    uint32_t u;
  } t = {.f = x * 1.44269504f + EXP_NONPOS_MAGIC}, two_n;
  const float n = t.f - EXP_NONPOS_MAGIC;
  const float r = x - n * EXP_NONPOS_LN2_HI - n * EXP_NONPOS_LN2_LO;
  float p = exp_nonpos_c[0];
  for (int i = 1; i < EXP_NONPOS_TERMS; i++) p = p * r + exp_nonpos_c[i];
  two_n.u = (t.u - 0x4B400000u + 127u) << 23;
  return (p * r + 1.0f) * two_n.f;
}

#endif
