/* SGD with momentum, dampening, Nesterov and coupled (L2) weight decay,
 * matching torch.optim.SGD:
 *   d = g + wd*w;  b = first ? d : momentum*b + (1-dampening)*d;
 *   d = nesterov ? d + momentum*b : b;  w -= lr*d
 *
 * Rounding follows PyTorch's vectorised CPU kernels so results agree to the
 * last bit or two: `x.add_(y, alpha=a)` is one fused multiply-add, `x.mul_(a)`
 * its own rounding. Contraction is switched off so the compiler cannot fuse
 * differently from that; the fused steps are written as fmaf. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

#include "optim_impl.h"

void sp_sgd_update(float *w, const float *g, float gscale, float *buf, int64_t n, const sp_opt_config *cfg,
                   double damp_d, float wd, double lr, int first) {
  const float mom = cfg->momentum;
  /* PyTorch computes 1 - dampening and -lr in double, then rounds once. */
  const float keep = (float)(1.0 - damp_d);
  const float neg_lr = (float)(-lr);
  const int nesterov = cfg->nesterov;
  if (mom == 0.0f) {
#pragma omp parallel for schedule(static) if (n >= SP_OPT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
      float gi = g[i] * gscale, d = wd != 0.0f ? fmaf(w[i], wd, gi) : gi;
      w[i] = fmaf(d, neg_lr, w[i]);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n >= SP_OPT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * gscale, d = wd != 0.0f ? fmaf(w[i], wd, gi) : gi;
    float b = first ? d : fmaf(d, keep, buf[i] * mom);
    buf[i] = b;
    d = nesterov ? fmaf(b, mom, d) : b;
    w[i] = fmaf(d, neg_lr, w[i]);
  }
}
