/* Helpers of the kernels on AMX tiles (softargmax_amx.c, dw_amx.c): the
 * tile configuration they all use and the two ways an operand is arranged
 * for tdpbf16ps. Header-only (static inline), included by .c files that
 * compile their AMX functions with AMX_FN. */
#ifndef SPRY_BACKENDS_CPU_AMX_H
#define SPRY_BACKENDS_CPU_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

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

/* v[i] dword j -> v[j] dword i. Four rounds; the round of width b swaps the
 * off-diagonal b x b blocks of every 2b x 2b block. */
AMX_FN static inline void transpose16(__m512i v[16]) {
  static const int32_t idx[4][2][16]
      __attribute__((aligned(64))) = {{{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                                       {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
                                      {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                                       {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
                                      {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                                       {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
                                      {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                                       {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}}};
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++) {
    const int b = 8 >> q;
    const __m512i lo = _mm512_load_si512(idx[q][0]), hi = _mm512_load_si512(idx[q][1]);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
      if (!(r & b)) {
        const __m512i a = v[r], c = v[r + b];
        v[r] = _mm512_permutex2var_epi32(a, lo, c);
        v[r + b] = _mm512_permutex2var_epi32(a, hi, c);
      }
  }
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
