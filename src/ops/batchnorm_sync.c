/* Synchronised batch norm: batchnorm (ops/batchnorm.c semantics) whose batch
 * statistics are those of the global batch spread over data-parallel ranks.
 *
 * The op never talks to the network itself: its attr carries a `sum` callback
 * that adds a vector of doubles over all ranks in place (the trainer plugs in
 * an MPI all-reduce). Forward sums per-channel sums and counts, then the
 * squared deviations around the global mean (two passes, like the local op,
 * because one pass of sum-of-squares loses everything when |mean| >> std);
 * backward sums the two per-channel projections of dy, so dx is the gradient
 * of the global-batch normalisation. dgamma and dbeta stay local: the
 * gradient all-reduce sums them with every other parameter.
 *
 * With a world of one the sums are identities and this op equals batchnorm.
 * Eval (running statistics) needs no communication. */
#include <math.h>
#include <stdlib.h>

#include "ops/ops.h"

static int infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param, sp_shape *out,
                 char *err, size_t errlen) {
  const sp_batchnorm_sync_attr *a = attr;
  return sp_op_batchnorm.infer(a ? &a->bn : NULL, n_in, in, n_param, param, out, err, errlen);
}

static size_t saved_bytes(const void *attr, int n_in, const sp_shape *in, const sp_shape *out) {
  return 2 * (size_t)in[0].d[1] * sizeof(float);
}

static int batch_stats(const sp_op_args *a) { return a->training || a->n_state < 2 || !a->state[0] || !a->state[1]; }

static void sync_forward(const sp_op_args *a) {
  const sp_batchnorm_sync_attr *at = a->attr;
  if (!batch_stats(a) || !at->sum) { /* running statistics: nothing to share */
    sp_op_args plain = *a;           /* batch norm's kernels read its own attr */
    plain.attr = &at->bn;
    sp_op_batchnorm.forward(&plain);
    return;
  }
  const sp_bn_geom g = sp_bn_geom_of(&a->in[0]->shape);
  const float *x = a->in[0]->data;
  const float *gamma = a->n_param == 2 && a->param[0] ? a->param[0]->data : NULL;
  const float *beta = a->n_param == 2 && a->param[1] ? a->param[1]->data : NULL;
  float *y = a->out->data, *saved = a->saved;
  /* One small vector per call: the all-reduce it feeds costs far more. */
  double *v = malloc(sizeof(double) * (size_t)(2 * g.c + 1));
  if (!v) abort();
  double *mean = v, *var = v + g.c;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.c; c++) {
    double s = 0;
    for (int64_t n = 0; n < g.n; n++)
      for (int64_t k = 0; k < g.s; k++) s += x[(n * g.c + c) * g.s + k];
    mean[c] = s;
  }
  v[g.c] = (double)(g.n * g.s);
  at->sum(at->sum_user, v, (int)g.c + 1);
  const double m = v[g.c];
  for (int64_t c = 0; c < g.c; c++) mean[c] /= m;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.c; c++) {
    double sq = 0;
    for (int64_t n = 0; n < g.n; n++)
      for (int64_t k = 0; k < g.s; k++) {
        double d = x[(n * g.c + c) * g.s + k] - mean[c];
        sq += d * d;
      }
    var[c] = sq;
  }
  at->sum(at->sum_user, var, (int)g.c);
  const int update = a->training && a->n_state >= 2 && a->state[0] && a->state[1];
  const double momentum = at->bn.momentum;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.c; c++) {
    const double vb = var[c] / m, inv_std = 1.0 / sqrt(vb + at->bn.eps);
    const double scale = inv_std * (gamma ? gamma[c] : 1.0f), shift = beta ? beta[c] : 0.0f;
    sp_bn_normalize_channel(&g, c, x, mean[c], scale, shift, y);
    if (saved) {
      saved[c] = (float)mean[c];
      saved[g.c + c] = (float)inv_std;
    }
    if (update) sp_bn_running_update(a->state[0]->data, a->state[1]->data, c, mean[c], vb, m, momentum);
  }
  free(v);
}

static void sync_backward(const sp_op_args *a) {
  const sp_batchnorm_sync_attr *at = a->attr;
  if (!batch_stats(a) || !at->sum || !a->saved) {
    sp_op_args plain = *a;
    plain.attr = &at->bn;
    sp_op_batchnorm.backward(&plain);
    return;
  }
  const sp_bn_geom g = sp_bn_geom_of(&a->in[0]->shape);
  const float *x = a->in[0]->data, *dy = a->d_out->data, *saved = a->saved;
  const float *gamma = a->n_param == 2 && a->param[0] ? a->param[0]->data : NULL;
  float *dx = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dgamma = a->n_param == 2 && a->d_param[0] ? a->d_param[0]->data : NULL;
  float *dbeta = a->n_param == 2 && a->d_param[1] ? a->d_param[1]->data : NULL;
  double *v = malloc(sizeof(double) * (size_t)(2 * g.c + 1));
  if (!v) abort();
  double *sum_dy = v, *sum_dy_xhat = v + g.c;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.c; c++) {
    const double mean = saved[c], inv_std = saved[g.c + c];
    double s, sx;
    sp_bn_grad_sums(&g, c, x, dy, mean, inv_std, &s, &sx);
    sum_dy[c] = s;
    sum_dy_xhat[c] = sx;
    /* Local: the gradient all-reduce adds the other ranks' parts. */
    if (dgamma) dgamma[c] += (float)sx;
    if (dbeta) dbeta[c] += (float)s;
  }
  if (!dx) {
    free(v);
    return;
  }
  v[2 * g.c] = (double)(g.n * g.s);
  at->sum(at->sum_user, v, (int)(2 * g.c + 1));
  const double m = v[2 * g.c];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.c; c++) {
    const double mean = saved[c], inv_std = saved[g.c + c];
    const double scale = inv_std * (gamma ? gamma[c] : 1.0f);
    const double mean_dy = sum_dy[c] / m, mean_dy_xhat = sum_dy_xhat[c] / m;
    sp_bn_input_grad(&g, c, x, dy, mean, inv_std, scale, mean_dy, mean_dy_xhat, dx);
  }
  free(v);
}

const sp_op_def sp_op_batchnorm_sync = {
    .name = "batchnorm_sync",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = infer,
    .saved_bytes = saved_bytes,
    .forward = sync_forward,
    .backward = sync_backward,
};
