/* ResUNet: a ResNet encoder, a 5-stage U-Net decoder back to input
 * resolution, K heatmaps and a soft-argmax head (the seed's ResUNet-72; see
 * include/spry/models.h for the layout and names).
 *
 * Up-sampling is ConvTranspose2d k2 s2: with kernel = stride the windows do
 * not overlap (no checkerboard), it is one op instead of bilinear + 1x1 conv
 * (half the activation memory and traffic at each resolution), and it is the
 * "up-convolution" of U-Net and of the seed's layer count. */
#include "models/models_internal.h"

static sp_value act(sp_graph *g, int hardswish, sp_value x) { return hardswish ? sp_hardswish(g, x) : sp_relu(g, x); }

static sp_value conv_bn(sp_graph *g, sp_value x, const char *conv, const char *bn, int out, int k) {
  return sp_batchnorm(g, sp_conv2d(g, x, conv, (sp_conv_args){.out_ch = out, .kernel = k, .pad = k / 2}), bn);
}

/* 1x1 reduce, 3x3, 1x1 expand: the 3x3 runs on a quarter of the channels,
 * which matters most here, at the decoder's high resolutions. */
static sp_value decoder_block(sp_graph *g, sp_value x, int out, int hardswish) {
  int in = sp_graph_channels(g, x), mid = out / 4 > 0 ? out / 4 : 1;
  sp_graph_push_scope(g, "block");
  sp_value y = act(g, hardswish, conv_bn(g, x, "conv1", "bn1", mid, 1));
  y = act(g, hardswish, conv_bn(g, y, "conv2", "bn2", mid, 3));
  y = conv_bn(g, y, "conv3", "bn3", out, 1);
  sp_value s = in == out ? x : conv_bn(g, x, "shortcut.0", "shortcut.1", out, 1);
  sp_graph_pop_scope(g);
  return act(g, hardswish, sp_add(g, y, s));
}

sp_resunet_config sp_resunet50_default(int keypoints) {
  sp_resunet_config c = {0};
  c.encoder.depth = 50;
  c.encoder.variant_c = c.encoder.variant_d = c.encoder.stem_conv = c.encoder.blurpool = 1;
  c.keypoints = keypoints;
  return c;
}

sp_value sp_model_resunet(sp_graph *g, sp_value image, const sp_resunet_config *cfg, sp_value *heatmaps) {
  static const int dec50[5] = {512, 256, 128, 64, 32}, dec18[5] = {256, 128, 64, 32, 32};
  if (heatmaps) *heatmaps = -1;
  if (cfg->keypoints < 1) return sp_graph_fail(g, "resunet: keypoints %d < 1", cfg->keypoints);
  int dec[5], custom = 0, width = cfg->encoder.width ? cfg->encoder.width : 64;
  for (int i = 0; i < 5; i++) custom |= cfg->decoder[i] != 0;
  for (int i = 0; i < 5; i++) {
    /* Default widths follow the encoder's, so a narrow encoder gets a
     * proportionally narrow decoder (resunet18 at width 16 for tests). */
    int def = (cfg->encoder.depth == 50 ? dec50[i] : dec18[i]) * width / 64;
    dec[i] = custom ? cfg->decoder[i] : (def > 0 ? def : 1);
    if (dec[i] < 1) return sp_graph_fail(g, "resunet: decoder[%d] = %d channels", i, dec[i]);
  }
  sp_resnet_stages st;
  if (sp_model_resnet_encoder(g, image, &cfg->encoder, &st) != 0) return -1;
  int hs = cfg->encoder.hardswish != 0;
  const sp_value skips[5] = {st.layer[2], st.layer[1], st.layer[0], st.stem, -1};
  sp_value x = st.layer[3];
  for (int i = 0; i < 5; i++) {
    sp_graph_push_scope(g, "decoder.%d", i);
    x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = dec[i], .kernel = 2, .stride = 2});
    /* BN + activation put the up-sampled path on the same footing as the
     * (batch-normalised, activated) encoder map it is concatenated with. */
    x = act(g, hs, sp_batchnorm(g, x, "up_bn"));
    if (skips[i] >= 0) {
      sp_value both[2] = {x, skips[i]};
      x = sp_concat(g, 2, both);
    }
    int first = sp_graph_param_count(g);
    x = decoder_block(g, x, dec[i], hs);
    sp_models_kaiming_fan_out(g, first, sp_graph_param_count(g));
    sp_graph_pop_scope(g);
  }
  sp_value h = sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = cfg->keypoints, .kernel = 1, .bias = 1});
  if (h < 0) return -1;
  /* For reports (heatmap figures); training (SP_PLAN_LOSS_ONLY) and frozen
   * inference plans do not keep it, which leaves the head conv its fast
   * layout: a plain f32 N*K*H*W output put it on a gemm kernel (ResUNet-50
   * f32, batch 64: 200 ms of a 3.6 s forward, plus a 50 ms reorder). */
  sp_graph_output_aux(g, h, "heatmaps");
  if (heatmaps) *heatmaps = h;
  return sp_softargmax(g, h, 1.0f);
}
