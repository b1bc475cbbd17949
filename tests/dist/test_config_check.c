/* Every rank must run the same configuration and spry version: a mismatch
 * is refused on every rank with a message naming the odd ranks. */
#include <stdio.h>
#include <string.h>

#include "dist_testutil.h"
#include "spry/common.h"

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

int main(void) {
  assert_int_equal(sp_dist_init(), 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_config_accepted),
      cmocka_unit_test(different_config_refused),
      cmocka_unit_test(different_version_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
