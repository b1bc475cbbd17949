/* Helpers for the data tests: write JPEG/PNG/text files into temp dirs and
 * build small synthetic caches. Header-only (CMake builds test_*.c only). */
#ifndef SPRY_DATA_TESTUTIL_H
#define SPRY_DATA_TESTUTIL_H

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "spry/data.h"
#include "testkit.h"

static inline void tu_write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static inline void tu_write_text(const char *path, const char *text) { tu_write_bytes(path, text, strlen(text)); }

static inline void tu_write_jpeg(const char *path, const uint8_t *rgb, int w, int h, int quality) {
  tjhandle tj = tjInitCompress();
  assert_non_null(tj);
  unsigned char *jpg = NULL;
  unsigned long len = 0;
  assert_int_equal(tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &len, TJSAMP_444, quality, 0), 0);
  tu_write_bytes(path, jpg, len);
  tjFree(jpg);
  tjDestroy(tj);
}

static inline void tu_write_png(const char *path, const uint8_t *rgb, int w, int h) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(p);
  assert_non_null(p);
  assert_non_null(info);
  if (setjmp(png_jmpbuf(p))) fail_msg("libpng write failed");
  png_init_io(p, f);
  png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(p, info);
  for (int y = 0; y < h; y++) png_write_row(p, (png_const_bytep)(rgb + (size_t)y * w * 3));
  png_write_end(p, NULL);
  png_destroy_write_struct(&p, &info);
  fclose(f);
}

/* A smooth RGB background with a bright square dot of radius r at (cx, cy).
 * Every channel spans 0..255 so that global ops (AutoContrast, Equalize)
 * barely change when the dot is added. */
static inline uint8_t *tu_face_image(int w, int h, float cx, float cy, int r) {
  uint8_t *im = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t *p = im + ((size_t)y * w + x) * 3;
      p[0] = (uint8_t)((x * 255) / (w - 1));
      p[1] = (uint8_t)((y * 255) / (h - 1));
      p[2] = (uint8_t)(((x + y) * 255) / (w + h - 2));
      if (abs(x - (int)(cx + 0.5f)) <= r && abs(y - (int)(cy + 0.5f)) <= r) p[0] = p[1] = p[2] = 250;
    }
  return im;
}

/* Intensity-weighted centroid of |a-b| (summed over channels) in a planar
 * image, over a window around the strongest difference. */
static inline void tu_diff_peak(const uint8_t *a, const uint8_t *b, int c, int w, int h, float *px, float *py) {
  int best = -1, bi = 0;
  size_t plane = (size_t)w * h;
  for (size_t i = 0; i < plane; i++) {
    int d = 0;
    for (int ch = 0; ch < c; ch++) d += abs((int)a[ch * plane + i] - (int)b[ch * plane + i]);
    if (d > best) { best = d; bi = (int)i; }
  }
  int bx = bi % w, by = bi / w;
  double sw = 0, sx = 0, sy = 0;
  for (int y = by - 4; y <= by + 4; y++)
    for (int x = bx - 4; x <= bx + 4; x++) {
      if (x < 0 || y < 0 || x >= w || y >= h) continue;
      int d = 0;
      for (int ch = 0; ch < c; ch++) d += abs((int)a[ch * plane + (size_t)y * w + x] - (int)b[ch * plane + (size_t)y * w + x]);
      if (d * 4 < best) continue; /* ignore the faint halo */
      sw += d; sx += (double)d * x; sy += (double)d * y;
    }
  *px = (float)(sx / sw);
  *py = (float)(sy / sw);
}

/* A hand-made cache of n images (size s, 3 channels) with k points each. */
static inline sp_cache *tu_cache_alloc(int n, int s, int k) {
  sp_cache *c = calloc(1, sizeof *c);
  c->n = n; c->size = s; c->channels = 3; c->k = k;
  c->pixels = sp_aligned_alloc((size_t)n * s * s * 3);
  c->points = malloc(sizeof(float) * 2 * (size_t)n * k);
  c->vis = malloc((size_t)n * k);
  c->source = malloc(sizeof(int32_t) * (size_t)n);
  memset(c->vis, 1, (size_t)n * k);
  c->crop = malloc(sizeof(float) * 4 * (size_t)n);
  c->box = malloc(sizeof(float) * 4 * (size_t)n);
  c->box_src = malloc((size_t)n);
  for (int i = 0; i < n; i++) {
    c->source[i] = i;
    const float whole[4] = {0, 0, (float)s, (float)s};
    memcpy(c->crop + 4 * i, whole, sizeof whole), memcpy(c->box + 4 * i, whole, sizeof whole);
    c->box_src[i] = SP_BOXSRC_IMAGE;
  }
  return c;
}

#endif
