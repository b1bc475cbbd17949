/* The heatmap head fused with soft-argmax (backends/cpu/conv_softargmax.c),
 * bf16 and f32 plans: against the reference backend, training and inference;
 * against the two ops apart on the cpu backend (the two differ a little: in
 * bf16 the fused path keeps the logits in f32 where the two ops round them,
 * and its sums run in another order, which also shows the fused path ran);
 * over images of several tiles with a short last tile; with the input
 * gradient added onto another consumer's; the products on planes (f32
 * 16-channel blocks) and on AMX tiles against oneDNN's matmuls; and taken
 * only where it applies. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "backends/cpu/exp_nonpos.h"
#include "backends/cpu/shares.h"

/* Whether the heads have a bias. A bias before soft-argmax has no effect on
 * its output and no true gradient (the softmax ignores a shift): both
 * backends return rounding noise for it, which the f32 comparisons against
 * the reference (1e-4 relative) cannot judge, so they run without one. */
static int head_bias = 1;

/* x -> 3x3 conv to 32 channels (channels-last bf16) -> 1x1 head with bias ->
 * soft-argmax (scale 0.5: the scale must reach both outputs). */
static sp_value b_head(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  x = sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = head_bias});
  return sp_softargmax(g, x, 0.5f);
}

/* Two heads on one input, summed: the second head's input gradient is added
 * onto the first one's (not the first writer). */
static sp_value b_two_heads(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  sp_value a =
      sp_softargmax(g, sp_conv2d(g, x, "head_a", (sp_conv_args){.out_ch = 17, .kernel = 1, .bias = head_bias}), 1.0f);
  sp_value b = sp_softargmax(g, sp_conv2d(g, x, "head_b", (sp_conv_args){.out_ch = 17, .kernel = 1}), 1.0f);
  return sp_add(g, a, b);
}

/* 64 channels into two heads of 68 and 33 heatmaps (the seed's 68; 33: a
 * pair of heatmaps and a block cut short) on one input: two steps of 32
 * channels, heatmap rows past the real ones, the second head's input
 * gradient added in place. */
static sp_value b_wide_heads(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1}));
  sp_value a =
      sp_softargmax(g, sp_conv2d(g, x, "head_a", (sp_conv_args){.out_ch = 68, .kernel = 1, .bias = head_bias}), 0.5f);
  sp_value b = sp_softargmax(g, sp_conv2d(g, x, "head_b", (sp_conv_args){.out_ch = 33, .kernel = 1}), 1.0f);
  return sp_concat(g, 2, (sp_value[]){a, b});
}

static void against_ref(cmp_build_fn body, const char *label, int n, int h, int w) {
  cmp_case k = {label, body, n, 3, h, w, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k); /* training */
  k.training = 0;
  cmp_run(&k); /* inference */
  head_bias = 0;
  k = (cmp_case){label, body, n, 3, h, w, 1, 0, 1e-4, 0}; /* f32: blocked input */
  cmp_run(&k);
  k.training = 0;
  cmp_run(&k);
  head_bias = 1;
}

/* One tile per image; then 41 x 37 = 1517 positions: two tiles of 759 and
 * 758 rows, the second through the padded copy. */
static void head_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  against_ref(b_head, "head, one tile", 2, 9, 7);
  against_ref(b_head, "head, short last tile", 3, 41, 37);
}

static void two_heads_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  against_ref(b_two_heads, "two heads, shared input, short last tile", 2, 41, 37);
  against_ref(b_wide_heads, "wide heads, 64 channels, 68 and 33 heatmaps", 2, 32, 32);
}

static void fused_or_apart(int path) { cpu_conv_use_softargmax = path == 0; }
static void amx_or_matmul(int path) { cpu_conv_use_softargmax_amx = path == 0; }
static void streamed_or_stored(int path) { cpu_train_stream_cap = path == 0 ? 0 : INT64_MAX; }

/* Where AMX is usable: the tile products (softargmax_amx.c) against oneDNN's
 * matmuls, one bf16 training step. Only the products' summation order
 * differs (dL is rounded by the same code), so the tolerance is tight. 32 x
 * 32 positions: one whole tile (input gradient in place, written and then
 * added); 41 x 37: a tile of 768 rows and a short one of 749 (through the
 * thread's buffers). */
static void amx_matches_matmul(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!cpu_amx_usable()) {
    printf("# no AMX here (or ONEDNN_MAX_CPU_ISA caps it): the tile products are not run\n");
    skip();
  }
  const cmp_case cases[] = {{"head, amx", b_head, 3, 3, 41, 37, 1, SP_PLAN_BF16, 2e-3, 0},
                            {"two heads, amx", b_two_heads, 2, 3, 41, 37, 1, SP_PLAN_BF16, 2e-3, 0},
                            {"wide heads, amx, whole tile", b_wide_heads, 2, 3, 32, 32, 1, SP_PLAN_BF16, 2e-3, 0},
                            {"wide heads, amx, short tile", b_wide_heads, 2, 3, 41, 37, 1, SP_PLAN_BF16, 2e-3, 0}};
  const cmp_two_opts opts = {.shift_free = "head"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    cmp_two_paths_with(&cases[c], amx_or_matmul, cases[c].tol, &opts);
  /* The whole tile's input gradient past the caches (cpu_train_stream_cap
   * 0) and stored: the same bits. */
  const int64_t cap = cpu_train_stream_cap;
  const long before = cpu_softargmax_streamed;
  cmp_two_paths_with(&cases[2], streamed_or_stored, 0.0, NULL);
  if (cpu_softargmax_streamed == before) fail_msg("the input gradient was not streamed");
  cpu_train_stream_cap = cap;
}

static void planes_or_matmul(int path) { cpu_conv_use_softargmax_planes = path == 0; }

/* f32 on 16-channel blocks (AVX-512 builds): the products on planes
 * (softargmax_planes.c) against oneDNN's matmuls, one training step. Only
 * the products' summation order differs. 9 x 7: one tile of 63 positions (a
 * short group of 16, zero positions to 64); 41 x 37: tiles of 768 and 749
 * positions; two heads: the second one's input gradient added; the wide
 * heads: two 16-channel blocks, 68 heatmaps (8 groups of 8 and one of 4),
 * 33 (a group of 8 with 7 zero rows, dL's rows zero to 36), one whole tile
 * of 1024 at 32 x 32. */
static void planes_match_matmul(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!cpu_planes_built()) {
    printf("# an AVX2 build: f32 heads on 8-channel blocks keep oneDNN's matmuls\n");
    skip();
  }
  const cmp_case cases[] = {{"head, planes, one tile", b_head, 2, 3, 9, 7, 1, 0, 1e-5, 0},
                            {"head, planes, short tile", b_head, 3, 3, 41, 37, 1, 0, 1e-5, 0},
                            {"two heads, planes", b_two_heads, 2, 3, 41, 37, 1, 0, 1e-5, 0},
                            {"wide heads, planes, whole tile", b_wide_heads, 2, 3, 32, 32, 1, 0, 1e-5, 0},
                            {"wide heads, planes, short tile", b_wide_heads, 2, 3, 41, 37, 1, 0, 1e-5, 0}};
  /* A forward can come out bit for bit alike (both sum a logit's terms in
   * order), so the counter shows the planes ran; only the first path has them. */
  const cmp_two_opts opts = {.shift_free = "head"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const long before = cpu_planes_calls;
    cmp_two_paths_with(&cases[c], planes_or_matmul, cases[c].tol, &opts);
    if (cpu_planes_calls < before + 2)
      fail_msg("[%s] the planes ran %ld passes, not forward and backward", cases[c].label, cpu_planes_calls - before);
  }
}

static void shares_dynamic_or_fixed(int path) { cpu_shares_dynamic = path == 0; }

/* The head's tiles taken as threads come free (shares.h) or in a fixed
 * order: one training step gives the same bits (each tile's sums are its
 * own, merged in tile order). Several tiles an image, bf16 and f32. */
static void tiles_however_taken_same_bits(void **st) {
  (void)st;
  cmp_require_cpu();
  const cmp_case cases[] = {{"head bf16, shares", b_head, 3, 3, 41, 37, 1, SP_PLAN_BF16, 0, 0},
                            {"two heads f32, shares", b_two_heads, 2, 3, 41, 37, 1, 0, 0, 0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    cmp_two_paths_with(&cases[c], shares_dynamic_or_fixed, 0.0, NULL);
}

/* One training step fused and one with the two ops apart, bf16 and f32. */
static void fused_matches_apart(void **st) {
  (void)st;
  cmp_require_cpu();
  const cmp_case cases[] = {{"head bf16", b_head, 3, 3, 41, 37, 1, SP_PLAN_BF16, 5e-3, 0},
                            {"two heads bf16", b_two_heads, 2, 3, 41, 37, 1, SP_PLAN_BF16, 5e-3, 0},
                            {"head f32", b_head, 3, 3, 41, 37, 1, 0, 1e-4, 0},
                            {"two heads f32", b_two_heads, 2, 3, 41, 37, 1, 0, 1e-4, 0}};
  const cmp_two_opts opts = {.must_differ = 1, .shift_free = "head"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    cmp_two_paths_with(&cases[c], fused_or_apart, cases[c].tol, &opts);
}

/* A frozen inference plan prepares the head's weights once and again after
 * sp_plan_params_changed: its output equals a plain plan's before and after
 * the head's weights change, and the change shows (scaling the weights
 * sharpens the heatmaps and moves the expected points). */
static void frozen_plans_follow_weight_changes(void **st) {
  (void)st;
  cmp_require_cpu();
  for (int bf16 = 0; bf16 < 2; bf16++) {
    cmp_case k = {"frozen", b_head, 2, 3, 9, 7, 0, bf16 ? SP_PLAN_BF16 : 0, 0, 0};
    cmp_frozen_follows_weights(&k, "head.weight", -3.0f);
  }
}

/* Taken for a 1x1 convolution whose only consumer is soft-argmax, bf16 or
 * f32, channels-last or channel-blocked input; not for a 3x3 window, a plain
 * NCHW input or before another op. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  const sp_softargmax_attr sam = {1.0f};
  /* amx: 1 where the tile products run when AMX is usable (bf16,
   * channels-last, channels a multiple of 32). */
  struct {
    int bf16, kernel;
    dnnl_format_tag_t tag;
    int softargmax, want, channels, amx;
  } cases[] = {{1, 1, dnnl_acdb, 1, 1, 32, 1},    {0, 1, dnnl_acdb, 1, 1, 32, 0}, {0, 1, dnnl_aBcd16b, 1, 1, 32, 0},
               {1, 1, dnnl_aBcd16b, 1, 1, 32, 0}, {1, 3, dnnl_acdb, 1, 0, 32, 0}, {0, 1, dnnl_abcd, 1, 0, 32, 0},
               {1, 1, dnnl_acdb, 0, 0, 32, 0},    {1, 1, dnnl_acdb, 1, 1, 64, 1}, {1, 1, dnnl_acdb, 1, 1, 48, 0}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    if (cases[t].bf16 && !cmp_bf16_here()) continue; /* bf16 runs from AVX-512 on */
    dnnl_memory_desc_t md;
    const int ch = cases[t].channels;
    dnnl_dims_t dims = {2, ch, 20, 20};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, cases[t].bf16 ? dnnl_bf16 : dnnl_f32, cases[t].tag),
                     dnnl_success);
    const int pad = cases[t].kernel / 2;
    sp_conv2d_attr at = {1, 1, pad, pad, 1, 1, 1};
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, ch, 20, 20), sp_shape4(2, 7, 20, 20),
                                 sp_shape4(7, ch, cases[t].kernel, cases[t].kernel), 1, cases[t].bf16, &md);
    p.consumer[0].op = cases[t].softargmax ? &sp_op_softargmax : &sp_op_relu;
    p.consumer[0].attr = cases[t].softargmax ? (const void *)&sam : NULL;
    assert_int_equal(cpu_conv_prepare(&p), 0);
    if (cpu_conv_is_softargmax(p.state) != cases[t].want)
      fail_msg("case %zu: fused path %s", t, cases[t].want ? "not taken" : "taken");
    if (cases[t].want && p.absorb_consumer != 1) fail_msg("case %zu: soft-argmax not absorbed", t);
    if (cases[t].want && cpu_conv_uses_softargmax_amx(p.state) != (cases[t].amx && cpu_amx_usable()))
      fail_msg("case %zu: AMX tile products %s", t, cases[t].amx && cpu_amx_usable() ? "not taken" : "taken");
    /* planes: f32 on 16-channel blocks in AVX-512 builds */
    const int planes = cases[t].want && !cases[t].bf16 && cases[t].tag == dnnl_aBcd16b && cpu_planes_built();
    if (cases[t].want && cpu_conv_uses_softargmax_planes(p.state) != planes)
      fail_msg("case %zu: products on planes %s", t, planes ? "not taken" : "taken");
    cpu_node_free(p.state);
  }
}

/* The exponential both soft-argmax kernels share (exp_nonpos.h): within
 * 2.5e-7 of exp in relative terms over [-87, 0] (the degree-5 polynomial's
 * 1.7e-7 in float, and the range reduction's rounding), exact at 0, the
 * floor exp(-87) below it (finite, positive: a sum never sees a zero from
 * one logit far below the rest), and NaN through. */
static void exp_nonpos_accuracy(void **st) {
  (void)st;
  double worst = 0, at = 0;
  for (int i = 0; i <= 2000000; i++) {
    const float x = -87.0f * (float)i / 2000000.0f;
    const double want = exp((double)x), err = fabs((double)exp_nonpos(x) - want) / want;
    if (err > worst) worst = err, at = x;
  }
  printf("# exp_nonpos: worst relative error %.3g at %.6g\n", worst, at);
  assert_true(worst < 2.5e-7);
  assert_true(exp_nonpos(0.0f) == 1.0f);
  const float floor87 = exp_nonpos(-87.0f);
  assert_true(floor87 > 0 && exp_nonpos(-1e30f) == floor87 && exp_nonpos(-INFINITY) == floor87);
  assert_true(isnan(exp_nonpos(NAN)));
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(exp_nonpos_accuracy), cmocka_unit_test(head_against_ref),
             cmocka_unit_test(two_heads_against_ref), cmocka_unit_test(fused_matches_apart),
             cmocka_unit_test(amx_matches_matmul), cmocka_unit_test(planes_match_matmul),
             cmocka_unit_test(frozen_plans_follow_weight_changes), cmocka_unit_test(taken_where_it_applies),
             cmocka_unit_test(tiles_however_taken_same_bits))
