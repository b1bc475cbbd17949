/* Convolution backward as matrix products in bf16 training plans: 1x1
 * convolutions (backends/cpu/conv_mm.c, data and weight gradients) and the
 * weight gradient of any other (conv_bww_mm.c, im2col + matmul), against the
 * reference backend and, tightly, against oneDNN's convolution backward on
 * the same bf16 values. 1x1 cases, in bf16 training
 * plans (channels-last activations): the input gradient written fresh and
 * added onto another consumer's, the weight gradient accumulated into the
 * plain master gradient, with and without bias; and the same plans with the
 * products switched off (oneDNN's convolution backward) for comparison. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* With AMX, oneDNN keeps a channels-last bf16 input (its brgemm kernels);
 * without (AMD Zen 5: AVX512-BF16 only) its bf16 training kernels want
 * 16-channel blocks, and the plan's activations are blocked. */
static int amx(void) { return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_amx; }

/* x -> conv3 -> [1x1 a (bias), 1x1 b] -> add -> 1x1 post: the input of the
 * two 1x1 convolutions gets its gradient from both (the second adds). */
static sp_value b_two_1x1(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  sp_value a = sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 48, .kernel = 1, .bias = 1}),
           b = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 48, .kernel = 1});
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = 1});
}

/* 8 channels in, 20 out (no multiple of 16), then a shortcut add. */
static sp_value b_narrow_1x1(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1});
  sp_value y = sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 20, .kernel = 1, .bias = 1});
  return sp_conv2d(g, sp_add(g, y, sp_conv2d(g, x, "d", (sp_conv_args){.out_ch = 20, .kernel = 3, .pad = 1})), "post",
                   (sp_conv_args){.out_ch = 4, .kernel = 1});
}

/* vgg-face's first two layers on a grey image: the stem writes 8 channels
 * channels-last; the next 3x3 stride-2 layer reads them as they are. */
static sp_value b_grey_stem(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn"));
  x = sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
  return sp_conv2d(g, sp_relu(g, x), "post", (sp_conv_args){.out_ch = 4, .kernel = 1});
}

static void run_both(cmp_build_fn body, const char *label) {
  cmp_case k = {label, body, 3, 3, 9, 7, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k); /* products */
  cpu_conv_use_matmul = 0;
  cmp_run(&k); /* oneDNN's convolution backward */
  cpu_conv_use_matmul = 1;
  k.flags = 0, k.tol = 1e-4; /* f32 plans keep oneDNN's (blocked layouts) */
  cmp_run(&k);
}

static void two_consumers(void **st) {
  (void)st;
  cmp_require_cpu();
  run_both(b_two_1x1, "two 1x1");
}

static void narrow_channels(void **st) {
  (void)st;
  cmp_require_cpu();
  run_both(b_narrow_1x1, "narrow 1x1");
}

/* A bf16 training plan, against the reference (the narrow layer's forward
 * and backward on channels-last data where oneDNN has brgemm kernels). */
static void narrow_channels_last(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"grey stem + 8 -> 16", b_grey_stem, 2, 1, 21, 18, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  k.flags = 0, k.tol = 1e-4; /* f32: the stem writes its 8 channels channels-last too */
  cmp_run(&k);
}

/* 3x3 (padding at every edge), stride 2 with an odd size (the last column
 * and row dropped), dilation 2, and the 7x7 stem: weight gradients by im2col
 * + matmul. */
static sp_value b_kxk(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 16, .kernel = 7, .stride = 2, .pad = 3});
  x = sp_conv2d(g, x, "c3", (sp_conv_args){.out_ch = 24, .kernel = 3, .pad = 1});
  x = sp_conv2d(g, x, "s2", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_conv2d(g, x, "dil", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 2, .dilation = 2});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 4, .kernel = 1, .bias = 1});
}

static void kxk_weight_gradients(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_conv_bww_min_channels = 1; /* every layer here is narrow */
  run_both(b_kxk, "kxk");
  cpu_conv_bww_min_channels = 64;
}

static void products_or_onednn(int path) { cpu_conv_use_matmul = path == 0; }

static void packed_or_plain(int path) { cpu_bww_use_packed = path == 0; }

/* col written in the matmul's packed layout against col plain (oneDNN
 * packs it): the same products in the same order, so the same bits. 3 x 5 x
 * 5 = 75 rows after the stem: an odd count, short of a 32-row block. */
static void packed_col_same_as_plain(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_conv_bww_min_channels = 1;
  const int sizes[2][2] = {{9, 9}, {17, 15}};
  for (int i = 0; i < 2; i++) {
    cmp_case k = {"kxk packed vs plain", b_kxk, 3, 3, sizes[i][0], sizes[i][1], 1, SP_PLAN_BF16, 0, 0};
    cmp_two_paths(&k, packed_or_plain, 0.0);
  }
  cpu_bww_use_packed = 1;
  cpu_conv_bww_min_channels = 64;
}

/* Stems on the image (3 channels, or 1) that conv_stem.c does not take
 * (more than 49 taps or 64 output channels): the weight gradient on AMX
 * tiles from an im2col of our own (conv_bww_mm.c, small). 7x7 stride 2
 * (ResNet's stem: runs of 21 values, the next row's 6 on), 9x9 stride 2 on
 * a grey image (runs of 9, the next 2 on), 3x3 into 80 channels (runs of 9)
 * and a dilated 7x7 (tap by tap). */
static sp_value b_stem(sp_graph *g, sp_value x, int oc, int k, int stride, int dil) {
  x = sp_conv2d(g, x, "stem",
                (sp_conv_args){.out_ch = oc, .kernel = k, .stride = stride, .pad = dil * (k / 2), .dilation = dil});
  return sp_conv2d(g, sp_relu(g, x), "post", (sp_conv_args){.out_ch = 4, .kernel = 1, .bias = 1});
}
static sp_value b_stem7(sp_graph *g, sp_value x) { return b_stem(g, x, 32, 7, 2, 1); }
static sp_value b_stem9(sp_graph *g, sp_value x) { return b_stem(g, x, 16, 9, 2, 1); }
static sp_value b_stem3_wide(sp_graph *g, sp_value x) { return b_stem(g, x, 80, 3, 1, 1); }
static sp_value b_stem_dilated(sp_graph *g, sp_value x) { return b_stem(g, x, 16, 7, 1, 2); }

static void small_or_onednn(int path) { cpu_bww_use_small = path == 0; }

/* Against the reference backend, and against oneDNN's backward weights on
 * the same bf16 values (both sum exact bf16 products in f32; only the order
 * differs). Widths: even outputs (pairs of one output row, from the padded
 * rows), odd ones (pairs across two rows, tap by tap), and 2 x 56 x 56
 * output positions (several chunks and a short last one). The small path
 * must have run where AMX is usable. */
static void stems_on_tiles(void **st) {
  (void)st;
  cmp_require_cpu();
  const struct {
    const char *label;
    cmp_build_fn body;
    int n, c, h, w;
  } cases[] = {
      {"7x7 s2, 3 ch, 9x8 out", b_stem7, 3, 3, 17, 15},       {"7x7 s2, 3 ch, 5x5 out", b_stem7, 3, 3, 9, 9},
      {"7x7 s2, 3 ch, 56x56 out", b_stem7, 2, 3, 112, 112},   {"9x9 s2, grey", b_stem9, 2, 1, 23, 20},
      {"3x3 s1, 3 ch -> 80, odd", b_stem3_wide, 2, 3, 11, 9}, {"7x7 dilated 2, 3 ch", b_stem_dilated, 2, 3, 16, 14},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const long before = cpu_bww_small_calls;
    cmp_case k = {cases[i].label, cases[i].body, cases[i].n, cases[i].c, cases[i].h, cases[i].w, 1,
                  SP_PLAN_BF16,   6e-2,          0};
    cmp_run(&k);
    if (cmp_bf16_here() && cpu_amx_usable() && cpu_bww_small_calls == before)
      fail_msg("[%s] the stem's weight gradient did not take the tiles", cases[i].label);
    k.tol = 0;
    cmp_two_paths(&k, small_or_onednn, 5e-3);
  }
  cpu_bww_use_small = 1;
}

/* Strided 1x1 layers (ResNet's projection shortcut): the products on the
 * input's grid positions (conv_mm.c, cpu_mm1x1_grid). Two of them read the
 * same input, so one writes its gradient and the other adds; odd and even
 * sizes (an even one leaves the last row and column unread). */
static sp_value b_strided_1x1(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  sp_value a = sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 48, .kernel = 1, .stride = 2});
  sp_value b = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 48, .kernel = 1, .stride = 2, .bias = 1});
  sp_value c = sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 48, .kernel = 3, .stride = 2, .pad = 1});
  return sp_conv2d(g, sp_relu(g, sp_add(g, sp_add(g, a, b), c)), "post", (sp_conv_args){.out_ch = 4, .kernel = 1});
}

static void strided_or_onednn(int path) { cpu_conv_mm_strided = path == 0; }

static void strided_1x1(void **st) {
  (void)st;
  cmp_require_cpu();
  const int sizes[3][2] = {{17, 15}, {18, 14}, {12, 13}};
  for (int i = 0; i < 3; i++) {
    cmp_case k = {"strided 1x1", b_strided_1x1, 3, 3, sizes[i][0], sizes[i][1], 1, SP_PLAN_BF16, 6e-2, 0};
    cmp_run(&k);
    k.tol = 0;
    cmp_two_paths(&k, strided_or_onednn, 5e-3);
  }
  cpu_conv_mm_strided = 1;
}

/* Few output positions, many weights (ResNet's last stage): forward and
 * input gradient as im2col + matmul (conv_col_mm.c). A 3x3 stride-2 layer
 * into 7 x 6, then a 3x3 stride-1 one; the stride-1 layer's input also
 * feeds a 1x1 convolution, so one of the two adds its input gradient. The
 * thresholds are lowered to these sizes (256 -> 32 channels). */
static sp_value b_col_mm(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  x = sp_relu(g, sp_conv2d(g, x, "s2", (sp_conv_args){.out_ch = 48, .kernel = 3, .stride = 2, .pad = 1}));
  sp_value a = sp_conv2d(g, x, "s1", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  sp_value b = sp_conv2d(g, x, "side", (sp_conv_args){.out_ch = 32, .kernel = 1});
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", (sp_conv_args){.out_ch = 4, .kernel = 1, .bias = 1});
}

static void col_mm_or_onednn(int path) { cpu_conv_use_col_mm = path == 0; }
static void col_mm_tiles_or_matmul(int path) { cpu_col_mm_amx = path == 0; }

static void few_positions_col_mm(void **st) {
  (void)st;
  cmp_require_cpu();
  const int64_t min_ch = cpu_col_mm_min_channels;
  cpu_col_mm_min_channels = 32;
  const int sizes[2][2] = {{13, 11}, {14, 12}}; /* 7 x 6 outputs either way; the second an even input */
  for (int i = 0; i < 2; i++) {
    const long before = cpu_col_mm_calls;
    cmp_case k = {"col mm", b_col_mm, 2, 3, sizes[i][0], sizes[i][1], 1, SP_PLAN_BF16, 6e-2, 0};
    cmp_run(&k);
    if (cmp_bf16_here() && amx() && cpu_col_mm_calls < before + 2)
      fail_msg("[col mm] the two layers did not take im2col + matmul");
    k.tol = 0;
    cmp_two_paths(&k, col_mm_or_onednn, 5e-3);
    cmp_two_paths(&k, col_mm_tiles_or_matmul, 5e-3);
  }
  cpu_conv_use_col_mm = 1, cpu_col_mm_amx = 1;
  cpu_col_mm_min_channels = min_ch;
}

/* Few channels on one side, the weight gradient in registers
 * (conv_thin_dw.c): 8 -> 32 and 32 -> 8 as in ResUNet's full-resolution
 * layers, then 8 -> 16 (bias), 16 -> 16 and 16 -> 8. */
static sp_value b_thin_1x1(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1});
  x = sp_relu(g, sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 32, .kernel = 1}));
  x = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 8, .kernel = 1});
  x = sp_relu(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 16, .kernel = 1, .bias = 1}));
  x = sp_conv2d(g, x, "d", (sp_conv_args){.out_ch = 16, .kernel = 1});
  x = sp_conv2d(g, x, "e", (sp_conv_args){.out_ch = 8, .kernel = 1});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 4, .kernel = 1, .bias = 1});
}

static void thin_or_matmul(int path) { cpu_conv_use_thin_dw = path == 0; }

/* Against the reference, and against oneDNN's matmul on the same bf16
 * values: both sum exact bf16 products in f32, so only the order differs.
 * 3 x 17 x 15 = 765 rows: more than one block of rows per thread, and a
 * short one. */
static void thin_weight_gradients(void **st) {
  (void)st;
  cmp_require_cpu();
  run_both(b_thin_1x1, "thin 1x1");
  cmp_case k = {"thin 1x1 vs matmul", b_thin_1x1, 3, 3, 17, 15, 1, SP_PLAN_BF16, 0, 0};
  cmp_two_paths(&k, thin_or_matmul, 1e-4);
  cpu_conv_use_thin_dw = 1;
}

/* One bf16 training step with the products and one with oneDNN's backward,
 * same parameters and inputs: every parameter gradient agrees to f32
 * summation order (both sum bf16 products in f32), far inside BF16_TOL. The
 * input gradients feeding earlier layers are rounded to bf16 on both sides
 * (the same values unless an element sits at a rounding tie). */
static void same_as_onednn(cmp_build_fn body, const char *label, int h, int w) {
  cmp_case k = {label, body, 3, 3, h, w, 1, SP_PLAN_BF16, 0, 0};
  cmp_two_paths(&k, products_or_onednn, 5e-3);
}

static void products_match_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_conv_bww_min_channels = 1;
  same_as_onednn(b_kxk, "kxk", 17, 15);
  cpu_conv_bww_min_channels = 64;
  same_as_onednn(b_two_1x1, "two 1x1", 9, 7);
}

/* The products are taken for channels-last bf16 (what bf16 plans give
 * convolutions on AMX machines) and only there. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  for (int t = 0; t < 2; t++) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {2, 64, 9, 7};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, t ? dnnl_f32 : dnnl_bf16, dnnl_acdb), dnnl_success);
    sp_conv2d_attr at = {1, 1, 0, 0, 1, 1, 1};
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, 64, 9, 7), sp_shape4(2, 32, 9, 7),
                                 sp_shape4(32, 64, 1, 1), 0, !t, &md);
    assert_int_equal(cpu_conv_prepare(&p), 0);
    const int channels_last = cpu_conv_src_lanes(p.state) == CPU_LANES_NHWC;
    if (!t && amx()) assert_true(channels_last);
    assert_int_equal(cpu_conv_uses_matmul(p.state), !t && channels_last);
    assert_int_equal(cpu_conv_uses_thin_dw(p.state), 0); /* 64 x 32: no */
    cpu_node_free(p.state);
  }
  /* 32 -> 8, bf16 channels-last: thin where the build has 16-lane vectors (AVX-512). */
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {2, 32, 9, 7};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_bf16, dnnl_acdb), dnnl_success);
  sp_conv2d_attr at = {1, 1, 0, 0, 1, 1, 1};
  sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, 32, 9, 7), sp_shape4(2, 8, 9, 7),
                               sp_shape4(8, 32, 1, 1), 0, 1, &md);
  assert_int_equal(cpu_conv_prepare(&p), 0);
  int channels_last = cpu_conv_src_lanes(p.state) == CPU_LANES_NHWC;
  assert_int_equal(cpu_conv_uses_thin_dw(p.state), channels_last && cpu_thin_dw_fits(8, 32));
#ifdef __AVX512F__
  assert_true(cpu_thin_dw_fits(8, 32));
#endif
  cpu_node_free(p.state);
  /* 3x3, 64 -> 64, bf16 channels-last: im2col straight into the packed layout. */
  dnnl_dims_t d64 = {2, 64, 9, 7};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, d64, dnnl_bf16, dnnl_acdb), dnnl_success);
  sp_conv2d_attr a3 = {1, 1, 1, 1, 1, 1, 1};
  p = cmp_conv_prep(&sp_op_conv2d, &a3, sp_shape4(2, 64, 9, 7), sp_shape4(2, 64, 9, 7), sp_shape4(64, 64, 3, 3), 0, 1,
                    &md);
  assert_int_equal(cpu_conv_prepare(&p), 0);
  channels_last = cpu_conv_src_lanes(p.state) == CPU_LANES_NHWC;
  if (amx()) assert_true(channels_last);
  assert_int_equal(cpu_conv_bww_packed(p.state), channels_last);
  cpu_node_free(p.state);
  /* 3x3, 512 -> 512 at 7x7: im2col + products where the layouts are
   * channels-last (AMX machines); 1x1 stride 2, 64 -> 128: both gradients
   * as products on the grid positions; ResNet's stem, 3 -> 64, 7x7 stride
   * 2: the weight gradient from the small im2col where AMX is usable. */
  void *s = cmp_conv_node(2, 512, 512, 7, 7, 3, 1, 0, 1, dnnl_acdb);
  if (amx()) assert_true(cpu_conv_uses_col_mm(s));
  assert_true(!cpu_conv_uses_col_mm(s) || cpu_conv_src_lanes(s) == CPU_LANES_NHWC);
  cpu_node_free(s);
  s = cmp_conv_node(2, 64, 128, 9, 7, 1, 2, 0, 1, dnnl_acdb);
  assert_int_equal(cpu_conv_uses_matmul(s), cpu_conv_src_lanes(s) == CPU_LANES_NHWC);
  cpu_node_free(s);
  s = cmp_conv_node(2, 3, 64, 32, 32, 7, 2, 0, 1, dnnl_acdb);
  assert_int_equal(cpu_conv_bww_small(s), cpu_conv_src_lanes(s) == CPU_LANES_NHWC && cpu_amx_usable());
  cpu_node_free(s);
  /* vgg-face's second layer, 3x3 stride 2, 8 -> 16: not a stem on the
   * image; the small im2col ran it at half oneDNN's speed. */
  s = cmp_conv_node(2, 8, 16, 32, 32, 3, 2, 0, 1, dnnl_acdb);
  assert_false(cpu_conv_bww_small(s));
  cpu_node_free(s);
  /* 3x3 stride 2, 8 -> 16, channels-last in: stays channels-last out
   * wherever oneDNN has brgemm kernels for the dtype (bf16: AVX512-BF16 and
   * up; f32: AVX-512), instead of a reorder to plain NCHW each way. */
  for (int bf16 = 0; bf16 < 2; bf16++) {
    dnnl_dims_t d8 = {2, 8, 21, 18};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, d8, bf16 ? dnnl_bf16 : dnnl_f32, dnnl_acdb), dnnl_success);
    sp_conv2d_attr s2 = {2, 2, 1, 1, 1, 1, 1};
    p = cmp_conv_prep(&sp_op_conv2d, &s2, sp_shape4(2, 8, 21, 18), sp_shape4(2, 16, 11, 9), sp_shape4(16, 8, 3, 3), 0,
                      bf16, &md);
    assert_int_equal(cpu_conv_prepare(&p), 0);
    if (dnnl_get_effective_cpu_isa() >= (bf16 ? dnnl_cpu_isa_avx512_core_bf16 : dnnl_cpu_isa_avx512_core)) {
      assert_int_equal(cpu_conv_src_lanes(p.state), CPU_LANES_NHWC); /* read as it is, no reorder */
      /* With AMX oneDNN's own choice may keep other output layouts; the rule
       * is for the machines without it, where that choice read plain NCHW. */
      if (!amx()) assert_int_equal(cpu_conv_dst_lanes(p.state), CPU_LANES_NHWC);
    }
    cpu_node_free(p.state);
  }
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(two_consumers), cmocka_unit_test(narrow_channels), cmocka_unit_test(narrow_channels_last),
             cmocka_unit_test(kxk_weight_gradients), cmocka_unit_test(products_match_onednn),
             cmocka_unit_test(packed_col_same_as_plain), cmocka_unit_test(stems_on_tiles),
             cmocka_unit_test(strided_1x1), cmocka_unit_test(few_positions_col_mm),
             cmocka_unit_test(thin_weight_gradients), cmocka_unit_test(taken_where_it_applies))
