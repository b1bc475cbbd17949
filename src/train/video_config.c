/* YAML -> sp_video_config, strictly (unknown keys and bad values are errors
 * naming the key and its line), in the keypoint config's style. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/yaml.h"
#include "spry/video_train.h"

typedef struct {
  const char *file;
  sp_yaml *root;
  int failed;
} reader;

static int bad(const reader *r, const char *key, const sp_yaml *v, const char *want) {
  return sp_error_set("%s: %s (line %d): expected %s, got '%s'", r->file, key, v ? v->line : 0, want,
                      v && v->value ? v->value : "a list or map");
}

static sp_yaml *find(reader *r, const char *key) {
  char path[256];
  snprintf(path, sizeof path, "%s", key);
  sp_yaml *node = r->root;
  char *save = NULL;
  for (char *part = strtok_r(path, ".", &save); part && node; part = strtok_r(NULL, ".", &save)) {
    if (node->kind != SP_YAML_MAP) {
      r->failed = 1;
      sp_error_set("%s: the section above '%s' (line %d) must be a map of keys", r->file, key, node->line);
      return NULL;
    }
    node = sp_yaml_get(node, part);
    if (node) node->used = 1;
  }
  return node;
}

static int get_double(reader *r, const char *key, double lo, double hi, double *out) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[96];
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

static int get_float(reader *r, const char *key, double lo, double hi, float *out) {
  double d = *out;
  if (get_double(r, key, lo, hi, &d) != 0) return -1;
  *out = (float)d;
  return 0;
}

static int get_int(reader *r, const char *key, long lo, long hi, int *out) {
  double d = *out;
  if (get_double(r, key, (double)lo, (double)hi, &d) != 0) return -1;
  if (d != floor(d)) return bad(r, key, find(r, key), "an integer");
  *out = (int)d;
  return 0;
}

static int get_bool(reader *r, const char *key, int *out) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  static const char *on[] = {"true", "yes", "on", "1"}, *off[] = {"false", "no", "off", "0"};
  for (int i = 0; v->kind == SP_YAML_SCALAR && i < 4; i++) {
    if (!strcmp(v->value, on[i])) return *out = 1, 0;
    if (!strcmp(v->value, off[i])) return *out = 0, 0;
  }
  return bad(r, key, v, "true or false");
}

/* choices: NULL-terminated, or NULL for any text. Returns the choice index. */
static int get_string(reader *r, const char *key, char *out, size_t n, const char *const *choices) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  if (v->kind != SP_YAML_SCALAR || strlen(v->value) >= n) return bad(r, key, v, "a short text");
  if (choices) {
    char want[256] = "one of:";
    int found = 0;
    for (const char *const *c = choices; *c; c++) {
      found |= !strcmp(*c, v->value);
      strncat(want, " ", sizeof want - strlen(want) - 1);
      strncat(want, *c, sizeof want - strlen(want) - 1);
    }
    if (!found) return bad(r, key, v, want);
  }
  snprintf(out, n, "%s", v->value);
  return 0;
}

static int get_triple(reader *r, const char *key, double lo, double hi, float out[3]) {
  sp_yaml *v = find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[96];
  snprintf(want, sizeof want, "one number or a list of 3 in [%g, %g]", lo, hi);
  int n = v->kind == SP_YAML_SEQ ? v->n : 1;
  if ((v->kind == SP_YAML_SEQ && n != 3 && n != 1) || v->kind == SP_YAML_MAP) return bad(r, key, v, want);
  double d[3];
  for (int i = 0; i < n; i++) {
    sp_yaml *it = v->kind == SP_YAML_SEQ ? v->items[i] : v;
    char *end;
    if (it->kind != SP_YAML_SCALAR) return bad(r, key, it, want);
    d[i] = strtod(it->value, &end);
    if (end == it->value || *end || !(d[i] >= lo && d[i] <= hi)) return bad(r, key, it, want);
  }
  for (int i = 0; i < 3; i++) out[i] = (float)d[n == 3 ? i : 0];
  return 0;
}

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
  snprintf(c.backend, sizeof c.backend, "ref");
  snprintf(c.precision, sizeof c.precision, "f32");
  snprintf(c.out, sizeof c.out, "runs/video");
  c.eval_every = 1;
  return c;
}

static int read_all(reader *r, sp_video_config *c) {
  static const char *const models[] = {"tsn-r18", "tsn-r50", "tsm-r18", "tsm-r50", NULL};
  static const char *const samplers[] = {"tsn", "dense", NULL};
  static const char *const formats[] = {"video", "frames", NULL};
  static const char *const opts[] = {"sgd", "adam", "adamw", NULL};
  static const char *const decays[] = {"cosine", "step", "constant", NULL};
  static const char *const backends[] = {"ref", "cpu", NULL};
  static const char *const precisions[] = {"f32", "bf16", NULL};
  static const char *const tasks[] = {"video", NULL};
  char task[16], sampler[16] = "", format[16], opt[16] = "", decay[16] = "";
  double seed = (double)c->seed, warmup = 0, list[SP_LR_MAX_MILESTONES];
  if (get_string(r, "task", task, sizeof task, tasks) || get_string(r, "model", c->model, sizeof c->model, models) ||
      get_int(r, "model_options.base_width", 1, 4096, &c->base_width) ||
      get_float(r, "model_options.shift_back", 0, 1, &c->shift_back) ||
      get_float(r, "model_options.shift_fwd", 0, 1, &c->shift_fwd) ||
      get_float(r, "model_options.dropout", 0, 0.99, &c->dropout) ||
      get_string(r, "model_options.pretrained", c->pretrained, sizeof c->pretrained, NULL) ||
      get_string(r, "data.train_list", c->data.train_list, sizeof c->data.train_list, NULL) ||
      get_string(r, "data.val_list", c->data.val_list, sizeof c->data.val_list, NULL) ||
      get_string(r, "data.root", c->data.root, sizeof c->data.root, NULL) ||
      /* Informational: the reader tells videos and frame folders apart itself. */
      get_string(r, "data.format", format, sizeof format, formats) ||
      get_string(r, "data.sampler", sampler, sizeof sampler, samplers) ||
      get_int(r, "data.segments", 1, 1024, &c->data.segments) || get_int(r, "data.frames", 1, 1024, &c->data.frames) ||
      get_int(r, "data.stride", 1, 1024, &c->data.stride) || get_int(r, "data.size", 32, 4096, &c->data.size) ||
      get_int(r, "data.short_side", 0, 8192, &c->data.short_side) ||
      get_int(r, "data.test_clips", 1, 64, &c->data.test_clips) || get_float(r, "data.flip", 0, 1, &c->data.flip) ||
      get_int(r, "data.num_classes", 0, 1 << 20, &c->data.num_classes) ||
      get_triple(r, "data.mean", -10, 10, c->data.mean) || get_triple(r, "data.std", 1e-6, 10, c->data.std))
    return -1;
  if (!strcmp(sampler, "dense")) c->data.sampler = SP_SAMPLER_DENSE;
  if (get_string(r, "optimizer.type", opt, sizeof opt, opts)) return -1;
  if (opt[0]) {
    sp_opt_config keep = c->optimizer;
    sp_opt_kind_parse(opt, &c->optimizer.kind);
    c->optimizer = sp_opt_config_default(c->optimizer.kind);
    c->optimizer.weight_decay = keep.weight_decay;
    if (c->optimizer.kind == SP_OPT_SGD) c->optimizer.momentum = keep.momentum;
  }
  int n = 0;
  sp_yaml *ms;
  if (get_float(r, "optimizer.lr", 0, 100, &c->lr) ||
      get_float(r, "optimizer.weight_decay", 0, 10, &c->optimizer.weight_decay) ||
      get_float(r, "optimizer.momentum", 0, 0.9999, &c->optimizer.momentum) ||
      get_bool(r, "optimizer.nesterov", &c->optimizer.nesterov) ||
      get_float(r, "optimizer.clip_norm", 0, 1e6, &c->clip_norm) ||
      get_string(r, "schedule.decay", decay, sizeof decay, decays) ||
      get_double(r, "schedule.warmup_epochs", 0, 1e6, &warmup) ||
      get_float(r, "schedule.warmup_start_factor", 0, 1, &c->schedule.warmup_start_factor) ||
      get_float(r, "schedule.min_lr", 0, 100, &c->schedule.min_lr))
    return -1;
  c->schedule.gamma = 0.1f;
  if (get_float(r, "schedule.gamma", 0, 1, &c->schedule.gamma)) return -1;
  if ((ms = find(r, "schedule.milestones"))) {
    if (ms->kind != SP_YAML_SEQ || ms->n > SP_LR_MAX_MILESTONES)
      return bad(r, "schedule.milestones", ms, "a list of at most 8 epochs");
    for (int i = 0; i < ms->n; i++) {
      char *end;
      sp_yaml *it = ms->items[i];
      list[i] = it->kind == SP_YAML_SCALAR ? strtod(it->value, &end) : -1;
      if (it->kind != SP_YAML_SCALAR || *end || list[i] < 0) return bad(r, "schedule.milestones", it, "an epoch");
      c->schedule.milestones[i] = list[i];
    }
    n = ms->n;
  } else if (r->failed) {
    return -1;
  }
  c->schedule.n_milestones = n;
  if (!strcmp(decay, "step")) c->schedule.decay = SP_LR_STEP;
  if (!strcmp(decay, "constant")) c->schedule.decay = SP_LR_CONSTANT;
  if (get_bool(r, "multigrid.long", &c->multigrid.long_cycle) ||
      get_bool(r, "multigrid.short", &c->multigrid.short_cycle) || get_int(r, "epochs", 1, 1000000, &c->epochs) ||
      get_int(r, "batch", 1, 65536, &c->batch) || get_int(r, "threads", 0, 1024, &c->threads) ||
      get_int(r, "workers", 0, 256, &c->workers) || get_double(r, "seed", 0, 9007199254740992.0, &seed) ||
      get_string(r, "backend", c->backend, sizeof c->backend, backends) ||
      get_string(r, "precision", c->precision, sizeof c->precision, precisions) ||
      get_string(r, "out", c->out, sizeof c->out, NULL) || get_int(r, "eval_every", 1, 1000000, &c->eval_every))
    return -1;
  c->seed = (uint64_t)seed;
  c->schedule.base_lr = c->lr;
  c->schedule.total_epochs = c->epochs;
  c->schedule.warmup_epochs = warmup;
  if (!c->data.train_list[0] && !c->data.val_list[0])
    return sp_error_set("%s: data.train_list (and data.val_list) must be set", r->file);
  if (sp_opt_config_check(&c->optimizer) != 0) return sp_error_push("%s: optimizer", r->file);
  return 0;
}

static int finish(reader *r, int n_sets, char *const *sets, sp_video_config *cfg, char **resolved) {
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

int sp_video_config_load(const char *path, int n_sets, char *const *sets, sp_video_config *cfg, char **resolved) {
  *cfg = sp_video_config_default();
  reader r = {path, sp_yaml_load_file(path), 0};
  return finish(&r, n_sets, sets, cfg, resolved);
}

int sp_video_config_parse(const char *yaml, const char *label, int n_sets, char *const *sets, sp_video_config *cfg,
                          char **resolved) {
  *cfg = sp_video_config_default();
  reader r = {label, sp_yaml_load_string(yaml, label), 0};
  return finish(&r, n_sets, sets, cfg, resolved);
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
