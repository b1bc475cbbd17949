/* batchnorm: shape rule and error text, gradients against finite differences
 * (training and eval, [N,C], [N,C,L], [N,C,H,W], with and without affine
 * params / running buffers), PyTorch fixtures (which also check the running
 * mean / unbiased running variance update), and precision with a large mean. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"
#include "opcheck.h"

static const sp_batchnorm_attr bn_default = {1e-5f, 0.1f};

static void batchnorm_infer_shapes_and_errors(void **state) {
  (void)state;
  char err[256] = "";
  sp_shape out, in[1] = {sp_shape4(2, 3, 5, 4)}, p[2] = {sp_shape1(3), sp_shape1(3)};
  assert_int_equal(sp_op_batchnorm.infer(&bn_default, 1, in, 2, p, &out, err, sizeof err), 0);
  assert_true(sp_shape_equal(&out, &in[0]));
  assert_int_equal(sp_op_batchnorm.saved_bytes(&bn_default, 1, in, &out), 2 * 3 * sizeof(float));

  p[1] = sp_shape1(4);
  assert_int_equal(sp_op_batchnorm.infer(&bn_default, 1, in, 2, p, &out, err, sizeof err), -1);
  assert_string_equal(err, "batchnorm: beta [4] must be [3] to match the channels of input [2,3,5,4]");

  in[0] = sp_shape1(3);
  assert_int_equal(sp_op_batchnorm.infer(&bn_default, 1, in, 0, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[3]"));

  in[0] = sp_shape2(4, 3);
  assert_int_equal(sp_op_batchnorm.infer(&bn_default, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "0 or 2 params"));
}

static void run_case(const char *label, sp_shape x, int n_param, int n_state, int training, uint64_t seed) {
  const int64_t c = x.d[1];
  sp_opcheck_case k = {
      .label = label, .op = &sp_op_batchnorm, .attr = &bn_default, .n_in = 1, .in_shape = {x},
      .n_param = n_param, .param_shape = {sp_shape1(c), sp_shape1(c)},
      .n_state = n_state, .state_shape = {sp_shape1(c), sp_shape1(c)},
      .training = training, .seed = seed,
      /* Training-mode BN is far from linear in x: a smaller step keeps the
       * central difference's truncation error below atol. */
      .eps = 3e-3,
  };
  sp_opcheck_gradients(&k);
}

static void batchnorm_gradients_training(void **state) {
  (void)state;
  run_case("bn train [6,4]", sp_shape2(6, 4), 2, 2, 1, 1);
  run_case("bn train [2,3,7]", sp_shape3(2, 3, 7), 2, 2, 1, 2);
  run_case("bn train [3,2,5,3]", sp_shape4(3, 2, 5, 3), 2, 2, 1, 3);
  run_case("bn train [5,3] no affine", sp_shape2(5, 3), 0, 2, 1, 4);
  run_case("bn train [2,3,3,3] no buffers", sp_shape4(2, 3, 3, 3), 2, 0, 1, 5);
}

static void batchnorm_gradients_eval(void **state) {
  (void)state;
  run_case("bn eval [6,4]", sp_shape2(6, 4), 2, 2, 0, 11);
  run_case("bn eval [3,2,5,3]", sp_shape4(3, 2, 5, 3), 2, 2, 0, 12);
  run_case("bn eval [1,3,2,5]", sp_shape4(1, 3, 2, 5), 2, 2, 0, 13);
  run_case("bn eval [4,3] no affine", sp_shape2(4, 3), 0, 2, 0, 14);
  /* Without running buffers eval falls back to batch statistics (PyTorch's
   * track_running_stats=False). */
  run_case("bn eval [4,3,2,2] no buffers", sp_shape4(4, 3, 2, 2), 2, 0, 0, 15);
}

static void batchnorm_matches_pytorch(void **state) {
  (void)state;
  const double rtol = 1e-4, atol = 2e-5;
  sp_opcheck_case c = {.op = &sp_op_batchnorm, .attr = &bn_default, .n_in = 1, .n_param = 2, .n_state = 2};
  c.label = "batchnorm2d_train", c.training = 1;
  sp_opcheck_fixture(&c, "ops/batchnorm2d_train.safetensors", rtol, atol);
  c.label = "batchnorm2d_eval", c.training = 0;
  sp_opcheck_fixture(&c, "ops/batchnorm2d_eval.safetensors", rtol, atol);
  c.label = "batchnorm1d_eval", c.training = 0;
  sp_opcheck_fixture(&c, "ops/batchnorm1d_eval.safetensors", rtol, atol);
  c.label = "batchnorm3d_train", c.training = 1;
  sp_opcheck_fixture(&c, "ops/batchnorm3d_train.safetensors", rtol, atol);
  const sp_batchnorm_attr other = {1e-3f, 0.3f};
  c.label = "batchnorm1d_train (eps 1e-3, momentum 0.3)", c.attr = &other, c.training = 1;
  sp_opcheck_fixture(&c, "ops/batchnorm1d_train.safetensors", rtol, atol);
}

/* Synchronised batch norm in a world of one: the sum over ranks is the
 * identity, so it is batch norm, gradients and PyTorch's figures alike (the
 * sums over ranks themselves are tested by tests/dist). */
static void sum_identity(void *user, double *x, int n) { (void)user, (void)x, (void)n; }
static const sp_batchnorm_sync_attr sync_default = {{1e-5f, 0.1f}, sum_identity, NULL};

static void batchnorm_sync_gradients(void **state) {
  (void)state;
  const sp_shape shapes[3] = {sp_shape2(6, 4), sp_shape4(3, 2, 5, 3), sp_shape3(2, 3, 7)};
  for (int i = 0; i < 3; i++)
    for (int training = 0; training < 2; training++) {
      const int64_t c = shapes[i].d[1];
      sp_opcheck_case k = {.label = training ? "bn sync train" : "bn sync eval", .op = &sp_op_batchnorm_sync,
                           .attr = &sync_default, .n_in = 1, .in_shape = {shapes[i]}, .n_param = 2,
                           .param_shape = {sp_shape1(c), sp_shape1(c)}, .n_state = 2,
                           .state_shape = {sp_shape1(c), sp_shape1(c)}, .training = training,
                           .seed = 40 + (uint64_t)(2 * i + training), .eps = 3e-3};
      sp_opcheck_gradients(&k);
    }
}

static void batchnorm_sync_matches_pytorch(void **state) {
  (void)state;
  sp_opcheck_case c = {.op = &sp_op_batchnorm_sync, .attr = &sync_default, .n_in = 1, .n_param = 2, .n_state = 2};
  c.label = "batchnorm_sync as batchnorm2d_train", c.training = 1;
  sp_opcheck_fixture(&c, "ops/batchnorm2d_train.safetensors", 1e-4, 2e-5);
  c.label = "batchnorm_sync as batchnorm2d_eval", c.training = 0;
  sp_opcheck_fixture(&c, "ops/batchnorm2d_eval.safetensors", 1e-4, 2e-5);
}

/* Activations after a layer without BN can sit far from zero; a one-pass
 * sum-of-squares variance would cancel to garbage there. */
static void batchnorm_large_mean_is_precise(void **state) {
  (void)state;
  const int n = 64;
  sp_tensor x = sp_tensor_alloc(SP_F32, sp_shape2(n, 1)), y = sp_tensor_alloc(SP_F32, sp_shape2(n, 1));
  sp_tensor rm = sp_tensor_alloc(SP_F32, sp_shape1(1)), rv = sp_tensor_alloc(SP_F32, sp_shape1(1));
  float saved[2];
  float *xv = x.data;
  for (int i = 0; i < n; i++) xv[i] = 3000.0f + (float)(i % 8) * 0.01f;
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += xv[i];
  mean /= n;
  for (int i = 0; i < n; i++) var += (xv[i] - mean) * (xv[i] - mean);
  var /= n;
  ((float *)rv.data)[0] = 1.0f;
  sp_op_args a = {.attr = &bn_default, .n_in = 1, .in = {&x}, .n_state = 2, .state = {&rm, &rv},
                  .out = &y, .saved = saved, .training = 1};
  sp_op_batchnorm.forward(&a);
  const float *yv = y.data;
  for (int i = 0; i < n; i++) {
    const double want = (xv[i] - mean) / sqrt(var + 1e-5);
    assert_true(fabs(yv[i] - want) < 1e-4 * (1 + fabs(want)));
  }
  assert_true(fabs(((float *)rm.data)[0] - 0.1 * mean) < 1e-3);
  assert_true(fabs(((float *)rv.data)[0] - (0.9 + 0.1 * var * n / (n - 1))) < 1e-6);
  assert_true(fabs(saved[0] - mean) < 1e-3);
  sp_tensor_free(&x);
  sp_tensor_free(&y);
  sp_tensor_free(&rm);
  sp_tensor_free(&rv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(batchnorm_infer_shapes_and_errors),
      cmocka_unit_test(batchnorm_gradients_training),
      cmocka_unit_test(batchnorm_gradients_eval),
      cmocka_unit_test(batchnorm_matches_pytorch),
      cmocka_unit_test(batchnorm_large_mean_is_precise),
      cmocka_unit_test(batchnorm_sync_gradients),
      cmocka_unit_test(batchnorm_sync_matches_pytorch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
