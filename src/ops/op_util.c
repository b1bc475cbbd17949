/* Small kernels several ops share (op.h): written once, tested through each
 * op that uses them. */
#include "ops/op.h"

/* Parallel over channels only when there is enough work to pay the fork. */
#define PAR_MIN_WORK 32768

void sp_op_bias_grad_nchw(const float *dy, int64_t n, int64_t c, int64_t hw, float *db) {
#pragma omp parallel for schedule(static) if (n * c * hw >= PAR_MIN_WORK)
  for (int64_t co = 0; co < c; co++) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const float *dyc = dy + (i * c + co) * hw;
      for (int64_t k = 0; k < hw; k++) s += dyc[k];
    }
    db[co] += (float)s;
  }
}

void sp_op_grad_pass(float *dx, const float *dy, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
}

sp_plane_geom sp_plane_geom_of(const sp_shape *in, const sp_shape *out) {
  return (sp_plane_geom){in->d[0] * in->d[1], in->d[2], in->d[3], out->d[2], out->d[3]};
}

sp_bn_geom sp_bn_geom_of(const sp_shape *x) {
  sp_bn_geom g = {x->d[0], x->d[1], 1};
  for (int k = 2; k < x->ndim; k++) g.s *= x->d[k];
  return g;
}

void sp_bn_normalize_channel(const sp_bn_geom *gp, int64_t c, const float *x, double mean, double scale, double shift,
                             float *y) {
  const sp_bn_geom g = *gp;
  for (int64_t n = 0; n < g.n; n++) {
    const float *xc = x + (n * g.c + c) * g.s;
    float *yc = y + (n * g.c + c) * g.s;
    for (int64_t k = 0; k < g.s; k++) yc[k] = (float)((xc[k] - mean) * scale + shift);
  }
}

void sp_bn_running_update(float *rm, float *rv, int64_t c, double mean, double var, double m, double momentum) {
  /* PyTorch refuses M == 1 in training; there the unbiased variance is
   * undefined, so feed the biased one (0) rather than a division by 0. */
  const double unbiased = m > 1 ? var * m / (m - 1) : var;
  rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * mean);
  rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * unbiased);
}

void sp_bn_grad_sums(const sp_bn_geom *gp, int64_t c, const float *x, const float *dy, double mean, double inv_std,
                     double *sum_dy, double *sum_dy_xhat) {
  const sp_bn_geom g = *gp;
  double s = 0.0, sx = 0.0;
  for (int64_t n = 0; n < g.n; n++) {
    const float *xc = x + (n * g.c + c) * g.s, *dyc = dy + (n * g.c + c) * g.s;
    for (int64_t k = 0; k < g.s; k++) {
      s += dyc[k];
      sx += dyc[k] * ((xc[k] - mean) * inv_std);
    }
  }
  *sum_dy = s, *sum_dy_xhat = sx;
}

void sp_bn_input_grad(const sp_bn_geom *gp, int64_t c, const float *x, const float *dy, double mean, double inv_std,
                      double scale, double mean_dy, double mean_dy_xhat, float *dx) {
  const sp_bn_geom g = *gp;
  for (int64_t n = 0; n < g.n; n++) {
    const float *xc = x + (n * g.c + c) * g.s, *dyc = dy + (n * g.c + c) * g.s;
    float *dxc = dx + (n * g.c + c) * g.s;
    for (int64_t k = 0; k < g.s; k++) {
      const double xhat = (xc[k] - mean) * inv_std;
      dxc[k] += (float)(scale * (dyc[k] - mean_dy - xhat * mean_dy_xhat));
    }
  }
}
