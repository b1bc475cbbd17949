/* The bf16 inference plans' 3x3 convolution from a narrow channels-last
 * input as a loop of our own (backends/cpu/conv_narrow.c): after a stem
 * writing 8 channels-last channels, as in vgg-face, against the
 * reference backend and, tightly, against oneDNN's convolution on the same
 * values; frozen plans (the batch norm and ReLU after it folded in) and
 * not, strides 1 and 2, a bias, 16, 32, 48 and 64 output channels, widths whose
 * last group of positions is short (at most 8) or long, batch 1 and 3; f32
 * plans (oneDNN's there) alongside; and taken only where it applies. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/conv_narrow.h"
#include "backends/cpu/cpu.h"

/* stem (channels-last, c channels) -> BN -> ReLU -> the narrow conv -> BN
 * -> ReLU -> a last conv (the graph's output must be plain). */
static sp_value body(sp_graph *g, sp_value x, int c, int oc, int stride, int bias) {
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = c, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn0"));
  x = sp_conv2d(g, x, "narrow", (sp_conv_args){.out_ch = oc, .kernel = 3, .stride = stride, .pad = 1, .bias = bias});
  x = sp_relu(g, sp_batchnorm(g, x, "bn1"));
  return sp_conv2d(g, x, "last", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 1, .pad = 1});
}
static sp_value b_8_16_s2(sp_graph *g, sp_value x) { return body(g, x, 8, 16, 2, 0); }
static sp_value b_8_32_s1_bias(sp_graph *g, sp_value x) { return body(g, x, 8, 32, 1, 1); }
static sp_value b_8_64_s2_bias(sp_graph *g, sp_value x) { return body(g, x, 8, 64, 2, 1); }
static sp_value b_8_48_s1(sp_graph *g, sp_value x) { return body(g, x, 8, 48, 1, 0); }

typedef struct {
  const char *label;
  cmp_build_fn body;
  int n, h, w;
} narrow_case;

/* Input sizes: the narrow layer's output widths 23 (last group 7), 12
 * (one group of 12), 38 (last 6) and 26 (last 10). */
static const narrow_case cases[] = {
    {"8 -> 16 s2", b_8_16_s2, 3, 50, 90},
    {"8 -> 32 s1 bias", b_8_32_s1_bias, 1, 17, 24},
    {"8 -> 64 s2 bias", b_8_64_s2_bias, 3, 30, 150},
    {"8 -> 48 s1", b_8_48_s1, 1, 9, 51},
};

static const struct {
  unsigned flags;
  double tol;
} plans[] = {{SP_PLAN_FROZEN, 1e-4}, {SP_PLAN_FROZEN | SP_PLAN_BF16, 6e-2}, {0, 1e-4}, {SP_PLAN_BF16, 6e-2}};

/* The loop exists only in builds with AVX512-BF16: skipped elsewhere. */
static void require_loop(void) {
#if !(defined(__AVX512F__) && defined(__AVX512BF16__))
  skip();
#endif
}

/* These small layers too, as a node of their own (the stem would compute
 * them otherwise: test_cpu_conv_stem_fused.c). */
static void setup(void) {
  cpu_conv_narrow_min_positions = 0;
  cpu_conv_stem_fuse_next = 0;
}
static void restore(void) {
  cpu_conv_narrow_min_positions = 8192;
  cpu_conv_use_narrow = 1;
  cpu_conv_stem_fuse_next = 1;
}

/* On machines with AMX the bf16 rows run on the tiles (conv_narrow_amx.c);
 * the tests run again with them off, for the vector loops. */
static void tiles_ran(long before, int want_bf16) {
  const int usable = cpu_narrow_use_amx && cpu_amx_usable();
  if (want_bf16 && usable && cpu_narrow_amx_rows == before) fail_msg("the AMX rows did not run");
  if (!usable && cpu_narrow_amx_rows != before) fail_msg("the AMX rows ran");
}

static void against_ref_body(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t m = 0; m < sizeof plans / sizeof plans[0]; m++) {
      const long before = cpu_narrow_calls;
      const long tiles = cpu_narrow_amx_rows;
      cmp_case k = {cases[i].label, cases[i].body, cases[i].n, 1, cases[i].h, cases[i].w, 0,
                    plans[m].flags, plans[m].tol,  0};
      cmp_run(&k);
      const int want = (k.flags & SP_PLAN_BF16) != 0, ran = cpu_narrow_calls != before;
      if (ran != want) fail_msg("[%s] flags %u: the narrow path %s", k.label, k.flags, want ? "did not run" : "ran");
      tiles_ran(tiles, want);
    }
}

/* body with the tiles on (where AMX is usable) and off. */
static void both_ways(void (*body)(void)) {
  cmp_require_cpu();
  require_loop();
  setup();
  for (int amx = 1; amx >= 0; amx--) {
    cpu_narrow_use_amx = amx;
    body();
  }
  cpu_narrow_use_amx = 1;
  restore();
}

static void against_ref(void **st) {
  (void)st;
  both_ways(against_ref_body);
}

/* The narrow path's plan and oneDNN's, same parameters (batch norm
 * statistics away from 0 and 1) and inputs: outputs agree to summation
 * order in f32, to a bf16 rounding of a few values in bf16. */
static void same_as_onednn_body(void) {
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (size_t m = 0; m < sizeof plans / sizeof plans[0]; m++) {
      const int bf16 = (plans[m].flags & SP_PLAN_BF16) != 0;
      cmp_case k = {cases[c].label, cases[c].body, cases[c].n, 1, cases[c].h, cases[c].w, 0, plans[m].flags, 0, 0};
      sp_shape ys = cmp_out_shape(&k);
      sp_graph *g[2];
      sp_plan *p[2];
      long ran[2];
      for (int path = 0; path < 2; path++) {
        cpu_conv_use_narrow = path == 0;
        sp_value y;
        g[path] = cmp_graph(&k, &y);
        cmp_fill_params(g[path], 300u);
        p[path] = cmp_plan(&k, g[path], &ys, SP_BACKEND_CPU, k.flags);
        cmp_fill(p[path], 11, 0);
        const long before = cpu_narrow_calls;
        assert_int_equal(sp_plan_forward(p[path]), 0);
        ran[path] = cpu_narrow_calls - before;
      }
      cpu_conv_use_narrow = 1;
      if (ran[0] != bf16 || ran[1] != 0)
        fail_msg("[%s] flags %u: narrow calls %ld / %ld (want %d / 0)", k.label, k.flags, ran[0], ran[1], bf16);
      const double d = cmp_rel_l2(sp_plan_output(p[0], "y"), sp_plan_output(p[1], "y")), tol = bf16 ? 1e-2 : 1e-5;
      printf("# [%s] flags %u: the two paths differ by %.3g (relative L2)\n", k.label, k.flags, d);
      if (!(d <= tol)) fail_msg("[%s] flags %u: the paths differ by %.3g", k.label, k.flags, d);
      for (int path = 0; path < 2; path++) sp_plan_free(p[path]), sp_graph_free(g[path]);
    }
}

static void same_as_onednn(void **st) {
  (void)st;
  both_ways(same_as_onednn_body);
}

/* Taken for a bf16 inference plan's 3x3 pad-1 conv, stride 1 or 2, on a
 * channels-last bf16 input of 8 channels, into 16 to 64 channels in 16s,
 * from cpu_conv_narrow_min_positions output positions; not for f32,
 * training, blocked or plain inputs, 16 or 24 input channels, 24 or 80
 * output channels, other windows or strides, or a small output (batch 2 at
 * 15x15, 450 positions, under a minimum of 1000). */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  require_loop();
  struct {
    int bf16, training, ic, oc, kernel, stride;
    dnnl_format_tag_t tag;
    int64_t min_positions;
    int want;
  } t[] = {{1, 0, 8, 16, 3, 2, dnnl_acdb, 0, 1},    {1, 0, 8, 64, 3, 1, dnnl_acdb, 0, 1},
           {1, 0, 8, 16, 3, 1, dnnl_acdb, 1000, 1}, {1, 0, 8, 16, 3, 2, dnnl_acdb, 1000, 0},
           {0, 0, 8, 16, 3, 2, dnnl_acdb, 0, 0},    {1, 1, 8, 16, 3, 2, dnnl_acdb, 0, 0},
           {1, 0, 8, 16, 3, 2, dnnl_aBcd16b, 0, 0}, {1, 0, 8, 16, 3, 2, dnnl_abcd, 0, 0},
           {1, 0, 16, 16, 3, 2, dnnl_acdb, 0, 0},   {1, 0, 24, 16, 3, 2, dnnl_acdb, 0, 0},
           {1, 0, 8, 24, 3, 2, dnnl_acdb, 0, 0},    {1, 0, 8, 80, 3, 2, dnnl_acdb, 0, 0},
           {1, 0, 8, 16, 5, 2, dnnl_acdb, 0, 0},    {1, 0, 8, 16, 3, 3, dnnl_acdb, 0, 0}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    cpu_conv_narrow_min_positions = t[i].min_positions;
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {2, t[i].ic, 30, 30};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, t[i].bf16 ? dnnl_bf16 : dnnl_f32, t[i].tag),
                     dnnl_success);
    const int k = t[i].kernel, pad = k / 2;
    const int64_t out = (30 + 2 * pad - k) / t[i].stride + 1;
    sp_conv2d_attr at = {t[i].stride, t[i].stride, pad, pad, 1, 1, 1};
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, t[i].ic, 30, 30), sp_shape4(2, t[i].oc, out, out),
                                 sp_shape4(t[i].oc, t[i].ic, k, k), 0, t[i].bf16, &md);
    p.run_backward = t[i].training, p.training = t[i].training, p.need_d_in[0] = t[i].training;
    assert_int_equal(cpu_conv_prepare(&p), 0);
    if (cpu_conv_is_narrow(p.state) != t[i].want)
      fail_msg("case %zu: narrow path %s", i, t[i].want ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
  restore();
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn), cmocka_unit_test(taken_where_it_applies))
