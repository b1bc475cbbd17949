/* A run's keypoint data and model: the split it asks for decides which
 * images train and which validate (the real dlib set names no person in its
 * file names), and the model must suit the points the data gives. */
#include <stdio.h>
#include <string.h>

#include "spry/config.h"
#include "testkit.h"
#include "train/trainer_internal.h"

static int open_dlib(const char *split, sp_kp_data *d) {
  char data[1024], text[1400];
  if (!sp_test_data_path("dlib_faces_68", data, sizeof data)) skip();
  snprintf(text, sizeof text, "data:\n  path: %s\n  split: %s\n  cache_file: false\n", data, split);
  sp_train_config c;
  if (sp_train_config_parse(text, "test", 0, NULL, &c, NULL) != 0) fail_msg("%s", sp_last_error());
  return sp_kp_data_open(&c, NULL, 0, d);
}

static void split_none_takes_every_image_without_a_person(void **state) {
  (void)state;
  sp_kp_data d;
  if (open_dlib("none", &d) != 0) fail_msg("%s", sp_last_error());
  assert_true(d.all.n > 10);
  assert_int_equal(d.train.n, d.all.n);
  assert_int_equal(d.val.n, d.all.n);
  assert_int_equal(d.k, 68);
  assert_string_equal(d.val.s[d.val.n - 1].image, d.all.s[d.all.n - 1].image);
  /* The same images: decoded and cropped once, one cache for both. */
  assert_ptr_equal(d.val_cache, d.train_cache);
  assert_int_equal(d.val_cache->n, d.all.n);
  sp_kp_data_free(&d);
}

static void identity_split_says_why_it_cannot(void **state) {
  (void)state;
  sp_kp_data d;
  assert_int_equal(open_dlib("identity", &d), -1);
  assert_non_null(strstr(sp_last_error(), "name no person"));
  assert_non_null(strstr(sp_last_error(), "data.split"));
  sp_kp_data_free(&d);
}

static void vgg_nose_on_many_points_names_the_nose(void **state) {
  (void)state;
  sp_train_config c;
  if (sp_train_config_parse("model: vgg-nose\ndata:\n  size: 64\n", "test", 0, NULL, &c, NULL) != 0)
    fail_msg("%s", sp_last_error());
  sp_kp_data d;
  memset(&d, 0, sizeof d);
  d.k = 68;
  int32_t neighbours[68 * 8];
  float scale, offset;
  assert_null(sp_kp_build_graph(&c, &d, neighbours, &scale, &offset));
  assert_non_null(strstr(sp_last_error(), "vgg-nose predicts one point"));
  assert_non_null(strstr(sp_last_error(), "data.keypoints: [N] (30 in the 68-point layout)"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_none_takes_every_image_without_a_person),
      cmocka_unit_test(identity_split_says_why_it_cannot),
      cmocka_unit_test(vgg_nose_on_many_points_names_the_nose),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
