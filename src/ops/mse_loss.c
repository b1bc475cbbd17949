/* MSE loss: mean (pred - target)^2 over every element. d_out[0] is the loss
 * weight. */
#include <stdio.h>

#include "ops/ops.h"

static int mse_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param, sp_shape *out,
                     char *err, size_t errlen) {
  (void)attr;
  (void)param;
  char a[64], b[64];
  if (n_in != 2 || n_param != 0) {
    snprintf(err, errlen, "mse_loss: expects 2 inputs (pred, target) and no params, got %d inputs, %d params", n_in,
             n_param);
    return -1;
  }
  if (!sp_shape_equal(&in[0], &in[1]) || sp_shape_numel(&in[0]) < 1) {
    snprintf(err, errlen, "mse_loss: pred %s and target %s must have the same non-empty shape",
             sp_shape_str(&in[0], a, sizeof a), sp_shape_str(&in[1], b, sizeof b));
    return -1;
  }
  *out = sp_shape1(1);
  return 0;
}

static void mse_forward(const sp_op_args *a) {
  const float *p = a->in[0]->data, *t = a->in[1]->data;
  const int64_t n = sp_tensor_numel(a->in[0]);
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double d = (double)p[i] - (double)t[i];
    s += d * d;
  }
  ((float *)a->out->data)[0] = (float)(s / (double)n);
}

static void mse_backward(const sp_op_args *a) {
  const float *p = a->in[0]->data, *t = a->in[1]->data;
  float *dp = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dt = a->d_in[1] ? a->d_in[1]->data : NULL;
  const int64_t n = sp_tensor_numel(a->in[0]);
  const double w2 = 2.0 * (double)((const float *)a->d_out->data)[0] / (double)n;
  for (int64_t i = 0; i < n; i++) {
    const float g = (float)(w2 * ((double)p[i] - (double)t[i]));
    if (dp) dp[i] += g;
    if (dt) dt[i] -= g;
  }
}

const sp_op_def sp_op_mse_loss = {
    .name = "mse_loss",
    .flags = SP_OP_IS_LOSS | SP_OP_BWD_NEEDS_INPUT,
    .infer = mse_infer,
    .saved_bytes = NULL,
    .forward = mse_forward,
    .backward = mse_backward,
};
