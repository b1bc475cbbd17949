/* A new user's path: the ```sh block of README.md's "First run" section,
 * read from the README (so it cannot drift) and replayed in a temporary
 * folder on synthetic data, smaller: fewer faces (--count appended), one
 * epoch, a tiny video model (--set appended). Two lines are checked rather
 * than run: `make demo` (it builds the tree and trains for a minute; the
 * test checks that the Makefile's demo target is there and runs
 * scripts/demo.sh) and the pkg-config line, which must be the one of "Using
 * the library" that cli.pkgconfig compiles and runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "replay.h"
#include "testkit.h"

static char tmp[512];
static char out[1 << 16];

static int setup(void **state) {
  (void)state;
  if (!getenv("SPRY_BIN") || !getenv("SPRY_SOURCE_DIR")) return -1;
  return sp_test_tmpdir(tmp, sizeof tmp) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

static char *source_file(const char *rel) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", getenv("SPRY_SOURCE_DIR"), rel);
  char *t = sp_test_slurp(p);
  if (!t) fail_msg("cannot read %s", p);
  return t;
}

static void copy_config(const char *name) {
  char rel[256], p[1024];
  snprintf(rel, sizeof rel, "configs/%s", name);
  char *t = source_file(rel);
  snprintf(p, sizeof p, "%s/%s", tmp, rel);
  sp_test_write_text(p, t);
  free(t);
}

/* The text of the first ```sh block after `heading`. */
static char *sh_block(const char *readme, const char *heading, size_t *len) {
  const char *sec = strstr(readme, heading);
  if (!sec) fail_msg("README.md has no '%s'", heading);
  const char *start = strstr(sec, "```sh\n");
  assert_non_null(start);
  start += 6;
  const char *end = strstr(start, "```");
  assert_non_null(end);
  *len = (size_t)(end - start);
  return (char *)start;
}

static void readme_first_run_replays(void **state) {
  (void)state;
  char *readme = source_file("README.md");
  size_t len;
  const char *block = sh_block(readme, "## First run", &len);
  char **make = sp_test_commands(block, len, "make ");
  assert_non_null(make[0]);
  assert_string_equal(make[0], "make demo");
  char *makefile = source_file("Makefile");
  assert_non_null(strstr(makefile, "demo: all\n\tbash scripts/demo.sh"));
  free(makefile);
  /* The pkg-config line is the one "Using the library" gives. */
  char **pc = sp_test_commands(block, len, "PKG_CONFIG_PATH=build cc hello_spry.c");
  assert_non_null(pc[0]);
  size_t ulen;
  const char *use = sh_block(readme, "## Using the library", &ulen);
  char **pc_use = sp_test_commands(use, ulen, "PKG_CONFIG_PATH=build cc hello_spry.c");
  assert_non_null(pc_use[0]);
  assert_string_equal(pc[0], pc_use[0]);

  sp_test_ucf_tree(tmp); /* also makes tmp/configs */
  copy_config("synth-faces.yaml");
  copy_config("ucf-tsm-r50.yaml");
  const char *tiny_video = "--set model=tsm-r18 --set data.size=32 --set data.short_side=32 --set data.segments=2 "
                           "--set batch=3 --set threads=2 --set workers=1";
  char **cmds = sp_test_commands(block, len, "build/spry ");
  int ran = 0, predicted = 0, evaluated = 0;
  for (int i = 0; cmds[i]; i++) {
    const char *c = cmds[i];
    int video = strstr(c, "ucf-") != NULL;
    char extra[512] = "";
    if (strstr(c, "build/spry synth faces ") == c) snprintf(extra, sizeof extra, "--count 120 --quiet");
    else if (strstr(c, "build/spry train ") == c)
      snprintf(extra, sizeof extra, "%s --set epochs=1", video ? tiny_video : "--set batch=16 --set threads=2");
    else if (strstr(c, "build/spry eval ") == c && video) snprintf(extra, sizeof extra, "%s", tiny_video);
    int rc = sp_test_replay(tmp, c, extra, out, sizeof out);
    if (rc != 0) fail_msg("%s %s\nexit %d:\n%s", c, extra, rc, out);
    if (strstr(out, "Sanitizer") || strstr(out, "runtime error:")) fail_msg("%s: sanitizer report:\n%s", c, out);
    if (strstr(c, "build/spry predict ") == c) {
      if (!strstr(out, "\"points\":[[")) fail_msg("%s: no points:\n%s", c, out);
      predicted = 1;
    }
    if (strstr(c, "build/spry eval ") == c) evaluated = strstr(out, "\"top1\"") != NULL;
    ran++;
  }
  assert_true(ran >= 6);
  assert_true(predicted);
  assert_true(evaluated);
  char p[700];
  snprintf(p, sizeof p, "%s/face.png", tmp);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_true(sb.st_size > 0);
  sp_test_commands_free(cmds);
  sp_test_commands_free(make);
  sp_test_commands_free(pc);
  sp_test_commands_free(pc_use);
  free(readme);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(readme_first_run_replays),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
