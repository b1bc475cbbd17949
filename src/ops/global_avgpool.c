/* Global average pooling: [N,C,H,W] -> [N,C,1,1], the mean of each plane.
 * Planes can be large (the whole feature map), so the sum is kept in double. */
#include <stdio.h>

#include "ops/ops.h"

static int global_avgpool_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                                sp_shape *out, char *err, size_t errlen) {
  (void)attr;
  (void)param;
  char sb[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "global_avgpool: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 4 || in[0].d[2] < 1 || in[0].d[3] < 1) {
    snprintf(err, errlen, "global_avgpool: input must be [N,C,H,W] with H, W >= 1, got %s",
             sp_shape_str(&in[0], sb, sizeof sb));
    return -1;
  }
  *out = sp_shape4(in[0].d[0], in[0].d[1], 1, 1);
  return 0;
}

static void global_avgpool_forward(const sp_op_args *a) {
  const sp_shape *is = &a->in[0]->shape;
  int64_t planes = is->d[0] * is->d[1], hw = is->d[2] * is->d[3];
  const float *x = a->in[0]->data;
  float *y = a->out->data;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; pl++) {
    double s = 0.0;
    for (int64_t i = 0; i < hw; i++) s += x[pl * hw + i];
    y[pl] = (float)(s / (double)hw);
  }
}

static void global_avgpool_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_shape *is = &a->d_in[0]->shape;
  int64_t planes = is->d[0] * is->d[1], hw = is->d[2] * is->d[3];
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; pl++) {
    float g = (float)((double)dy[pl] / (double)hw);
    for (int64_t i = 0; i < hw; i++) dx[pl * hw + i] += g;
  }
}

const sp_op_def sp_op_global_avgpool = {
    .name = "global_avgpool",
    .flags = 0,
    .infer = global_avgpool_infer,
    .saved_bytes = NULL,
    .forward = global_avgpool_forward,
    .backward = global_avgpool_backward,
};
