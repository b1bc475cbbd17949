/* ResNet-18/34/50 with the Bag-of-Tricks variants and the seed's extras (see
 * include/spry/models.h for the switches and the parameter names). */
#include <math.h>
#include <string.h>

#include "models/models_internal.h"

/* Everything the builders below need, resolved once from the config. */
typedef struct {
  int basic; /* basic blocks (18/34) or bottlenecks (50) */
  int blocks[4];
  int width;
  int stem_c, shortcut_pool, stem_conv, blurpool, hardswish, zero_init_residual;
} resnet_plan;

static int resolve(sp_graph *g, sp_value image, const sp_resnet_config *cfg, resnet_plan *r) {
  memset(r, 0, sizeof *r);
  static const int b18[4] = {2, 2, 2, 2}, b34[4] = {3, 4, 6, 3};
  if (cfg->depth == 18)
    memcpy(r->blocks, b18, sizeof b18);
  else if (cfg->depth == 34 || cfg->depth == 50)
    memcpy(r->blocks, b34, sizeof b34);
  else
    return sp_graph_fail(g, "resnet: depth %d is not 18, 34 or 50", cfg->depth);
  r->basic = cfg->depth != 50;
  r->width = cfg->width ? cfg->width : 64;
  /* width/2 stem channels (variant C) and width/4 bottleneck widths in the
   * decoder must stay whole. */
  if (r->width < 2 || r->width % 2) return sp_graph_fail(g, "resnet: width %d must be an even number >= 2", r->width);
  int in = sp_graph_channels(g, image);
  if (cfg->in_channels > 0 && in > 0 && cfg->in_channels != in)
    return sp_graph_fail(g, "resnet: in_channels %d but the image input has %d channels", cfg->in_channels, in);
  r->stem_c = cfg->variant_c != 0;
  /* BlurPool stands in for D's avg-pool, so it needs D's shortcut shape. */
  r->shortcut_pool = cfg->variant_d || cfg->blurpool;
  r->stem_conv = cfg->stem_conv != 0;
  r->blurpool = cfg->blurpool != 0;
  r->hardswish = cfg->hardswish != 0;
  r->zero_init_residual = cfg->zero_init_residual != 0;
  return 0;
}

static sp_value act(sp_graph *g, const resnet_plan *r, sp_value x) {
  return r->hardswish ? sp_hardswish(g, x) : sp_relu(g, x);
}

static sp_value conv_bn(sp_graph *g, sp_value x, const char *conv, const char *bn, int out, int k, int stride) {
  x = sp_conv2d(g, x, conv, (sp_conv_args){.out_ch = out, .kernel = k, .stride = stride, .pad = k / 2});
  return sp_batchnorm(g, x, bn);
}

/* torchvision draws conv weights from kaiming_normal(fan_out, relu); the graph
 * made them U(+-1/sqrt(fan_in)). Rescaling by sqrt(6 fan_in / fan_out) gives
 * U(+-sqrt(6/fan_out)), kaiming's uniform form with the same variance
 * 2/fan_out, which is what keeps activations from shrinking or growing with
 * depth; it reuses the graph's seeded draw, so no new seeding scheme. */
void sp_models_kaiming_fan_out(sp_graph *g, int first_param, int end_param) {
  for (int p = first_param; p < end_param; p++) {
    sp_tensor *t = sp_graph_param_value(g, p);
    if (!sp_graph_param_grad(g, p) || t->shape.ndim != 4) continue;
    double fan_in = (double)t->shape.d[1] * t->shape.d[2] * t->shape.d[3];
    double fan_out = (double)t->shape.d[0] * t->shape.d[2] * t->shape.d[3];
    float s = (float)sqrt(6.0 * fan_in / fan_out);
    float *w = t->data;
    for (int64_t i = 0; i < sp_tensor_numel(t); i++) w[i] *= s;
  }
}

/* Bag of Tricks' zero-gamma: the block's last batch norm (the value bn)
 * starts with gamma = 0, so each residual block starts as the identity. */
enum { BN_GAMMA = 0 }; /* a batch norm node's parameters: gamma, beta */
static void zero_gamma(sp_graph *g, sp_value bn) {
  int gamma = sp_graph_error(g) ? -1 : sp_graph_value_param(g, bn, BN_GAMMA);
  if (gamma < 0) return;
  sp_tensor *t = sp_graph_param_value(g, gamma);
  memset(t->data, 0, sp_tensor_bytes(t));
}

/* The shortcut of a block whose input (in channels) differs from its output
 * in size or channels. B: strided 1x1 conv + BN. D: pool first, then a
 * stride-1 1x1 conv, so the shortcut sees every input pixel instead of
 * skipping three quarters of them. */
static sp_value shortcut(sp_graph *g, const resnet_plan *r, sp_value x, int out, int stride) {
  if (!r->shortcut_pool) return conv_bn(g, x, "downsample.0", "downsample.1", out, 1, stride);
  if (stride == 2)
    x = r->blurpool
            ? sp_blurpool(g, x, 3, 2)
            : sp_avgpool2d(
                  g, x,
                  (sp_pool_args){
                      .kernel = 2, .stride = 2, .exclude_pad = 1, .ceil_mode = 1}); /* timm: ceil, no pad count */
  return conv_bn(g, x, "downsample.1", "downsample.2", out, 1, 1);
}

static sp_value basic_block(sp_graph *g, const resnet_plan *r, sp_value x, int planes, int stride) {
  int in = sp_graph_channels(g, x);
  sp_value y = act(g, r, conv_bn(g, x, "conv1", "bn1", planes, 3, stride));
  y = conv_bn(g, y, "conv2", "bn2", planes, 3, 1);
  if (r->zero_init_residual) zero_gamma(g, y);
  sp_value s = (stride != 1 || in != planes) ? shortcut(g, r, x, planes, stride) : x;
  return act(g, r, sp_add(g, y, s));
}

/* Bottleneck (v1.5 / ResNet-B): the stride sits on the 3x3, not the first
 * 1x1, which would otherwise discard three quarters of its input. */
static sp_value bottleneck_block(sp_graph *g, const resnet_plan *r, sp_value x, int planes, int stride) {
  int in = sp_graph_channels(g, x), out = planes * 4;
  sp_value y = act(g, r, conv_bn(g, x, "conv1", "bn1", planes, 1, 1));
  y = act(g, r, conv_bn(g, y, "conv2", "bn2", planes, 3, stride));
  y = conv_bn(g, y, "conv3", "bn3", out, 1, 1);
  if (r->zero_init_residual) zero_gamma(g, y);
  sp_value s = (stride != 1 || in != out) ? shortcut(g, r, x, out, stride) : x;
  return act(g, r, sp_add(g, y, s));
}

/* Stem: returns the H/4 map and stores the last H/2 activation in *half. */
static sp_value stem(sp_graph *g, const resnet_plan *r, sp_value x, sp_value *half) {
  int w = r->width;
  if (r->stem_c) {
    x = act(g, r, conv_bn(g, x, "conv1.0", "conv1.1", w / 2, 3, 2));
    x = act(g, r, conv_bn(g, x, "conv1.3", "conv1.4", w / 2, 3, 1));
    if (r->stem_conv) {
      *half = x;
      return act(g, r, conv_bn(g, x, "conv1.6", "bn1", w, 3, 2));
    }
    x = act(g, r, conv_bn(g, x, "conv1.6", "bn1", w, 3, 1));
  } else {
    x = sp_conv2d(g, x, "conv1", (sp_conv_args){.out_ch = w, .kernel = 7, .stride = 2, .pad = 3});
    x = act(g, r, sp_batchnorm(g, x, "bn1"));
  }
  *half = x;
  if (r->stem_conv) return act(g, r, conv_bn(g, x, "pool_conv", "pool_bn", w, 3, 2));
  if (r->blurpool) return sp_blurpool(g, sp_maxpool2d(g, x, (sp_pool_args){.kernel = 3, .pad = 1}), 3, 2);
  return sp_maxpool2d(g, x, (sp_pool_args){.kernel = 3, .stride = 2, .pad = 1});
}

int sp_model_resnet_encoder(sp_graph *g, sp_value image, const sp_resnet_config *cfg, sp_resnet_stages *out) {
  resnet_plan r;
  out->stem = -1;
  for (int i = 0; i < 4; i++) out->layer[i] = -1;
  if (image < 0 || resolve(g, image, cfg, &r) != 0) return -1;
  int first = sp_graph_param_count(g);
  sp_value x = stem(g, &r, image, &out->stem);
  for (int s = 0; s < 4; s++) {
    int planes = r.width << s;
    for (int b = 0; b < r.blocks[s]; b++) {
      sp_graph_push_scope(g, "layer%d.%d", s + 1, b);
      int stride = (b == 0 && s > 0) ? 2 : 1;
      x = r.basic ? basic_block(g, &r, x, planes, stride) : bottleneck_block(g, &r, x, planes, stride);
      sp_graph_pop_scope(g);
    }
    out->layer[s] = x;
  }
  /* The zeroed gammas are 1-D, so the rescale leaves them alone. */
  sp_models_kaiming_fan_out(g, first, sp_graph_param_count(g));
  return sp_graph_error(g) || x < 0 ? -1 : 0;
}

sp_value sp_model_resnet_features(sp_graph *g, sp_value image, const sp_resnet_config *cfg) {
  sp_resnet_stages st;
  if (sp_model_resnet_encoder(g, image, cfg, &st) != 0) return -1;
  return sp_flatten(g, sp_global_avgpool(g, st.layer[3]));
}

sp_value sp_model_resnet(sp_graph *g, sp_value image, const sp_resnet_config *cfg) {
  sp_value f = sp_model_resnet_features(g, image, cfg);
  if (f < 0) return -1;
  int classes = cfg->num_classes ? cfg->num_classes : 1000;
  if (classes < 1) return sp_graph_fail(g, "resnet: num_classes %d < 1", classes);
  /* flatten drops the build-time channel count, so take it from the pool's input. */
  int width = cfg->width ? cfg->width : 64;
  int features = (width << 3) * (cfg->depth == 50 ? 4 : 1);
  return sp_linear(g, f, "fc", features, classes, 1);
}
