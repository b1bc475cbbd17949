/* spry optimizers and learning-rate schedules.
 *
 * Optimizers follow PyTorch's update rules exactly (torch.optim.SGD, Adam,
 * AdamW as of 1.13, single-tensor path), computed in f32 like PyTorch, so a
 * run can be compared with a PyTorch run step for step (tests match to about
 * 1e-7 relative). The optimizer does not own parameters or gradients: it is
 * handed (data, grad) pointers once and updates them in place every step.
 *
 * Learning-rate schedules are pure functions of training progress measured
 * in (fractional) epochs, so the lr stays a continuous function of progress
 * when Multigrid changes the batch size, and with it the number of iterations
 * per epoch, between phases. */
#ifndef SPRY_OPTIM_H
#define SPRY_OPTIM_H

#include <stdint.h>

#include "spry/common.h"
#include "spry/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizers ---- */

typedef enum { SP_OPT_SGD, SP_OPT_ADAM, SP_OPT_ADAMW } sp_opt_kind;

typedef struct {
  sp_opt_kind kind;
  /* SGD. weight decay is coupled (L2): g += wd * w before momentum. nesterov
   * needs momentum > 0 and dampening == 0 (as in PyTorch). */
  float momentum;
  int nesterov;
  float dampening;
  /* Adam / AdamW, with bias correction. Adam's weight decay is L2 added to
   * the gradient; AdamW's is decoupled: w -= lr * wd * w before the update. */
  float beta1, beta2, eps;
  float weight_decay;
  /* 0 (default): parameters flagged no_decay (norm scales, biases) get weight
   * decay 0, i.e. two parameter groups; 1: every parameter is decayed. */
  int decay_norm_and_bias;
} sp_opt_config;

/* PyTorch's defaults for `kind` (SGD: no momentum, no decay; Adam: betas
 * 0.9/0.999, eps 1e-8, no decay; AdamW: the same with decay 1e-2). */
sp_opt_config sp_opt_config_default(sp_opt_kind kind);
/* "sgd", "adam", "adamw"; parse accepts those (any case) and returns -1 with
 * an error naming the unknown string otherwise. */
const char *sp_opt_kind_name(sp_opt_kind kind);
int sp_opt_kind_parse(const char *name, sp_opt_kind *out);
/* 0 when cfg is usable; -1 with an error naming the bad field otherwise. */
int sp_opt_config_check(const sp_opt_config *cfg);

typedef struct {
  const char *name; /* names the state tensors; NULL means "param<i>" */
  float *data;
  float *grad;
  int64_t numel;
  int no_decay;
} sp_opt_param;

typedef struct sp_optimizer sp_optimizer;

/* Copies cfg and the parameter table (names copied, data/grad pointers kept:
 * they must stay valid for the optimizer's life). State buffers are allocated
 * here, zeroed, so nothing is allocated inside the training loop. NULL with an
 * error on a bad config, a NULL pointer, a negative numel or a repeated name. */
sp_optimizer *sp_optimizer_new(const sp_opt_config *cfg, int n, const sp_opt_param *params);
void sp_optimizer_free(sp_optimizer *opt);

/* One update of every parameter with this lr, then the step count grows by
 * one. -1 with an error (and nothing changed) when lr is negative or not
 * finite. */
int sp_optimizer_step(sp_optimizer *opt, float lr);
/* The same step in pieces, for updating parameters as soon as their
 * gradients are final (data-parallel training): elements [begin, end) of
 * slot `slot` (an index into the table given to sp_optimizer_new), updated
 * as sp_optimizer_step would; cover every element of every slot once, then
 * call sp_optimizer_step_done to count the step. Bitwise equal to one
 * sp_optimizer_step (every rule is elementwise). -1 with an error on a bad
 * lr or range. */
int sp_optimizer_step_part(sp_optimizer *opt, float lr, int slot, int64_t begin, int64_t end);
void sp_optimizer_step_done(sp_optimizer *opt);
/* The updates read every gradient multiplied by scale (1, the default, reads
 * them as they are, bit for bit). A data-parallel step leaves the ranks'
 * summed gradients in place and sets 1/W: the mean costs no pass of its own
 * over the gradients. */
void sp_optimizer_set_grad_scale(sp_optimizer *opt, float scale);
int64_t sp_optimizer_steps(const sp_optimizer *opt);
void sp_optimizer_set_steps(sp_optimizer *opt, int64_t steps);
/* Zeroes every gradient (the graph's backward accumulates into them). */
void sp_optimizer_zero_grad(sp_optimizer *opt);
const sp_opt_config *sp_optimizer_config(const sp_optimizer *opt);

/* Checkpoint support. The state is a list of named f32 tensors, shaped [numel]:
 *   SGD with momentum: "<param>.momentum"
 *   Adam / AdamW:      "<param>.exp_avg", "<param>.exp_avg_sq"
 * (plain SGD has none). The step count is NOT among them: save it with
 * sp_optimizer_steps and restore it with sp_optimizer_set_steps (it is an
 * int64, which an f32 cannot hold exactly past 2^24). Each tensor is a view
 * into the optimizer's memory: read it to save, write into it to load. */
int sp_optimizer_state_count(const sp_optimizer *opt);
const char *sp_optimizer_state_name(const sp_optimizer *opt, int i);
sp_tensor sp_optimizer_state_tensor(const sp_optimizer *opt, int i);
/* Index of the state tensor called name, or -1 (no error set). */
int sp_optimizer_state_find(const sp_optimizer *opt, const char *name);

/* Global L2 norm of all gradients, sqrt(sum g^2), accumulated in double in a
 * fixed order, so the result does not depend on the thread count. */
double sp_grad_global_norm(int n, const sp_opt_param *p);
/* torch.nn.utils.clip_grad_norm_: when max_norm / (norm + 1e-6) < 1 every
 * gradient is scaled by it. Returns the norm before clipping. */
double sp_clip_grad_norm(int n, const sp_opt_param *p, double max_norm);

/* ---- learning-rate schedules ---- */

typedef enum { SP_LR_CONSTANT, SP_LR_COSINE, SP_LR_STEP } sp_lr_decay;

#define SP_LR_MAX_MILESTONES 8

typedef struct {
  float base_lr;
  /* Linear warm-up from warmup_start_factor * base_lr (at epoch 0) to the
   * decayed lr (at warmup_epochs); may be fractional, e.g. 1/100 of training. */
  double warmup_epochs;
  float warmup_start_factor;
  sp_lr_decay decay;
  /* Cosine: from base_lr at the end of warm-up down to min_lr at total_epochs
   * (and min_lr after it). */
  double total_epochs;
  float min_lr;
  /* Step: lr = base_lr * gamma^(number of milestones <= epoch); milestones in
   * epochs, ascending. */
  int n_milestones;
  double milestones[SP_LR_MAX_MILESTONES];
  float gamma;
} sp_lr_schedule;

/* 0 when s is usable; -1 with an error naming the bad field otherwise. */
int sp_lr_schedule_check(const sp_lr_schedule *s);
/* The lr at this training progress (epochs, fractional). Epoch < 0 counts as 0. */
double sp_lr_at_epoch(const sp_lr_schedule *s, double epoch);
/* Same with epoch = iteration / iters_per_epoch: only right while the number
 * of iterations per epoch never changes. With Multigrid, track progress with
 * sp_epoch_progress and call sp_lr_at_epoch. */
double sp_lr_at(const sp_lr_schedule *s, int64_t iteration, int64_t iters_per_epoch);
/* epoch + iter_in_epoch / iters_per_epoch: progress after iter_in_epoch of
 * this epoch's iterations, whatever the epoch's batch size. */
double sp_epoch_progress(int64_t epoch, int64_t iter_in_epoch, int64_t iters_per_epoch);

#ifdef __cplusplus
}
#endif
#endif
