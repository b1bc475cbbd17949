/* Elementwise sum of two same-shape tensors (residual connections). No
 * broadcasting: a shape mismatch in a model is a bug worth an error. */
#include <stdio.h>

#include "ops/ops.h"

static int add_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param, sp_shape *out,
                     char *err, size_t errlen) {
  (void)attr;
  (void)param;
  char sa[64], sb[64];
  if (n_in != 2 || n_param != 0) {
    snprintf(err, errlen, "add: expects 2 inputs and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (!sp_shape_equal(&in[0], &in[1])) {
    snprintf(err, errlen, "add: input shapes differ: %s vs %s", sp_shape_str(&in[0], sa, sizeof sa),
             sp_shape_str(&in[1], sb, sizeof sb));
    return -1;
  }
  *out = in[0];
  return 0;
}

static void add_forward(const sp_op_args *a) {
  const float *x0 = a->in[0]->data, *x1 = a->in[1]->data;
  float *y = a->out->data;
  int64_t n = sp_tensor_numel(a->out);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = x0[i] + x1[i];
}

static void add_backward(const sp_op_args *a) {
  const float *dy = a->d_out->data;
  int64_t n = sp_tensor_numel(a->d_out);
  for (int k = 0; k < 2; k++)
    if (a->d_in[k]) sp_op_grad_pass(a->d_in[k]->data, dy, n);
}

const sp_op_def sp_op_add = {
    .name = "add",
    .flags = 0,
    .infer = add_infer,
    .saved_bytes = NULL,
    .forward = add_forward,
    .backward = add_backward,
};
