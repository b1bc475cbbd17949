/* 8-bit planar YUV (4:2:0, 4:2:2, 4:4:4) -> RGB uint8 with a bilinear
 * resize, computed for the crop window only and written straight into the
 * caller's buffer, HWC or CHW.
 *
 * Why not swscale here: it scales and converts the whole frame into a scratch
 * frame, which we then crop (and for CHW de-interleave), and it builds its
 * filter context again for every clip a loader opens. This path does the
 * window alone in one pass, with tables cached per geometry. It takes
 * downscales up to 2x only: beyond that two bilinear taps skip source pixels
 * (aliasing), and swscale's wider filter is used instead (convert.c).
 *
 * Each plane is resized on its own (luma; chroma at its own resolution and
 * siting), then converted, in fixed point: 8-bit interpolation weights,
 * samples kept with 6 fraction bits, 14-bit matrix coefficients. The result
 * depends only on the picture, so a frame fetched alone and the same frame
 * of a full decode are byte-identical. */
#include <libavutil/pixfmt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "video/video_internal.h"

/* One output axis: sample k of the window reads source samples i0[k] and
 * i1[k] with weight w[k]/256 on the second. */
typedef struct {
  int32_t *i0, *i1;
  int32_t *w;
  int lo, hi; /* source samples used: [lo, hi] */
} axis;

struct sp_vconv_yuv {
  /* the geometry the tables are for */
  int w, h, rw, rh, ch, cw, cy, cx, sub_x, sub_y, loc;
  axis lx, ly, cxa, cya;
  int32_t *row; /* 3 vertically blended source rows (Y, U, V) */
  uint8_t *rgb; /* one output row, R then G then B */
};

static void axis_free(axis *a) {
  free(a->i0);
  free(a->i1);
  free(a->w);
  memset(a, 0, sizeof *a);
}

/* Output samples [off, off + count) of an axis resized from n_luma to n_out;
 * the plane has n_plane samples, its sample k sitting at luma position
 * k * sub + siting. Pixel centres map to pixel centres. Horizontal axes
 * index a blended row that starts at sample lo (relative = 1); vertical ones
 * index the plane's rows. */
static void axis_build(axis *a, int n_out, int off, int count, int n_luma, int n_plane, int sub, double siting,
                       int relative) {
  a->i0 = sp_xmalloc((size_t)count * sizeof(int32_t));
  a->i1 = sp_xmalloc((size_t)count * sizeof(int32_t));
  a->w = sp_xmalloc((size_t)count * sizeof(int32_t));
  a->lo = n_plane;
  a->hi = 0;
  for (int k = 0; k < count; k++) {
    double s = ((double)(off + k) + 0.5) * n_luma / n_out - 0.5;
    double p = (s - siting) / sub;
    if (p < 0) p = 0;
    if (p > n_plane - 1) p = n_plane - 1;
    int i = (int)floor(p);
    int wt = (int)lround((p - i) * 256);
    if (wt == 256) i++, wt = 0;
    if (i > n_plane - 1) i = n_plane - 1;
    a->i0[k] = i;
    a->i1[k] = i + 1 < n_plane ? i + 1 : i;
    a->w[k] = wt;
    if (i < a->lo) a->lo = i;
    if (a->i1[k] > a->hi) a->hi = a->i1[k];
  }
  for (int k = 0; relative && k < count; k++) {
    a->i0[k] -= a->lo;
    a->i1[k] -= a->lo;
  }
}

void sp_vconv_yuv_free(struct sp_vconv_yuv *t) {
  if (!t) return;
  axis_free(&t->lx);
  axis_free(&t->ly);
  axis_free(&t->cxa);
  axis_free(&t->cya);
  free(t->row);
  free(t->rgb);
  free(t);
}

int sp_vconv_yuv_supports(int pix_fmt, int w, int h, int rw, int rh) {
  switch (pix_fmt) {
    case AV_PIX_FMT_YUV420P:
    case AV_PIX_FMT_YUVJ420P:
    case AV_PIX_FMT_YUV422P:
    case AV_PIX_FMT_YUVJ422P:
    case AV_PIX_FMT_YUV444P:
    case AV_PIX_FMT_YUVJ444P: break;
    default: return 0;
  }
  return 2 * (int64_t)rw >= w && 2 * (int64_t)rh >= h;
}

/* Where chroma sample 0 sits, in luma samples (horizontal, vertical). The
 * unspecified case is what MPEG-2, H.264 and HEVC streams mean by default
 * (left); JPEG-range 4:2:0 without a tag is JPEG's centred siting. */
static void siting(int loc, int pix_fmt, double *hx, double *vy) {
  if (loc == AVCHROMA_LOC_UNSPECIFIED) loc = pix_fmt == AV_PIX_FMT_YUVJ420P ? AVCHROMA_LOC_CENTER : AVCHROMA_LOC_LEFT;
  switch (loc) {
    case AVCHROMA_LOC_CENTER: *hx = 0.5, *vy = 0.5; break;
    case AVCHROMA_LOC_TOPLEFT: *hx = 0, *vy = 0; break;
    case AVCHROMA_LOC_TOP: *hx = 0.5, *vy = 0; break;
    case AVCHROMA_LOC_BOTTOMLEFT: *hx = 0, *vy = 1; break;
    case AVCHROMA_LOC_BOTTOM: *hx = 0.5, *vy = 1; break;
    default: *hx = 0, *vy = 0.5; /* left */
  }
}

static struct sp_vconv_yuv *tables(struct sp_vconv_yuv *t, int pix_fmt, int loc, int w, int h, int rw, int rh, int ch,
                                   int cw, int cy, int cx) {
  int sub_x = 1, sub_y = 1;
  if (pix_fmt == AV_PIX_FMT_YUV420P || pix_fmt == AV_PIX_FMT_YUVJ420P) sub_x = sub_y = 2;
  if (pix_fmt == AV_PIX_FMT_YUV422P || pix_fmt == AV_PIX_FMT_YUVJ422P) sub_x = 2;
  if (t && t->w == w && t->h == h && t->rw == rw && t->rh == rh && t->ch == ch && t->cw == cw && t->cy == cy &&
      t->cx == cx && t->sub_x == sub_x && t->sub_y == sub_y && t->loc == loc)
    return t;
  sp_vconv_yuv_free(t);
  t = sp_xcalloc(1, sizeof *t);
  *t = (struct sp_vconv_yuv){.w = w,
                             .h = h,
                             .rw = rw,
                             .rh = rh,
                             .ch = ch,
                             .cw = cw,
                             .cy = cy,
                             .cx = cx,
                             .sub_x = sub_x,
                             .sub_y = sub_y,
                             .loc = loc};
  double hx, vy;
  siting(loc, pix_fmt, &hx, &vy);
  int pw = (w + sub_x - 1) / sub_x, ph = (h + sub_y - 1) / sub_y;
  axis_build(&t->lx, rw, cx, cw, w, w, 1, 0, 1);
  axis_build(&t->ly, rh, cy, ch, h, h, 1, 0, 0);
  axis_build(&t->cxa, rw, cx, cw, w, pw, sub_x, sub_x == 1 ? 0 : hx, 1);
  axis_build(&t->cya, rh, cy, ch, h, ph, sub_y, sub_y == 1 ? 0 : vy, 0);
  t->row = sp_xmalloc((size_t)(w + 2 * pw + 3) * sizeof(int32_t));
  t->rgb = sp_xmalloc((size_t)cw * 3);
  return t;
}

/* Rows r0 and r1 of a plane blended with weight wt/256 on r1, samples
 * [lo, hi] into dst[0 .. hi - lo]. */
static void blend_rows(const uint8_t *r0, const uint8_t *r1, int wt, int lo, int hi, int32_t *dst) {
  for (int x = lo; x <= hi; x++) dst[x - lo] = r0[x] * (256 - wt) + r1[x] * wt;
}

/* The YUV -> RGB matrix in 14-bit fixed point: (Kr, Kb) per colour space,
 * range scaling folded in. */
typedef struct {
  int32_t y, rv, gu, gv, bu, yoff;
} matrix;

static matrix matrix_for(int cs, int full) {
  double kr = 0.299, kb = 0.114; /* BT.601 (also unspecified) */
  switch (cs) {
    case AVCOL_SPC_BT709: kr = 0.2126, kb = 0.0722; break;
    case AVCOL_SPC_FCC: kr = 0.30, kb = 0.11; break;
    case AVCOL_SPC_SMPTE240M: kr = 0.212, kb = 0.087; break;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: kr = 0.2627, kb = 0.0593; break;
    default: break;
  }
  double kg = 1 - kr - kb, ys = full ? 1.0 : 255.0 / 219, cs_ = full ? 1.0 : 255.0 / 224, one = 16384;
  matrix m;
  m.y = (int32_t)lround(one * ys);
  m.rv = (int32_t)lround(one * cs_ * 2 * (1 - kr));
  m.gu = (int32_t)lround(one * cs_ * 2 * kb * (1 - kb) / kg);
  m.gv = (int32_t)lround(one * cs_ * 2 * kr * (1 - kr) / kg);
  m.bu = (int32_t)lround(one * cs_ * 2 * (1 - kb));
  m.yoff = full ? 0 : 16 << 6;
  return m;
}

static inline uint8_t clamp8(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* One output row from the blended source rows: horizontal blend, matrix,
 * R, G and B apart (restrict and planes apart: the compiler vectorises this
 * loop with gathers). */
static void row_to_rgb(const axis *lx, const axis *cx, const int32_t *restrict ty, const int32_t *restrict tu,
                       const int32_t *restrict tv, const matrix *mp, int cw, uint8_t *restrict rr, uint8_t *restrict gg,
                       uint8_t *restrict bb) {
  const int32_t *restrict xi0 = lx->i0, *restrict xi1 = lx->i1, *restrict xw = lx->w;
  const int32_t *restrict ci0 = cx->i0, *restrict ci1 = cx->i1, *restrict cwt = cx->w;
  const matrix m = *mp;
  for (int x = 0; x < cw; x++) {
    /* 16 fraction bits after the two blends; keep 6. */
    int32_t Y = (ty[xi0[x]] * (256 - xw[x]) + ty[xi1[x]] * xw[x] + 512) >> 10;
    int32_t U = ((tu[ci0[x]] * (256 - cwt[x]) + tu[ci1[x]] * cwt[x] + 512) >> 10) - (128 << 6);
    int32_t V = ((tv[ci0[x]] * (256 - cwt[x]) + tv[ci1[x]] * cwt[x] + 512) >> 10) - (128 << 6);
    int32_t yy = (Y - m.yoff) * m.y + (1 << 19);
    rr[x] = clamp8((yy + m.rv * V) >> 20);
    gg[x] = clamp8((yy - m.gu * U - m.gv * V) >> 20);
    bb[x] = clamp8((yy + m.bu * U) >> 20);
  }
}

int sp_vconv_yuv(sp_vconv *c, const uint8_t *const src[4], const int stride[4], int w, int h, int pix_fmt, int cs,
                 int range, int rw, int rh, int ch, int cw, int cy, int cx, int planar, uint8_t *out) {
  struct sp_vconv_yuv *t = c->yuv = tables(c->yuv, pix_fmt, c->chroma_loc, w, h, rw, rh, ch, cw, cy, cx);
  int full = range == AVCOL_RANGE_JPEG || pix_fmt == AV_PIX_FMT_YUVJ420P || pix_fmt == AV_PIX_FMT_YUVJ422P ||
             pix_fmt == AV_PIX_FMT_YUVJ444P;
  matrix m = matrix_for(cs, full);
  int32_t *ty = t->row, *tu = ty + (t->lx.hi - t->lx.lo + 1), *tv = tu + (t->cxa.hi - t->cxa.lo + 1);
  uint8_t *rr = t->rgb, *gg = rr + cw, *bb = gg + cw;
  size_t plane = (size_t)ch * cw;
  for (int y = 0; y < ch; y++) {
    blend_rows(src[0] + (size_t)t->ly.i0[y] * stride[0], src[0] + (size_t)t->ly.i1[y] * stride[0], t->ly.w[y], t->lx.lo,
               t->lx.hi, ty);
    size_t u0 = (size_t)t->cya.i0[y], u1 = (size_t)t->cya.i1[y];
    blend_rows(src[1] + u0 * stride[1], src[1] + u1 * stride[1], t->cya.w[y], t->cxa.lo, t->cxa.hi, tu);
    blend_rows(src[2] + u0 * stride[2], src[2] + u1 * stride[2], t->cya.w[y], t->cxa.lo, t->cxa.hi, tv);
    row_to_rgb(&t->lx, &t->cxa, ty, tu, tv, &m, cw, rr, gg, bb);
    if (planar) {
      memcpy(out + (size_t)y * cw, rr, (size_t)cw);
      memcpy(out + plane + (size_t)y * cw, gg, (size_t)cw);
      memcpy(out + 2 * plane + (size_t)y * cw, bb, (size_t)cw);
    } else {
      uint8_t *o = out + (size_t)y * cw * 3;
      for (int x = 0; x < cw; x++) {
        o[3 * x] = rr[x];
        o[3 * x + 1] = gg[x];
        o[3 * x + 2] = bb[x];
      }
    }
  }
  return 0;
}
