/* Soft-argmax keypoint head and the spatial softmax under it.
 *
 * For each heatmap plane (n, k) of H*W logits: p = softmax over all H*W
 * pixels, then x = scale * sum p[i,j] * j and y = scale * sum p[i,j] * i.
 * The softmax subtracts the plane's max first so large logits cannot
 * overflow exp().
 *
 * Backward of the expectation through the softmax, for one plane with
 * upstream (gx, gy) and unscaled expectations (ex, ey):
 *   d logit[i,j] = scale * p[i,j] * (gx * (j - ex) + gy * (i - ey))
 * which is softmax's p * (g - sum p g) written with g = scale*(gx j + gy i).
 *
 * softargmax saves the probabilities (N*K*H*W floats) so backward does not
 * need the logits kept alive; spatial_softmax's output already is them. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

/* Writes the max-subtracted softmax of x[0..hw) into p. Sums in double: a
 * 64x64 heatmap is 4096 terms. */
static void softmax_plane(const float *x, float *p, int64_t hw) {
  float m = -INFINITY;
  for (int64_t i = 0; i < hw; i++)
    if (x[i] > m) m = x[i];
  double s = 0.0;
  for (int64_t i = 0; i < hw; i++) {
    float e = expf(x[i] - m);
    p[i] = e;
    s += e;
  }
  float inv = (float)(1.0 / s);
  for (int64_t i = 0; i < hw; i++) p[i] *= inv;
}

static int heatmap_infer(const char *name, int n_in, const sp_shape *in, int n_param, sp_shape *out_plane, char *err,
                         size_t errlen) {
  char b[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "%s: expects 1 input and no params, got %d inputs, %d params", name, n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 4 || in[0].d[2] < 1 || in[0].d[3] < 1) {
    snprintf(err, errlen, "%s: input must be heatmaps [N,K,H,W] with H,W >= 1, got %s", name,
             sp_shape_str(&in[0], b, sizeof b));
    return -1;
  }
  *out_plane = in[0];
  return 0;
}

/* ---- softargmax ---------------------------------------------------------- */

static int softargmax_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                            sp_shape *out, char *err, size_t errlen) {
  (void)param;
  sp_shape s;
  if (!attr) {
    snprintf(err, errlen, "softargmax: needs an sp_softargmax_attr (scale)");
    return -1;
  }
  if (heatmap_infer("softargmax", n_in, in, n_param, &s, err, errlen)) return -1;
  *out = sp_shape3(s.d[0], s.d[1], 2);
  return 0;
}

static size_t softargmax_saved_bytes(const void *attr, int n_in, const sp_shape *in, const sp_shape *out) {
  (void)attr;
  (void)n_in;
  (void)out;
  return (size_t)sp_shape_numel(&in[0]) * sizeof(float);
}

/* Unscaled expected column and row of one probability plane. */
static void expect_plane(const float *p, int64_t h, int64_t w, double *ex, double *ey) {
  double sx = 0.0, sy = 0.0;
  for (int64_t i = 0; i < h; i++) {
    double row = 0.0, col = 0.0;
    for (int64_t j = 0; j < w; j++) {
      row += p[i * w + j];
      col += (double)p[i * w + j] * (double)j;
    }
    sy += row * (double)i;
    sx += col;
  }
  *ex = sx;
  *ey = sy;
}

/* One pass over the logits gives the normaliser and both weighted sums, so
 * forward needs no scratch when there is nowhere to save p (inference). */
static void softargmax_forward(const sp_op_args *a) {
  const sp_softargmax_attr *at = a->attr;
  const sp_shape *s = &a->in[0]->shape;
  const int64_t planes = s->d[0] * s->d[1], h = s->d[2], w = s->d[3], hw = h * w;
  const float *x = a->in[0]->data;
  float *y = a->out->data;
  float *saved = a->saved; /* NULL when the caller will not run backward */
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < planes; q++) {
    const float *xq = x + q * hw;
    float m = -INFINITY;
    for (int64_t i = 0; i < hw; i++)
      if (xq[i] > m) m = xq[i];
    double sum = 0.0, sx = 0.0, sy = 0.0;
    for (int64_t i = 0; i < h; i++) {
      double row = 0.0;
      for (int64_t j = 0; j < w; j++) {
        const float e = expf(xq[i * w + j] - m);
        if (saved) saved[q * hw + i * w + j] = e;
        row += e;
        sx += (double)e * (double)j;
      }
      sum += row;
      sy += row * (double)i;
    }
    y[2 * q + 0] = (float)(sx / sum * at->scale);
    y[2 * q + 1] = (float)(sy / sum * at->scale);
    if (saved) {
      const float inv = (float)(1.0 / sum);
      for (int64_t i = 0; i < hw; i++) saved[q * hw + i] *= inv;
    }
  }
}

static void softargmax_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_softargmax_attr *at = a->attr;
  const sp_shape *s = &a->d_in[0]->shape; /* in[0] may be gone */
  const int64_t planes = s->d[0] * s->d[1], h = s->d[2], w = s->d[3], hw = h * w;
  const float *prob = a->saved;
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  SP_ASSERT(prob != NULL); /* the graph always provides saved_bytes() for backward */
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < planes; q++) {
    const float *p = prob + q * hw;
    double ex, ey;
    expect_plane(p, h, w, &ex, &ey);
    const double gx = (double)dy[2 * q + 0] * at->scale, gy = (double)dy[2 * q + 1] * at->scale;
    float *d = dx + q * hw;
    for (int64_t i = 0; i < h; i++) {
      const double ry = gy * ((double)i - ey);
      for (int64_t j = 0; j < w; j++) d[i * w + j] += (float)((double)p[i * w + j] * (gx * ((double)j - ex) + ry));
    }
  }
}

const sp_op_def sp_op_softargmax = {
    .name = "softargmax",
    .flags = 0, /* backward reads only the saved probabilities */
    .infer = softargmax_infer,
    .saved_bytes = softargmax_saved_bytes,
    .forward = softargmax_forward,
    .backward = softargmax_backward,
};

/* ---- spatial softmax ------------------------------------------------------ */

static int spatial_softmax_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                                 sp_shape *out, char *err, size_t errlen) {
  (void)attr;
  (void)param;
  return heatmap_infer("spatial_softmax", n_in, in, n_param, out, err, errlen);
}

static void spatial_softmax_forward(const sp_op_args *a) {
  const sp_shape *s = &a->in[0]->shape;
  const int64_t planes = s->d[0] * s->d[1], hw = s->d[2] * s->d[3];
  const float *x = a->in[0]->data;
  float *y = a->out->data;
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < planes; q++) softmax_plane(x + q * hw, y + q * hw, hw);
}

/* d x = p * (g - sum p g), per plane. */
static void spatial_softmax_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_shape *s = &a->d_in[0]->shape;
  const int64_t planes = s->d[0] * s->d[1], hw = s->d[2] * s->d[3];
  const float *p = a->out->data;
  const float *g = a->d_out->data;
  float *dx = a->d_in[0]->data;
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < planes; q++) {
    const float *pq = p + q * hw, *gq = g + q * hw;
    double dot = 0.0;
    for (int64_t i = 0; i < hw; i++) dot += (double)pq[i] * (double)gq[i];
    float *d = dx + q * hw;
    for (int64_t i = 0; i < hw; i++) d[i] += (float)((double)pq[i] * ((double)gq[i] - dot));
  }
}

const sp_op_def sp_op_spatial_softmax = {
    .name = "spatial_softmax",
    .flags = SP_OP_BWD_NEEDS_OUTPUT,
    .infer = spatial_softmax_infer,
    .saved_bytes = NULL,
    .forward = spatial_softmax_forward,
    .backward = spatial_softmax_backward,
};
