/* sp_plan_zero_grad (graph/exec.c) on the cpu backend: gradients whose first
 * writer overwrites them when told (linear as matmuls or sgemm; the stem;
 * oneDNN's convolutions; 1x1 convolutions as matmuls or thin sums; im2col
 * weight gradients; transposed convolutions as matmuls; weights and biases)
 * are left alone and marked, every other one (batch norm's) is zeroed; the step's gradients then equal those
 * of sp_graph_zero_grad + backward, from gradients full of stale values;
 * the marks are spent by that backward, so a second one adds; and a
 * parameter no backward reaches is still zeroed. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

enum { N = 4, HW = 32, POINTS = 5 };

/* A vgg-face in small: stem (bias) -> BN -> ReLU -> 3x3 conv, then (bf16
 * paths in brackets) 1x1 16 -> 8 (thin sums), 1x1 8 -> 64 with bias
 * (matmul), 3x3 64 -> 16 (im2col), 2x2 stride-2 transposed conv 16 -> 8
 * (matmuls) -> flatten -> linear (bias) -> L1 loss; "side", an output no
 * loss reaches. */
static sp_graph *net(void) {
  sp_graph *g = sp_graph_new(11);
  sp_value x = sp_graph_input(g, "image", SP_F32, 1);
  sp_value t = sp_graph_input(g, "points", SP_F32, 2 * POINTS);
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1, .bias = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn"));
  x = sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_conv2d(g, x, "thin", (sp_conv_args){.out_ch = 8, .kernel = 1});
  x = sp_conv2d(g, x, "wide", (sp_conv_args){.out_ch = 64, .kernel = 1, .bias = 1});
  x = sp_conv2d(g, x, "c3", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1});
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 8, .kernel = 2, .stride = 2});
  x = sp_flatten(g, x);
  sp_value y = sp_linear(g, x, "fc", 8 * (HW / 2) * (HW / 2), 2 * POINTS, 1);
  sp_graph_output(g, sp_linear(g, x, "side", 8 * (HW / 2) * (HW / 2), 3, 1), "side");
  sp_graph_loss(g, sp_l1_loss(g, y, t), 1.0f);
  assert_null(sp_graph_error(g));
  return g;
}

static sp_plan *plan(sp_graph *g, unsigned flags) {
  sp_input_shape in[2] = {{"image", sp_shape4(N, 1, HW, HW)}, {"points", sp_shape2(N, 2 * POINTS)}};
  sp_plan *p = sp_plan_new(g, 2, in, SP_BACKEND_CPU, 1, flags | SP_PLAN_POISON);
  if (!p) fail_msg("plan: %s", sp_last_error());
  sp_test_rng r = {5};
  sp_tensor *x = sp_plan_input(p, "image"), *t = sp_plan_input(p, "points");
  sp_test_fill_uniform(&r, x->data, sp_tensor_numel(x), 0, 1);
  sp_test_fill_uniform(&r, t->data, sp_tensor_numel(t), -1, 1);
  return p;
}

/* Stale values, as a previous step leaves them. */
static void dirty(sp_graph *g) {
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    sp_tensor *gr = sp_graph_param_grad(g, i);
    if (!gr) continue;
    float *d = gr->data;
    for (int64_t k = 0; k < sp_tensor_numel(gr); k++) d[k] = 1000.0f + (float)(k % 7);
  }
}

static int all_zero(const sp_tensor *t) {
  const float *d = t->data;
  for (int64_t k = 0; k < sp_tensor_numel(t); k++)
    if (d[k] != 0.0f) return 0;
  return 1;
}

static void run(sp_plan *p) {
  assert_int_equal(sp_plan_forward(p), 0);
  assert_int_equal(sp_plan_backward(p), 0);
}

/* Every gradient of a and b within tol * max |a| (the oneDNN products that
 * write and those that add may block their sums differently). */
static void same_grads(sp_graph *a, sp_graph *b, const char *label) {
  for (int i = 0; i < sp_graph_param_count(a); i++) {
    const sp_tensor *ga = sp_graph_param_grad(a, i), *gb = sp_graph_param_grad(b, i);
    if (!ga) continue;
    const float *x = ga->data, *y = gb->data;
    double err = 0, mx = 0;
    for (int64_t k = 0; k < sp_tensor_numel(ga); k++) {
      const double d = fabs((double)x[k] - y[k]);
      err = d > err || d != d ? d : err;
      mx = fabs(x[k]) > mx ? fabs(x[k]) : mx;
    }
    printf("# [%s] grad.%s: max |difference| %.3g (max |grad| %.3g)\n", label, sp_graph_param_name(a, i), err, mx);
    if (!(err <= 1e-6 * mx + 1e-12)) fail_msg("[%s] grad.%s differs by %.3g", label, sp_graph_param_name(a, i), err);
  }
}

static void check(unsigned flags, const char *label, const char *const *marked, int n_marked) {
  sp_graph *ga = net(), *gb = net();
  sp_plan *pa = plan(ga, flags), *pb = plan(gb, flags);
  dirty(ga), dirty(gb);
  sp_graph_zero_grad(ga);
  sp_plan_zero_grad(pb);
  /* Marked: left as they were; all others zero (side's too). */
  for (int i = 0; i < sp_graph_param_count(gb); i++) {
    const sp_tensor *gr = sp_graph_param_grad(gb, i);
    if (!gr) continue;
    int want_marked = 0;
    for (int m = 0; m < n_marked; m++) want_marked |= !strcmp(marked[m], sp_graph_param_name(gb, i));
    if (want_marked == all_zero(gr))
      fail_msg("[%s] grad.%s: %s after sp_plan_zero_grad", label, sp_graph_param_name(gb, i),
               want_marked ? "zeroed, not left for its first writer" : "not zeroed");
  }
  run(pa), run(pb);
  same_grads(ga, gb, label);
  run(pa), run(pb); /* the marks are spent: both add */
  same_grads(ga, gb, label);
  sp_plan_free(pa), sp_plan_free(pb);
  sp_graph_free(ga), sp_graph_free(gb);
}

static const char *const marked[] = {"stem.weight", "stem.bias", "c2.weight", "thin.weight", "wide.weight",
                                     "wide.bias",   "c3.weight", "up.weight", "fc.weight",   "fc.bias"};

static void bf16_plans(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_require_bf16();
  const int64_t min_channels = cpu_deconv_mm_min_channels;
  cpu_deconv_mm_min_channels = 16; /* "up" as matmuls too */
  check(SP_PLAN_BF16 | SP_PLAN_LOSS_ONLY, "bf16", marked, sizeof marked / sizeof marked[0]);
  cpu_deconv_mm_min_channels = min_channels;
}

static void f32_plans(void **st) {
  (void)st;
  cmp_require_cpu();
  check(SP_PLAN_LOSS_ONLY, "f32", marked, sizeof marked / sizeof marked[0]);
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(bf16_plans), cmocka_unit_test(f32_plans))
