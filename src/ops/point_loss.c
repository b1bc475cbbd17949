/* Per-keypoint Euclidean distance loss on pred[N,K,2], target[N,K,2]:
 * d = sqrt(dx^2 + dy^2 + eps); L2 mode = mean over N*K points, Euclidean
 * mode (sum_points) = sum over the K points, mean over N. eps keeps the
 * gradient (dx, dy) / d finite when a prediction lands exactly on its
 * target; it also adds sqrt(eps) per point to the value, as in the PyTorch
 * formulation torch.sqrt(((p - t)**2).sum(-1) + eps). */
#include <math.h>
#include <stdio.h>

#include "ops/ops.h"

static int point_loss_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                            sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_point_loss_attr *at = attr;
  char a[64], b[64];
  if (n_in != 2 || n_param != 0) {
    snprintf(err, errlen, "point_loss: expects 2 inputs (pred, target) and no params, got %d inputs, %d params", n_in,
             n_param);
    return -1;
  }
  if (!at || !(at->eps >= 0.0f)) {
    snprintf(err, errlen, "point_loss: needs an sp_point_loss_attr with eps >= 0");
    return -1;
  }
  if (in[0].ndim != 3 || in[0].d[2] != 2 || in[0].d[0] < 1 || in[0].d[1] < 1 || !sp_shape_equal(&in[0], &in[1])) {
    snprintf(err, errlen, "point_loss: pred %s and target %s must both be points [N,K,2]",
             sp_shape_str(&in[0], a, sizeof a), sp_shape_str(&in[1], b, sizeof b));
    return -1;
  }
  *out = sp_shape1(1);
  return 0;
}

/* What the sum over points is divided by. */
static double point_loss_divisor(const sp_point_loss_attr *at, const sp_shape *s) {
  return at->sum_points ? (double)s->d[0] : (double)(s->d[0] * s->d[1]);
}

static void point_loss_forward(const sp_op_args *a) {
  const sp_point_loss_attr *at = a->attr;
  const float *p = a->in[0]->data, *t = a->in[1]->data;
  const int64_t pts = a->in[0]->shape.d[0] * a->in[0]->shape.d[1];
  double s = 0.0;
  for (int64_t i = 0; i < pts; i++) {
    const double dx = (double)p[2 * i] - t[2 * i], dy = (double)p[2 * i + 1] - t[2 * i + 1];
    s += sqrt(dx * dx + dy * dy + (double)at->eps);
  }
  ((float *)a->out->data)[0] = (float)(s / point_loss_divisor(at, &a->in[0]->shape));
}

static void point_loss_backward(const sp_op_args *a) {
  const sp_point_loss_attr *at = a->attr;
  const float *p = a->in[0]->data, *t = a->in[1]->data;
  float *dp = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dt = a->d_in[1] ? a->d_in[1]->data : NULL;
  const int64_t pts = a->in[0]->shape.d[0] * a->in[0]->shape.d[1];
  const double w = (double)((const float *)a->d_out->data)[0] / point_loss_divisor(at, &a->in[0]->shape);
  for (int64_t i = 0; i < pts; i++) {
    const double dx = (double)p[2 * i] - t[2 * i], dy = (double)p[2 * i + 1] - t[2 * i + 1];
    const double d = sqrt(dx * dx + dy * dy + (double)at->eps);
    /* eps == 0 and a perfect hit: take the subgradient 0 rather than NaN */
    const double k = d > 0.0 ? w / d : 0.0;
    const float gx = (float)(k * dx), gy = (float)(k * dy);
    if (dp) {
      dp[2 * i] += gx;
      dp[2 * i + 1] += gy;
    }
    if (dt) {
      dt[2 * i] -= gx;
      dt[2 * i + 1] -= gy;
    }
  }
}

const sp_op_def sp_op_point_loss = {
    .name = "point_loss",
    .flags = SP_OP_IS_LOSS | SP_OP_BWD_NEEDS_INPUT,
    .infer = point_loss_infer,
    .saved_bytes = NULL,
    .forward = point_loss_forward,
    .backward = point_loss_backward,
};
