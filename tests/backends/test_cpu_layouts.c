/* Layouts that are one layout in memory (backends/cpu/core.c, cpu_md_equal):
 * 16 channels channels-last and in 16-channel blocks are the same bytes, so
 * a convolution reading one kind takes the other without a reorder; padded
 * blocks, other channel counts and offsets are not equal. Checked on the
 * descriptors, on a convolution's plan, and on a training graph whose
 * 16-channel tensor passes between a channels-last and a blocked kernel,
 * against the reference backend. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

static dnnl_memory_desc_t md4(int64_t n, int64_t c, int64_t h, int64_t w, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
  dnnl_memory_desc_t md;
  dnnl_dims_t d = {n, c, h, w};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, d, dt, tag), dnnl_success);
  return md;
}

static void equal_as_memory(void **st) {
  (void)st;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    const dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t nhwc16 = md4(2, 16, 5, 7, dt, dnnl_acdb), blk16 = md4(2, 16, 5, 7, dt, dnnl_aBcd16b);
    assert_true(cpu_md_equal(&nhwc16, &blk16));
    assert_true(cpu_md_equal(&blk16, &nhwc16));
    dnnl_memory_desc_t nhwc8 = md4(2, 8, 5, 7, dt, dnnl_acdb), blk8 = md4(2, 8, 5, 7, dt, dnnl_aBcd8b);
    assert_true(cpu_md_equal(&nhwc8, &blk8));
    /* 8 channels in 16-channel blocks are padded: not the same bytes. */
    dnnl_memory_desc_t pad8 = md4(2, 8, 5, 7, dt, dnnl_aBcd16b);
    assert_false(cpu_md_equal(&nhwc8, &pad8));
    /* 32 channels: two blocks, not channels-last. */
    dnnl_memory_desc_t nhwc32 = md4(2, 32, 5, 7, dt, dnnl_acdb), blk32 = md4(2, 32, 5, 7, dt, dnnl_aBcd16b);
    assert_false(cpu_md_equal(&nhwc32, &blk32));
    /* 1x1 images: NCHW and NHWC are the same bytes; 2x1 are not. */
    dnnl_memory_desc_t p1 = md4(3, 24, 1, 1, dt, dnnl_abcd), c1 = md4(3, 24, 1, 1, dt, dnnl_acdb);
    assert_true(cpu_md_equal(&p1, &c1));
    dnnl_memory_desc_t p2 = md4(3, 24, 2, 1, dt, dnnl_abcd), c2 = md4(3, 24, 2, 1, dt, dnnl_acdb);
    assert_false(cpu_md_equal(&p2, &c2));
    /* Other shape, other type, an offset: not equal. */
    dnnl_memory_desc_t other = md4(2, 16, 5, 6, dt, dnnl_aBcd16b);
    assert_false(cpu_md_equal(&nhwc16, &other));
    dnnl_memory_desc_t retyped = md4(2, 16, 5, 7, bf16 ? dnnl_f32 : dnnl_bf16, dnnl_aBcd16b);
    assert_false(cpu_md_equal(&nhwc16, &retyped));
    dnnl_memory_desc_t shifted = blk16;
    shifted.offset0 = 16;
    assert_false(cpu_md_equal(&nhwc16, &shifted));
  }
  /* The lane count is by name: 8 channels channels-last stay channels-last. */
  dnnl_memory_desc_t nhwc8 = md4(2, 8, 5, 7, dnnl_f32, dnnl_acdb);
  assert_int_equal(cpu_md_lanes(&nhwc8), CPU_LANES_NHWC);
}

/* vgg-face's third layer: 16 channels channels-last (from the brgemm layer
 * before it) into a 3x3 stride-2 f32 convolution that oneDNN runs on
 * 16-channel blocks (AVX-512): read in place. */
static void conv_reads_16_channels_in_place(void **st) {
  (void)st;
  cmp_require_cpu();
  void *c = cmp_conv_node(2, 16, 32, 22, 18, 3, 2, 0, 0, dnnl_acdb);
  const int lanes = cpu_conv_src_lanes(c);
  if (dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core) assert_true(lanes == 16 || lanes == CPU_LANES_NHWC);
  if (lanes == 16 || lanes == CPU_LANES_NHWC) assert_false(cpu_conv_reorders_src(c));
  cpu_node_free(c);
  /* 8 channels into 16-channel blocks would be padded: that one is copied. */
  c = cmp_conv_node(2, 8, 32, 22, 18, 3, 2, 0, 0, dnnl_acdb);
  if (cpu_conv_src_lanes(c) == 16) assert_true(cpu_conv_reorders_src(c));
  cpu_node_free(c);
}

/* f32 inference on the plain image (3 channels, 3x3): read as NCHW, no
 * copy, written in 16-channel blocks; training keeps oneDNN's choice. */
static void f32_image_read_in_place(void **st) {
  (void)st;
  cmp_require_cpu();
  if (dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core) skip();
  for (int train = 0; train < 2; train++) {
    sp_conv2d_attr at = {2, 2, 1, 1, 1, 1, 1};
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, 3, 30, 26), sp_shape4(2, 32, 15, 13),
                                 sp_shape4(32, 3, 3, 3), 0, 0, NULL);
    p.training = p.run_backward = p.need_d_in[0] = p.param_grad[0] = train;
    assert_int_equal(cpu_conv_prepare(&p), 0);
    if (!train) {
      assert_false(cpu_conv_reorders_src(p.state));
      assert_int_equal(cpu_conv_dst_lanes(p.state), 16);
    }
    cpu_node_free(p.state);
  }
}

/* The same stem, then a stride-1 layer reading its blocks, against the
 * reference backend (inference and training plans). */
static sp_value b_colour_stem(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = 2, .pad = 1, .bias = 1}));
  return sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1});
}

/* 3 -> 8 -> 16 -> 32 channels, stride 2 each, then a stride-1 layer: the
 * 16-channel tensor is written by one kind of kernel and read by another. */
static sp_value b_vgg_stem(sp_graph *g, sp_value x) {
  const int ch[] = {8, 16, 32};
  char name[16];
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "c%d", i);
    x = sp_conv2d(g, x, name, (sp_conv_args){.out_ch = ch[i], .kernel = 3, .stride = 2, .pad = 1});
    snprintf(name, sizeof name, "bn%d", i);
    x = sp_relu(g, sp_batchnorm(g, x, name));
  }
  return sp_conv2d(g, x, "out", (sp_conv_args){.out_ch = 4, .kernel = 3, .pad = 1, .bias = 1});
}

static void graph_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"16-channel hand-over, f32", b_vgg_stem, 3, 3, 45, 38, 1, 0, 1e-4, 0};
  cmp_run(&k);
  k.training = 0;
  cmp_run(&k);
  k = (cmp_case){"16-channel hand-over, bf16", b_vgg_stem, 3, 3, 45, 38, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  k = (cmp_case){"f32 image read as NCHW, inference", b_colour_stem, 2, 3, 31, 27, 0, 0, 1e-4, 0};
  cmp_run(&k);
  k.flags = SP_PLAN_FROZEN;
  cmp_run(&k);
  k.training = 1, k.flags = 0;
  cmp_run(&k);
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(equal_as_memory), cmocka_unit_test(conv_reads_16_channels_in_place),
             cmocka_unit_test(f32_image_read_in_place), cmocka_unit_test(graph_against_ref))
