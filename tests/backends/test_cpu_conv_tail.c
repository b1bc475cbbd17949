/* A frozen f32 plan's last bottleneck block computed inside the heatmap head
 * after it (backends/cpu/conv_tail.c): against the reference backend, against
 * the same plan with the block apart, after the block's weights change, and
 * taken only where it applies. Cases: 16, 32 and 64 channels, 5 to 68
 * heatmaps, widths 32 to 96, images of one band and of several with a short
 * last band, batch 1 to 3. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* What the bodies vary (one graph builder, read through these). */
static struct {
  int c, k;          /* block channels, heatmaps */
  int hardswish;     /* the block's activations: not fused */
  int conv2_bias;    /* a bias on the 3x3: not fused */
  int shortcut_conv; /* a 1x1 shortcut instead of the identity: not fused */
} shape = {32, 68, 0, 0, 0};

static sp_value act(sp_graph *g, sp_value x) { return shape.hardswish ? sp_hardswish(g, x) : sp_relu(g, x); }

/* x -> 3x3 to C channels + ReLU -> the block -> 1x1 head (bias) -> soft-argmax. */
static sp_value b_tail(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = shape.c, .kernel = 3, .pad = 1}));
  sp_graph_push_scope(g, "block");
  sp_value y = act(g, sp_batchnorm(g, sp_conv2d(g, x, "conv1", (sp_conv_args){.out_ch = 8, .kernel = 1}), "bn1"));
  y = act(g,
          sp_batchnorm(
              g, sp_conv2d(g, y, "conv2", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1, .bias = shape.conv2_bias}),
              "bn2"));
  y = sp_batchnorm(g, sp_conv2d(g, y, "conv3", (sp_conv_args){.out_ch = shape.c, .kernel = 1}), "bn3");
  sp_value s = shape.shortcut_conv ? sp_conv2d(g, x, "shortcut", (sp_conv_args){.out_ch = shape.c, .kernel = 1}) : x;
  sp_graph_pop_scope(g);
  y = act(g, sp_add(g, y, s));
  y = sp_conv2d(g, y, "head", (sp_conv_args){.out_ch = shape.k, .kernel = 1, .bias = 1});
  return sp_softargmax(g, y, 0.5f);
}

typedef struct {
  const char *label;
  int c, k, n, h, w;
} tail_case;

/* Bands are cpu_tail_band_positions (2048) / W rows: W 32 -> 64 rows (70:
 * bands of 64 and 6), W 64 -> 32 (37: 32 and 5), W 96 -> 21 (33: 21 and
 * 12). */
static const tail_case cases[] = {
    {"32 ch, 68 heatmaps, one band", 32, 68, 2, 9, 32},
    {"32 ch, 5 heatmaps, short last band", 32, 5, 1, 70, 32},
    {"16 ch, 17 heatmaps, 64 wide", 16, 17, 3, 37, 64},
    {"64 ch, 33 heatmaps, 96 wide", 64, 33, 1, 33, 96},
};

/* Whether frozen f32 plans fuse here: AVX-512 builds where oneDNN runs
 * AVX-512 (16-channel blocks). */
static int fuses_here(void) {
#ifdef __AVX512F__
  return sp_backend_cpu_avx512();
#else
  return 0;
#endif
}

static cmp_case case_of(const tail_case *t, double tol) {
  shape.c = t->c, shape.k = t->k;
  return (cmp_case){t->label, b_tail, t->n, 3, t->h, t->w, 0, SP_PLAN_FROZEN, tol, 0};
}

/* The fused node's forward ran (want 1) or not (0) in the last plan. */
static void check_ran(const char *label, long before, int want) {
  const int ran = cpu_tail_calls != before;
  if (ran != want) fail_msg("[%s] the fused block %s", label, want ? "did not run" : "ran");
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cmp_case k = case_of(&cases[i], 1e-4);
    const long before = cpu_tail_calls;
    cmp_run(&k);
    check_ran(k.label, before, fuses_here());
  }
}

/* The block fused (path 0) or apart. */
static void fused_or_apart(int path) { cpu_conv_use_tail = path == 0; }

/* The plan with the block fused or apart; parameters with batch norm
 * statistics away from 0 and 1. */
static sp_plan *plan_with(const cmp_case *k, int fuse, sp_graph **g, uint64_t seed) {
  return cmp_plan_path(k, fused_or_apart, !fuse, g, seed);
}

static double fused_vs_apart(const cmp_case *k, uint64_t seed, const char *scale_param, float factor) {
  sp_graph *g[2];
  sp_plan *p[2];
  for (int path = 0; path < 2; path++) {
    p[path] = plan_with(k, path == 0, &g[path], seed);
    if (scale_param) {
      sp_tensor *w = sp_graph_param_value(g[path], sp_graph_param_find(g[path], scale_param));
      for (int64_t i = 0; i < sp_tensor_numel(w); i++) ((float *)w->data)[i] *= factor;
      sp_plan_params_changed(p[path]);
    }
    cmp_fill(p[path], 11, 0);
    const long before = cpu_tail_calls;
    assert_int_equal(sp_plan_forward(p[path]), 0);
    check_ran(k->label, before, path == 0);
  }
  const double d = cmp_rel_l2(sp_plan_output(p[0], "y"), sp_plan_output(p[1], "y"));
  for (int path = 0; path < 2; path++) sp_plan_free(p[path]), sp_graph_free(g[path]);
  return d;
}

/* Random weights and batch norms (the reference comparison runs the
 * default ones): the fused block against oneDNN's layers apart, summation
 * order only. */
static void same_as_apart(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!fuses_here()) skip();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cmp_case k = case_of(&cases[i], 0);
    const double d = fused_vs_apart(&k, 300u + i, NULL, 1.0f);
    printf("# [%s] fused and apart differ by %.3g (relative L2)\n", k.label, d);
    if (!(d <= 1e-5)) fail_msg("[%s] fused and apart differ by %.3g", k.label, d);
  }
}

/* A frozen plan folds the block's weights once: after conv2's weights and
 * bn3's variance change and the plan is told, its output follows (equal to
 * the layers apart from the new values) and differs from before. */
static void follows_weights(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!fuses_here()) skip();
  cmp_case k = case_of(&cases[1], 0);
  sp_graph *g;
  sp_plan *p = plan_with(&k, 1, &g, 400u);
  cmp_fill(p, 5, 0);
  assert_int_equal(sp_plan_forward(p), 0);
  const size_t bytes = sp_tensor_bytes(sp_plan_output(p, "y"));
  float *first = malloc(bytes);
  assert_non_null(first);
  memcpy(first, sp_plan_output(p, "y")->data, bytes);
  const char *changed[] = {"block.conv2.weight", "block.bn3.running_var"};
  for (int i = 0; i < 2; i++) {
    sp_tensor *w = sp_graph_param_value(g, sp_graph_param_find(g, changed[i]));
    for (int64_t j = 0; j < sp_tensor_numel(w); j++) ((float *)w->data)[j] *= i == 0 ? -1.5f : 3.0f;
  }
  sp_plan_params_changed(p);
  assert_int_equal(sp_plan_forward(p), 0);
  if (!memcmp(first, sp_plan_output(p, "y")->data, bytes)) fail_msg("the frozen plan kept the old block weights");
  /* The same change made in a plan with the layers apart. */
  sp_graph *ga;
  sp_plan *pa = plan_with(&k, 0, &ga, 400u);
  for (int i = 0; i < 2; i++) {
    sp_tensor *w = sp_graph_param_value(ga, sp_graph_param_find(ga, changed[i]));
    for (int64_t j = 0; j < sp_tensor_numel(w); j++) ((float *)w->data)[j] *= i == 0 ? -1.5f : 3.0f;
  }
  cmp_fill(pa, 5, 0);
  assert_int_equal(sp_plan_forward(pa), 0);
  const double d = cmp_rel_l2(sp_plan_output(p, "y"), sp_plan_output(pa, "y"));
  printf("# after the change: fused and apart differ by %.3g (relative L2)\n", d);
  assert_true(d <= 1e-5);
  free(first);
  sp_plan_free(p), sp_plan_free(pa);
  sp_graph_free(g), sp_graph_free(ga);
}

/* Not taken, and still right: hardswish activations, a bias on the 3x3, a
 * convolution shortcut, a width not in 32s, training and bf16 plans. */
static void taken_only_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  struct {
    const char *label;
    int hardswish, conv2_bias, shortcut_conv, w, training;
    unsigned flags;
    double tol;
  } nots[] = {
      {"hardswish", 1, 0, 0, 32, 0, SP_PLAN_FROZEN, 1e-4},
      {"3x3 with a bias", 0, 1, 0, 32, 0, SP_PLAN_FROZEN, 1e-4},
      {"convolution shortcut", 0, 0, 1, 32, 0, SP_PLAN_FROZEN, 1e-4},
      {"30 wide", 0, 0, 0, 30, 0, SP_PLAN_FROZEN, 1e-4},
      {"training", 0, 0, 0, 32, 1, 0, 1e-4},
      {"not frozen", 0, 0, 0, 32, 0, 0, 1e-4},
      {"bf16", 0, 0, 0, 32, 0, SP_PLAN_FROZEN | SP_PLAN_BF16, 6e-2},
  };
  for (size_t i = 0; i < sizeof nots / sizeof nots[0]; i++) {
    shape.c = 32, shape.k = 9, shape.hardswish = nots[i].hardswish, shape.conv2_bias = nots[i].conv2_bias;
    shape.shortcut_conv = nots[i].shortcut_conv;
    cmp_case k = {nots[i].label, b_tail, 2, 3, 11, nots[i].w, nots[i].training, nots[i].flags, nots[i].tol, 0};
    const long before = cpu_tail_calls;
    cmp_run(&k);
    check_ran(k.label, before, 0);
  }
  shape.hardswish = shape.conv2_bias = shape.shortcut_conv = 0;
}

#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_apart), cmocka_unit_test(follows_weights),
             cmocka_unit_test(taken_only_where_it_applies))
