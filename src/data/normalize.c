/* u8 -> f32/bf16 normalisation of a whole batch in one pass: each channel is
 * a 256-entry table (x/255 - mean)/std, so the pass is a load, a lookup and a
 * store per pixel. It runs on the calling (consumer) thread only: the loader's
 * workers already occupy the cores, and an OpenMP team here was measured to
 * halve the loader's throughput on 2 cores (its spinning threads steal the
 * workers' time). */
#include <string.h>

#include "data/data_internal.h"

int sp_normalize_u8(const uint8_t *src, int64_t n, int c, int64_t hw, const float *mean, const float *std,
                    sp_dtype dtype, void *out) {
  SP_CHECK(c > 0 && c <= 4, "normalise: %d channels (1..4)", c);
  SP_CHECK(dtype == SP_F32 || dtype == SP_BF16, "normalise: output dtype must be f32 or bf16, not %s",
           sp_dtype_name(dtype));
  float lut[4][256];
  uint16_t lut16[4][256];
  for (int ch = 0; ch < c; ch++) {
    float m = mean ? mean[ch] : 0.f, s = std ? std[ch] : 1.f;
    SP_CHECK(s != 0.f, "normalise: std of channel %d is zero", ch);
    for (int v = 0; v < 256; v++) {
      lut[ch][v] = ((float)v / 255.f - m) / s;
      lut16[ch][v] = sp_f32_to_bf16(lut[ch][v]);
    }
  }
  const int64_t planes = n * c;
  for (int64_t p = 0; p < planes; p++) {
    const int ch = (int)(p % c);
    const uint8_t *s = src + p * hw;
    if (dtype == SP_F32) {
      float *o = (float *)out + p * hw;
      const float *t = lut[ch];
      for (int64_t i = 0; i < hw; i++) o[i] = t[s[i]];
    } else {
      uint16_t *o = (uint16_t *)out + p * hw;
      const uint16_t *t = lut16[ch];
      for (int64_t i = 0; i < hw; i++) o[i] = t[s[i]];
    }
  }
  return 0;
}

int sp_batch_normalize(const sp_batch *b, const float *mean, const float *std, sp_dtype dtype, void *out) {
  SP_CHECK(b && out, "normalise: no batch or output");
  return sp_normalize_u8(b->pixels, b->n, b->c, (int64_t)b->h * b->w, mean, std, dtype, out);
}
