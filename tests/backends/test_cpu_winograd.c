/* f32 3x3 stride-1 convolutions on oneDNN's Winograd kernels
 * (backends/cpu/conv.c, choose_algorithms): against the reference backend in
 * training and inference plans, against oneDNN's direct kernels on the same
 * values, in a frozen plan that folds the batch norm and ReLU into the
 * convolution, and taken only where the rule says. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* These tests are about oneDNN's kernels: the 16-lane Winograd of our own
 * (test_cpu_wino16.c), which would take the narrow layers, is held off. */
static void onednn_only(void) {
  cmp_require_cpu();
  cpu_wino16_on = 0;
}

/* oneDNN's Winograd kernels need AVX-512; elsewhere every case runs direct. */
static int has_winograd(void) { return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core; }

/* x (32 ch) -> 3x3 32 -> BN -> ReLU -> 3x3 40 with bias -> 1x1 3: both 3x3
 * layers qualify at batch 8, 12x12 (72 output tiles of 4x4). */
static sp_value b_two_3x3(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "a_bn"));
  x = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 40, .kernel = 3, .pad = 1, .bias = 1});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1});
}

/* x (64 ch) -> 3x3 64 -> ReLU -> 1x1 3: Winograd at batch 1 too. */
static sp_value b_wide_3x3(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1, .bias = 1}));
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1});
}

/* The gradient of a sum that cancels (a bias before a batch norm) is where
 * Winograd's extra rounding shows most: over the vgg-face 5-step test's
 * synced steps (release build), the worst gradient was 1.1e-4 of its
 * tensor's largest value, against 6.3e-5 on the direct kernels. */
static void against_ref(void **st) {
  (void)st;
  onednn_only();
  cmp_case k = {"winograd 3x3", b_two_3x3, 8, 32, 12, 12, 1, 0, 2e-4, 0};
  cmp_run(&k); /* training */
  k.training = 0;
  cmp_run(&k); /* inference */
}

static void winograd_or_direct(int path) { cpu_conv_winograd = path == 0; }

/* One training step on each kernel family, same parameters and inputs: the
 * loss and every gradient agree to f32 rounding. */
static void same_as_direct(void **st) {
  (void)st;
  onednn_only();
  cmp_case k = {"winograd vs direct", b_two_3x3, 8, 32, 12, 12, 1, 0, 0, 0};
  cmp_two_paths(&k, winograd_or_direct, 1e-5);
  cpu_conv_winograd = 1;
}

/* A frozen plan folds the batch norm into "a" and runs the ReLU as its
 * post-op, on the Winograd kernel: against the reference, at batch 8 and at
 * batch 1 (oneDNN's F(2x2, 3x3) inference kernel, from 64 channels). */
static void frozen_against_ref(void **st) {
  (void)st;
  onednn_only();
  cmp_case k = {"winograd frozen", b_two_3x3, 8, 32, 12, 12, 0, SP_PLAN_FROZEN, 2e-4, 0};
  cmp_run(&k);
  k = (cmp_case){"winograd frozen, batch 1", b_wide_3x3, 1, 64, 12, 12, 0, SP_PLAN_FROZEN, 2e-4, 0};
  cmp_run(&k);
}

/* ... and prepares its weights again after they change. */
static void frozen_plans_follow_weight_changes(void **st) {
  (void)st;
  onednn_only();
  cmp_case k = {"winograd frozen", b_wide_3x3, 1, 64, 12, 12, 0, 0, 0, 0};
  cmp_frozen_follows_weights(&k, "a.weight", -2.0f);
  k.n = 8;
  cmp_frozen_follows_weights(&k, "a.weight", 0.5f);
}

/* Which passes run on Winograd (bit 0 forward, 1 backward data, 2 backward
 * weights) for a training convolution of the given shape. */
static int passes(int n, int ic, int oc, int hw, int k, int stride, int bf16) {
  void *state = cmp_conv_node(n, ic, oc, hw, hw, k, stride, 0, bf16, dnnl_nChw16c);
  const int r = cpu_conv_winograd_passes(state);
  cpu_node_free(state);
  return r;
}

static void taken_where_it_applies(void **st) {
  (void)st;
  onednn_only();
  const int all = has_winograd() ? 7 : 0, fwd = has_winograd() ? 1 : 0;
  assert_int_equal(passes(8, 32, 32, 12, 3, 1, 0), all); /* 72 tiles: every pass */
  assert_int_equal(passes(2, 64, 64, 12, 3, 1, 0), fwd); /* 18 tiles: forward only */
  assert_int_equal(passes(1, 64, 64, 32, 3, 1, 0), all); /* batch 1 from 64 channels, 64 tiles ... */
  assert_int_equal(passes(1, 32, 32, 56, 3, 1, 0), 0);   /* ... not 32 */
  assert_int_equal(passes(8, 16, 32, 12, 3, 1, 0), 0);   /* too few input channels */
  assert_int_equal(passes(8, 32, 32, 12, 3, 2, 0), 0);   /* stride 2 */
  assert_int_equal(passes(8, 32, 32, 12, 1, 1, 0), 0);   /* 1x1 */
  assert_int_equal(passes(8, 32, 32, 12, 3, 1, 1), 0);   /* bf16 */
  cpu_conv_winograd = 0;
  assert_int_equal(passes(8, 32, 32, 12, 3, 1, 0), 0);
  cpu_conv_winograd = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_direct), cmocka_unit_test(frozen_against_ref),
             cmocka_unit_test(frozen_plans_follow_weight_changes), cmocka_unit_test(taken_where_it_applies))
