/* YAML -> sp_video_config, strictly (unknown keys and bad values are errors
 * naming the key and its line), in the keypoint config's style. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/yaml_read.h"
#include "train/config_shared.h"
#include "train/dist_config.h"
#include "spry/video_train.h"

sp_video_config sp_video_config_default(void) {
  sp_video_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.model, sizeof c.model, "tsm-r18");
  c.shift_back = c.shift_fwd = 0.125f;
  c.data.sampler = SP_SAMPLER_TSN;
  c.data.segments = 8;
  c.data.frames = 8;
  c.data.stride = 4;
  c.data.size = 224;
  c.data.test_clips = 1;
  c.data.flip = 0.5f;
  /* ImageNet statistics: what pretrained backbones expect. */
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  memcpy(c.data.mean, mean, sizeof mean);
  memcpy(c.data.std, std, sizeof std);
  c.optimizer = sp_opt_config_default(SP_OPT_SGD);
  c.optimizer.momentum = 0.9f;
  c.optimizer.weight_decay = 1e-4f;
  c.lr = 0.01f;
  c.clip_norm = 20.0f; /* TSM's default gradient clip */
  c.schedule.decay = SP_LR_COSINE;
  c.epochs = 50;
  c.batch = 8;
  c.seed = 1;
  snprintf(c.backend, sizeof c.backend, "%s", sp_backend_default_name());
  snprintf(c.precision, sizeof c.precision, "f32");
  snprintf(c.out, sizeof c.out, "runs/video");
  c.eval_every = 1;
  c.dist = sp_dist_config_default();
  return c;
}

/* task, model and model_options.*: width, temporal shift, dropout, pretrained weights. */
static int read_model(sp_yaml_reader *r, sp_video_config *c) {
  static const char *const models[] = {"tsn-r18", "tsn-r50", "tsm-r18", "tsm-r50", NULL};
  static const char *const tasks[] = {"video", NULL};
  char task[16];
  if (sp_yr_string(r, "task", task, sizeof task, tasks) ||
      sp_yr_string(r, "model", c->model, sizeof c->model, models) ||
      sp_yr_int(r, "model_options.base_width", 1, 4096, &c->base_width) ||
      sp_yr_float(r, "model_options.shift_back", 0, 1, &c->shift_back) ||
      sp_yr_float(r, "model_options.shift_fwd", 0, 1, &c->shift_fwd) ||
      sp_yr_float(r, "model_options.dropout", 0, 0.99, &c->dropout) ||
      sp_yr_string(r, "model_options.pretrained", c->pretrained, sizeof c->pretrained, NULL))
    return -1;
  return 0;
}

/* data.*: lists, sampler, clip shape, normalisation. */
static int read_data(sp_yaml_reader *r, sp_video_config *c) {
  static const char *const samplers[] = {"tsn", "dense", NULL};
  static const char *const formats[] = {"video", "frames", NULL};
  char sampler[16] = "", format[16];
  if (sp_yr_string(r, "data.train_list", c->data.train_list, sizeof c->data.train_list, NULL) ||
      sp_yr_string(r, "data.val_list", c->data.val_list, sizeof c->data.val_list, NULL) ||
      sp_yr_string(r, "data.root", c->data.root, sizeof c->data.root, NULL) ||
      sp_yr_string(r, "data.classes", c->data.classes, sizeof c->data.classes, NULL) ||
      /* Informational: the reader tells videos and frame folders apart itself. */
      sp_yr_string(r, "data.format", format, sizeof format, formats) ||
      sp_yr_string(r, "data.sampler", sampler, sizeof sampler, samplers) ||
      sp_yr_int(r, "data.segments", 1, 1024, &c->data.segments) ||
      sp_yr_int(r, "data.frames", 1, 1024, &c->data.frames) || sp_yr_int(r, "data.stride", 1, 1024, &c->data.stride) ||
      sp_yr_int(r, "data.size", 32, 4096, &c->data.size) ||
      sp_yr_int(r, "data.short_side", 0, 8192, &c->data.short_side) ||
      sp_yr_int(r, "data.test_clips", 1, 64, &c->data.test_clips) || sp_yr_float(r, "data.flip", 0, 1, &c->data.flip) ||
      sp_yr_int(r, "data.num_classes", 0, SP_VIDEO_MAX_CLASSES, &c->data.num_classes) ||
      sp_yr_triple(r, "data.mean", -10, 10, c->data.mean) || sp_yr_triple(r, "data.std", 1e-6, 10, c->data.std))
    return -1;
  if (!strcmp(sampler, "dense")) c->data.sampler = SP_SAMPLER_DENSE;
  return 0;
}

/* optimizer.*: a type resets the optimizer's defaults but keeps the weight
 * decay (and SGD's momentum). */
static int read_optimizer(sp_yaml_reader *r, sp_video_config *c) {
  static const char *const opts[] = {"sgd", "adam", "adamw", NULL};
  char opt[16] = "";
  if (sp_yr_string(r, "optimizer.type", opt, sizeof opt, opts)) return -1;
  if (opt[0]) {
    sp_opt_config keep = c->optimizer;
    sp_opt_kind_parse(opt, &c->optimizer.kind);
    c->optimizer = sp_opt_config_default(c->optimizer.kind);
    c->optimizer.weight_decay = keep.weight_decay;
    if (c->optimizer.kind == SP_OPT_SGD) c->optimizer.momentum = keep.momentum;
  }
  return sp_config_read_optimizer_keys(r, &c->optimizer, &c->lr, &c->clip_norm);
}

/* schedule.milestones: a list of epochs (any order). */
static int read_milestones(sp_yaml_reader *r, sp_video_config *c) {
  double list[SP_LR_MAX_MILESTONES];
  int n = 0;
  sp_yaml *ms;
  if ((ms = sp_yr_find(r, "schedule.milestones"))) {
    if (ms->kind != SP_YAML_SEQ || ms->n > SP_LR_MAX_MILESTONES)
      return sp_yr_bad(r, "schedule.milestones", ms, "a list of at most 8 epochs");
    for (int i = 0; i < ms->n; i++) {
      char *end;
      sp_yaml *it = ms->items[i];
      list[i] = it->kind == SP_YAML_SCALAR ? strtod(it->value, &end) : -1;
      if (it->kind != SP_YAML_SCALAR || *end || list[i] < 0) return sp_yr_bad(r, "schedule.milestones", it, "an epoch");
      c->schedule.milestones[i] = list[i];
    }
    n = ms->n;
  } else if (r->failed) {
    return -1;
  }
  c->schedule.n_milestones = n;
  return 0;
}

/* schedule.*; *warmup gets schedule.warmup_epochs (0 unless given). */
static int read_schedule(sp_yaml_reader *r, sp_video_config *c, double *warmup) {
  static const char *const decays[] = {"cosine", "step", "constant", NULL};
  char decay[16] = "";
  if (sp_yr_string(r, "schedule.decay", decay, sizeof decay, decays) ||
      sp_yr_double(r, "schedule.warmup_epochs", 0, 1e6, warmup) ||
      sp_yr_float(r, "schedule.warmup_start_factor", 0, 1, &c->schedule.warmup_start_factor) ||
      sp_yr_float(r, "schedule.min_lr", 0, 100, &c->schedule.min_lr))
    return -1;
  c->schedule.gamma = 0.1f;
  if (sp_yr_float(r, "schedule.gamma", 0, 1, &c->schedule.gamma)) return -1;
  if (read_milestones(r, c)) return -1;
  if (!strcmp(decay, "step")) c->schedule.decay = SP_LR_STEP;
  if (!strcmp(decay, "constant")) c->schedule.decay = SP_LR_CONSTANT;
  return 0;
}

/* multigrid.*, the run's top-level keys (epochs, batch, seed, ...) and dist.*. */
static int read_run(sp_yaml_reader *r, sp_video_config *c) {
  static const char *const backends[] = {"ref", "cpu", NULL};
  static const char *const precisions[] = {"f32", "bf16", NULL};
  double seed = (double)c->seed;
  if (sp_yr_bool(r, "multigrid.long", &c->multigrid.long_cycle) ||
      sp_yr_int(r, "multigrid.cycles", 1, 1000, &c->multigrid.cycles) ||
      sp_yr_bool(r, "multigrid.short", &c->multigrid.short_cycle) || sp_yr_int(r, "epochs", 1, 1000000, &c->epochs) ||
      sp_yr_int(r, "batch", 1, 65536, &c->batch) || sp_yr_int(r, "threads", 0, 1024, &c->threads) ||
      sp_yr_int(r, "workers", 0, 256, &c->workers) || sp_yr_double(r, "seed", 0, 9007199254740992.0, &seed) ||
      sp_yr_string(r, "backend", c->backend, sizeof c->backend, backends) ||
      sp_yr_string(r, "precision", c->precision, sizeof c->precision, precisions) ||
      sp_yr_string(r, "out", c->out, sizeof c->out, NULL) || sp_yr_int(r, "eval_every", 1, 1000000, &c->eval_every) ||
      sp_dist_config_read(r, &c->dist))
    return -1;
  c->seed = (uint64_t)seed;
  return 0;
}

static int read_all(sp_yaml_reader *r, void *out) {
  sp_video_config *c = out;
  double warmup = 0;
  if (read_model(r, c) || read_data(r, c) || read_optimizer(r, c) || read_schedule(r, c, &warmup) || read_run(r, c))
    return -1;
  sp_config_set_schedule(&c->schedule, c->lr, c->epochs, warmup);
  if (!c->data.train_list[0] && !c->data.val_list[0])
    return sp_error_set("%s: data.train_list (and data.val_list) must be set", r->file);
  return sp_config_check_run(r, &c->optimizer, c->precision, c->backend);
}

/* A file is the text parsed with no text given (sp_config_read_source reads
 * it): one path for both. */
int sp_video_config_load(const char *path, int n_sets, char *const *sets, sp_video_config *cfg, char **resolved) {
  return sp_video_config_parse(NULL, path, n_sets, sets, cfg, resolved);
}

int sp_video_config_parse(const char *yaml, const char *label, int n_sets, char *const *sets, sp_video_config *cfg,
                          char **resolved) {
  *cfg = sp_video_config_default();
  return sp_config_read_source(label, yaml, n_sets, sets, read_all, cfg, resolved);
}

static int is_video(sp_yaml *y) {
  if (!y) return 0;
  sp_yaml *t = sp_yaml_get(y, "task");
  int v = t && t->kind == SP_YAML_SCALAR && !strcmp(t->value, "video");
  sp_yaml_free(y);
  return v;
}

int sp_config_file_is_video(const char *path) { return is_video(sp_yaml_load_file(path)); }
int sp_config_text_is_video(const char *yaml) { return is_video(sp_yaml_load_string(yaml, "config")); }
