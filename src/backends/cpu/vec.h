/* f32 vectors (GCC/Clang vector extensions) with loads and stores of f32 or
 * bf16 memory, for the kernels of our own that walk channel groups
 * (bnorm_kernels.c, conv_stem.c):
 *   vf8  8 lanes, what conv_stem.c's fixed 8-channel groups use;
 *   vfw  the machine's width: 16 lanes where the build has AVX-512 (one
 *        instruction for 16 values, half the instructions of two vf8), else 8.
 * The memory-bound kernels were instruction bound in bf16 (widen, round,
 * narrow per value): at 8 lanes with software rounding, batch norm ran at
 * half the copy bandwidth. bf16 stores round with AVX512-BF16's
 * vcvtneps2bf16 where the build has it (nearest even, NaN stays a quiet NaN,
 * as sp_bf16_round; f32 denormals, which a bf16 kernel never produces in
 * practice, become signed zeros), else in integer arithmetic. */
#ifndef SPRY_BACKENDS_CPU_VEC_H
#define SPRY_BACKENDS_CPU_VEC_H

#include <stdint.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef INLINE
#define INLINE static inline __attribute__((always_inline))
#endif

/* Unrolls the next loop in full (trip counts here are at most 16), so an
 * array of vectors indexed by its counter stays in registers. Optimised
 * builds only: at -O0 the count is not a constant and GCC warns. */
#ifdef __OPTIMIZE__
#define VEC_UNROLL _Pragma("GCC unroll 16")
#else
#define VEC_UNROLL
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
  if (!bf16) {
    *(vf8u *)((float *)p + i) = v;
    return;
  }
#ifdef __AVX512BF16__
  *(vh8u *)((uint16_t *)p + i) = (vh8)_mm256_cvtneps_pbh((__m256)v);
#else
  const vu8 u = (vu8)v, r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const vu8 nan = (vu8)((u & 0x7fffffffu) > 0x7f800000u);
  const vu8 h = (r & ~nan) | (((u >> 16) | 0x40u) & nan);
  *(vh8u *)((uint16_t *)p + i) = __builtin_convertvector(h, vh8);
#endif
}

INLINE vf8 vbcast(float f) { return (vf8){f, f, f, f, f, f, f, f}; }
INLINE vf8 vload_f(const float *p) { return *(const vf8u *)p; }

/* ---- vfw: the machine's width ---- */

/* 16 lanes in any build (one AVX-512 register, two AVX2 ones): vfw where
 * the build has AVX-512, and conv_softargmax.c's 16-heatmap groups. */
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf16u __attribute__((vector_size(64), aligned(4)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef uint32_t vu16 __attribute__((vector_size(64)));
typedef uint16_t vh16 __attribute__((vector_size(32)));
typedef uint16_t vh16u __attribute__((vector_size(32), aligned(2)));

/* A 16 x 16 block of 32-bit lanes transposed in registers (r[i] lane j ->
 * r[j] lane i), in any build: four rounds, each swapping one bit of the row
 * index with the same bit of the column index (rows i and i + b, bit b of i
 * clear, trade their chunks of b values). Index lists rather than mask
 * vectors: __builtin_shufflevector is GCC's and Clang's alike (the fuzz
 * builds use Clang). reorder_w16.c's weight tiles, conv_tail.c's activation
 * rows, the AMX kernels' operands (amx.h). */
#define VT16_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define VT16_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define VT16_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define VT16_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define VT16_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define VT16_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define VT16_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define VT16_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define VT16_ROUND(b, lo, hi)                             \
  VEC_UNROLL for (int i = 0; i < 16; i++) if (!(i & b)) { \
    const vf16 a_ = r[i], b_ = r[i + b];                  \
    r[i] = __builtin_shufflevector(a_, b_, lo);           \
    r[i + b] = __builtin_shufflevector(a_, b_, hi);       \
  }
INLINE void vtranspose16(vf16 *r) {
  VT16_ROUND(8, VT16_LO8, VT16_HI8)
  VT16_ROUND(4, VT16_LO4, VT16_HI4)
  VT16_ROUND(2, VT16_LO2, VT16_HI2)
  VT16_ROUND(1, VT16_LO1, VT16_HI1)
}

#ifdef __AVX512F__
enum { VW = 16 };
typedef vf16 vfw;
typedef vf16u vfwu;
typedef vi16 viw;
typedef vu16 vuw;
typedef vh16 vhw;
typedef vh16u vhwu;
#define VW_LO8 0, 1, 2, 3, 4, 5, 6, 7
#define VW_ALL 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15

/* n lanes from p[i..]: n is VW, or 8 (the rest zero) for a group of 8
 * channels left over after the 16s; a constant in every caller. */
INLINE vfw vldw(const void *p, int64_t i, int bf16, int n) {
  if (n == 8) return __builtin_shufflevector(vld(p, i, bf16), vbcast(0.0f), VW_ALL);
  /* One widening move (GCC 12 splits __builtin_convertvector into halves). */
  if (bf16) return (vfw)_mm512_slli_epi32(_mm512_cvtepu16_epi32(*(const __m256i_u *)((const uint16_t *)p + i)), 16);
  return *(const vfwu *)((const float *)p + i);
}

INLINE void vstw(void *p, int64_t i, vfw v, int bf16, int n) {
  if (n == 8) {
    vst(p, i, __builtin_shufflevector(v, v, VW_LO8), bf16);
  } else if (!bf16) {
    *(vfwu *)((float *)p + i) = v;
  } else {
#ifdef __AVX512BF16__
    *(vhwu *)((uint16_t *)p + i) = (vhw)_mm512_cvtneps_pbh((__m512)v);
#else
    vst(p, i, __builtin_shufflevector(v, v, VW_LO8), 1);
    vst(p, i + 8, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), 1);
#endif
  }
}

/* vstw, bypassing the caches where the address allows (a whole vector on
 * its own alignment): for outputs too large to stay in cache, whose lines
 * a plain store would first read. */
INLINE void vstw_nt(void *p, int64_t i, vfw v, int bf16, int n) {
  if (n == VW && !bf16 && ((uintptr_t)((float *)p + i) & 63) == 0) {
    _mm512_stream_ps((float *)p + i, (__m512)v);
#ifdef __AVX512BF16__
  } else if (n == VW && bf16 && ((uintptr_t)((uint16_t *)p + i) & 31) == 0) {
    _mm256_stream_si256((__m256i *)((uint16_t *)p + i), (__m256i)_mm512_cvtneps_pbh((__m512)v));
#endif
  } else {
    vstw(p, i, v, bf16, n);
  }
}

INLINE vfw vbcastw(float f) { return (vfw){f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f}; }

/* Byte masks (0 or 1 each, as add + ReLU keeps them) as lane masks, all
 * ones where set: n (VW, or 8 with the rest clear) bytes from m[i..] for
 * f32 lanes; VW bytes for 16-bit lanes. One widening move each: GCC 12
 * builds __builtin_convertvector of bytes element by element. */
INLINE viw vmask32(const uint8_t *m, int64_t i, int n) {
  if (n == 8) return -(viw)_mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i_u *)(m + i)));
  return -(viw)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i_u *)(m + i)));
}
INLINE vhw vmask16(const uint8_t *m, int64_t i) {
  return -(vhw)_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i_u *)(m + i)));
}

/* p[0..8) twice: per-channel constants for a vector of two 8-lane positions. */
INLINE vfw vtwice8(const float *p) {
  const vf8 h = *(const vf8u *)p;
  return __builtin_shufflevector(h, h, VW_ALL);
}
#else
enum { VW = 8 };
typedef vf8 vfw;
typedef vf8u vfwu;
typedef vi8 viw;
typedef vu8 vuw;
typedef vh8 vhw;
typedef vh8u vhwu;
INLINE vfw vldw(const void *p, int64_t i, int bf16, int n) { return vld(p, i, bf16); }
INLINE void vstw(void *p, int64_t i, vfw v, int bf16, int n) { vst(p, i, v, bf16); }
INLINE void vstw_nt(void *p, int64_t i, vfw v, int bf16, int n) { vst(p, i, v, bf16); }
INLINE vfw vbcastw(float f) { return vbcast(f); }
INLINE vfw vtwice8(const float *p) { return vload_f(p); } /* never called: VW is 8 */
#ifdef __AVX2__
INLINE viw vmask32(const uint8_t *m, int64_t i, int n) {
  return -(viw)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i_u *)(m + i)));
}
INLINE vhw vmask16(const uint8_t *m, int64_t i) {
  return -(vhw)_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i_u *)(m + i)));
}
#else
typedef uint8_t vb8u_ __attribute__((vector_size(8), aligned(1)));
INLINE viw vmask32(const uint8_t *m, int64_t i, int n) {
  return -__builtin_convertvector(*(const vb8u_ *)(m + i), viw);
}
INLINE vhw vmask16(const uint8_t *m, int64_t i) { return -__builtin_convertvector(*(const vb8u_ *)(m + i), vhw); }
#endif
#endif

/* Bit masks: bit l of m at bit i (i a multiple of 8) for lane l of n (VW,
 * or 8). vbits_gt0 gives lanes > 0 as those bits; vbits_select keeps g's
 * lanes whose bit is set and zeroes the rest. A vector of lanes is 1 or 2
 * bytes of mask where a byte a lane took 8 or 16. */
INLINE void vbits_gt0(uint8_t *m, int64_t i, vfw v, int n) {
#ifdef __AVX512F__
  const uint16_t b = (uint16_t)_mm512_cmp_ps_mask((__m512)v, _mm512_setzero_ps(), _CMP_GT_OQ);
#elif defined(__AVX2__)
  const uint16_t b = (uint16_t)_mm256_movemask_ps(_mm256_cmp_ps((__m256)v, _mm256_setzero_ps(), _CMP_GT_OQ));
#else
  uint16_t b = 0;
  for (int l = 0; l < VW; l++) b |= (uint16_t)((v[l] > 0.0f) << l);
#endif
  m[i >> 3] = (uint8_t)b;
  if (n > 8) m[(i >> 3) + 1] = (uint8_t)(b >> 8);
}
INLINE vfw vbits_select(vfw g, const uint8_t *m, int64_t i, int n) {
  const uint16_t b = (uint16_t)(m[i >> 3] | (n > 8 ? m[(i >> 3) + 1] << 8 : 0));
#ifdef __AVX512F__
  return (vfw)_mm512_maskz_mov_ps((__mmask16)b, (__m512)g);
#else
  const viw bit = {1, 2, 4, 8, 16, 32, 64, 128};
  return (vfw)((viw)g & (((viw){b, b, b, b, b, b, b, b} & bit) != 0));
#endif
}

/* max(v, 0), at the machine's width and on 8 lanes. */
INLINE vfw vrelu(vfw v) { return (vfw)((viw)v & (viw)(v > 0.0f)); }
INLINE vf8 vrelu8(vf8 v) { return (vf8)((vi8)v & (vi8)(v > 0.0f)); }

#endif
