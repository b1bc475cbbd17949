/* Concatenation along dim 1 (channels). In row-major NCHW each sample is one
 * contiguous block per input, so the op is a sequence of block copies: input
 * k's block of C_k * inner elements lands at channel offset sum(C_<k) within
 * each sample's block of C_total * inner. */
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

static int concat_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                        sp_shape *out, char *err, size_t errlen) {
  (void)attr;
  (void)param;
  char sa[64], sb[64];
  if (n_in < 2 || n_in > SP_OP_MAX_IN || n_param != 0) {
    snprintf(err, errlen, "concat: expects 2..%d inputs and no params, got %d inputs, %d params", SP_OP_MAX_IN, n_in,
             n_param);
    return -1;
  }
  if (in[0].ndim < 2) {
    snprintf(err, errlen, "concat: input 0 %s has no channel dim", sp_shape_str(&in[0], sa, sizeof sa));
    return -1;
  }
  *out = in[0];
  for (int k = 1; k < n_in; k++) {
    int same = in[k].ndim == in[0].ndim;
    for (int d = 0; same && d < in[0].ndim; d++)
      if (d != 1 && in[k].d[d] != in[0].d[d]) same = 0;
    if (!same) {
      snprintf(err, errlen, "concat: input %d %s does not match input 0 %s outside dim 1", k,
               sp_shape_str(&in[k], sb, sizeof sb), sp_shape_str(&in[0], sa, sizeof sa));
      return -1;
    }
    out->d[1] += in[k].d[1];
  }
  return 0;
}

/* Elements per channel: the product of the dims after dim 1. */
static int64_t concat_inner(const sp_shape *s) {
  int64_t n = 1;
  for (int d = 2; d < s->ndim; d++) n *= s->d[d];
  return n;
}

static void concat_forward(const sp_op_args *a) {
  const sp_shape *os = &a->out->shape;
  int64_t N = os->d[0], inner = concat_inner(os), out_block = os->d[1] * inner;
  float *y = a->out->data;
  int64_t offset = 0;
  for (int k = 0; k < a->n_in; k++) {
    int64_t block = a->in[k]->shape.d[1] * inner;
    const float *x = a->in[k]->data;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) memcpy(y + n * out_block + offset, x + n * block, (size_t)block * sizeof(float));
    offset += block;
  }
}

static void concat_backward(const sp_op_args *a) {
  const sp_shape *os = &a->d_out->shape;
  int64_t N = os->d[0], inner = concat_inner(os), out_block = os->d[1] * inner;
  const float *dy = a->d_out->data;
  int64_t offset = 0;
  for (int k = 0; k < a->n_in; k++) {
    int64_t block = a->in[k]->shape.d[1] * inner;
    if (a->d_in[k]) {
      float *dx = a->d_in[k]->data;
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < block; i++) dx[n * block + i] += dy[n * out_block + offset + i];
    }
    offset += block;
  }
}

const sp_op_def sp_op_concat = {
    .name = "concat",
    .flags = 0,
    .infer = concat_infer,
    .saved_bytes = NULL,
    .forward = concat_forward,
    .backward = concat_backward,
};
