/* `spry video frames` and `spry prepare` on bad arguments: numbers too large
 * for memory or for their type are refused with the limit, before anything
 * is made on disk; a failed run leaves no folder it made; prepare frames
 * fails when a clip fails and says how many; a failed prepare list keeps the
 * earlier files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "spry/video.h"
#include "testkit.h"

static char tmp[512], clip[700];
static char out[16384];

static int setup(void **state) {
  (void)state;
  if (!sp_test_tmpdir(tmp, sizeof tmp)) return -1;
  char act[600];
  snprintf(act, sizeof act, "%s/act", tmp);
  snprintf(clip, sizeof clip, "%s/move_right/clip_00000.mp4", act);
  return sp_synth_actions(act, 5, 8, 32, 2);
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

/* Runs spry ARGS (printf-style); the exit code (-1: killed by a signal). */
static int spry(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int spry(const char *fmt, ...) {
  char args[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  int st = sp_test_run_cli(args, 1, out, sizeof out);
  if (st == -1) skip();
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void expect_said(const char *want) {
  if (!strstr(out, want)) fail_msg("output lacks '%s':\n%s", want, out);
}

static void video_frames_refuses_huge_numbers(void **state) {
  (void)state;
  char f[700];
  snprintf(f, sizeof f, "%s/f", tmp);
  assert_int_equal(spry("video frames %s --index 99999999999999999999 --out %s", clip, f), 2);
  expect_said("99999999999999999999 is too large");
  assert_int_equal(spry("video frames %s --index 1 --size 100000 --out %s", clip, f), 2);
  expect_said("[0, 8192]");
  assert_int_equal(spry("video frames %s --index 0-100000000 --out %s", clip, f), 2);
  expect_said("more than 10000000 frames");
  assert_false(exists(f));
  /* A frame past the end fails after the folder would be made: it is not left. */
  snprintf(f, sizeof f, "%s/g/h", tmp);
  assert_int_equal(spry("video frames %s --index 2,8 --out %s", clip, f), 1);
  expect_said("frame 8 out of range");
  snprintf(f, sizeof f, "%s/g", tmp);
  assert_false(exists(f));
  /* Extra or unknown arguments are refused, not ignored. */
  assert_int_equal(spry("video info %s --bogus", clip), 2);
  assert_int_equal(spry("video frames %s %s --index 0 --out %s/two", clip, clip, tmp), 2);
  expect_said("one FILE at a time");
  assert_int_equal(spry("video frames %s --bogus 1 --index 0 --out %s/two", clip, tmp), 2);
  expect_said("unknown option --bogus");
  /* synth actions names the option and its range too. */
  assert_int_equal(spry("synth actions --count 2 --frames 0 --out %s/s", tmp), 2);
  expect_said("--frames wants an integer in [2, 10000], got '0'");
  /* A good run still writes its frames. */
  snprintf(f, sizeof f, "%s/ok", tmp);
  assert_int_equal(spry("video frames %s --index 0,2-3 --size 40 --out %s", clip, f), 0);
  snprintf(f, sizeof f, "%s/ok/000003.png", tmp);
  assert_true(exists(f));
}

static void prepare_frames_fails_when_a_clip_fails(void **state) {
  (void)state;
  char list[700], pf[700], p[800];
  snprintf(list, sizeof list, "%s/act/list.txt", tmp);
  snprintf(pf, sizeof pf, "%s/pf", tmp);
  assert_int_equal(spry("prepare frames --list %s --out %s --size 100000 --workers 1", list, pf), 2);
  expect_said("[0, 8192]");
  assert_false(exists(pf));
  /* 4 of 5 clips missing: exit 1 with the count, no folders for them. */
  snprintf(p, sizeof p, "%s/act/some.txt", tmp);
  FILE *f = fopen(p, "w");
  fputs("move_right/clip_00000.mp4 0\nmove_left/gone1.mp4 1\nmove_left/gone2.mp4 1\nx/gone3.mp4 2\ngone4.mp4 3\n", f);
  fclose(f);
  assert_int_equal(spry("prepare frames --list %s --out %s --workers 2", p, pf), 1);
  expect_said("4 of 5 clips failed");
  snprintf(p, sizeof p, "%s/move_right/clip_00000/img_00001.jpg", pf);
  assert_true(exists(p));
  snprintf(p, sizeof p, "%s/move_left", pf);
  assert_false(exists(p));
  snprintf(p, sizeof p, "%s/x", pf);
  assert_false(exists(p));
  snprintf(p, sizeof p, "%s/gone4", pf);
  assert_false(exists(p));
  /* An empty list is an error, not "0 clips" with no frames.list. */
  snprintf(p, sizeof p, "%s/act/empty.txt", tmp);
  f = fopen(p, "w");
  fclose(f);
  snprintf(pf, sizeof pf, "%s/pf-empty", tmp);
  assert_int_equal(spry("prepare frames --list %s --out %s", p, pf), 1);
  expect_said("names no clips");
  assert_false(exists(pf));
}

static void prepare_list_keeps_the_old_files_on_failure(void **state) {
  (void)state;
  char pl[700], z[800], classes[800], empty[700];
  snprintf(pl, sizeof pl, "%s/pl", tmp);
  mkdir(pl, 0777);
  snprintf(z, sizeof z, "%s/z.txt", pl);
  snprintf(classes, sizeof classes, "%s/labels.txt", pl);
  assert_int_equal(spry("prepare list %s/act --out %s", tmp, z), 0);
  char *z0 = sp_test_slurp(z), *c0 = sp_test_slurp(classes);
  assert_true(z0 && c0 && *z0 && *c0);
  snprintf(empty, sizeof empty, "%s/EMPTYDIR", tmp);
  mkdir(empty, 0777);
  assert_int_equal(spry("prepare list %s --out %s", empty, z), 1);
  expect_said("no videos found");
  char *z1 = sp_test_slurp(z), *c1 = sp_test_slurp(classes);
  assert_string_equal(z1, z0);
  assert_string_equal(c1, c0);
  free(z0), free(c0), free(z1), free(c1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(video_frames_refuses_huge_numbers),
      cmocka_unit_test(prepare_frames_fails_when_a_clip_fails),
      cmocka_unit_test(prepare_list_keeps_the_old_files_on_failure),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
