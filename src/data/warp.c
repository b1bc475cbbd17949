/* 2x3 affine maps and the one resampling routine of the pipeline: bilinear
 * uint8 warp. Every geometric step (crop, resize, scale, rotate, shear,
 * translate, flip) is folded into one matrix so an image is resampled once.
 *
 * Speed matters (it is most of the augment cost): each output row is split
 * into the span whose 2x2 neighbourhoods lie inside the source, done with
 * 16.16 fixed-point stepping and 8-bit weights, and the border spans, done
 * with bounds checks and the fill value. With AVX2 the inner span of an RGB
 * or a grey source takes eight output pixels at a time (gathers), with the
 * same integer arithmetic as the scalar loop: the same bytes. */
#include <math.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "data/data_internal.h"

int sp_warp_simd = 1;

sp_affine sp_affine_identity(void) {
  sp_affine a = {{1, 0, 0, 0, 1, 0}};
  return a;
}

sp_affine sp_affine_then(sp_affine a, sp_affine b) {
  const double *x = a.m, *y = b.m;
  sp_affine r = {{y[0] * x[0] + y[1] * x[3], y[0] * x[1] + y[1] * x[4], y[0] * x[2] + y[1] * x[5] + y[2],
                  y[3] * x[0] + y[4] * x[3], y[3] * x[1] + y[4] * x[4], y[3] * x[2] + y[4] * x[5] + y[5]}};
  return r;
}

int sp_affine_invert(sp_affine a, sp_affine *inv) {
  const double *m = a.m;
  double det = m[0] * m[4] - m[1] * m[3];
  if (!(fabs(det) > 1e-12)) return sp_error_set("affine map is singular (det %g)", det);
  double i0 = m[4] / det, i1 = -m[1] / det, i3 = -m[3] / det, i4 = m[0] / det;
  sp_affine r = {{i0, i1, -(i0 * m[2] + i1 * m[5]), i3, i4, -(i3 * m[2] + i4 * m[5])}};
  *inv = r;
  return 0;
}

void sp_affine_apply(const sp_affine *a, float *x, float *y) {
  double X = *x, Y = *y;
  *x = (float)(a->m[0] * X + a->m[1] * Y + a->m[2]);
  *y = (float)(a->m[3] * X + a->m[4] * Y + a->m[5]);
}

sp_affine sp_affine_translate(double tx, double ty) {
  sp_affine a = {{1, 0, tx, 0, 1, ty}};
  return a;
}

sp_affine sp_affine_scale(double sx, double sy) {
  sp_affine a = {{sx, 0, 0, 0, sy, 0}};
  return a;
}

sp_affine sp_affine_rotate_deg(double deg) {
  double r = deg * M_PI / 180.0, c = cos(r), s = sin(r);
  sp_affine a = {{c, -s, 0, s, c, 0}};
  return a;
}

/* Interval of t in [lo, hi] where v0 + t*dv lies in [0, vmax]. */
static void clip_line(double v0, double dv, double vmax, double *lo, double *hi) {
  if (fabs(dv) < 1e-12) {
    if (v0 < 0 || v0 > vmax) *hi = *lo - 1;
    return;
  }
  double t0 = (0 - v0) / dv, t1 = (vmax - v0) / dv;
  if (t0 > t1) {
    double t = t0;
    t0 = t1;
    t1 = t;
  }
  if (t0 > *lo) *lo = t0;
  if (t1 < *hi) *hi = t1;
}

static inline uint8_t sample_slow(const uint8_t *src, int sw, int sh, int c, int ch, double sx, double sy,
                                  uint8_t fill) {
  double fx = floor(sx), fy = floor(sy);
  if (fx < -1 || fy < -1 || fx >= sw || fy >= sh) return fill;
  int x0 = (int)fx, y0 = (int)fy;
  double wx = sx - fx, wy = sy - fy;
  double v[4];
  for (int j = 0; j < 4; j++) {
    int xx = x0 + (j & 1), yy = y0 + (j >> 1);
    v[j] = (xx < 0 || yy < 0 || xx >= sw || yy >= sh) ? fill : src[((size_t)yy * sw + xx) * c + ch];
  }
  double r = (v[0] * (1 - wx) + v[1] * wx) * (1 - wy) + (v[2] * (1 - wx) + v[3] * wx) * wy;
  return (uint8_t)(r + 0.5);
}

#ifdef __AVX2__
/* 16.16 positions of eight consecutive output pixels from f, step apart. */
static inline __m256i lanes_from(int32_t f, int32_t step) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_add_epi32(_mm256_set1_epi32(f), _mm256_mullo_epi32(lane, _mm256_set1_epi32(step)));
}

/* Eight 16.16 positions as their integer parts (the top-left neighbour)
 * and 8-bit fractions (the blend's weights), as the scalar loop takes them. */
static inline void split_positions(__m256i vfx, __m256i vfy, __m256i *x0, __m256i *y0, __m256i *wx, __m256i *wy) {
  const __m256i m255 = _mm256_set1_epi32(255);
  *x0 = _mm256_srai_epi32(vfx, 16), *y0 = _mm256_srai_epi32(vfy, 16);
  *wx = _mm256_and_si256(_mm256_srai_epi32(vfx, 8), m255), *wy = _mm256_and_si256(_mm256_srai_epi32(vfy, 8), m255);
}

/* The 2x2 blend of eight pixels' neighbours (a b / c d, each 0..255) with
 * 8-bit weights wx, wy, rounded, stored as eight bytes: the scalar loop's
 * arithmetic. */
static inline void blend_store8(uint8_t *out, __m256i a, __m256i b, __m256i c, __m256i d, __m256i wx, __m256i wy) {
  const __m256i c256 = _mm256_set1_epi32(256), half = _mm256_set1_epi32(32768);
  const __m256i iwx = _mm256_sub_epi32(c256, wx), iwy = _mm256_sub_epi32(c256, wy);
  const __m256i top = _mm256_add_epi32(_mm256_mullo_epi32(a, iwx), _mm256_mullo_epi32(b, wx));
  const __m256i bot = _mm256_add_epi32(_mm256_mullo_epi32(c, iwx), _mm256_mullo_epi32(d, wx));
  __m256i v = _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(top, iwy), _mm256_mullo_epi32(bot, wy)), half);
  v = _mm256_srli_epi32(v, 16);
  const __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64((__m128i *)(void *)out, _mm_packus_epi16(p16, p16));
}

/* Eight output pixels of an RGB source at a time: 32-bit gathers fetch each
 * 2x2 neighbourhood. The right-hand pixels are gathered from 2 bytes earlier
 * (bytes B,R,G,B) so no gather reads past the pixel it needs: the source
 * needs no padding. Returns the first x not done. */
static int warp_rgb_planar_avx2(const uint8_t *src, int stride, uint8_t *r0, uint8_t *r1, uint8_t *r2, int x, int xend,
                                int32_t *fx, int32_t *fy, int32_t dxs, int32_t dys) {
  const __m256i m255 = _mm256_set1_epi32(255), vstride = _mm256_set1_epi32(stride);
  __m256i vfx = lanes_from(*fx, dxs), vfy = lanes_from(*fy, dys);
  const __m256i step_x = _mm256_set1_epi32(dxs * 8), step_y = _mm256_set1_epi32(dys * 8);
  const int *base = (const int *)(const void *)src;
  for (; x + 8 <= xend + 1; x += 8) {
    __m256i x0, y0, wx, wy;
    split_positions(vfx, vfy, &x0, &y0, &wx, &wy);
    __m256i off = _mm256_add_epi32(_mm256_mullo_epi32(y0, vstride), _mm256_add_epi32(x0, _mm256_add_epi32(x0, x0)));
    __m256i off2 = _mm256_add_epi32(off, _mm256_set1_epi32(2));
    __m256i g00 = _mm256_i32gather_epi32(base, off, 1);
    __m256i g01 = _mm256_srli_epi32(_mm256_i32gather_epi32(base, off2, 1), 8);
    __m256i g10 = _mm256_i32gather_epi32(base, _mm256_add_epi32(off, vstride), 1);
    __m256i g11 = _mm256_srli_epi32(_mm256_i32gather_epi32(base, _mm256_add_epi32(off2, vstride), 1), 8);
    uint8_t *outs[3] = {r0, r1, r2};
    for (int ch = 0; ch < 3; ch++) {
      blend_store8(outs[ch] + x, _mm256_and_si256(g00, m255), _mm256_and_si256(g01, m255), _mm256_and_si256(g10, m255),
                   _mm256_and_si256(g11, m255), wx, wy);
      g00 = _mm256_srli_epi32(g00, 8);
      g01 = _mm256_srli_epi32(g01, 8);
      g10 = _mm256_srli_epi32(g10, 8);
      g11 = _mm256_srli_epi32(g11, 8);
    }
    vfx = _mm256_add_epi32(vfx, step_x);
    vfy = _mm256_add_epi32(vfy, step_y);
    *fx += dxs * 8;
    *fy += dys * 8;
  }
  return x;
}

/* Eight output pixels of a grey source at a time. Each 32-bit gather reads
 * the bytes from 2 before the pixel's left neighbour (x0 - 2 .. x0 + 1), so
 * it never reads past the pixel it needs; the caller keeps it off the
 * source's first row, where that would start before the image. Why: grey
 * (vgg-face's one channel) went through the scalar loop, 65% of the augment
 * stage's time. Returns the first x not done. */
static int warp_grey_avx2(const uint8_t *src, int stride, uint8_t *out, int x, int xend, int32_t *fx, int32_t *fy,
                          int32_t dxs, int32_t dys) {
  const __m256i m255 = _mm256_set1_epi32(255), vstride = _mm256_set1_epi32(stride), two = _mm256_set1_epi32(2);
  __m256i vfx = lanes_from(*fx, dxs), vfy = lanes_from(*fy, dys);
  const __m256i step_x = _mm256_set1_epi32(dxs * 8), step_y = _mm256_set1_epi32(dys * 8);
  const int *base = (const int *)(const void *)src;
  for (; x + 8 <= xend + 1; x += 8) {
    __m256i x0, y0, wx, wy;
    split_positions(vfx, vfy, &x0, &y0, &wx, &wy);
    __m256i off = _mm256_sub_epi32(_mm256_add_epi32(_mm256_mullo_epi32(y0, vstride), x0), two);
    __m256i top_g = _mm256_i32gather_epi32(base, off, 1),
            bot_g = _mm256_i32gather_epi32(base, _mm256_add_epi32(off, vstride), 1);
    blend_store8(out + x, _mm256_and_si256(_mm256_srli_epi32(top_g, 16), m255), _mm256_srli_epi32(top_g, 24),
                 _mm256_and_si256(_mm256_srli_epi32(bot_g, 16), m255), _mm256_srli_epi32(bot_g, 24), wx, wy);
    vfx = _mm256_add_epi32(vfx, step_x);
    vfy = _mm256_add_epi32(vfy, step_y);
    *fx += dxs * 8;
    *fy += dys * 8;
  }
  return x;
}
#endif

/* Inner span [*ilo, *ihi] of the output row that starts at source (sx0, sy0):
 * x0+1 <= sw-1 and y0+1 <= sh-1, with a small guard for the fixed-point
 * drift. Empty: [dw, dw-1]. */
static inline void inner_span(const double *m, int sw, int sh, int dw, double guard, double sx0, double sy0, int *ilo,
                              int *ihi) {
  double lo = 0, hi = dw - 1;
  clip_line(sx0 - guard, m[0], sw - 1 - 2 * guard, &lo, &hi);
  clip_line(sy0 - guard, m[3], sh - 1 - 2 * guard, &lo, &hi);
  int a = (int)ceil(lo + 1e-3), b = (int)floor(hi - 1e-3);
  if (a < 0) a = 0;
  if (b > dw - 1) b = dw - 1;
  if (b < a) {
    a = dw;
    b = dw - 1;
  }
  *ilo = a;
  *ihi = b;
}

/* One output row's work: the source, the row it writes, and where the row
 * starts in the source. */
typedef struct {
  const uint8_t *src;
  int sw, sh, c, stride, planar;
  uint8_t fill, *row;
  size_t plane;
  const double *m;
  double sx0, sy0;
  int32_t dxs, dys; /* 16.16 fixed-point source steps along the row */
  int tlo, thi;     /* columns whose 2x2 neighbourhood may touch the source (outside: the fill) */
} row_job;

static inline void put(const row_job *j, int x, int ch, uint8_t v) {
  if (j->planar)
    j->row[ch * j->plane + x] = v;
  else
    j->row[(size_t)x * j->c + ch] = v;
}

/* Columns [x0, x1) near or past the image's edge: the fill where no
 * neighbour can be inside, else every sample checks its neighbours' bounds.
 * Why: a zoomed-out or shifted crop has long runs of fill, and the checked
 * sample in doubles was 15% of the augment stage's time. */
static void fill_span(const row_job *j, int x0, int x1) {
  if (x1 <= x0) return;
  if (!j->planar)
    memset(j->row + (size_t)x0 * j->c, j->fill, (size_t)(x1 - x0) * j->c);
  else
    for (int ch = 0; ch < j->c; ch++) memset(j->row + ch * j->plane + x0, j->fill, (size_t)(x1 - x0));
}

static void edge_span(const row_job *j, int x0, int x1) {
  const int a = j->tlo > x0 ? j->tlo : x0, b = j->thi + 1 < x1 ? j->thi + 1 : x1;
  if (b <= a) {
    fill_span(j, x0, x1);
    return;
  }
  fill_span(j, x0, a);
  for (int x = a; x < b; x++) {
    double sx = j->sx0 + j->m[0] * x, sy = j->sy0 + j->m[3] * x;
    for (int ch = 0; ch < j->c; ch++) put(j, x, ch, sample_slow(j->src, j->sw, j->sh, j->c, ch, sx, sy, j->fill));
  }
  fill_span(j, b, x1);
}

/* Columns of the row that starts at (sx0, sy0) whose sample may have a
 * neighbour inside the source: -1 <= sx < sw and -1 <= sy < sh (what
 * sample_slow reads), widened by a margin so rounding never drops one.
 * Empty: tlo > thi. */
static void touch_span(const double *m, int sw, int sh, int dw, double sx0, double sy0, int *tlo, int *thi) {
  const double eps = 0.01;
  double lo = 0, hi = dw - 1;
  clip_line(sx0 + 1 + eps, m[0], sw + 1 + 2 * eps, &lo, &hi);
  clip_line(sy0 + 1 + eps, m[3], sh + 1 + 2 * eps, &lo, &hi);
  *tlo = (int)floor(lo), *thi = (int)ceil(hi);
}

/* Columns [x, xend] whose 2x2 neighbourhoods lie inside, in fixed point from
 * (fx, fy); RGB into planar output, vectorised where AVX2 is. */
static void inner_rgb_planar(const row_job *j, int x, int xend, int32_t fx, int32_t fy) {
  uint8_t *r0 = j->row, *r1 = j->row + j->plane, *r2 = j->row + 2 * j->plane;
  const int stride = j->stride;
#ifdef __AVX2__
  if (sp_warp_simd) x = warp_rgb_planar_avx2(j->src, stride, r0, r1, r2, x, xend, &fx, &fy, j->dxs, j->dys);
#endif
  for (; x <= xend; x++, fx += j->dxs, fy += j->dys) {
    int x0 = fx >> 16, y0 = fy >> 16;
    uint32_t wx = (uint32_t)(fx >> 8) & 255u, wy = (uint32_t)(fy >> 8) & 255u;
    const uint8_t *p = j->src + (size_t)y0 * stride + (size_t)x0 * 3, *q = p + stride;
    uint32_t w00 = (256 - wx) * (256 - wy), w01 = wx * (256 - wy), w10 = (256 - wx) * wy, w11 = wx * wy;
    r0[x] = (uint8_t)((p[0] * w00 + p[3] * w01 + q[0] * w10 + q[3] * w11 + 32768u) >> 16);
    r1[x] = (uint8_t)((p[1] * w00 + p[4] * w01 + q[1] * w10 + q[4] * w11 + 32768u) >> 16);
    r2[x] = (uint8_t)((p[2] * w00 + p[5] * w01 + q[2] * w10 + q[5] * w11 + 32768u) >> 16);
  }
}

/* The same for any channel count and interleaved output. */
static void inner_any(const row_job *j, int x, int xend, int32_t fx, int32_t fy) {
  const int c = j->c, stride = j->stride;
#ifdef __AVX2__
  /* Grey, off the source's first row (y is linear along the row: its
   * smallest value is at one end of the span). */
  if (sp_warp_simd && c == 1 && ((fy >> 16) >= 1 && ((fy + (int64_t)(xend - x) * j->dys) >> 16) >= 1))
    x = warp_grey_avx2(j->src, stride, j->row, x, xend, &fx, &fy, j->dxs, j->dys);
  if (sp_warp_simd && c == 3 && xend < 4096) {
    /* Interleaved RGB (the cache build): the vector span into three row
     * buffers, then interleave. */
    uint8_t tr[3][4096];
    int xe = warp_rgb_planar_avx2(j->src, stride, tr[0], tr[1], tr[2], x, xend, &fx, &fy, j->dxs, j->dys);
    for (int i = x; i < xe; i++) {
      j->row[3 * i] = tr[0][i];
      j->row[3 * i + 1] = tr[1][i];
      j->row[3 * i + 2] = tr[2][i];
    }
    x = xe;
  }
#endif
  for (; x <= xend; x++, fx += j->dxs, fy += j->dys) {
    int x0 = fx >> 16, y0 = fy >> 16;
    uint32_t wx = (uint32_t)(fx >> 8) & 255u, wy = (uint32_t)(fy >> 8) & 255u;
    const uint8_t *p = j->src + (size_t)y0 * stride + (size_t)x0 * c, *q = p + stride;
    uint32_t w00 = (256 - wx) * (256 - wy), w01 = wx * (256 - wy), w10 = (256 - wx) * wy, w11 = wx * wy;
    for (int ch = 0; ch < c; ch++)
      put(j, x, ch, (uint8_t)((p[ch] * w00 + p[c + ch] * w01 + q[ch] * w10 + q[c + ch] * w11 + 32768u) >> 16));
  }
}

void sp_warp_affine_u8(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, int planar,
                       const sp_affine *inv, uint8_t fill) {
  const double *m = inv->m;
  /* Fixed-point steps along a row; the per-row start is recomputed in double
   * so errors never accumulate across rows. */
  row_job j = {.src = src,
               .sw = sw,
               .sh = sh,
               .c = c,
               .stride = sw * c,
               .planar = planar,
               .fill = fill,
               .plane = (size_t)dw * dh,
               .m = m,
               .dxs = (int32_t)lrint(m[0] * 65536.0),
               .dys = (int32_t)lrint(m[3] * 65536.0)};
  /* Margin that covers the fixed-point drift (< 2^-17 per step). */
  const double guard = 0.005 + 2e-5 * dw;
  for (int y = 0; y < dh; y++) {
    j.sx0 = m[1] * y + m[2];
    j.sy0 = m[4] * y + m[5];
    int ilo, ihi;
    inner_span(m, sw, sh, dw, guard, j.sx0, j.sy0, &ilo, &ihi);
    touch_span(m, sw, sh, dw, j.sx0, j.sy0, &j.tlo, &j.thi);
    j.row = planar ? dst + (size_t)y * dw : dst + (size_t)y * dw * c;
    edge_span(&j, 0, ilo);
    if (ilo <= ihi) {
      int32_t fx = (int32_t)lrint((j.sx0 + m[0] * ilo) * 65536.0), fy = (int32_t)lrint((j.sy0 + m[3] * ilo) * 65536.0);
      if (c == 3 && planar)
        inner_rgb_planar(&j, ilo, ihi, fx, fy);
      else
        inner_any(&j, ilo, ihi, fx, fy);
    }
    edge_span(&j, ihi + 1 > ilo ? ihi + 1 : ilo, dw);
  }
}
