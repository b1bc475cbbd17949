/* Helpers of the kernels on AMX tiles (softargmax_amx.c, dw_amx.c): the
 * tile configuration they all use and the two ways an operand is arranged
 * for tdpbf16ps. Header-only (static inline), included by .c files that
 * compile their AMX functions with AMX_FN. */
#ifndef SPRY_BACKENDS_CPU_AMX_H
#define SPRY_BACKENDS_CPU_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/vec.h"

#define AMX_FN __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* All eight tiles 16 rows of 64 bytes: the only shape used here. */
AMX_FN static inline void tiles_configure(void) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  /* In asm with a memory operand: GCC 12 drops the stores to cfg before its
   * _tile_loadconfig builtin (bench_peak.c met this first). */
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

/* The tiles released, as a call of its own: clang 14 outlines an OpenMP
 * region into a function without AMX_FN's target, and failed to select
 * tilerelease written there directly (mm_amx.c's parallel region, in a build
 * whose -march has no AMX: Zen 4's fuzz build). A target function is not
 * inlined into a caller without that target, so this stays a call. */
AMX_FN static inline void tiles_release(void) { _tile_release(); }

/* v[i] dword j -> v[j] dword i (vec.h's vtranspose16; each vector converted
 * as a value: a float vector's store through an __m512i object's address
 * would break the aliasing rules). */
AMX_FN static inline void transpose16(__m512i v[16]) {
  vf16 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = (vf16)v[i];
  vtranspose16(r);
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) v[i] = (__m512i)r[i];
}

/* 16 bf16 of a and 16 of b interleaved: a0 b0 a1 b1 ... (one VNNI row). */
AMX_FN static inline __m512i interleave16(const uint16_t *a, const uint16_t *b) {
  static const int16_t idx[32]
      __attribute__((aligned(64))) = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i ab = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                                        _mm256_loadu_si256((const __m256i *)b), 1);
  return _mm512_permutexvar_epi16(_mm512_load_si512(idx), ab);
}

#endif
