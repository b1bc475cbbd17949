/* The first convolution on the plain image as loops of our own
 * (backends/cpu/conv_stem.c), in bf16 training plans and in inference plans
 * (f32 and bf16, frozen ones with the batch norm and ReLU after it folded
 * in): against the reference backend and, tightly, against oneDNN's
 * convolution on the same values, over grey and colour inputs, strides 1-3,
 * padding, dilation, bias and odd sizes (the last group of 8 positions
 * partial); and taken only where it applies. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* Each stem feeds BN + ReLU and a 3x3 conv, as in vgg-face. */
static sp_value tail(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_batchnorm(g, x, "bn"));
  return sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
}
static sp_value b_grey_s2(sp_graph *g, sp_value x) {
  return tail(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1}));
}
static sp_value b_colour_bias(sp_graph *g, sp_value x) {
  return tail(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1, .bias = 1}));
}
static sp_value b_grey_k5_s3(sp_graph *g, sp_value x) {
  return tail(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 24, .kernel = 5, .stride = 3, .pad = 2}));
}
static sp_value b_two_dilated(sp_graph *g, sp_value x) {
  return tail(g,
              sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 2, .dilation = 2}));
}

typedef struct {
  const char *label;
  cmp_build_fn body;
  int c, h, w;
} stem_case;

static const stem_case cases[] = {
    {"grey 3x3 s2", b_grey_s2, 1, 23, 37},
    {"colour 3x3 bias", b_colour_bias, 3, 9, 19},
    {"grey 5x5 s3", b_grey_k5_s3, 1, 20, 29},
    {"two channels dilated", b_two_dilated, 2, 17, 21},
};

/* Plans: bf16 training; inference in f32 and bf16, frozen (the batch norm
 * and ReLU folded into the stem) and not. */
static const struct {
  int training;
  unsigned flags;
  double tol;
} plans[] = {{1, SP_PLAN_BF16, 6e-2},
             {0, SP_PLAN_FROZEN, 1e-4},
             {0, SP_PLAN_FROZEN | SP_PLAN_BF16, 6e-2},
             {0, 0, 1e-4},
             {0, SP_PLAN_BF16, 6e-2}};

/* The library's default, read before any test changes it and put back
 * after each test that does. */
static int f32_infer_default = -1;
static void remember_default(void) {
  if (f32_infer_default < 0) f32_infer_default = cpu_conv_stem_f32_infer;
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  remember_default();
  cpu_conv_stem_infer_max_oc = 64; /* every case in inference too */
  cpu_conv_stem_f32_infer = 1;     /* f32 too, where the build would leave it to oneDNN */
  cpu_conv_stem_train_amx = 1;     /* bf16 training too, where AMX would take the weight gradient */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t m = 0; m < sizeof plans / sizeof plans[0]; m++) {
      cmp_case k = {cases[i].label, cases[i].body, 3, cases[i].c, cases[i].h, cases[i].w, plans[m].training,
                    plans[m].flags, plans[m].tol,  0};
      cmp_run(&k);
    }
  cpu_conv_stem_infer_max_oc = 8;
  cpu_conv_stem_f32_infer = f32_infer_default;
  cpu_conv_stem_train_amx = 0;
}

static void stem_or_onednn(int path) { cpu_conv_use_stem = path == 0; }

/* One bf16 training step with the stem kernels and one with oneDNN's, same
 * parameters and inputs: output and every parameter gradient agree to f32
 * summation order. */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  cpu_conv_stem_train_amx = 1;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cmp_case k = {cases[c].label, cases[c].body, 3, cases[c].c, cases[c].h, cases[c].w, 1, SP_PLAN_BF16, 0, 0};
    cmp_two_paths(&k, stem_or_onednn, 5e-3);
  }
  cpu_conv_stem_train_amx = 0;
}

/* Inference plans (frozen or not, f32 or bf16), the stem's and oneDNN's,
 * same parameters (batch norm statistics away from 0 and 1) and inputs:
 * outputs agree to summation order in f32, to a bf16 rounding of a few
 * values in bf16 (both round the folded weights and the output to bf16). */
static void inference_same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  /* Outputs from half the last-level cache stream past the caches: here
   * the default (these small ones do not), then every output. */
  remember_default();
  cpu_conv_stem_infer_max_oc = 64; /* every case */
  cpu_conv_stem_f32_infer = 1;
  for (int stream = 0; stream < 2; stream++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      for (size_t m = 1; m < sizeof plans / sizeof plans[0]; m++) {
        cpu_bn_stream_bytes = stream ? 0 : -1;
        const int bf16 = (plans[m].flags & SP_PLAN_BF16) != 0;
        if (bf16 && !cmp_bf16_here()) continue;
        cmp_case k = {cases[c].label, cases[c].body, 3, cases[c].c, cases[c].h, cases[c].w, 0, plans[m].flags, 0, 0};
        sp_shape ys = cmp_out_shape(&k);
        sp_graph *g[2];
        sp_plan *p[2];
        for (int path = 0; path < 2; path++) {
          stem_or_onednn(path);
          sp_value y;
          g[path] = cmp_graph(&k, &y);
          cmp_fill_params(g[path], 500u);
          p[path] = cmp_plan(&k, g[path], &ys, SP_BACKEND_CPU, k.flags);
          cmp_fill(p[path], 7, 0);
          assert_int_equal(sp_plan_forward(p[path]), 0);
        }
        stem_or_onednn(0);
        const double d = cmp_rel_l2(sp_plan_output(p[0], "y"), sp_plan_output(p[1], "y")), tol = bf16 ? 1e-2 : 1e-5;
        printf("# [%s] inference flags %u, stream %d: the two paths differ by %.3g (relative L2)\n", k.label, k.flags,
               stream, d);
        if (!(d <= tol))
          fail_msg("[%s] inference flags %u, stream %d: the paths differ by %.3g", k.label, k.flags, stream, d);
        for (int path = 0; path < 2; path++) sp_plan_free(p[path]), sp_graph_free(g[path]);
      }
  cpu_bn_stream_bytes = -1;
  cpu_conv_stem_infer_max_oc = 8;
  cpu_conv_stem_f32_infer = f32_infer_default;
}

/* Taken for a bf16 training plan's conv on the plain image with few
 * channels, a small window and output channels in groups of 8 (where AMX
 * would take its weight gradient, only with cpu_conv_stem_train_amx), and for an
 * inference plan's with 8 output channels (bf16; f32 where
 * cpu_conv_stem_f32_infer: AVX-512 builds, or switched on); not for f32
 * training, a training plan's forward alone, inference with 32 output
 * channels, a wide input, a 7x7 colour window or 12 output channels. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  remember_default();
#ifdef __AVX512F__
  assert_int_equal(f32_infer_default, 1);
#else
  assert_int_equal(f32_infer_default, 0);
#endif
  struct {
    int bf16, backward, training, ic, kernel, oc, f32_infer, want;
  } t[] = {{1, 1, 1, 1, 3, 8, 0, 1}, {1, 1, 1, 3, 3, 64, 0, 1}, {0, 1, 1, 1, 3, 8, 1, 0},  {1, 0, 1, 1, 3, 8, 1, 0},
           {1, 0, 0, 1, 3, 8, 0, 1}, {0, 0, 0, 3, 3, 8, 1, 1},  {0, 0, 0, 3, 3, 8, 0, 0},  {0, 0, 0, 3, 3, 32, 1, 0},
           {1, 1, 1, 8, 3, 8, 1, 0}, {1, 1, 1, 3, 7, 64, 1, 0}, {1, 1, 1, 1, 3, 12, 1, 0}, {0, 0, 0, 1, 3, 12, 1, 0}};
  cpu_conv_stem_train_amx = 1; /* the table: the other conditions; the AMX rule after it */
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    cpu_conv_stem_f32_infer = t[i].f32_infer;
    sp_conv2d_attr at = {2, 2, 1, 1, 1, 1, 1};
    const int64_t out = (32 + 2 - t[i].kernel) / 2 + 1;
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, t[i].ic, 32, 32), sp_shape4(2, t[i].oc, out, out),
                                 sp_shape4(t[i].oc, t[i].ic, t[i].kernel, t[i].kernel), 0, t[i].bf16, NULL);
    p.run_backward = t[i].backward, p.training = t[i].training, p.need_d_in[0] = 0; /* the image: no gradient */
    assert_int_equal(cpu_conv_prepare(&p), 0);
    if (cpu_conv_is_stem(p.state) != t[i].want) fail_msg("case %zu: stem %s", i, t[i].want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
  /* bf16 training, colour 3x3 -> 32 (ResUNet-50's stem): left to the AMX
   * weight gradient where it applies, unless switched on. */
  for (int amx = 0; amx < 2; amx++) {
    cpu_conv_stem_train_amx = amx;
    sp_conv2d_attr at = {2, 2, 1, 1, 1, 1, 1};
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, 3, 32, 32), sp_shape4(2, 32, 16, 16),
                                 sp_shape4(32, 3, 3, 3), 0, 1, NULL);
    p.run_backward = p.training = 1, p.need_d_in[0] = 0;
    assert_int_equal(cpu_conv_prepare(&p), 0);
    const int want = amx || !cpu_bww_small_applies(3, 32, 3, 3);
    printf("# colour 3 -> 32 bf16 training, cpu_conv_stem_train_amx %d, AMX weight gradient %s: stem %s\n", amx,
           cpu_bww_small_applies(3, 32, 3, 3) ? "applies" : "does not apply", want ? "taken" : "not taken");
    if (cpu_conv_is_stem(p.state) != want) fail_msg("colour 3 -> 32, switch %d: stem %s", amx, want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
  cpu_conv_stem_train_amx = 0;
  cpu_conv_stem_f32_infer = f32_infer_default;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn),
             cmocka_unit_test(inference_same_as_onednn), cmocka_unit_test(taken_where_it_applies))
