/* add, concat and reshape: gradients (all three are linear, so any input
 * works), PyTorch fixtures, and the shape rules with their error text. */
#include <string.h>

#include "opcheck.h"
#include "ops/ops.h"

static int64_t rand_in(sp_test_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(sp_test_rng_next(r) % (uint64_t)(hi - lo + 1));
}

static void add_gradients(void **state) {
  (void)state;
  sp_test_rng r = {31};
  for (int t = 0; t < 4; t++) {
    sp_shape s = sp_shape4(rand_in(&r, 1, 3), rand_in(&r, 1, 4), rand_in(&r, 1, 7), rand_in(&r, 1, 7));
    sp_opcheck_case c = {.label = "add", .op = &sp_op_add, .n_in = 2, .in_shape = {s, s},
                         .seed = 100 + (uint64_t)t};
    /* One input without a gradient: backward must skip it. */
    c.no_grad[t % 2] = t >= 2;
    sp_opcheck_gradients(&c);
  }
}

static void concat_gradients(void **state) {
  (void)state;
  sp_test_rng r = {32};
  for (int t = 0; t < 6; t++) {
    int ndim = (int)rand_in(&r, 2, 5);
    sp_shape base = {ndim, {rand_in(&r, 1, 3), 1, 1, 1, 1}};
    for (int d = 2; d < ndim; d++) base.d[d] = rand_in(&r, 1, 4);
    sp_opcheck_case c = {.label = "concat", .op = &sp_op_concat, .n_in = (int)rand_in(&r, 2, 4),
                         .seed = 200 + (uint64_t)t};
    for (int k = 0; k < c.n_in; k++) {
      c.in_shape[k] = base;
      c.in_shape[k].d[1] = rand_in(&r, 1, 4);
    }
    c.no_grad[1] = t % 2;
    sp_opcheck_gradients(&c);
  }
}

static void reshape_gradients(void **state) {
  (void)state;
  sp_reshape_attr flatten = {2, {0, -1}};
  sp_opcheck_case c = {.label = "reshape flatten", .op = &sp_op_reshape, .attr = &flatten, .n_in = 1,
                       .in_shape = {sp_shape4(3, 2, 5, 3)}, .seed = 300};
  sp_opcheck_gradients(&c);
  sp_reshape_attr split = {4, {0, 0, -1, 2}};
  sp_opcheck_case d = {.label = "reshape split", .op = &sp_op_reshape, .attr = &split, .n_in = 1,
                       .in_shape = {sp_shape3(2, 3, 10)}, .seed = 301};
  sp_opcheck_gradients(&d);
}

static void structure_matches_pytorch(void **state) {
  (void)state;
  sp_opcheck_case add = {.label = "add fixture", .op = &sp_op_add, .n_in = 2};
  sp_opcheck_fixture(&add, "ops/add.safetensors", 1e-6, 1e-7);
  sp_opcheck_case cat3 = {.label = "concat3 fixture", .op = &sp_op_concat, .n_in = 3};
  sp_opcheck_fixture(&cat3, "ops/concat3.safetensors", 0, 1e-30);
  sp_opcheck_case cat2 = {.label = "concat2_2d fixture", .op = &sp_op_concat, .n_in = 2};
  sp_opcheck_fixture(&cat2, "ops/concat2_2d.safetensors", 0, 1e-30);
  sp_reshape_attr flatten = {2, {0, -1}};
  sp_opcheck_case fl = {.label = "reshape_flatten fixture", .op = &sp_op_reshape, .attr = &flatten, .n_in = 1};
  sp_opcheck_fixture(&fl, "ops/reshape_flatten.safetensors", 0, 1e-30);
  sp_reshape_attr split = {4, {2, 3, -1, 5}};
  sp_opcheck_case sp = {.label = "reshape_split fixture", .op = &sp_op_reshape, .attr = &split, .n_in = 1};
  sp_opcheck_fixture(&sp, "ops/reshape_split.safetensors", 0, 1e-30);
}

static int infer(const sp_op_def *op, const void *attr, int n_in, const sp_shape *in, sp_shape *out,
                 const char *want) {
  char err[256] = "";
  int rc = op->infer(attr, n_in, in, 0, NULL, out, err, sizeof err);
  if (rc != 0 && want && !strstr(err, want)) fail_msg("%s: error \"%s\" does not mention \"%s\"", op->name, err, want);
  return rc;
}

static void shape_rules(void **state) {
  (void)state;
  sp_shape o;
  sp_shape ab[2] = {sp_shape4(2, 3, 4, 5), sp_shape4(2, 3, 4, 6)};
  assert_int_equal(infer(&sp_op_add, NULL, 2, ab, &o, "[2,3,4,6]"), -1);
  assert_int_equal(infer(&sp_op_concat, NULL, 2, ab, &o, "[2,3,4,6]"), -1);
  assert_int_equal(infer(&sp_op_concat, NULL, 1, ab, &o, "2.."), -1);
  sp_shape cat[3] = {sp_shape4(2, 3, 4, 5), sp_shape4(2, 1, 4, 5), sp_shape4(2, 7, 4, 5)};
  assert_int_equal(infer(&sp_op_concat, NULL, 3, cat, &o, NULL), 0);
  assert_true(sp_shape_equal(&o, &(sp_shape){4, {2, 11, 4, 5}}));
  sp_shape mixed[2] = {sp_shape4(2, 3, 4, 5), sp_shape3(2, 3, 20)};
  assert_int_equal(infer(&sp_op_concat, NULL, 2, mixed, &o, "[2,3,20]"), -1);

  sp_shape x = sp_shape4(2, 3, 4, 5);
  sp_reshape_attr flatten = {2, {0, -1}};
  assert_int_equal(infer(&sp_op_reshape, &flatten, 1, &x, &o, NULL), 0);
  assert_true(sp_shape_equal(&o, &(sp_shape){2, {2, 60}}));
  sp_reshape_attr keep = {4, {0, 0, -1, 10}};
  assert_int_equal(infer(&sp_op_reshape, &keep, 1, &x, &o, NULL), 0);
  assert_true(sp_shape_equal(&o, &(sp_shape){4, {2, 3, 2, 10}}));
  sp_reshape_attr two = {3, {-1, -1, 5}};
  assert_int_equal(infer(&sp_op_reshape, &two, 1, &x, &o, "-1"), -1);
  sp_reshape_attr odd = {2, {7, -1}};
  assert_int_equal(infer(&sp_op_reshape, &odd, 1, &x, &o, "[2,3,4,5]"), -1);
  sp_reshape_attr wrong = {2, {10, 10}};
  assert_int_equal(infer(&sp_op_reshape, &wrong, 1, &x, &o, "[10,10]"), -1);
  sp_reshape_attr deep = {5, {0, 0, 0, 0, 0}};
  assert_int_equal(infer(&sp_op_reshape, &deep, 1, &x, &o, "dim 4"), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(add_gradients),
      cmocka_unit_test(concat_gradients),
      cmocka_unit_test(reshape_gradients),
      cmocka_unit_test(structure_matches_pytorch),
      cmocka_unit_test(shape_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
