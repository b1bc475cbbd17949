/* Every rank must run the same configuration and spry version: a mismatch
 * is refused on every rank, rank 0 naming the odd ranks and each odd rank
 * the first key where it differs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_testutil.h"
#include "spry/common.h"
#include "train/dist_config.h"

static void same_config_accepted(void **state) {
  (void)state;
  assert_int_equal(sp_dist_check_run("model: vgg-face\nbatch: 64\n", SPRY_VERSION), 0);
}

/* Rank 0 names the odd ranks; each odd rank names the first key that
 * differs, with its parent keys, and both values. */
static void different_config_refused(void **state) {
  (void)state;
  if (sp_dist_world() < 2) skip();
  char cfg[128];
  snprintf(cfg, sizeof cfg, "model: vgg-face\noptimizer:\n  type: sgd\n  lr: %s\nbatch: 64\n",
           sp_dist_rank() == 1 ? "0.002" : "0.001");
  assert_int_equal(sp_dist_check_run(cfg, SPRY_VERSION), -1);
  const char *e = sp_last_error();
  assert_non_null(strstr(e, "refused"));
  if (sp_dist_rank() == 0) {
    assert_non_null(strstr(e, "rank(s) 1 "));
    assert_non_null(strstr(e, "different configuration"));
  } else {
    if (!strstr(e, "at optimizer.lr (here 'lr: 0.002', on rank 0 'lr: 0.001')")) fail_msg("%s", e);
  }
}

/* What the trainers compare: --resume on some ranks only is refused (it
 * would truncate the run's log and then break on the checkpoint broadcast),
 * while the thread and loader counts may differ between machines. */
static void run_identity(void **state) {
  (void)state;
  const char *cfg = "model: vgg-face\nthreads: 4\nworkers: 2\nbatch: 8\n";
  char *id = sp_dist_run_identity(cfg, 1);
  assert_string_equal(id, "resume: true\nmodel: vgg-face\nbatch: 8\n");
  free(id);
  /* One number, three spellings: the same identity; a folder named 01 keeps its name. */
  id = sp_dist_run_identity("optimizer:\n  lr: 1e-3\naugment:\n  scale:\n    - 0.75\n    - 1.3333\nout: 01\n", 0);
  assert_string_equal(id, "resume: false\noptimizer:\n  lr: 0.001\naugment:\n  scale:\n    - 0.75\n    - 1.3332999999999999\n"
                          "out: 01\n");
  char *again = sp_dist_run_identity("optimizer:\n  lr: 0.0010\naugment:\n  scale:\n    - 0.750\n    - 1.3333\nout: 01\n", 0);
  assert_string_equal(id, again);
  free(id);
  free(again);
  if (sp_dist_world() < 2) skip();
  const int rank = sp_dist_rank();
  char mine[128];
  snprintf(mine, sizeof mine, "model: vgg-face\nthreads: %d\nbatch: 8\n", rank ? 1 : 2);
  id = sp_dist_run_identity(mine, 0);
  assert_int_equal(sp_dist_check_run(id, SPRY_VERSION), 0); /* threads differ: accepted */
  free(id);
  id = sp_dist_run_identity(mine, rank == 1);
  assert_int_equal(sp_dist_check_run(id, SPRY_VERSION), -1);
  free(id);
  if (rank == 1 && !strstr(sp_last_error(), "at resume (here 'resume: true', on rank 0 'resume: false'); start every "
                                            "rank with --resume, or none"))
    fail_msg("%s", sp_last_error());
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
      cmocka_unit_test(run_identity),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
