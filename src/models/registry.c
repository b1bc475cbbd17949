/* Models by name (the CLI's --model and the configs' `model:` key). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "spry/common.h"
#include "spry/models.h"

const char *sp_model_names(void) { return "vgg-face vgg-nose resnet18 resnet34 resnet50 resunet18 resunet50"; }

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

sp_value sp_model_build(sp_graph *g, const sp_model_spec *spec, sp_value image) {
  const char *n = spec->name ? spec->name : "";
  if (!strcmp(n, "vgg-face")) return sp_model_vgg(g, image, spec->height, spec->width, spec->keypoints);
  if (!strcmp(n, "vgg-nose")) return sp_model_vgg(g, image, spec->height, spec->width, 1);
  int depth = 0, unet = 0;
  if (!strncmp(n, "resnet", 6)) depth = atoi(n + 6);
  else if (!strncmp(n, "resunet", 7)) depth = atoi(n + 7), unet = 1;
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
  return "keypoints num_classes base_width variant_c variant_d stem_conv blurpool hardswish zero_init_residual";
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
      {"keypoints", &s->keypoints, 0},   {"num_classes", &s->num_classes, 0},
      {"base_width", &s->base_width, 0}, {"variant_c", &s->variant_c, 1},
      {"variant_d", &s->variant_d, 1},   {"stem_conv", &s->stem_conv, 1},
      {"blurpool", &s->blurpool, 1},     {"hardswish", &s->hardswish, 1},
      {"zero_init_residual", &s->zero_init_residual, 1},
  };
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
