/* The seed's modified VGG11 keypoint regressor (see include/spry/models.h). */
#include "spry/models.h"

static sp_value conv_bn_relu(sp_graph *g, sp_value x, int stage, int block, int out_ch, int stride) {
  sp_graph_push_scope(g, "layers.%d.%d", stage, block);
  x = sp_conv2d(g, x, "conv", (sp_conv_args){.out_ch = out_ch, .kernel = 3, .stride = stride, .pad = 1});
  x = sp_batchnorm(g, x, "bn");
  x = sp_relu(g, x);
  sp_graph_pop_scope(g);
  return x;
}

sp_value sp_model_vgg(sp_graph *g, sp_value image, int height, int width, int keypoints) {
  static const int channels[5] = {8, 16, 32, 64, 128};
  static const int blocks[5] = {1, 1, 2, 2, 2};
  if (height % 32 || width % 32 || height <= 0 || width <= 0 || keypoints < 1)
    return sp_graph_fail(g, "vgg: input %dx%d must be a positive multiple of 32 and keypoints (%d) >= 1", height, width,
                         keypoints);
  sp_value x = image;
  for (int s = 0; s < 5; s++)
    for (int b = 0; b < blocks[s]; b++) x = conv_bn_relu(g, x, s, b, channels[s], b == 0 ? 2 : 1);
  int flat = channels[4] * (height / 32) * (width / 32);
  x = sp_flatten(g, x);
  x = sp_linear(g, x, "fc1", flat, 1024, 1);
  x = sp_batchnorm(g, x, "bn1");
  x = sp_relu(g, x);
  x = sp_linear(g, x, "fc2", 1024, keypoints * 2, 1);
  int64_t shape[3] = {0, keypoints, 2};
  return sp_reshape(g, x, 3, shape);
}
