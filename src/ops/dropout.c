/* Inverted dropout. The keep/drop decision for element i is a pure function of
 * (a->seed, i), so backward regenerates the mask instead of saving one: no
 * saved memory, and the result does not depend on the thread count. */
#include <math.h>
#include <stdio.h>

#include "ops/ops.h"
#include "spry/rng.h"

/* Stream 0x64726f70 ("drop") keeps these draws apart from any other use of the
 * same seed with the same counter. */
static int dropout_keep(uint64_t seed, int64_t i, float p) {
  sp_rng r = sp_rng_make(sp_rng_key(seed, 0x64726f70u, (uint64_t)i));
  return sp_rng_uniform(&r) >= p;
}

/* p == 1 drops everything; the scale would be infinite, and 0 * inf is NaN. */
static float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

static int dropout_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                         sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_dropout_attr *at = attr;
  if (n_in != 1 || n_param != 0) {
    snprintf(err, errlen, "dropout: expects 1 input and no params, got %d inputs, %d params", n_in, n_param);
    return -1;
  }
  if (!at || !(at->p >= 0.0f && at->p <= 1.0f)) {
    snprintf(err, errlen, "dropout: p must be in [0, 1], got %g", at ? (double)at->p : NAN);
    return -1;
  }
  *out = in[0];
  return 0;
}

static void dropout_forward(const sp_op_args *a) {
  const sp_dropout_attr *at = a->attr;
  const float *x = a->in[0]->data;
  float *y = a->out->data;
  int64_t n = sp_tensor_numel(a->out);
  if (!a->training || at->p == 0.0f) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return;
  }
  float scale = dropout_scale(at->p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = dropout_keep(a->seed, i, at->p) ? x[i] * scale : 0.0f;
}

static void dropout_backward(const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sp_dropout_attr *at = a->attr;
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  int64_t n = sp_tensor_numel(a->d_out);
  if (!a->training || at->p == 0.0f) {
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    return;
  }
  float scale = dropout_scale(at->p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    if (dropout_keep(a->seed, i, at->p)) dx[i] += dy[i] * scale;
}

const sp_op_def sp_op_dropout = {
    .name = "dropout",
    .flags = 0,
    .infer = dropout_infer,
    .saved_bytes = NULL,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
