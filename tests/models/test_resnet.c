/* ResNet and ResUNet builders: torchvision's parameter names, shapes and
 * counts; forward, loss and every gradient against PyTorch (fixtures from
 * tools/fixtures/resnet.py, reference in float64); the seed's ResUNet-72
 * layout; shapes of every variant; registry and config keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"
#include "spry/graph.h"
#include "spry/models.h"
#include "spry/safetensors.h"
#include "fixture.h"
#include "testkit.h"

#define SAMPLE 17 /* tools/fixtures/resnet.py SAMPLE */

/* Mirrors hash_init() of tools/fixtures/resnet.py: the i-th parameter with
 * more than one dimension gets (2u - 1) sqrt(3 / fan_in), u = frac(43758.5453
 * sin(12.9898 j + 78.233 (i + 1))); biases outside BN are zeroed. Relies on
 * spry registering parameters in PyTorch's module order, which the gradient
 * comparisons then also check. */
static void hash_init(sp_graph *g) {
  int i = 0;
  for (int p = 0; p < sp_graph_param_count(g); p++) {
    if (!sp_graph_param_grad(g, p)) continue;
    sp_tensor *t = sp_graph_param_value(g, p);
    float *x = t->data;
    if (t->shape.ndim > 1) {
      double bound = sqrt(3.0 / (double)(sp_tensor_numel(t) / t->shape.d[0]));
      /* volatile: the argument must round like PyTorch's (two products, then
       * a sum); a fused multiply-add (-march=native) changes it by an ulp,
       * which the 43758x hash turns into a 1e-4 weight difference. */
      volatile double phase = 78.233 * (i + 1);
      for (int64_t j = 0; j < sp_tensor_numel(t); j++) {
        volatile double ramp = 12.9898 * (double)j;
        double h = sin(ramp + phase) * 43758.5453;
        x[j] = (float)((2 * (h - floor(h)) - 1) * bound);
      }
      i++;
    } else if (strstr(sp_graph_param_name(g, p), "bias") && !strstr(sp_graph_param_name(g, p), "bn")) {
      memset(x, 0, sp_tensor_bytes(t));
    }
  }
}

static void formula_image(float *x, int64_t n) {
  for (int64_t j = 0; j < n; j++) x[j] = (float)(sin(0.013 * (double)j) * cos(0.007 * (double)j));
}

/* Compares against the float64 reference: max |spry - ref| / (atol + rtol
 * |ref|) must be <= max(1, 4 x PyTorch float32's own ratio, stored as
 * "f32ratio.<key>"): deep nets with batch-2 BN amplify float32 rounding in
 * a few gradient elements past 1e-3 in PyTorch too, while a real bug is
 * orders of magnitude off. Big tensors are stored as "<what>_sample.<rest>"
 * (every SAMPLE-th element). */
static void expect_close(sp_st_file *f, const char *key, const float *got, int64_t n, double rtol, double atol) {
  const sp_tensor *want = sp_st_get(f, key);
  int64_t stride = 1;
  if (!want) {
    char sampled[600];
    const char *dot = strchr(key, '.');
    snprintf(sampled, sizeof sampled, "%.*s_sample%s", (int)(dot - key), key, dot);
    want = sp_fixture_get(f, sampled);
    stride = SAMPLE;
  }
  char rkey[620];
  snprintf(rkey, sizeof rkey, "f32ratio.%s", key);
  double limit = fmax(1.0, 4.0 * ((const float *)sp_fixture_get(f, rkey)->data)[0]);
  int64_t m = sp_tensor_numel(want);
  if ((n + stride - 1) / stride != m) fail_msg("%s: %lld elements vs the fixture's %lld", key, (long long)n, (long long)m);
  const float *w = want->data;
  double worst = 0;
  int64_t at = 0;
  for (int64_t j = 0; j < m; j++) {
    double r = fabs((double)got[j * stride] - w[j]) / (atol + rtol * fabs((double)w[j]));
    if (!(r <= worst)) worst = r, at = j;
  }
  if (!(worst <= limit))
    fail_msg("%s[%lld]: spry %.8g vs PyTorch %.8g (rtol %g, atol %g: ratio %.3g, limit %.3g)", key,
             (long long)(at * stride), got[at * stride], w[at], rtol, atol, worst, limit);
}

/* Every trainable parameter's gradient is in the fixture and close to it, and
 * the fixture has no gradient we lack (so the names match one to one). */
static void compare_all_grads(sp_graph *g, sp_st_file *f) {
  char key[600];
  int ours = 0, theirs = 0;
  for (int p = 0; p < sp_graph_param_count(g); p++) {
    sp_tensor *gr = sp_graph_param_grad(g, p);
    if (!gr) continue;
    snprintf(key, sizeof key, "grad.%s", sp_graph_param_name(g, p));
    expect_close(f, key, gr->data, sp_tensor_numel(gr), 1e-3, 1e-5);
    ours++;
  }
  for (int i = 0; i < sp_st_count(f); i++) theirs += !strncmp(sp_st_name(f, i), "grad", 4); /* not f32ratio.grad */
  if (ours != theirs) fail_msg("%d trainable parameters, PyTorch has %d", ours, theirs);
}

static void expect_loss(sp_plan *plan, sp_st_file *f) {
  float loss = (float)sp_plan_loss(plan), want = ((const float *)sp_fixture_get(f, "loss")->data)[0];
  printf("# loss spry %.8f torch %.8f\n", loss, want);
  if (!(fabs(loss - want) <= 1e-5 * fabs(want))) fail_msg("loss %.8g vs PyTorch %.8g", loss, want);
}

/* ---- torchvision layout ------------------------------------------------------ */

static sp_graph *build_named(const char *name, int base_width, int h, int w, int keypoints, sp_value *out) {
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_model_spec spec = {.name = name, .channels = 3, .height = h, .width = w, .keypoints = keypoints,
                        .base_width = base_width};
  *out = sp_model_build(g, &spec, x);
  if (sp_graph_error(g)) fail_msg("%s: %s", name, sp_graph_error(g));
  return g;
}

static void torchvision_names_shapes_counts(void **state) {
  (void)state;
  sp_st_file *f = sp_fixture_open("models/resnet_torchvision_names.safetensors");
  static const int depths[3] = {18, 34, 50};
  static const int64_t params[3] = {11689512, 21797672, 25557032};
  static const int keys[3] = {122, 218, 320}, tracked[3] = {20, 36, 53};
  for (int d = 0; d < 3; d++) {
    char name[32], key[600];
    snprintf(name, sizeof name, "resnet%d", depths[d]);
    sp_value out;
    sp_graph *g = build_named(name, 0, 224, 224, 0, &out);
    int64_t n = sp_graph_param_numel(g, 1);
    printf("# %s: %lld parameters, %d tensors\n", name, (long long)n, sp_graph_param_count(g));
    if (n != params[d]) fail_msg("%s: %lld parameters, torchvision has %lld", name, (long long)n, (long long)params[d]);
    /* torchvision's state_dict = our tensors + one num_batches_tracked per BN. */
    snprintf(key, sizeof key, "resnet%d.keys", depths[d]);
    assert_int_equal(atoi(sp_st_meta(f, key)), keys[d]);
    snprintf(key, sizeof key, "resnet%d.num_batches_tracked", depths[d]);
    assert_int_equal(atoi(sp_st_meta(f, key)), tracked[d]);
    assert_int_equal(sp_graph_param_count(g), keys[d] - tracked[d]);
    int matched = 0;
    for (int i = 0; i < sp_st_count(f); i++) {
      const char *k = sp_st_name(f, i);
      size_t pl = strlen(name);
      if (strncmp(k, name, pl) || k[pl] != '/') continue;
      int id = sp_graph_param_find(g, k + pl + 1);
      if (id < 0) fail_msg("%s: torchvision key '%s' has no spry parameter", name, k + pl + 1);
      const sp_tensor *dims = sp_st_get(f, k);
      const sp_tensor *v = sp_graph_param_value(g, id);
      assert_int_equal(v->shape.ndim, sp_tensor_numel(dims));
      for (int j = 0; j < v->shape.ndim; j++) assert_int_equal(v->shape.d[j], ((const int32_t *)dims->data)[j]);
      matched++;
    }
    assert_int_equal(matched, sp_graph_param_count(g));
    /* A few by name, so a reader sees what the layout is. */
    assert_true(sp_graph_param_find(g, "conv1.weight") >= 0);
    assert_true(sp_graph_param_find(g, "layer1.0.bn1.running_var") >= 0);
    assert_true(sp_graph_param_find(g, "layer2.0.downsample.0.weight") >= 0);
    assert_true(sp_graph_param_find(g, "layer2.0.downsample.1.running_mean") >= 0);
    assert_true(sp_graph_param_find(g, "fc.bias") >= 0);
    assert_int_equal(sp_graph_param_find(g, "layer1.0.downsample.0.weight") >= 0, depths[d] == 50);
    sp_graph_free(g);
  }
  sp_st_close(f);
}

/* Builds, formula-initialises, runs one training-mode forward + backward on
 * a formula image; labels or target points come from the fixture. */
static sp_plan *run_step(sp_graph *g, sp_st_file *f, sp_value out, int n, int h, int w, int keypoints) {
  sp_value target;
  if (keypoints) {
    target = sp_graph_input(g, "target", SP_F32, keypoints);
    sp_graph_loss(g, sp_l1_loss(g, out, target), 1.0f);
  } else {
    target = sp_graph_input(g, "labels", SP_I32, -1);
    sp_graph_loss(g, sp_cross_entropy(g, out, target), 1.0f);
  }
  sp_graph_output(g, out, "out");
  if (sp_graph_error(g)) fail_msg("%s", sp_graph_error(g));
  hash_init(g);
  sp_input_shape shapes[2] = {{"image", sp_shape4(n, 3, h, w)},
                              {keypoints ? "target" : "labels", keypoints ? sp_shape3(n, keypoints, 2) : sp_shape1(n)}};
  sp_plan *plan = sp_plan_new(g, 2, shapes, SP_BACKEND_REF, 1, 0);
  if (!plan) fail_msg("%s", sp_last_error());
  formula_image(sp_plan_input(plan, "image")->data, (int64_t)n * 3 * h * w);
  const sp_tensor *t = sp_fixture_get(f, keypoints ? "target" : "labels");
  memcpy(sp_plan_input(plan, keypoints ? "target" : "labels")->data, t->data, sp_tensor_bytes(t));
  sp_graph_zero_grad(g);
  assert_int_equal(sp_plan_forward(plan), 0);
  assert_int_equal(sp_plan_backward(plan), 0);
  return plan;
}

static void torchvision_resnet18_matches_torch(void **state) {
  (void)state;
  /* Full width: ~4 GFLOP on the plain-C backend, too slow under sanitizers;
   * the width-8 parity tests below cover the same code there. */
  if (sp_test_sanitized()) skip();
  sp_st_file *f = sp_fixture_open("models/resnet_torchvision18.safetensors");
  sp_value out;
  sp_graph *g = build_named("resnet18", 0, 64, 64, 0, &out);
  sp_plan *plan = run_step(g, f, out, 2, 64, 64, 0);
  expect_close(f, "logits", sp_plan_output(plan, "out")->data, 2 * 1000, 1e-4, 1e-5);
  expect_loss(plan, f);
  static const char *some[4] = {"conv1.weight", "layer4.1.bn2.weight", "layer2.0.downsample.0.weight", "fc.bias"};
  char key[300];
  for (int i = 0; i < 4; i++) {
    const sp_tensor *gr = sp_graph_param_grad(g, sp_graph_param_find(g, some[i]));
    snprintf(key, sizeof key, "grad.%s", some[i]);
    expect_close(f, key, gr->data, sp_tensor_numel(gr), 1e-3, 1e-5);
  }
  sp_plan_free(plan);
  sp_graph_free(g);
  sp_st_close(f);
}

static void resnet50_c_d_blurpool_hardswish_matches_torch(void **state) {
  (void)state;
  sp_st_file *f = sp_fixture_open("models/resnet50_cdbh.safetensors");
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_resnet_config c = {.depth = 50, .width = 8, .num_classes = 10, .variant_c = 1, .variant_d = 1, .blurpool = 1,
                        .hardswish = 1};
  sp_value out = sp_model_resnet(g, x, &c);
  sp_plan *plan = run_step(g, f, out, 2, 64, 64, 0);
  expect_close(f, "logits", sp_plan_output(plan, "out")->data, 2 * 10, 1e-4, 1e-5);
  expect_loss(plan, f);
  compare_all_grads(g, f);
  sp_plan_free(plan);
  sp_graph_free(g);
  sp_st_close(f);
}

static void resunet_matches(const char *fixture, const sp_resunet_config *c) {
  sp_st_file *f = sp_fixture_open(fixture);
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3), heat;
  sp_value out = sp_model_resunet(g, x, c, &heat);
  assert_true(heat >= 0);
  sp_plan *plan = run_step(g, f, out, 2, 64, 64, 5);
  expect_close(f, "points", sp_plan_output(plan, "out")->data, 2 * 5 * 2, 1e-4, 1e-4);
  const sp_tensor *h = sp_plan_output(plan, "heatmaps");
  assert_non_null(h);
  assert_true(h->shape.ndim == 4 && h->shape.d[1] == 5 && h->shape.d[2] == 64 && h->shape.d[3] == 64);
  expect_close(f, "heatmaps.all", h->data, sp_tensor_numel(h), 1e-4, 1e-5);
  expect_loss(plan, f);
  compare_all_grads(g, f);
  sp_plan_free(plan);
  sp_graph_free(g);
  sp_st_close(f);
}

static void resunet50_seed_switches_match_torch(void **state) {
  (void)state;
  sp_resunet_config c = sp_resunet50_default(5);
  c.encoder.width = 8;
  resunet_matches("models/resunet50_seed.safetensors", &c);
}

static void resunet18_small_matches_torch(void **state) {
  (void)state;
  sp_resunet_config c = {.encoder = {.depth = 18, .width = 8}, .keypoints = 5};
  resunet_matches("models/resunet18_small.safetensors", &c);
}

/* ---- the seed's ResUNet-72 ---------------------------------------------------- */

static void resunet50_is_resunet72(void **state) {
  (void)state;
  sp_value out;
  sp_graph *g = build_named("resunet50", 0, 224, 224, 68, &out);
  /* Layers as the seed counts them: weighted convs on the main path (stem 3,
   * 16 bottlenecks x 3, 5 x (up-conv + 3), output 1); shortcut projections
   * are not counted. */
  int layers = 0;
  for (int p = 0; p < sp_graph_param_count(g); p++) {
    const char *n = sp_graph_param_name(g, p);
    if (sp_graph_param_value(g, p)->shape.ndim == 4 && !strstr(n, "downsample") && !strstr(n, "shortcut")) layers++;
  }
  assert_int_equal(layers, 72);
  /* The switches the seed names: three 3x3 stem convs, the third strided
   * (no max-pool, no pool_conv), BlurPool shortcuts (conv at downsample.1). */
  assert_true(sp_graph_param_find(g, "conv1.6.weight") >= 0);
  assert_true(sp_graph_param_find(g, "pool_conv.weight") < 0);
  assert_true(sp_graph_param_find(g, "layer2.0.downsample.1.weight") >= 0);
  assert_true(sp_graph_param_find(g, "decoder.4.block.conv3.weight") >= 0);
  int64_t n = sp_graph_param_numel(g, 1);
  printf("# resunet50 (K=68): %lld parameters (the seed: 31M)\n", (long long)n);
  assert_true(n > 29000000 && n < 33000000);
  /* Shapes at 224x224, inference plan (shapes only, no forward: the ref
   * backend would take seconds). */
  sp_input_shape in = {"image", sp_shape4(2, 3, 224, 224)};
  sp_plan *plan = sp_plan_new(g, 1, &in, SP_BACKEND_REF, 0, 0);
  if (!plan) fail_msg("%s", sp_last_error());
  const sp_shape *s = sp_plan_shape(plan, out);
  assert_true(s->ndim == 3 && s->d[0] == 2 && s->d[1] == 68 && s->d[2] == 2);
  const sp_tensor *h = sp_plan_output(plan, "heatmaps");
  assert_non_null(h);
  assert_true(h->shape.ndim == 4 && h->shape.d[0] == 2 && h->shape.d[1] == 68 && h->shape.d[2] == 224 &&
              h->shape.d[3] == 224);
  sp_plan_free(plan);
  sp_graph_free(g);
}

/* ---- every variant builds --------------------------------------------------------- */

static void check_shapes(const char *model, const sp_model_spec *spec, int h, int w) {
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_model_spec s = *spec;
  s.name = model, s.height = h, s.width = w;
  sp_value out = sp_model_build(g, &s, x);
  if (sp_graph_error(g)) fail_msg("%s %dx%d: %s", model, h, w, sp_graph_error(g));
  sp_input_shape in = {"image", sp_shape4(1, 3, h, w)};
  sp_plan *plan = sp_plan_new(g, 1, &in, SP_BACKEND_REF, 1, 0);
  if (!plan) fail_msg("%s %dx%d (c%d d%d stem%d blur%d hs%d): %s", model, h, w, s.variant_c, s.variant_d, s.stem_conv,
                      s.blurpool, s.hardswish, sp_last_error());
  const sp_shape *o = sp_plan_shape(plan, out);
  if (!strncmp(model, "resunet", 7)) {
    assert_true(o->ndim == 3 && o->d[0] == 1 && o->d[1] == 3 && o->d[2] == 2);
    const sp_shape *hs = &sp_plan_output(plan, "heatmaps")->shape;
    assert_true(hs->ndim == 4 && hs->d[1] == 3 && hs->d[2] == h && hs->d[3] == w);
  } else {
    assert_true(o->ndim == 2 && o->d[0] == 1 && o->d[1] == 7);
  }
  sp_plan_free(plan);
  sp_graph_free(g);
}

static void every_variant_builds(void **state) {
  (void)state;
  static const char *models[5] = {"resnet18", "resnet34", "resnet50", "resunet18", "resunet50"};
  /* Each switch alone, all on, all off (-1 also turns off resunet50's defaults). */
  for (int m = 0; m < 5; m++)
    for (int v = 0; v < 7; v++) {
      sp_model_spec s = {.keypoints = 3, .num_classes = 7, .base_width = 8};
      int all = v == 5 ? 1 : v == 6 ? -1 : 0;
      s.variant_c = v == 0 ? 1 : all;
      s.variant_d = v == 1 ? 1 : all;
      s.stem_conv = v == 2 ? 1 : all;
      s.blurpool = v == 3 ? 1 : all;
      s.hardswish = v == 4 ? 1 : all;
      check_shapes(models[m], &s, 64, 64);
      if (!sp_test_sanitized()) check_shapes(models[m], &s, 96, 128);
    }
}

/* ---- registry, config keys, initialisation ------------------------------------------- */

static void registry_switches_and_keys(void **state) {
  (void)state;
  sp_model_spec s = {.name = "resunet50", .channels = 3, .height = 64, .width = 64, .keypoints = 5, .base_width = 8};
  assert_int_equal(sp_model_spec_set(&s, "variant_c", "false"), 0);
  assert_int_equal(sp_model_spec_set(&s, "hardswish", "on"), 0);
  assert_int_equal(sp_model_spec_set(&s, "base_width", "16"), 0);
  assert_int_equal(s.variant_c, -1);
  assert_int_equal(s.hardswish, 1);
  assert_int_equal(s.base_width, 16);
  assert_int_equal(sp_model_spec_set(&s, "blurpool", "maybe"), -1);
  assert_non_null(strstr(sp_last_error(), "blurpool"));
  assert_int_equal(sp_model_spec_set(&s, "base_width", "15"), -1);
  assert_int_equal(sp_model_spec_set(&s, "depth", "3"), -1);
  assert_non_null(strstr(sp_last_error(), "variant_c"));
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  if (sp_model_build(g, &s, x) < 0) fail_msg("%s", sp_graph_error(g));
  /* variant C off: the 7x7 stem, with a separate strided pool_conv (stem_conv
   * still on by resunet50's default); D's BlurPool shortcut kept. */
  assert_int_equal(sp_graph_param_value(g, sp_graph_param_find(g, "conv1.weight"))->shape.d[3], 7);
  assert_true(sp_graph_param_find(g, "pool_conv.weight") >= 0);
  assert_true(sp_graph_param_find(g, "layer3.0.downsample.2.weight") >= 0);
  assert_int_equal(sp_graph_param_value(g, sp_graph_param_find(g, "layer1.0.conv2.weight"))->shape.d[0], 16);
  sp_graph_free(g);

  g = sp_graph_new(1);
  x = sp_graph_input(g, "image", SP_F32, 3);
  sp_model_spec bad = {.name = "resnet51", .channels = 3, .height = 64, .width = 64};
  assert_true(sp_model_build(g, &bad, x) < 0);
  assert_non_null(strstr(sp_graph_error(g), "resunet50"));
  sp_graph_free(g);
  g = sp_graph_new(1);
  x = sp_graph_input(g, "image", SP_F32, 3);
  sp_model_spec odd = {.name = "resunet18", .channels = 3, .height = 64, .width = 80, .keypoints = 5};
  assert_true(sp_model_build(g, &odd, x) < 0);
  assert_non_null(strstr(sp_graph_error(g), "multiple of 32"));
  sp_graph_free(g);
}

static double stddev(const sp_tensor *t) {
  double s = 0, s2 = 0;
  int64_t n = sp_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) s += ((const float *)t->data)[i], s2 += (double)((const float *)t->data)[i] * ((const float *)t->data)[i];
  return sqrt(s2 / n - (s / n) * (s / n));
}

static void kaiming_and_zero_init_residual(void **state) {
  (void)state;
  sp_graph *g = sp_graph_new(7);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_resnet_config c = {.depth = 50, .zero_init_residual = 1};
  assert_true(sp_model_resnet(g, x, &c) >= 0);
  /* torchvision: kaiming_normal(fan_out, relu): std sqrt(2 / (64 * 3 * 3)). */
  double sd = stddev(sp_graph_param_value(g, sp_graph_param_find(g, "layer1.0.conv2.weight")));
  double want = sqrt(2.0 / (64 * 9));
  if (fabs(sd - want) > 0.03 * want) fail_msg("layer1.0.conv2 std %.5f, kaiming fan_out %.5f", sd, want);
  const sp_tensor *gamma = sp_graph_param_value(g, sp_graph_param_find(g, "layer3.2.bn3.weight"));
  for (int64_t i = 0; i < sp_tensor_numel(gamma); i++) assert_true(((const float *)gamma->data)[i] == 0.0f);
  gamma = sp_graph_param_value(g, sp_graph_param_find(g, "layer3.2.bn2.weight"));
  assert_true(((const float *)gamma->data)[0] == 1.0f);
  sp_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(torchvision_names_shapes_counts),
      cmocka_unit_test(torchvision_resnet18_matches_torch),
      cmocka_unit_test(resnet50_c_d_blurpool_hardswish_matches_torch),
      cmocka_unit_test(resunet50_seed_switches_match_torch),
      cmocka_unit_test(resunet18_small_matches_torch),
      cmocka_unit_test(resunet50_is_resunet72),
      cmocka_unit_test(every_variant_builds),
      cmocka_unit_test(registry_switches_and_keys),
      cmocka_unit_test(kaiming_and_zero_init_residual),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
