/* ReLU. Backward reads the output rather than the input: out > 0 exactly when
 * x > 0, so the graph may run it in place and drop the input. The gradient at
 * x == 0 is 0, as in PyTorch. */
#include <stdio.h>

#include "ops/ops.h"

static int relu_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param, sp_shape *out,
                      char *err, size_t errlen) {
  (void)attr;
  (void)param;
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "relu: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  *out = in[0];
  return 0;
}

static void relu_forward(const sp_op_args *a) {
  const float *x = a->in[0]->data;
  float *y = a->out->data;
  int64_t n = sp_tensor_numel(a->out);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const float *y = a->out->data;
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  int64_t n = sp_tensor_numel(a->out);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    if (y[i] > 0.0f) dx[i] += dy[i];
}

const sp_op_def sp_op_relu = {
    .name = "relu",
    .flags = SP_OP_BWD_NEEDS_OUTPUT,
    .infer = relu_infer,
    .saved_bytes = NULL,
    .forward = relu_forward,
    .backward = relu_backward,
};
