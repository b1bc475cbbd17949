/* The input gradient of bf16 channels-last 3x3 stride-2 convolutions as a
 * 2x2 forward convolution into dX's four parity phases
 * (backends/cpu/conv_s2_dx.c): against the reference backend, against
 * oneDNN's backward-data kernel on the same values (the gradient written
 * fresh and added onto another consumer's), and taken where the rule says. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* vgg-face's second layer: 8 channels in, stride 2, then a head. The
 * stride-2 layer's input gradient reaches "pre"'s weight gradient. */
static sp_value b_narrow(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "pre_bn"));
  x = sp_conv2d(g, x, "down", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
  return sp_conv2d(g, sp_relu(g, x), "post", (sp_conv_args){.out_ch = 3, .kernel = 1});
}

/* Two stride-2 layers read one value: the second gradient adds onto the
 * first (the phases added into dX, not written). 32 -> 48 and 32 -> 32,
 * with a bias. */
static sp_value b_two_readers(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  sp_value a = sp_conv2d(g, x, "down_a", (sp_conv_args){.out_ch = 48, .kernel = 3, .stride = 2, .pad = 1});
  sp_value b = sp_conv2d(g, x, "down_b", (sp_conv_args){.out_ch = 48, .kernel = 3, .stride = 2, .pad = 1, .bias = 1});
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", (sp_conv_args){.out_ch = 4, .kernel = 1});
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"s2 dx narrow", b_narrow, 4, 3, 14, 10, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  k = (cmp_case){"s2 dx two readers", b_two_readers, 2, 5, 12, 16, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
}

static void phases_or_onednn(int path) { cpu_conv_use_s2_dx = path == 0; }

/* The same bf16 products summed in f32 on both paths, in another order:
 * gradients agree to a few bf16 roundings of the input gradient (which the
 * layers before it then carry). */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"s2 dx narrow vs onednn", b_narrow, 4, 3, 14, 10, 1, SP_PLAN_BF16, 0, 0};
  cmp_two_paths(&k, phases_or_onednn, 5e-3);
  k = (cmp_case){"s2 dx two readers vs onednn", b_two_readers, 2, 5, 12, 16, 1, SP_PLAN_BF16, 0, 0};
  cmp_two_paths(&k, phases_or_onednn, 5e-3);
  cpu_conv_use_s2_dx = 1;
}

/* With AMX, oneDNN's bf16 kernels keep channels-last activations and have a
 * brgemm forward kernel for the 2x2 product. */
static int amx(void) { return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_amx; }

/* Whether a training convolution of this shape, its input channels-last in
 * the given dtype, takes the phase path. */
static int taken(int ic, int oc, int h, int w, int k, int stride, int bf16) {
  void *state = cmp_conv_node(2, ic, oc, h, w, k, stride, 0, bf16, dnnl_acdb);
  const int r = cpu_conv_uses_s2_dx(state);
  cpu_node_free(state);
  return r;
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_require_bf16(); /* bf16 nodes: below AVX-512 oneDNN has none, and the node would be the plain adapter */
  const int yes = amx();
  assert_int_equal(taken(8, 16, 14, 10, 3, 2, 1), yes);
  assert_int_equal(taken(256, 256, 18, 18, 3, 2, 1), yes); /* at 8 x 8 in: conv_col_mm.c (few positions) */
  assert_int_equal(taken(512, 512, 8, 8, 3, 2, 1), 0); /* W2 costs what it saves */
  assert_int_equal(taken(8, 16, 13, 10, 3, 2, 1), 0);  /* odd height */
  assert_int_equal(taken(12, 16, 14, 10, 3, 2, 1), 0); /* channels not a multiple of 8 */
  assert_int_equal(taken(8, 16, 14, 10, 3, 1, 1), 0);  /* stride 1 */
  assert_int_equal(taken(8, 16, 14, 10, 1, 2, 1), 0);  /* 1x1 */
  assert_int_equal(taken(8, 16, 14, 10, 3, 2, 0), 0);  /* f32 */
  cpu_conv_use_s2_dx = 0;
  assert_int_equal(taken(8, 16, 14, 10, 3, 2, 1), 0);
  cpu_conv_use_s2_dx = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn),
             cmocka_unit_test(taken_where_it_applies))
