/* Shapes, dtypes, bf16 rounding and the error convention. */
#include <math.h>
#include <string.h>

#include "testkit.h"

static void shapes_and_sizes(void **state) {
  (void)state;
  sp_shape s = sp_shape4(2, 3, 5, 7);
  assert_int_equal(sp_shape_numel(&s), 210);
  char buf[64];
  assert_string_equal(sp_shape_str(&s, buf, sizeof buf), "[2,3,5,7]");
  sp_tensor t = sp_tensor_alloc(SP_BF16, s);
  assert_int_equal(sp_tensor_bytes(&t), 420);
  sp_tensor_free(&t);
  sp_dtype d;
  assert_int_equal(sp_dtype_parse("BF16", &d), 0);
  assert_int_equal(d, SP_BF16);
  assert_int_equal(sp_dtype_parse("f64", &d), -1);
  assert_non_null(strstr(sp_last_error(), "f64"));
}

static void bf16_round_to_nearest_even(void **state) {
  (void)state;
  assert_true(sp_bf16_to_f32(sp_f32_to_bf16(1.0f)) == 1.0f);
  /* 1 + 2^-8 is exactly half way between two bf16 values: ties go to even (1.0). */
  assert_true(sp_bf16_to_f32(sp_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  /* 1 + 3*2^-8 is half way between 1+2^-7 (odd) and 1+2^-6 (even). */
  assert_true(sp_bf16_to_f32(sp_f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);
  assert_true(isnan(sp_bf16_to_f32(sp_f32_to_bf16(NAN))));
  assert_true(isinf(sp_bf16_to_f32(sp_f32_to_bf16(INFINITY))));
}

static int checked(int ok) {
  SP_CHECK(ok, "opening %s", "faces.yaml");
  return 0;
}

static void sp_check_names_the_action(void **state) {
  (void)state;
  assert_int_equal(checked(1), 0);
  assert_int_equal(checked(0), -1);
  assert_non_null(strstr(sp_last_error(), "opening faces.yaml"));
  assert_non_null(strstr(sp_last_error(), "test_tensor.c"));
  assert_null(strstr(sp_last_error(), "/"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shapes_and_sizes),
      cmocka_unit_test(bf16_round_to_nearest_even),
      cmocka_unit_test(sp_check_names_the_action),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
