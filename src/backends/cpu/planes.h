/* Products on "planes": a channel's (or heatmap's) positions side by side in
 * memory, so a vector holds 16 positions of one channel and a weight is one
 * broadcast. Shared by the kernels that turn 16-channel blocks into planes
 * for a few narrow products at full resolution: the frozen tail block and
 * its head (conv_tail.c) and the training head (softargmax_planes.c).
 * AVX-512 builds only; include after vec.h. */
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

#endif
#endif
