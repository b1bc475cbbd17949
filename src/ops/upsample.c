/* Integer-factor 2-D upsampling, as F.interpolate(scale_factor=s) with
 * mode="nearest" (source = floor(dst / s)) or mode="bilinear",
 * align_corners=False (source = (dst + 0.5) / s - 0.5, clamped at 0, the upper
 * neighbour clamped at the edge). */
#include <stdio.h>

#include "ops/ops.h"

/* Where output row/column `o` reads from along a dimension of size n: the two
 * neighbours and the weight of the second. Nearest is the bilinear case with
 * both neighbours equal. */
typedef struct {
  int64_t i0, i1;
  float w1;
} upsample_src;

static upsample_src upsample_source(int bilinear, int scale, int64_t o, int64_t n) {
  upsample_src r;
  if (!bilinear) {
    r.i0 = r.i1 = o / scale;
    r.w1 = 0.0f;
    return r;
  }
  double src = ((double)o + 0.5) / scale - 0.5;
  if (src < 0.0) src = 0.0;
  r.i0 = (int64_t)src;
  r.i1 = r.i0 < n - 1 ? r.i0 + 1 : r.i0;
  r.w1 = (float)(src - (double)r.i0);
  return r;
}

static int upsample_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                          sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_upsample_attr *at = attr;
  char sb[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "upsample: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 4) {
    snprintf(err, errlen, "upsample: input must be [N,C,H,W], got %s", sp_shape_str(&in[0], sb, sizeof sb));
    return -1;
  }
  if (!at || at->scale < 1) {
    snprintf(err, errlen, "upsample: scale must be an integer >= 1, got %d", at ? at->scale : 0);
    return -1;
  }
  *out = sp_shape4(in[0].d[0], in[0].d[1], in[0].d[2] * at->scale, in[0].d[3] * at->scale);
  return 0;
}

static void upsample_forward(const sp_op_args *a) {
  const sp_upsample_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->in[0]->shape, &a->out->shape);
  const float *x = a->in[0]->data;
  float *y = a->out->data;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    const float *xp = x + pl * pg.h * pg.w;
    for (int64_t oh = 0; oh < pg.ho; oh++) {
      upsample_src sh = upsample_source(at->bilinear, at->scale, oh, pg.h);
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        upsample_src sw = upsample_source(at->bilinear, at->scale, ow, pg.w);
        float top = (1.0f - sw.w1) * xp[sh.i0 * pg.w + sw.i0] + sw.w1 * xp[sh.i0 * pg.w + sw.i1];
        float bot = (1.0f - sw.w1) * xp[sh.i1 * pg.w + sw.i0] + sw.w1 * xp[sh.i1 * pg.w + sw.i1];
        y[pl * pg.ho * pg.wo + oh * pg.wo + ow] = (1.0f - sh.w1) * top + sh.w1 * bot;
      }
    }
  }
}

static void upsample_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_upsample_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->d_in[0]->shape, &a->d_out->shape);
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  /* Many outputs read each input cell, so one thread owns a whole plane. */
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    float *dxp = dx + pl * pg.h * pg.w;
    for (int64_t oh = 0; oh < pg.ho; oh++) {
      upsample_src sh = upsample_source(at->bilinear, at->scale, oh, pg.h);
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        upsample_src sw = upsample_source(at->bilinear, at->scale, ow, pg.w);
        float g = dy[pl * pg.ho * pg.wo + oh * pg.wo + ow];
        dxp[sh.i0 * pg.w + sw.i0] += (1.0f - sh.w1) * (1.0f - sw.w1) * g;
        dxp[sh.i0 * pg.w + sw.i1] += (1.0f - sh.w1) * sw.w1 * g;
        dxp[sh.i1 * pg.w + sw.i0] += sh.w1 * (1.0f - sw.w1) * g;
        dxp[sh.i1 * pg.w + sw.i1] += sh.w1 * sw.w1 * g;
      }
    }
  }
}

const sp_op_def sp_op_upsample = {
    .name = "upsample",
    .flags = 0,
    .infer = upsample_infer,
    .saved_bytes = NULL,
    .forward = upsample_forward,
    .backward = upsample_backward,
};
