/* Batch normalisation over dim 1 (PyTorch BatchNorm1d/2d/3d semantics) for
 * x[N,C] or x[N,C,...]: each channel is normalised over its M = N * (product
 * of trailing dims) values.
 *
 *  training: y = (x - mean_B) / sqrt(var_B + eps) * gamma + beta, with the
 *            biased batch variance var_B; the running buffers move by
 *            running = (1 - momentum) running + momentum batch, where the
 *            variance fed in is the UNBIASED one (var_B * M / (M - 1)).
 *  eval:     the same with running_mean / running_var in place of the batch.
 *
 * Params are gamma[C], beta[C] (n_param 2), or none (n_param 0: affine=False).
 * States are running_mean[C], running_var[C] (n_state 2), or none (n_state 0:
 * track_running_stats=False, batch statistics in both modes, as PyTorch).
 * saved: f32 mean[C] then inv_std[C], the statistics forward normalised with.
 *
 * Every loop parallelises over channels; inside a channel the sums run in
 * double in a fixed order, so results do not depend on the thread count. */
#include <math.h>
#include <stdio.h>

#include "ops/ops.h"

/* Below this many multiply-adds a parallel region costs more than it saves
 * (thread wake-up is tens of microseconds; worse on a loaded machine). */
#define PAR_MIN_WORK 32768

static int bn_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param, sp_shape *out,
                    char *err, size_t errlen) {
  char xs[64], ps[64];
  if (n_in != 1 || (n_param != 0 && n_param != 2)) {
    snprintf(err, errlen, "batchnorm: expects 1 input and 0 or 2 params (gamma, beta), got %d and %d", n_in, n_param);
    return -1;
  }
  sp_shape_str(&in[0], xs, sizeof xs);
  if (in[0].ndim < 2) {
    snprintf(err, errlen, "batchnorm: input must be [N,C] or [N,C,...], got %s", xs);
    return -1;
  }
  if (sp_shape_numel(&in[0]) < 1) {
    snprintf(err, errlen, "batchnorm: empty input %s", xs);
    return -1;
  }
  const sp_batchnorm_attr *a = attr;
  if (a && !(a->eps > 0.0f)) {
    snprintf(err, errlen, "batchnorm: eps must be > 0, got %g", (double)a->eps);
    return -1;
  }
  for (int p = 0; p < n_param; p++) {
    if (param[p].ndim != 1 || param[p].d[0] != in[0].d[1]) {
      snprintf(err, errlen, "batchnorm: %s %s must be [%lld] to match the channels of input %s",
               p == 0 ? "gamma" : "beta", sp_shape_str(&param[p], ps, sizeof ps), (long long)in[0].d[1], xs);
      return -1;
    }
  }
  *out = in[0];
  return 0;
}

static size_t bn_saved_bytes(const void *attr, int n_in, const sp_shape *in, const sp_shape *out) {
  return 2 * (size_t)in[0].d[1] * sizeof(float);
}

static float attr_eps(const sp_op_args *a) {
  const sp_batchnorm_attr *at = a->attr;
  return at ? at->eps : 1e-5f;
}

static int uses_batch_stats(const sp_op_args *a) {
  return a->training || a->n_state < 2 || !a->state[0] || !a->state[1];
}

/* Batch mean and biased variance of channel c, two-pass in double (a single
 * pass sum-of-squares loses everything when |mean| >> std). */
static void channel_moments(const float *x, sp_bn_geom g, int64_t c, double *mean, double *var) {
  double sum = 0.0, sq = 0.0;
  for (int64_t n = 0; n < g.n; n++) {
    const float *xc = x + (n * g.c + c) * g.s;
    for (int64_t k = 0; k < g.s; k++) sum += xc[k];
  }
  const double m = g.n * g.s, mu = sum / m;
  for (int64_t n = 0; n < g.n; n++) {
    const float *xc = x + (n * g.c + c) * g.s;
    for (int64_t k = 0; k < g.s; k++) sq += (xc[k] - mu) * (xc[k] - mu);
  }
  *mean = mu;
  *var = sq / m;
}

/* The mean and variance forward normalises channel c with; returns inv_std. */
static double channel_stats(const sp_op_args *a, sp_bn_geom g, int64_t c, double *mean, double *var) {
  if (uses_batch_stats(a)) {
    channel_moments(a->in[0]->data, g, c, mean, var);
  } else {
    *mean = ((const float *)a->state[0]->data)[c];
    *var = ((const float *)a->state[1]->data)[c];
  }
  return 1.0 / sqrt(*var + attr_eps(a));
}

static void bn_forward(const sp_op_args *a) {
  const sp_bn_geom g = sp_bn_geom_of(&a->in[0]->shape);
  const int64_t work = g.n * g.c * g.s;
  const float *x = a->in[0]->data;
  const float *gamma = a->n_param == 2 && a->param[0] ? a->param[0]->data : NULL;
  const float *beta = a->n_param == 2 && a->param[1] ? a->param[1]->data : NULL;
  float *y = a->out->data, *saved = a->saved;
  const int update = a->training && a->n_state >= 2 && a->state[0] && a->state[1];
  const sp_batchnorm_attr *at = a->attr;
  const double momentum = at ? at->momentum : 0.1;
  const double m = (double)(g.n * g.s);
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
  for (int64_t c = 0; c < g.c; c++) {
    double mean, var;
    const double inv_std = channel_stats(a, g, c, &mean, &var);
    const double scale = inv_std * (gamma ? gamma[c] : 1.0f), shift = beta ? beta[c] : 0.0f;
    sp_bn_normalize_channel(&g, c, x, mean, scale, shift, y);
    if (saved) {
      saved[c] = (float)mean;
      saved[g.c + c] = (float)inv_std;
    }
    if (update) sp_bn_running_update(a->state[0]->data, a->state[1]->data, c, mean, var, m, momentum);
  }
}

static void bn_backward(const sp_op_args *a) {
  const sp_bn_geom g = sp_bn_geom_of(&a->in[0]->shape);
  const int64_t work = g.n * g.c * g.s;
  const float *x = a->in[0]->data, *dy = a->d_out->data;
  const float *gamma = a->n_param == 2 && a->param[0] ? a->param[0]->data : NULL;
  float *dx = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dgamma = a->n_param == 2 && a->d_param[0] ? a->d_param[0]->data : NULL;
  float *dbeta = a->n_param == 2 && a->d_param[1] ? a->d_param[1]->data : NULL;
  const float *saved = a->saved;
  const int batch = uses_batch_stats(a);
  const double m = (double)(g.n * g.s);
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
  for (int64_t c = 0; c < g.c; c++) {
    double mean, var, inv_std;
    if (saved) {
      mean = saved[c];
      inv_std = saved[g.c + c];
    } else {
      inv_std = channel_stats(a, g, c, &mean, &var);
    }
    double sum_dy, sum_dy_xhat;
    sp_bn_grad_sums(&g, c, x, dy, mean, inv_std, &sum_dy, &sum_dy_xhat);
    if (dgamma) dgamma[c] += (float)sum_dy_xhat;
    if (dbeta) dbeta[c] += (float)sum_dy;
    if (!dx) continue;
    const double scale = inv_std * (gamma ? gamma[c] : 1.0f);
    const double mean_dy = batch ? sum_dy / m : 0.0, mean_dy_xhat = batch ? sum_dy_xhat / m : 0.0;
    sp_bn_input_grad(&g, c, x, dy, mean, inv_std, scale, mean_dy, mean_dy_xhat, dx);
  }
}

const sp_op_def sp_op_batchnorm = {
    .name = "batchnorm",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = bn_infer,
    .saved_bytes = bn_saved_bytes,
    .forward = bn_forward,
    .backward = bn_backward,
};
