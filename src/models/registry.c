/* Models by name (the CLI's --model and the configs' `model:` key). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "spry/common.h"
#include "spry/models.h"

const char *sp_model_names(void) {
  return "vgg-face vgg-nose resnet18 resnet34 resnet50 resunet18 resunet50 tsn-r18 tsn-r50 tsm-r18 tsm-r50";
}

/* Tri-state switch: 0 keeps the model's default. */
static int pick(int v, int model_default) { return v > 0 ? 1 : v < 0 ? 0 : model_default; }

static void resnet_from_spec(const sp_model_spec *s, int depth, int seed_defaults, sp_resnet_config *c) {
  memset(c, 0, sizeof *c);
  c->depth = depth;
  c->in_channels = s->channels;
  c->num_classes = s->num_classes;
  c->width = s->base_width;
  c->variant_c = pick(s->variant_c, seed_defaults);
  c->variant_d = pick(s->variant_d, seed_defaults);
  c->stem_conv = pick(s->stem_conv, seed_defaults);
  c->blurpool = pick(s->blurpool, seed_defaults);
  c->hardswish = pick(s->hardswish, 0);
  c->zero_init_residual = pick(s->zero_init_residual, 0);
}

/* tsn-r18 ... tsm-r50: zero fields mean 8 segments and TSM's 1/8 + 1/8. */
static sp_value video_model(sp_graph *g, const sp_model_spec *s, sp_value image) {
  int tsm = s->name[2] == 'm';
  sp_tsn_config c = sp_tsn_config_default(atoi(s->name + 5), s->segments ? s->segments : 8,
                                          s->num_classes ? s->num_classes : 400, tsm);
  c.width = s->base_width;
  if (tsm && s->shift_back) c.shift_back = s->shift_back > 0 ? s->shift_back : 0.0f;
  if (tsm && s->shift_fwd) c.shift_fwd = s->shift_fwd > 0 ? s->shift_fwd : 0.0f;
  return sp_model_tsn(g, image, &c);
}

sp_value sp_model_build(sp_graph *g, const sp_model_spec *spec, sp_value image) {
  const char *n = spec->name ? spec->name : "";
  if (!strcmp(n, "vgg-face")) return sp_model_vgg(g, image, spec->height, spec->width, spec->keypoints);
  if (!strcmp(n, "vgg-nose")) return sp_model_vgg(g, image, spec->height, spec->width, 1);
  if ((!strncmp(n, "tsn-r", 5) || !strncmp(n, "tsm-r", 5)) && (!strcmp(n + 5, "18") || !strcmp(n + 5, "50")))
    return video_model(g, spec, image);
  int depth = 0, unet = 0;
  if (!strncmp(n, "resnet", 6))
    depth = atoi(n + 6);
  else if (!strncmp(n, "resunet", 7))
    depth = atoi(n + 7), unet = 1;
  char canon[32];
  snprintf(canon, sizeof canon, "%s%d", unet ? "resunet" : "resnet", depth);
  int known = (depth == 18 || depth == 50 || (depth == 34 && !unet)) && !strcmp(canon, n);
  if (!known) return sp_graph_fail(g, "unknown model '%s' (known: %s)", n, sp_model_names());
  if (unet) {
    /* The decoder concatenates maps from 5 halvings; sizes that do not divide
     * would fail at plan time with a less helpful concat shape error. */
    if (spec->height <= 0 || spec->width <= 0 || spec->height % 32 || spec->width % 32)
      return sp_graph_fail(g, "%s: input %dx%d must be a positive multiple of 32", n, spec->height, spec->width);
    sp_resunet_config c = {0};
    resnet_from_spec(spec, depth, depth == 50, &c.encoder);
    c.keypoints = spec->keypoints;
    return sp_model_resunet(g, image, &c, NULL);
  }
  sp_resnet_config c;
  resnet_from_spec(spec, depth, 0, &c);
  return sp_model_resnet(g, image, &c);
}

const char *sp_model_spec_keys(void) {
  return "keypoints num_classes base_width variant_c variant_d stem_conv blurpool hardswish zero_init_residual "
         "segments shift_back shift_fwd";
}

static int parse_bool(const char *key, const char *v, int *out) {
  static const char *on[] = {"true", "on", "yes", "1"}, *off[] = {"false", "off", "no", "0"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(v, on[i])) return *out = 1, 0;
    /* -1, not 0: an explicit "off" must override a model's default "on". */
    if (!strcasecmp(v, off[i])) return *out = -1, 0;
  }
  return sp_error_set("model key '%s': '%s' is not a boolean (true/false)", key, v);
}

static int parse_int(const char *key, const char *v, int lo, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > 1 << 20)
    return sp_error_set("model key '%s': '%s' is not an integer in [%d, %d]", key, v, lo, 1 << 20);
  *out = (int)x;
  return 0;
}

int sp_model_spec_set(sp_model_spec *s, const char *key, const char *value) {
  struct {
    const char *key;
    int *field;
    int is_bool;
  } keys[] = {
      {"keypoints", &s->keypoints, 0},
      {"num_classes", &s->num_classes, 0},
      {"base_width", &s->base_width, 0},
      {"variant_c", &s->variant_c, 1},
      {"variant_d", &s->variant_d, 1},
      {"stem_conv", &s->stem_conv, 1},
      {"blurpool", &s->blurpool, 1},
      {"hardswish", &s->hardswish, 1},
      {"zero_init_residual", &s->zero_init_residual, 1},
  };
  /* Shift fractions: an explicit 0 is stored as -1 (0 means the default). */
  if (!strcmp(key, "shift_back") || !strcmp(key, "shift_fwd")) {
    char *end;
    double f = strtod(value, &end);
    if (!*value || *end || !(f >= 0 && f <= 1))
      return sp_error_set("model key '%s': '%s' is not a number in [0, 1]", key, value);
    *(key[6] == 'b' ? &s->shift_back : &s->shift_fwd) = f > 0 ? (float)f : -1.0f;
    return 0;
  }
  if (!strcmp(key, "segments")) return parse_int(key, value, 1, &s->segments);
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (strcmp(key, keys[i].key)) continue;
    if (keys[i].is_bool) return parse_bool(key, value, keys[i].field);
    /* base_width: odd widths would split the variant-C stem unevenly. */
    if (!strcmp(key, "base_width")) {
      int w;
      if (parse_int(key, value, 2, &w) != 0) return -1;
      if (w % 2) return sp_error_set("model key 'base_width': %s is odd", value);
      *keys[i].field = w;
      return 0;
    }
    return parse_int(key, value, 1, keys[i].field);
  }
  return sp_error_set("unknown model key '%s' (known: %s)", key, sp_model_spec_keys());
}
