/* TSN / TSM graphs: output shapes, the consensus is the mean over a clip's
 * frames, TSM with zero shift computes exactly TSN, TSM with a shift differs
 * and mixes frames, registry names, and graphs for other frame counts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spry/models.h"
#include "testkit.h"

static sp_graph *build(int tsm, float back, float fwd, int t, int classes, sp_value *out) {
  sp_graph *g = sp_graph_new(7);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_tsn_config c = sp_tsn_config_default(18, t, classes, tsm);
  c.width = 8;
  c.shift_back = back, c.shift_fwd = fwd;
  *out = sp_model_tsn(g, x, &c);
  sp_graph_output(g, *out, "logits");
  if (sp_graph_error(g)) fail_msg("%s", sp_graph_error(g));
  return g;
}

static float *run(sp_graph *g, const float *in, int n, int t, int size, int classes) {
  sp_input_shape s = {"image", sp_shape4((int64_t)n * t, 3, size, size)};
  sp_plan *p = sp_plan_new(g, 1, &s, SP_BACKEND_REF, 0, 0);
  if (!p) fail_msg("%s", sp_last_error());
  memcpy(sp_plan_input(p, "image")->data, in, sizeof(float) * (size_t)n * t * 3 * size * size);
  assert_int_equal(sp_plan_forward(p), 0);
  const sp_tensor *o = sp_plan_output(p, "logits");
  assert_int_equal(o->shape.ndim, 2);
  assert_int_equal(o->shape.d[0], n);
  assert_int_equal(o->shape.d[1], classes);
  float *r = malloc(sizeof(float) * (size_t)n * classes);
  memcpy(r, o->data, sizeof(float) * (size_t)n * classes);
  sp_plan_free(p);
  return r;
}

static float *random_clips(int n, int t, int size) {
  int64_t k = (int64_t)n * t * 3 * size * size;
  float *x = malloc(sizeof(float) * (size_t)k);
  sp_test_rng r = {11};
  sp_test_fill_uniform(&r, x, k, -1, 1);
  return x;
}

static void tsm_with_zero_shift_is_tsn(void **state) {
  (void)state;
  const int n = 2, t = 4, s = 32, k = 5;
  sp_value a, b, c;
  sp_graph *tsn = build(0, 0, 0, t, k, &a), *tsm0 = build(1, 0, 0, t, k, &b), *tsm = build(1, 0.125f, 0.125f, t, k, &c);
  /* Same parameters, same names, same initial values. */
  assert_int_equal(sp_graph_param_count(tsn), sp_graph_param_count(tsm));
  for (int p = 0; p < sp_graph_param_count(tsn); p++) {
    assert_string_equal(sp_graph_param_name(tsn, p), sp_graph_param_name(tsm, p));
    const sp_tensor *u = sp_graph_param_value(tsn, p), *v = sp_graph_param_value(tsm, p);
    assert_memory_equal(u->data, v->data, sp_tensor_bytes(u));
  }
  assert_true(sp_graph_node_count(tsm0) > sp_graph_node_count(tsn)); /* the shifts are there */
  float *x = random_clips(n, t, s);
  float *ya = run(tsn, x, n, t, s, k), *yb = run(tsm0, x, n, t, s, k), *yc = run(tsm, x, n, t, s, k);
  assert_memory_equal(ya, yb, sizeof(float) * n * k);
  int differs = 0;
  for (int i = 0; i < n * k; i++) differs |= fabsf(ya[i] - yc[i]) > 1e-6f;
  assert_true(differs);
  free(ya), free(yb), free(yc), free(x);
  sp_graph_free(tsn), sp_graph_free(tsm0), sp_graph_free(tsm);
}

/* TSN's logits are the mean of per-frame logits, so they do not depend on
 * frame order; TSM's do (it sees motion). */
static void consensus_ignores_order_only_for_tsn(void **state) {
  (void)state;
  const int n = 1, t = 4, s = 32, k = 3;
  size_t frame = 3 * s * s;
  float *x = random_clips(n, t, s), *rev = malloc(sizeof(float) * frame * t);
  for (int f = 0; f < t; f++) memcpy(rev + f * frame, x + (t - 1 - f) * frame, sizeof(float) * frame);
  sp_value o;
  sp_graph *tsn = build(0, 0, 0, t, k, &o), *tsm = build(1, 0.25f, 0.25f, t, k, &o);
  float *a = run(tsn, x, n, t, s, k), *b = run(tsn, rev, n, t, s, k);
  for (int i = 0; i < k; i++) assert_float_equal(a[i], b[i], 1e-4);
  float *c = run(tsm, x, n, t, s, k), *d = run(tsm, rev, n, t, s, k);
  double diff = 0;
  for (int i = 0; i < k; i++) diff += fabs(c[i] - d[i]);
  assert_true(diff > 1e-5);
  free(a), free(b), free(c), free(d), free(x), free(rev);
  sp_graph_free(tsn), sp_graph_free(tsm);
}

static void registry_and_errors(void **state) {
  (void)state;
  const char *names[] = {"tsn-r18", "tsm-r18", "tsn-r50", "tsm-r50"};
  for (int i = 0; i < 4; i++) {
    if (sp_test_sanitized() && i >= 2) break; /* r50 builds are slow under ASan */
    sp_graph *g = sp_graph_new(1);
    sp_value x = sp_graph_input(g, "image", SP_F32, 3);
    sp_model_spec spec = {.name = names[i], .channels = 3, .height = 224, .width = 224, .num_classes = 101,
                          .base_width = 8};
    assert_int_equal(sp_model_spec_set(&spec, "segments", "8"), 0);
    assert_int_equal(sp_model_spec_set(&spec, "shift_back", "0.25"), 0);
    sp_value y = sp_model_build(g, &spec, x);
    assert_true(y >= 0);
    assert_null(sp_graph_error(g));
    assert_true(sp_graph_param_find(g, "layer4.1.conv1.weight") >= 0 || i >= 2);
    assert_true(sp_graph_param_find(g, "fc.weight") >= 0);
    sp_graph_free(g);
  }
  sp_model_spec bad = {.name = "tsm-r18"};
  assert_int_equal(sp_model_spec_set(&bad, "shift_fwd", "2"), -1);
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_tsn_config c = sp_tsn_config_default(18, 8, 10, 1);
  c.shift_back = 0.75f, c.shift_fwd = 0.5f;
  assert_int_equal(sp_model_tsn(g, x, &c), -1);
  assert_non_null(strstr(sp_graph_error(g), "shift"));
  sp_graph_free(g);
  /* N*T must divide into clips of T frames: a plan error names the shift. */
  sp_value o;
  g = build(1, 0.125f, 0.125f, 4, 3, &o);
  sp_input_shape s = {"image", sp_shape4(6, 3, 32, 32)};
  assert_null(sp_plan_new(g, 1, &s, SP_BACKEND_REF, 0, 0));
  sp_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tsm_with_zero_shift_is_tsn),
      cmocka_unit_test(consensus_ignores_order_only_for_tsn),
      cmocka_unit_test(registry_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
