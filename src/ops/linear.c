/* Fully connected layer (PyTorch Linear): y[N,O] = x[N,F] W[O,F]^T + b[O].
 *
 * Each kernel parallelises over the rows of the tensor it writes, and every
 * dot product runs in double in a fixed order, so results are the same for any
 * thread count. */
#include <stdio.h>

#include "ops/ops.h"

/* Below this many multiply-adds a parallel region costs more than it saves
 * (thread wake-up is tens of microseconds; worse on a loaded machine). */
#define PAR_MIN_WORK 32768

static int linear_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                        sp_shape *out, char *err, size_t errlen) {
  char xs[64], ws[64], bs[64];
  if (n_in != 1 || n_param < 1 || n_param > 2) {
    snprintf(err, errlen, "linear: expects 1 input and 1-2 params (weight, bias), got %d and %d", n_in, n_param);
    return -1;
  }
  sp_shape_str(&in[0], xs, sizeof xs);
  sp_shape_str(&param[0], ws, sizeof ws);
  if (in[0].ndim != 2) {
    snprintf(err, errlen, "linear: input must be [N,F] (flatten first), got %s", xs);
    return -1;
  }
  if (param[0].ndim != 2) {
    snprintf(err, errlen, "linear: weight must be [O,F], got %s", ws);
    return -1;
  }
  if (param[0].d[1] != in[0].d[1]) {
    snprintf(err, errlen, "linear: input has %lld features but weight %s expects %lld (input %s)",
             (long long)in[0].d[1], ws, (long long)param[0].d[1], xs);
    return -1;
  }
  if (n_param == 2 && (param[1].ndim != 1 || param[1].d[0] != param[0].d[0])) {
    snprintf(err, errlen, "linear: bias %s must be [%lld] to match weight %s", sp_shape_str(&param[1], bs, sizeof bs),
             (long long)param[0].d[0], ws);
    return -1;
  }
  if (in[0].d[0] < 1 || in[0].d[1] < 1 || param[0].d[0] < 1) {
    snprintf(err, errlen, "linear: empty tensor (input %s, weight %s)", xs, ws);
    return -1;
  }
  *out = sp_shape2(in[0].d[0], param[0].d[0]);
  return 0;
}

/* init + sum over t < len of a[t sa] b[t sb], in double, in order: each
 * output of forward and backward is one such sum. */
static double dot_from(double init, const float *a, int64_t sa, const float *b, int64_t sb, int64_t len) {
  double s = init;
  for (int64_t t = 0; t < len; t++) s += (double)a[t * sa] * b[t * sb];
  return s;
}

static void linear_forward(const sp_op_args *a) {
  const int64_t n = a->in[0]->shape.d[0], f = a->in[0]->shape.d[1], o = a->param[0]->shape.d[0];
  const int64_t work = n * f * o;
  const float *x = a->in[0]->data, *w = a->param[0]->data;
  const float *b = a->n_param > 1 && a->param[1] ? a->param[1]->data : NULL;
  float *y = a->out->data;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
  for (int64_t r = 0; r < n * o; r++) {
    y[r] = (float)dot_from(b ? b[r % o] : 0.0, x + (r / o) * f, 1, w + (r % o) * f, 1, f);
  }
}

static void linear_backward(const sp_op_args *a) {
  const int64_t n = a->in[0]->shape.d[0], f = a->in[0]->shape.d[1], o = a->param[0]->shape.d[0];
  const int64_t work = n * f * o;
  const float *x = a->in[0]->data, *w = a->param[0]->data, *dy = a->d_out->data;
  float *dx = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dw = a->d_param[0] ? a->d_param[0]->data : NULL;
  float *db = a->n_param > 1 && a->d_param[1] ? a->d_param[1]->data : NULL;

  if (dx) { /* dx[i,k] += sum_j dy[i,j] w[j,k] */
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
    for (int64_t e = 0; e < n * f; e++) {
      const int64_t i = e / f, k = e % f;
      dx[e] += (float)dot_from(0.0, dy + i * o, 1, w + k, f, o);
    }
  }
  if (dw) { /* dw[j,k] += sum_i dy[i,j] x[i,k] */
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
    for (int64_t e = 0; e < o * f; e++) {
      const int64_t j = e / f, k = e % f;
      dw[e] += (float)dot_from(0.0, dy + j, o, x + k, f, n);
    }
  }
  if (db) {
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
    for (int64_t j = 0; j < o; j++) {
      double s = 0.0;
      for (int64_t i = 0; i < n; i++) s += dy[i * o + j];
      db[j] += (float)s;
    }
  }
}

const sp_op_def sp_op_linear = {
    .name = "linear",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = linear_infer,
    .saved_bytes = NULL,
    .forward = linear_forward,
    .backward = linear_backward,
};
