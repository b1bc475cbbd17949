/* A frozen inference plan's stem computing the 3x3 convolution after its
 * batch norm and ReLU (backends/cpu/conv_stem.c with conv_narrow.h's
 * loops), so that the stem's output is never stored: against the
 * reference backend, against the same plan with the two apart (equal bits
 * in bf16, where both run the same loops; summation order in f32, where
 * oneDNN runs the second), after the weights change, and taken only where
 * it applies. Cases: grey and colour images, strides 1 and 2, a bias, 16
 * to 64 output channels, with and without the second batch norm and ReLU,
 * short and long last groups of positions, batch 1 and 3, f32 and bf16.
 * test_cpu_conv_stem_fused_avx2.c runs the same with oneDNN held to AVX2, so
 * AVX-512 machines test the 8-lane f32 loops too. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/conv_narrow.h"
#include "backends/cpu/cpu.h"

/* Whether a plan of these flags fuses here (conv_narrow.h): bf16 in builds
 * with AVX512-BF16 where bf16 runs; f32 there on 16 lanes where oneDNN runs
 * AVX-512, and on 8 lanes into its 8-channel blocks where it runs below
 * (AVX2 + FMA builds; the _avx2 variant of this test holds oneDNN there). */
static int fuses_here(unsigned flags) {
  if (!(flags & SP_PLAN_FROZEN)) return 0;
  const int avx512 = sp_backend_cpu_avx512();
  if (flags & SP_PLAN_BF16) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    return cmp_bf16_here();
#else
    return 0;
#endif
  }
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  if (avx512) return 1;
#endif
#if defined(__AVX2__) && defined(__FMA__)
  return !avx512;
#else
  return 0;
#endif
}

/* Skipped where no plan fuses (the _avx2 variant: on a CPU below AVX2 +
 * FMA, where holding oneDNN there would not bind). */
static void require_loops(void) {
#ifdef STEM_FUSED_ON_AVX2
  cmp_require_avx2_cpu();
#endif
  if (!fuses_here(SP_PLAN_FROZEN) && !fuses_here(SP_PLAN_FROZEN | SP_PLAN_BF16)) skip();
}

enum { TAIL_NONE, TAIL_BN, TAIL_BN_RELU };

/* stem (8 channels; k x k, stride s, a bias or not) -> BN -> ReLU -> conv ->
 * the tail -> a last conv (the graph's output must be plain). */
static sp_value body_stem(sp_graph *g, sp_value x, int k, int s, int stem_bias, int oc, int stride, int bias,
                          int tail) {
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = k, .stride = s, .pad = k / 2, .bias = stem_bias});
  x = sp_relu(g, sp_batchnorm(g, x, "bn0"));
  x = sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = oc, .kernel = 3, .stride = stride, .pad = 1, .bias = bias});
  if (tail >= TAIL_BN) x = sp_batchnorm(g, x, "bn1");
  if (tail == TAIL_BN_RELU) x = sp_relu(g, x);
  return sp_conv2d(g, x, "last", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 1, .pad = 1});
}
static sp_value body(sp_graph *g, sp_value x, int oc, int stride, int bias, int tail) {
  return body_stem(g, x, 3, 2, 0, oc, stride, bias, tail);
}
static sp_value b_16_s2(sp_graph *g, sp_value x) { return body(g, x, 16, 2, 0, TAIL_BN_RELU); }
static sp_value b_32_s1_bias(sp_graph *g, sp_value x) { return body(g, x, 32, 1, 1, TAIL_BN_RELU); }
static sp_value b_64_s2_bias(sp_graph *g, sp_value x) { return body(g, x, 64, 2, 1, TAIL_BN_RELU); }
static sp_value b_48_s1_none(sp_graph *g, sp_value x) { return body(g, x, 48, 1, 0, TAIL_NONE); }
static sp_value b_16_s2_bn(sp_graph *g, sp_value x) { return body(g, x, 16, 2, 1, TAIL_BN); }
/* Stems of stride 1 (the next row shares two padded image rows), 5x5, with
 * a bias. */
static sp_value b_stem5_s1_bias(sp_graph *g, sp_value x) { return body_stem(g, x, 5, 1, 1, 16, 2, 0, TAIL_BN_RELU); }
static sp_value b_stem3_s1(sp_graph *g, sp_value x) { return body_stem(g, x, 3, 1, 0, 32, 1, 1, TAIL_BN_RELU); }

typedef struct {
  const char *label;
  cmp_build_fn body;
  int n, c, h, w;
} fused_case;

/* The second conv's output widths: 23 (last group of 7), 12, 38 (last 6),
 * 26 (last 10), 8, 32 and 48 (whole groups; the stem's rows too), and 19;
 * on 8 lanes (rows8.h's groups of 6, 7 or 8 left as 4 + 3 or 4 + 4): 23
 * ends in 5, 26 and 38 in 4 + 4, 19 in 4 + 3. Odd image heights leave the
 * stem an odd row count. */
static const fused_case cases[] = {
    {"grey 8 -> 16 s2", b_16_s2, 3, 1, 50, 90},
    {"grey 8 -> 32 s1 bias", b_32_s1_bias, 1, 1, 17, 24},
    {"colour 8 -> 64 s2 bias", b_64_s2_bias, 3, 3, 31, 150},
    {"grey 8 -> 48 s1, no batch norm", b_48_s1_none, 1, 1, 9, 51},
    {"colour 8 -> 16 s2 bias, batch norm without ReLU", b_16_s2_bn, 2, 3, 29, 30},
    {"grey 5x5 stride-1 stem with a bias, 8 -> 16 s2", b_stem5_s1_bias, 2, 1, 21, 64},
    {"colour stride-1 stem, 8 -> 32 s1 bias", b_stem3_s1, 1, 3, 14, 48},
    {"grey 8 -> 16 s2, 19 wide", b_16_s2, 2, 1, 11, 75},
};

static const struct {
  unsigned flags;
  double tol;
} plans[] = {{SP_PLAN_FROZEN, 1e-4}, {SP_PLAN_FROZEN | SP_PLAN_BF16, 6e-2}, {0, 1e-4}, {SP_PLAN_BF16, 6e-2}};

/* These small layers too. */
static void setup(void) { cpu_conv_narrow_min_positions = 0; }
static void restore(void) {
  cpu_conv_narrow_min_positions = 8192;
  cpu_conv_stem_fuse_next = 1;
}

static cmp_case case_of(const fused_case *f, unsigned flags, double tol) {
  return (cmp_case){f->label, f->body, f->n, f->c, f->h, f->w, 0, flags, tol, 0};
}

/* Only frozen plans fuse (the batch norm folds into the stem). */
static void against_ref_body(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t m = 0; m < sizeof plans / sizeof plans[0]; m++) {
      const long before = cpu_stem_fused_calls;
      cmp_case k = case_of(&cases[i], plans[m].flags, plans[m].tol);
      cmp_run(&k);
      const int want = fuses_here(k.flags), ran = cpu_stem_fused_calls != before;
      if (ran != want) fail_msg("[%s] flags %u: the fused path %s", k.label, k.flags, want ? "did not run" : "ran");
    }
}

/* On machines with AMX the second conv's bf16 rows run on the tiles
 * (conv_narrow_amx.c), the stem's rows channels-last for them; each test
 * runs again with them off, for the vector loops. */
static void both_ways(void (*body)(void)) {
  cmp_require_cpu();
  require_loops();
  setup();
  for (int amx = 1; amx >= 0; amx--) {
    cpu_narrow_use_amx = amx;
    const long tiles = cpu_narrow_amx_rows;
    body();
    if ((cpu_narrow_amx_rows != tiles) != (amx && cpu_amx_usable()))
      fail_msg("the AMX rows %s", amx && cpu_amx_usable() ? "did not run" : "ran");
  }
  cpu_narrow_use_amx = 1;
  restore();
}

static void against_ref(void **st) {
  (void)st;
  both_ways(against_ref_body);
}

/* Fusion on (path 0) or off. */
static void fuse_or_apart(int path) { cpu_conv_stem_fuse_next = path == 0; }

/* The plan made with fusion on or off; same parameters (batch norm
 * statistics away from 0 and 1) and inputs. */
static sp_plan *plan_with(const cmp_case *k, int fuse, sp_graph **g, uint64_t seed) {
  return cmp_plan_path(k, fuse_or_apart, !fuse, g, seed);
}

static void forward_counted(const cmp_case *k, sp_plan *p, long want) {
  const long before = cpu_stem_fused_calls;
  assert_int_equal(sp_plan_forward(p), 0);
  if (cpu_stem_fused_calls - before != want)
    fail_msg("[%s] flags %u: %ld fused calls, want %ld", k->label, k->flags, cpu_stem_fused_calls - before, want);
}

/* bf16: both ways run the stem's rows and conv_narrow's loops on the same
 * bf16 values, so the bits agree; f32: oneDNN runs the second conv when
 * apart, summation order only. */
static void same_as_apart_body(void) {
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int bf16 = 0; bf16 < 2; bf16++) {
      cmp_case k = case_of(&cases[c], SP_PLAN_FROZEN | (bf16 ? SP_PLAN_BF16 : 0), 0);
      if (!fuses_here(k.flags)) continue;
      sp_graph *g[2];
      sp_plan *p[2];
      for (int path = 0; path < 2; path++) {
        p[path] = plan_with(&k, path == 0, &g[path], 300u);
        cmp_fill(p[path], 11, 0);
        forward_counted(&k, p[path], path == 0);
      }
      const sp_tensor *a = sp_plan_output(p[0], "y"), *b = sp_plan_output(p[1], "y");
      const double d = cmp_rel_l2(a, b);
      printf("# [%s] %s: fused and apart differ by %.3g (relative L2)\n", k.label, bf16 ? "bf16" : "f32", d);
      if (bf16 ? memcmp(a->data, b->data, sp_tensor_bytes(a)) != 0 : !(d <= 1e-5))
        fail_msg("[%s] %s: fused and apart differ by %.3g", k.label, bf16 ? "bf16" : "f32", d);
      for (int path = 0; path < 2; path++) sp_plan_free(p[path]), sp_graph_free(g[path]);
    }
}

static void same_as_apart(void **st) {
  (void)st;
  both_ways(same_as_apart_body);
}

/* A frozen plan prepares the fused conv's weights once: after the second
 * conv's weights and its batch norm's variance change and the plan is told,
 * its output follows (equal to a plan made apart from the new values), and
 * differs from before. */
static void follows_weights(void **st) {
  (void)st;
  cmp_require_cpu();
  require_loops();
  setup();
  for (int bf16 = 0; bf16 < 2; bf16++) {
    cmp_case k = case_of(&cases[0], SP_PLAN_FROZEN | (bf16 ? SP_PLAN_BF16 : 0), 0);
    if (!fuses_here(k.flags)) continue;
    sp_graph *g, *g_apart;
    sp_plan *p = plan_with(&k, 1, &g, 400u);
    cmp_fill(p, 5, 0);
    forward_counted(&k, p, 1);
    const size_t bytes = sp_tensor_bytes(sp_plan_output(p, "y"));
    float *first = malloc(bytes);
    memcpy(first, sp_plan_output(p, "y")->data, bytes);
    const char *changed[] = {"next.weight", "bn1.running_var"};
    for (int i = 0; i < 2; i++) {
      sp_tensor *w = sp_graph_param_value(g, sp_graph_param_find(g, changed[i]));
      for (int64_t j = 0; j < sp_tensor_numel(w); j++) ((float *)w->data)[j] *= 1.5f + 0.25f * (float)(j % 3);
    }
    sp_plan_params_changed(p);
    forward_counted(&k, p, 1);
    sp_plan *q = plan_with(&k, 0, &g_apart, 400u);
    for (int i = 0; i < sp_graph_param_count(g); i++)
      memcpy(sp_graph_param_value(g_apart, i)->data, sp_graph_param_value(g, i)->data,
             sp_tensor_bytes(sp_graph_param_value(g, i)));
    cmp_fill(q, 5, 0);
    forward_counted(&k, q, 0);
    const double d = cmp_rel_l2(sp_plan_output(p, "y"), sp_plan_output(q, "y"));
    if (!(d <= (bf16 ? 0.0 : 1e-5))) fail_msg("[%s] after the change: fused and apart differ by %.3g", k.label, d);
    if (!memcmp(first, sp_plan_output(p, "y")->data, bytes))
      fail_msg("[%s] the fused plan kept the old weights", k.label);
    free(first);
    sp_plan_free(p), sp_plan_free(q);
    sp_graph_free(g), sp_graph_free(g_apart);
  }
  restore();
}

/* sp_plan_value has nothing to hand out for the fused nodes (their buffer
 * holds the second conv's output, smaller than the stem's), and says why;
 * the graph's output it does. */
static void fused_values_refused(void **st) {
  (void)st;
  cmp_require_cpu();
  require_loops();
  if (!fuses_here(SP_PLAN_FROZEN)) skip();
  setup();
  sp_graph *g = sp_graph_new(7);
  sp_value x = sp_graph_input(g, "x", SP_F32, 1);
  sp_value stem = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
  sp_value relu = sp_relu(g, sp_batchnorm(g, stem, "bn0"));
  sp_value next = sp_conv2d(g, relu, "next", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
  sp_value y = sp_conv2d(g, sp_relu(g, sp_batchnorm(g, next, "bn1")), "last",
                         (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 1, .pad = 1});
  sp_graph_output(g, y, "y");
  sp_input_shape in[1] = {{"x", sp_shape4(2, 1, 40, 40)}};
  sp_plan *p = sp_plan_new(g, 1, in, SP_BACKEND_CPU, 0, SP_PLAN_FROZEN);
  assert_non_null(p);
  cmp_fill_params(g, 7u);
  const long before = cpu_stem_fused_calls;
  assert_int_equal(sp_plan_forward(p), 0);
  assert_int_equal(cpu_stem_fused_calls - before, 1);
  const sp_value fused[] = {stem, relu, next};
  for (int i = 0; i < 3; i++) {
    if (sp_plan_value(p, fused[i])) fail_msg("node %d: a value handed out", fused[i]);
    if (!strstr(sp_last_error(), "fused")) fail_msg("node %d: %s", fused[i], sp_last_error());
  }
  assert_non_null(sp_plan_value(p, y));
  sp_plan_free(p);
  sp_graph_free(g);
  restore();
}

/* Graphs the stem must not fuse into. */
static sp_value shared_output(sp_graph *g, sp_value x) { /* the stem's ReLU read twice */
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn0"));
  sp_value a = sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
  sp_value b = sp_conv2d(g, x, "side", (sp_conv_args){.out_ch = 16, .kernel = 1, .stride = 2, .pad = 0});
  return sp_add(g, a, b);
}
static sp_value no_relu(sp_graph *g, sp_value x) {
  x = sp_batchnorm(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1}), "bn0");
  return sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
}
static sp_value window5(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn0"));
  return sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = 16, .kernel = 5, .stride = 2, .pad = 2});
}
static sp_value oc24(sp_graph *g, sp_value x) { /* not whole groups of 16 */
  return body(g, x, 24, 2, 0, TAIL_BN_RELU);
}
static sp_value next_is_output(sp_graph *g, sp_value x) { /* its output must be plain */
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn0"));
  return sp_conv2d(g, x, "next", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
}

/* Not fused in those graphs, nor under cpu_conv_narrow_min_positions or
 * with either switch off; still right against the reference backend. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  require_loops();
  struct {
    const char *label;
    cmp_build_fn body;
    int64_t min_positions;
    int use_narrow, fuse, want;
  } t[] = {{"the usual case", b_16_s2, 0, 1, 1, 1},
           {"the stem's output read twice", shared_output, 0, 1, 1, 0},
           {"no ReLU after the stem", no_relu, 0, 1, 1, 0},
           {"a 5x5 window", window5, 0, 1, 1, 0},
           {"24 output channels", oc24, 0, 1, 1, 0},
           {"the conv's output is the graph's", next_is_output, 0, 1, 1, 0},
           {"under the minimum of positions (3 x 13 x 23 = 897)", b_16_s2, 900, 1, 1, 0},
           {"at the minimum", b_16_s2, 897, 1, 1, 1},
           {"cpu_conv_use_narrow off", b_16_s2, 0, 0, 1, 0},
           {"cpu_conv_stem_fuse_next off", b_16_s2, 0, 1, 0, 0}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    for (int bf16 = 0; bf16 < 2; bf16++) {
      cpu_conv_narrow_min_positions = t[i].min_positions;
      cpu_conv_use_narrow = t[i].use_narrow, cpu_conv_stem_fuse_next = t[i].fuse;
      cmp_case k = {t[i].label,         t[i].body, 3, 1, 50, 90, 0, SP_PLAN_FROZEN | (bf16 ? SP_PLAN_BF16 : 0),
                    bf16 ? 6e-2 : 1e-4, 0};
      const long before = cpu_stem_fused_calls;
      cmp_run(&k);
      cpu_conv_use_narrow = 1;
      const int want = t[i].want && fuses_here(k.flags);
      if ((cpu_stem_fused_calls != before) != want)
        fail_msg("[%s] %s: the fused path %s", k.label, bf16 ? "bf16" : "f32", want ? "did not run" : "ran");
    }
  restore();
}
#endif

#define STEM_FUSED_TESTS                                                                             \
  cmocka_unit_test(against_ref), cmocka_unit_test(same_as_apart), cmocka_unit_test(follows_weights), \
      cmocka_unit_test(fused_values_refused), cmocka_unit_test(taken_where_it_applies)
#if defined(STEM_FUSED_ON_AVX2) && defined(SPRY_HAVE_DNNL)
CMP_AVX2_MAIN(STEM_FUSED_TESTS)
#else
CMP_CPU_MAIN(STEM_FUSED_TESTS)
#endif
