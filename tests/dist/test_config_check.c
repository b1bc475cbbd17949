/* Every rank must run the same configuration and spry version: a mismatch
 * is refused on every rank with a message naming the odd ranks. */
#include <stdio.h>
#include <string.h>

#include "dist_testutil.h"
#include "spry/common.h"
#include "spry/video_train.h"

static void same_config_accepted(void **state) {
  (void)state;
  assert_int_equal(sp_dist_check_run("model: vgg-face\nbatch: 64\n", SPRY_VERSION), 0);
}

static void different_config_refused(void **state) {
  (void)state;
  if (sp_dist_world() < 2) skip();
  char cfg[64];
  snprintf(cfg, sizeof cfg, "model: vgg-face\nbatch: %d\n", sp_dist_rank() == 1 ? 32 : 64);
  assert_int_equal(sp_dist_check_run(cfg, SPRY_VERSION), -1);
  const char *e = sp_last_error();
  assert_non_null(strstr(e, "refused"));
  assert_non_null(strstr(e, "rank(s) 1 "));
  assert_non_null(strstr(e, "different configuration"));
}

static void different_version_refused(void **state) {
  (void)state;
  if (sp_dist_world() < 2) skip();
  assert_int_equal(sp_dist_check_run("same", sp_dist_rank() ? "9.9.9" : SPRY_VERSION), -1);
  const char *e = sp_last_error();
  assert_non_null(strstr(e, "rank(s) 1 (9.9.9)"));
  assert_non_null(strstr(e, "version"));
}

/* Video training has no data-parallel path: under mpirun it is refused on
 * every rank, before any data is read, instead of W ranks writing one run. */
static void video_training_refused_under_mpirun(void **state) {
  (void)state;
  if (sp_dist_world() < 2) skip();
  sp_video_config cfg;
  char *set = "out=/nonexistent/never-written";
  assert_int_equal(sp_video_config_parse("task: video\nmodel: tsm-r18\ndata:\n  train_list: none.txt\n", "test", 1,
                                         &set, &cfg, NULL),
                   0);
  assert_int_equal(sp_video_train_run(&cfg, "", 0, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "without mpirun"));
}

int main(void) {
  assert_int_equal(sp_dist_init(), 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_config_accepted),
      cmocka_unit_test(different_config_refused),
      cmocka_unit_test(different_version_refused),
      cmocka_unit_test(video_training_refused_under_mpirun),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
