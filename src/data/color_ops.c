/* RandAugment's 14 operations: the magnitude table (torchvision's, itself the
 * RandAugment paper's ranges over 31 bins), the geometric ones as affine maps
 * (folded into the single warp by augment.c) and the pixel ones on a planar
 * uint8 image in place. Pixel ops follow torchvision's tensor semantics:
 * blend(img, degenerate, f) = f*img + (1-f)*degenerate, clamped. */
#include <math.h>
#include <string.h>

/* These loops are the per-pixel cost of RandAugment: let GCC vectorise them
 * fully (the project builds with -O2). */
#pragma GCC optimize("O3")

#include "data/data_internal.h"

static const char *const op_names[SP_RA_NUM_OPS] = {
    "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
    "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize"};

const char *sp_ra_op_name(sp_ra_op op) { return op >= 0 && op < SP_RA_NUM_OPS ? op_names[op] : "?"; }

int sp_ra_is_geometric(sp_ra_op op) { return op >= SP_RA_SHEAR_X && op <= SP_RA_ROTATE; }

int sp_ra_is_signed(sp_ra_op op) { return op >= SP_RA_SHEAR_X && op <= SP_RA_SHARPNESS; }

float sp_ra_magnitude(sp_ra_op op, int m, int size) {
  if (m < 0) m = 0;
  if (m > 30) m = 30;
  float t = (float)m / 30.f; /* linspace(lo, hi, 31)[m] */
  switch (op) {
    case SP_RA_SHEAR_X:
    case SP_RA_SHEAR_Y: return 0.3f * t;
    case SP_RA_TRANSLATE_X:
    case SP_RA_TRANSLATE_Y: return 150.f / 331.f * (float)size * t;
    case SP_RA_ROTATE: return 30.f * t;
    case SP_RA_BRIGHTNESS:
    case SP_RA_COLOR:
    case SP_RA_CONTRAST:
    case SP_RA_SHARPNESS: return 0.9f * t;
    case SP_RA_POSTERIZE: return (float)(8 - (int)lrintf((float)m / 7.5f)); /* bits kept */
    case SP_RA_SOLARIZE: return 255.f * (1.f - t);                          /* threshold */
    default: return 0.f;
  }
}

sp_affine sp_ra_geometry(sp_ra_op op, float v, int s) {
  switch (op) {
    /* torchvision shears about the top-left corner: x' = x - v*y. */
    case SP_RA_SHEAR_X: {
      sp_affine a = {{1, -v, 0, 0, 1, 0}};
      return a;
    }
    case SP_RA_SHEAR_Y: {
      sp_affine a = {{1, 0, 0, -v, 1, 0}};
      return a;
    }
    case SP_RA_TRANSLATE_X: return sp_affine_translate(v, 0);
    case SP_RA_TRANSLATE_Y: return sp_affine_translate(0, v);
    case SP_RA_ROTATE: {
      double cx = (s - 1) * 0.5;
      /* Counter-clockwise on screen (y points down), about the centre. */
      sp_affine r = sp_affine_rotate_deg(-v);
      return sp_affine_then(sp_affine_then(sp_affine_translate(-cx, -cx), r), sp_affine_translate(cx, cx));
    }
    default: return sp_affine_identity();
  }
}

static inline uint8_t clamp_u8(float v) { return v <= 0.f ? 0 : v >= 255.f ? 255 : (uint8_t)(v + 0.5f); }

static void apply_lut(uint8_t *p, size_t n, const uint8_t *lut) {
  for (size_t i = 0; i < n; i++) p[i] = lut[p[i]];
}

static void equalize_plane(uint8_t *p, int hw) {
  int hist[256] = {0};
  for (int i = 0; i < hw; i++) hist[p[i]]++;
  int last = 255;
  while (last > 0 && hist[last] == 0) last--;
  int step = (hw - hist[last]) / 255;
  if (step == 0) return;
  uint8_t lut[256];
  int cum = 0;
  for (int v = 0; v < 256; v++) {
    int l = (cum + step / 2) / step; /* lut is shifted by one bin */
    lut[v] = (uint8_t)(l > 255 ? 255 : l);
    cum += hist[v];
  }
  apply_lut(p, (size_t)hw, lut);
}

static void sharpness(uint8_t *chw, int c, int hw, int w, float f) {
  int h = hw / w;
  const int fi = (int)lrintf(f * 256.f); /* blend factor in 1/256 */
  uint8_t rows[3][4096];
  if (w > 4096 || h < 3) return;
  for (int ch = 0; ch < c; ch++) {
    uint8_t *p = chw + (size_t)ch * hw;
    /* Keep the original neighbours of the row being written. */
    memcpy(rows[0], p, (size_t)w);
    memcpy(rows[1], p + w, (size_t)w);
    for (int y = 1; y < h - 1; y++) {
      memcpy(rows[(y + 1) % 3], p + (size_t)(y + 1) * w, (size_t)w);
      const uint8_t *a = rows[(y - 1) % 3], *m = rows[y % 3], *b = rows[(y + 1) % 3];
      uint8_t *o = p + (size_t)y * w;
      for (int x = 1; x < w - 1; x++) {
        int sum = a[x - 1] + a[x] + a[x + 1] + m[x - 1] + 5 * m[x] + m[x + 1] + b[x - 1] + b[x] + b[x + 1];
        int blur = ((sum + 6) * 5042) >> 16; /* == (sum + 6) / 13 for these sums (checked exhaustively) */
        int v = (blur * 256 + fi * (m[x] - blur) + 128) >> 8;
        o[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
}

void sp_color_op(sp_ra_op op, uint8_t *chw, int c, int hw, int w, float v) {
  uint8_t lut[256];
  size_t n = (size_t)c * hw;
  switch (op) {
    case SP_RA_BRIGHTNESS: {
      float f = 1.f + v;
      for (int i = 0; i < 256; i++) lut[i] = clamp_u8((float)i * f);
      apply_lut(chw, n, lut);
      return;
    }
    case SP_RA_CONTRAST: {
      float f = 1.f + v;
      uint8_t g[4096];
      uint64_t sum = 0;
      /* Mean of the grayscale image, in chunks (no allocation per call). */
      for (int off = 0; off < hw; off += 4096) {
        int m = hw - off < 4096 ? hw - off : 4096;
        if (c == 1) {
          for (int i = 0; i < m; i++) sum += chw[off + i];
          continue;
        }
        const uint8_t *r = chw + off, *gg = chw + hw + off, *b = chw + 2 * (size_t)hw + off;
        for (int i = 0; i < m; i++) g[i] = (uint8_t)((19595u * r[i] + 38470u * gg[i] + 7471u * b[i] + 32768u) >> 16);
        for (int i = 0; i < m; i++) sum += g[i];
      }
      float mean = (float)sum / (float)hw;
      for (int i = 0; i < 256; i++) lut[i] = clamp_u8(mean + f * ((float)i - mean));
      apply_lut(chw, n, lut);
      return;
    }
    case SP_RA_COLOR: {
      if (c != 3) return;
      const int fi = (int)lrintf((1.f + v) * 256.f); /* blend factor in 1/256 */
      uint8_t *r = chw, *g = chw + hw, *b = chw + 2 * (size_t)hw;
      for (int i = 0; i < hw; i++) {
        int gray = (int)((19595u * r[i] + 38470u * g[i] + 7471u * b[i] + 32768u) >> 16);
        int vr = (gray * 256 + fi * (r[i] - gray) + 128) >> 8;
        int vg = (gray * 256 + fi * (g[i] - gray) + 128) >> 8;
        int vb = (gray * 256 + fi * (b[i] - gray) + 128) >> 8;
        r[i] = (uint8_t)(vr < 0 ? 0 : vr > 255 ? 255 : vr);
        g[i] = (uint8_t)(vg < 0 ? 0 : vg > 255 ? 255 : vg);
        b[i] = (uint8_t)(vb < 0 ? 0 : vb > 255 ? 255 : vb);
      }
      return;
    }
    case SP_RA_SHARPNESS: sharpness(chw, c, hw, w, 1.f + v); return;
    case SP_RA_POSTERIZE: {
      int bits = (int)v;
      uint8_t mask = (uint8_t)(0xFFu << (8 - (bits < 0 ? 0 : bits > 8 ? 8 : bits)));
      for (int i = 0; i < 256; i++) lut[i] = (uint8_t)(i & mask);
      apply_lut(chw, n, lut);
      return;
    }
    case SP_RA_SOLARIZE:
      for (int i = 0; i < 256; i++) lut[i] = (float)i >= v ? (uint8_t)(255 - i) : (uint8_t)i;
      apply_lut(chw, n, lut);
      return;
    case SP_RA_AUTOCONTRAST:
      for (int ch = 0; ch < c; ch++) {
        uint8_t *p = chw + (size_t)ch * hw, lo = 255, hi = 0;
        for (int i = 0; i < hw; i++) {
          lo = p[i] < lo ? p[i] : lo;
          hi = p[i] > hi ? p[i] : hi;
        }
        if (hi <= lo) continue;
        float s = 255.f / (float)(hi - lo);
        for (int i = 0; i < 256; i++) lut[i] = clamp_u8(((float)i - lo) * s);
        apply_lut(p, (size_t)hw, lut);
      }
      return;
    case SP_RA_EQUALIZE:
      for (int ch = 0; ch < c; ch++) equalize_plane(chw + (size_t)ch * hw, hw);
      return;
    default: return; /* Identity and the geometric ops do nothing to pixels here */
  }
}
