/* softargmax and spatial_softmax: gradients by finite differences, PyTorch
 * fixtures (tools/fixtures/head.py), shape errors, and large logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "opcheck.h"

static void softargmax_gradients(void **state) {
  (void)state;
  const int64_t shapes[][4] = {{2, 3, 7, 9}, {1, 1, 1, 1}, {1, 2, 1, 6}, {3, 1, 5, 1}, {2, 2, 4, 4}};
  const float scales[] = {1.0f, 0.25f, 2.0f, 1.0f, -0.5f};
  for (int i = 0; i < 5; i++) {
    sp_softargmax_attr at = {.scale = scales[i]};
    sp_opcheck_case c = {.label = "softargmax", .op = &sp_op_softargmax, .attr = &at, .n_in = 1, .lo = -3, .hi = 3,
                         .seed = 100 + (uint64_t)i};
    c.in_shape[0] = sp_shape4(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    sp_opcheck_gradients(&c);
  }
}

static void spatial_softmax_gradients(void **state) {
  (void)state;
  const int64_t shapes[][4] = {{2, 3, 5, 7}, {1, 1, 1, 1}, {1, 2, 3, 1}};
  for (int i = 0; i < 3; i++) {
    sp_opcheck_case c = {.label = "spatial_softmax", .op = &sp_op_spatial_softmax, .n_in = 1, .lo = -3, .hi = 3,
                         .seed = 200 + (uint64_t)i};
    c.in_shape[0] = sp_shape4(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    sp_opcheck_gradients(&c);
  }
}

static void softargmax_fixtures(void **state) {
  (void)state;
  sp_softargmax_attr one = {.scale = 1.0f}, quarter = {.scale = 0.25f};
  sp_opcheck_case c = {.label = "softargmax fixture", .op = &sp_op_softargmax, .attr = &one, .n_in = 1};
  sp_opcheck_fixture(&c, "ops/softargmax.safetensors", 1e-5, 1e-6);
  c.attr = &quarter;
  sp_opcheck_fixture(&c, "ops/softargmax_scale.safetensors", 1e-5, 1e-6);
  sp_opcheck_case s = {.label = "spatial_softmax fixture", .op = &sp_op_spatial_softmax, .n_in = 1};
  sp_opcheck_fixture(&s, "ops/spatial_softmax.safetensors", 1e-5, 1e-7);
}

/* A one-hot-like plane must land on its peak, and logits near FLT_MAX must
 * not overflow (max subtraction). */
static void softargmax_peak_and_large_logits(void **state) {
  (void)state;
  sp_softargmax_attr at = {.scale = 2.0f};
  sp_shape is = sp_shape4(1, 2, 4, 5), os;
  char err[256];
  assert_int_equal(sp_op_softargmax.infer(&at, 1, &is, 0, NULL, &os, err, sizeof err), 0);
  assert_int_equal(os.ndim, 3);
  assert_int_equal(os.d[2], 2);
  sp_tensor x = sp_tensor_alloc(SP_F32, is), y = sp_tensor_alloc(SP_F32, os);
  float *xv = x.data;
  for (int i = 0; i < 40; i++) xv[i] = -1e30f;
  xv[2 * 5 + 3] = 3e38f;      /* plane 0: peak at row 2, column 3 */
  xv[20 + 1 * 5 + 4] = 0.0f; /* plane 1: peak at row 1, column 4 */
  size_t nb = sp_op_softargmax.saved_bytes(&at, 1, &is, &os);
  float *saved = sp_xmalloc(nb);
  sp_op_args a = {.attr = &at, .n_in = 1, .in = {&x}, .out = &y, .saved = saved};
  sp_op_softargmax.forward(&a);
  const float *yv = y.data;
  assert_true(yv[0] == 6.0f && yv[1] == 4.0f);
  assert_true(yv[2] == 8.0f && yv[3] == 2.0f);
  free(saved);
  sp_tensor_free(&x);
  sp_tensor_free(&y);
}

static void heatmap_shape_errors(void **state) {
  (void)state;
  sp_softargmax_attr at = {.scale = 1.0f};
  sp_shape bad = sp_shape3(2, 3, 4), out;
  char err[256] = "";
  assert_int_equal(sp_op_softargmax.infer(&at, 1, &bad, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[2,3,4]"));
  assert_int_equal(sp_op_spatial_softmax.infer(NULL, 1, &bad, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "spatial_softmax"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(softargmax_gradients),
      cmocka_unit_test(spatial_softmax_gradients),
      cmocka_unit_test(softargmax_fixtures),
      cmocka_unit_test(softargmax_peak_and_large_logits),
      cmocka_unit_test(heatmap_shape_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
