/* The own YUV -> RGB path (convert_yuv.c) against the same definition in
 * double precision: each plane resized bilinearly at its own siting, then
 * the colour matrix; crops anywhere in the frame, HWC and CHW, 4:2:0 / 4:2:2
 * / 4:4:4, limited and full range, BT.601 and BT.709. Also known colours,
 * and a loose comparison with libswscale (different filters: catches a wrong
 * matrix or a misplaced window, not rounding). The reader's own tests check
 * that fetched frames equal a full decode; those cannot see a conversion
 * that is wrong the same way both times. */
#include <libavutil/pixfmt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"
#include "video/video_internal.h"

typedef struct {
  int w, h, sx, sy; /* luma size, chroma subsampling shifts */
  uint8_t *p[3];
  int stride[3];
} picture;

static void picture_make(picture *pc, int w, int h, int sx, int sy, uint64_t seed) {
  sp_test_rng rng = {seed};
  pc->w = w, pc->h = h, pc->sx = sx, pc->sy = sy;
  for (int c = 0; c < 3; c++) {
    int pw = c ? (w + (1 << sx) - 1) >> sx : w, ph = c ? (h + (1 << sy) - 1) >> sy : h;
    pc->stride[c] = pw + 13; /* padding, as decoders leave */
    pc->p[c] = malloc((size_t)pc->stride[c] * ph);
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pc->stride[c]; x++) {
        /* Smooth gradients plus noise: both interpolation and matrix show. */
        int v = c == 0 ? 16 + (x * 200 / pw + y * 19 / ph) : 60 + (x * 130 / pw + y * 70 / ph) % 140;
        v += (int)(sp_test_rng_next(&rng) % 25) - 12;
        pc->p[c][(size_t)y * pc->stride[c] + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  }
}

static void picture_free(picture *pc) {
  for (int c = 0; c < 3; c++) free(pc->p[c]);
}

/* Plane sample at fractional position (px, py), bilinear, clamped. */
static double sample(const picture *pc, int c, double px, double py) {
  int pw = c ? (pc->w + (1 << pc->sx) - 1) >> pc->sx : pc->w, ph = c ? (pc->h + (1 << pc->sy) - 1) >> pc->sy : pc->h;
  px = px < 0 ? 0 : px > pw - 1 ? pw - 1 : px;
  py = py < 0 ? 0 : py > ph - 1 ? ph - 1 : py;
  int x0 = (int)floor(px), y0 = (int)floor(py), x1 = x0 + 1 < pw ? x0 + 1 : x0, y1 = y0 + 1 < ph ? y0 + 1 : y0;
  double fx = px - x0, fy = py - y0;
  const uint8_t *p = pc->p[c];
  int s = pc->stride[c];
  double top = p[(size_t)y0 * s + x0] * (1 - fx) + p[(size_t)y0 * s + x1] * fx;
  double bot = p[(size_t)y1 * s + x0] * (1 - fx) + p[(size_t)y1 * s + x1] * fx;
  return top * (1 - fy) + bot * fy;
}

/* The definition: output (X, Y) of the rw x rh resize, chroma sited left
 * horizontally and centred vertically (MPEG-2 / H.264 4:2:0). */
static void reference_pixel(const picture *pc, int rw, int rh, int X, int Y, int full, double kr, double kb,
                            int rgb[3]) {
  double lx = (X + 0.5) * pc->w / rw - 0.5, ly = (Y + 0.5) * pc->h / rh - 0.5;
  double cx = pc->sx ? lx / 2 : lx, cy = pc->sy ? (ly - 0.5) / 2 : ly;
  double y = sample(pc, 0, lx, ly), u = sample(pc, 1, cx, cy) - 128, v = sample(pc, 2, cx, cy) - 128;
  double ys = full ? 1 : 255.0 / 219, cs = full ? 1 : 255.0 / 224, kg = 1 - kr - kb;
  y = (y - (full ? 0 : 16)) * ys, u *= cs, v *= cs;
  double r = y + 2 * (1 - kr) * v, b = y + 2 * (1 - kb) * u;
  double g = y - 2 * kb * (1 - kb) / kg * u - 2 * kr * (1 - kr) / kg * v;
  double c3[3] = {r, g, b};
  for (int i = 0; i < 3; i++) rgb[i] = (int)lround(c3[i] < 0 ? 0 : c3[i] > 255 ? 255 : c3[i]);
}

static int pix_fmt_of(int sx, int sy, int full) {
  if (sx && sy) return full ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P;
  if (sx) return full ? AV_PIX_FMT_YUVJ422P : AV_PIX_FMT_YUV422P;
  return full ? AV_PIX_FMT_YUVJ444P : AV_PIX_FMT_YUV444P;
}

/* Converts pc through the own path into a crop, compares every pixel with
 * the reference; returns the largest difference. */
static int check_case(const picture *pc, int rw, int rh, int ch, int cw, int cy, int cx, int planar, int full, int cs,
                      sp_vconv *conv) {
  int fmt = pix_fmt_of(pc->sx, pc->sy, full);
  assert_true(sp_vconv_yuv_supports(fmt, pc->w, pc->h, rw, rh));
  uint8_t *out = malloc((size_t)ch * cw * 3);
  const uint8_t *src[4] = {pc->p[0], pc->p[1], pc->p[2], NULL};
  int stride[4] = {pc->stride[0], pc->stride[1], pc->stride[2], 0};
  conv->chroma_loc = AVCHROMA_LOC_LEFT;
  assert_int_equal(sp_vconv_scale(conv, src, stride, pc->w, pc->h, fmt, cs, full ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG,
                                  rw, rh, ch, cw, cy, cx, planar, out, "test"),
                   0);
  double kr = cs == AVCOL_SPC_BT709 ? 0.2126 : 0.299, kb = cs == AVCOL_SPC_BT709 ? 0.0722 : 0.114;
  int worst = 0;
  for (int y = 0; y < ch; y++)
    for (int x = 0; x < cw; x++) {
      int want[3];
      reference_pixel(pc, rw, rh, cx + x, cy + y, full, kr, kb, want);
      for (int c = 0; c < 3; c++) {
        int got = planar ? out[(size_t)c * ch * cw + (size_t)y * cw + x] : out[((size_t)y * cw + x) * 3 + c];
        int d = abs(got - want[c]);
        if (d > worst) worst = d;
      }
    }
  free(out);
  return worst;
}

static void test_against_definition(void **state) {
  (void)state;
  const int subs[3][2] = {{1, 1}, {1, 0}, {0, 0}};
  sp_vconv conv = {0};
  for (int s = 0; s < 3; s++) {
    picture pc;
    picture_make(&pc, 70, 54, subs[s][0], subs[s][1], 3 + s);
    /* down, same size, up; crops at the corner, centred, off-centre */
    const int sizes[][2] = {{48, 37}, {70, 54}, {101, 78}};
    for (int z = 0; z < 3; z++) {
      int rw = sizes[z][0], rh = sizes[z][1];
      const int crops[][4] = {{rh, rw, 0, 0}, {30, 30, (rh - 30) / 2, (rw - 30) / 2}, {20, 33, rh - 20, 3}};
      for (int k = 0; k < 3; k++)
        for (int planar = 0; planar < 2; planar++)
          for (int full = 0; full < 2; full++) {
            int cs = full ? AVCOL_SPC_BT709 : AVCOL_SPC_BT470BG;
            int worst =
                check_case(&pc, rw, rh, crops[k][0], crops[k][1], crops[k][2], crops[k][3], planar, full, cs, &conv);
            /* 8-bit weights and 6 fraction bits: within 2 levels of exact. */
            if (worst > 2)
              fail_msg("sub %d,%d %dx%d -> %dx%d crop %dx%d at (%d,%d) planar %d full %d: off by %d", subs[s][0],
                       subs[s][1], pc.w, pc.h, rw, rh, crops[k][1], crops[k][0], crops[k][3], crops[k][2], planar, full,
                       worst);
          }
    }
    picture_free(&pc);
  }
  sp_vconv_free(&conv);
}

/* Flat pictures: black, white and grey map where the matrix says. */
static void test_known_colours(void **state) {
  (void)state;
  const struct {
    int y, u, v, full, r, g, b;
  } cases[] = {
      {16, 128, 128, 0, 0, 0, 0},       {235, 128, 128, 0, 255, 255, 255}, {126, 128, 128, 0, 128, 128, 128},
      {0, 128, 128, 1, 0, 0, 0},        {255, 128, 128, 1, 255, 255, 255}, {81, 90, 240, 0, 255, 0, 0}, /* BT.601 red */
      {145, 54, 34, 0, 0, 255, 0},      {41, 240, 110, 0, 0, 0, 255},
  };
  sp_vconv conv = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t yp[16 * 16], up[8 * 8], vp[8 * 8], out[12 * 12 * 3];
    memset(yp, cases[i].y, sizeof yp);
    memset(up, cases[i].u, sizeof up);
    memset(vp, cases[i].v, sizeof vp);
    const uint8_t *src[4] = {yp, up, vp, NULL};
    int stride[4] = {16, 8, 8, 0};
    assert_int_equal(sp_vconv_scale(&conv, src, stride, 16, 16, AV_PIX_FMT_YUV420P, AVCOL_SPC_BT470BG,
                                    cases[i].full ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG, 12, 12, 12, 12, 0, 0, 0, out,
                                    "test"),
                     0);
    for (int p = 0; p < 12 * 12; p++) {
      assert_true(abs(out[3 * p] - cases[i].r) <= 1);
      assert_true(abs(out[3 * p + 1] - cases[i].g) <= 1);
      assert_true(abs(out[3 * p + 2] - cases[i].b) <= 1);
    }
  }
  sp_vconv_free(&conv);
}

/* Against libswscale (bilinear, accurate rounding): a different filter, so
 * only close on average; a wrong matrix, siting or window is far off. */
static void test_close_to_swscale(void **state) {
  (void)state;
  picture pc;
  picture_make(&pc, 96, 64, 1, 1, 17);
  const uint8_t *src[4] = {pc.p[0], pc.p[1], pc.p[2], NULL};
  int stride[4] = {pc.stride[0], pc.stride[1], pc.stride[2], 0};
  int rw = 84, rh = 56, ch = 40, cw = 50, cy = 9, cx = 20;
  uint8_t *a = malloc((size_t)ch * cw * 3), *b = malloc((size_t)ch * cw * 3);
  sp_vconv own = {0}, sws = {0};
  sws.use_swscale = 1;
  assert_int_equal(sp_vconv_scale(&own, src, stride, 96, 64, AV_PIX_FMT_YUV420P, AVCOL_SPC_BT470BG, AVCOL_RANGE_MPEG,
                                  rw, rh, ch, cw, cy, cx, 1, a, "test"),
                   0);
  assert_int_equal(sp_vconv_scale(&sws, src, stride, 96, 64, AV_PIX_FMT_YUV420P, AVCOL_SPC_BT470BG, AVCOL_RANGE_MPEG,
                                  rw, rh, ch, cw, cy, cx, 1, b, "test"),
                   0);
  double sum = 0;
  for (int i = 0; i < ch * cw * 3; i++) sum += abs(a[i] - b[i]);
  print_message("mean |own - swscale| = %.2f levels\n", sum / (ch * cw * 3));
  assert_true(sum / (ch * cw * 3) < 6);
  free(a), free(b);
  sp_vconv_free(&own), sp_vconv_free(&sws);
  picture_free(&pc);
}

/* Downscales past 2x and other pixel formats go to libswscale. */
static void test_routing(void **state) {
  (void)state;
  assert_true(sp_vconv_yuv_supports(AV_PIX_FMT_YUV420P, 340, 256, 297, 224));
  assert_true(sp_vconv_yuv_supports(AV_PIX_FMT_YUV420P, 112, 112, 224, 224));
  assert_false(sp_vconv_yuv_supports(AV_PIX_FMT_YUV420P, 1280, 720, 455, 256));
  assert_false(sp_vconv_yuv_supports(AV_PIX_FMT_YUV420P10LE, 340, 256, 297, 224));
  assert_false(sp_vconv_yuv_supports(AV_PIX_FMT_RGB24, 340, 256, 297, 224));
  assert_false(sp_vconv_yuv_supports(AV_PIX_FMT_PAL8, 340, 256, 297, 224));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_definition),
      cmocka_unit_test(test_known_colours),
      cmocka_unit_test(test_close_to_swscale),
      cmocka_unit_test(test_routing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
