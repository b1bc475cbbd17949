/* 8 f32 lanes as one vector (GCC/Clang vector extensions: AVX2 / AVX-512
 * registers where the build has them, plain code elsewhere), with loads and
 * stores of f32 or bf16 memory. Shared by the kernels of our own that walk
 * channel groups (bnorm_kernels.c, conv_stem.c). */
#ifndef SPRY_BACKENDS_CPU_VEC8_H
#define SPRY_BACKENDS_CPU_VEC8_H

#include <stdint.h>

#ifndef INLINE
#define INLINE static inline __attribute__((always_inline))
#endif

typedef float vf8 __attribute__((vector_size(32)));
typedef float vf8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef uint32_t vu8 __attribute__((vector_size(32)));
typedef uint16_t vh8 __attribute__((vector_size(16)));
typedef uint16_t vh8u __attribute__((vector_size(16), aligned(2)));

INLINE vf8 vld(const void *p, int64_t i, int bf16) {
  if (bf16) {
    const vu8 u = __builtin_convertvector(*(const vh8u *)((const uint16_t *)p + i), vu8) << 16;
    return (vf8)u;
  }
  return *(const vf8u *)((const float *)p + i);
}

/* bf16 rounding as sp_bf16_round: nearest even, NaN stays a quiet NaN. */
INLINE void vst(void *p, int64_t i, vf8 v, int bf16) {
  if (bf16) {
    const vu8 u = (vu8)v, r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const vu8 nan = (vu8)((u & 0x7fffffffu) > 0x7f800000u);
    const vu8 h = (r & ~nan) | (((u >> 16) | 0x40u) & nan);
    *(vh8u *)((uint16_t *)p + i) = __builtin_convertvector(h, vh8);
  } else {
    *(vf8u *)((float *)p + i) = v;
  }
}

INLINE vf8 vbcast(float f) { return (vf8){f, f, f, f, f, f, f, f}; }
INLINE vf8 vload_f(const float *p) { return *(const vf8u *)p; }
#endif
