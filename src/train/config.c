/* YAML run configuration -> sp_train_config, strictly: every key must be
 * known, every value must parse and be in range; messages name key and line. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/yaml.h"
#include "spry/config.h"
#include "spry/models.h"

typedef struct {
  const char *file;
  sp_yaml *root;
  int failed; /* a section that should be a map is not one */
} reader;

static int bad(const reader *r, const char *key, const sp_yaml *v, const char *want) {
  return sp_error_set("%s: %s%s%d: expected %s, got '%s'", r->file, key, v && v->line ? " (line " : "",
                      v && v->line ? v->line : 0, want, v && v->value ? v->value : "a list or map");
}

/* Finds "a.b" under root, marking the maps on the way used. A section that
 * is not a map ("loss: [1, 2]" where loss.type is read) is an error. */
static sp_yaml *find(const reader *r, const char *key) {
  char path[256];
  snprintf(path, sizeof path, "%s", key);
  sp_yaml *node = r->root;
  char *save = NULL, *part = strtok_r(path, ".", &save);
  size_t depth = 0;
  while (part && node) {
    if (node->kind != SP_YAML_MAP) {
      ((reader *)r)->failed = 1;
      sp_error_set("%s: %.*s (line %d): expected a map of keys", r->file, (int)depth - 1, key, node->line);
      return NULL;
    }
    depth += strlen(part) + 1;
    node = sp_yaml_get(node, part);
    if (node) node->used = 1;
    part = strtok_r(NULL, ".", &save);
  }
  return node;
}

static int get_double(const reader *r, const char *key, double lo, double hi, double *out) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[128];
  snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
  if (v->kind != SP_YAML_SCALAR) return bad(r, key, v, want);
  char *end;
  errno = 0;
  double d = strtod(v->value, &end);
  while (isspace((unsigned char)*end)) end++;
  if (end == v->value || *end || errno || !(d >= lo && d <= hi)) return bad(r, key, v, want);
  *out = d;
  return 0;
}

static int get_float(const reader *r, const char *key, double lo, double hi, float *out) {
  double d = *out;
  if (get_double(r, key, lo, hi, &d) != 0) return -1;
  *out = (float)d;
  return 0;
}

static int get_int(const reader *r, const char *key, long lo, long hi, int *out) {
  double d = *out;
  if (get_double(r, key, (double)lo, (double)hi, &d) != 0) return -1;
  if (d != floor(d)) return bad(r, key, find(r, key), "an integer");
  *out = (int)d;
  return 0;
}

static int get_bool(const reader *r, const char *key, int *out) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  if (v->kind == SP_YAML_SCALAR) {
    const char *s = v->value;
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on") || !strcmp(s, "1")) return *out = 1, 0;
    if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off") || !strcmp(s, "0")) return *out = 0, 0;
  }
  return bad(r, key, v, "true or false");
}

static int get_string(const reader *r, const char *key, char *out, size_t n, const char *const *choices) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  if (v->kind != SP_YAML_SCALAR || strlen(v->value) >= n) return bad(r, key, v, "a short text");
  if (choices) {
    int ok = 0;
    char want[256] = "one of:";
    for (const char *const *c = choices; *c; c++) {
      ok |= !strcmp(*c, v->value);
      strncat(want, " ", sizeof want - strlen(want) - 1);
      strncat(want, *c, sizeof want - strlen(want) - 1);
    }
    if (!ok) return bad(r, key, v, want);
  }
  snprintf(out, n, "%s", v->value);
  return 0;
}

/* A list of numbers, e.g. scale: [0.75, 1.333]. */
static int get_list(const reader *r, const char *key, int max, double lo, double hi, double *out, int *count) {
  *count = 0;
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[128];
  snprintf(want, sizeof want, "a list of at most %d numbers in [%g, %g]", max, lo, hi);
  if (v->kind != SP_YAML_SEQ || v->n > max) return bad(r, key, v, want);
  for (int i = 0; i < v->n; i++) {
    sp_yaml *it = v->items[i];
    char *end;
    double d = it->kind == SP_YAML_SCALAR ? strtod(it->value, &end) : NAN;
    if (it->kind != SP_YAML_SCALAR || end == it->value || *end || !(d >= lo && d <= hi)) return bad(r, key, it, want);
    out[i] = d;
  }
  *count = v->n;
  return 0;
}

/* model_options: a map of switches handed to the model registry, which
 * validates each one (so the keys stay defined in one place). */
static int read_model_options(reader *r, sp_train_config *c) {
  sp_yaml *m = find(r, "model_options");
  if (!m) return r->failed ? -1 : 0;
  if (m->kind != SP_YAML_MAP || m->n > 16) return bad(r, "model_options", m, "a map of at most 16 switches");
  for (int i = 0; i < m->n; i++) {
    sp_yaml *v = m->items[i];
    char key[64];
    snprintf(key, sizeof key, "model_options.%s", m->keys[i]);
    if (v->kind != SP_YAML_SCALAR || strlen(v->value) >= 32 || strlen(m->keys[i]) >= 32)
      return bad(r, key, v, "a short value");
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
  snprintf(c.backend, sizeof c.backend, "ref");
  snprintf(c.out, sizeof c.out, "runs/latest");
  c.eval_every = 1;
  c.dist.timeout_s = 300;
  c.dist.bucket_mb = 4;
  return c;
}

static int read_all(reader *r, sp_train_config *c) {
  static const char *const splits[] = {"identity", "list", "none", NULL};
  static const char *const losses[] = {"l1", "l2", "mse", "euclidean", NULL};
  static const char *const opts[] = {"sgd", "adam", "adamw", NULL};
  static const char *const decays[] = {"cosine", "step", "constant", NULL};
  static const char *const precisions[] = {"f32", "bf16", NULL};
  static const char *const backends[] = {"ref", "cpu", NULL};
  static const char *const formats[] = {"auto", "csv", "coco", "dlib", "imm", "asf", "pts", NULL};
  char loss[16] = "", opt[16] = "", decay[16] = "";
  double list[256];
  int n = 0;
  double warmup_epochs = -1, seed = (double)c->seed;
  if (get_string(r, "model", c->model, sizeof c->model, NULL) || read_model_options(r, c) ||
      get_string(r, "data.path", c->data.path, sizeof c->data.path, NULL) ||
      get_string(r, "data.format", c->data.format, sizeof c->data.format, formats) ||
      get_string(r, "data.split", c->data.split, sizeof c->data.split, splits) ||
      get_double(r, "data.val_fraction", 0, 0.9, &c->data.val_fraction) ||
      get_string(r, "data.val_list", c->data.val_list, sizeof c->data.val_list, NULL) ||
      get_int(r, "data.crop_size", 16, 4096, &c->data.crop_size) || get_int(r, "data.size", 16, 4096, &c->data.size) ||
      get_int(r, "data.channels", 1, 3, &c->data.channels) || get_float(r, "data.margin", 0, 2, &c->data.margin) ||
      get_bool(r, "data.cache_file", &c->data.cache_file))
    return -1;
  if (get_list(r, "data.keypoints", 256, 0, 255, list, &n)) return -1;
  c->data.n_keypoints = n;
  for (int i = 0; i < n; i++) c->data.keypoints[i] = (int)list[i];
  if (get_list(r, "data.flip_table", 256, 0, 255, list, &n)) return -1;
  c->data.n_flip_table = n;
  for (int i = 0; i < n; i++) c->data.flip_table[i] = (int)list[i];
  int nm = 0;
  double mean[3], std[3];
  if (get_list(r, "data.mean", 3, -10, 10, mean, &nm)) return -1;
  /* One value applies to every channel; three give one each. */
  for (int i = 0; nm && i < 3; i++) c->data.mean[i] = (float)mean[nm == 3 ? i : 0];
  if (get_list(r, "data.std", 3, 1e-6, 10, std, &nm)) return -1;
  for (int i = 0; nm && i < 3; i++) c->data.std[i] = (float)std[nm == 3 ? i : 0];
  if (get_list(r, "augment.scale", 2, 0.1, 10, list, &n)) return -1;
  if (n == 2) c->augment.scale_min = (float)list[0], c->augment.scale_max = (float)list[1];
  if (get_float(r, "augment.translate", 0, 0.5, &c->augment.translate) ||
      get_float(r, "augment.rotate", 0, 180, &c->augment.rotate) || get_float(r, "augment.flip", 0, 1, &c->augment.flip))
    return -1;
  if (get_list(r, "augment.randaugment", 2, 0, 30, list, &n)) return -1;
  if (n == 2) c->augment.ra_n = (int)list[0], c->augment.ra_m = (int)list[1];
  if (get_string(r, "loss.type", loss, sizeof loss, losses) ||
      get_float(r, "loss.structure_weight", 0, 100, &c->loss.structure_weight) ||
      get_int(r, "loss.neighbours", 1, 8, &c->loss.neighbours))
    return -1;
  for (int k = 0; loss[0] && k < 4; k++)
    if (!strcmp(loss, losses[k])) c->loss.kind = (sp_loss_kind)k;
  if (get_string(r, "optimizer.type", opt, sizeof opt, opts)) return -1;
  if (opt[0]) {
    float wd = c->optimizer.weight_decay;
    sp_opt_kind_parse(opt, &c->optimizer.kind);
    c->optimizer = sp_opt_config_default(c->optimizer.kind);
    c->optimizer.weight_decay = wd;
  }
  if (get_float(r, "optimizer.lr", 0, 100, &c->lr) ||
      get_float(r, "optimizer.weight_decay", 0, 10, &c->optimizer.weight_decay) ||
      get_float(r, "optimizer.momentum", 0, 0.9999, &c->optimizer.momentum) ||
      get_bool(r, "optimizer.nesterov", &c->optimizer.nesterov) ||
      get_float(r, "optimizer.clip_norm", 0, 1e6, &c->clip_norm))
    return -1;
  if (get_list(r, "optimizer.betas", 2, 0, 0.999999, list, &n)) return -1;
  if (n == 2) c->optimizer.beta1 = (float)list[0], c->optimizer.beta2 = (float)list[1];
  if (get_string(r, "schedule.decay", decay, sizeof decay, decays) ||
      get_double(r, "schedule.warmup_epochs", 0, 1e6, &warmup_epochs) ||
      get_double(r, "schedule.warmup_fraction", 0, 1, &c->warmup_fraction) ||
      get_float(r, "schedule.min_lr", 0, 100, &c->schedule.min_lr) ||
      get_float(r, "schedule.warmup_start_factor", 0, 1, &c->schedule.warmup_start_factor))
    return -1;
  if (!strcmp(decay, "step")) c->schedule.decay = SP_LR_STEP;
  if (!strcmp(decay, "constant")) c->schedule.decay = SP_LR_CONSTANT;
  if (get_list(r, "schedule.milestones", SP_LR_MAX_MILESTONES, 0, 1e6, list, &n)) return -1;
  c->schedule.n_milestones = n;
  for (int i = 0; i < n; i++) c->schedule.milestones[i] = list[i];
  c->schedule.gamma = 0.1f;
  if (get_float(r, "schedule.gamma", 0, 1, &c->schedule.gamma)) return -1;
  if (get_int(r, "epochs", 1, 1000000, &c->epochs) || get_int(r, "batch", 1, 65536, &c->batch) ||
      get_int(r, "threads", 0, 1024, &c->threads) || get_int(r, "workers", 0, 256, &c->workers) ||
      get_double(r, "seed", 0, 9007199254740992.0, &seed) ||
      get_string(r, "precision", c->precision, sizeof c->precision, precisions) ||
      get_string(r, "backend", c->backend, sizeof c->backend, backends) ||
      get_string(r, "out", c->out, sizeof c->out, NULL) || get_int(r, "eval_every", 1, 1000000, &c->eval_every))
    return -1;
  if (get_bool(r, "dist.sync_bn", &c->dist.sync_bn) || get_double(r, "dist.timeout_s", 1, 1e6, &c->dist.timeout_s) ||
      get_double(r, "dist.bucket_mb", 0.001, 4096, &c->dist.bucket_mb))
    return -1;
  c->seed = (uint64_t)seed;
  /* Warm-up: explicit epochs win over the fraction of training. */
  c->schedule.base_lr = c->lr;
  c->schedule.total_epochs = c->epochs;
  c->schedule.warmup_epochs = warmup_epochs >= 0 ? warmup_epochs : c->warmup_fraction * c->epochs;
  if (sp_opt_config_check(&c->optimizer) != 0) return sp_error_push("%s: optimizer", r->file);
  return 0;
}

static int finish(reader *r, int n_sets, char *const *sets, sp_train_config *cfg, char **resolved) {
  if (!r->root) return -1;
  for (int i = 0; i < n_sets; i++)
    if (sp_yaml_set(r->root, sets[i]) != 0) {
      sp_yaml_free(r->root);
      return -1;
    }
  int rc = read_all(r, cfg);
  if (rc == 0) {
    char key[512];
    int line = 0;
    if (sp_yaml_first_unused(r->root, key, sizeof key, &line))
      rc = line ? sp_error_set("%s: unknown key '%s' (line %d)", r->file, key, line)
                : sp_error_set("%s: unknown key '%s' (from --set)", r->file, key);
  }
  if (rc == 0 && resolved) *resolved = sp_yaml_emit(r->root);
  sp_yaml_free(r->root);
  return rc;
}

int sp_train_config_load(const char *path, int n_sets, char *const *sets, sp_train_config *cfg, char **resolved) {
  *cfg = sp_train_config_default();
  reader r = {path, sp_yaml_load_file(path), 0};
  return finish(&r, n_sets, sets, cfg, resolved);
}

int sp_train_config_parse(const char *yaml, const char *label, int n_sets, char *const *sets, sp_train_config *cfg,
                          char **resolved) {
  *cfg = sp_train_config_default();
  reader r = {label, sp_yaml_load_string(yaml, label), 0};
  return finish(&r, n_sets, sets, cfg, resolved);
}
