/* Issue 19's findings where data, graphs and checkpoints meet: one
 * allocation policy (sizes from a config or a checkpoint are refused with an
 * error naming them, not an abort, C3), checkpoints with NaN weights or
 * absurd counts refused (P5), morph point files with infinite points
 * refused (P5). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/safetensors.h"
#include "spry/train.h"
#include "testkit.h"
#include "train/trainer_internal.h"

static char dir[256];

static sp_graph *graph_of(const char *config, int k, sp_train_config *cfg) {
  assert_int_equal(sp_train_config_parse(config, "test.yaml", 0, NULL, cfg, NULL), 0);
  sp_kp_data d;
  memset(&d, 0, sizeof d);
  d.k = d.k_all = k;
  d.mean_shape = calloc((size_t)k * 2, sizeof(float));
  for (int j = 0; j < k; j++) d.mean_shape[2 * j] = (float)j, d.mean_shape[2 * j + 1] = (float)(j % 3);
  int32_t nb[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_graph *g = sp_kp_build_graph(cfg, &d, nb, &scale, &offset);
  free(d.mean_shape);
  return g;
}

static const char *small_config =
    "model: vgg-nose\nbackend: ref\ndata:\n  size: 32\n  crop_size: 32\n  channels: 1\n  keypoints: [0]\n";

/* C3: data.size 4096 (inside the documented range) aborted with "internal
 * error: out of memory"; the same from a checkpoint's stored config. */
static void model_sizes_are_checked_before_allocating(void **state) {
  (void)state;
  setenv("SPRY_MAX_MEMORY_MB", "512", 1);
  sp_train_config cfg;
  sp_graph *g = graph_of("model: vgg-face\nbackend: ref\ndata:\n  size: 4096\n  crop_size: 4096\n", 68, &cfg);
  assert_null(g);
  sp_assert_error_has("needs");
  sp_assert_error_has("fc1.weight");
  assert_null(strstr(sp_last_error(), "internal error"));
  /* A plan whose activations would not fit: the input shapes are named. */
  setenv("SPRY_MAX_MEMORY_MB", "64", 1);
  g = graph_of(small_config, 1, &cfg);
  assert_non_null(g);
  sp_input_shape in[2] = {{"image", sp_shape4(4096, 1, 32, 32)}, {"points", sp_shape3(4096, 1, 2)}};
  assert_null(sp_plan_new(g, 2, in, SP_BACKEND_REF, 1, 0));
  sp_assert_error_has("image [4096,1,32,32]");
  sp_graph_free(g);
  unsetenv("SPRY_MAX_MEMORY_MB");
}

static void save_small(const char *path) {
  sp_train_config cfg;
  sp_graph *g = graph_of(small_config, 1, &cfg);
  assert_non_null(g);
  sp_checkpoint_meta meta = {.epoch = 1, .config = small_config, .model = "vgg-nose", .box_source = "image"};
  assert_int_equal(sp_checkpoint_save(path, g, NULL, &meta), 0);
  sp_graph_free(g);
}

/* P5: NaN weights predicted null points with no warning. */
static void nan_weights_are_refused(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/nan.safetensors", dir);
  save_small(path);
  sp_kp_predictor *p = sp_kp_predictor_open(path, "ref");
  assert_non_null(p); /* the clean file opens */
  sp_kp_predictor_close(p);
  /* Poison one weight of fc2 in the file. */
  sp_st_file *f = sp_st_open(path);
  assert_non_null(f);
  const sp_tensor *t = sp_st_get(f, "fc2.weight");
  assert_non_null(t);
  uint64_t hl;
  uint8_t *buf;
  size_t len;
  assert_int_equal(sp_read_file(path, &buf, &len), 0);
  memcpy(&hl, buf, 8);
  /* The tensor's bytes are found by value: the first weight's float. */
  float first = ((const float *)t->data)[0];
  sp_st_close(f);
  size_t at = 0;
  for (size_t i = 8 + hl; i + 4 <= len && !at; i += 4)
    if (!memcmp(buf + i, &first, 4)) at = i;
  assert_true(at > 0);
  float nan = NAN;
  memcpy(buf + at, &nan, 4);
  FILE *w = fopen(path, "wb");
  fwrite(buf, 1, len, w);
  fclose(w);
  free(buf);
  assert_null(sp_kp_predictor_open(path, "ref"));
  sp_assert_error_has("NaN or infinite");
  sp_assert_error_has("nan.safetensors");
}

/* A checkpoint's counts are untrusted: a negative epoch ran the loop from
 * epoch -5. */
static void absurd_metadata_is_refused(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/meta.safetensors", dir);
  sp_train_config cfg;
  sp_graph *g = graph_of(small_config, 1, &cfg);
  sp_checkpoint_meta meta = {.epoch = -5, .config = small_config, .model = "vgg-nose"};
  assert_int_equal(sp_checkpoint_save(path, g, NULL, &meta), 0);
  sp_checkpoint_meta back;
  char buf[4096];
  assert_int_equal(sp_checkpoint_load(path, g, NULL, &back, buf, sizeof buf), -1);
  sp_assert_error_has("metadata 'epoch' is -5, out of range");
  sp_graph_free(g);
}

/* P5: morph accepted infinite points (and moved them to the centre). */
static void infinite_morph_points_are_refused(void **state) {
  (void)state;
  static const struct { const char *name, *text; } bad[] = {
      {"a.pts", "version: 1\nn_points: 3\n{\n1 2\ninf 4\n5 6\n}\n"},
      {"a.json", "[[1,2],[1e999,4],[5,6]]"},
      {"b.json", "{\"faces\":[{\"box\":[0,0,9,9],\"points\":[[1,2],[3,-1e300],[5,6]]}]}"},
      {"a.dat", "1 1 2\n2 nan 4\n3 5 6\n"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, bad[i].name);
    sp_test_write_text(path, bad[i].text);
    float *pts = NULL;
    int k = 0;
    assert_int_equal(sp_morph_points_read(path, 640, 480, &pts, &k), -1);
    assert_null(pts);
    assert_non_null(strstr(sp_last_error(), bad[i].name));
    sp_assert_error_has("point 1");
  }
  char path[512];
  snprintf(path, sizeof path, "%s/good.json", dir);
  sp_test_write_text(path, "[[1,2],[3,4],[5,6]]\n");
  float *pts = NULL;
  int k = 0;
  assert_int_equal(sp_morph_points_read(path, 640, 480, &pts, &k), 0);
  assert_int_equal(k, 3);
  assert_true(pts[5] == 6.0f);
  free(pts);
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(model_sizes_are_checked_before_allocating),
      cmocka_unit_test(nan_weights_are_refused),
      cmocka_unit_test(absurd_metadata_is_refused),
      cmocka_unit_test(infinite_morph_points_are_refused),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  return rc;
}
