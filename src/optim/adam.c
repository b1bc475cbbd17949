/* Adam and AdamW, matching torch.optim.Adam / AdamW (1.13, no amsgrad):
 *   AdamW: w *= 1 - lr*wd            Adam: g += wd*w
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   w += -(lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 * The scalar factors are computed in double from the decimal hyper-parameters
 * and rounded once to f32, as PyTorch does with Python floats; the element
 * math is f32 with PyTorch's operation order and fusion (see sgd.c). */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>

#include "optim_impl.h"

void sp_adam_update(float *w, const float *g, float gscale, float *m, float *v, int64_t n, const sp_opt_config *cfg,
                    double b1_d, double b2_d, double eps_d, float wd, double wd_d, double lr, int64_t t) {
  const float b1 = cfg->beta1, b2 = cfg->beta2;
  const float a1 = (float)(1.0 - b1_d), a2 = (float)(1.0 - b2_d);
  const float eps = (float)eps_d;
  const double bc1 = 1.0 - pow(b1_d, (double)t);
  const double bc2 = 1.0 - pow(b2_d, (double)t);
  const float neg_step = (float)(-(lr / bc1));
  const float bc2_sqrt = (float)sqrt(bc2);
  const int decoupled = cfg->kind == SP_OPT_ADAMW;
  /* AdamW shrinks the weights before the Adam step; Adam folds wd into g.
   * Both as loop-invariant selects (a shrink of exactly 1 changes no bit), so
   * the loop has no branches and vectorises. */
  const int has_wd = wd != 0.0f;
  const float shrink = decoupled && has_wd ? (float)(1.0 - lr * wd_d) : 1.0f;
  const int coupled = !decoupled && has_wd;
#pragma omp parallel for schedule(static) if (n >= SP_OPT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float g1 = g[i] * gscale, wi = w[i] * shrink, gi = coupled ? fmaf(w[i], wd, g1) : g1;
    float mi = fmaf(gi, a1, m[i] * b1);
    float vi = v[i] * b2 + (a2 * gi) * gi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi + (neg_step * mi) / denom;
  }
}
