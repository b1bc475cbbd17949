/* TSN and TSM (src/models/tsn.c): a 2-D ResNet run on every frame of a clip,
 * then the average consensus over the clip's frames.
 *
 * TSM differs from TSN only by a temporal shift at the start of each residual
 * branch ("residual shift", Lin et al. 2019): the shortcut keeps the frame's
 * own features, so the shift adds temporal context without destroying the
 * spatial features the identity path carries. The ResNet here is written out
 * rather than taken from resnet.c because the shift must sit inside the
 * block, between the block input and its first conv; the parameter names are
 * torchvision's (conv1, layer1.0.conv1, layer2.0.downsample.0, fc), so
 * ImageNet weights load by name, and TSN and TSM have the same parameters. */
#include <math.h>
#include <string.h>

#include "models/models_internal.h"
#include "ops/ops.h"

static sp_value conv_bn(sp_graph *g, sp_value x, const char *conv, const char *bn, int out, int k, int stride) {
  return sp_batchnorm(
      g, sp_conv2d(g, x, conv, (sp_conv_args){.out_ch = out, .kernel = k, .stride = stride, .pad = k / 2}), bn);
}

/* The branch input: the shifted frames for TSM, the block input for TSN. */
static sp_value branch_input(sp_graph *g, const sp_tsn_config *c, sp_value x) {
  return c->shift ? sp_tshift(g, x, c->segments, c->shift_back, c->shift_fwd) : x;
}

static sp_value block(sp_graph *g, const sp_tsn_config *c, sp_value x, int planes, int stride) {
  int in = sp_graph_channels(g, x), bottleneck = c->depth == 50, out = bottleneck ? planes * 4 : planes;
  sp_value y = branch_input(g, c, x);
  if (bottleneck) {
    y = sp_relu(g, conv_bn(g, y, "conv1", "bn1", planes, 1, 1));
    y = sp_relu(g, conv_bn(g, y, "conv2", "bn2", planes, 3, stride));
    y = conv_bn(g, y, "conv3", "bn3", out, 1, 1);
  } else {
    y = sp_relu(g, conv_bn(g, y, "conv1", "bn1", planes, 3, stride));
    y = conv_bn(g, y, "conv2", "bn2", planes, 3, 1);
  }
  sp_value s = (stride != 1 || in != out) ? conv_bn(g, x, "downsample.0", "downsample.1", out, 1, stride) : x;
  return sp_relu(g, sp_add(g, y, s));
}

/* Mean over the T consecutive rows of each clip: [N*T, K] -> [N, K], as an
 * average pool of a T x 1 window over [N, 1, T, K] (no new op needed). */
static sp_value consensus(sp_graph *g, sp_value x, int t, int k) {
  if (t == 1) return x;
  int64_t d4[4] = {-1, 1, t, k}, d2[2] = {-1, k};
  x = sp_reshape(g, x, 4, d4);
  sp_pool2d_attr a = {.kernel_h = t, .kernel_w = 1, .stride_h = t, .stride_w = 1, .count_include_pad = 1};
  x = sp_graph_node(g, &sp_op_avgpool2d, &a, sizeof a, "consensus", 1, &x, 0, NULL, 0, NULL, 1);
  return sp_reshape(g, x, 2, d2);
}

sp_value sp_model_tsn(sp_graph *g, sp_value frames, const sp_tsn_config *cfg) {
  sp_tsn_config c = *cfg;
  if (frames < 0) return -1;
  if (c.depth != 18 && c.depth != 50) return sp_graph_fail(g, "tsn: depth %d is not 18 or 50", c.depth);
  if (c.segments < 1) return sp_graph_fail(g, "tsn: segments %d < 1", c.segments);
  if (c.num_classes < 1) return sp_graph_fail(g, "tsn: num_classes %d < 1", c.num_classes);
  if (c.width == 0) c.width = 64;
  if (c.width < 1) return sp_graph_fail(g, "tsn: width %d < 1", c.width);
  if (!(c.shift_back >= 0 && c.shift_fwd >= 0 && c.shift_back + c.shift_fwd <= 1))
    return sp_graph_fail(g, "tsm: shift fractions back %g + forward %g must be >= 0 and sum to at most 1",
                         (double)c.shift_back, (double)c.shift_fwd);
  if (!(c.dropout >= 0 && c.dropout < 1)) return sp_graph_fail(g, "tsn: dropout %g outside [0, 1)", (double)c.dropout);
  static const int b18[4] = {2, 2, 2, 2}, b50[4] = {3, 4, 6, 3};
  const int *blocks = c.depth == 50 ? b50 : b18;
  int first = sp_graph_param_count(g);
  sp_value x = sp_conv2d(g, frames, "conv1", (sp_conv_args){.out_ch = c.width, .kernel = 7, .stride = 2, .pad = 3});
  x = sp_maxpool2d(g, sp_relu(g, sp_batchnorm(g, x, "bn1")), (sp_pool_args){.kernel = 3, .stride = 2, .pad = 1});
  for (int s = 0; s < 4; s++)
    for (int b = 0; b < blocks[s]; b++) {
      sp_graph_push_scope(g, "layer%d.%d", s + 1, b);
      x = block(g, &c, x, c.width << s, b == 0 && s > 0 ? 2 : 1);
      sp_graph_pop_scope(g);
    }
  sp_models_kaiming_fan_out(g, first, sp_graph_param_count(g));
  int features = (c.width << 3) * (c.depth == 50 ? 4 : 1);
  x = sp_flatten(g, sp_global_avgpool(g, x));
  if (c.dropout > 0) x = sp_dropout(g, x, c.dropout);
  if (c.consensus_features) {
    /* Average the pooled features, then one fc per clip (same result as
     * averaging logits, since fc is linear, but T times fewer fc FLOPs). */
    return sp_linear(g, consensus(g, x, c.segments, features), "fc", features, c.num_classes, 1);
  }
  x = sp_linear(g, x, "fc", features, c.num_classes, 1);
  return consensus(g, x, c.segments, c.num_classes);
}

sp_tsn_config sp_tsn_config_default(int depth, int segments, int num_classes, int tsm) {
  sp_tsn_config c;
  memset(&c, 0, sizeof c);
  c.depth = depth;
  c.segments = segments;
  c.num_classes = num_classes;
  c.shift = tsm;
  /* TSM's published setting: 1/8 of the channels from each neighbour. */
  c.shift_back = tsm ? 0.125f : 0.0f;
  c.shift_fwd = tsm ? 0.125f : 0.0f;
  return c;
}
