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

#ifdef __cplusplus
}
#endif
#endif
