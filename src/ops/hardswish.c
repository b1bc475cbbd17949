/* HardSwish: x * relu6(x + 3) / 6. The derivative is 0 below -3, x/3 + 1/2
 * in between and 1 above 3. At the kinks we follow PyTorch's vectorised CPU
 * kernel, the path nearly every element takes: x = -3 gives -1/2 (middle
 * branch), x = +3 gives 1 (identity branch), i.e. the middle branch is
 * [-3, 3). (PyTorch's scalar tail loop uses [-3, 3] instead, so PyTorch itself
 * gives 1.5 at +3 for the last few elements of a tensor; we do not copy that.) */
#include <stdio.h>

#include "ops/ops.h"

static int hardswish_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                           sp_shape *out, char *err, size_t errlen) {
  (void)attr;
  (void)param;
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "hardswish: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  *out = in[0];
  return 0;
}

static void hardswish_forward(const sp_op_args *a) {
  const float *x = a->in[0]->data;
  float *y = a->out->data;
  int64_t n = sp_tensor_numel(a->out);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float r = x[i] + 3.0f;
    r = r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r);
    y[i] = x[i] * r / 6.0f;
  }
}

static void hardswish_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const float *x = a->in[0]->data;
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  int64_t n = sp_tensor_numel(a->in[0]);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float g;
    if (x[i] < -3.0f)
      g = 0.0f;
    else if (x[i] < 3.0f)
      g = x[i] / 3.0f + 0.5f;
    else
      g = 1.0f;
    dx[i] += dy[i] * g;
  }
}

const sp_op_def sp_op_hardswish = {
    .name = "hardswish",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = hardswish_infer,
    .saved_bytes = NULL,
    .forward = hardswish_forward,
    .backward = hardswish_backward,
};
