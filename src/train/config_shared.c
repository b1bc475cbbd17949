/* The keys and checks the keypoint and video run configs share. */
#include <stdio.h>
#include <string.h>

#include "spry/common.h"
#include "train/config_shared.h"

int sp_config_read_optimizer_keys(sp_yaml_reader *r, sp_opt_config *opt, float *lr, float *clip_norm) {
  if (sp_yr_float(r, "optimizer.lr", 0, 100, lr) ||
      sp_yr_float(r, "optimizer.weight_decay", 0, 10, &opt->weight_decay) ||
      sp_yr_float(r, "optimizer.momentum", 0, 0.9999, &opt->momentum) ||
      sp_yr_bool(r, "optimizer.nesterov", &opt->nesterov) || sp_yr_float(r, "optimizer.clip_norm", 0, 1e6, clip_norm))
    return -1;
  return 0;
}

int sp_config_check_run(const sp_yaml_reader *r, const sp_opt_config *opt, const char *precision, const char *backend) {
  if (sp_opt_config_check(opt) != 0) return sp_error_push("%s: optimizer", r->file);
  if (!strcmp(precision, "bf16") && strcmp(backend, "cpu"))
    return sp_error_set("%s: precision: bf16 needs backend: cpu (the %s backend computes in f32)", r->file, backend);
  return 0;
}

/* precision: bf16 is mixed precision for speed: where bf16 kernels would be
 * slower than f32 ones (no bf16 kernels, or no AMX and slow bf16 dot
 * products: sp_backend_bf16_pays), the run computes in f32, with a note. */
unsigned sp_config_precision_flags(const char *precision, sp_backend b) {
  static int warned;
  if (strcmp(precision, "bf16")) return 0;
  if (sp_backend_bf16_pays(b)) return SP_PLAN_BF16;
  if (!warned) fprintf(stderr, "spry: precision bf16: %s; computing in f32\n", sp_last_error());
  warned = 1;
  sp_error_clear(); /* warned and handled: not an error a later call should report */
  return 0;
}

const char *sp_config_precision_text(const char *precision, const char *backend) {
  sp_backend b;
  if (strcmp(precision, "bf16")) return precision;
  const int parsed = sp_backend_parse(backend, &b) == 0;
  if (parsed && sp_backend_bf16_pays(b)) return precision;
  const int kernels = parsed && sp_backend_bf16(b);
  sp_error_clear(); /* a query, not a failure */
  return kernels ? "f32 (bf16 asked: slower than f32 on this CPU)" : "f32 (bf16 asked: this CPU has no bf16 kernels)";
}

void sp_config_set_schedule(sp_lr_schedule *s, float lr, int epochs, double warmup_epochs) {
  s->base_lr = lr;
  s->total_epochs = epochs;
  s->warmup_epochs = warmup_epochs;
}

int sp_config_read_source(const char *path_or_label, const char *yaml, int n_sets, char *const *sets,
                          int (*read_all)(sp_yaml_reader *r, void *cfg), void *cfg, char **resolved) {
  sp_yaml_reader r = {path_or_label, yaml ? sp_yaml_load_string(yaml, path_or_label) : sp_yaml_load_file(path_or_label),
                      0};
  return sp_yr_finish(&r, n_sets, sets, read_all, cfg, resolved);
}
