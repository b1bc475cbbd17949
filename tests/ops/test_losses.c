/* Losses: l1, mse, point (both modes), structure, cross-entropy. Gradients by
 * finite differences (with inputs kept away from the L1 kinks), PyTorch
 * fixtures (tools/fixtures/head.py), sp_structure_neighbours on hand-made
 * shapes, shape errors, and out-of-range labels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "opcheck.h"

/* Same points as MEAN_SHAPE in tools/fixtures/head.py. */
static const float MEAN_SHAPE[7][2] = {{0.0f, 0.0f}, {1.0f, 0.2f}, {2.1f, 0.1f}, {0.4f, 1.5f},
                                       {1.6f, 1.7f}, {3.0f, 1.1f}, {2.2f, 2.9f}};

/* pred and target on opposite sides of 0 by at least 0.8 per element, with
 * a pseudo-random sign pattern: |pred - target| never comes near the L1 kink
 * (nor the point-loss singularity), and both gradient signs occur. */
static void init_apart(int kind, int index, sp_tensor *t, sp_test_rng *rng) {
  float *x = t->data;
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) {
    const float side = (((uint64_t)i * 2654435761u) >> 5) & 1 ? 1.0f : -1.0f;
    const float mag = sp_test_rng_uniform(rng, 0.4f, 1.0f);
    x[i] = (kind == 0 && index == 1) ? -side * mag : side * mag;
  }
}

/* Structure loss: pred_k = 0.3 * ((5k + 3c) mod K) + noise, target = noise
 * (|noise| <= 0.05), so every difference term (p_i - p_j) - (t_i - t_j) with
 * i != j has magnitude >= 0.1 when K is not a multiple of 5. */
static void init_structure(int kind, int index, sp_tensor *t, sp_test_rng *rng) {
  float *x = t->data;
  const int64_t n = t->shape.d[0], k = t->shape.d[1];
  for (int64_t b = 0; b < n; b++)
    for (int64_t i = 0; i < k; i++)
      for (int c = 0; c < 2; c++) {
        const float noise = sp_test_rng_uniform(rng, -0.05f, 0.05f);
        x[(b * k + i) * 2 + c] = index == 0 ? 0.3f * (float)((5 * i + 3 * c) % k) + noise : noise;
      }
  (void)kind;
}

static int64_t g_classes; /* for init_labels: labels in [0, g_classes) */
static void init_labels(int kind, int index, sp_tensor *t, sp_test_rng *rng) {
  (void)kind;
  if (index == 0) {
    sp_test_fill_uniform(rng, t->data, sp_tensor_numel(t), -3, 3);
    return;
  }
  int32_t *y = t->data;
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) y[i] = (int32_t)(sp_test_rng_next(rng) % (uint64_t)g_classes);
}

static void l1_mse_gradients(void **state) {
  (void)state;
  const sp_shape shapes[] = {sp_shape4(2, 3, 4, 5), sp_shape1(1), sp_shape3(3, 7, 2), sp_shape2(5, 3)};
  for (int i = 0; i < 4; i++)
    for (int tgt_grad = 0; tgt_grad < 2; tgt_grad++) {
      sp_opcheck_case c = {.label = "l1_loss", .op = &sp_op_l1_loss, .n_in = 2, .init = init_apart,
                           .seed = 400 + (uint64_t)i};
      c.in_shape[0] = c.in_shape[1] = shapes[i];
      c.no_grad[1] = !tgt_grad;
      sp_opcheck_gradients(&c);
      c.label = "mse_loss";
      c.op = &sp_op_mse_loss;
      c.init = NULL;
      sp_opcheck_gradients(&c);
    }
}

/* sign(0) = 0: an exact hit contributes no gradient, as in PyTorch. */
static void l1_gradient_at_zero(void **state) {
  (void)state;
  float p[3] = {1, 2, 3}, t[3] = {1, 0, 5}, dp[3] = {0}, dt[3] = {0}, out, w = 3.0f;
  sp_tensor tp = sp_tensor_view(SP_F32, sp_shape1(3), p), tt = sp_tensor_view(SP_F32, sp_shape1(3), t);
  sp_tensor tdp = sp_tensor_view(SP_F32, sp_shape1(3), dp), tdt = sp_tensor_view(SP_F32, sp_shape1(3), dt);
  sp_tensor to = sp_tensor_view(SP_F32, sp_shape1(1), &out), tw = sp_tensor_view(SP_F32, sp_shape1(1), &w);
  sp_op_args a = {.n_in = 2, .in = {&tp, &tt}, .d_in = {&tdp, &tdt}, .out = &to, .d_out = &tw};
  sp_op_l1_loss.forward(&a);
  assert_true(fabsf(out - 4.0f / 3.0f) < 1e-7f);
  sp_op_l1_loss.backward(&a);
  assert_true(dp[0] == 0.0f && dp[1] == 1.0f && dp[2] == -1.0f);
  assert_true(dt[0] == 0.0f && dt[1] == -1.0f && dt[2] == 1.0f);
}

static void point_loss_gradients(void **state) {
  (void)state;
  const int64_t nk[][2] = {{3, 7}, {1, 1}, {2, 68}};
  for (int i = 0; i < 3; i++)
    for (int mode = 0; mode < 2; mode++) {
      sp_point_loss_attr at = {.sum_points = mode, .eps = 1e-8f};
      sp_opcheck_case c = {.label = mode ? "point_loss sum" : "point_loss mean", .op = &sp_op_point_loss,
                           .attr = &at, .n_in = 2, .init = init_apart, .seed = 500 + (uint64_t)i};
      c.in_shape[0] = c.in_shape[1] = sp_shape3(nk[i][0], nk[i][1], 2);
      c.no_grad[1] = i == 2; /* targets are usually data */
      sp_opcheck_gradients(&c);
    }
}

static void structure_loss_gradients(void **state) {
  (void)state;
  const int ks[] = {7, 12, 68, 3};
  const int nbs[] = {2, 3, 2, 2};
  sp_test_rng rng = {99};
  for (int i = 0; i < 4; i++) {
    const int k = ks[i], nn = nbs[i];
    float *mean = malloc(sizeof(float) * 2 * (size_t)k);
    int32_t *nb = malloc(sizeof(int32_t) * (size_t)(k * nn));
    sp_test_fill_uniform(&rng, mean, 2 * k, 0, 100);
    sp_structure_neighbours(mean, k, nn, nb);
    for (int j = 0; j < k * nn; j++) assert_true(nb[j] >= 0 && nb[j] < k && nb[j] != j / nn);
    sp_structure_loss_attr at = {.n_points = k, .n_neighbours = nn, .neighbours = nb};
    sp_opcheck_case c = {.label = "structure_loss", .op = &sp_op_structure_loss, .attr = &at, .n_in = 2,
                         .init = init_structure, .seed = 600 + (uint64_t)i};
    c.in_shape[0] = c.in_shape[1] = sp_shape3(i == 3 ? 1 : 2, k, 2);
    c.no_grad[1] = i == 2;
    sp_opcheck_gradients(&c);
    free(mean);
    free(nb);
  }
}

static void cross_entropy_gradients(void **state) {
  (void)state;
  const int64_t nc[][2] = {{5, 7}, {1, 1}, {4, 3}, {9, 2}};
  for (int i = 0; i < 4; i++) {
    g_classes = nc[i][1];
    sp_opcheck_case c = {.label = "cross_entropy", .op = &sp_op_cross_entropy, .n_in = 2, .init = init_labels,
                         .seed = 700 + (uint64_t)i};
    c.in_shape[0] = sp_shape2(nc[i][0], nc[i][1]);
    c.in_shape[1] = sp_shape1(nc[i][0]);
    c.in_dtype[1] = SP_I32;
    c.no_grad[1] = 1;
    sp_opcheck_gradients(&c);
  }
}

static void loss_fixtures(void **state) {
  (void)state;
  sp_opcheck_case c = {.op = &sp_op_l1_loss, .n_in = 2};
  c.label = "l1_loss fixture";
  sp_opcheck_fixture(&c, "ops/l1_loss.safetensors", 1e-5, 1e-7);
  c.label = "mse_loss fixture";
  c.op = &sp_op_mse_loss;
  sp_opcheck_fixture(&c, "ops/mse_loss.safetensors", 1e-5, 1e-7);

  sp_point_loss_attr mean = {.sum_points = 0, .eps = 1e-8f}, sum = {.sum_points = 1, .eps = 1e-8f};
  c.label = "point_loss mean fixture";
  c.op = &sp_op_point_loss;
  c.attr = &mean;
  sp_opcheck_fixture(&c, "ops/point_loss_mean.safetensors", 1e-5, 1e-7);
  c.label = "point_loss sum fixture";
  c.attr = &sum;
  sp_opcheck_fixture(&c, "ops/point_loss_sum.safetensors", 1e-5, 1e-7);

  int32_t nb[7 * 2];
  sp_structure_neighbours(&MEAN_SHAPE[0][0], 7, 2, nb);
  sp_structure_loss_attr sat = {.n_points = 7, .n_neighbours = 2, .neighbours = nb};
  c.label = "structure_loss fixture";
  c.op = &sp_op_structure_loss;
  c.attr = &sat;
  sp_opcheck_fixture(&c, "ops/structure_loss.safetensors", 1e-5, 1e-7);

  sp_opcheck_case ce = {.label = "cross_entropy fixture", .op = &sp_op_cross_entropy, .n_in = 2};
  ce.no_grad[1] = 1;
  sp_opcheck_fixture(&ce, "ops/cross_entropy.safetensors", 1e-5, 1e-7);
}

static void structure_neighbours_hand_made(void **state) {
  (void)state;
  /* point 0 is 1 from points 1 and 2 (a tie: lower index first) */
  const float shape[4][2] = {{0, 0}, {1, 0}, {-1, 0}, {0, 2}};
  int32_t nb2[8], nb3[12];
  sp_structure_neighbours(&shape[0][0], 4, 2, nb2);
  const int32_t want2[8] = {1, 2, 0, 2, 0, 1, 0, 1};
  for (int i = 0; i < 8; i++) assert_int_equal(nb2[i], want2[i]);
  sp_structure_neighbours(&shape[0][0], 4, 3, nb3);
  const int32_t want3[12] = {1, 2, 3, 0, 2, 3, 0, 1, 3, 0, 1, 2};
  for (int i = 0; i < 12; i++) assert_int_equal(nb3[i], want3[i]);
  /* fewer other points than asked: padded with the point itself */
  int32_t few[4];
  sp_structure_neighbours(&shape[0][0], 2, 2, few);
  assert_int_equal(few[0], 1);
  assert_int_equal(few[1], 0);
  assert_int_equal(few[2], 0);
  assert_int_equal(few[3], 1);
  /* the fixture's mean shape: same table as head.py's stable argsort */
  int32_t nb[14];
  sp_structure_neighbours(&MEAN_SHAPE[0][0], 7, 2, nb);
  const int32_t want[14] = {1, 3, 0, 2, 1, 5, 4, 1, 3, 6, 2, 4, 4, 5};
  for (int i = 0; i < 14; i++) assert_int_equal(nb[i], want[i]);
}

static void loss_shape_errors(void **state) {
  (void)state;
  char err[256] = "";
  sp_shape out, in[2] = {sp_shape3(2, 5, 2), sp_shape3(2, 4, 2)};
  assert_int_equal(sp_op_l1_loss.infer(NULL, 2, in, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[2,5,2]"));
  assert_non_null(strstr(err, "[2,4,2]"));
  assert_int_equal(sp_op_mse_loss.infer(NULL, 2, in, 0, NULL, &out, err, sizeof err), -1);

  sp_point_loss_attr pa = {.eps = 1e-8f};
  sp_shape three[2] = {sp_shape3(2, 5, 3), sp_shape3(2, 5, 3)};
  assert_int_equal(sp_op_point_loss.infer(&pa, 2, three, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[2,5,3]"));

  const int32_t bad_nb[4] = {1, 0, 0, 2}; /* 2 is not a point of K = 2 */
  sp_structure_loss_attr sa = {.n_points = 2, .n_neighbours = 2, .neighbours = bad_nb};
  sp_shape two[2] = {sp_shape3(1, 2, 2), sp_shape3(1, 2, 2)};
  assert_int_equal(sp_op_structure_loss.infer(&sa, 2, two, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "neighbours[3] = 2"));
  sa.n_points = 3;
  assert_int_equal(sp_op_structure_loss.infer(&sa, 2, two, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "n_points=3"));

  sp_shape ce[2] = {sp_shape2(4, 10), sp_shape1(5)};
  assert_int_equal(sp_op_cross_entropy.infer(NULL, 2, ce, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[4,10]"));
  assert_non_null(strstr(err, "[5]"));
  ce[1] = sp_shape1(4);
  assert_int_equal(sp_op_cross_entropy.infer(NULL, 2, ce, 0, NULL, &out, err, sizeof err), 0);
  assert_int_equal(out.ndim, 1);
  assert_int_equal(out.d[0], 1);
}

/* An out-of-range label is a bug upstream: NaN loss and NaN gradient row,
 * and no read or write outside the tensors (ASan checks that). */
static void cross_entropy_bad_label(void **state) {
  (void)state;
  float x[6] = {0.1f, 0.2f, 0.3f, 1, 2, 3}, dx[6] = {0}, out, w = 1.0f;
  int32_t y[2] = {1, 3};
  sp_tensor tx = sp_tensor_view(SP_F32, sp_shape2(2, 3), x), ty = sp_tensor_view(SP_I32, sp_shape1(2), y);
  sp_tensor tdx = sp_tensor_view(SP_F32, sp_shape2(2, 3), dx);
  sp_tensor to = sp_tensor_view(SP_F32, sp_shape1(1), &out), tw = sp_tensor_view(SP_F32, sp_shape1(1), &w);
  sp_op_args a = {.n_in = 2, .in = {&tx, &ty}, .d_in = {&tdx, NULL}, .out = &to, .d_out = &tw};
  sp_op_cross_entropy.forward(&a);
  assert_true(isnan(out));
  sp_op_cross_entropy.backward(&a);
  assert_true(isfinite(dx[0]) && isfinite(dx[1]) && isfinite(dx[2]));
  assert_true(isnan(dx[3]) && isnan(dx[4]) && isnan(dx[5]));
  y[1] = -1;
  sp_op_cross_entropy.forward(&a);
  assert_true(isnan(out));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(l1_mse_gradients),
      cmocka_unit_test(l1_gradient_at_zero),
      cmocka_unit_test(point_loss_gradients),
      cmocka_unit_test(structure_loss_gradients),
      cmocka_unit_test(cross_entropy_gradients),
      cmocka_unit_test(loss_fixtures),
      cmocka_unit_test(structure_neighbours_hand_made),
      cmocka_unit_test(loss_shape_errors),
      cmocka_unit_test(cross_entropy_bad_label),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
