/* The one resampling routine (src/data/warp.c): random affine maps (scale,
 * rotation, shear, shifts that leave part of the output outside the
 * source) on grey and RGB sources, interleaved and planar output.
 *
 * - The AVX2 inner spans (grey and RGB gathers) give the same bytes as the
 *   scalar loop (sp_warp_simd = 0).
 * - Every output pixel is what bilinear sampling says, within 1 of the
 *   double-precision value (the inner span works in 16.16 fixed point with
 *   8-bit weights; a smooth source): the fill where no neighbour is inside, the source's
 *   values where the whole 2x2 neighbourhood is, the fill standing in for
 *   the missing neighbours at the border. */
#include <math.h>

#include "data/data_internal.h"
#include "spry/rng.h"
#include "testkit.h"

enum { SW = 61, SH = 47, MAXC = 3, DW = 53, DH = 41 };

/* The bilinear value at (sx, sy) with `fill` outside the source. */
static double bilinear(const uint8_t *src, int c, int ch, double sx, double sy, uint8_t fill) {
  const double fx = floor(sx), fy = floor(sy), wx = sx - fx, wy = sy - fy;
  double v[4];
  for (int k = 0; k < 4; k++) {
    const int xx = (int)fx + (k & 1), yy = (int)fy + (k >> 1);
    v[k] = xx < 0 || yy < 0 || xx >= SW || yy >= SH ? fill : src[((size_t)yy * SW + xx) * c + ch];
  }
  return (v[0] * (1 - wx) + v[1] * wx) * (1 - wy) + (v[2] * (1 - wx) + v[3] * wx) * wy;
}

/* A random map from the output to the source: some fully inside, some
 * hanging over every side, some far outside. */
static sp_affine random_map(sp_rng *rng) {
  const double scale = sp_rng_range(rng, 0.5, 1.8), deg = sp_rng_range(rng, -40, 40);
  const double shear = sp_rng_range(rng, -0.2, 0.2);
  sp_affine m = sp_affine_translate(-DW / 2.0, -DH / 2.0);
  m = sp_affine_then(m, sp_affine_scale(scale, scale * (1 + shear)));
  m = sp_affine_then(m, sp_affine_rotate_deg(deg));
  return sp_affine_then(
      m, sp_affine_translate(SW / 2.0 + sp_rng_range(rng, -40, 40), SH / 2.0 + sp_rng_range(rng, -30, 30)));
}

static void simd_matches_scalar_and_bilinear(void **state) {
  (void)state;
  sp_rng rng = sp_rng_make(7);
  uint8_t src1[SW * SH], src3[SW * SH * 3], got[DW * DH * MAXC], scalar[DW * DH * MAXC];
  /* Smooth with a little noise: the fixed-point position (1/256 pixel)
   * moves a value by at most a few hundredths of its local slope. */
  for (int y = 0; y < SH; y++)
    for (int x = 0; x < SW; x++)
      for (int ch = 0; ch < 3; ch++) {
        const int v =
            (int)(128 + 90 * sin(0.31 * x + 0.7 * ch) * cos(0.23 * y - 0.4 * ch)) + (int)(sp_rng_u64(&rng) % 9) - 4;
        src3[(y * SW + x) * 3 + ch] = (uint8_t)v;
        if (ch == 0) src1[y * SW + x] = (uint8_t)v;
      }
  int fill_pixels = 0, border_pixels = 0, inner_pixels = 0;
  for (int trial = 0; trial < 300; trial++) {
    const int c = trial % 2 ? 3 : 1, planar = c == 3 && trial % 4 == 1;
    const uint8_t *src = c == 3 ? src3 : src1;
    const uint8_t fill = (uint8_t)(trial * 37);
    const sp_affine m = random_map(&rng);
    sp_warp_simd = 1;
    sp_warp_affine_u8(src, SW, SH, c, got, DW, DH, planar, &m, fill);
    sp_warp_simd = 0;
    sp_warp_affine_u8(src, SW, SH, c, scalar, DW, DH, planar, &m, fill);
    sp_warp_simd = 1;
    if (memcmp(got, scalar, (size_t)DW * DH * c) != 0) fail_msg("trial %d (%d channels): AVX2 differs", trial, c);
    for (int y = 0; y < DH; y++)
      for (int x = 0; x < DW; x++) {
        const double sx = m.m[0] * x + m.m[1] * y + m.m[2], sy = m.m[3] * x + m.m[4] * y + m.m[5];
        const int none = sx < -1 || sy < -1 || sx >= SW || sy >= SH;
        const int all = sx >= 0 && sy >= 0 && sx < SW - 1 && sy < SH - 1;
        fill_pixels += none, inner_pixels += all, border_pixels += !none && !all;
        for (int ch = 0; ch < c; ch++) {
          const uint8_t v = got[planar ? ((size_t)ch * DH + y) * DW + x : ((size_t)y * DW + x) * c + ch];
          if (none) {
            if (v != fill) fail_msg("trial %d (%d, %d): %d, want the fill %d", trial, x, y, v, fill);
            continue;
          }
          const double want = bilinear(src, c, ch, sx, sy, fill);
          if (fabs(v - want) > 1.0)
            fail_msg("trial %d (%d, %d) channel %d: %d, bilinear %.2f", trial, x, y, ch, v, want);
        }
      }
  }
  printf("# %d pixels inside, %d at the border, %d fill\n", inner_pixels, border_pixels, fill_pixels);
  assert_true(inner_pixels > 100000 && border_pixels > 1000 && fill_pixels > 100000);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(simd_matches_scalar_and_bilinear)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
