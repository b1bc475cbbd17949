/* Reshape: the same elements in the same row-major order under a new shape.
 * A dim of 0 keeps the input's dim at that position, one dim of -1 takes
 * whatever is left. The reference copies; a graph may alias instead. */
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

static int reshape_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                         sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_reshape_attr *at = attr;
  char sa[64];
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "reshape: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (!at || at->ndim < 1 || at->ndim > SP_MAX_DIMS) {
    snprintf(err, errlen, "reshape: target ndim must be 1..%d, got %d", SP_MAX_DIMS, at ? at->ndim : 0);
    return -1;
  }
  sp_shape_str(&in[0], sa, sizeof sa);
  int64_t numel = sp_shape_numel(&in[0]), known = 1;
  int infer_at = -1;
  out->ndim = at->ndim;
  for (int d = 0; d < at->ndim; d++) {
    int64_t v = at->d[d];
    if (v == 0) {
      if (d >= in[0].ndim) {
        snprintf(err, errlen, "reshape: dim %d is 0 (keep) but input %s has only %d dims", d, sa, in[0].ndim);
        return -1;
      }
      v = in[0].d[d];
    } else if (v == -1) {
      if (infer_at >= 0) {
        snprintf(err, errlen, "reshape: more than one -1 in the target shape for input %s", sa);
        return -1;
      }
      infer_at = d;
      out->d[d] = 1;
      continue;
    } else if (v < 0) {
      snprintf(err, errlen, "reshape: dim %d is %lld; only 0, -1 and positive sizes are allowed", d, (long long)v);
      return -1;
    }
    out->d[d] = v;
    known *= v;
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      snprintf(err, errlen, "reshape: cannot infer dim %d: input %s has %lld elements, not a multiple of %lld",
               infer_at, sa, (long long)numel, (long long)known);
      return -1;
    }
    out->d[infer_at] = numel / known;
  }
  if (sp_shape_numel(out) != numel) {
    char sb[64];
    snprintf(err, errlen, "reshape: input %s (%lld elements) cannot become %s (%lld elements)", sa, (long long)numel,
             sp_shape_str(out, sb, sizeof sb), (long long)sp_shape_numel(out));
    return -1;
  }
  return 0;
}

static void reshape_forward(const sp_op_args *a) {
  memcpy(a->out->data, a->in[0]->data, (size_t)sp_tensor_numel(a->out) * sizeof(float));
}

static void reshape_backward(const sp_op_args *a) {
  if (a->d_in[0]) sp_op_grad_pass(a->d_in[0]->data, a->d_out->data, sp_tensor_numel(a->d_out));
}

const sp_op_def sp_op_reshape = {
    .name = "reshape",
    .flags = 0,
    .infer = reshape_infer,
    .saved_bytes = NULL,
    .forward = reshape_forward,
    .backward = reshape_backward,
};
