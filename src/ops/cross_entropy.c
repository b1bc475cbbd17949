/* Cross-entropy on logits[N,C] and integer class labels (i32 [N]), mean over
 * N, as F.cross_entropy. Per row: logsumexp(x) - x[label], with the row max
 * subtracted before exp so large logits cannot overflow. Backward:
 * d x = w/N * (softmax(x) - onehot(label)); labels never get a gradient.
 *
 * A label outside [0, C) is a bug upstream (a data loader or a class map),
 * not something to clamp silently: forward then reads nothing out of bounds
 * but makes the loss NaN, and backward writes NaN into that row's gradient,
 * so the first step that sees it shows it. */
#include <math.h>
#include <stdio.h>

#include "ops/ops.h"

static int cross_entropy_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                               sp_shape *out, char *err, size_t errlen) {
  (void)attr;
  (void)param;
  char a[64], b[64];
  if (n_in != 2 || n_param != 0) {
    snprintf(err, errlen, "cross_entropy: expects 2 inputs (logits, labels) and no params, got %d inputs, %d params",
             n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 2 || in[0].d[0] < 1 || in[0].d[1] < 1 || in[1].ndim != 1 || in[1].d[0] != in[0].d[0]) {
    snprintf(err, errlen, "cross_entropy: logits %s must be [N,C] and labels %s must be [N]",
             sp_shape_str(&in[0], a, sizeof a), sp_shape_str(&in[1], b, sizeof b));
    return -1;
  }
  *out = sp_shape1(1);
  return 0;
}

/* log sum_c exp(x[c]) for one row. */
static double row_logsumexp(const float *x, int64_t c) {
  float m = -INFINITY;
  for (int64_t j = 0; j < c; j++)
    if (x[j] > m) m = x[j];
  double s = 0.0;
  for (int64_t j = 0; j < c; j++) s += exp((double)x[j] - m);
  return (double)m + log(s);
}

static void cross_entropy_forward(const sp_op_args *a) {
  const float *x = a->in[0]->data;
  const int32_t *label = a->in[1]->data;
  const int64_t n = a->in[0]->shape.d[0], c = a->in[0]->shape.d[1];
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (label[i] < 0 || label[i] >= c) {
      s = NAN;
      break;
    }
    s += row_logsumexp(x + i * c, c) - (double)x[i * c + label[i]];
  }
  ((float *)a->out->data)[0] = (float)(s / (double)n);
}

static void cross_entropy_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const float *x = a->in[0]->data;
  const int32_t *label = a->in[1]->data;
  float *dx = a->d_in[0]->data;
  const int64_t n = a->in[0]->shape.d[0], c = a->in[0]->shape.d[1];
  const double w = (double)((const float *)a->d_out->data)[0] / (double)n;
  for (int64_t i = 0; i < n; i++) {
    float *d = dx + i * c;
    if (label[i] < 0 || label[i] >= c) {
      for (int64_t j = 0; j < c; j++) d[j] += NAN;
      continue;
    }
    const float *xi = x + i * c;
    const double lse = row_logsumexp(xi, c);
    for (int64_t j = 0; j < c; j++) d[j] += (float)(w * (exp((double)xi[j] - lse) - (j == label[i] ? 1.0 : 0.0)));
  }
}

const sp_op_def sp_op_cross_entropy = {
    .name = "cross_entropy",
    .flags = SP_OP_IS_LOSS | SP_OP_BWD_NEEDS_INPUT,
    .infer = cross_entropy_infer,
    .saved_bytes = NULL,
    .forward = cross_entropy_forward,
    .backward = cross_entropy_backward,
};
