/* Builders: one call per op, registering parameters under PyTorch-style names
 * ("<scope>.<name>.weight") so checkpoints line up with torchvision modules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "ops/ops.h"

static int valid(sp_graph *g, sp_value x) { return x >= 0 && x < g->n_nodes; }

/* Channels of x, or a recorded error when a builder needs it and it is unknown. */
static int need_channels(sp_graph *g, sp_value x, const char *op, const char *name) {
  int c = g->nodes[x].channels;
  if (c <= 0) {
    char full[512];
    sp_graph_fail(g, "%s '%s': the channel count of its input '%s' is unknown at build time", op,
                  sp_graph_scoped(g, name, full, sizeof full), g->nodes[x].name);
  }
  return c;
}

static int param(sp_graph *g, const char *layer, const char *what, sp_shape s, sp_init init, int64_t fan,
                 unsigned flags) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", layer, what);
  return sp_graph_param(g, name, s, init, fan, flags);
}

static int or_one(int v) { return v ? v : 1; }

sp_value sp_conv2d(sp_graph *g, sp_value x, const char *name, sp_conv_args args) {
  const int out_ch = args.out_ch, kernel = args.kernel, stride = or_one(args.stride), pad = args.pad;
  const int dilation = or_one(args.dilation), groups = or_one(args.groups), bias = args.bias;
  if (!valid(g, x)) return -1;
  int in_ch = need_channels(g, x, "conv2d", name);
  if (in_ch <= 0) return -1;
  if (groups < 1 || in_ch % groups || out_ch % groups || kernel < 1 || stride < 1 || dilation < 1 || pad < 0)
    return sp_graph_fail(
        g, "conv2d '%s': bad arguments (in %d, out %d, kernel %d, stride %d, pad %d, dilation %d, groups %d)", name,
        in_ch, out_ch, kernel, stride, pad, dilation, groups);
  int64_t fan_in = (int64_t)(in_ch / groups) * kernel * kernel;
  int p[2];
  p[0] = param(g, name, "weight", sp_shape4(out_ch, in_ch / groups, kernel, kernel), SP_INIT_UNIFORM_FAN_IN, fan_in, 0);
  if (bias) p[1] = param(g, name, "bias", sp_shape1(out_ch), SP_INIT_UNIFORM_FAN_IN, fan_in, SP_PARAM_NO_DECAY);
  sp_conv2d_attr a = {stride, stride, pad, pad, dilation, dilation, groups};
  return sp_graph_node(g, &sp_op_conv2d, &a, sizeof a, name, 1, &x, bias ? 2 : 1, p, 0, NULL, out_ch);
}

sp_value sp_conv_transpose2d(sp_graph *g, sp_value x, const char *name, sp_deconv_args args) {
  const int out_ch = args.out_ch, kernel = args.kernel, stride = or_one(args.stride), pad = args.pad;
  const int out_pad = args.out_pad, bias = args.bias;
  if (!valid(g, x)) return -1;
  int in_ch = need_channels(g, x, "conv_transpose2d", name);
  if (in_ch <= 0) return -1;
  if (kernel < 1 || stride < 1 || pad < 0 || out_pad < 0 || out_pad >= stride)
    return sp_graph_fail(g, "conv_transpose2d '%s': bad arguments (kernel %d, stride %d, pad %d, out_pad %d)", name,
                         kernel, stride, pad, out_pad);
  /* PyTorch computes fan_in from weight.size(1) * k * k = out_ch * k * k. */
  int64_t fan_in = (int64_t)out_ch * kernel * kernel;
  int p[2];
  p[0] = param(g, name, "weight", sp_shape4(in_ch, out_ch, kernel, kernel), SP_INIT_UNIFORM_FAN_IN, fan_in, 0);
  if (bias) p[1] = param(g, name, "bias", sp_shape1(out_ch), SP_INIT_UNIFORM_FAN_IN, fan_in, SP_PARAM_NO_DECAY);
  sp_conv_transpose2d_attr a = {stride, stride, pad, pad, out_pad, out_pad, 1, 1, 1};
  return sp_graph_node(g, &sp_op_conv_transpose2d, &a, sizeof a, name, 1, &x, bias ? 2 : 1, p, 0, NULL, out_ch);
}

sp_value sp_linear(sp_graph *g, sp_value x, const char *name, int in_features, int out_features, int bias) {
  if (!valid(g, x)) return -1;
  if (in_features < 1 || out_features < 1)
    return sp_graph_fail(g, "linear '%s': bad sizes %d -> %d", name, in_features, out_features);
  int p[2];
  p[0] = param(g, name, "weight", sp_shape2(out_features, in_features), SP_INIT_UNIFORM_FAN_IN, in_features, 0);
  if (bias)
    p[1] = param(g, name, "bias", sp_shape1(out_features), SP_INIT_UNIFORM_FAN_IN, in_features, SP_PARAM_NO_DECAY);
  return sp_graph_node(g, &sp_op_linear, NULL, 0, name, 1, &x, bias ? 2 : 1, p, 0, NULL, out_features);
}

sp_value sp_batchnorm(sp_graph *g, sp_value x, const char *name) {
  if (!valid(g, x)) return -1;
  int c = need_channels(g, x, "batchnorm", name);
  if (c <= 0) return -1;
  int p[2], s[2];
  p[0] = param(g, name, "weight", sp_shape1(c), SP_INIT_ONE, 0, SP_PARAM_NO_DECAY);
  p[1] = param(g, name, "bias", sp_shape1(c), SP_INIT_ZERO, 0, SP_PARAM_NO_DECAY);
  s[0] = param(g, name, "running_mean", sp_shape1(c), SP_INIT_ZERO, 0, SP_PARAM_BUFFER | SP_PARAM_NO_DECAY);
  s[1] = param(g, name, "running_var", sp_shape1(c), SP_INIT_ONE, 0, SP_PARAM_BUFFER | SP_PARAM_NO_DECAY);
  sp_batchnorm_attr a = {1e-5f, 0.1f};
  return sp_graph_node(g, &sp_op_batchnorm, &a, sizeof a, name, 1, &x, 2, p, 2, s, c);
}

int sp_graph_sync_batchnorm(sp_graph *g, void (*sum)(void *user, double *x, int n), void *user) {
  int changed = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    sp_node *nd = &g->nodes[i];
    if (nd->op != &sp_op_batchnorm && nd->op != &sp_op_batchnorm_sync) continue;
    sp_batchnorm_sync_attr *a = sp_xcalloc(1, sizeof *a);
    a->bn = nd->op == &sp_op_batchnorm ? *(const sp_batchnorm_attr *)nd->attr
                                       : ((const sp_batchnorm_sync_attr *)nd->attr)->bn;
    a->sum = sum;
    a->sum_user = user;
    free(nd->attr);
    nd->attr = a;
    /* A distinct op, so fast backends that do not know it run its reference. */
    nd->op = &sp_op_batchnorm_sync;
    changed++;
  }
  return changed;
}

static sp_value unary(sp_graph *g, sp_value x, const sp_op_def *op, const void *attr, size_t attr_size) {
  if (!valid(g, x)) return -1;
  return sp_graph_node(g, op, attr, attr_size, NULL, 1, &x, 0, NULL, 0, NULL, g->nodes[x].channels);
}

sp_value sp_relu(sp_graph *g, sp_value x) { return unary(g, x, &sp_op_relu, NULL, 0); }
sp_value sp_hardswish(sp_graph *g, sp_value x) { return unary(g, x, &sp_op_hardswish, NULL, 0); }

sp_value sp_dropout(sp_graph *g, sp_value x, float p) {
  if (!(p >= 0 && p < 1)) return sp_graph_fail(g, "dropout: p = %g is outside [0, 1)", p);
  sp_dropout_attr a = {p};
  return unary(g, x, &sp_op_dropout, &a, sizeof a);
}

static sp_pool2d_attr pool_attr(sp_pool_args p) {
  const int stride = or_one(p.stride);
  sp_pool2d_attr a = {p.kernel, p.kernel, stride, stride, p.pad, p.pad, !p.exclude_pad, p.ceil_mode};
  return a;
}

sp_value sp_maxpool2d(sp_graph *g, sp_value x, sp_pool_args p) {
  sp_pool2d_attr a = pool_attr(p);
  return unary(g, x, &sp_op_maxpool2d, &a, sizeof a);
}

sp_value sp_avgpool2d(sp_graph *g, sp_value x, sp_pool_args p) {
  sp_pool2d_attr a = pool_attr(p);
  return unary(g, x, &sp_op_avgpool2d, &a, sizeof a);
}

sp_value sp_global_avgpool(sp_graph *g, sp_value x) { return unary(g, x, &sp_op_global_avgpool, NULL, 0); }

sp_value sp_blurpool(sp_graph *g, sp_value x, int filter_size, int stride) {
  sp_blurpool_attr a = {filter_size, stride};
  return unary(g, x, &sp_op_blurpool, &a, sizeof a);
}

sp_value sp_upsample(sp_graph *g, sp_value x, int scale, int bilinear) {
  sp_upsample_attr a = {scale, bilinear};
  return unary(g, x, &sp_op_upsample, &a, sizeof a);
}

sp_value sp_add(sp_graph *g, sp_value a, sp_value b) {
  if (!valid(g, a) || !valid(g, b)) return -1;
  sp_value in[2] = {a, b};
  return sp_graph_node(g, &sp_op_add, NULL, 0, NULL, 2, in, 0, NULL, 0, NULL, g->nodes[a].channels);
}

sp_value sp_concat(sp_graph *g, int n, const sp_value *xs) {
  int c = 0;
  for (int i = 0; i < n; i++) {
    if (!valid(g, xs[i])) return -1;
    c = (c < 0 || g->nodes[xs[i]].channels < 0) ? -1 : c + g->nodes[xs[i]].channels;
  }
  return sp_graph_node(g, &sp_op_concat, NULL, 0, NULL, n, xs, 0, NULL, 0, NULL, c);
}

sp_value sp_reshape(sp_graph *g, sp_value x, int ndim, const int64_t *dims) {
  if (!valid(g, x)) return -1;
  if (ndim < 1 || ndim > SP_MAX_DIMS) return sp_graph_fail(g, "reshape: %d dimensions", ndim);
  sp_reshape_attr a = {ndim, {0}};
  for (int i = 0; i < ndim; i++) a.d[i] = dims[i];
  int c = ndim > 1 ? (dims[1] > 0 ? (int)dims[1] : (dims[1] == 0 ? g->nodes[x].channels : -1)) : -1;
  return sp_graph_node(g, &sp_op_reshape, &a, sizeof a, NULL, 1, &x, 0, NULL, 0, NULL, c);
}

sp_value sp_flatten(sp_graph *g, sp_value x) {
  int64_t d[2] = {0, -1};
  return sp_reshape(g, x, 2, d);
}

sp_value sp_softargmax(sp_graph *g, sp_value heatmaps, float scale) {
  sp_softargmax_attr a = {scale};
  return unary(g, heatmaps, &sp_op_softargmax, &a, sizeof a);
}

sp_value sp_spatial_softmax(sp_graph *g, sp_value heatmaps) {
  return unary(g, heatmaps, &sp_op_spatial_softmax, NULL, 0);
}

sp_value sp_tshift(sp_graph *g, sp_value x, int segments, float ratio_back, float ratio_fwd) {
  if (segments < 1 || ratio_back < 0 || ratio_fwd < 0 || ratio_back + ratio_fwd > 1)
    return sp_graph_fail(g, "tshift: bad segments %d or ratios %g/%g", segments, ratio_back, ratio_fwd);
  sp_tshift_attr a = {segments, ratio_back, ratio_fwd};
  return unary(g, x, &sp_op_tshift, &a, sizeof a);
}

static sp_value loss2(sp_graph *g, const sp_op_def *op, sp_value p, sp_value t, const void *attr, size_t size) {
  if (!valid(g, p) || !valid(g, t)) return -1;
  sp_value in[2] = {p, t};
  return sp_graph_node(g, op, attr, size, NULL, 2, in, 0, NULL, 0, NULL, 1);
}

sp_value sp_l1_loss(sp_graph *g, sp_value p, sp_value t) { return loss2(g, &sp_op_l1_loss, p, t, NULL, 0); }
sp_value sp_mse_loss(sp_graph *g, sp_value p, sp_value t) { return loss2(g, &sp_op_mse_loss, p, t, NULL, 0); }

sp_value sp_l2_loss(sp_graph *g, sp_value p, sp_value t) {
  sp_point_loss_attr a = {0, 1e-8f};
  return loss2(g, &sp_op_point_loss, p, t, &a, sizeof a);
}

sp_value sp_euclidean_loss(sp_graph *g, sp_value p, sp_value t) {
  sp_point_loss_attr a = {1, 1e-8f};
  return loss2(g, &sp_op_point_loss, p, t, &a, sizeof a);
}

sp_value sp_structure_loss(sp_graph *g, sp_value p, sp_value t, int n_points, int n_neighbours,
                           const int32_t *neighbours) {
  if (n_points < 2 || n_neighbours < 1 || n_neighbours >= n_points || !neighbours)
    return sp_graph_fail(g, "structure loss: bad neighbour table (%d points, %d neighbours)", n_points, n_neighbours);
  sp_structure_loss_attr a = {n_points, n_neighbours, neighbours};
  return loss2(g, &sp_op_structure_loss, p, t, &a, sizeof a);
}

sp_value sp_cross_entropy(sp_graph *g, sp_value logits, sp_value labels) {
  return loss2(g, &sp_op_cross_entropy, logits, labels, NULL, 0);
}
