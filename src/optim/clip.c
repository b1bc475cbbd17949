/* Global gradient norm and clipping (torch.nn.utils.clip_grad_norm_, L2).
 *
 * The sum of squares is taken in double over fixed 64K-element chunks that
 * are added in index order, so the norm is the same bit for bit whatever the
 * number of threads (same seed + same data must give the same run), and no
 * memory is allocated per call. */
#include <math.h>

#include "optim_impl.h"

#define CHUNK ((int64_t)1 << 16)
#define GROUP 64 /* chunks summed in parallel before folding into the total */

static double sum_squares(const float *g, int64_t n) {
  double total = 0;
  int64_t chunks = (n + CHUNK - 1) / CHUNK;
  for (int64_t c0 = 0; c0 < chunks; c0 += GROUP) {
    double part[GROUP];
    int cnt = (int)(chunks - c0 < GROUP ? chunks - c0 : GROUP);
#pragma omp parallel for schedule(static) if (cnt > 1)
    for (int k = 0; k < cnt; k++) {
      int64_t lo = (c0 + k) * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
      double s = 0;
      for (int64_t i = lo; i < hi; i++) s += (double)g[i] * (double)g[i];
      part[k] = s;
    }
    for (int k = 0; k < cnt; k++) total += part[k];
  }
  return total;
}

double sp_grad_global_norm(int n, const sp_opt_param *p) {
  double total = 0;
  for (int i = 0; i < n; i++)
    if (p[i].numel > 0) total += sum_squares(p[i].grad, p[i].numel);
  return sqrt(total);
}

double sp_clip_grad_norm(int n, const sp_opt_param *p, double max_norm) {
  double norm = sp_grad_global_norm(n, p);
  /* The 1e-6 keeps an all-zero gradient finite, as in PyTorch. A NaN/inf norm
   * gives a non-finite scale: the gradients become NaN, which PyTorch (without
   * error_if_nonfinite) also does, so the trainer's NaN check sees it. */
  double coef = max_norm / (norm + 1e-6);
  if (!(coef < 1.0) && isfinite(norm)) return norm;
  float scale = (float)coef;
  for (int i = 0; i < n; i++) {
    float *g = p[i].grad;
    int64_t m = p[i].numel;
#pragma omp parallel for schedule(static) if (m >= SP_OPT_PAR_MIN)
    for (int64_t j = 0; j < m; j++) g[j] *= scale;
  }
  return norm;
}
