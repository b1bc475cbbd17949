/* linear: shape rule and error text, gradients against finite differences
 * (odd sizes, with and without bias), PyTorch fixtures. */
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"
#include "opcheck.h"

static void linear_infer_shapes_and_errors(void **state) {
  (void)state;
  char err[256] = "";
  sp_shape out, in[1] = {sp_shape2(5, 7)}, p[2] = {sp_shape2(3, 7), sp_shape1(3)};
  assert_int_equal(sp_op_linear.infer(NULL, 1, in, 2, p, &out, err, sizeof err), 0);
  assert_int_equal(out.ndim, 2);
  assert_int_equal(out.d[0], 5);
  assert_int_equal(out.d[1], 3);

  p[0] = sp_shape2(3, 8);
  assert_int_equal(sp_op_linear.infer(NULL, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_string_equal(err, "linear: input has 7 features but weight [3,8] expects 8 (input [5,7])");

  p[0] = sp_shape2(3, 7);
  p[1] = sp_shape1(4);
  assert_int_equal(sp_op_linear.infer(NULL, 1, in, 2, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "bias [4]"));

  in[0] = sp_shape4(5, 7, 1, 1);
  assert_int_equal(sp_op_linear.infer(NULL, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[5,7,1,1]"));
}

static void linear_gradients(void **state) {
  (void)state;
  static const int dims[][3] = {{1, 1, 1}, {3, 5, 2}, {4, 17, 9}, {7, 3, 13}, {2, 64, 5}};
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    for (int bias = 0; bias <= 1; bias++) {
      char label[96];
      snprintf(label, sizeof label, "linear x[%d,%d] w[%d,%d]%s", dims[k][0], dims[k][1], dims[k][2],
               dims[k][1], bias ? " bias" : "");
      sp_opcheck_case c = {
          .label = label, .op = &sp_op_linear, .n_in = 1,
          .in_shape = {sp_shape2(dims[k][0], dims[k][1])}, .n_param = 1 + bias,
          .param_shape = {sp_shape2(dims[k][2], dims[k][1]), sp_shape1(dims[k][2])},
          .seed = 300 + k * 2 + (uint64_t)bias,
      };
      sp_opcheck_gradients(&c);
    }
  }
}

static void linear_matches_pytorch(void **state) {
  (void)state;
  sp_opcheck_case c = {.label = "linear_bias", .op = &sp_op_linear, .n_in = 1, .n_param = 2};
  sp_opcheck_fixture(&c, "ops/linear_bias.safetensors", 1e-4, 1e-5);
  c.label = "linear_nobias", c.n_param = 1;
  sp_opcheck_fixture(&c, "ops/linear_nobias.safetensors", 1e-4, 1e-5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(linear_infer_shapes_and_errors),
      cmocka_unit_test(linear_gradients),
      cmocka_unit_test(linear_matches_pytorch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
