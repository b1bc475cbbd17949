/* The direct 3x3 kernel of frozen plans on 8-channel blocks
 * (backends/cpu/conv_direct8.c), with oneDNN held to AVX2 so that it runs
 * on any machine: against the reference backend in frozen plans (a batch
 * norm and ReLU folded, a bias, neither), stride 1 and 2 on even and odd
 * sizes (windows past every edge, a stride-2 output short of the input's
 * last row), one image and several, groups of 6, 5 and fewer positions;
 * against oneDNN's direct kernel on the same values; and taken only where
 * it applies. */
#include <stdlib.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* image -> 1x1 64 -> 3x3 64 (BN, ReLU: folded) -> 3x3/2 128 with a bias
 * and ReLU -> 3x3 32 plain -> 1x1 head: the three 3x3 layers ours. */
static sp_value deep_stack(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "in", (sp_conv_args){.out_ch = 64, .kernel = 1}));
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "c1", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1}), "bn1"));
  x = sp_relu(g, sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 128, .kernel = 3, .stride = 2, .pad = 1, .bias = 1}));
  x = sp_conv2d(g, x, "c3", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  return sp_conv2d(g, sp_relu(g, x), "head", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const int64_t max_positions = cpu_direct8_max_positions;
  cpu_direct8_max_positions = 1 << 20; /* every size here, */
  cpu_wino_own = 0;                    /* the stride-1 ones too */
  /* 7x7: layer4's shape (49 = 4 groups of 6 + 5 of 5); 13x10 and 5x3: odd,
   * the stride-2 windows past the bottom and right edges; 8x6 at batch 3:
   * an even input whose stride-2 output stops short of its last row; 1x2:
   * groups of one and two positions. */
  static const int sizes[][3] = {{1, 7, 7}, {2, 13, 10}, {1, 5, 3}, {3, 8, 6}, {1, 1, 2}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char label[64];
    snprintf(label, sizeof label, "direct8, frozen, %dx%dx%d", sizes[i][0], sizes[i][1], sizes[i][2]);
    const cmp_case k = {label, deep_stack, sizes[i][0], 5, sizes[i][1], sizes[i][2], 0, SP_PLAN_FROZEN, 0, 0};
    cmp_run_counted(&k, &cpu_direct8_calls, 3, "direct 3x3 products");
  }
  cpu_direct8_max_positions = max_positions, cpu_wino_own = 1;
}

static void ours_or_onednn(int path) { cpu_direct8_on = path == 0; }

/* Within f32 rounding of oneDNN's direct kernel on the same values (often
 * equal to the bit: its AVX2 kernel sums the taps in the same order, so the
 * count shows that ours ran). */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const long before = cpu_direct8_calls;
  const cmp_case k = {"direct8 vs onednn", deep_stack, 1, 5, 9, 11, 0, SP_PLAN_FROZEN, 0, 0};
  cmp_two_paths_with(&k, ours_or_onednn, 2e-5, NULL);
  assert_int_equal(cpu_direct8_calls - before, 3); /* c1, c2 and c3 of the first plan only */
  cpu_direct8_on = 1;
}

/* A frozen plan's f32 convolution node on 8-channel blocks (no batch norm
 * after it): 1 when its forward is ours. */
static int frozen_direct8(int ic, int oc, int k, int stride, int n, int hw) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {n, ic, hw, hw};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_aBcd8b), dnnl_success);
  const int pad = k / 2, o = (hw + 2 * pad - k) / stride + 1;
  sp_conv2d_attr at = {stride, stride, pad, pad, 1, 1, 1};
  sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(n, ic, hw, hw), sp_shape4(n, oc, o, o),
                               sp_shape4(oc, ic, k, k), 0, 0, &md);
  p.training = p.run_backward = 0, p.frozen = 1, p.param_grad[0] = 0, p.need_d_in[0] = 0;
  assert_int_equal(cpu_conv_prepare(&p), 0);
  const int got = cpu_conv_direct8(p.state);
  cpu_node_free(p.state);
  return got;
}

/* f32 3x3 stride 1 or 2 in frozen plans where Winograd does not take it, up
 * to 256 output positions, from
 * 64 input channels, output channels in 16s; not 1x1, not below 64 input
 * channels, not over 256 positions (batch included), not with the switch
 * off, and not in a training plan. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  static const int cases[][7] = {
      /* ic, oc, k, stride, n, hw, want */
      {512, 512, 3, 1, 1, 7, 1},  {512, 512, 3, 2, 1, 14, 1}, {256, 256, 3, 2, 1, 28, 1},
      {64, 64, 3, 1, 1, 12, 1},   {512, 512, 1, 1, 1, 7, 0},  {32, 64, 3, 1, 1, 7, 0},
      {512, 512, 3, 1, 2, 14, 0}, {512, 512, 3, 1, 8, 7, 0},  {64, 40, 3, 1, 1, 7, 0},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    const int *c = cases[t], got = frozen_direct8(c[0], c[1], c[2], c[3], c[4], c[5]);
    if (got != c[6])
      fail_msg("case %zu (%d -> %d, k %d, stride %d, batch %d, %d px): %d, want %d", t, c[0], c[1], c[2], c[3], c[4],
               c[5], got, c[6]);
  }
  cpu_direct8_on = 0;
  assert_int_equal(frozen_direct8(512, 512, 3, 1, 1, 7), 0);
  cpu_direct8_on = 1;
  void *s = cmp_conv_node(1, 512, 512, 7, 7, 3, 1, 0, 0, dnnl_aBcd8b); /* training */
  assert_int_equal(cpu_conv_direct8(s), 0);
  cpu_node_free(s);
}

CMP_AVX2_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn), cmocka_unit_test(taken_where_it_applies))
#else
CMP_CPU_MAIN()
#endif
