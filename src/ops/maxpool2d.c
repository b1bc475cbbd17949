/* 2-D max pooling (PyTorch MaxPool2d, dilation 1). Padding counts as -inf, so
 * a padded cell never wins; ties go to the first maximum in row-major window
 * order, and NaN propagates (both as PyTorch's CPU kernel). Forward saves the
 * winner of every output as an int32 index into its input plane (h * W + w),
 * so backward needs neither the input nor the output. */
#include <math.h>
#include <stdio.h>

#include "ops/ops.h"

/* PyTorch's pooling_output_shape: with ceil_mode the last window may hang over
 * the edge, but it must start inside the input or the left padding. */
static int64_t maxpool_out_size(int64_t in, int k, int s, int p, int ceil_mode) {
  int64_t span = in + 2 * (int64_t)p - k;
  if (span < 0) return 0;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

static int maxpool_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                         sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_pool2d_attr *at = attr;
  char sb[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "maxpool2d: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 4) {
    snprintf(err, errlen, "maxpool2d: input must be [N,C,H,W], got %s", sp_shape_str(&in[0], sb, sizeof sb));
    return -1;
  }
  if (!at || at->kernel_h < 1 || at->kernel_w < 1 || at->stride_h < 1 || at->stride_w < 1 || at->pad_h < 0 ||
      at->pad_w < 0) {
    snprintf(err, errlen, "maxpool2d: kernel and stride must be >= 1 and padding >= 0");
    return -1;
  }
  /* PyTorch's rule; it also guarantees every window holds a real element. */
  if (at->pad_h > at->kernel_h / 2 || at->pad_w > at->kernel_w / 2) {
    snprintf(err, errlen, "maxpool2d: padding %dx%d exceeds half the kernel %dx%d", at->pad_h, at->pad_w, at->kernel_h,
             at->kernel_w);
    return -1;
  }
  int64_t ho = maxpool_out_size(in[0].d[2], at->kernel_h, at->stride_h, at->pad_h, at->ceil_mode);
  int64_t wo = maxpool_out_size(in[0].d[3], at->kernel_w, at->stride_w, at->pad_w, at->ceil_mode);
  if (ho < 1 || wo < 1) {
    snprintf(err, errlen, "maxpool2d: input %s is smaller than kernel %dx%d with padding %dx%d",
             sp_shape_str(&in[0], sb, sizeof sb), at->kernel_h, at->kernel_w, at->pad_h, at->pad_w);
    return -1;
  }
  *out = sp_shape4(in[0].d[0], in[0].d[1], ho, wo);
  return 0;
}

static size_t maxpool_saved_bytes(const void *attr, int n_in, const sp_shape *in, const sp_shape *out) {
  (void)attr;
  (void)n_in;
  (void)in;
  return (size_t)sp_shape_numel(out) * sizeof(int32_t);
}

static void maxpool_forward(const sp_op_args *a) {
  const sp_pool2d_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->in[0]->shape, &a->out->shape);
  const float *x = a->in[0]->data;
  float *y = a->out->data;
  int32_t *arg = a->saved;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    const float *xp = x + pl * pg.h * pg.w;
    for (int64_t oh = 0; oh < pg.ho; oh++) {
      int64_t h0 = oh * at->stride_h - at->pad_h, h1 = h0 + at->kernel_h;
      if (h0 < 0) h0 = 0;
      if (h1 > pg.h) h1 = pg.h;
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        int64_t w0 = ow * at->stride_w - at->pad_w, w1 = w0 + at->kernel_w;
        if (w0 < 0) w0 = 0;
        if (w1 > pg.w) w1 = pg.w;
        float best = -INFINITY;
        int64_t besti = h0 * pg.w + w0;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            float v = xp[h * pg.w + w];
            if (v > best || isnan(v)) {
              best = v;
              besti = h * pg.w + w;
            }
          }
        int64_t o = pl * pg.ho * pg.wo + oh * pg.wo + ow;
        y[o] = best;
        arg[o] = (int32_t)besti;
      }
    }
  }
}

static void maxpool_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_shape *is = &a->d_in[0]->shape, *os = &a->d_out->shape;
  int64_t planes = is->d[0] * is->d[1], HW = is->d[2] * is->d[3], HWo = os->d[2] * os->d[3];
  const float *dy = a->d_out->data;
  const int32_t *arg = a->saved;
  float *dx = a->d_in[0]->data;
  /* Overlapping windows may share a winner, so one thread owns a whole plane. */
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t o = 0; o < HWo; o++) dx[pl * HW + arg[pl * HWo + o]] += dy[pl * HWo + o];
}

const sp_op_def sp_op_maxpool2d = {
    .name = "maxpool2d",
    .flags = 0,
    .infer = maxpool_infer,
    .saved_bytes = maxpool_saved_bytes,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};
