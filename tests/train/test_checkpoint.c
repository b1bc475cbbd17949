/* Checkpoints: a resumed run continues bit for bit, and a checkpoint that does
 * not fit the model is refused with a message naming what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/graph.h"
#include "spry/models.h"
#include "spry/optim.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "testkit.h"

typedef struct {
  sp_graph *g;
  sp_plan *plan;
  sp_opt_param *params;
  int n;
  sp_optimizer *opt;
} run;

static void run_open(run *r, int keypoints) {
  r->g = sp_graph_new(5);
  sp_value x = sp_graph_input(r->g, "image", SP_F32, 1), t = sp_graph_input(r->g, "points", SP_F32, keypoints);
  sp_graph_loss(r->g, sp_l1_loss(r->g, sp_model_vgg(r->g, x, 32, 32, keypoints), t), 1.0f);
  assert_null(sp_graph_error(r->g));
  sp_input_shape s[2] = {{"image", sp_shape4(3, 1, 32, 32)}, {"points", sp_shape3(3, keypoints, 2)}};
  r->plan = sp_plan_new(r->g, 2, s, SP_BACKEND_REF, 1, 0);
  assert_non_null(r->plan);
  r->params = sp_train_opt_params(r->g, &r->n);
  sp_opt_config cfg = sp_opt_config_default(SP_OPT_ADAMW);
  r->opt = sp_optimizer_new(&cfg, r->n, r->params);
  assert_non_null(r->opt);
}

static void run_close(run *r) {
  sp_optimizer_free(r->opt);
  free(r->params);
  sp_plan_free(r->plan);
  sp_graph_free(r->g);
}

static void train_steps(run *r, int from, int to) {
  for (int s = from; s < to; s++) {
    sp_test_rng rng = {1000 + (uint64_t)s}; /* batch s is a function of s, as the loader's are */
    sp_tensor *x = sp_plan_input(r->plan, "image"), *t = sp_plan_input(r->plan, "points");
    sp_test_fill_uniform(&rng, x->data, sp_tensor_numel(x), -1, 1);
    sp_test_fill_uniform(&rng, t->data, sp_tensor_numel(t), -1, 1);
    sp_graph_zero_grad(r->g);
    sp_plan_set_step(r->plan, (uint64_t)s);
    sp_plan_forward(r->plan);
    sp_plan_backward(r->plan);
    assert_int_equal(sp_optimizer_step(r->opt, 1e-3f), 0);
  }
}

static void resume_continues_bit_for_bit(void **state) {
  (void)state;
  char dir[256], path[512], buf[4096];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/epoch1.safetensors", dir);

  run straight, first, second;
  run_open(&straight, 5);
  train_steps(&straight, 0, 6);

  run_open(&first, 5);
  train_steps(&first, 0, 3);
  sp_checkpoint_meta meta = {.epoch = 1, .iteration = 3, .seed = 77, .config = "model: vgg-face\nbatch: 3\n", .model = "vgg-face"};
  assert_int_equal(sp_checkpoint_save(path, first.g, first.opt, &meta), 0);
  run_close(&first);

  run_open(&second, 5); /* fresh weights from another seed would differ: load must overwrite all */
  sp_checkpoint_meta got;
  assert_int_equal(sp_checkpoint_load(path, second.g, second.opt, &got, buf, sizeof buf), 0);
  assert_int_equal(got.epoch, 1);
  assert_int_equal(got.iteration, 3);
  assert_int_equal(got.seed, 77);
  assert_string_equal(got.model, "vgg-face");
  assert_string_equal(got.config, meta.config);
  assert_int_equal(sp_optimizer_steps(second.opt), 3);
  train_steps(&second, 3, 6);
  for (int i = 0; i < sp_graph_param_count(straight.g); i++) {
    sp_tensor *a = sp_graph_param_value(straight.g, i), *b = sp_graph_param_value(second.g, i);
    if (memcmp(a->data, b->data, sp_tensor_bytes(a)) != 0)
      fail_msg("parameter %s differs after resume", sp_graph_param_name(straight.g, i));
  }
  /* The file is plain safetensors: parameters under their PyTorch names. */
  sp_st_file *f = sp_st_open(path);
  assert_non_null(f);
  assert_non_null(sp_st_get(f, "layers.0.0.conv.weight"));
  assert_non_null(sp_st_get(f, "bn1.running_var"));
  assert_non_null(sp_st_get(f, "optim.fc2.weight.exp_avg_sq"));
  sp_st_close(f);
  run_close(&straight);
  run_close(&second);
  sp_test_rmtree(dir);
}

static void mismatched_checkpoints_are_refused(void **state) {
  (void)state;
  char dir[256], path[512], other[512];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/k5.safetensors", dir);
  run five, seven;
  run_open(&five, 5);
  run_open(&seven, 7);
  assert_int_equal(sp_checkpoint_save(path, five.g, five.opt, NULL), 0);
  /* Another keypoint count: fc2 has another shape. */
  assert_int_equal(sp_checkpoint_load(path, seven.g, NULL, NULL, NULL, 0), -1);
  assert_non_null(strstr(sp_last_error(), "fc2.weight"));
  /* Weights only, then asked for SGD state that is not there. */
  assert_int_equal(sp_checkpoint_save(path, five.g, NULL, NULL), 0);
  sp_opt_config sgd = sp_opt_config_default(SP_OPT_SGD);
  sgd.momentum = 0.9f;
  sp_optimizer *opt = sp_optimizer_new(&sgd, five.n, five.params);
  assert_int_equal(sp_checkpoint_load(path, five.g, opt, NULL, NULL, 0), -1);
  assert_non_null(strstr(sp_last_error(), "momentum"));
  sp_optimizer_free(opt);
  /* A safetensors file that is not a spry checkpoint. */
  snprintf(other, sizeof other, "%s/plain.safetensors", dir);
  float v = 1;
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape1(1), &v);
  sp_st_writer *w = sp_st_writer_new();
  sp_st_writer_add(w, "x", &t);
  assert_int_equal(sp_st_writer_save(w, other), 0);
  sp_st_writer_free(w);
  assert_int_equal(sp_checkpoint_load(other, five.g, NULL, NULL, NULL, 0), -1);
  assert_non_null(strstr(sp_last_error(), "not a spry checkpoint"));
  run_close(&five);
  run_close(&seven);
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resume_continues_bit_for_bit),
      cmocka_unit_test(mismatched_checkpoints_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
