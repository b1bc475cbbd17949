/* The README's "Using the library" program, compiled and run the way the
 * README says: through pkg-config from the build tree (spry-uninstalled.pc),
 * and from an install that is then moved elsewhere (spry.pc is relocatable). */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testkit.h"

static char dir[256], build[1024], program[600];

static int sh(const char *cmd, char *out, size_t n) {
  char full[8192];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The first ```c block after "## Using the library" in README.md. */
static void extract_program(void) {
  char path[1200];
  snprintf(path, sizeof path, "%s/README.md", getenv("SPRY_SOURCE_DIR"));
  char *readme = sp_test_slurp(path);
  assert_non_null(readme);
  const char *sec = strstr(readme, "## Using the library");
  assert_non_null(sec);
  const char *start = strstr(sec, "```c\n");
  assert_non_null(start);
  start += 5;
  const char *end = strstr(start, "```");
  assert_non_null(end);
  snprintf(program, sizeof program, "%s/hello_spry.c", dir);
  FILE *f = fopen(program, "w");
  assert_non_null(f);
  fwrite(start, 1, (size_t)(end - start), f);
  fclose(f);
  free(readme);
}

static void compile_and_run(const char *pc_path, const char *extra) {
  static char out[1 << 16];
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "cc %s $(PKG_CONFIG_PATH=%s pkg-config --cflags --libs spry) %s -o %s/hello && %s/hello",
           program, pc_path, extra, dir, dir);
  int rc = sh(cmd, out, sizeof out);
  if (rc != 0) fail_msg("%s\nexit %d:\n%s", cmd, rc, out);
  if (!strstr(out, "loss ")) fail_msg("no loss printed:\n%s", out);
}

static void readme_program_from_the_build_tree(void **state) {
  (void)state;
  compile_and_run(build, "");
}

static void readme_program_from_a_moved_install(void **state) {
  (void)state;
  static char out[1 << 16];
  char cmd[4096], moved[600];
  snprintf(cmd, sizeof cmd, "cmake --install %s --prefix %s/inst", build, dir);
  if (sh(cmd, out, sizeof out) != 0) fail_msg("%s:\n%s", cmd, out);
  /* Moved after the install: the .pc finds its prefix from where it lies. */
  snprintf(moved, sizeof moved, "%s/elsewhere", dir);
  snprintf(cmd, sizeof cmd, "mv %s/inst %s", dir, moved);
  assert_int_equal(sh(cmd, out, sizeof out), 0);
  char pc[700], rpath[700];
  snprintf(pc, sizeof pc, "%s/lib/pkgconfig", moved);
  snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s/lib", moved);
  compile_and_run(pc, rpath);
  snprintf(cmd, sizeof cmd, "%s/bin/spry --version", moved);
  assert_int_equal(sh(cmd, out, sizeof out), 0);
}

static int setup(void **state) {
  (void)state;
  const char *bin = getenv("SPRY_BIN");
  if (!bin || !getenv("SPRY_SOURCE_DIR") || !sp_test_tmpdir(dir, sizeof dir)) return -1;
  char copy[1024];
  snprintf(copy, sizeof copy, "%s", bin);
  snprintf(build, sizeof build, "%s", dirname(copy));
  extract_program();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(dir);
  return 0;
}

int main(void) {
  char out[256];
  /* A sanitized libspry.so needs its runtime loaded first: a user's program
   * links the release build, which the plain suite checks. */
  if (sp_test_sanitized()) return 77;
  /* Tools a user's machine has; without them there is nothing to check. */
  if (sh("command -v cc && command -v pkg-config && command -v cmake", out, sizeof out) != 0) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(readme_program_from_the_build_tree),
      cmocka_unit_test(readme_program_from_a_moved_install),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
