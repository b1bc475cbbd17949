/* Model builders: each adds a network to a graph and returns its output value. */
#ifndef SPRY_MODELS_H
#define SPRY_MODELS_H

#include "spry/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seed's modified VGG11 ("vgg-face"; "vgg-nose" is keypoints = 1):
 * 5 stages of conv3x3-BN-ReLU, 1 -> 8 -> 16 -> 32 -> 64 -> 128 channels, the
 * first conv of each stage with stride 2 (stages 2-4 add a stride-1 conv),
 * flatten (128 * H/32 * W/32 = 6272 at 224x224) -> fc1 1024 -> BN1d -> ReLU ->
 * fc2 keypoints*2, reshaped to points [N, keypoints, 2]. image: [N, C, H, W]
 * with H and W multiples of 32. Parameter names follow the seed's PyTorch
 * module ("layers.2.1.conv.weight", "fc1.weight", "bn1.running_mean"). */
sp_value sp_model_vgg(sp_graph *g, sp_value image, int height, int width, int keypoints);

/* ---- ResNet (src/models/resnet.c) ----------------------------------------
 * torchvision's ResNet (v1.5 = "ResNet-B" of Bag of Tricks: stride on the
 * 3x3 conv of a down-sampling block) with each trick a switch. All-zero
 * switches build exactly torchvision's resnet18/34/50, parameter names
 * included ("conv1.weight", "layer1.0.bn1.running_var",
 * "layer2.0.downsample.0.weight", "fc.bias"), so its checkpoints load by name
 * (our state has no "num_batches_tracked" entries: PyTorch uses them only
 * when momentum is None).
 *
 * Names that torchvision lacks follow timm's resnet*d models:
 *   variant_c: conv1.0 (3x3 s2, C -> width/2), conv1.1 (BN), conv1.3 (3x3,
 *     width/2 -> width/2), conv1.4 (BN), conv1.6 (3x3, width/2 -> width),
 *     then bn1 (indices 2 and 5 are the parameter-free activations);
 *   variant_d / blurpool: downsample.0 is the pool (no parameters),
 *     downsample.1 the 1x1 conv (stride 1), downsample.2 its BN;
 *   stem_conv without variant_c: pool_conv (3x3 s2, width -> width), pool_bn. */
typedef struct {
  int depth;       /* 18 or 34 (basic blocks), 50 (bottlenecks) */
  int in_channels; /* 0 = the image input's channels; otherwise must equal them */
  int num_classes; /* classifier outputs; 0 = 1000 */
  int width;       /* channels of layer1's 3x3 convs (x2 per stage, x4 out of a bottleneck); 0 = 64 */
  int variant_c;   /* stem of three 3x3 convs (width/2, width/2, width) instead of the 7x7 */
  int variant_d;   /* 2x2 avg-pool before a stride-1 1x1 shortcut conv, instead of a strided 1x1 */
  /* Strided 3x3 conv instead of the stem max-pool. With variant_c the third
   * stem conv takes the stride (the seed's "stem (3 convolutions)" of
   * ResUNet-72); without it a separate pool_conv is added. */
  int stem_conv;
  /* BlurPool (filter 3, stride 2) instead of the ResNet-D avg-pool; implies
   * variant_d's shortcut layout. When the stem keeps its max-pool (stem_conv
   * off), that becomes Zhang's anti-aliased max-pool too: max 3x3 stride 1,
   * then BlurPool stride 2, so every pooled down-sampling is low-passed. */
  int blurpool;
  int hardswish;          /* HardSwish instead of ReLU everywhere (decoder too) */
  int zero_init_residual; /* last BN of each block starts at gamma 0 (Bag of Tricks) */
} sp_resnet_config;

/* The encoder's feature maps for a U-Net, input H x W (multiples of 32). */
typedef struct {
  sp_value stem;     /* H/2: the stem's last activation at that resolution */
  sp_value layer[4]; /* layer1..layer4: H/4, H/8, H/16, H/32 */
} sp_resnet_stages;

/* Classifier: global avg-pool + fc -> logits [N, num_classes]. Convs start
 * with kaiming (fan_out) as torchvision; fc with PyTorch's default. */
sp_value sp_model_resnet(sp_graph *g, sp_value image, const sp_resnet_config *cfg);
/* The pooled features [N, channels of layer4] without fc (video heads). */
sp_value sp_model_resnet_features(sp_graph *g, sp_value image, const sp_resnet_config *cfg);
/* The stem and stage outputs, no pooling or fc (U-Net encoders). 0, or -1
 * with the graph's error set. */
int sp_model_resnet_encoder(sp_graph *g, sp_value image, const sp_resnet_config *cfg, sp_resnet_stages *out);

/* ---- ResUNet (src/models/resunet.c) --------------------------------------
 * encoder = ResNet stages; decoder = 5 stages ("decoder.0" deepest), each:
 * ConvTranspose2d k2 s2 ("up") + BN ("up_bn") + activation, concat with the
 * encoder map of that resolution (layer3, layer2, layer1, stem; none for the
 * last, H/2 -> H), then a bottleneck block ("block": 1x1 reduce to out/4, 3x3,
 * 1x1 expand, BN after each, projection "block.shortcut.0/.1" when channels
 * change); "head" 1x1 conv (bias) to K heatmaps at H x W, soft-argmax with
 * scale 1 -> points [N, K, 2] in input pixels (x, y). The heatmap logits
 * (pre-softmax) are also an auxiliary graph output named "heatmaps" [N, K, H, W]
 * (sp_graph_output_aux: frozen plans do not keep it). */
typedef struct {
  sp_resnet_config encoder; /* num_classes unused */
  int keypoints;
  /* Output channels of decoder stages 0..4; all 0 = defaults for the depth,
   * scaled by encoder.width / 64 (50: 512 256 128 64 32; 18/34: 256 128 64 32 32). */
  int decoder[5];
} sp_resunet_config;

/* Returns points [N, K, 2]; *heatmaps (may be NULL) gets the logits value. */
sp_value sp_model_resunet(sp_graph *g, sp_value image, const sp_resunet_config *cfg, sp_value *heatmaps);
/* The seed's ResUNet-72 encoder switches (C + D + stem_conv + BlurPool on a ResNet-50). */
sp_resunet_config sp_resunet50_default(int keypoints);

/* ---- registry (src/models/registry.c) ------------------------------------ */
/* A model by name, for the CLI and benchmarks. Zero-initialised fields mean
 * the named model as published; the switches are tri-state: 0 = the model's
 * default, 1 = on, -1 = off (resunet50 defaults to C, D, stem_conv and
 * BlurPool on, every other model to all off). */
typedef struct {
  const char *name;  /* sp_model_names() */
  int channels;      /* image channels (1 gray, 3 RGB) */
  int height, width; /* input size, multiples of 32 */
  int keypoints;     /* keypoint models; vgg-nose forces 1 */
  int num_classes;   /* resnet18/34/50 classifiers; 0 = 1000 */
  int base_width;    /* ResNet width (layer1's 3x3 channels); 0 = 64 */
  int variant_c, variant_d, stem_conv, blurpool, hardswish, zero_init_residual;
  /* Video models (tsn-*, tsm-*): frames per clip (0 = 8); TSM shift
   * fractions (0 = 1/8, negative = none). */
  int segments;
  float shift_back, shift_fwd;
} sp_model_spec;

/* Adds the model on `image` and returns its output (points [N,K,2] for the
 * keypoint models, logits [N,classes] for resnetNN), or -1 with the graph's
 * error set (unknown name: the message lists the known ones). */
sp_value sp_model_build(sp_graph *g, const sp_model_spec *spec, sp_value image);
/* Space-separated list of known model names. */
const char *sp_model_names(void);
/* Sets a spec field from a config key ("variant_c", "blurpool", ... booleans
 * true/false/on/off/yes/no/1/0; "base_width", "num_classes", "keypoints"
 * integers). 0, or -1 with sp_last_error() naming the key and the value. */
int sp_model_spec_set(sp_model_spec *spec, const char *key, const char *value);
/* Space-separated list of the keys sp_model_spec_set takes. */
const char *sp_model_spec_keys(void);

/* ---- video: TSN / TSM (src/models/tsn.c) ---------------------------------
 * Input: frames [N*T, C, H, W], the T frames of each clip consecutive.
 * Output: clip logits [N, num_classes], the average over each clip's frames
 * (mmaction's average consensus). Backbone: a torchvision ResNet-18/50
 * (same parameter names); TSM inserts sp_tshift(x, segments, shift_back,
 * shift_fwd) at the start of every residual branch, before its first conv
 * (residual shift), so the identity path keeps the unshifted frame. TSN and
 * TSM have exactly the same parameters; with shift on and both fractions 0,
 * TSM computes what TSN computes. Registry names: tsn-r18, tsn-r50, tsm-r18,
 * tsm-r50 (sp_model_spec.segments, shift_back, shift_fwd, num_classes). */
typedef struct {
  int depth; /* 18 or 50 */
  int width; /* layer1's channels; 0 = 64 */
  int num_classes;
  int segments;                /* T: frames per clip in the input batch */
  int shift;                   /* 1 = TSM (insert the shifts), 0 = TSN */
  float shift_back, shift_fwd; /* fraction of channels taken from frame t+1 / t-1 */
  float dropout;               /* before fc (mmaction uses 0.5 for TSM on Kinetics); 0 = none */
  int consensus_features;      /* 1 = average pooled features before fc instead of logits after */
} sp_tsn_config;

/* depth, segments and classes; tsm = 1 sets shift with 1/8 + 1/8. */
sp_tsn_config sp_tsn_config_default(int depth, int segments, int num_classes, int tsm);
sp_value sp_model_tsn(sp_graph *g, sp_value frames, const sp_tsn_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
