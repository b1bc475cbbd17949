/* bfloat16 <-> float, inline and branch-free so loops over whole buffers
 * vectorise (the gradient exchange packs every bucket every step). The
 * public sp_f32_to_bf16 / sp_bf16_to_f32 (spry/tensor.h) are these. */
#ifndef SPRY_CORE_BF16_H
#define SPRY_CORE_BF16_H

#include <stdint.h>
#include <string.h>

/* Round to nearest even; a NaN stays a (quiet) NaN; overflow gives inf. */
static inline uint16_t sp_bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return (uint16_t)(is_nan ? (u >> 16) | 0x40u : rounded);
}

static inline float sp_bf16_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Element i of an f32 (bf16 = 0) or bf16 (bf16 = 1) buffer, in f32; and its
 * store. Kernels that serve both types pass bf16 as a constant so each
 * specialisation compiles to plain loads. */
static inline __attribute__((always_inline)) float sp_ldf(const void *p, int64_t i, int bf16) {
  return bf16 ? sp_bf16_widen(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline __attribute__((always_inline)) void sp_stf(void *p, int64_t i, float v, int bf16) {
  if (bf16)
    ((uint16_t *)p)[i] = sp_bf16_round(v);
  else
    ((float *)p)[i] = v;
}

/* In place: d[i] = bf16(d[i] + g[i]) (one rounding per addition). */
static inline void sp_bf16_add(uint16_t *restrict d, const uint16_t *restrict g, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = sp_bf16_round(sp_bf16_widen(d[i]) + sp_bf16_widen(g[i]));
}

#endif
