/* Products on "planes": a channel's (or heatmap's) positions side by side in
 * memory, so a vector holds 16 (AVX-512) or 8 (AVX2) positions of one
 * channel and a weight is one broadcast. Shared by the kernels that turn
 * channel blocks into planes for a few narrow products at full resolution:
 * the frozen tail block and its head (conv_tail.c, AVX-512 builds) and the
 * head (softargmax_planes.c, 16- or 8-channel blocks). Include after vec.h. */
#ifndef SPRY_BACKENDS_CPU_PLANES_H
#define SPRY_BACKENDS_CPU_PLANES_H

#ifdef __AVX512F__
#include "backends/cpu/vec.h"

/* 16 positions x 16 channels of a 16-channel block (a position's channels a
 * row, rows ss floats apart) into 16 planes (a channel's positions a row,
 * rows ds floats apart); the same call turns planes back into a block. */
static inline void planes_transpose16(const float *src, int64_t ss, float *dst, int64_t ds) {
  vf16 r[16];
  VEC_UNROLL for (int i = 0; i < 16; i++) r[i] = *(const vf16u *)(src + i * ss);
  vtranspose16(r);
  VEC_UNROLL for (int i = 0; i < 16; i++) * (vf16u *)(dst + i * ds) = r[i];
}

/* acc[k][0..1] = sum over c < cn of w[k * ldw + c] in[c * ldi + p .. + 32)
 * for kb (a constant) outputs and 32 positions from p: per c two vector
 * loads, kb broadcasts and 2 kb FMAs, the sums in 2 kb registers. */
#define PLANES_PRODUCT(acc, kb, w, ldw, cn, in, ldi, p)                               \
  do {                                                                                \
    VEC_UNROLL for (int k_ = 0; k_ < (kb); k_++) acc[k_][0] = acc[k_][1] = (vf16){0}; \
    for (int64_t c_ = 0; c_ < (cn); c_++) {                                           \
      const vf16 x0_ = *(const vf16u *)((in) + c_ * (ldi) + (p));                     \
      const vf16 x1_ = *(const vf16u *)((in) + c_ * (ldi) + (p) + 16);                \
      VEC_UNROLL for (int k_ = 0; k_ < (kb); k_++) {                                  \
        const vf16 wk_ = vbcastw((w)[k_ * (ldw) + c_]);                               \
        acc[k_][0] += wk_ * x0_, acc[k_][1] += wk_ * x1_;                             \
      }                                                                               \
    }                                                                                 \
  } while (0)

#elif defined(__AVX2__) && defined(__FMA__)
#include "backends/cpu/vec.h"

/* 8 positions x 8 channels of an 8-channel block into 8 planes, or back. */
static inline void planes_transpose8(const float *src, int64_t ss, float *dst, int64_t ds) {
  vf8 r[8], o[8];
  VEC_UNROLL for (int i = 0; i < 8; i++) r[i] = *(const vf8u *)(src + i * ss);
  vtranspose8(r, o);
  VEC_UNROLL for (int i = 0; i < 8; i++) * (vf8u *)(dst + i * ds) = o[i];
}

/* PLANES_PRODUCT at 8 lanes: kb outputs x 16 positions from p (two vectors
 * an output; with kb = 6, 12 sums, 2 loads and 6 broadcasts feed 12 FMAs in
 * 15 of the 16 registers). */
#define PLANES_PRODUCT8(acc, kb, w, ldw, cn, in, ldi, p)                             \
  do {                                                                               \
    VEC_UNROLL for (int k_ = 0; k_ < (kb); k_++) acc[k_][0] = acc[k_][1] = (vf8){0}; \
    for (int64_t c_ = 0; c_ < (cn); c_++) {                                          \
      const vf8 x0_ = *(const vf8u *)((in) + c_ * (ldi) + (p));                      \
      const vf8 x1_ = *(const vf8u *)((in) + c_ * (ldi) + (p) + 8);                  \
      VEC_UNROLL for (int k_ = 0; k_ < (kb); k_++) {                                 \
        const vf8 wk_ = vbcast((w)[k_ * (ldw) + c_]);                                \
        acc[k_][0] += wk_ * x0_, acc[k_][1] += wk_ * x1_;                            \
      }                                                                              \
    }                                                                                \
  } while (0)
#endif
#endif
