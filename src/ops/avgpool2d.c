/* 2-D average pooling (PyTorch AvgPool2d, no divisor_override). The divisor
 * follows PyTorch exactly: with count_include_pad the window is clipped to the
 * padded input (so a ceil_mode window hanging past the padding divides by
 * fewer cells), without it only real input cells are counted. */
#include <stdio.h>

#include "ops/ops.h"

/* PyTorch's pooling_output_shape: with ceil_mode the last window may hang over
 * the edge, but it must start inside the input or the left padding. */
static int64_t avgpool_out_size(int64_t in, int k, int s, int p, int ceil_mode) {
  int64_t span = in + 2 * (int64_t)p - k;
  if (span < 0) return 0;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

/* One output's window [h0,h1) x [w0,w1) on the real input and its divisor;
 * returns 0 when the window holds no real cell. */
typedef struct {
  int64_t h0, h1, w0, w1;
  double div;
} avgpool_window;

static int avgpool_window_at(const sp_pool2d_attr *at, int64_t H, int64_t W, int64_t oh, int64_t ow,
                             avgpool_window *win) {
  int64_t h0 = oh * at->stride_h - at->pad_h, w0 = ow * at->stride_w - at->pad_w;
  int64_t h1 = h0 + at->kernel_h, w1 = w0 + at->kernel_w;
  if (h1 > H + at->pad_h) h1 = H + at->pad_h;
  if (w1 > W + at->pad_w) w1 = W + at->pad_w;
  int64_t padded_cells = (h1 - h0) * (w1 - w0);
  if (h0 < 0) h0 = 0;
  if (w0 < 0) w0 = 0;
  if (h1 > H) h1 = H;
  if (w1 > W) w1 = W;
  win->h0 = h0;
  win->h1 = h1;
  win->w0 = w0;
  win->w1 = w1;
  if (h0 >= h1 || w0 >= w1) return 0;
  win->div = (double)(at->count_include_pad ? padded_cells : (h1 - h0) * (w1 - w0));
  return 1;
}

static int avgpool_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                         sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_pool2d_attr *at = attr;
  char sb[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "avgpool2d: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 4) {
    snprintf(err, errlen, "avgpool2d: input must be [N,C,H,W], got %s", sp_shape_str(&in[0], sb, sizeof sb));
    return -1;
  }
  if (!at || at->kernel_h < 1 || at->kernel_w < 1 || at->stride_h < 1 || at->stride_w < 1 || at->pad_h < 0 ||
      at->pad_w < 0) {
    snprintf(err, errlen, "avgpool2d: kernel and stride must be >= 1 and padding >= 0");
    return -1;
  }
  if (at->pad_h > at->kernel_h / 2 || at->pad_w > at->kernel_w / 2) {
    snprintf(err, errlen, "avgpool2d: padding %dx%d exceeds half the kernel %dx%d", at->pad_h, at->pad_w, at->kernel_h,
             at->kernel_w);
    return -1;
  }
  int64_t ho = avgpool_out_size(in[0].d[2], at->kernel_h, at->stride_h, at->pad_h, at->ceil_mode);
  int64_t wo = avgpool_out_size(in[0].d[3], at->kernel_w, at->stride_w, at->pad_w, at->ceil_mode);
  if (ho < 1 || wo < 1) {
    snprintf(err, errlen, "avgpool2d: input %s is smaller than kernel %dx%d with padding %dx%d",
             sp_shape_str(&in[0], sb, sizeof sb), at->kernel_h, at->kernel_w, at->pad_h, at->pad_w);
    return -1;
  }
  *out = sp_shape4(in[0].d[0], in[0].d[1], ho, wo);
  return 0;
}

static void avgpool_forward(const sp_op_args *a) {
  const sp_pool2d_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->in[0]->shape, &a->out->shape);
  const float *x = a->in[0]->data;
  float *y = a->out->data;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    const float *xp = x + pl * pg.h * pg.w;
    float *yp = y + pl * pg.ho * pg.wo;
    for (int64_t oh = 0; oh < pg.ho; oh++)
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        avgpool_window win;
        if (!avgpool_window_at(at, pg.h, pg.w, oh, ow, &win)) {
          yp[oh * pg.wo + ow] = 0.0f;
          continue;
        }
        double s = 0.0;
        for (int64_t h = win.h0; h < win.h1; h++)
          for (int64_t w = win.w0; w < win.w1; w++) s += xp[h * pg.w + w];
        yp[oh * pg.wo + ow] = (float)(s / win.div);
      }
  }
}

static void avgpool_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_pool2d_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->d_in[0]->shape, &a->d_out->shape);
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  /* Windows overlap when stride < kernel, so one thread owns a whole plane. */
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    float *dxp = dx + pl * pg.h * pg.w;
    const float *dyp = dy + pl * pg.ho * pg.wo;
    for (int64_t oh = 0; oh < pg.ho; oh++)
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        avgpool_window win;
        if (!avgpool_window_at(at, pg.h, pg.w, oh, ow, &win)) continue;
        float g = (float)(dyp[oh * pg.wo + ow] / win.div);
        for (int64_t h = win.h0; h < win.h1; h++)
          for (int64_t w = win.w0; w < win.w1; w++) dxp[h * pg.w + w] += g;
      }
  }
}

const sp_op_def sp_op_avgpool2d = {
    .name = "avgpool2d",
    .flags = 0,
    .infer = avgpool_infer,
    .saved_bytes = NULL,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};
