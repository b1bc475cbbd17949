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

/* A model by name, for the CLI and benchmarks. */
typedef struct {
  const char *name; /* "vgg-face", "vgg-nose" */
  int channels;     /* image channels (1 gray, 3 RGB) */
  int height, width;
  int keypoints;    /* vgg-nose forces 1 */
} sp_model_spec;

/* Adds the model on `image` and returns its output (points [N,K,2] for the
 * keypoint models), or -1 with the graph's error set (unknown name: the
 * message lists the known ones). */
sp_value sp_model_build(sp_graph *g, const sp_model_spec *spec, sp_value image);
/* Space-separated list of known model names. */
const char *sp_model_names(void);

#ifdef __cplusplus
}
#endif
#endif
