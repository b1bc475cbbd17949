/* Picture -> RGB uint8 in the caller's buffer: colour conversion, short-side
 * resize and crop. 8-bit planar YUV downscaled at most 2x (what decoders of
 * training clips give) goes through convert_yuv.c, which computes the crop
 * window only. Everything else goes through libswscale: without a crop, HWC
 * output is written by swscale straight into the caller's buffer; otherwise
 * swscale fills a scratch frame and the window is copied (and de-interleaved
 * for CHW). */
#include <libavutil/pixdesc.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "video/video_internal.h"

sp_video_geom sp_video_geom_native(void) {
  sp_video_geom g = {0, 0, 0, -1, -1, SP_VIDEO_HWC};
  return g;
}

sp_video_geom sp_video_geom_square(int size, sp_video_layout layout) {
  sp_video_geom g = {size, size, size, -1, -1, layout};
  return g;
}

int sp_video_geom_resolve(const sp_video_geom *g, int w, int h, int *rw, int *rh, int *ch, int *cw, int *cy, int *cx,
                          const char *what) {
  if (w <= 0 || h <= 0) return sp_error_set("%s: frame size %dx%d is not valid", what, w, h);
  if (g->short_side < 0 || g->crop_h < 0 || g->crop_w < 0)
    return sp_error_set("%s: negative output size requested", what);
  if (g->short_side > SP_VIDEO_MAX_SHORT_SIDE)
    return sp_error_set("%s: short side %d requested, the limit is %d", what, g->short_side, SP_VIDEO_MAX_SHORT_SIDE);
  if (g->short_side > 0) {
    /* The short side gets exactly short_side; the long side keeps the aspect. */
    if (w <= h) {
      *rw = g->short_side;
      *rh = (int)lround((double)h * g->short_side / w);
    } else {
      *rh = g->short_side;
      *rw = (int)lround((double)w * g->short_side / h);
    }
    if (*rw < 1) *rw = 1;
    if (*rh < 1) *rh = 1;
    if (*rw > SP_VIDEO_MAX_SIDE || *rh > SP_VIDEO_MAX_SIDE)
      return sp_error_set("%s: short side %d makes the %dx%d frame %dx%d, past the %d px limit", what, g->short_side, w,
                          h, *rw, *rh, SP_VIDEO_MAX_SIDE);
  } else {
    *rw = w;
    *rh = h;
  }
  *ch = g->crop_h ? g->crop_h : *rh;
  *cw = g->crop_w ? g->crop_w : *rw;
  if (*ch > *rh || *cw > *rw)
    return sp_error_set("%s: crop %dx%d does not fit the resized frame %dx%d", what, *cw, *ch, *rw, *rh);
  *cy = g->crop_y < 0 ? (*rh - *ch) / 2 : g->crop_y;
  *cx = g->crop_x < 0 ? (*rw - *cw) / 2 : g->crop_x;
  if (*cy + *ch > *rh || *cx + *cw > *rw)
    return sp_error_set("%s: crop at (%d,%d) leaves the resized frame %dx%d", what, *cx, *cy, *rw, *rh);
  return 0;
}

static int sws_colorspace(int cs) {
  switch (cs) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_DEFAULT; /* BT.601, what players assume when unspecified */
  }
}

int sp_vconv_run(sp_vconv *c, const uint8_t *const src[4], const int stride[4], int w, int h, int pix_fmt, int cs,
                 int range, const sp_video_geom *g, uint8_t *out, const char *what) {
  int rw, rh, ch, cw, cy, cx;
  if (sp_video_geom_resolve(g, w, h, &rw, &rh, &ch, &cw, &cy, &cx, what) != 0) return -1;
  return sp_vconv_scale(c, src, stride, w, h, pix_fmt, cs, range, rw, rh, ch, cw, cy, cx, g->layout == SP_VIDEO_CHW,
                        out, what);
}

int sp_vconv_scale(sp_vconv *c, const uint8_t *const src[4], const int stride[4], int w, int h, int pix_fmt, int cs,
                   int range, int rw, int rh, int ch, int cw, int cy, int cx, int planar, uint8_t *out,
                   const char *what) {
  if (!c->use_swscale && sp_vconv_yuv_supports(pix_fmt, w, h, rw, rh))
    return sp_vconv_yuv(c, src, stride, w, h, pix_fmt, cs, range, rw, rh, ch, cw, cy, cx, planar, out);
  /* Always packed RGB out of swscale: its planar (GBRP) writer rounds
   * differently, and CHW must be exactly HWC transposed. */
  enum AVPixelFormat dst_fmt = AV_PIX_FMT_RGB24;
  /* Bilinear when resizing (what the loaders we compare with use); pure
   * conversion otherwise. ACCURATE_RND keeps swscale off its fast unscaled
   * yuv2rgb path, which reads the decoder's row padding at the right edge:
   * without it the same frame decoded twice can differ in a few pixels. */
  int flags = (rw != w || rh != h) ? SWS_BILINEAR | SWS_ACCURATE_RND : SWS_POINT | SWS_ACCURATE_RND;
  c->sws = sws_getCachedContext(c->sws, w, h, (enum AVPixelFormat)pix_fmt, rw, rh, dst_fmt, flags, NULL, NULL, NULL);
  if (!c->sws) {
    const char *name = av_get_pix_fmt_name((enum AVPixelFormat)pix_fmt);
    return sp_error_set("%s: libswscale cannot convert %s %dx%d to RGB %dx%d", what, name ? name : "?", w, h, rw, rh);
  }
  int src_full = range == AVCOL_RANGE_JPEG;
  const int *coef = sws_getCoefficients(sws_colorspace(cs));
  /* Fails (harmlessly) for RGB sources, which have no YUV matrix. */
  sws_setColorspaceDetails(c->sws, coef, src_full, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);

  int direct = ch == rh && cw == rw && !planar;
  uint8_t *dst = out;
  if (!direct) {
    size_t need = (size_t)rw * rh * 3;
    if (c->tmp_cap < need) {
      free(c->tmp);
      c->tmp = sp_xmalloc(need);
      c->tmp_cap = need;
    }
    dst = c->tmp;
  }
  uint8_t *dptr[4] = {dst, NULL, NULL, NULL};
  int dstride[4] = {rw * 3, 0, 0, 0};
  int r = sws_scale(c->sws, src, stride, 0, h, dptr, dstride);
  if (r != rh) return sp_error_set("%s: libswscale produced %d of %d rows", what, r, rh);
  if (direct) return 0;
  if (planar) {
    size_t plane = (size_t)ch * cw;
    for (int y = 0; y < ch; y++) {
      const uint8_t *row = dst + ((size_t)(y + cy) * rw + cx) * 3;
      uint8_t *o0 = out + (size_t)y * cw, *o1 = o0 + plane, *o2 = o1 + plane;
      for (int x = 0; x < cw; x++) {
        o0[x] = row[3 * x];
        o1[x] = row[3 * x + 1];
        o2[x] = row[3 * x + 2];
      }
    }
  } else {
    for (int y = 0; y < ch; y++)
      memcpy(out + (size_t)y * cw * 3, dst + ((size_t)(y + cy) * rw + cx) * 3, (size_t)cw * 3);
  }
  return 0;
}

void sp_vconv_free(sp_vconv *c) {
  if (c->sws) sws_freeContext(c->sws);
  sp_vconv_yuv_free(c->yuv);
  free(c->tmp);
  memset(c, 0, sizeof *c);
}
