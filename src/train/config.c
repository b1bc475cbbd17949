/* YAML run configuration -> sp_train_config, strictly: every key must be
 * known, every value must parse and be in range; messages name key and line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/yaml_read.h"
#include "train/config_shared.h"
#include "train/dist_config.h"
#include "spry/config.h"
#include "spry/models.h"

/* model_options: a map of switches handed to the model registry, which
 * validates each one (so the keys stay defined in one place). */
static int read_model_options(sp_yaml_reader *r, sp_train_config *c) {
  sp_yaml *m = sp_yr_find(r, "model_options");
  if (!m) return r->failed ? -1 : 0;
  if (m->kind != SP_YAML_MAP || m->n > 16) return sp_yr_bad(r, "model_options", m, "a map of at most 16 switches");
  for (int i = 0; i < m->n; i++) {
    sp_yaml *v = m->items[i];
    char key[64];
    snprintf(key, sizeof key, "model_options.%s", m->keys[i]);
    if (v->kind != SP_YAML_SCALAR || strlen(v->value) >= 32 || strlen(m->keys[i]) >= 32)
      return sp_yr_bad(r, key, v, "a short value");
    sp_model_spec scratch = {.name = c->model};
    if (sp_model_spec_set(&scratch, m->keys[i], v->value) != 0) {
      char why[512]; /* the message buffer is about to be rewritten */
      snprintf(why, sizeof why, "%s", sp_last_error());
      return sp_error_set("%s: %s (line %d): %s", r->file, key, v->line, why);
    }
    v->used = 1;
    snprintf(c->model_options[i].key, sizeof c->model_options[i].key, "%s", m->keys[i]);
    snprintf(c->model_options[i].value, sizeof c->model_options[i].value, "%s", v->value);
  }
  c->n_model_options = m->n;
  return 0;
}

const char *sp_loss_kind_name(sp_loss_kind k) {
  static const char *names[] = {"l1", "l2", "mse", "euclidean"};
  return (unsigned)k < 4 ? names[k] : "?";
}

sp_train_config sp_train_config_default(void) {
  sp_train_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.model, sizeof c.model, "vgg-face");
  snprintf(c.data.format, sizeof c.data.format, "auto");
  snprintf(c.data.split, sizeof c.data.split, "identity");
  c.data.val_fraction = 0.2;
  c.data.crop_size = 256;
  c.data.size = 224;
  c.data.channels = 1;
  c.data.margin = 0.15f;
  snprintf(c.data.box, sizeof c.data.box, "auto");
  c.data.cache_file = 1;
  for (int i = 0; i < 3; i++) c.data.mean[i] = 0.5f, c.data.std[i] = 0.25f;
  c.augment = (typeof(c.augment)){0.75f, 4.0f / 3.0f, 0.05f, 10.0f, 0.5f, 2, 7};
  c.loss.kind = SP_LOSS_L1;
  c.loss.neighbours = 2;
  c.optimizer = sp_opt_config_default(SP_OPT_ADAMW);
  c.optimizer.weight_decay = 1e-5f;
  c.lr = 1e-3f;
  c.schedule.decay = SP_LR_COSINE;
  c.schedule.warmup_start_factor = 0.0f;
  c.warmup_fraction = 0.01;
  c.epochs = 30;
  c.batch = 64;
  c.threads = 0;
  c.workers = 0;
  c.seed = 1;
  snprintf(c.precision, sizeof c.precision, "f32");
  snprintf(c.backend, sizeof c.backend, "%s", sp_backend_default_name());
  snprintf(c.out, sizeof c.out, "runs/latest");
  c.eval_every = 1;
  c.dist = sp_dist_config_default();
  return c;
}

/* task, model and model_options. */
static int read_model(sp_yaml_reader *r, sp_train_config *c) {
  /* Keypoint models only: resnetNN are classifiers (benchmarks, video
   * backbones) and tsn/tsm belong to `task: video`. */
  static const char *const models[] = {"vgg-face", "vgg-nose", "resunet18", "resunet50", NULL};
  /* `task: video` configs never reach this reader (sp_config_*_is_video). */
  static const char *const tasks[] = {"keypoints", "video", NULL};
  char task[16] = "";
  if (sp_yr_string(r, "task", task, sizeof task, tasks)) return -1;
  if (sp_yr_string(r, "model", c->model, sizeof c->model, models) || read_model_options(r, c)) return -1;
  return 0;
}

/* data.*: where the faces are, how they are split, cropped and boxed. */
static int read_data_source(sp_yaml_reader *r, sp_train_config *c) {
  static const char *const splits[] = {"identity", "list", "none", NULL};
  static const char *const formats[] = {"auto", "csv", "coco", "dlib", "imm", "asf", "pts", NULL};
  static const char *const boxes[] = {"auto", "image", "detect", "file", "points", NULL};
  if (sp_yr_string(r, "data.path", c->data.path, sizeof c->data.path, NULL) ||
      sp_yr_string(r, "data.format", c->data.format, sizeof c->data.format, formats) ||
      sp_yr_string(r, "data.split", c->data.split, sizeof c->data.split, splits) ||
      sp_yr_double(r, "data.val_fraction", 0, 0.9, &c->data.val_fraction) ||
      sp_yr_string(r, "data.val_list", c->data.val_list, sizeof c->data.val_list, NULL) ||
      sp_yr_int(r, "data.crop_size", 16, 4096, &c->data.crop_size) ||
      sp_yr_int(r, "data.size", 16, 4096, &c->data.size) || sp_yr_int(r, "data.channels", 1, 3, &c->data.channels) ||
      sp_yr_float(r, "data.margin", 0, 2, &c->data.margin) ||
      sp_yr_string(r, "data.box", c->data.box, sizeof c->data.box, boxes) ||
      sp_yr_string(r, "data.boxes", c->data.boxes, sizeof c->data.boxes, NULL) ||
      sp_yr_string(r, "data.val_box", c->data.val_box, sizeof c->data.val_box, boxes) ||
      sp_yr_bool(r, "data.cache_file", &c->data.cache_file))
    return -1;
  if ((!strcmp(c->data.box, "file") || !strcmp(c->data.val_box, "file")) && !c->data.boxes[0])
    return sp_yr_bad(r, "data.box", sp_yr_find(r, "data.box"), "file together with data.boxes: FILE.csv");
  return 0;
}

/* data.keypoints and data.flip_table: point subsets and permutations. */
static int read_data_points(sp_yaml_reader *r, sp_train_config *c) {
  double list[256];
  int n = 0;
  if (sp_yr_list(r, "data.keypoints", 256, 0, 255, list, &n)) return -1;
  c->data.n_keypoints = n;
  for (int i = 0; i < n; i++) c->data.keypoints[i] = (int)list[i];
  if (sp_yr_list(r, "data.flip_table", 256, 0, 255, list, &n)) return -1;
  c->data.n_flip_table = n;
  for (int i = 0; i < n; i++) c->data.flip_table[i] = (int)list[i];
  return 0;
}

/* The network input: channels, a size the model can halve, mean and std. */
static int read_data_input(sp_yaml_reader *r, sp_train_config *c) {
  int nm = 0;
  double mean[3], std[3];
  if (c->data.channels == 2)
    return sp_yr_bad(r, "data.channels", sp_yr_find(r, "data.channels"), "1 (gray) or 3 (RGB)");
  if (!strncmp(c->model, "resunet", 7) && c->data.size % 32)
    return sp_yr_bad(r, "data.size", sp_yr_find(r, "data.size"), "a multiple of 32 for a ResUNet (5 halvings)");
  /* One value applies to every channel; three give one each. */
  if (sp_yr_list(r, "data.mean", 3, -10, 10, mean, &nm)) return -1;
  if (nm == 2) return sp_yr_bad(r, "data.mean", sp_yr_find(r, "data.mean"), "1 value, or 3 (one per channel)");
  for (int i = 0; nm && i < 3; i++) c->data.mean[i] = (float)mean[nm == 3 ? i : 0];
  if (sp_yr_list(r, "data.std", 3, 1e-6, 10, std, &nm)) return -1;
  if (nm == 2) return sp_yr_bad(r, "data.std", sp_yr_find(r, "data.std"), "1 value, or 3 (one per channel)");
  for (int i = 0; nm && i < 3; i++) c->data.std[i] = (float)std[nm == 3 ? i : 0];
  return 0;
}

static int read_augment(sp_yaml_reader *r, sp_train_config *c) {
  double list[2];
  int n = 0;
  if (sp_yr_list(r, "augment.scale", 2, 0.1, 10, list, &n)) return -1;
  if (n == 1 || (n == 2 && list[0] > list[1]))
    return sp_yr_bad(r, "augment.scale", sp_yr_find(r, "augment.scale"), "[min, max] with min <= max");
  if (n == 2) c->augment.scale_min = (float)list[0], c->augment.scale_max = (float)list[1];
  if (sp_yr_float(r, "augment.translate", 0, 0.5, &c->augment.translate) ||
      sp_yr_float(r, "augment.rotate", 0, 180, &c->augment.rotate) ||
      sp_yr_float(r, "augment.flip", 0, 1, &c->augment.flip))
    return -1;
  if (sp_yr_list(r, "augment.randaugment", 2, 0, 30, list, &n)) return -1;
  if (n == 2) c->augment.ra_n = (int)list[0], c->augment.ra_m = (int)list[1];
  return 0;
}

static int read_loss(sp_yaml_reader *r, sp_train_config *c) {
  static const char *const losses[] = {"l1", "l2", "mse", "euclidean", NULL};
  char loss[16] = "";
  if (sp_yr_string(r, "loss.type", loss, sizeof loss, losses) ||
      sp_yr_float(r, "loss.structure_weight", 0, 100, &c->loss.structure_weight) ||
      sp_yr_int(r, "loss.neighbours", 1, 8, &c->loss.neighbours))
    return -1;
  for (int k = 0; loss[0] && k < 4; k++)
    if (!strcmp(loss, losses[k])) c->loss.kind = (sp_loss_kind)k;
  return 0;
}

/* optimizer.*: a type resets the optimizer's defaults but keeps the weight decay. */
static int read_optimizer(sp_yaml_reader *r, sp_train_config *c) {
  static const char *const opts[] = {"sgd", "adam", "adamw", NULL};
  char opt[16] = "";
  double list[2];
  int n = 0;
  if (sp_yr_string(r, "optimizer.type", opt, sizeof opt, opts)) return -1;
  if (opt[0]) {
    float wd = c->optimizer.weight_decay;
    sp_opt_kind_parse(opt, &c->optimizer.kind);
    c->optimizer = sp_opt_config_default(c->optimizer.kind);
    c->optimizer.weight_decay = wd;
  }
  if (sp_config_read_optimizer_keys(r, &c->optimizer, &c->lr, &c->clip_norm)) return -1;
  if (sp_yr_list(r, "optimizer.betas", 2, 0, 0.999999, list, &n)) return -1;
  if (n == 2) c->optimizer.beta1 = (float)list[0], c->optimizer.beta2 = (float)list[1];
  return 0;
}

/* schedule.*; *warmup_epochs stays -1 unless given (then it wins over the fraction). */
static int read_schedule(sp_yaml_reader *r, sp_train_config *c, double *warmup_epochs) {
  static const char *const decays[] = {"cosine", "step", "constant", NULL};
  char decay[16] = "";
  double list[SP_LR_MAX_MILESTONES];
  int n = 0;
  if (sp_yr_string(r, "schedule.decay", decay, sizeof decay, decays) ||
      sp_yr_double(r, "schedule.warmup_epochs", 0, 1e6, warmup_epochs) ||
      sp_yr_double(r, "schedule.warmup_fraction", 0, 1, &c->warmup_fraction) ||
      sp_yr_float(r, "schedule.min_lr", 0, 100, &c->schedule.min_lr) ||
      sp_yr_float(r, "schedule.warmup_start_factor", 0, 1, &c->schedule.warmup_start_factor))
    return -1;
  if (!strcmp(decay, "step")) c->schedule.decay = SP_LR_STEP;
  if (!strcmp(decay, "constant")) c->schedule.decay = SP_LR_CONSTANT;
  if (sp_yr_list(r, "schedule.milestones", SP_LR_MAX_MILESTONES, 0, 1e6, list, &n)) return -1;
  for (int i = 1; i < n; i++)
    if (list[i] <= list[i - 1])
      return sp_yr_bad(r, "schedule.milestones", sp_yr_find(r, "schedule.milestones"), "epochs in increasing order");
  c->schedule.n_milestones = n;
  for (int i = 0; i < n; i++) c->schedule.milestones[i] = list[i];
  c->schedule.gamma = 0.1f;
  if (sp_yr_float(r, "schedule.gamma", 0, 1, &c->schedule.gamma)) return -1;
  return 0;
}

/* The run's top-level keys (epochs, batch, threads, seed, ...) and dist.*. */
static int read_run(sp_yaml_reader *r, sp_train_config *c) {
  static const char *const precisions[] = {"f32", "bf16", NULL};
  static const char *const backends[] = {"ref", "cpu", NULL};
  double seed = (double)c->seed;
  if (sp_yr_int(r, "epochs", 1, 1000000, &c->epochs) || sp_yr_int(r, "batch", 1, 65536, &c->batch) ||
      sp_yr_int(r, "threads", 0, 1024, &c->threads) || sp_yr_int(r, "workers", 0, 256, &c->workers) ||
      sp_yr_double(r, "seed", 0, 9007199254740992.0, &seed) ||
      sp_yr_string(r, "precision", c->precision, sizeof c->precision, precisions) ||
      sp_yr_string(r, "backend", c->backend, sizeof c->backend, backends) ||
      sp_yr_string(r, "out", c->out, sizeof c->out, NULL) || sp_yr_int(r, "eval_every", 1, 1000000, &c->eval_every))
    return -1;
  if (sp_dist_config_read(r, &c->dist)) return -1;
  c->seed = (uint64_t)seed;
  return 0;
}

static int read_all(sp_yaml_reader *r, void *out) {
  sp_train_config *c = out;
  double warmup_epochs = -1;
  if (read_model(r, c) || read_data_source(r, c) || read_data_points(r, c) || read_data_input(r, c) ||
      read_augment(r, c) || read_loss(r, c) || read_optimizer(r, c) || read_schedule(r, c, &warmup_epochs) ||
      read_run(r, c))
    return -1;
  /* Warm-up: explicit epochs win over the fraction of training. */
  sp_config_set_schedule(&c->schedule, c->lr, c->epochs,
                         warmup_epochs >= 0 ? warmup_epochs : c->warmup_fraction * c->epochs);
  return sp_config_check_run(r, &c->optimizer, c->precision, c->backend);
}

/* A file is the text parsed with no text given (sp_config_read_source reads
 * it): one path for both. */
int sp_train_config_load(const char *path, int n_sets, char *const *sets, sp_train_config *cfg, char **resolved) {
  return sp_train_config_parse(NULL, path, n_sets, sets, cfg, resolved);
}

int sp_train_config_parse(const char *yaml, const char *label, int n_sets, char *const *sets, sp_train_config *cfg,
                          char **resolved) {
  *cfg = sp_train_config_default();
  return sp_config_read_source(label, yaml, n_sets, sets, read_all, cfg, resolved);
}
