/* Private to src/optim: the optimizer's layout and the per-tensor update
 * kernels shared by optimizer.c, sgd.c and adam.c. */
#ifndef SPRY_OPTIM_IMPL_H
#define SPRY_OPTIM_IMPL_H

#include <stdint.h>

#include "spry/optim.h"

/* Below this many elements a parallel region costs more than it saves. */
#define SP_OPT_PAR_MIN 32768

typedef struct {
  char *name;
  float *data, *grad;
  int64_t numel;
  float wd;      /* this parameter's group: cfg.weight_decay or 0 */
  double wd_d;   /* the same as the decimal the user wrote (see sp_opt_decimal) */
  float *state0; /* SGD momentum buffer | Adam exp_avg */
  float *state1; /* Adam exp_avg_sq */
} sp_opt_slot;

struct sp_optimizer {
  sp_opt_config cfg;
  int n;
  sp_opt_slot *slots;
  int64_t steps;
  float grad_scale; /* sp_optimizer_set_grad_scale; 1 */
  int n_state;
  char **state_names;
  float **state_data;
  int64_t *state_numel;
};

/* The double a user most likely meant by this float: the shortest decimal
 * that reads back as f. PyTorch keeps hyper-parameters as Python doubles and
 * uses them in double for bias corrections (1 - 0.999^t): with the float
 * 0.999f instead, Adam's first steps would be off by ~1e-5 relative. */
double sp_opt_decimal(float f);

/* One SGD step on one tensor (torch.optim.SGD, 1.13 single-tensor path).
 * first: the momentum buffer does not exist yet and is set to the gradient.
 * Both read the gradient as g[i] * gscale (exact when gscale is 1). */
void sp_sgd_update(float *w, const float *g, float gscale, float *buf, int64_t n, const sp_opt_config *cfg,
                   double damp_d, float wd, double lr, int first);

/* One Adam/AdamW step on one tensor (torch.optim.Adam/AdamW 1.13).
 * t: the step number after increment (1 for the first step). */
void sp_adam_update(float *w, const float *g, float gscale, float *m, float *v, int64_t n, const sp_opt_config *cfg,
                    double b1_d, double b2_d, double eps_d, float wd, double wd_d, double lr, int64_t t);

#endif
