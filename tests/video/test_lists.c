/* Video list files and what is made from them, on bad input: labels that
 * are not class numbers are refused with file:line, entries whose clip is
 * not there are left out by line, the loader marks each clip it could not
 * read, prepare frames leaves nothing behind for a clip that failed and
 * says how many did, and prepare list never leaves an empty or stale list
 * or labels.txt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spry/video_loader.h"
#include "testkit.h"

static char tmp[512], act[600];

static int setup(void **state) {
  (void)state;
  if (!sp_test_tmpdir(tmp, sizeof tmp)) return -1;
  snprintf(act, sizeof act, "%s/act", tmp);
  return sp_synth_actions(act, 4, 8, 32, 3);
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

/* Writes text to act/NAME and returns its path (static buffer). */
static const char *put(const char *name, const char *text) {
  static char p[700];
  snprintf(p, sizeof p, "%s/%s", act, name);
  sp_test_write_text(p, text);
  return p;
}

static int exists(const char *fmt, const char *a) {
  char p[800];
  snprintf(p, sizeof p, fmt, a);
  struct stat sb;
  return stat(p, &sb) == 0;
}

static void expect_list_error(const char *text, const char *want) {
  sp_video_list l;
  const char *p = put("bad.txt", text);
  if (sp_video_list_read(p, &l) == 0) fail_msg("accepted %s", text);
  if (!strstr(sp_last_error(), want)) fail_msg("error '%s' lacks '%s'", sp_last_error(), want);
}

static void labels_must_be_class_numbers(void **state) {
  (void)state;
  const char *two = "move_right/clip_00000.mp4 0\nmove_left/clip_00001.mp4 1\n";
  char text[256];
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 99999999999\n", two);
  expect_list_error(text, "bad.txt:3: label 99999999999 out of range");
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 99999999999999999999999\n", two);
  expect_list_error(text, "bad.txt:3: label 99999999999999999999999 out of range");
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 %d\n", two, SP_VIDEO_MAX_CLASSES);
  expect_list_error(text, "bad.txt:3: label 100000 out of range");
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 -1\n", two);
  expect_list_error(text, "bad.txt:3: label -1 is negative");
  snprintf(text, sizeof text, "%srotate_cw/clip_00002.mp4 2x\n", two);
  expect_list_error(text, "bad.txt:3: expected `path label`, the label '2x' is not an integer");
  expect_list_error("dir -4 1\n", "bad.txt:1: n_frames -4 out of range");
  /* The largest label is fine, and so is a comment before it. */
  snprintf(text, sizeof text, "# clips\n%srotate_cw/clip_00002.mp4 %d\n", two, SP_VIDEO_MAX_CLASSES - 1);
  sp_video_list l;
  assert_int_equal(sp_video_list_read(put("ok.txt", text), &l), 0);
  assert_int_equal(l.n, 3);
  assert_int_equal(l.label[2], SP_VIDEO_MAX_CLASSES - 1);
  assert_int_equal(l.line[0], 2);
  assert_int_equal(l.line[2], 4);
  sp_video_list_free(&l);
}

static void missing_clips_are_left_out_by_line(void **state) {
  (void)state;
  sp_video_list l;
  const char *p = put("some.txt", "missing1.mp4 0\nmove_left/clip_00001.mp4 1\nmove_right 0\n"
                                  "\nmove_right/clip_00000.mp4 0\n");
  assert_int_equal(sp_video_list_read(p, &l), 0);
  assert_int_equal(l.n, 4);
  assert_int_equal(sp_video_list_keep_usable(&l, p, 1), 2);
  assert_int_equal(l.n, 2);
  assert_non_null(strstr(l.path[0], "clip_00001.mp4"));
  assert_int_equal(l.label[0], 1);
  assert_int_equal(l.line[0], 2);
  assert_non_null(strstr(l.path[1], "clip_00000.mp4"));
  assert_int_equal(l.line[1], 5);
  sp_video_list_free(&l);
  /* Nothing usable is an error naming the list. */
  p = put("none.txt", "missing1.mp4 0\nmissing2.mp4 1\n");
  assert_int_equal(sp_video_list_read(p, &l), 0);
  assert_int_equal(sp_video_list_keep_usable(&l, p, 0), -1);
  assert_non_null(strstr(sp_last_error(), "none.txt"));
  sp_video_list_free(&l);
}

static void loader_marks_each_unreadable_clip(void **state) {
  (void)state;
  FILE *f = fopen(put("garbage.mp4", ""), "w");
  for (int i = 0; i < 4000; i++) fputc((i * 7919) & 0xff, f);
  fclose(f);
  sp_video_list l;
  const char *p = put("mixed.txt", "move_right/clip_00000.mp4 0\ngarbage.mp4 1\nrotate_cw/clip_00002.mp4 2\n");
  assert_int_equal(sp_video_list_read(p, &l), 0);
  assert_int_equal(sp_video_list_keep_usable(&l, p, 0), 0); /* there, only not a video */
  sp_video_loader_config c = sp_video_loader_config_default(3, 2, 32);
  c.train = 0, c.shuffle = 0, c.drop_last = 0, c.workers = 2;
  sp_video_loader *ld = sp_video_loader_create(&l, &c);
  assert_non_null(ld);
  assert_int_equal(sp_video_loader_start_epoch(ld, 0), 0);
  const sp_video_batch *b = sp_video_loader_next(ld);
  assert_non_null(b);
  assert_int_equal(b->failed, 1);
  for (int i = 0; i < 3; i++) assert_int_equal(b->bad[i], b->video[i] == 1);
  sp_video_loader_destroy(ld);
  sp_video_list_free(&l);
}

static void prepare_frames_leaves_nothing_for_failed_clips(void **state) {
  (void)state;
  char out[700], list[700];
  snprintf(list, sizeof list, "%s/list.txt", act);
  /* A size past the limit is refused before anything is made. */
  snprintf(out, sizeof out, "%s/pf_big", tmp);
  sp_prepare_config big = {.short_side = 100000, .quality = 90, .workers = 1};
  assert_int_equal(sp_prepare_frames(list, out, &big), -1);
  assert_non_null(strstr(sp_last_error(), "8192"));
  assert_false(exists("%s", out));
  /* One good clip, one missing, one not a video in a class of its own. */
  char lonely[700];
  snprintf(lonely, sizeof lonely, "%s/lonely", act);
  mkdir(lonely, 0777);
  FILE *f = fopen(put("lonely/clip.mp4", ""), "w");
  fputs("not a video", f);
  fclose(f);
  const char *p = put("prep.txt", "move_right/clip_00000.mp4 0\nmissing.mp4 1\nlonely/clip.mp4 2\n");
  snprintf(out, sizeof out, "%s/pf", tmp);
  sp_prepare_config pc = {.short_side = 0, .quality = 90, .workers = 2};
  assert_int_equal(sp_prepare_frames(p, out, &pc), -1);
  assert_non_null(strstr(sp_last_error(), "2 of 3 clips failed"));
  assert_true(exists("%s/move_right/clip_00000/n_frames", out));
  assert_false(exists("%s/missing", out));
  assert_false(exists("%s/lonely", out)); /* neither the clip's folder nor its class's */
  char fl[800];
  snprintf(fl, sizeof fl, "%s/frames.list", out);
  char *text = sp_test_slurp(fl);
  assert_non_null(text);
  assert_string_equal(text, "move_right/clip_00000 8 0\n");
  free(text);
  /* No clip at all: an error, and no output folder. */
  p = put("prep0.txt", "missing.mp4 1\n");
  snprintf(out, sizeof out, "%s/pf0/deeper", tmp);
  assert_int_equal(sp_prepare_frames(p, out, &pc), -1);
  snprintf(out, sizeof out, "%s/pf0", tmp);
  assert_false(exists("%s", out));
}

static void prepare_list_writes_whole_files_or_nothing(void **state) {
  (void)state;
  char set[700], out[700], classes[800], empty[700];
  snprintf(set, sizeof set, "%s/set", tmp);
  assert_int_equal(sp_synth_actions(set, 4, 8, 32, 4), 0);
  snprintf(out, sizeof out, "%s/pl", tmp);
  mkdir(out, 0777);
  snprintf(classes, sizeof classes, "%s/labels.txt", out);
  snprintf(out, sizeof out, "%s/pl/z.txt", tmp);
  assert_int_equal(sp_video_list_build(set, NULL, out), 4);
  char *list0 = sp_test_slurp(out), *classes0 = sp_test_slurp(classes);
  assert_true(strlen(list0) > 0 && strlen(classes0) > 0);
  /* A failed build leaves both files as they were. */
  snprintf(empty, sizeof empty, "%s/emptydir", tmp);
  mkdir(empty, 0777);
  assert_int_equal(sp_video_list_build(empty, NULL, out), -1);
  char *list1 = sp_test_slurp(out), *classes1 = sp_test_slurp(classes);
  assert_string_equal(list1, list0);
  assert_string_equal(classes1, classes0);
  free(list1), free(classes1);
  /* --labels: labels.txt follows the names file, line k naming label k. */
  char names[800];
  snprintf(names, sizeof names, "%s/names.txt", tmp);
  FILE *f = fopen(names, "w");
  fputs("rotate_cw\nmove_right\nmove_left\nrotate_ccw\n", f);
  fclose(f);
  assert_int_equal(sp_video_list_build(set, names, out), 4);
  classes1 = sp_test_slurp(classes);
  assert_string_equal(classes1, "rotate_cw\nmove_right\nmove_left\nrotate_ccw\n");
  free(classes1);
  sp_video_list l;
  assert_int_equal(sp_video_list_read(out, &l), 0);
  for (int i = 0; i < l.n; i++)
    if (strstr(l.path[i], "/rotate_cw/")) assert_int_equal(l.label[i], 0);
  sp_video_list_free(&l);
  /* `path,label` pairs name no classes: the old labels.txt goes. */
  snprintf(names, sizeof names, "%s/pairs.csv", tmp);
  f = fopen(names, "w");
  fputs("path,label\nmove_left/clip_00001.mp4,3\n", f);
  fclose(f);
  assert_int_equal(sp_video_list_build(set, names, out), 1);
  assert_false(exists("%s", classes));
  /* A bad label in the csv is an error with its line; the list stays. */
  list0 = (free(list0), sp_test_slurp(out));
  f = fopen(names, "w");
  fputs("path,label\nmove_left/clip_00001.mp4,-3\n", f);
  fclose(f);
  assert_int_equal(sp_video_list_build(set, names, out), -1);
  assert_non_null(strstr(sp_last_error(), "pairs.csv:2: label -3 is negative"));
  list1 = sp_test_slurp(out);
  assert_string_equal(list1, list0);
  free(list0), free(list1), free(classes0);
}

/* Classes files: labels.txt (names, from 0) and UCF's classInd.txt (`N
 * name`, numbered as it says); a list read through one has its labels in
 * that numbering, unlabelled lines take their folder's class, and a label
 * that disagrees with its clip's folder is refused naming both files and
 * the line. */
static void classes_files_number_the_labels(void **state) {
  (void)state;
  sp_video_classes c;
  const char *ind = put("classInd.txt", "1 move_right\r\n2 move_left\r\n3 rotate_cw\r\n4 rotate_ccw\r\n");
  assert_int_equal(sp_video_classes_read(ind, &c), 0);
  assert_int_equal(c.n, 4);
  assert_int_equal(c.base, 1);
  assert_string_equal(c.name[1], "move_left");
  sp_video_list l;
  /* 1-based labels and an unlabelled (testlist) line. */
  const char *train = put("train1.txt", "move_left/clip_00001.mp4 2\r\nrotate_ccw/clip_00003.mp4\r\n");
  assert_int_equal(sp_video_list_read_classes(train, NULL, &c, &l), 0);
  assert_int_equal(l.n, 2);
  assert_int_equal(l.label[0], 1);
  assert_int_equal(l.label[1], 3);
  assert_non_null(strstr(l.path[1], "/rotate_ccw/clip_00003.mp4"));
  sp_video_list_free(&l);
  /* A 0-based list read as classInd's 1-based: its folder says otherwise. */
  const char *zero = put("zero.txt", "move_right/clip_00000.mp4 1\nmove_left/clip_00001.mp4 1\n");
  assert_int_equal(sp_video_list_read_classes(zero, NULL, &c, &l), -1);
  sp_assert_error_has("zero.txt:2: label 1 is 'move_right' in ");
  sp_assert_error_has("classInd.txt, but the clip is in the folder of 'move_left' (2)");
  assert_int_equal(sp_video_list_read_classes(put("five.txt", "a.mp4 5\n"), NULL, &c, &l), -1);
  sp_assert_error_has("five.txt:1: label 5 is not a class of ");
  assert_int_equal(sp_video_list_read_classes(put("stray.txt", "jump/a.mp4\n"), NULL, &c, &l), -1);
  sp_assert_error_has("stray.txt:1: no label, and its folder 'jump' is not a class of ");
  sp_video_classes_free(&c);
  /* Without a classes file an unlabelled line says what it needs. */
  expect_list_error("move_right/clip_00000.mp4\n", "bad.txt:1: expected `path label` (a list without labels");
  /* The synth set's labels.txt against a list numbered alphabetically (what
   * prepare list used to write): refused at the first disagreeing line. */
  char labels[700];
  snprintf(labels, sizeof labels, "%s/labels.txt", act);
  assert_int_equal(sp_video_classes_read(labels, &c), 0);
  assert_int_equal(c.base, 0);
  const char *alpha = put("alpha.txt", "move_left/clip_00001.mp4 0\nmove_right/clip_00000.mp4 1\n");
  assert_int_equal(sp_video_list_read_classes(alpha, NULL, &c, &l), -1);
  sp_assert_error_has("alpha.txt:1: label 0 is 'move_right' in ");
  sp_assert_error_has("labels.txt, but the clip is in the folder of 'move_left' (1)");
  sp_video_classes_free(&c);
  /* Files that are not one clear numbering are refused with their line. */
  const char *bad[][2] = {
      {"1 a\nb\n", "mixed.txt:2: 'b' has no number, while the lines above are numbered"},
      {"2 a\n3 b\n", "mixed.txt:1: classInd-style numbering must start at 0 or 1, not 2"},
      {"1 a\n3 b\n", "mixed.txt:2: class number 3, expected 2"},
      {"a\nb\na\n", "mixed.txt:3: class 'a' is named twice"},
      {"\n\n", "mixed.txt: no class names"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(sp_video_classes_read(put("mixed.txt", bad[i][0]), &c), -1);
    sp_assert_error_has(bad[i][1]);
  }
}

/* prepare list --split: UCF's trainlist (1-based) and testlist (no labels)
 * through classInd.txt become 0-based lists in the split's order, with
 * labels.txt beside them; a split without a classes file is refused. */
static void prepare_list_reads_ucf_splits(void **state) {
  (void)state;
  char split[700], out[700], p[800];
  const char *ind = put("classInd.txt", "1 move_right\n2 move_left\n3 rotate_cw\n4 rotate_ccw\n");
  snprintf(split, sizeof split, "%s/split.txt", tmp);
  sp_test_write_text(split, "rotate_cw/clip_00002.mp4 3\nmove_right/clip_00000.mp4 1\nmove_left/clip_00001.mp4\n"
                            "move_left/missing.mp4 2\n");
  snprintf(out, sizeof out, "%s/split_out", tmp);
  mkdir(out, 0777);
  snprintf(out, sizeof out, "%s/split_out/train.txt", tmp);
  assert_int_equal(sp_video_list_build_split(act, ind, split, out), 3);
  sp_video_list l;
  assert_int_equal(sp_video_list_read(out, &l), 0);
  assert_int_equal(l.n, 3);
  assert_int_equal(l.label[0], 2);
  assert_int_equal(l.label[1], 0);
  assert_int_equal(l.label[2], 1);
  assert_non_null(strstr(l.path[0], "/act/rotate_cw/clip_00002.mp4"));
  sp_video_list_free(&l);
  snprintf(p, sizeof p, "%s/split_out/labels.txt", tmp);
  char *names = sp_test_slurp(p);
  assert_string_equal(names, "move_right\nmove_left\nrotate_cw\nrotate_ccw\n");
  free(names);
  /* A split needs a classes file: a folder without labels.txt has none. */
  char bare[700];
  snprintf(bare, sizeof bare, "%s/bare", tmp);
  assert_int_equal(sp_synth_actions(bare, 2, 4, 16, 1), 0);
  snprintf(p, sizeof p, "%s/bare/labels.txt", tmp);
  unlink(p);
  assert_int_equal(sp_video_list_build_split(bare, NULL, split, out), -1);
  sp_assert_error_has("split.txt: a split file needs the classes file");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(labels_must_be_class_numbers),
      cmocka_unit_test(missing_clips_are_left_out_by_line),
      cmocka_unit_test(loader_marks_each_unreadable_clip),
      cmocka_unit_test(prepare_frames_leaves_nothing_for_failed_clips),
      cmocka_unit_test(prepare_list_writes_whole_files_or_nothing),
      cmocka_unit_test(classes_files_number_the_labels),
      cmocka_unit_test(prepare_list_reads_ucf_splits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
