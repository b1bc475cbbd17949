/* The cpu backend with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA, set before
 * oneDNN first asks the CPU): what a machine without AVX-512 (AMD Zen 3,
 * Intel before Skylake-SP) gets, checked on any machine.
 *
 *   - bf16 plans are refused, with the reason naming the instruction set;
 *     a keypoint config's `precision: bf16` trains in f32 after a warning;
 *   - f32 models match the reference backend: oneDNN's kernels take
 *     8-channel blocks there, and every path of ours built for 16-channel
 *     blocks must decline them (or take them) and still be right.
 *
 * Our own kernels are compiled for this machine, so on an AVX-512 machine
 * they keep their AVX-512 code: `make avx2-check` builds the whole suite with
 * -march=haswell as well. */
#include <stdlib.h>
#include <string.h>

#include "backend_compare.h"
#include "spry/models.h"

#ifdef SPRY_HAVE_DNNL
#include "train/config_shared.h"

static void bf16_refused_with_the_reason(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  assert_int_equal(sp_backend_cpu_avx512(), 0);
  assert_string_equal(sp_backend_cpu_isa(), "AVX2");
  assert_int_equal(sp_backend_bf16(SP_BACKEND_CPU), 0);
  assert_non_null(strstr(sp_last_error(), "AVX-512"));
  assert_non_null(strstr(sp_last_error(), "AVX2"));
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "x", SP_F32, 3);
  sp_graph_output(g, sp_relu(g, sp_conv2d(g, x, "c", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1})), "y");
  sp_input_shape in = {"x", sp_shape4(1, 3, 8, 8)};
  assert_null(sp_plan_new(g, 1, &in, SP_BACKEND_CPU, 0, SP_PLAN_BF16));
  assert_non_null(strstr(sp_last_error(), "AVX2"));
  sp_plan *p = sp_plan_new(g, 1, &in, SP_BACKEND_CPU, 0, 0); /* f32: made */
  assert_non_null(p);
  sp_plan_free(p);
  sp_graph_free(g);
  /* A run config's bf16: f32 plans, once warned, and no error left behind. */
  assert_int_equal(sp_config_precision_flags("bf16", SP_BACKEND_CPU), 0);
  assert_string_equal(sp_last_error(), "no error recorded");
  assert_int_equal(sp_config_precision_flags("f32", SP_BACKEND_CPU), 0);
}

/* A residual stage, a U-Net up-layer with a concat, and ResUNet-18's
 * heatmap head and soft-argmax at a small width: the layers whose paths of
 * ours were built for 16-channel blocks (batch norm with the add, deconv as
 * 1x1, concat rows, the fused head). */
static sp_value b_residual_up(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}), "bn0"));
  sp_value y = sp_batchnorm(g, sp_conv2d(g, x, "c1", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}), "bn1");
  x = sp_relu(g, sp_add(g, y, x));
  sp_value d = sp_conv2d(g, x, "down", (sp_conv_args){.out_ch = 64, .kernel = 3, .stride = 2, .pad = 1});
  sp_value u = sp_conv_transpose2d(g, d, "up", (sp_deconv_args){.out_ch = 32, .kernel = 2, .stride = 2});
  u = sp_relu(g, sp_batchnorm(g, u, "up_bn"));
  sp_value both[2] = {u, x};
  x = sp_concat(g, 2, both);
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}
/* No bias on the head: soft-argmax is blind to a constant added to a
 * heatmap, so its gradient is rounding noise on both backends. */
static sp_value b_head(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  return sp_softargmax(g, sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 5, .kernel = 1}), 1.0f);
}

static void f32_against_ref(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  for (int training = 1; training >= 0; training--) {
    cmp_case k = {"residual + up-layer, AVX2", b_residual_up, 2, 3, 12, 10, training, 0, 0, 0};
    cmp_run(&k);
    k = (cmp_case){"heatmap head, AVX2", b_head, 2, 3, 11, 9, training, 0, 0, 0};
    cmp_run(&k);
  }
  cmp_case k = {"residual + up-layer, AVX2, frozen", b_residual_up, 2, 3, 12, 10, 0, SP_PLAN_FROZEN, 0, 0};
  cmp_run(&k);
}

CMP_AVX2_MAIN(cmocka_unit_test(bf16_refused_with_the_reason), cmocka_unit_test(f32_against_ref))
#else
CMP_CPU_MAIN()
#endif
