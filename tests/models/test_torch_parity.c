/* Whole models against PyTorch (fixtures from tools/fixtures/models.py):
 * the seed's VGG trained 5 steps with AdamW and with SGD (losses per step and
 * final parameters), a residual net with BlurPool, HardSwish and a soft-argmax
 * head, and a TSM residual block with TSN consensus and cross-entropy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "spry/graph.h"
#include "spry/models.h"
#include "spry/optim.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "fixture.h"
#include "testkit.h"

/* Mirrors formula_init() in tools/fixtures/models.py. */
static void formula_init(sp_graph *g) {
  int i = 0;
  for (int p = 0; p < sp_graph_param_count(g); p++) {
    if (!sp_graph_param_grad(g, p)) continue;
    sp_tensor *t = sp_graph_param_value(g, p);
    const char *name = sp_graph_param_name(g, p);
    float *x = t->data;
    if (t->shape.ndim > 1) {
      int64_t fan_in = sp_tensor_numel(t) / t->shape.d[0];
      for (int64_t j = 0; j < sp_tensor_numel(t); j++) x[j] = (float)(sin(0.37 * (double)j + 0.71 * i) / sqrt((double)fan_in));
      i++;
    } else if (strstr(name, "bias") && !strstr(name, "bn")) {
      memset(x, 0, sp_tensor_bytes(t));
    }
  }
}

static void load_prefixed(sp_graph *g, sp_st_file *f, const char *prefix) {
  char name[600];
  for (int p = 0; p < sp_graph_param_count(g); p++) {
    snprintf(name, sizeof name, "%s%s", prefix, sp_graph_param_name(g, p));
    if (sp_st_read_into(f, name, sp_graph_param_value(g, p)) != 0) fail_msg("%s", sp_last_error());
  }
}

static void expect_close(const char *what, const float *got, const float *want, int64_t n, double rtol,
                         double atol) {
  int64_t worst;
  double r = sp_test_close_ratio(got, want, n, rtol, atol, &worst);
  if (!(r <= 1.0)) fail_msg("%s[%lld]: spry %.8g vs PyTorch %.8g", what, (long long)worst, got[worst], want[worst]);
}

static void vgg_training_matches(const char *fixture, sp_opt_kind kind, float lr) {
  sp_st_file *f = sp_fixture_open(fixture);
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 1), t = sp_graph_input(g, "points", SP_F32, 58);
  sp_value p = sp_model_vgg(g, x, 64, 64, 58);
  sp_graph_loss(g, sp_l1_loss(g, p, t), 1.0f);
  assert_null(sp_graph_error(g));
  formula_init(g);
  sp_input_shape shapes[2] = {{"image", sp_shape4(4, 1, 64, 64)}, {"points", sp_shape3(4, 58, 2)}};
  sp_plan *plan = sp_plan_new(g, 2, shapes, SP_BACKEND_REF, 1, 0);
  assert_non_null(plan);
  sp_opt_config cfg = sp_opt_config_default(kind);
  cfg.weight_decay = 1e-5f;
  if (kind == SP_OPT_SGD) cfg.momentum = 0.9f;
  int n;
  sp_opt_param *params = sp_train_opt_params(g, &n);
  sp_optimizer *opt = sp_optimizer_new(&cfg, n, params);
  assert_non_null(opt);
  const float *want_loss = sp_fixture_get(f, "loss")->data;
  char name[600];
  for (int s = 0; s < 5; s++) {
    snprintf(name, sizeof name, "step%d.image", s);
    memcpy(sp_plan_input(plan, "image")->data, sp_fixture_get(f, name)->data, sizeof(float) * 4 * 64 * 64);
    snprintf(name, sizeof name, "step%d.points", s);
    memcpy(sp_plan_input(plan, "points")->data, sp_fixture_get(f, name)->data, sizeof(float) * 4 * 58 * 2);
    sp_graph_zero_grad(g);
    sp_plan_forward(plan);
    sp_plan_backward(plan);
    float loss = (float)sp_plan_loss(plan);
    printf("# %s step %d: loss spry %.7f torch %.7f\n", fixture, s, loss, want_loss[s]);
    if (fabs(loss - want_loss[s]) > 1e-4 * fabs(want_loss[s]))
      fail_msg("step %d loss %.8g vs PyTorch %.8g (over 1e-4 relative)", s, loss, want_loss[s]);
    assert_int_equal(sp_optimizer_step(opt, lr), 0);
  }
  /* Final parameters and BN running statistics (big ones sampled, as stored)
   * against PyTorch's float64 run, norm-relative: within 1e-4, or within 3x
   * of how far PyTorch's own float32 run lands (Adam turns rounding noise in
   * tiny gradients into full-size steps, and a bias before BN has no true
   * gradient at all, so some tensors are noise-dominated in any float32). */
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    const sp_tensor *v = sp_graph_param_value(g, i);
    const char *pname = sp_graph_param_name(g, i);
    int64_t stride = 1;
    snprintf(name, sizeof name, "final.%s", pname);
    const sp_tensor *want = sp_st_get(f, name);
    if (!want) {
      snprintf(name, sizeof name, "final_sample.%s", pname);
      want = sp_fixture_get(f, name);
      stride = 97;
    }
    double diff = 0, ref = 0;
    for (int64_t j = 0; j < sp_tensor_numel(want); j++) {
      double a = ((const float *)v->data)[j * stride], b = ((const float *)want->data)[j];
      diff += (a - b) * (a - b);
      ref += b * b;
    }
    double err = sqrt(diff) / (sqrt(ref) + 1e-30);
    snprintf(name, sizeof name, "f32err.%s", pname);
    double torch_err = ((const float *)sp_fixture_get(f, name)->data)[0];
    double limit = fmax(1e-4, 3 * torch_err);
    if (!(err <= limit))
      fail_msg("%s: norm-relative error %.3g vs PyTorch float64 (PyTorch float32: %.3g, limit %.3g)", pname, err,
               torch_err, limit);
  }
  sp_optimizer_free(opt);
  free(params);
  sp_plan_free(plan);
  sp_graph_free(g);
  sp_st_close(f);
}

static void vgg_face_adamw_5_steps(void **state) {
  (void)state;
  vgg_training_matches("models/vgg_face_adamw.safetensors", SP_OPT_ADAMW, 1e-3f);
}

static void vgg_face_sgd_5_steps(void **state) {
  (void)state;
  vgg_training_matches("models/vgg_face_sgd.safetensors", SP_OPT_SGD, 0.01f);
}

static void compare_grads(sp_graph *g, sp_st_file *f, double rtol, double atol) {
  char name[600];
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    sp_tensor *gr = sp_graph_param_grad(g, i);
    if (!gr) continue;
    snprintf(name, sizeof name, "grad.%s", sp_graph_param_name(g, i));
    expect_close(name, gr->data, sp_fixture_get(f, name)->data, sp_tensor_numel(gr), rtol, atol);
  }
}

static sp_value conv_bn(sp_graph *g, sp_value x, const char *conv, const char *bn, int out, int k, int s, int pad) {
  return sp_batchnorm(g, sp_conv2d(g, x, conv, (sp_conv_args){.out_ch = out, .kernel = k, .stride = s, .pad = pad}), bn);
}

static void residual_blurpool_softargmax(void **state) {
  (void)state;
  sp_st_file *f = sp_fixture_open("models/residual_blurpool_softargmax.safetensors");
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3), t = sp_graph_input(g, "points", SP_F32, 5);
  x = sp_relu(g, conv_bn(g, x, "stem", "stem_bn", 8, 3, 1, 1));
  sp_value y = sp_relu(g, conv_bn(g, x, "b1_conv1", "b1_bn1", 8, 3, 1, 1));
  x = sp_relu(g, sp_add(g, conv_bn(g, y, "b1_conv2", "b1_bn2", 8, 3, 1, 1), x));
  y = sp_hardswish(g, conv_bn(g, x, "b2_conv1", "b2_bn1", 16, 3, 2, 1));
  sp_value s = conv_bn(g, sp_blurpool(g, x, 3, 2), "b2_down", "b2_down_bn", 16, 1, 1, 0);
  x = sp_hardswish(g, sp_add(g, conv_bn(g, y, "b2_conv2", "b2_bn2", 16, 3, 1, 1), s));
  x = sp_upsample(g, sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = 1}), 2, 1);
  sp_value p = sp_softargmax(g, x, 1.0f);
  sp_graph_loss(g, sp_l1_loss(g, p, t), 1.0f);
  assert_null(sp_graph_error(g));
  load_prefixed(g, f, "init.");
  sp_input_shape shapes[2] = {{"image", sp_shape4(2, 3, 12, 12)}, {"points", sp_shape3(2, 5, 2)}};
  sp_plan *plan = sp_plan_new(g, 2, shapes, SP_BACKEND_REF, 1, 0);
  assert_non_null(plan);
  memcpy(sp_plan_input(plan, "image")->data, sp_fixture_get(f, "image")->data, sizeof(float) * 2 * 3 * 12 * 12);
  memcpy(sp_plan_input(plan, "points")->data, sp_fixture_get(f, "points")->data, sizeof(float) * 2 * 5 * 2);
  sp_graph_zero_grad(g);
  sp_plan_forward(plan);
  sp_plan_backward(plan);
  float loss = (float)sp_plan_loss(plan), want = ((const float *)sp_fixture_get(f, "loss")->data)[0];
  if (fabs(loss - want) > 1e-5 * fabs(want)) fail_msg("loss %.8g vs PyTorch %.8g", loss, want);
  compare_grads(g, f, 1e-3, 1e-5);
  sp_plan_free(plan);
  sp_graph_free(g);
  sp_st_close(f);
}

static void tsm_block_cross_entropy(void **state) {
  (void)state;
  const int n = 2, t = 4, c = 16, classes = 3;
  sp_st_file *f = sp_fixture_open("models/tsm_block.safetensors");
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "frames", SP_F32, c), labels = sp_graph_input(g, "labels", SP_I32, -1);
  sp_value y = sp_tshift(g, x, t, 0.125f, 0.125f);
  y = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, y, "conv1", (sp_conv_args){.out_ch = c, .kernel = 3, .pad = 1}), "bn1"));
  y = sp_batchnorm(g, sp_conv2d(g, y, "conv2", (sp_conv_args){.out_ch = c, .kernel = 3, .pad = 1}), "bn2");
  x = sp_relu(g, sp_add(g, y, x));
  /* TSN consensus: per-frame features [N*T,C] averaged over the T frames. */
  x = sp_global_avgpool(g, x);
  int64_t frames[4] = {n, 1, t, c};
  x = sp_reshape(g, x, 4, frames);
  sp_pool2d_attr mean_t = {t, 1, t, 1, 0, 0, 1, 0};
  x = sp_graph_node(g, &sp_op_avgpool2d, &mean_t, sizeof mean_t, "consensus", 1, &x, 0, NULL, 0, NULL, 1);
  x = sp_linear(g, sp_flatten(g, x), "fc", c, classes, 1);
  sp_graph_loss(g, sp_cross_entropy(g, x, labels), 1.0f);
  assert_null(sp_graph_error(g));
  load_prefixed(g, f, "init.");
  sp_input_shape shapes[2] = {{"frames", sp_shape4(n * t, c, 6, 6)}, {"labels", sp_shape1(n)}};
  sp_plan *plan = sp_plan_new(g, 2, shapes, SP_BACKEND_REF, 1, 0);
  if (!plan) fail_msg("%s", sp_last_error());
  memcpy(sp_plan_input(plan, "frames")->data, sp_fixture_get(f, "frames")->data, sizeof(float) * (size_t)(n * t * c * 36));
  memcpy(sp_plan_input(plan, "labels")->data, sp_fixture_get(f, "labels")->data, sizeof(int32_t) * (size_t)n);
  sp_graph_zero_grad(g);
  sp_plan_forward(plan);
  sp_plan_backward(plan);
  float loss = (float)sp_plan_loss(plan), want = ((const float *)sp_fixture_get(f, "loss")->data)[0];
  if (fabs(loss - want) > 1e-5 * fabs(want)) fail_msg("loss %.8g vs PyTorch %.8g", loss, want);
  compare_grads(g, f, 1e-3, 1e-5);
  sp_plan_free(plan);
  sp_graph_free(g);
  sp_st_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(vgg_face_adamw_5_steps),
      cmocka_unit_test(vgg_face_sgd_5_steps),
      cmocka_unit_test(residual_blurpool_softargmax),
      cmocka_unit_test(tsm_block_cross_entropy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
