/* What the keypoint (config.c) and video (video_config.c) run configs read
 * and check the same way. */
#ifndef SPRY_TRAIN_CONFIG_SHARED_H
#define SPRY_TRAIN_CONFIG_SHARED_H

#include "io/yaml_read.h"
#include "spry/graph.h"
#include "spry/optim.h"

/* optimizer.lr, optimizer.weight_decay, optimizer.momentum,
 * optimizer.nesterov, optimizer.clip_norm, read in this order. */
int sp_config_read_optimizer_keys(sp_yaml_reader *r, sp_opt_config *opt, float *lr, float *clip_norm);

/* A run's last checks: the optimizer's settings, and bf16 only on the cpu
 * backend. 0, or -1 with an error naming the file. */
int sp_config_check_run(const sp_yaml_reader *r, const sp_opt_config *opt, const char *precision, const char *backend);

/* The plan flags for a run's precision on this machine: SP_PLAN_BF16 for
 * bf16 where backend b computes bf16 here and it is faster than f32
 * (sp_backend_bf16_pays); else 0 (f32), with a note on stderr the first
 * time, naming the reason: a config written for a machine with AMX still
 * trains, at its best, on one without. */
unsigned sp_config_precision_flags(const char *precision, sp_backend b);
/* What a run with this precision and backend (by name) computes in, for
 * reports: the precision, or "f32 (bf16 asked: ...)" where bf16 does not
 * run on this machine or is slower than f32 here. */
const char *sp_config_precision_text(const char *precision, const char *backend);

/* The schedule's figures that come from the run's other keys: base_lr from
 * optimizer.lr, total_epochs from epochs, and the warm-up in epochs. */
void sp_config_set_schedule(sp_lr_schedule *s, float lr, int epochs, double warmup_epochs);

/* A config file (path) or, when yaml is not NULL, the YAML text named label,
 * with the --set overrides, read by read_all into cfg (already holding its
 * defaults): what both configs' _load and _parse do. */
int sp_config_read_source(const char *path_or_label, const char *yaml, int n_sets, char *const *sets,
                          int (*read_all)(sp_yaml_reader *r, void *cfg), void *cfg, char **resolved);

#endif
