/* Augmentation moves points like pixels: draw a bright dot at a point, apply
 * an op (or the full random pipeline), find the dot in the difference with
 * the same op applied to the dot-free image, and compare with where the
 * transformed point says it is. */
#include <math.h>

#include "data_testutil.h"
#include "spry/rng.h"

#define S 96

/* HWC image with a smooth background and optionally a dot at (x, y). */
static void make_image(uint8_t *hwc, int with_dot, float x, float y) {
  uint8_t *im = tu_face_image(S, S, x, y, with_dot ? 1 : -1);
  memcpy(hwc, im, S * S * 3);
  free(im);
}

static void check_op(sp_ra_op op, int sign, int magnitude, float x, float y) {
  uint8_t bg[S * S * 3], dot[S * S * 3], out_bg[S * S * 3], out_dot[S * S * 3];
  make_image(bg, 0, x, y);
  make_image(dot, 1, x, y);
  float pts[2] = {roundf(x), roundf(y)}, unused[2] = {0, 0};
  sp_augment_apply_ops(bg, S, 3, &op, &sign, 1, magnitude, unused, 1, out_bg);
  sp_augment_apply_ops(dot, S, 3, &op, &sign, 1, magnitude, pts, 1, out_dot);
  float px, py;
  tu_diff_peak(out_dot, out_bg, 3, S, S, &px, &py);
  double err = hypot(px - pts[0], py - pts[1]);
  if (err > 0.75)
    fail_msg("%s sign %d m %d: point says (%.2f, %.2f), dot found at (%.2f, %.2f)", sp_ra_op_name(op), sign,
             magnitude, pts[0], pts[1], px, py);
}

static void every_op_moves_points_with_pixels(void **state) {
  (void)state;
  for (int op = 0; op < SP_RA_NUM_OPS; op++)
    for (int sign = -1; sign <= 1; sign += 2)
      for (int m = 5; m <= 9; m += 4) check_op((sp_ra_op)op, sign, m, 40, 52);
}

static void geometric_ops_do_move(void **state) {
  (void)state;
  /* Guard against a test that passes because nothing moves. */
  sp_ra_op ops[5] = {SP_RA_SHEAR_X, SP_RA_SHEAR_Y, SP_RA_TRANSLATE_X, SP_RA_TRANSLATE_Y, SP_RA_ROTATE};
  for (int i = 0; i < 5; i++) {
    float pts[2] = {30, 60};
    uint8_t im[S * S * 3], out[S * S * 3];
    make_image(im, 1, 30, 60);
    int sign = 1;
    sp_augment_apply_ops(im, S, 3, &ops[i], &sign, 1, 9, pts, 1, out);
    assert_true(hypot(pts[0] - 30, pts[1] - 60) > 2);
  }
  /* Magnitudes follow torchvision's table (31 bins). */
  assert_float_equal(sp_ra_magnitude(SP_RA_ROTATE, 30, 224), 30, 1e-5);
  assert_float_equal(sp_ra_magnitude(SP_RA_SHEAR_X, 15, 224), 0.15, 1e-6);
  assert_float_equal(sp_ra_magnitude(SP_RA_TRANSLATE_Y, 30, 331), 150, 1e-3);
  assert_float_equal(sp_ra_magnitude(SP_RA_POSTERIZE, 7, 224), 7, 0);
  assert_float_equal(sp_ra_magnitude(SP_RA_POSTERIZE, 30, 224), 4, 0);
  assert_float_equal(sp_ra_magnitude(SP_RA_SOLARIZE, 0, 224), 255, 0);
  assert_float_equal(sp_ra_magnitude(SP_RA_BRIGHTNESS, 10, 224), 0.3, 1e-6);
}

/* The whole random pipeline (zoom, shift, rotation, flip, RandAugment 2/9):
 * two points with dots of different colours; after a flip the re-indexed
 * point 0 must sit on the dot that was point 1's. */
static void full_pipeline_points_follow_pixels(void **state) {
  (void)state;
  const int C = 80;
  sp_cache *c = tu_cache_alloc(2, C, 2);
  for (int n = 0; n < 2; n++) {
    uint8_t *im = tu_face_image(C, C, 0, 0, -1);
    memcpy(c->pixels + (size_t)n * C * C * 3, im, C * C * 3);
    free(im);
  }
  /* Image 0: red dot at point 0, no dot at point 1; image 1: the reverse. */
  float p[4] = {30, 35, 52, 41};
  for (int n = 0; n < 2; n++) {
    memcpy(c->points + n * 4, p, sizeof p);
    int x = (int)p[2 * n], y = (int)p[2 * n + 1];
    for (int dy = -1; dy <= 1; dy++)
      for (int dx = -1; dx <= 1; dx++) {
        uint8_t *px = c->pixels + (size_t)n * C * C * 3 + ((size_t)(y + dy) * C + x + dx) * 3;
        px[0] = 255; px[1] = 255; px[2] = 255;
      }
  }
  sp_cache *bgc = tu_cache_alloc(1, C, 2);
  uint8_t *im = tu_face_image(C, C, 0, 0, -1);
  memcpy(bgc->pixels, im, C * C * 3);
  free(im);
  memcpy(bgc->points, p, sizeof p);
  sp_scheme sc;
  int flip[2] = {1, 0};
  assert_int_equal(sp_scheme_from_table("pair", 2, flip, &sc), 0);
  sp_augment_config cfg = sp_augment_config_default(S);
  cfg.ra_m = 9;
  int flipped = 0, trials = sp_test_sanitized() ? 40 : 200, checked = 0;
  uint8_t out[S * S * 3], out_bg[S * S * 3];
  for (int t = 0; t < trials; t++) {
    uint64_t key = sp_rng_key(3, 0, (uint64_t)t);
    float pts[4], bgpts[4];
    uint8_t fl[2], bgfl[2];
    for (int n = 0; n < 2; n++) {
      sp_augment_sample(c, n, &cfg, &sc, key, out, pts, fl);
      sp_augment_sample(bgc, 0, &cfg, &sc, key, out_bg, bgpts, bgfl);
      /* Same key, same map: the points of both caches agree. */
      assert_memory_equal(pts, bgpts, sizeof pts);
      /* Where is image n's dot (it was point n before any flip)? */
      int was = n;
      /* After a flip point i holds old point flip[i]: old n is now flip[n]. */
      float mx = pts[2 * was], my = pts[2 * was + 1];
      float fx = pts[2 * flip[was]], fy = pts[2 * flip[was] + 1];
      if (fl[0] & SP_PT_OUTSIDE || fl[1] & SP_PT_OUTSIDE) continue;
      float dx, dy;
      tu_diff_peak(out, out_bg, 3, S, S, &dx, &dy);
      double e_same = hypot(dx - mx, dy - my), e_flip = hypot(dx - fx, dy - fy);
      /* Exactly one interpretation fits; record which. */
      if (e_flip < e_same) flipped++;
      double e = fmin(e_same, e_flip);
      if (e > 1.0) fail_msg("trial %d image %d: dot at (%.2f,%.2f), points (%.2f,%.2f)/(%.2f,%.2f)", t, n, dx, dy,
                            mx, my, fx, fy);
      checked++;
    }
  }
  /* Flip probability 0.5: both cases must have been seen and checked. */
  assert_true(checked > trials);
  assert_true(flipped > checked / 5 && flipped < checked * 4 / 5);
  sp_cache_free(c);
  sp_cache_free(bgc);
}

static void flip_reindexes_with_the_map(void **state) {
  (void)state;
  /* Only a flip (no zoom/rotation/RandAugment): x' = S-1-x and new[i] = old[flip[i]]. */
  sp_cache *c = tu_cache_alloc(1, S, 2);
  memset(c->pixels, 0, S * S * 3);
  float p[4] = {10, 20, 70, 25};
  memcpy(c->points, p, sizeof p);
  sp_scheme sc;
  int flip[2] = {1, 0};
  assert_int_equal(sp_scheme_from_table("pair", 2, flip, &sc), 0);
  sp_augment_config cfg = sp_augment_config_none(S);
  cfg.flip_prob = 1.f;
  uint8_t out[S * S * 3], fl[2];
  float pts[4];
  sp_augment_sample(c, 0, &cfg, &sc, 1, out, pts, fl);
  assert_float_equal(pts[0], S - 1 - 70, 1e-3);
  assert_float_equal(pts[1], 25, 1e-3);
  assert_float_equal(pts[2], S - 1 - 10, 1e-3);
  assert_float_equal(pts[3], 20, 1e-3);
  /* Out-of-crop points are kept and flagged. */
  cfg = sp_augment_config_none(S);
  c->points[0] = -5;
  sp_augment_sample(c, 0, &cfg, NULL, 1, out, pts, fl);
  assert_float_equal(pts[0], -5, 1e-3);
  assert_int_equal(fl[0], SP_PT_OUTSIDE);
  assert_int_equal(fl[1], 0);
  sp_cache_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_op_moves_points_with_pixels),
      cmocka_unit_test(geometric_ops_do_move),
      cmocka_unit_test(full_pipeline_points_follow_pixels),
      cmocka_unit_test(flip_reindexes_with_the_map),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
