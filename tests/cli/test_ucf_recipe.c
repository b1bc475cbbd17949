/* The UCF-101 recipe as configs/ucf-tsm-r50.yaml's header gives it, on a
 * miniature tree in UCF's published layout: class folders of short .avi
 * clips, classInd.txt (`1 Name`, numbered from 1), a 1-based
 * trainlist01.txt and an unlabelled testlist01.txt. Every `build/spry` line
 * of the header runs as written (from a folder holding data/ and configs/),
 * with --set keys that make the model and clips tiny appended to train and
 * eval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "replay.h"
#include "spry/video.h"
#include "testkit.h"

static char tmp[512];
static char out[1 << 16];

/* UCF-style class names, in classInd's (alphabetical) order; the clips of
 * class k move as synth class k does. */
static const char *const names[] = {"MoveLeft", "MoveRight", "RotateCcw", "RotateCw"};
static const int motion[] = {1, 0, 3, 2};

static void write_clip(const char *path, int cls, int id) {
  sp_video_writer_config cfg = sp_video_writer_config_default(32, 32);
  cfg.gop = 8;
  sp_video_writer *w = sp_video_writer_open(path, &cfg);
  if (!w) fail_msg("%s: %s", path, sp_last_error());
  uint8_t rgb[32 * 32 * 3];
  for (int t = 0; t < 8; t++) {
    sp_synth_render(7, id, motion[cls], t, 8, 32, rgb);
    assert_int_equal(sp_video_writer_add(w, rgb), 0);
  }
  assert_int_equal(sp_video_writer_close(w), 0);
}

/* data/UCF-101/<Class>/v_<Class>_gGG_c01.avi and data/ucfTrainTestlist/:
 * groups 8-10 train (labels 1..4), group 1 tests (no labels). */
static void make_tree(void) {
  char p[1024], line[256];
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist", tmp);
  assert_int_equal(sp_make_dirs(p), 0);
  snprintf(p, sizeof p, "%s/configs", tmp);
  mkdir(p, 0777);
  char *cls_ind = calloc(1, 4096), *train = calloc(1, 8192), *test = calloc(1, 8192);
  int id = 0;
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s/data/UCF-101/%s", tmp, names[k]);
    assert_int_equal(sp_make_dirs(p), 0);
    snprintf(line, sizeof line, "%d %s\r\n", k + 1, names[k]);
    strcat(cls_ind, line);
    for (int g = 1; g <= 10; g++) {
      if (g > 1 && g < 8) continue;
      snprintf(p, sizeof p, "%s/data/UCF-101/%s/v_%s_g%02d_c01.avi", tmp, names[k], names[k], g);
      write_clip(p, k, id++);
      if (g == 1) snprintf(line, sizeof line, "%s/v_%s_g%02d_c01.avi\r\n", names[k], names[k], g);
      else snprintf(line, sizeof line, "%s/v_%s_g%02d_c01.avi %d\r\n", names[k], names[k], g, k + 1);
      strcat(g == 1 ? test : train, line);
    }
  }
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/classInd.txt", tmp);
  sp_test_write_text(p, cls_ind);
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/trainlist01.txt", tmp);
  sp_test_write_text(p, train);
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/testlist01.txt", tmp);
  sp_test_write_text(p, test);
  free(cls_ind), free(train), free(test);
}

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

/* The `build/spry` command lines of a config's header. */
static char **header_commands(const char *config, char **text) {
  char p[1024];
  snprintf(p, sizeof p, "%s/configs/%s", getenv("SPRY_SOURCE_DIR"), config);
  *text = sp_test_slurp(p);
  assert_non_null(*text);
  char **cmds = sp_test_commands(*text, strlen(*text), "#   build/spry ");
  for (int i = 0; cmds[i]; i++) memmove(cmds[i], cmds[i] + 4, strlen(cmds[i] + 4) + 1); /* "#   " */
  return cmds;
}

static void published_files_prepare_train_eval(void **state) {
  (void)state;
  make_tree();
  char *text, p[1024];
  char **cmds = header_commands("ucf-tsm-r50.yaml", &text);
  snprintf(p, sizeof p, "%s/configs/ucf-tsm-r50.yaml", tmp);
  sp_test_write_text(p, text);
  /* Tiny: TSM-R18 on 2 segments of 32 px, one epoch of 4 steps. */
  const char *tiny = "--set model=tsm-r18 --set data.size=32 --set data.short_side=32 --set data.segments=2 "
                     "--set batch=3 --set threads=2 --set workers=1";
  int trains = 0, evals = 0, prepares = 0;
  for (int i = 0; cmds[i]; i++) {
    const char *c = cmds[i];
    int is_train = strstr(c, "build/spry train ") == c, is_eval = strstr(c, "build/spry eval ") == c;
    char extra[512];
    snprintf(extra, sizeof extra, "%s%s", is_train || is_eval ? tiny : "", is_train ? " --set epochs=1" : "");
    int rc = sp_test_replay(tmp, c, extra, out, sizeof out);
    if (rc != 0) fail_msg("%s %s\nexit %d:\n%s", c, extra, rc, out);
    if (strstr(out, "Sanitizer") || strstr(out, "runtime error:")) fail_msg("%s: sanitizer report:\n%s", c, out);
    trains += is_train, evals += is_eval, prepares += strstr(c, "build/spry prepare ") == c;
    if (is_eval && !strstr(out, "\"top1\"")) fail_msg("%s: no metrics line:\n%s", c, out);
  }
  assert_int_equal(trains, 3);
  assert_int_equal(evals, 1);
  assert_int_equal(prepares, 4);
  /* The prepared lists: 0-based labels agreeing with the class folders, the
   * testlist labelled from them, and labels.txt in classInd's order. */
  sp_video_list l;
  snprintf(p, sizeof p, "%s/data/UCF-101/trainlist01.txt", tmp);
  assert_int_equal(sp_video_list_read(p, &l), 0);
  assert_int_equal(l.n, 12);
  for (int i = 0; i < l.n; i++) assert_non_null(strstr(l.path[i], names[l.label[i]]));
  sp_video_list_free(&l);
  snprintf(p, sizeof p, "%s/data/UCF-101/testlist01.txt", tmp);
  assert_int_equal(sp_video_list_read(p, &l), 0);
  assert_int_equal(l.n, 4);
  for (int i = 0; i < l.n; i++) assert_int_equal(l.label[i], i);
  sp_video_list_free(&l);
  snprintf(p, sizeof p, "%s/data/UCF-101/labels.txt", tmp);
  char *labels = sp_test_slurp(p);
  assert_string_equal(labels, "MoveLeft\nMoveRight\nRotateCcw\nRotateCw\n");
  free(labels);
  sp_test_commands_free(cmds);
  free(text);
  /* The TSN config's header gives the same commands, with its own names. */
  char *tsm_text, *tsn_text;
  char **tsm = header_commands("ucf-tsm-r50.yaml", &tsm_text), **tsn = header_commands("ucf-tsn-r50.yaml", &tsn_text);
  for (int i = 0; tsm[i] || tsn[i]; i++) {
    assert_non_null(tsm[i]);
    assert_non_null(tsn[i]);
    for (char *s; (s = strstr(tsm[i], "ucf-tsm-r50"));) s[6] = 'n';
    assert_string_equal(tsm[i], tsn[i]);
  }
  sp_test_commands_free(tsm), sp_test_commands_free(tsn);
  free(tsm_text), free(tsn_text);
}

/* A published trainlist given straight to training without its classes
 * file is refused as 1-based, naming the list. */
static void one_based_list_without_classes_is_refused(void **state) {
  (void)state;
  char p[1024], *text;
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/classInd.txt", tmp);
  struct stat sb;
  if (stat(p, &sb) != 0) make_tree();
  sp_test_commands_free(header_commands("ucf-tsm-r50.yaml", &text));
  snprintf(p, sizeof p, "%s/configs/ucf-tsm-r50.yaml", tmp);
  sp_test_write_text(p, text);
  free(text);
  int rc = sp_test_replay(tmp,
                          "build/spry train configs/ucf-tsm-r50.yaml --set data.root=data/UCF-101 --set "
                          "data.train_list=data/ucfTrainTestlist/trainlist01.txt --set "
                          "data.val_list=data/ucfTrainTestlist/trainlist01.txt --set data.num_classes=0 --set "
                          "out=runs/refused",
                          "--set model=tsm-r18 --set data.size=32 --set data.segments=2", out, sizeof out);
  if (rc == 0 || !strstr(out, "trainlist01.txt: no clip has label 0"))
    fail_msg("exit %d, expected a refusal naming trainlist01.txt:\n%s", rc, out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(published_files_prepare_train_eval),
      cmocka_unit_test(one_based_list_without_classes_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
