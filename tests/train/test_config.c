/* Run configs: values land in the right fields, --set overrides, and every
 * mistake is an error that names the key and its line. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/config.h"
#include "spry/video_train.h"
#include "testkit.h"

static char dir[256];

static const char *write_config(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  sp_test_write_text(path, text);
  return path;
}

static void seed_recipe_is_read(void **state) {
  (void)state;
  const char *path = write_config("face68.yaml",
                                  "model: resunet50\n"
                                  "data:\n  path: faces\n  size: 224\n  channels: 3\n  keypoints: [30, 31]\n"
                                  "augment:\n  scale: [0.75, 1.3333]\n  flip: 0.5\n  randaugment: [2, 7]\n"
                                  "loss:\n  type: l1\n  structure_weight: 0.2\n"
                                  "optimizer:\n  type: sgd\n  lr: 0.8\n  momentum: 0.9\n  weight_decay: 1e-5\n"
                                  "schedule:\n  warmup_epochs: 3\n  decay: cosine\n"
                                  "epochs: 300\nbatch: 64\nseed: 7\n");
  sp_train_config c;
  assert_int_equal(sp_train_config_load(path, 0, NULL, &c, NULL), 0);
  assert_string_equal(c.model, "resunet50");
  assert_int_equal(c.data.channels, 3);
  assert_string_equal(c.dist.compress, "none"); /* exact fp32 gradients unless asked */
#ifdef SPRY_HAVE_DNNL
  assert_string_equal(c.backend, "cpu"); /* the fast backend unless the config says otherwise */
#else
  assert_string_equal(c.backend, "ref");
#endif
  assert_int_equal(c.data.n_keypoints, 2);
  assert_int_equal(c.data.keypoints[1], 31);
  assert_true(c.augment.scale_max > 1.333f && c.augment.scale_max < 1.334f);
  assert_int_equal(c.augment.ra_n, 2);
  assert_int_equal(c.augment.ra_m, 7);
  assert_int_equal(c.loss.kind, SP_LOSS_L1);
  assert_true(c.loss.structure_weight == 0.2f);
  assert_int_equal(c.optimizer.kind, SP_OPT_SGD);
  assert_true(c.optimizer.momentum == 0.9f);
  assert_true(c.optimizer.weight_decay == 1e-5f);
  assert_true(c.schedule.base_lr == 0.8f);
  assert_true(c.schedule.warmup_epochs == 3.0);
  assert_true(c.schedule.total_epochs == 300.0);
  assert_int_equal(c.seed, 7);
  assert_int_equal(c.n_model_options, 0);
  const char *opts = write_config("opts.yaml", "model: resunet18\nmodel_options:\n  hardswish: true\n  base_width: 32\n");
  assert_int_equal(sp_train_config_load(opts, 0, NULL, &c, NULL), 0);
  assert_int_equal(c.n_model_options, 2);
  assert_string_equal(c.model_options[1].key, "base_width");
  assert_string_equal(c.model_options[1].value, "32");
}

static void warmup_fraction_and_overrides(void **state) {
  (void)state;
  const char *path = write_config("imm.yaml", "epochs: 300\noptimizer:\n  lr: 0.001\n");
  char *sets[] = {"batch=16", "optimizer.type=sgd", "augment.scale=[0.9, 1.1]", "out=runs/x", "dist.compress=bf16"};
  sp_train_config c;
  assert_int_equal(sp_train_config_load(path, 5, sets, &c, NULL), 0);
  assert_string_equal(c.dist.compress, "bf16");
  assert_true(c.schedule.warmup_epochs == 3.0); /* 1/100 of 300 epochs by default */
  assert_int_equal(c.batch, 16);
  assert_int_equal(c.optimizer.kind, SP_OPT_SGD);
  assert_true(c.augment.scale_min == 0.9f);
  assert_string_equal(c.out, "runs/x");
}

static void resolved_text_reads_back(void **state) {
  (void)state;
  const char *path = write_config("r.yaml", "model: vgg-nose\ndata:\n  path: \"dir with: colon\"\n  keypoints: [52]\n");
  char *sets[] = {"optimizer.lr=0.0001", "augment.randaugment=[1, 4]"};
  sp_train_config a, b;
  char *text = NULL;
  assert_int_equal(sp_train_config_load(path, 2, sets, &a, &text), 0);
  assert_non_null(text);
  assert_int_equal(sp_train_config_parse(text, "stored", 0, NULL, &b, NULL), 0);
  assert_string_equal(b.data.path, "dir with: colon");
  assert_int_equal(b.data.keypoints[0], 52);
  assert_true(b.lr == 0.0001f);
  assert_int_equal(b.augment.ra_m, 4);
  assert_string_equal(b.model, "vgg-nose");
  free(text);
}

static void expect_error(const char *text, int n_sets, char **sets, const char *must1, const char *must2) {
  const char *path = write_config("bad.yaml", text);
  sp_train_config c;
  assert_int_equal(sp_train_config_load(path, n_sets, sets, &c, NULL), -1);
  const char *e = sp_last_error();
  if (!strstr(e, must1) || (must2 && !strstr(e, must2))) fail_msg("error '%s' lacks '%s' / '%s'", e, must1, must2);
}

static void mistakes_name_key_and_line(void **state) {
  (void)state;
  expect_error("epochs: 10\noptimizer:\n  lrr: 0.1\n", 0, NULL, "optimizer.lrr", "line 3");
  expect_error("model: resunet18\nmodel_options:\n  blurpol: true\n", 0, NULL, "model_options.blurpol", "line 3");
  expect_error("model: resunet18\nmodel_options:\n  blurpool: maybe\n", 0, NULL, "model_options.blurpool", "maybe");
  expect_error("batch: lots\n", 0, NULL, "batch", "lots");
  expect_error("data:\n  flip_table: [0, 1, x]\n", 0, NULL, "data.flip_table", "x");
  expect_error("batch: 2.5\n", 0, NULL, "batch", "integer");
  expect_error("optimizer:\n  type: rmsprop\n", 0, NULL, "optimizer.type", "adamw");
  expect_error("dist:\n  compress: fp8\n", 0, NULL, "dist.compress", "bf16");
  expect_error("precision: bf16\nbackend: ref\n", 0, NULL, "precision: bf16 needs backend: cpu", "bad.yaml");
  expect_error("augment:\n  flip: 1.5\n", 0, NULL, "augment.flip", "[0, 1]");
  expect_error("loss: [1, 2]\n", 0, NULL, "loss", NULL);
  expect_error("epochs: 10\nepochs: 20\n", 0, NULL, "twice", "bad.yaml:2:");
  expect_error("data:\n  path: [unclosed\n", 0, NULL, "bad.yaml", NULL);
  char *sets[] = {"optimizer.momentm=0.9"};
  expect_error("epochs: 1\n", 1, sets, "optimizer.momentm", "--set");
  /* Values each fine alone but not together, or not for this task. */
  expect_error("model: resnet18\n", 0, NULL, "model (line 1): expected one of: vgg-face vgg-nose resunet18 resunet50",
               "got 'resnet18'");
  expect_error("model: resunet18\ndata:\n  size: 100\n", 0, NULL, "data.size (line 3)", "multiple of 32");
  expect_error("data:\n  channels: 2\n", 0, NULL, "data.channels", "1 (gray) or 3 (RGB)");
  expect_error("data:\n  mean: [0.5, 0.5]\n", 0, NULL, "data.mean", "1 value, or 3");
  expect_error("augment:\n  scale: [2, 1]\n", 0, NULL, "augment.scale (line 2)", "min <= max, got that list");
  expect_error("augment:\n  scale: [0.9]\n", 0, NULL, "augment.scale", "min <= max");
  expect_error("schedule:\n  milestones: [20, 10]\n", 0, NULL, "schedule.milestones", "increasing");
  expect_error("batch: 0x10\n", 0, NULL, "batch (line 1)", "got '0x10'");
  expect_error("task: faces\n", 0, NULL, "task (line 1): expected one of: keypoints video", "got 'faces'");
  expect_error("epochs: 1\n---\nepochs: 2\n", 0, NULL, "bad.yaml:3: a second YAML document", NULL);
  sp_train_config folder;
  assert_int_equal(sp_train_config_load(dir, 0, NULL, &folder, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "not a file"));
  /* A bad value from the command line is named as such, not as line 0 of the file. */
  char *zero_batch[] = {"batch=0"};
  expect_error("epochs: 1\n", 1, zero_batch, "batch (from the command line): expected a number in [1, ", "got '0'");
  assert_null(strstr(sp_last_error(), "bad.yaml"));
  char *bad_set[] = {"noequals"};
  expect_error("epochs: 1\n", 1, bad_set, "key=value", NULL);
  sp_train_config c;
  assert_int_equal(sp_train_config_load("no/such/file.yaml", 0, NULL, &c, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "no/such/file.yaml"));
}

/* Every config the project ships reads without error: a stricter reader
 * must not break what the README tells users to run. */
static void shipped_configs_read(void **state) {
  (void)state;
  const char *src = getenv("SPRY_SOURCE_DIR");
  if (!src) skip();
  char dir_path[1024];
  snprintf(dir_path, sizeof dir_path, "%s/configs", src);
  DIR *d = opendir(dir_path);
  assert_non_null(d);
  int keypoint = 0, video = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".yaml")) continue;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
    int rc;
    if (sp_config_file_is_video(path)) {
      sp_video_config v;
      rc = sp_video_config_load(path, 0, NULL, &v, NULL);
      video++;
    } else {
      sp_train_config c;
      rc = sp_train_config_load(path, 0, NULL, &c, NULL);
      keypoint++;
    }
    if (rc != 0) fail_msg("%s: %s", e->d_name, sp_last_error());
  }
  closedir(d);
  assert_true(keypoint >= 5 && video >= 5);
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(seed_recipe_is_read),
      cmocka_unit_test(warmup_fraction_and_overrides),
      cmocka_unit_test(mistakes_name_key_and_line),
      cmocka_unit_test(shipped_configs_read),
      cmocka_unit_test(resolved_text_reads_back),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  return rc;
}
