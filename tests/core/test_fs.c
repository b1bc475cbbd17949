/* sp_make_dirs: mkdir -p with an error naming the folder that failed. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "spry/common.h"
#include "testkit.h"

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void creates_missing_parents_and_accepts_existing(void **state) {
  (void)state;
  char dir[512], p[700];
  sp_test_tmpdir(dir, sizeof dir);
  snprintf(p, sizeof p, "%s/a/b/c", dir);
  assert_int_equal(sp_make_dirs(p), 0);
  assert_true(is_dir(p));
  assert_int_equal(sp_make_dirs(p), 0); /* again: nothing to do */
  snprintf(p, sizeof p, "%s/a/b/d/", dir); /* trailing slash */
  assert_int_equal(sp_make_dirs(p), 0);
  snprintf(p, sizeof p, "%s/a/b/d", dir);
  assert_true(is_dir(p));
  sp_test_rmtree(dir);
}

static void names_the_part_that_failed(void **state) {
  (void)state;
  char dir[512], file[700], p[800];
  sp_test_tmpdir(dir, sizeof dir);
  snprintf(file, sizeof file, "%s/plain", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(p, sizeof p, "%s/sub/more", file); /* below a regular file */
  assert_int_equal(sp_make_dirs(p), -1);
  char want[800];
  snprintf(want, sizeof want, "%s: cannot create folder (a file of that name exists)", file);
  assert_non_null(strstr(sp_last_error(), want));
  assert_int_equal(sp_make_dirs(""), -1);
  assert_int_equal(sp_make_dirs(file), -1); /* the path itself is a file */
  assert_non_null(strstr(sp_last_error(), "a file of that name exists"));
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(creates_missing_parents_and_accepts_existing),
      cmocka_unit_test(names_the_part_that_failed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
