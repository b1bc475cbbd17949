/* The video trainer on bad lists: a label that is no class number, or past
 * data.num_classes, stops the run in setup with the list's file:line (not
 * an allocation abort, not an unexplained failure); clips that are not there
 * are left out with a warning naming the list line, and a list with none
 * left is an error; clips that fail to decode are trained as zeros with a
 * warning per epoch and kept out of every validation number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "spry/video_train.h"
#include "spry/plot.h"
#include "testkit.h"

static char tmp[512], act[600];

static int setup(void **state) {
  (void)state;
  if (!sp_test_tmpdir(tmp, sizeof tmp)) return -1;
  snprintf(act, sizeof act, "%s/act", tmp);
  if (sp_synth_actions(act, 8, 8, 32, 6) != 0) return -1;
  /* Bytes that are no video, under a video's name. */
  char p[700];
  snprintf(p, sizeof p, "%s/garbage.mp4", act);
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 5000; i++) fputc((i * 2654435761u) >> 13 & 0xff, f);
  fclose(f);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

static const char *list_file(const char *name, const char *text) {
  static char p[700];
  snprintf(p, sizeof p, "%s/%s", act, name);
  sp_test_write_text(p, text);
  return p;
}

static void yaml_for(const char *train, const char *val, const char *extra, const char *out, char *yaml, size_t n) {
  snprintf(yaml, n,
           "task: video\nmodel: tsm-r18\nmodel_options: {base_width: 8}\n"
           "data: {train_list: %s, val_list: %s, segments: 4, size: 32, short_side: 32, flip: 0, mean: 0.5, std: 0.25%s}\n"
           "epochs: 1\nbatch: 2\nworkers: 1\nout: %s/%s\n",
           train, val, extra, tmp, out);
}

/* Trains on the lists; the run's rc (the error is left set). */
static int train(const char *train_list, const char *val_list, const char *extra, sp_video_summary *s) {
  char yaml[2048];
  yaml_for(train_list, val_list, extra, "run", yaml, sizeof yaml);
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_parse(yaml, "test", 0, NULL, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  int rc = sp_video_train_run(&cfg, text, SP_RUN_OVERWRITE, s); /* each case a fresh run in "run" */
  free(text);
  return rc;
}

static void expect_error(int rc, const char *want) {
  assert_int_equal(rc, -1);
  if (!strstr(sp_last_error(), want)) fail_msg("error '%s' lacks '%s'", sp_last_error(), want);
}

static void bad_labels_stop_the_run_with_the_line(void **state) {
  (void)state;
  sp_video_summary s;
  const char *two = "move_right/clip_00000.mp4 0\nmove_left/clip_00001.mp4 1\n";
  char text[256];
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 99999999999\n", two);
  const char *bad = list_file("bad.txt", text);
  /* The lists sit beside the synth set's labels.txt, which numbers them. */
  expect_error(train(bad, bad, "", &s), "bad.txt:3: label 99999999999 is not a class of ");
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 -1\n", two);
  bad = list_file("bad.txt", text);
  expect_error(train(bad, bad, "", &s), "bad.txt:3: label -1 is not a class of ");
  /* Two classes asked for, four named by the classes file. */
  char list[700];
  snprintf(list, sizeof list, "%s/list.txt", act);
  expect_error(train(list, list, ", num_classes: 2", &s), "data.num_classes = 2, but the classes file of ");
  /* The command exits 1 with the message, not an abort. */
  char yaml[2048], path[700], args[1024], out[8192];
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 99999999999\n", two);
  bad = list_file("bad.txt", text);
  yaml_for(bad, bad, "", "cli", yaml, sizeof yaml);
  snprintf(path, sizeof path, "%s/bad.yaml", tmp);
  sp_test_write_text(path, yaml);
  snprintf(args, sizeof args, "train %s", path);
  int st = sp_test_run_cli(args, 1, out, sizeof out);
  if (st == -1) return;
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  assert_non_null(strstr(out, "bad.txt:3: label 99999999999 is not a class of "));
}

static void missing_clips_are_left_out(void **state) {
  (void)state;
  sp_video_summary s;
  const char *none = list_file("none.txt", "missing1.mp4 0\nmissing2.mp4 1\n");
  expect_error(train(none, none, "", &s), "none.txt");
  /* Two of six are not there: the run trains and scores the other four. */
  const char *some = list_file("some.txt", "missing1.mp4 0\nmove_right/clip_00000.mp4 0\nmove_left/clip_00001.mp4 1\n"
                                           "rotate_cw/clip_00002.mp4 2\nmissing2.mp4 1\nrotate_ccw/clip_00003.mp4 3\n");
  assert_int_equal(train(some, some, "", &s), 0);
  assert_int_equal(s.val_clips, 4);
  assert_int_equal(s.iterations, 2);
}

static void undecodable_clips_stay_out_of_validation(void **state) {
  (void)state;
  const char *mixed = list_file("mixed.txt", "garbage.mp4 0\nmove_right/clip_00000.mp4 0\nmove_left/clip_00001.mp4 1\n"
                                             "rotate_cw/clip_00002.mp4 2\n");
  sp_video_summary s;
  if (train(mixed, mixed, "", &s) != 0) fail_msg("%s", sp_last_error());
  assert_int_equal(s.val_clips, 3); /* the garbage clip is neither right nor wrong */
  /* spry eval on the checkpoint agrees, and both runs say what they left out. */
  char yaml[2048], path[700], args[1024], out[16384];
  yaml_for(mixed, mixed, "", "cli", yaml, sizeof yaml);
  snprintf(path, sizeof path, "%s/mixed.yaml", tmp);
  sp_test_write_text(path, yaml);
  snprintf(args, sizeof args, "train %s", path);
  int st = sp_test_run_cli(args, 1, out, sizeof out);
  if (st == -1) return;
  assert_int_equal(st, 0);
  assert_non_null(strstr(out, "1 of 4 training clips could not be read"));
  assert_non_null(strstr(out, "validation: 1 of 4 clips could not be read"));
  /* The log keeps the count too. */
  snprintf(path, sizeof path, "%s/cli/metrics.jsonl", tmp);
  char *log = sp_test_slurp(path);
  assert_non_null(log);
  assert_non_null(strstr(log, "\"unreadable_train_clips\":1,"));
  free(log);
  sp_video_summary e;
  sp_video_config cfg;
  char *text = NULL;
  assert_int_equal(sp_video_config_parse(yaml, "test", 0, NULL, &cfg, &text), 0);
  free(text);
  snprintf(path, sizeof path, "%s/cli/last.safetensors", tmp);
  assert_int_equal(sp_video_eval_checkpoint(&cfg, path, NULL, &e), 0);
  assert_int_equal(e.val_clips, 3);
  assert_int_equal(e.val_failed, 1);
  assert_int_equal(s.val_failed, 1);
  /* spry eval's JSON says so too. */
  snprintf(args, sizeof args, "eval --weights %s", path);
  assert_int_equal(sp_test_run_cli(args, 0, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"unreadable_clips\":1"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_labels_stop_the_run_with_the_line),
      cmocka_unit_test(missing_clips_are_left_out),
      cmocka_unit_test(undecodable_clips_stay_out_of_validation),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  sp_plot_release_caches(); /* the run reports use fontconfig; its caches look like leaks */
  return rc;
}
