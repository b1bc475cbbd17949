/* BlurPool (Zhang 2019, "Making Convolutional Networks Shift-Invariant
 * Again"): every channel is convolved with the same normalised binomial
 * filter, with reflect padding, then subsampled by `stride`. Padding matches
 * the antialiased-cnns reference: floor((f-1)/2) before and ceil((f-1)/2)
 * after, so the output is ceil(H / stride) for every filter size. */
#include <stdio.h>

#include "ops/ops.h"

/* Binomial rows C(f-1, k) up to f = 7, the range antialiased-cnns offers;
 * ops.h promises 2..5 and f = 1 (plain subsampling) costs nothing extra. */
#define BLURPOOL_MAX_F 7

static void blurpool_taps(int f, double *taps) {
  double total = 0.0;
  for (int k = 0; k < f; k++) {
    double c = 1.0; /* C(f-1, k) */
    for (int j = 1; j <= k; j++) c = c * (f - j) / j;
    taps[k] = c;
    total += c;
  }
  for (int k = 0; k < f; k++) taps[k] /= total;
}

/* Reflect (mirror without repeating the edge), as F.pad(mode="reflect");
 * infer guarantees the padding is smaller than the dimension. */
static int64_t blurpool_reflect(int64_t i, int64_t n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

static int blurpool_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                          sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_blurpool_attr *at = attr;
  char sb[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "blurpool: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 4) {
    snprintf(err, errlen, "blurpool: input must be [N,C,H,W], got %s", sp_shape_str(&in[0], sb, sizeof sb));
    return -1;
  }
  if (!at || at->filter_size < 1 || at->filter_size > BLURPOOL_MAX_F || at->stride < 1) {
    snprintf(err, errlen, "blurpool: filter_size must be 1..%d and stride >= 1, got %d and %d", BLURPOOL_MAX_F,
             at ? at->filter_size : 0, at ? at->stride : 0);
    return -1;
  }
  int pad_after = at->filter_size / 2; /* ceil((f-1)/2), the larger side */
  if (in[0].d[2] <= pad_after || in[0].d[3] <= pad_after) {
    snprintf(err, errlen, "blurpool: input %s too small for reflect padding %d (filter_size %d)",
             sp_shape_str(&in[0], sb, sizeof sb), pad_after, at->filter_size);
    return -1;
  }
  int64_t ho = (in[0].d[2] - 1) / at->stride + 1, wo = (in[0].d[3] - 1) / at->stride + 1;
  *out = sp_shape4(in[0].d[0], in[0].d[1], ho, wo);
  return 0;
}

static void blurpool_forward(const sp_op_args *a) {
  const sp_blurpool_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->in[0]->shape, &a->out->shape);
  int f = at->filter_size, s = at->stride, pad = (f - 1) / 2;
  double taps[BLURPOOL_MAX_F];
  blurpool_taps(f, taps);
  const float *x = a->in[0]->data;
  float *y = a->out->data;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    const float *xp = x + pl * pg.h * pg.w;
    for (int64_t oh = 0; oh < pg.ho; oh++)
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        double acc = 0.0;
        for (int i = 0; i < f; i++) {
          int64_t h = blurpool_reflect(oh * s - pad + i, pg.h);
          for (int j = 0; j < f; j++)
            acc += taps[i] * taps[j] * xp[h * pg.w + blurpool_reflect(ow * s - pad + j, pg.w)];
        }
        y[pl * pg.ho * pg.wo + oh * pg.wo + ow] = (float)acc;
      }
  }
}

static void blurpool_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_blurpool_attr *at = a->attr;
  const sp_plane_geom pg = sp_plane_geom_of(&a->d_in[0]->shape, &a->d_out->shape);
  int f = at->filter_size, s = at->stride, pad = (f - 1) / 2;
  double taps[BLURPOOL_MAX_F];
  blurpool_taps(f, taps);
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  /* Neighbouring outputs (and mirrored taps) hit the same input cell, so one
   * thread owns a whole plane. */
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < pg.planes; pl++) {
    float *dxp = dx + pl * pg.h * pg.w;
    for (int64_t oh = 0; oh < pg.ho; oh++)
      for (int64_t ow = 0; ow < pg.wo; ow++) {
        double g = dy[pl * pg.ho * pg.wo + oh * pg.wo + ow];
        for (int i = 0; i < f; i++) {
          int64_t h = blurpool_reflect(oh * s - pad + i, pg.h);
          for (int j = 0; j < f; j++)
            dxp[h * pg.w + blurpool_reflect(ow * s - pad + j, pg.w)] += (float)(g * taps[i] * taps[j]);
        }
      }
  }
}

const sp_op_def sp_op_blurpool = {
    .name = "blurpool",
    .flags = 0,
    .infer = blurpool_infer,
    .saved_bytes = NULL,
    .forward = blurpool_forward,
    .backward = blurpool_backward,
};
