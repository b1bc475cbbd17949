/* f32 transposed convolutions with kernel = stride = 2 whose forward runs as
 * a 1x1 convolution into 4 OC channels and a block shuffle
 * (backends/cpu/deconv_1x1.c) and whose backward runs as 1x1 products on a
 * space-to-depth copy of dY (deconv_1x1_bwd.c): against the reference
 * backend in training and inference plans, against oneDNN's deconvolution
 * on the same values, frozen plans rebuilding W' when the weights change,
 * and taken only where they apply. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* x -> conv 3x3 (32 channels, 16-channel blocks) -> deconv k2s2 -> BN ->
 * ReLU -> 1x1 head: a U-Net up-layer. */
static sp_value b_up(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 48, .kernel = 2, .stride = 2});
  x = sp_relu(g, sp_batchnorm(g, x, "up_bn"));
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* The same without the batch norm (nothing to fold). */
static sp_value b_up_plain(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  x = sp_relu(g, sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 48, .kernel = 2, .stride = 2}));
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* Whether frozen plans take the direct form here: AVX-512 builds where
 * oneDNN runs AVX-512 (16-channel blocks). */
static int direct_here(void) {
#ifdef __AVX512F__
  return sp_backend_cpu_avx512();
#else
  return 0;
#endif
}

/* Training and plain inference plans in the 1x1 form, then (where it runs
 * here) in the direct form, which plans that fold nothing take up to 128
 * input channels: each path counted. */
static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_deconv_1x1_min_channels = 16;
  for (int unfolded = 0; unfolded < 2; unfolded++) {
    cpu_deconv_direct_unfolded = unfolded;
    const long direct = cpu_dc1_direct_calls, all = cpu_dc1_calls;
    cmp_case k = {unfolded ? "deconv direct, training" : "deconv as 1x1, training", b_up, 3, 3, 7, 5, 1, 0, 0, 0};
    cmp_run(&k);
    k = (cmp_case){unfolded ? "deconv direct, inference" : "deconv as 1x1, inference", b_up, 2, 3, 6, 9, 0, 0, 0, 0};
    cmp_run(&k);
    assert_true(cpu_dc1_calls > all);
    if (unfolded && direct_here())
      assert_int_equal(cpu_dc1_direct_calls - direct, cpu_dc1_calls - all);
    else
      assert_int_equal(cpu_dc1_direct_calls, direct);
  }
  cpu_deconv_direct_unfolded = 1;
  cmp_case k = {"deconv as 1x1, inference", b_up, 2, 3, 6, 9, 0, 0, 0, 0};
  k.flags = SP_PLAN_FROZEN;
  k.label = "deconv as 1x1, frozen, batch norm and ReLU folded";
  cmp_run(&k);
  cpu_deconv_1x1_min_channels = 256; /* taken at 32 channels all the same: the batch norm folds */
  k.label = "deconv as 1x1, frozen, at the default width";
  cmp_run(&k);
}

static void ours_or_onednn(int path) { cpu_deconv_1x1_min_channels = path == 0 ? 16 : 0; }

/* The same f32 products: within f32 rounding of oneDNN's deconvolution, and
 * the 1x1 path ran (with AVX-512 the two sum in another order, so their
 * last bits differ too; with AVX2 they sum in the same one). */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  const cmp_two_opts o = {.must_differ = sp_backend_cpu_avx512()};
  for (int unfolded = 0; unfolded < 2; unfolded++) { /* the 1x1 form, then the direct one where it runs */
    cpu_deconv_direct_unfolded = unfolded;
    cmp_case k = {unfolded ? "deconv direct vs onednn" : "deconv as 1x1 vs onednn", b_up, 3, 3, 7, 5, 1, 0, 0, 0};
    const long before = cpu_dc1_calls;
    cmp_two_paths_with(&k, ours_or_onednn, 1e-5, &o);
    printf("# %s deconvolutions run: %ld\n", unfolded ? "direct or 1x1" : "1x1-form", cpu_dc1_calls - before);
    assert_true(cpu_dc1_calls > before);
  }
  cpu_deconv_1x1_min_channels = 256;
}

/* A frozen plan keeps W' and rebuilds it after sp_plan_params_changed (its
 * output bit for bit a plain plan's: no batch norm to fold here). */
static void frozen_plans_follow_weight_changes(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_deconv_1x1_min_channels = 16;
  cmp_case k = {"deconv as 1x1, frozen", b_up_plain, 2, 3, 7, 5, 0, 0, 0, 0};
  cmp_frozen_follows_weights(&k, "up.weight", -2.0f);
  cpu_deconv_1x1_min_channels = 256;
}

/* ---- the direct form of frozen plans (16-channel blocks, AVX-512 builds):
 * each output row from its input row, no 1x1 form, no shuffle. ---- */

static int up_ic = 32;

/* x -> conv 3x3 (up_ic channels) -> deconv k2s2 to 48 -> BN -> ReLU -> 1x1. */
static sp_value b_up_ic(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = up_ic, .kernel = 3, .pad = 1}));
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 48, .kernel = 2, .stride = 2});
  x = sp_relu(g, sp_batchnorm(g, x, "up_bn"));
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* The frozen plan's output with the direct form allowed up to max_ic input
 * channels (0: the 1x1 form), random parameters; the direct calls it made. */
static const sp_tensor *frozen_up(const cmp_case *k, int64_t max_ic, sp_graph **g, sp_plan **p, long *direct) {
  cpu_deconv_direct_max_ic = max_ic;
  sp_shape ys = cmp_out_shape(k);
  sp_value y;
  *g = cmp_graph(k, &y);
  cmp_fill_params(*g, 77u);
  *p = cmp_plan(k, *g, &ys, SP_BACKEND_CPU, SP_PLAN_FROZEN);
  cpu_deconv_direct_max_ic = 128;
  cmp_fill(*p, 3, 0);
  const long before = cpu_dc1_direct_calls;
  assert_int_equal(sp_plan_forward(*p), 0);
  *direct = cpu_dc1_direct_calls - before;
  return sp_plan_output(*p, "y");
}

/* The frozen plan with the direct form (where it runs here) against the 1x1
 * form, same parameters and inputs: summation order only. */
static void direct_matches_1x1(const cmp_case *k, const char *what) {
  sp_graph *g[2];
  sp_plan *p[2];
  long direct[2];
  const sp_tensor *a = frozen_up(k, 128, &g[0], &p[0], &direct[0]), *b = frozen_up(k, 0, &g[1], &p[1], &direct[1]);
  const double d = cmp_rel_l2(a, b);
  printf("# %s: direct and 1x1 form differ by %.3g (relative L2)\n", what, d);
  assert_int_equal(direct[0], direct_here());
  assert_int_equal(direct[1], 0);
  assert_true(d <= 1e-5);
  for (int i = 0; i < 2; i++) sp_plan_free(p[i]), sp_graph_free(g[i]);
}

/* 32, 64 and 128 input channels; rows of 5 (one short group), 9 (8 + 1) and
 * 16 positions; outputs in cache and streamed past it. Against the
 * reference, and against the 1x1 form (summation order only). */
static void direct_against_ref_and_1x1(void **st) {
  (void)st;
  cmp_require_cpu();
  const struct { int ic, n, h, w; } cases[] = {{32, 2, 6, 5}, {64, 1, 7, 9}, {128, 2, 4, 16}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int stream = 0; stream < 2; stream++) {
      up_ic = cases[c].ic;
      cpu_bn_stream_bytes = stream ? 0 : INT64_MAX;
      cmp_case k = {"deconv direct, frozen", b_up_ic, cases[c].n, 3, cases[c].h, cases[c].w, 0, SP_PLAN_FROZEN, 0, 0};
      cmp_run(&k);
      char what[96];
      snprintf(what, sizeof what, "%d channels, %d wide, %s", cases[c].ic, cases[c].w, stream ? "streamed" : "cached");
      direct_matches_1x1(&k, what);
    }
  cpu_bn_stream_bytes = -1;
  up_ic = 32;
}

static int skip_c = 32;

/* A U-Net join: the image's features at full resolution (skip_c channels),
 * down by a stride-2 conv to up_ic, up again to 48, BN, ReLU, concat with
 * the skip, 1x1. */
static sp_value b_join(sp_graph *g, sp_value x) {
  sp_value skip = sp_relu(g, sp_conv2d(g, x, "skip", (sp_conv_args){.out_ch = skip_c, .kernel = 3, .pad = 1}));
  x = sp_relu(g, sp_conv2d(g, skip, "down", (sp_conv_args){.out_ch = up_ic, .kernel = 3, .stride = 2, .pad = 1}));
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 48, .kernel = 2, .stride = 2});
  x = sp_relu(g, sp_batchnorm(g, x, "up_bn"));
  x = sp_concat(g, 2, (sp_value[]){x, skip});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* The direct form and the 1x1 form writing into the concat after them (the
 * skip copied in after their channels): against the reference and each
 * other, cached and streamed; with a skip of 8 channels (not whole 16-lane
 * blocks) the concat stays apart on AVX-512 and is absorbed on AVX2's
 * 8-lane blocks. */
static void direct_concat(void **st) {
  (void)st;
  cmp_require_cpu();
  const int lanes = sp_backend_cpu_avx512() ? 16 : 8;
  const struct { int ic, skip, n, h, w; } cases[] = {{32, 32, 2, 10, 18}, {64, 16, 1, 14, 32}, {32, 8, 2, 10, 18}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int stream = 0; stream < 2; stream++) {
      up_ic = cases[c].ic, skip_c = cases[c].skip;
      cpu_bn_stream_bytes = stream ? 0 : INT64_MAX;
      cmp_case k = {
          "deconv direct + concat, frozen", b_join, cases[c].n, 3, cases[c].h, cases[c].w, 0, SP_PLAN_FROZEN, 0, 0};
      const int absorbed = cases[c].skip % lanes == 0;
      long cat_before = cpu_dc1_cat_calls;
      cmp_run(&k);
      assert_int_equal(cpu_dc1_cat_calls - cat_before, absorbed);
      char what[96];
      snprintf(what, sizeof what, "join of 48 + %d channels, %s", cases[c].skip, stream ? "streamed" : "cached");
      cat_before = cpu_dc1_cat_calls;
      direct_matches_1x1(&k, what); /* one forward in each form */
      assert_int_equal(cpu_dc1_cat_calls - cat_before, 2 * absorbed);
    }
  cpu_bn_stream_bytes = -1;
  up_ic = 32, skip_c = 32;
}

/* A kernel-k transposed convolution node's prep as a training plan makes it:
 * the input [2, ic, 7, w] in `tag`, stride k, padding pad (md and at hold
 * what the prep points to). */
static sp_op_prep up_prep(int bf16, int pad, int bias, int ic, int oc, int k, int w, dnnl_format_tag_t tag,
                          dnnl_memory_desc_t *md, sp_conv_transpose2d_attr *at) {
  dnnl_dims_t dims = {2, ic, 7, w};
  assert_int_equal(dnnl_memory_desc_init_by_tag(md, 4, dims, bf16 ? dnnl_bf16 : dnnl_f32, tag), dnnl_success);
  *at = (sp_conv_transpose2d_attr){k, k, pad, pad, 0, 0, 1, 1, 1};
  const int64_t oh = 7 * k - 2 * pad, ow = w * k - 2 * pad;
  return cmp_conv_prep(&sp_op_conv_transpose2d, at, sp_shape4(2, ic, 7, w), sp_shape4(2, oc, oh, ow),
                       sp_shape4(ic, oc, k, k), bias, bf16, md);
}

/* Taken for f32 channel blocks (16 with AVX-512, 8 with AVX2; an input in
 * another layout is reordered into them first), kernel = stride = 2, no
 * padding or bias, output channels a whole number of blocks and enough input
 * channels. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  /* The blocks oneDNN's f32 kernels take here: 16 channels with AVX-512, 8 below. */
  const dnnl_format_tag_t blk = sp_backend_cpu_avx512() ? dnnl_aBcd16b : dnnl_aBcd8b;
  const int narrow = direct_here(); /* the direct form takes 128 input channels in training */
  struct {
    int bf16, pad, bias, ic, oc, k;
    dnnl_format_tag_t tag;
    int want;
  } cases[] = {{0, 0, 0, 256, 32, 2, blk, 1},       {0, 0, 0, 128, 32, 2, blk, narrow}, {0, 1, 0, 256, 32, 2, blk, 0},
               {0, 0, 1, 256, 32, 2, blk, 0},       {0, 0, 0, 256, 20, 2, blk, 0},      {0, 0, 0, 256, 32, 3, blk, 0},
               {0, 0, 0, 256, 32, 2, dnnl_acdb, 1}, {1, 0, 0, 256, 32, 2, blk, 0}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    dnnl_memory_desc_t md;
    sp_conv_transpose2d_attr at;
    sp_op_prep p = up_prep(cases[t].bf16, cases[t].pad, cases[t].bias, cases[t].ic, cases[t].oc, cases[t].k, 7,
                           cases[t].tag, &md, &at);
    assert_int_equal(cpu_deconv_prepare(&p), 0);
    if (cpu_conv_deconv_1x1(p.state) != cases[t].want)
      fail_msg("case %zu: the 1x1 path %s", t, cases[t].want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
}

/* In a frozen plan with a batch norm (running statistics) after it, taken
 * below the width limit too: the shuffle replaces the batch norm's pass. */
static void taken_narrow_when_the_batch_norm_folds(void **st) {
  (void)st;
  cmp_require_cpu();
  for (int frozen = 0; frozen < 2; frozen++) {
    dnnl_memory_desc_t md;
    sp_conv_transpose2d_attr at;
    sp_op_prep p = up_prep(0, 0, 0, 64, 32, 2, 7, sp_backend_cpu_avx512() ? dnnl_aBcd16b : dnnl_aBcd8b, &md, &at);
    p.training = p.run_backward = p.need_d_in[0] = p.param_grad[0] = 0;
    p.frozen = frozen;
    p.consumer[0].op = &sp_op_batchnorm, p.consumer[0].n_state = 2;
    p.consumer[1].op = &sp_op_relu;
    assert_int_equal(cpu_deconv_prepare(&p), 0);
    /* Not frozen: nothing folds, and the direct form takes it where it runs. */
    assert_int_equal(cpu_conv_deconv_1x1(p.state), frozen || direct_here());
    assert_int_equal(p.absorb_consumer, frozen ? 2 : 0);
    cpu_node_free(p.state);
  }
}

/* ---- backward (deconv_1x1_bwd.c): dY's space-to-depth copy and two 1x1
 * products; with the input gradient written and added, the weight gradient
 * written and added. ---- */

/* Two up-layers read one value: the first's input gradient adds onto the
 * second's (whose backward runs first). */
static sp_value b_two_ups(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  sp_value a = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 16, .kernel = 2, .stride = 2});
  sp_value b = sp_conv_transpose2d(g, x, "up2", (sp_deconv_args){.out_ch = 16, .kernel = 2, .stride = 2});
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", (sp_conv_args){.out_ch = 3, .kernel = 1});
}

static void bwd_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  const long before = cpu_dcb_calls;
  cmp_case k = {"deconv backward as 1x1", b_up, 3, 3, 7, 5, 1, 0, 0, 0};
  cmp_run(&k);
  const long mid = cpu_dcb_calls;
  k = (cmp_case){"deconv backward as 1x1, input gradient added", b_two_ups, 2, 4, 6, 9, 1, 0, 0, 0};
  cmp_run(&k);
  printf("# 1x1-form deconvolution backward passes run: %ld, %ld\n", mid - before, cpu_dcb_calls - mid);
  assert_true(mid > before);
  assert_true(cpu_dcb_calls >= mid + 2);
}

/* A second backward without zero_grad adds the weight gradient onto the
 * first: twice the first (the accumulating reorder ran). */
static void bwd_weight_gradient_adds(void **st) {
  (void)st;
  cmp_require_cpu();
  const cmp_case k = {"deconv backward as 1x1, twice", b_up, 2, 3, 6, 4, 1, 0, 0, 0};
  const long before = cpu_dcb_calls;
  cmp_grad_adds_twice(&k, "up.weight", 7);
  assert_int_equal(cpu_dcb_calls, before + 2);
}

static void bwd_ours_or_onednn(int path) { cpu_deconv_1x1_bwd = path == 0; }

/* The same f32 products summed in another order: gradients agree closely
 * (and the 1x1 form ran for the first path only). */
static void bwd_same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  const cmp_case cases[] = {{"deconv backward 1x1 vs onednn", b_up, 3, 3, 7, 5, 1, 0, 0, 0},
                            {"deconv backward 1x1 vs onednn, added", b_two_ups, 2, 4, 6, 9, 1, 0, 0, 0}};
  for (int c = 0; c < 2; c++) {
    const long before = cpu_dcb_calls;
    cmp_two_paths(&cases[c], bwd_ours_or_onednn, 1e-5);
    assert_int_equal(cpu_dcb_calls - before, c == 0 ? 1 : 2);
  }
  cpu_deconv_1x1_bwd = 1;
}

/* Taken for f32 channel blocks (16 with AVX-512, 8 with AVX2), kernel =
 * stride = 2, no padding or bias, channels in whole blocks, in training; not
 * where the input is reordered first (its gradient would then be in another
 * layout than the product's). */
static void bwd_taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  const int avx512 = sp_backend_cpu_avx512();
  const dnnl_format_tag_t blk = avx512 ? dnnl_aBcd16b : dnnl_aBcd8b;
  struct {
    int bf16, pad, bias, ic, oc, k, backward, need_dx, need_dw;
    dnnl_format_tag_t tag;
    int want;
  } cases[] = {{0, 0, 0, 64, 32, 2, 1, 1, 1, blk, 1},       {0, 0, 0, 64, 32, 2, 1, 1, 0, blk, 1},
               {0, 0, 0, 64, 32, 2, 1, 0, 1, blk, 1},       {0, 0, 0, 64, 32, 2, 0, 0, 0, blk, 0},
               {0, 1, 0, 64, 32, 2, 1, 1, 1, blk, 0},       {0, 0, 1, 64, 32, 2, 1, 1, 1, blk, 0},
               {0, 0, 0, 64, 20, 2, 1, 1, 1, blk, 0},       {0, 0, 0, 36, 32, 2, 1, 1, 1, blk, 0},
               {0, 0, 0, 64, 24, 2, 1, 1, 1, blk, !avx512}, /* 3 blocks of 8, not whole blocks of 16 */
               {0, 0, 0, 64, 32, 3, 1, 1, 1, blk, 0},       {1, 0, 0, 64, 32, 2, 1, 1, 1, blk, 0},
               {0, 0, 0, 64, 32, 2, 1, 1, 1, dnnl_acdb, 0}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    dnnl_memory_desc_t md;
    sp_conv_transpose2d_attr at;
    sp_op_prep p = up_prep(cases[t].bf16, cases[t].pad, cases[t].bias, cases[t].ic, cases[t].oc, cases[t].k, 5,
                           cases[t].tag, &md, &at);
    p.training = p.run_backward = cases[t].backward;
    p.need_d_in[0] = cases[t].need_dx, p.param_grad[0] = cases[t].need_dw;
    assert_int_equal(cpu_deconv_prepare(&p), 0);
    if (cpu_conv_deconv_1x1_bwd(p.state) != cases[t].want)
      fail_msg("case %zu: the 1x1 backward %s", t, cases[t].want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(direct_against_ref_and_1x1),
             cmocka_unit_test(direct_concat), cmocka_unit_test(same_as_onednn),
             cmocka_unit_test(frozen_plans_follow_weight_changes), cmocka_unit_test(taken_where_it_applies),
             cmocka_unit_test(taken_narrow_when_the_batch_norm_folds), cmocka_unit_test(bwd_against_ref),
             cmocka_unit_test(bwd_weight_gradient_adds), cmocka_unit_test(bwd_same_as_onednn),
             cmocka_unit_test(bwd_taken_where_it_applies))
