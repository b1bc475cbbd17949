/* Temporal shift (TSM) on x[N*T,C,H,W], fused: one pass, no padded copy.
 *
 * For clip n and frame t, output channel c reads frame
 *   t+1  for c in [0, fold_back)
 *   t-1  for c in [fold_back, fold_back + fold_fwd)
 *   t    otherwise,
 * and zeros when that frame is outside [0, T). fold_x = floor(C * ratio_x),
 * computed in float as PaddlePaddle's kernel does (int(c * shift_ratio)).
 * Note: with ratio_back == ratio_fwd == r the second boundary is
 * 2*floor(C r) (TSM's 2*fold), not Paddle's floor(2 C r); they differ only
 * when C r has a fractional part >= 0.5.
 *
 * Each of the three channel groups of one (n, t) is a contiguous run of
 * group_channels*H*W floats in both x and out, so forward is at most three
 * memcpy/memset calls per frame and backward three vector adds: the op runs
 * at memory speed. Backward is the same shift in the opposite direction:
 * d x[t] gets d out[t-1] on the back-fold channels and d out[t+1] on the
 * forward-fold ones. Frames are independent, so both loops split over
 * (n, t) across threads without changing any result. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

int64_t sp_tshift_fold(int64_t c, float ratio) { return (int64_t)floorf((float)c * ratio); }

static int tshift_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                        sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_tshift_attr *at = attr;
  char b[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "tshift: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (!at || at->segments < 1) {
    snprintf(err, errlen, "tshift: needs an sp_tshift_attr with segments >= 1 (got %d)", at ? at->segments : 0);
    return -1;
  }
  if (in[0].ndim != 4 || in[0].d[0] % at->segments != 0) {
    snprintf(err, errlen, "tshift: input must be [N*T,C,H,W] with N*T divisible by segments=%d, got %s", at->segments,
             sp_shape_str(&in[0], b, sizeof b));
    return -1;
  }
  const int64_t c = in[0].d[1];
  if (!(at->ratio_back >= 0.0f) || !(at->ratio_fwd >= 0.0f) ||
      sp_tshift_fold(c, at->ratio_back) + sp_tshift_fold(c, at->ratio_fwd) > c) {
    snprintf(err, errlen, "tshift: ratios back=%g fwd=%g give folds %lld+%lld > C=%lld (input %s)",
             (double)at->ratio_back, (double)at->ratio_fwd, (long long)sp_tshift_fold(c, at->ratio_back),
             (long long)sp_tshift_fold(c, at->ratio_fwd), (long long)c, sp_shape_str(&in[0], b, sizeof b));
    return -1;
  }
  *out = in[0];
  return 0;
}

static void tshift_forward(const sp_op_args *a) {
  const sp_tshift_attr *at = a->attr;
  const sp_shape *s = &a->in[0]->shape;
  const int64_t nt = s->d[0], T = at->segments, c = s->d[1], hw = s->d[2] * s->d[3];
  const int64_t fb = sp_tshift_fold(c, at->ratio_back), ff = sp_tshift_fold(c, at->ratio_fwd);
  const int64_t frame = c * hw;
  const float *x = a->in[0]->data;
  float *y = a->out->data;
#pragma omp parallel for schedule(static) if (nt * frame > (1 << 16))
  for (int64_t f = 0; f < nt; f++) {
    const int64_t t = f % T;
    float *yf = y + f * frame;
    /* back fold: from frame t+1 */
    if (t + 1 < T)
      memcpy(yf, x + (f + 1) * frame, (size_t)(fb * hw) * sizeof(float));
    else
      memset(yf, 0, (size_t)(fb * hw) * sizeof(float));
    /* forward fold: from frame t-1 */
    if (t > 0)
      memcpy(yf + fb * hw, x + (f - 1) * frame + fb * hw, (size_t)(ff * hw) * sizeof(float));
    else
      memset(yf + fb * hw, 0, (size_t)(ff * hw) * sizeof(float));
    /* the rest stay */
    memcpy(yf + (fb + ff) * hw, x + f * frame + (fb + ff) * hw, (size_t)((c - fb - ff) * hw) * sizeof(float));
  }
}

static void add_run(float *restrict d, const float *restrict g, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] += g[i];
}

static void tshift_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_tshift_attr *at = a->attr;
  const sp_shape *s = &a->d_in[0]->shape; /* not in[0]: its memory may be reused */
  const int64_t nt = s->d[0], T = at->segments, c = s->d[1], hw = s->d[2] * s->d[3];
  const int64_t fb = sp_tshift_fold(c, at->ratio_back), ff = sp_tshift_fold(c, at->ratio_fwd);
  const int64_t frame = c * hw;
  const float *g = a->d_out->data;
  float *dx = a->d_in[0]->data;
#pragma omp parallel for schedule(static) if (nt * frame > (1 << 16))
  for (int64_t f = 0; f < nt; f++) {
    const int64_t t = f % T;
    float *df = dx + f * frame;
    /* frame t's back-fold channels were read by output frame t-1 */
    if (t > 0) add_run(df, g + (f - 1) * frame, fb * hw);
    /* its forward-fold channels by output frame t+1 */
    if (t + 1 < T) add_run(df + fb * hw, g + (f + 1) * frame + fb * hw, ff * hw);
    add_run(df + (fb + ff) * hw, g + f * frame + (fb + ff) * hw, (c - fb - ff) * hw);
  }
}

const sp_op_def sp_op_tshift = {
    .name = "tshift",
    .flags = 0, /* a pure data movement: backward needs only d_out */
    .infer = tshift_infer,
    .saved_bytes = NULL,
    .forward = tshift_forward,
    .backward = tshift_backward,
};
