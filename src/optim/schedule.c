/* Learning-rate schedules as closed-form functions of fractional epochs.
 *
 * Closed form rather than PyTorch's recursive (chainable) updates: the value
 * depends only on progress, so it survives a resume from checkpoint and a
 * Multigrid change of iterations per epoch without drift or jumps. */
#include <math.h>

#include "optim_impl.h"

int sp_lr_schedule_check(const sp_lr_schedule *s) {
  if (!s) return sp_error_set("lr schedule is NULL");
  if (!(s->base_lr >= 0) || !isfinite(s->base_lr))
    return sp_error_set("lr schedule: base_lr %g must be a finite number >= 0", s->base_lr);
  if (!(s->warmup_epochs >= 0) || !isfinite(s->warmup_epochs))
    return sp_error_set("lr schedule: warmup_epochs %g must be a finite number >= 0", s->warmup_epochs);
  if (!(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1))
    return sp_error_set("lr schedule: warmup_start_factor %g must be in [0, 1]", s->warmup_start_factor);
  switch (s->decay) {
    case SP_LR_CONSTANT: return 0;
    case SP_LR_COSINE:
      if (!(s->total_epochs > s->warmup_epochs) || !isfinite(s->total_epochs))
        return sp_error_set("lr schedule: cosine total_epochs %g must be finite and greater than warmup_epochs %g",
                            s->total_epochs, s->warmup_epochs);
      if (!(s->min_lr >= 0 && s->min_lr <= s->base_lr))
        return sp_error_set("lr schedule: min_lr %g must be in [0, base_lr %g]", s->min_lr, s->base_lr);
      return 0;
    case SP_LR_STEP:
      if (s->n_milestones < 0 || s->n_milestones > SP_LR_MAX_MILESTONES)
        return sp_error_set("lr schedule: %d milestones (at most %d)", s->n_milestones, SP_LR_MAX_MILESTONES);
      for (int i = 0; i < s->n_milestones; i++) {
        if (!(s->milestones[i] >= 0) || !isfinite(s->milestones[i]))
          return sp_error_set("lr schedule: milestone %d (%g) must be a finite epoch >= 0", i, s->milestones[i]);
        if (i > 0 && !(s->milestones[i] > s->milestones[i - 1]))
          return sp_error_set("lr schedule: milestones must ascend (%g after %g)", s->milestones[i],
                              s->milestones[i - 1]);
      }
      if (!(s->gamma > 0) || !isfinite(s->gamma))
        return sp_error_set("lr schedule: gamma %g must be a finite number > 0", s->gamma);
      return 0;
  }
  return sp_error_set("lr schedule: unknown decay %d", (int)s->decay);
}

/* The decayed lr ignoring warm-up. */
static double decayed(const sp_lr_schedule *s, double base, double e) {
  switch (s->decay) {
    case SP_LR_COSINE: {
      double w = s->warmup_epochs, total = s->total_epochs, lo = sp_opt_decimal(s->min_lr);
      if (e <= w) return base;
      if (e >= total || !(total > w)) return lo;
      double t = (e - w) / (total - w);
      return lo + (base - lo) * 0.5 * (1.0 + cos(M_PI * t));
    }
    case SP_LR_STEP: {
      int k = 0;
      while (k < s->n_milestones && k < SP_LR_MAX_MILESTONES && s->milestones[k] <= e) k++;
      return base * pow(sp_opt_decimal(s->gamma), k);
    }
    default: return base;
  }
}

double sp_lr_at_epoch(const sp_lr_schedule *s, double epoch) {
  double e = epoch > 0 ? epoch : 0; /* also maps NaN to 0 */
  /* base_lr and friends are floats holding decimals the user wrote; compute
   * with those decimals, as a PyTorch scheduler would. */
  double base = sp_opt_decimal(s->base_lr);
  double lr = decayed(s, base, e);
  if (s->warmup_epochs > 0 && e < s->warmup_epochs) {
    double f0 = sp_opt_decimal(s->warmup_start_factor);
    lr *= f0 + (1.0 - f0) * (e / s->warmup_epochs);
  }
  return lr;
}

double sp_lr_at(const sp_lr_schedule *s, int64_t iteration, int64_t iters_per_epoch) {
  if (iters_per_epoch <= 0) return sp_lr_at_epoch(s, 0);
  return sp_lr_at_epoch(s, (double)iteration / (double)iters_per_epoch);
}

double sp_epoch_progress(int64_t epoch, int64_t iter_in_epoch, int64_t iters_per_epoch) {
  if (iters_per_epoch <= 0) return (double)epoch;
  return (double)epoch + (double)iter_in_epoch / (double)iters_per_epoch;
}
