/* Region JPEG decoding (jpeg_crop.c) and the cache build on top of it:
 *   - every requested pixel of a region equals TurboJPEG's whole-image
 *     decode at the same M/8 scale (all M, 4:2:0 / 4:2:2 / 4:4:4 / gray
 *     sources, odd sizes, regions at odd iMCU offsets and over the borders);
 *   - points still land on their pixels through cropped, fractionally scaled
 *     decodes, also for crops that hang over the image border, in RGB and
 *     gray; the crop equals the whole-image decode warped the same way;
 *   - truncated and corrupt files fail with a message naming the file. */
#include <math.h>

#include "data/data_internal.h"
#include "data_testutil.h"

/* Texture with every spatial frequency, so any misplaced block, column or
 * chroma sample shows up as a pixel difference. */
static uint8_t *textured(int w, int h, int c) {
  uint8_t *im = malloc((size_t)w * h * c);
  uint32_t s = 12345;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) {
        s = s * 1664525u + 1013904223u;
        int v = (x * (3 + k)) + (y * (5 - k)) + (int)((s >> 24) & 63) + ((x / 9 + y / 7) % 2) * 60;
        im[((size_t)y * w + x) * c + k] = (uint8_t)(v & 255);
      }
  return im;
}

/* quality < 0: progressive with quality -quality. */
static uint8_t *encode(const uint8_t *px, int w, int h, int c, int samp, int quality, unsigned long *len) {
  tjhandle tj = tjInitCompress();
  assert_non_null(tj);
  unsigned char *jpg = NULL;
  const int flags = quality < 0 ? TJFLAG_PROGRESSIVE : 0;
  assert_int_equal(
      tjCompress2(tj, px, w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &jpg, len, samp, abs(quality), flags), 0);
  tjDestroy(tj);
  uint8_t *copy = malloc(*len);
  memcpy(copy, jpg, *len);
  tjFree(jpg);
  return copy;
}

/* The reference: TurboJPEG (the decoder the cache used before) on the whole
 * image at num/8 with the fast IDCT. */
static uint8_t *tj_full(const uint8_t *jpg, unsigned long len, int c, int num, int *sw, int *sh) {
  tjhandle tj = tjInitDecompress();
  assert_non_null(tj);
  int w, h, sub, cs;
  assert_int_equal(tjDecompressHeader3(tj, jpg, len, &w, &h, &sub, &cs), 0);
  tjscalingfactor sf = {num, 8};
  *sw = TJSCALED(w, sf);
  *sh = TJSCALED(h, sf);
  uint8_t *px = malloc((size_t)*sw * *sh * c);
  assert_int_equal(tjDecompress2(tj, jpg, len, px, *sw, 0, *sh, c == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_FASTDCT), 0);
  tjDestroy(tj);
  return px;
}

static void regions_equal_full_decode(void **state) {
  (void)state;
  const int samps[4] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY};
  /* The last one progressive (multi-scan: the library buffers the whole
   * image; skipping and cropping must still give the same pixels). */
  const int sizes[4][2] = {{203, 157}, {640, 480}, {17, 9}, {203, 157}};
  sp_jpeg_dec *d = sp_jpeg_dec_new();
  assert_non_null(d);
  uint32_t rnd = 99;
  int checked = 0;
  for (int si = 0; si < 4; si++)
    for (int sa = 0; sa < 4; sa++) {
      const int w = sizes[si][0], h = sizes[si][1], in_c = samps[sa] == TJSAMP_GRAY ? 1 : 3;
      uint8_t *px = textured(w, h, in_c);
      unsigned long len;
      uint8_t *jpg = encode(px, w, h, in_c, samps[sa], si == 3 ? -90 : 90, &len);
      for (int c = 1; c <= 3; c += 2)
        for (int num = 1; num <= 8; num++) {
          int sw, sh;
          uint8_t *ref = tj_full(jpg, len, c, num, &sw, &sh);
          const int nreg = si == 1 ? 6 : 14;
          for (int t = 0; t < nreg; t++) {
            int x0, y0, x1, y1;
            if (t == 0) { x0 = 0; y0 = 0; x1 = sw; y1 = sh; }               /* whole image */
            else if (t == 1) { x0 = -7; y0 = -3; x1 = sw + 5; y1 = sh + 9; } /* beyond every border */
            else {
              rnd = rnd * 1103515245u + 12345u;
              x0 = (int)(rnd >> 8) % (sw + 4) - 2;
              rnd = rnd * 1103515245u + 12345u;
              y0 = (int)(rnd >> 8) % (sh + 4) - 2;
              rnd = rnd * 1103515245u + 12345u;
              x1 = x0 + 1 + (int)(rnd >> 8) % (sw / 2 + 2);
              rnd = rnd * 1103515245u + 12345u;
              y1 = y0 + 1 + (int)(rnd >> 8) % (sh / 2 + 2);
            }
            int hw, hh;
            assert_int_equal(sp_jpeg_dec_header(d, jpg, len, "mem.jpg", &hw, &hh), 0);
            assert_int_equal(hw, w);
            assert_int_equal(hh, h);
            sp_jpeg_region reg;
            if (sp_jpeg_dec_region(d, c, num, x0, y0, x1, y1, &reg) != 0) fail_msg("%s", sp_last_error());
            assert_int_equal(reg.sw, sw);
            assert_int_equal(reg.sh, sh);
            assert_int_equal(reg.c, c);
            /* The clamped request must lie inside what came back. */
            int cx0 = x0 < 0 ? 0 : x0 > sw - 1 ? sw - 1 : x0, cy0 = y0 < 0 ? 0 : y0 > sh - 1 ? sh - 1 : y0;
            int cx1 = x1 > sw ? sw : x1 < cx0 + 1 ? cx0 + 1 : x1, cy1 = y1 > sh ? sh : y1 < cy0 + 1 ? cy0 + 1 : y1;
            assert_true(reg.x0 <= cx0 && reg.x0 + reg.w >= cx1);
            assert_true(reg.y0 <= cy0 && reg.y0 + reg.h >= cy1);
            for (int y = cy0; y < cy1; y++) {
              const uint8_t *a = reg.px + ((size_t)(y - reg.y0) * reg.w + (cx0 - reg.x0)) * c;
              const uint8_t *b = ref + ((size_t)y * sw + cx0) * c;
              if (memcmp(a, b, (size_t)(cx1 - cx0) * c) != 0)
                fail_msg("%dx%d samp %d c %d scale %d/8 region [%d,%d)x[%d,%d): row %d differs", w, h, samps[sa], c,
                         num, x0, x1, y0, y1, y);
            }
            checked++;
          }
          free(ref);
        }
      free(jpg);
      free(px);
    }
  assert_true(checked > 500);
  sp_jpeg_dec_free(d);
}

/* A dot lands where the scale map says, at every M/8 and through regions
 * at odd offsets or over the border: u_scaled = (u + 0.5) * M/8 - 0.5. */
static void dots_through_fractional_scales(void **state) {
  (void)state;
  const int w = 203, h = 157;
  const int dots[4][2] = {{101, 77}, {3, 2}, {199, 153}, {57, 130}};
  sp_jpeg_dec *d = sp_jpeg_dec_new();
  for (int di = 0; di < 4; di++)
    for (int gray = 0; gray < 2; gray++) {
      const int c = gray ? 1 : 3;
      uint8_t *im = malloc((size_t)w * h * c);
      memset(im, 40, (size_t)w * h * c);
      for (int y = dots[di][1] - 2; y <= dots[di][1] + 2; y++)
        for (int x = dots[di][0] - 2; x <= dots[di][0] + 2; x++) memset(im + ((size_t)y * w + x) * c, 250, (size_t)c);
      unsigned long len;
      uint8_t *jpg = encode(im, w, h, c, gray ? TJSAMP_GRAY : TJSAMP_420, 97, &len);
      for (int num = 2; num <= 8; num++) {
        const double k = num / 8.0, ex = (dots[di][0] + 0.5) * k - 0.5, ey = (dots[di][1] + 0.5) * k - 0.5;
        /* A region around the dot, shifted off the iMCU grid by num. */
        int x0 = (int)ex - 9 + num, y0 = (int)ey - 11 + num;
        int ww, hh;
        assert_int_equal(sp_jpeg_dec_header(d, jpg, len, "dot.jpg", &ww, &hh), 0);
        sp_jpeg_region r;
        assert_int_equal(sp_jpeg_dec_region(d, c, num, x0, y0, x0 + 21, y0 + 23, &r), 0);
        double sw = 0, sx = 0, sy = 0;
        for (int y = 0; y < r.h; y++)
          for (int x = 0; x < r.w; x++) {
            double v = r.px[((size_t)y * r.w + x) * c] - 60.0; /* above the background and its ringing */
            if (v <= 0) continue;
            sw += v; sx += v * (x + r.x0); sy += v * (y + r.y0);
          }
        assert_true(sw > 0);
        if (hypot(sx / sw - ex, sy / sw - ey) > 0.3)
          fail_msg("dot (%d,%d) %s at %d/8: expected (%.2f, %.2f), found (%.2f, %.2f)", dots[di][0], dots[di][1],
                   gray ? "gray" : "rgb", num, ex, ey, sx / sw, sy / sw);
      }
      free(jpg);
      free(im);
    }
  sp_jpeg_dec_free(d);
}

static void damaged_files_name_the_file(void **state) {
  (void)state;
  uint8_t *px = textured(96, 64, 3);
  unsigned long len;
  uint8_t *jpg = encode(px, 96, 64, 3, TJSAMP_420, 90, &len);
  sp_jpeg_dec *d = sp_jpeg_dec_new();
  int w, h;
  sp_jpeg_region reg;
  /* Cut in half: the header parses, but the decode fails even when the
   * region needed lies in the intact part. */
  assert_int_equal(sp_jpeg_dec_header(d, jpg, len / 2, "cut.jpg", &w, &h), 0);
  assert_int_equal(sp_jpeg_dec_region(d, 3, 8, 0, 0, 96, 8, &reg), -1);
  assert_non_null(strstr(sp_last_error(), "cut.jpg"));
  /* A long trailer after the end marker is not a cut. */
  uint8_t *trailer = malloc(len + 300);
  memcpy(trailer, jpg, len);
  memset(trailer + len, 0x5A, 300);
  assert_int_equal(sp_jpeg_dec_header(d, trailer, len + 300, "trailer.jpg", &w, &h), 0);
  if (sp_jpeg_dec_region(d, 3, 8, 0, 0, 96, 8, &reg) != 0) fail_msg("%s", sp_last_error());
  free(trailer);
  /* Header cut: a libjpeg error, caught, naming the file. */
  assert_int_equal(sp_jpeg_dec_header(d, jpg, 40, "head.jpg", &w, &h), -1);
  assert_non_null(strstr(sp_last_error(), "head.jpg"));
  /* Entropy data replaced by junk inside the region: error (or warning,
   * which is fatal), not invented pixels. */
  uint8_t *bad = malloc(len);
  memcpy(bad, jpg, len);
  size_t sos = 0;
  for (size_t i = 2; i + 1 < len; i++)
    if (bad[i] == 0xFF && bad[i + 1] == 0xDA) { sos = i; break; }
  assert_true(sos > 0);
  for (size_t i = sos + 20; i < len - 2; i++) bad[i] = (uint8_t)(i * 37);
  for (size_t i = sos + 20; i < len - 2; i++)
    if (bad[i] == 0xFF) bad[i] = 0xFE; /* no accidental markers */
  bad[sos + 30] = 0xFF;
  bad[sos + 31] = 0xD0 + 3; /* an unexpected restart marker */
  assert_int_equal(sp_jpeg_dec_header(d, bad, len, "junk.jpg", &w, &h), 0);
  assert_int_equal(sp_jpeg_dec_region(d, 3, 8, 0, 0, 96, 64, &reg), -1);
  assert_non_null(strstr(sp_last_error(), "junk.jpg"));
  /* The decoder recovers: the intact file decodes next. */
  assert_int_equal(sp_jpeg_dec_header(d, jpg, len, "ok.jpg", &w, &h), 0);
  assert_int_equal(sp_jpeg_dec_region(d, 3, 5, 10, 10, 30, 30, &reg), 0);
  /* A region without a header, bad scale, bad channels. */
  assert_int_equal(sp_jpeg_dec_region(d, 3, 8, 0, 0, 4, 4, &reg), -1);
  assert_int_equal(sp_jpeg_dec_header(d, jpg, len, "ok.jpg", &w, &h), 0);
  assert_int_equal(sp_jpeg_dec_region(d, 3, 9, 0, 0, 4, 4, &reg), -1);
  assert_int_equal(sp_jpeg_dec_header(d, jpg, len, "ok.jpg", &w, &h), 0);
  assert_int_equal(sp_jpeg_dec_region(d, 2, 8, 0, 0, 4, 4, &reg), -1);
  sp_jpeg_dec_free(d);
  free(bad);
  free(jpg);
  free(px);
}

/* IMM-like files: a dark image with a bright dot at point 0; points 1, 2 set
 * the crop's size (side = 1.5 x bbox) and place. 4:2:0 like the IMM JPEGs. */
typedef struct {
  int w, h;
  float p[6];
} dot_case;

static void write_case(const char *dir, int i, const dot_case *dc) {
  char path[1024], text[512];
  /* Flat dark background (the dot must be the only bright thing, also near
   * the borders) and a 5x5 dot centred on point 0 (integer coordinates). */
  uint8_t *im = malloc((size_t)dc->w * dc->h * 3);
  memset(im, 40, (size_t)dc->w * dc->h * 3);
  for (int y = (int)dc->p[1] - 2; y <= (int)dc->p[1] + 2; y++)
    for (int x = (int)dc->p[0] - 2; x <= (int)dc->p[0] + 2; x++) memset(im + ((size_t)y * dc->w + x) * 3, 250, 3);
  unsigned long len;
  uint8_t *jpg = encode(im, dc->w, dc->h, 3, TJSAMP_420, 97, &len);
  snprintf(path, sizeof path, "%s/%02d-1m.jpg", dir, i + 1);
  tu_write_bytes(path, jpg, len);
  free(jpg);
  free(im);
  snprintf(path, sizeof path, "%s/%02d-1m.dat", dir, i + 1);
  snprintf(text, sizeof text, "1 %g %g\n2 %g %g\n3 %g %g\n", dc->p[0], dc->p[1], dc->p[2], dc->p[3], dc->p[4],
           dc->p[5]);
  tu_write_text(path, text);
}

/* Centroid of the bright plateau nearest the brightest pixel (c channels). */
static void find_dot(const uint8_t *px, int S, int c, double *dx, double *dy) {
  int best = -1, bi = 0;
  for (int j = 0; j < S * S; j++) {
    int v = 0;
    for (int k = 0; k < c; k++) v += px[c * j + k];
    if (v > best) { best = v; bi = j; }
  }
  const double bg = 40.0 * c;
  double sw = 0, sx = 0, sy = 0;
  int bx = bi % S, by = bi / S;
  for (int yy = by - 10; yy <= by + 10; yy++)
    for (int xx = bx - 10; xx <= bx + 10; xx++) {
      if (xx < 0 || yy < 0 || xx >= S || yy >= S) continue;
      double v = -bg;
      for (int k = 0; k < c; k++) v += px[((size_t)yy * S + xx) * c + k];
      if (v * 2 < best - bg) continue;
      sw += v; sx += v * xx; sy += v * yy;
    }
  *dx = sx / sw;
  *dy = sy / sw;
}

/* The crop as the whole image decoded at num/8 and warped with the same
 * map: the region decode must give the same crop (up to the warp's
 * fixed-point rounding, which may move a value by 1). */
static void compare_with_whole_decode(const sp_cache *c, const char *img_path, int i, int ch) {
  uint8_t *buf;
  size_t len;
  assert_int_equal(sp_read_file(img_path, &buf, &len), 0);
  const float *crop = c->crop + (size_t)i * 4;
  const int S = c->size;
  assert_float_equal(crop[2], crop[3], 1e-6); /* a square around a box */
  int num = 1; /* the build's rule: the smallest of 1/8, 2/8, 4/8, 8/8 keeping the crop >= S */
  while (num < 8 && crop[2] * num / 8.0 < S) num *= 2;
  int sw, sh;
  uint8_t *full = tj_full(buf, (unsigned long)len, ch, num, &sw, &sh);
  double r = S / (double)crop[2], ks = num / 8.0;
  sp_affine fwd = {{r, 0, (0.5 - crop[0]) * r - 0.5, 0, r, (0.5 - crop[1]) * r - 0.5}}, inv;
  assert_int_equal(sp_affine_invert(fwd, &inv), 0);
  sp_affine to_scaled = {{ks, 0, 0.5 * ks - 0.5, 0, ks, 0.5 * ks - 0.5}};
  sp_affine m = sp_affine_then(inv, to_scaled);
  uint8_t *want = malloc((size_t)S * S * ch);
  sp_warp_affine_u8(full, sw, sh, ch, want, S, S, 0, &m, 0);
  const uint8_t *got = c->pixels + (size_t)i * S * S * ch;
  int maxd = 0;
  for (size_t j = 0; j < (size_t)S * S * ch; j++) {
    int dd = abs((int)got[j] - (int)want[j]);
    if (dd > maxd) maxd = dd;
  }
  if (maxd > 1) fail_msg("%s: crop differs from the whole-image decode by %d (scale %d/8)", img_path, maxd, num);
  free(want);
  free(full);
  free(buf);
}

static void dots_through_cropped_scaled_decodes(void **state) {
  (void)state;
  /* Face box 100 px wide -> crop side 150 (margin 0.25). The working sizes
   * pick the scales 1/8 (18), 2/8 (37), 4/8 (40..75) and 8/8 (94..161, the
   * last upsampling). Crops at odd offsets, and hanging over the left/top
   * and right/bottom borders. */
  const dot_case cases[] = {
      {640, 480, {333.0f, 251.0f, 283.0f, 201.0f, 383.0f, 301.0f}}, /* inside, odd offset */
      {640, 480, {21.0f, 14.0f, 7.0f, 3.0f, 107.0f, 103.0f}},       /* over the top-left corner */
      {641, 479, {622.0f, 466.0f, 535.0f, 377.0f, 635.0f, 477.0f}}, /* over the bottom-right, odd size */
      {333, 141, {171.0f, 66.0f, 121.7f, 20.2f, 221.7f, 120.2f}},   /* over the top and bottom, fractional box */
      {200, 150, {100.0f, 75.0f, 50.0f, 25.0f, 150.0f, 125.0f}},    /* the crop is the image, nearly */
  };
  const int ncase = (int)(sizeof cases / sizeof cases[0]);
  char dir[512], path[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  for (int i = 0; i < ncase; i++) write_case(dir, i, &cases[i]);
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, ncase);
  const int sizes[] = {18, 37, 40, 56, 75, 94, 112, 131, 150, 161};
  for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
    for (int ch = 1; ch <= 3; ch += 2) {
      if (sp_test_sanitized() && si % 3 != 1) continue; /* fewer under ASan: same paths */
      sp_crop_config cc = sp_crop_config_default();
      cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
      cc.size = sizes[si];
      cc.channels = ch;
      cc.threads = 2;
      sp_cache *c = sp_cache_build(&ds, &cc);
      assert_non_null(c);
      assert_int_equal(c->n, ncase);
      const int S = c->size;
      for (int i = 0; i < c->n; i++) {
        snprintf(path, sizeof path, "%s/%02d-1m.jpg", dir, c->source[i] + 1);
        compare_with_whole_decode(c, path, i, ch);
        double dx, dy;
        find_dot(c->pixels + (size_t)i * S * S * ch, S, ch, &dx, &dy);
        float x = c->points[(size_t)i * c->k * 2], y = c->points[(size_t)i * c->k * 2 + 1];
        /* The dot (5 px wide in the source) shrinks to under a pixel at the
         * smallest sizes: allow for its blur there. */
        double tol = S >= 56 ? 0.75 : 1.0;
        if (hypot(dx - x, dy - y) > tol)
          fail_msg("size %d ch %d sample %d: point 0 at (%.2f, %.2f), dot at (%.2f, %.2f)", S, ch, i, x, y, dx, dy);
      }
      sp_cache_free(c);
    }
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

/* The real IMM files: every crop equals the whole-image decode warped the
 * same way, and the points stay inside. */
static void real_imm_crops_match_whole_decode(void **state) {
  (void)state;
  char dir[1024];
  if (!sp_test_data_path("imm_face_db", dir, sizeof dir)) skip();
  sp_dataset ds, va;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(sp_dataset_split_identity(&ds, SP_SPLIT_VAL, 0.2, &va), 0);
  const int sizes[2] = {224, 97};
  for (int t = 0; t < 2; t++) {
    sp_crop_config cc = sp_crop_config_default();
    cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
    cc.size = sizes[t];
    cc.channels = t ? 1 : 3;
    sp_cache *c = sp_cache_build(&va, &cc);
    assert_non_null(c);
    assert_int_equal(c->n, va.n);
    const int step = sp_test_sanitized() ? 12 : 3;
    for (int i = 0; i < c->n; i += step) compare_with_whole_decode(c, va.s[c->source[i]].image, i, cc.channels);
    sp_cache_free(c);
  }
  sp_dataset_free(&va);
  sp_dataset_free(&ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(regions_equal_full_decode),
      cmocka_unit_test(dots_through_fractional_scales),
      cmocka_unit_test(damaged_files_name_the_file),
      cmocka_unit_test(dots_through_cropped_scaled_decodes),
      cmocka_unit_test(real_imm_crops_match_whole_decode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
