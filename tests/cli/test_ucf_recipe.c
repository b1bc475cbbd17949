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
static const char *const names[] = {"MoveLeft", "MoveRight", "RotateCcw", "RotateCw"};
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
  sp_test_ucf_tree(tmp);
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
  if (stat(p, &sb) != 0) sp_test_ucf_tree(tmp);
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
