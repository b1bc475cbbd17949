/* Transposed convolutions with kernel = stride as matrix products in bf16
 * plans (backends/cpu/deconv_mm.c): against the reference backend, against
 * oneDNN's deconvolution on the same bf16 values (tightly), with the input
 * gradient written fresh and added onto another consumer's, for k = 2 and
 * k = 3, in training and inference plans; and taken only where it applies. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* x -> conv3 (channels-last bf16) -> deconv k2s2 -> 1x1 post. */
static sp_value b_up2(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 24, .kernel = 3, .pad = 1});
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 20, .kernel = 2, .stride = 2});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* k = s = 3, and the deconv's input also feeds a 1x1 path that is upsampled
 * and added: the deconv is not the first writer of its input's gradient. */
static sp_value b_up3_shared(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1});
  sp_value a = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 8, .kernel = 3, .stride = 3});
  sp_value b = sp_upsample(g, sp_conv2d(g, x, "side", (sp_conv_args){.out_ch = 8, .kernel = 1}), 3, 0);
  return sp_conv2d(g, sp_relu(g, sp_add(g, b, a)), "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

static void against_ref(cmp_build_fn body, const char *label, int h, int w) {
  cmp_case k = {label, body, 3, 3, h, w, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k); /* training */
  k.training = 0;
  cmp_run(&k); /* inference */
}

static void up2_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_deconv_mm_min_channels = 1;
  against_ref(b_up2, "deconv k2 products", 7, 5);
  cpu_deconv_mm_min_channels = 1 << 30; /* oneDNN's deconvolution, same case */
  against_ref(b_up2, "deconv k2 oneDNN", 7, 5);
  cpu_deconv_mm_min_channels = 128;
}

static void up3_shared_input_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_deconv_mm_min_channels = 1;
  against_ref(b_up3_shared, "deconv k3, shared input", 6, 4);
  cpu_deconv_mm_min_channels = 128;
}

static void products_or_onednn(int path) { cpu_deconv_mm_min_channels = path == 0 ? 1 : 1 << 30; }

/* One bf16 training step with the products and one with oneDNN's
 * deconvolution, same parameters and inputs: the output and every parameter
 * gradient agree to f32 summation order (both sum bf16 products in f32). */
static void products_match_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"k2", b_up2, 3, 3, 9, 7, 1, SP_PLAN_BF16, 0, 0};
  cmp_two_paths(&k, products_or_onednn, 5e-3);
  k = (cmp_case){"k3, shared input", b_up3_shared, 3, 3, 6, 4, 1, SP_PLAN_BF16, 0, 0};
  cmp_two_paths(&k, products_or_onednn, 5e-3);
  cpu_deconv_mm_min_channels = 128;
}

/* A frozen inference plan prepares the bf16 weights once and again after
 * sp_plan_params_changed: its output equals a plain plan's before and after
 * the deconvolution's weights change, and the change shows. */
static void frozen_plans_follow_weight_changes(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_deconv_mm_min_channels = 1;
  cmp_case k = {"frozen", b_up2, 2, 3, 7, 5, 0, SP_PLAN_BF16, 0, 0};
  cmp_frozen_follows_weights(&k, "up.weight", -2.0f);
  cpu_deconv_mm_min_channels = 128;
}

/* Taken for bf16 channels-last inputs with kernel = stride and enough input
 * channels; not for f32, padding, a bias or narrow layers. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_require_bf16(); /* a bf16 path: bf16 runs from AVX-512 on */
  struct { int bf16, pad, bias, ic, want; } cases[] = {
      {1, 0, 0, 256, 1}, {0, 0, 0, 256, 0}, {1, 1, 0, 256, 0}, {1, 0, 1, 256, 0}, {1, 0, 0, 64, 0}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {2, cases[t].ic, 7, 7};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, cases[t].bf16 ? dnnl_bf16 : dnnl_f32, dnnl_acdb),
                     dnnl_success);
    sp_conv_transpose2d_attr at = {2, 2, cases[t].pad, cases[t].pad, 0, 0, 1, 1, 1};
    const int64_t out = 14 - 2 * cases[t].pad;
    sp_op_prep p = cmp_conv_prep(&sp_op_conv_transpose2d, &at, sp_shape4(2, cases[t].ic, 7, 7),
                                 sp_shape4(2, 32, out, out), sp_shape4(cases[t].ic, 32, 2, 2), cases[t].bias,
                                 cases[t].bf16, &md);
    assert_int_equal(cpu_deconv_prepare(&p), 0);
    if (cpu_deconv_uses_matmul(p.state) != cases[t].want) fail_msg("case %zu: products %s", t, cases[t].want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(up2_against_ref), cmocka_unit_test(up3_shared_input_against_ref),
             cmocka_unit_test(products_match_onednn), cmocka_unit_test(frozen_plans_follow_weight_changes),
             cmocka_unit_test(taken_where_it_applies))
