/* Every op the cpu backend runs on oneDNN (and a few it adapts) against the
 * ref backend, in f32, through small plans: x -> conv -> op -> conv -> y, so
 * the op sees a blocked input and its gradient flows back into a conv. */
#include <math.h>
#include "backend_compare.h"

static sp_value pre(sp_graph *g, sp_value x, int c) {
  return sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = c, .kernel = 3, .pad = 1});
}
static sp_value post(sp_graph *g, sp_value x, int c) {
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = c, .kernel = 1, .bias = 1});
}

static sp_value b_conv3(sp_graph *g, sp_value x) {
  return sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1});
}
static sp_value b_conv_s2(sp_graph *g, sp_value x) {
  return post(
      g, sp_conv2d(g, pre(g, x, 8), "c", (sp_conv_args){.out_ch = 24, .kernel = 3, .stride = 2, .pad = 1, .bias = 1}),
      5);
}
static sp_value b_conv_groups(sp_graph *g, sp_value x) {
  return post(g, sp_conv2d(g, pre(g, x, 8), "c", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1, .groups = 2}), 4);
}
static sp_value b_conv_dil(sp_graph *g, sp_value x) {
  return post(g, sp_conv2d(g, pre(g, x, 16), "c", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 2, .dilation = 2}),
              4);
}
static sp_value b_conv_stem(sp_graph *g, sp_value x) {
  return post(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 32, .kernel = 7, .stride = 2, .pad = 3}), 3);
}
static sp_value b_conv_floor(sp_graph *g, sp_value x) {
  return post(g, sp_conv2d(g, pre(g, x, 16), "c", (sp_conv_args){.out_ch = 32, .kernel = 1, .stride = 2}), 3);
}
static sp_value b_deconv(sp_graph *g, sp_value x) {
  return post(g, sp_conv_transpose2d(g, pre(g, x, 16), "d", (sp_deconv_args){.out_ch = 16, .kernel = 2, .stride = 2}),
              3);
}
static sp_value b_deconv_pad(sp_graph *g, sp_value x) {
  return post(
      g,
      sp_conv_transpose2d(g, pre(g, x, 16), "d",
                          (sp_deconv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1, .out_pad = 1, .bias = 1}),
      3);
}
static sp_value b_bn(sp_graph *g, sp_value x) { return post(g, sp_batchnorm(g, pre(g, x, 16), "bn"), 4); }
static sp_value b_bn_relu(sp_graph *g, sp_value x) {
  return post(g, sp_relu(g, sp_batchnorm(g, pre(g, x, 8), "bn")), 4);
}
static sp_value b_relu(sp_graph *g, sp_value x) { return post(g, sp_relu(g, pre(g, x, 16)), 4); }
static sp_value b_maxpool(sp_graph *g, sp_value x) {
  return post(g, sp_maxpool2d(g, pre(g, x, 16), (sp_pool_args){.kernel = 3, .stride = 2, .pad = 1}), 4);
}
static sp_value b_maxpool_ceil(sp_graph *g, sp_value x) {
  sp_pool2d_attr a = {2, 2, 2, 2, 0, 0, 1, 1};
  x = pre(g, x, 16);
  return post(g, sp_graph_node(g, &sp_op_maxpool2d, &a, sizeof a, "mp", 1, &x, 0, NULL, 0, NULL, 16), 4);
}
static sp_value b_avgpool(sp_graph *g, sp_value x) {
  return post(g, sp_avgpool2d(g, pre(g, x, 16), (sp_pool_args){.kernel = 2, .stride = 2}), 4);
}
static sp_value b_avgpool_excl(sp_graph *g, sp_value x) {
  return post(g, sp_avgpool2d(g, pre(g, x, 16), (sp_pool_args){.kernel = 3, .pad = 1, .exclude_pad = 1}), 4);
}
static sp_value b_avgpool_ceil(sp_graph *g, sp_value x) {
  return post(g, sp_avgpool2d(g, pre(g, x, 16), (sp_pool_args){.kernel = 2, .stride = 2, .ceil_mode = 1}), 4);
}
static sp_value b_gap_linear(sp_graph *g, sp_value x) {
  x = sp_flatten(g, sp_global_avgpool(g, pre(g, x, 32)));
  return sp_linear(g, x, "fc", 32, 10, 1);
}
static sp_value b_linear_bn(sp_graph *g, sp_value x) {
  x = sp_linear(g, sp_flatten(g, pre(g, x, 8)), "fc1", 8 * 6 * 6, 64, 1);
  return sp_linear(g, sp_relu(g, sp_batchnorm(g, x, "bn1")), "fc2", 64, 6, 1);
}
/* One input, two linears: the second one's input gradient adds to the
 * first's (not fresh), without bias. */
static sp_value b_linear_shared_input(sp_graph *g, sp_value x) {
  x = sp_flatten(g, pre(g, x, 8));
  return sp_add(g, sp_linear(g, x, "fa", 8 * 5 * 5, 7, 1), sp_linear(g, x, "fb", 8 * 5 * 5, 7, 0));
}
static sp_value b_up_nearest(sp_graph *g, sp_value x) { return post(g, sp_upsample(g, pre(g, x, 16), 2, 0), 3); }
static sp_value b_up_bilinear(sp_graph *g, sp_value x) { return post(g, sp_upsample(g, pre(g, x, 16), 2, 1), 3); }
static sp_value b_add(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  return post(g, sp_add(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}), x), 4);
}
static sp_value b_add_self(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  return post(g, sp_add(g, x, x), 4);
}
static sp_value b_concat(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  sp_value parts[3] = {sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 16, .kernel = 1}), x,
                       sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1})};
  return post(g, sp_concat(g, 3, parts), 4);
}
static sp_value b_concat_odd(sp_graph *g, sp_value x) {
  x = pre(g, x, 8);
  sp_value parts[2] = {sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 5, .kernel = 1}), x};
  return post(g, sp_concat(g, 2, parts), 4);
}
/* x is concatenated and also added after the concat: backward reaches the
 * add first, so the concat adds its part of x's gradient onto the add's. */
static sp_value b_concat_adds(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  sp_value parts[2] = {sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 16, .kernel = 1}), x};
  sp_value y = sp_conv2d(g, sp_concat(g, 2, parts), "c", (sp_conv_args){.out_ch = 16, .kernel = 1});
  return post(g, sp_add(g, y, x), 4);
}
/* Ops that run the reference kernel after a reorder to plain. */
static sp_value b_adapted(sp_graph *g, sp_value x) {
  x = sp_hardswish(g, pre(g, x, 16));
  x = sp_blurpool(g, x, 3, 2);
  return post(g, sp_tshift(g, x, 2, 0.125f, 0.125f), 4);
}

/* The temporal shift in the blocked layout (backends/cpu/tshift.c). With a
 * shortcut, as in TSM's residual block, the add writes x's gradient first
 * and the shift accumulates into it; without, the shift writes it fresh. */
static sp_value tsm_residual(sp_graph *g, sp_value x, int c, int segments, float ratio) {
  x = pre(g, x, c);
  sp_value y =
      sp_conv2d(g, sp_tshift(g, x, segments, ratio, ratio), "c", (sp_conv_args){.out_ch = c, .kernel = 3, .pad = 1});
  return post(g, sp_add(g, y, x), 4);
}
/* Folds of 2 channels: the first 16-channel block mixes three sources. */
static sp_value b_tshift_lanes(sp_graph *g, sp_value x) { return tsm_residual(g, x, 16, 2, 0.125f); }
/* Folds of 16 channels: whole blocks move. */
static sp_value b_tshift_blocks(sp_graph *g, sp_value x) { return tsm_residual(g, x, 64, 4, 0.25f); }
/* 20 channels: padding lanes in the second block stay zero. */
static sp_value b_tshift_padded(sp_graph *g, sp_value x) { return tsm_residual(g, x, 20, 4, 0.125f); }
static sp_value b_tshift_fresh(sp_graph *g, sp_value x) {
  return post(g, sp_tshift(g, pre(g, x, 16), 4, 0.25f, 0.125f), 4);
}

/* Soft-argmax in the conv's layout (backends/cpu/softargmax.c): 16 heatmaps
 * (one block), 20 (padding lanes in the second block), and after an
 * adapted op (hardswish's reference kernel writes plain). The scale maps columns to pixels as the keypoint heads do. */
static sp_value b_softargmax16(sp_graph *g, sp_value x) { return sp_softargmax(g, pre(g, x, 16), 4.0f); }
static sp_value b_softargmax_padded(sp_graph *g, sp_value x) { return sp_softargmax(g, pre(g, x, 20), 1.0f); }
static sp_value b_softargmax_plain(sp_graph *g, sp_value x) {
  return sp_softargmax(g, sp_hardswish(g, pre(g, x, 5)), 2.0f);
}
/* Its gradient flows into a shortcut too (accumulating, not overwriting). */
static sp_value b_softargmax_shared(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  sp_value y = sp_softargmax(g, x, 1.0f),
           z = sp_softargmax(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 16, .kernel = 1}), 1.0f);
  return sp_add(g, y, z);
}

/* BlurPool in the conv's layout (backends/cpu/blurpool.c): one block with
 * odd sizes (reflection at both edges), 20 channels (padding lanes), an even
 * filter (asymmetric padding) at stride 1, and a gradient that also flows
 * through a shortcut (accumulated, not overwritten). */
static sp_value b_blurpool16(sp_graph *g, sp_value x) { return post(g, sp_blurpool(g, pre(g, x, 16), 3, 2), 4); }
static sp_value b_blurpool_padded(sp_graph *g, sp_value x) { return post(g, sp_blurpool(g, pre(g, x, 20), 5, 2), 4); }
static sp_value b_blurpool_even(sp_graph *g, sp_value x) { return post(g, sp_blurpool(g, pre(g, x, 16), 4, 1), 4); }
static sp_value b_blurpool_shared(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  return post(g, sp_add(g, sp_blurpool(g, x, 3, 1), x), 4);
}

/* add + relu as one node (backends/cpu/add_relu.c): a residual block's end
 * (x's gradient accumulates onto the conv branch's), the same input twice,
 * and 20 channels (padding lanes). */
static sp_value b_add_relu(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  return post(g, sp_relu(g, sp_add(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}), x)),
              4);
}
static sp_value b_add_relu_self(sp_graph *g, sp_value x) {
  x = pre(g, x, 16);
  return post(g, sp_relu(g, sp_add(g, x, x)), 4);
}
static sp_value b_add_relu_padded(sp_graph *g, sp_value x) {
  x = pre(g, x, 20);
  return post(g, sp_relu(g, sp_add(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 20, .kernel = 1}), x)), 4);
}

/* The ops the cpu backend runs through the adapter (the reference behind a
 * reorder to plain), each in a graph of its own so every op of src/ops has a
 * cpu-vs-ref case in training and inference, f32 and bf16 (the op coverage
 * test, tests/ops/test_coverage.c, reads these names). The losses feed the
 * harness's MSE as a [1] output; their targets come from a second branch. */
static sp_value points_of(sp_graph *g, sp_value x, const char *name) {
  int64_t dims[3] = {-1, 6, 2};
  return sp_reshape(
      g,
      sp_flatten(g, sp_global_avgpool(g, sp_conv2d(g, x, name, (sp_conv_args){.out_ch = 12, .kernel = 3, .pad = 1}))),
      3, dims);
}
static sp_value b_hardswish(sp_graph *g, sp_value x) { return post(g, sp_hardswish(g, pre(g, x, 16)), 4); }
static sp_value b_dropout(sp_graph *g, sp_value x) { return post(g, sp_dropout(g, pre(g, x, 16), 0.25f), 4); }
static sp_value b_reshape(sp_graph *g, sp_value x) {
  int64_t flat[2] = {-1, 8 * 6 * 6};
  return sp_linear(g, sp_reshape(g, pre(g, x, 8), 2, flat), "fc", 8 * 6 * 6, 5, 1);
}
/* A reshape's input gradient added onto another reader's (the blocked
 * conv output is read by the reshape and by a pooling). */
static sp_value b_reshape_shared_input(sp_graph *g, sp_value x) {
  int64_t flat[2] = {-1, 8 * 6 * 6};
  x = pre(g, x, 8);
  sp_value a = sp_linear(g, sp_reshape(g, x, 2, flat), "fa", 8 * 6 * 6, 5, 1);
  return sp_add(g, a, sp_linear(g, sp_flatten(g, sp_global_avgpool(g, x)), "fb", 8, 5, 1));
}
static sp_value b_spatial_softmax(sp_graph *g, sp_value x) { return post(g, sp_spatial_softmax(g, pre(g, x, 4)), 3); }
static sp_value b_l1_loss(sp_graph *g, sp_value x) {
  x = pre(g, x, 8);
  return sp_l1_loss(g, points_of(g, x, "p"), points_of(g, x, "t"));
}
static sp_value b_mse_loss(sp_graph *g, sp_value x) {
  x = pre(g, x, 8);
  return sp_mse_loss(g, points_of(g, x, "p"), points_of(g, x, "t"));
}
static sp_value b_l2_loss(sp_graph *g, sp_value x) {
  x = pre(g, x, 8);
  return sp_l2_loss(g, points_of(g, x, "p"), points_of(g, x, "t"));
}
static sp_value b_euclidean_loss(sp_graph *g, sp_value x) {
  x = pre(g, x, 8);
  return sp_euclidean_loss(g, points_of(g, x, "p"), points_of(g, x, "t"));
}
static const int32_t ring_neighbours[12] = {1, 5, 2, 0, 3, 1, 4, 2, 5, 3, 0, 4}; /* 6 points, 2 each */
static sp_value b_structure_loss(sp_graph *g, sp_value x) {
  x = pre(g, x, 8);
  return sp_structure_loss(g, points_of(g, x, "p"), points_of(g, x, "t"), 6, 2, ring_neighbours);
}
static sp_value b_cross_entropy(sp_graph *g, sp_value x) {
  x = sp_flatten(g, sp_global_avgpool(g, pre(g, x, 8)));
  sp_value logits = sp_linear(g, x, "fc", 8, 5, 1);
  return sp_cross_entropy(g, logits, sp_graph_input(g, "labels", SP_I32, -1));
}
/* Synchronised batch norm in a world of one (the sum over ranks is the
 * identity): the batch norm node made into one after the graph is built. */
static void sum_identity(void *user, double *x, int n) { (void)user, (void)x, (void)n; }
static sp_value b_bn_sync(sp_graph *g, sp_value x) {
  sp_value y = post(g, sp_batchnorm(g, pre(g, x, 16), "bn"), 4);
  if (sp_graph_sync_batchnorm(g, sum_identity, NULL) != 1) fail_msg("no batchnorm node became synchronised");
  return y;
}

/* bf16 keeps 8 bits of mantissa (2^-9 relative rounding per value). Reviewed
 * tolerance, relative L2 error per tensor: 6e-2. Measured (x -> conv -> op ->
 * conv, forward and backward) 0.2% .. 3% for most ops; 4.9% for relu, where a
 * pre-activation whose sign differs under bf16 conv rounding flips the mask. */
#define BF16_TOL 6e-2

#define CASE(name, body, n, c, h, w) CASE_CLASSES(name, body, n, c, h, w, 0)
#define CASE_CLASSES(name, body, n, c, h, w, classes)         \
  static void name(void **s) {                                \
    (void)s;                                                  \
    cmp_require_cpu();                                        \
    cmp_case k = {#name, body, n, c, h, w, 1, 0, 0, classes}; \
    cmp_run(&k);                                              \
    k.training = 0;                                           \
    cmp_run(&k);                                              \
    k.flags = SP_PLAN_BF16;                                   \
    k.tol = BF16_TOL;                                         \
    cmp_run(&k);                                              \
    k.training = 1;                                           \
    cmp_run(&k);                                              \
  }

CASE(conv3x3, b_conv3, 2, 3, 9, 11)
CASE(conv_stride2_bias, b_conv_s2, 2, 3, 10, 10)
CASE(conv_groups, b_conv_groups, 2, 3, 8, 8)
CASE(conv_dilation, b_conv_dil, 2, 3, 9, 9)
CASE(conv_stem7x7, b_conv_stem, 2, 3, 20, 20)
CASE(conv_floor_drops_rows, b_conv_floor, 2, 3, 9, 9)
CASE(deconv_k2s2, b_deconv, 2, 3, 6, 6)
CASE(deconv_out_pad, b_deconv_pad, 2, 3, 5, 5)
CASE(batchnorm, b_bn, 4, 3, 6, 6)
CASE(batchnorm_relu, b_bn_relu, 4, 3, 6, 6)
CASE(relu, b_relu, 2, 3, 7, 7)
CASE(maxpool, b_maxpool, 2, 3, 9, 9)
CASE(maxpool_ceil, b_maxpool_ceil, 2, 3, 9, 9)
CASE(avgpool, b_avgpool, 2, 3, 8, 8)
CASE(avgpool_exclude_pad, b_avgpool_excl, 2, 3, 7, 7)
CASE(avgpool_ceil, b_avgpool_ceil, 2, 3, 9, 9)
CASE(global_avgpool_linear, b_gap_linear, 3, 3, 7, 7)
CASE(linear_bn1d, b_linear_bn, 8, 3, 6, 6)
CASE(linear_shared_input, b_linear_shared_input, 3, 3, 5, 5)
CASE(upsample_nearest, b_up_nearest, 2, 3, 5, 6)
CASE(upsample_bilinear, b_up_bilinear, 2, 3, 5, 6)
CASE(add, b_add, 2, 3, 6, 6)
CASE(add_same_input, b_add_self, 2, 3, 6, 6)
CASE(concat, b_concat, 2, 3, 6, 6)
CASE(concat_unaligned, b_concat_odd, 2, 3, 6, 6)
CASE(concat_adds_gradient, b_concat_adds, 2, 3, 6, 6)
CASE(adapted_ref_ops, b_adapted, 4, 3, 8, 8)
CASE(tshift_lanes, b_tshift_lanes, 4, 3, 5, 6)
CASE(tshift_blocks, b_tshift_blocks, 8, 3, 5, 5)
CASE(tshift_padded, b_tshift_padded, 8, 3, 4, 5)
CASE(tshift_fresh, b_tshift_fresh, 8, 3, 5, 5)
CASE(softargmax_block, b_softargmax16, 2, 3, 9, 11)
CASE(blurpool_block, b_blurpool16, 2, 3, 9, 11)
CASE(add_relu, b_add_relu, 2, 3, 6, 7)
CASE(add_relu_same_input, b_add_relu_self, 2, 3, 5, 6)
CASE(add_relu_padded, b_add_relu_padded, 2, 3, 5, 5)
CASE(add_relu_tail, b_add_relu_padded, 1, 3, 3, 3) /* 180 values channels-last: not a whole number of vectors */
CASE(blurpool_padded, b_blurpool_padded, 2, 3, 8, 7)
CASE(blurpool_even_filter, b_blurpool_even, 2, 3, 6, 7)
CASE(blurpool_shared_input, b_blurpool_shared, 2, 3, 7, 6)
CASE(softargmax_padded, b_softargmax_padded, 2, 3, 7, 6)
CASE(softargmax_plain, b_softargmax_plain, 2, 5, 12, 13)
CASE(softargmax_shared_input, b_softargmax_shared, 2, 3, 6, 7)
CASE(hardswish, b_hardswish, 2, 3, 6, 7)
CASE(dropout, b_dropout, 2, 3, 6, 6)
CASE(reshape, b_reshape, 2, 3, 6, 6)
CASE(reshape_shared_input, b_reshape_shared_input, 2, 3, 6, 6)
CASE(spatial_softmax, b_spatial_softmax, 2, 3, 5, 6)
CASE(l1_loss, b_l1_loss, 3, 3, 6, 6)
CASE(mse_loss, b_mse_loss, 3, 3, 6, 6)
CASE(l2_loss, b_l2_loss, 3, 3, 6, 6)
CASE(euclidean_loss, b_euclidean_loss, 3, 3, 6, 6)
CASE(structure_loss, b_structure_loss, 3, 3, 6, 6)
CASE_CLASSES(cross_entropy, b_cross_entropy, 4, 3, 6, 6, 5)
CASE(batchnorm_sync, b_bn_sync, 4, 3, 6, 6)

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* The shift runs in the convolutions' layout (blocked, plain or channels-last;
 * f32 and bf16), not
 * behind the adapter's reorder to plain: its output keeps the input's layout
 * and it needs no scratch. */
/* The same cases with every fresh output written by non-temporal stores
 * (what tensors of 16 MB and more take). */
static void tshift_streamed(void **s) {
  size_t keep = cpu_tshift_stream_min_bytes;
  cpu_tshift_stream_min_bytes = 0;
  tshift_lanes(s), tshift_blocks(s), tshift_padded(s), tshift_fresh(s);
  cpu_tshift_stream_min_bytes = keep;
}

static void tshift_keeps_blocked_layout(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_data_type_t types[2] = {dnnl_f32, dnnl_bf16};
  const dnnl_format_tag_t tags[4] = {dnnl_aBcd16b, dnnl_aBcd8b, dnnl_abcd, dnnl_acdb};
  for (int ti = 0; ti < 2; ti++)
    for (int gi = 0; gi < 4; gi++) {
      sp_tshift_attr at = {4, 0.125f, 0.125f};
      dnnl_memory_desc_t md;
      dnnl_dims_t dims = {8, 20, 5, 6};
      assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, types[ti], tags[gi]), dnnl_success);
      sp_op_prep p = {.op = &sp_op_tshift, .attr = &at, .n_in = 1, .training = 1, .run_backward = 1};
      p.in_shape[0] = p.out_shape = sp_shape4(8, 20, 5, 6);
      p.in_dtype[0] = SP_F32;
      p.in_layout[0] = &md;
      p.need_d_in[0] = 1;
      assert_int_equal(cpu_tshift_prepare(&p), 0);
      int plain_f32 = tags[gi] == dnnl_abcd && types[ti] == dnnl_f32;
      if (plain_f32)
        assert_null(p.out_layout); /* plain f32 is reported as NULL */
      else
        assert_true(p.out_layout && cpu_md_equal(p.out_layout, &md));
      assert_int_equal(p.fwd_scratch_bytes + p.bwd_scratch_bytes + p.saved_bytes, 0);
      cpu_node_free(p.state);
    }
}

/* Plain index of (image, channel, position) and its channels-last twin. */
static int64_t cl_index(const sp_shape *s, int64_t plain) {
  const int64_t c = s->d[1], hw = s->d[2] * s->d[3];
  const int64_t img = plain / (c * hw), ch = plain / hw % c, pos = plain % hw;
  return (img * hw + pos) * c + ch;
}

/* Plain values into channels-last order (4-D shapes; others stay plain). */
static void to_channels_last(const sp_shape *s, const float *plain, float *out) {
  const int64_t n = sp_shape_numel(s);
  for (int64_t i = 0; i < n; i++) out[s->ndim == 4 ? cl_index(s, i) : i] = plain[i];
}

/* Largest |got - want| over a tensor stored channels-last (got) and plain
 * (want), relative to the largest |want|. */
static double cl_error(const sp_shape *s, const float *got, const float *want) {
  double err = 0, big = 0;
  for (int64_t i = 0; i < sp_shape_numel(s); i++) {
    err = fmax(err, fabs((double)got[s->ndim == 4 ? cl_index(s, i) : i] - want[i]));
    big = fmax(big, fabs(want[i]));
  }
  return big > 0 ? err / big : err;
}

/* An op's own kernel on channels-last input (what an inference conv may
 * write) against its reference kernel on the same values in plain layout:
 * output and input gradient, the gradient fresh (overwritten) and
 * accumulated (added into 0.5). Returns the kernel's saved bytes. */
static size_t check_channels_last(const sp_op_def *op, int (*prepare)(sp_op_prep *), const void *attr, sp_shape in,
                                  sp_shape out, double tol) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {in.d[0], in.d[1], in.d[2], in.d[3]};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_acdb), dnnl_success);
  sp_op_prep p = {.op = op, .attr = attr, .n_in = 1, .training = 1, .run_backward = 1};
  p.in_shape[0] = in, p.out_shape = out, p.in_dtype[0] = SP_F32, p.in_layout[0] = &md, p.need_d_in[0] = 1;
  assert_int_equal(prepare(&p), 0);
  const int64_t ni = sp_shape_numel(&in), no = sp_shape_numel(&out);
  size_t ref_saved = op->saved_bytes ? op->saved_bytes(attr, 1, &in, &out) : 0;
  float *x = calloc((size_t)ni, 4), *xn = calloc((size_t)ni, 4), *dx = calloc((size_t)ni, 4),
        *dxn = calloc((size_t)ni, 4);
  float *y = calloc((size_t)no, 4), *yn = calloc((size_t)no, 4), *dy = calloc((size_t)no, 4),
        *dyn = calloc((size_t)no, 4);
  void *saved = calloc(ref_saved + 1, 1), *saved_n = calloc(p.saved_bytes + 1, 1);
  sp_test_rng rng = {5};
  sp_test_fill_uniform(&rng, x, ni, -3, 3);
  sp_test_fill_uniform(&rng, dy, no, -1, 1);
  to_channels_last(&in, x, xn);
  to_channels_last(&out, dy, dyn);
  sp_tensor tx = sp_tensor_view(SP_F32, in, x), tdx = sp_tensor_view(SP_F32, in, dx),
            nx = sp_tensor_view(SP_F32, in, xn), ndx = sp_tensor_view(SP_F32, in, dxn),
            ty = sp_tensor_view(SP_F32, out, y), ny = sp_tensor_view(SP_F32, out, yn),
            tdy = sp_tensor_view(SP_F32, out, dy), ndy = sp_tensor_view(SP_F32, out, dyn);
  sp_op_args r = {.attr = attr, .n_in = 1, .training = 1}, c = r;
  r.in[0] = &tx, r.out = &ty, r.d_out = &tdy, r.d_in[0] = &tdx, r.saved = saved;
  c.in[0] = &nx, c.out = &ny, c.d_out = &ndy, c.d_in[0] = &ndx, c.impl = p.state, c.saved = saved_n;
  cpu_node *node = p.state;
  for (int fresh = 1; fresh >= 0; fresh--) {
    for (int64_t k = 0; k < ni; k++) dx[k] = fresh ? 0.0f : 0.5f, dxn[k] = fresh ? NAN : 0.5f;
    c.d_in_fresh = (unsigned)fresh;
    op->forward(&r);
    op->backward(&r);
    node->vt->forward(node, &c);
    node->vt->backward(node, &c);
    double ey = cl_error(&out, yn, y), ed = cl_error(&in, dxn, dx);
    if (!(ey <= tol && ed <= tol))
      fail_msg("[%s channels-last, %s] output error %.3g, gradient error %.3g > %.1g", op->name,
               fresh ? "fresh" : "accumulated", ey, ed, tol);
  }
  size_t bytes = p.saved_bytes;
  cpu_node_free(node);
  free(x), free(xn), free(dx), free(dxn), free(y), free(yn), free(dy), free(dyn), free(saved), free(saved_n);
  return bytes;
}

/* The shift moves values: bitwise equal, and it saves nothing. */
static void tshift_channels_last(void **s) {
  (void)s;
  cmp_require_cpu();
  sp_tshift_attr at = {4, 0.25f, 0.125f};
  sp_shape in = sp_shape4(8, 20, 3, 2);
  assert_int_equal(check_channels_last(&sp_op_tshift, cpu_tshift_prepare, &at, in, in, 0.0), 0);
}

/* Soft-argmax's own kernel, not the adapter: it saves the exponentials in
 * the input's layout plus 4 floats per heatmap. */
static void softargmax_channels_last(void **s) {
  (void)s;
  cmp_require_cpu();
  sp_softargmax_attr at = {3.0f};
  size_t saved = check_channels_last(&sp_op_softargmax, cpu_softargmax_prepare, &at, sp_shape4(2, 5, 7, 9),
                                     sp_shape3(2, 5, 2), 1e-5);
  assert_int_equal(saved, sizeof(float) * 2 * 5 * 7 * 9 + 16 * 2 * 5);
}

static void blurpool_channels_last(void **s) {
  (void)s;
  cmp_require_cpu();
  sp_blurpool_attr at = {3, 2};
  check_channels_last(&sp_op_blurpool, cpu_blurpool_prepare, &at, sp_shape4(2, 5, 7, 6), sp_shape4(2, 5, 4, 3), 1e-6);
  /* 32 channels: the register kernels (a gather in backward). Filters 3, 5
   * and 7 at stride 2 over odd and even sizes (reflected taps that name the
   * same output twice), 4 and 7 at stride 1 (the most terms per input). */
  const struct {
    int f, stride, h, w;
  } cases[] = {{3, 2, 7, 6}, {3, 2, 8, 9}, {5, 2, 9, 7}, {7, 2, 8, 8}, {4, 1, 6, 7}, {7, 1, 9, 8}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const sp_blurpool_attr a = {cases[k].f, cases[k].stride};
    const int64_t ho = (cases[k].h - 1) / a.stride + 1, wo = (cases[k].w - 1) / a.stride + 1; /* as ops/blurpool.c */
    check_channels_last(&sp_op_blurpool, cpu_blurpool_prepare, &a, sp_shape4(2, 32, cases[k].h, cases[k].w),
                        sp_shape4(2, 32, ho, wo), 1e-6);
  }
}

/* Max pooling's own kernel on channels-last input (maxpool_cl.c): 3x3
 * stride 2 padding 1 over odd and even sizes, 2x2 stride 2 with ceil_mode
 * (windows over the edge), 3x3 stride 1 (up to 9 outputs an input).
 * Exact forward; the gradient sums in the reference's order. */
static void maxpool_channels_last(void **s) {
  (void)s;
  cmp_require_cpu();
  const struct {
    sp_pool2d_attr a;
    int h, w;
  } cases[] = {{{3, 3, 2, 2, 1, 1, 1, 0}, 9, 8},
               {{3, 3, 2, 2, 1, 1, 1, 0}, 8, 11},
               {{2, 2, 2, 2, 0, 0, 1, 1}, 7, 9},
               {{3, 3, 1, 1, 1, 1, 1, 0}, 6, 7}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const sp_pool2d_attr *a = &cases[k].a;
    sp_shape in = sp_shape4(2, 32, cases[k].h, cases[k].w), out;
    char err[128];
    assert_int_equal(sp_op_maxpool2d.infer(a, 1, &in, 0, NULL, &out, err, sizeof err), 0);
    const long before = cpu_maxpool_own_calls;
    assert_int_equal(check_channels_last(&sp_op_maxpool2d, cpu_maxpool_prepare, a, in, out, 1e-6),
                     (size_t)sp_shape_numel(&out)); /* a byte an output value */
    assert_true(cpu_maxpool_own_calls > before);
  }
}

/* After a ReLU most windows tie at zero: the winner is the first in window
 * order, as the reference takes it (bf16 training plans: channels-last on
 * AMX machines), and the same values through oneDNN's pooling. */
static sp_value b_relu_maxpool(sp_graph *g, sp_value x) {
  x = sp_relu(g, pre(g, x, 32));
  return post(g, sp_maxpool2d(g, x, (sp_pool_args){.kernel = 3, .stride = 2, .pad = 1}), 4);
}

static void maxpool_own_or_onednn(int path) { cpu_maxpool_use_own = path == 0; }

static void maxpool_ties(void **s) {
  (void)s;
  cmp_require_cpu();
  const int sizes[2][2] = {{11, 9}, {12, 14}};
  for (int i = 0; i < 2; i++) {
    cmp_case k = {"relu maxpool", b_relu_maxpool, 2, 3, sizes[i][0], sizes[i][1], 1, SP_PLAN_BF16, BF16_TOL, 0};
    const long before = cpu_maxpool_own_calls;
    cmp_run(&k);
    if (cmp_bf16_here() && dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_amx)
      assert_true(cpu_maxpool_own_calls > before); /* channels-last there */
    k.tol = 0;
    cmp_two_paths(&k, maxpool_own_or_onednn, 1e-2);
    k.flags = 0, k.tol = 1e-5; /* f32 plans: blocked layouts, oneDNN's pooling */
    cmp_run(&k);
  }
  cpu_maxpool_use_own = 1;
}

static void concat_rows_or_onednn(int path) { cpu_concat_use_rows = path == 0; }

/* concat_rows.c against oneDNN's concat and gradient reorders, one training
 * step: copies and one-rounding adds on both sides, so equal to 1e-6. The
 * concatenated input x also feeds two convolutions (the concat's gradient
 * written first), or an add after the concat (added onto the add's). f32 plans: 16-channel
 * blocks; bf16: channels-last (the odd case: 10- and 16-byte runs). */
static void concat_rows_matches_onednn(void **s) {
  (void)s;
  cmp_require_cpu();
  const cmp_case cases[] = {{"concat f32", b_concat, 2, 3, 6, 7, 1, 0, 1e-6, 0},
                            {"concat bf16", b_concat, 2, 3, 6, 7, 1, SP_PLAN_BF16, 1e-6, 0},
                            {"concat odd bf16", b_concat_odd, 2, 3, 6, 7, 1, SP_PLAN_BF16, 1e-6, 0},
                            {"concat adds f32", b_concat_adds, 2, 3, 6, 7, 1, 0, 1e-6, 0},
                            {"concat adds bf16", b_concat_adds, 2, 3, 6, 7, 1, SP_PLAN_BF16, 1e-6, 0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) cmp_two_paths(&cases[c], concat_rows_or_onednn, 1e-6);
}

static void concat_streamed_or_stored(int path) { cpu_train_stream_cap = path == 0 ? 0 : INT64_MAX; }

/* Channels-last rows written past the caches (every training output
 * streamed: cpu_train_stream_cap 0), forward and the gradient's split: the
 * same bits as stored ones (b_concat's 64-byte run streams, its 32-byte
 * runs fall back to plain stores). */
static void concat_rows_streamed_same_bits(void **s) {
  (void)s;
  cmp_require_cpu();
  const int64_t cap = cpu_train_stream_cap;
  const cmp_case k = {"concat bf16 streamed", b_concat, 2, 3, 6, 7, 1, SP_PLAN_BF16, 0, 0};
  const long before = cpu_concat_streamed;
  cmp_two_paths(&k, concat_streamed_or_stored, 0);
  cpu_train_stream_cap = cap;
  /* Where bf16 plans run on channels-last rows, i.e. with AMX: the streaming
   * path was taken. Without AMX oneDNN keeps bf16 activations in 16-channel
   * blocks (AVX512-BF16, Zen 4) or the plans compute f32 on blocks (`make
   * asan` caps oneDNN below AMX), whole rows that the concat copies as such. */
  if (cmp_bf16_here() && cpu_amx_usable() && cpu_concat_streamed == before)
    fail_msg("the concat did not take its streaming path");
}

/* Taken where all inputs share channels-last, or plain / blocked layouts in
 * whole blocks; not for a padded block or mixed layouts. */
static void concat_rows_taken_where_it_applies(void **s) {
  (void)s;
  cmp_require_cpu();
  const struct {
    dnnl_format_tag_t tag0, tag1;
    int bf16, c0, c1, want;
  } cases[] = {{dnnl_acdb, dnnl_acdb, 1, 16, 32, 1},       {dnnl_acdb, dnnl_acdb, 1, 5, 8, 1},
               {dnnl_aBcd16b, dnnl_aBcd16b, 0, 16, 32, 1}, {dnnl_abcd, dnnl_abcd, 0, 5, 8, 1},
               {dnnl_aBcd16b, dnnl_aBcd16b, 0, 5, 16, 0},  {dnnl_acdb, dnnl_aBcd16b, 0, 16, 16, 0},
               {dnnl_aBcd8b, dnnl_aBcd8b, 0, 8, 16, 1}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    dnnl_memory_desc_t md[2];
    const int c[2] = {cases[t].c0, cases[t].c1};
    const dnnl_format_tag_t tag[2] = {cases[t].tag0, cases[t].tag1};
    sp_op_prep p = {.op = &sp_op_concat, .n_in = 2, .training = 1, .run_backward = 1, .bf16 = cases[t].bf16};
    for (int k = 0; k < 2; k++) {
      dnnl_dims_t dims = {2, c[k], 5, 6};
      assert_int_equal(dnnl_memory_desc_init_by_tag(&md[k], 4, dims, cases[t].bf16 ? dnnl_bf16 : dnnl_f32, tag[k]),
                       dnnl_success);
      p.in_shape[k] = sp_shape4(2, c[k], 5, 6), p.in_dtype[k] = SP_F32, p.in_layout[k] = &md[k], p.need_d_in[k] = 1;
    }
    p.out_shape = sp_shape4(2, c[0] + c[1], 5, 6);
    assert_int_equal(cpu_concat_prepare(&p), 0);
    if (cpu_concat_is_rows(p.state) != cases[t].want)
      fail_msg("case %zu: the copy kernel %s", t, cases[t].want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
}

/* The graph-level cases above reach soft-argmax and BlurPool's own kernels
 * only if prepare takes the blocked layouts (else the adapter runs and the
 * comparison still passes): both keep nChw16c / nChw8c, with no scratch. */
static void own_kernels_keep_blocked_layout(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_format_tag_t tags[2] = {dnnl_aBcd16b, dnnl_aBcd8b};
  for (int t = 0; t < 2; t++) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {2, 20, 9, 7};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, tags[t]), dnnl_success);
    sp_softargmax_attr sa = {1.0f};
    sp_op_prep p = {.op = &sp_op_softargmax, .attr = &sa, .n_in = 1, .training = 1, .run_backward = 1};
    p.in_shape[0] = sp_shape4(2, 20, 9, 7);
    p.out_shape = sp_shape3(2, 20, 2);
    p.in_dtype[0] = SP_F32;
    p.in_layout[0] = &md;
    p.need_d_in[0] = 1;
    assert_int_equal(cpu_softargmax_prepare(&p), 0);
    assert_int_equal(p.saved_bytes, cpu_md_bytes(&md) + 16 * 2 * 20); /* padded channels included */
    assert_int_equal(p.fwd_scratch_bytes + p.bwd_scratch_bytes, 0);
    cpu_node_free(p.state);
    sp_blurpool_attr ba = {3, 2};
    sp_op_prep q = {.op = &sp_op_blurpool, .attr = &ba, .n_in = 1, .training = 1, .run_backward = 1};
    q.in_shape[0] = sp_shape4(2, 20, 9, 7);
    q.out_shape = sp_shape4(2, 20, 5, 4);
    q.in_dtype[0] = SP_F32;
    q.in_layout[0] = &md;
    q.need_d_in[0] = 1;
    assert_int_equal(cpu_blurpool_prepare(&q), 0);
    const dnnl_memory_desc_t *out = q.out_layout;
    dnnl_memory_desc_t want;
    dnnl_dims_t od = {2, 20, 5, 4};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&want, 4, od, dnnl_f32, tags[t]), dnnl_success);
    assert_non_null(out);
    assert_true(cpu_md_equal(out, &want));
    assert_int_equal(q.fwd_scratch_bytes + q.bwd_scratch_bytes + q.saved_bytes, 0);
    cpu_node_free(q.state);
  }
}

/* bf16 plans: soft-argmax and BlurPool read bf16 activations in every layout
 * (no adapter, no reorder): BlurPool's output keeps the layout and type,
 * soft-argmax saves f32 exponentials (twice the bf16 input's bytes). The
 * bf16 CASEs above check their values against the reference. */
static void own_kernels_take_bf16(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_format_tag_t tags[4] = {dnnl_aBcd16b, dnnl_aBcd8b, dnnl_acdb, dnnl_abcd};
  for (int t = 0; t < 4; t++) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {2, 20, 9, 7};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_bf16, tags[t]), dnnl_success);
    sp_softargmax_attr sa = {1.0f};
    sp_op_prep p = {.op = &sp_op_softargmax, .attr = &sa, .n_in = 1, .training = 1, .run_backward = 1, .bf16 = 1};
    p.in_shape[0] = sp_shape4(2, 20, 9, 7);
    p.out_shape = sp_shape3(2, 20, 2);
    p.in_dtype[0] = SP_F32;
    p.in_layout[0] = &md;
    p.need_d_in[0] = 1;
    assert_int_equal(cpu_softargmax_prepare(&p), 0);
    assert_int_equal(p.saved_bytes, 2 * cpu_md_bytes(&md) + 16 * 2 * 20);
    cpu_node_free(p.state);
    sp_blurpool_attr ba = {3, 2};
    sp_op_prep q = {.op = &sp_op_blurpool, .attr = &ba, .n_in = 1, .training = 1, .run_backward = 1, .bf16 = 1};
    q.in_shape[0] = sp_shape4(2, 20, 9, 7);
    q.out_shape = sp_shape4(2, 20, 5, 4);
    q.in_dtype[0] = SP_F32;
    q.in_layout[0] = &md;
    q.need_d_in[0] = 1;
    assert_int_equal(cpu_blurpool_prepare(&q), 0);
    dnnl_memory_desc_t want;
    dnnl_dims_t od = {2, 20, 5, 4};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&want, 4, od, dnnl_bf16, tags[t]), dnnl_success);
    assert_non_null(q.out_layout);
    assert_true(cpu_md_equal(q.out_layout, &want));
    cpu_node_free(q.state);
  }
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(concat_rows_streamed_same_bits),
      cmocka_unit_test(conv3x3),
      cmocka_unit_test(conv_stride2_bias),
      cmocka_unit_test(conv_groups),
      cmocka_unit_test(conv_dilation),
      cmocka_unit_test(conv_stem7x7),
      cmocka_unit_test(conv_floor_drops_rows),
      cmocka_unit_test(deconv_k2s2),
      cmocka_unit_test(deconv_out_pad),
      cmocka_unit_test(batchnorm),
      cmocka_unit_test(batchnorm_relu),
      cmocka_unit_test(relu),
      cmocka_unit_test(maxpool),
      cmocka_unit_test(maxpool_ceil),
      cmocka_unit_test(avgpool),
      cmocka_unit_test(avgpool_exclude_pad),
      cmocka_unit_test(avgpool_ceil),
      cmocka_unit_test(global_avgpool_linear),
      cmocka_unit_test(linear_bn1d),
      cmocka_unit_test(linear_shared_input),
      cmocka_unit_test(upsample_nearest),
      cmocka_unit_test(upsample_bilinear),
      cmocka_unit_test(add),
      cmocka_unit_test(add_same_input),
      cmocka_unit_test(concat),
      cmocka_unit_test(concat_unaligned),
      cmocka_unit_test(concat_adds_gradient),
      cmocka_unit_test(concat_rows_matches_onednn),
      cmocka_unit_test(concat_rows_taken_where_it_applies),
      cmocka_unit_test(adapted_ref_ops),
      cmocka_unit_test(tshift_lanes),
      cmocka_unit_test(tshift_blocks),
      cmocka_unit_test(tshift_padded),
      cmocka_unit_test(tshift_fresh),
      cmocka_unit_test(tshift_streamed),
      cmocka_unit_test(softargmax_block),
      cmocka_unit_test(softargmax_padded),
      cmocka_unit_test(softargmax_plain),
      cmocka_unit_test(softargmax_shared_input),
      cmocka_unit_test(hardswish),
      cmocka_unit_test(dropout),
      cmocka_unit_test(reshape),
      cmocka_unit_test(reshape_shared_input),
      cmocka_unit_test(spatial_softmax),
      cmocka_unit_test(l1_loss),
      cmocka_unit_test(mse_loss),
      cmocka_unit_test(l2_loss),
      cmocka_unit_test(euclidean_loss),
      cmocka_unit_test(structure_loss),
      cmocka_unit_test(cross_entropy),
      cmocka_unit_test(batchnorm_sync),
      cmocka_unit_test(blurpool_block),
      cmocka_unit_test(blurpool_padded),
      cmocka_unit_test(blurpool_even_filter),
      cmocka_unit_test(blurpool_shared_input),
      cmocka_unit_test(add_relu),
      cmocka_unit_test(add_relu_same_input),
      cmocka_unit_test(add_relu_padded),
      cmocka_unit_test(add_relu_tail),
#ifdef SPRY_HAVE_DNNL
      cmocka_unit_test(tshift_keeps_blocked_layout),
      cmocka_unit_test(tshift_channels_last),
      cmocka_unit_test(softargmax_channels_last),
      cmocka_unit_test(blurpool_channels_last),
      cmocka_unit_test(maxpool_channels_last),
      cmocka_unit_test(maxpool_ties),
      cmocka_unit_test(own_kernels_keep_blocked_layout),
      cmocka_unit_test(own_kernels_take_bf16),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
