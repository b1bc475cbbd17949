/* The video trainer end to end on the synthetic action set (4 classes that
 * differ only in the direction of motion or rotation): TSM, which mixes
 * neighbouring frames, beats TSN, which averages frames independently and so
 * cannot tell a clip from its reverse; a Multigrid run of the same epochs
 * takes clearly less time and stays close to the normal run; `spry eval`
 * reproduces the trainer's top-1 from the checkpoint as JSON.
 * The reference backend is plain C: the full comparison (3 runs of 8 epochs,
 * minutes) runs with SPRY_LONG_TESTS=1; by default (and under sanitizers)
 * a one-epoch smoke run of every path (TSM, TSN, Multigrid, eval) stays
 * under a minute. bench/run_multigrid.sh measures the real comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/video_train.h"
#include "testkit.h"

static char dir[512];
static int long_runs;

static int setup(void **state) {
  (void)state;
  sp_test_tmpdir(dir, sizeof dir);
  long_runs = !sp_test_sanitized() && getenv("SPRY_LONG_TESTS") && atoi(getenv("SPRY_LONG_TESTS"));
  char p[600];
  snprintf(p, sizeof p, "%s/train", dir);
  if (sp_synth_actions(p, long_runs ? 64 : 8, 8, 32, 1) != 0) return -1;
  snprintf(p, sizeof p, "%s/val", dir);
  return sp_synth_actions(p, long_runs ? 32 : 4, 8, 32, 2);
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(dir);
  return 0;
}

static int train(const char *model, const char *name, int multigrid, int epochs, sp_video_summary *s) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "task: video\nmodel: %s\nmodel_options: {base_width: 8}\n"
           "data: {train_list: %s/train/list.txt, val_list: %s/val/list.txt, segments: 4, size: 32, short_side: 32,"
           " flip: 0, mean: 0.5, std: 0.25}\n"
           "optimizer: {type: sgd, lr: 0.0125, momentum: 0.9, weight_decay: 0.0001}\n" /* as configs/synth-*: Multigrid scales it up */
           "schedule: {decay: cosine, warmup_epochs: 1}\n"
           "multigrid: {long: %s, short: false}\n"
           "epochs: %d\nbatch: 4\nworkers: 2\nseed: 3\nout: %s/%s\n",
           model, dir, dir, multigrid ? "true" : "false", epochs, dir, name);
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_parse(yaml, name, 0, NULL, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  int rc = sp_video_train_run(&cfg, text, 0, s);
  free(text);
  if (rc != 0) fail_msg("%s: %s", name, sp_last_error());
  fprintf(stderr, "%s: top-1 %.3f (best %.3f), %.1f s, %lld iterations\n", name, s->top1, s->best_top1, s->train_s,
          (long long)s->iterations);
  return rc;
}

static void tsm_sees_motion_tsn_does_not(void **state) {
  (void)state;
  int epochs = long_runs ? 8 : 1;
  sp_video_summary tsm, tsn;
  train("tsm-r18", "tsm", 0, epochs, &tsm);
  train("tsn-r18", "tsn", 0, epochs, &tsn);
  sp_video_summary mg;
  if (!long_runs) {
    train("tsm-r18", "tsm-mg", 1, 2, &mg); /* two epochs: stages 0 and 2 of the long cycle */
    assert_true(mg.iterations > 0);
  } else {
  /* TSN's best is 0.5 (moving vs rotating, never which way). */
  assert_true(tsn.best_top1 <= 0.6);
  assert_true(tsm.best_top1 >= tsn.best_top1 + 0.2);

  /* Multigrid (long cycle) on the same epochs: fewer, larger iterations. */
  train("tsm-r18", "tsm-mg", 1, epochs, &mg);
  assert_true(mg.iterations < tsm.iterations * 3 / 4);
  assert_true(mg.train_s < tsm.train_s * 0.85);
  assert_true(mg.best_top1 >= tsm.best_top1 - 0.15);
  }

  /* spry eval on the checkpoint: JSON with the trainer's numbers. */
  const char *bin = getenv("SPRY_BIN");
  if (!bin) return;
  char cmd[2048], line[1024] = "", last[1024] = "";
  snprintf(cmd, sizeof cmd, "%s eval --weights %s/tsm/last.safetensors 2>/dev/null", bin, dir);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  while (fgets(line, sizeof line, p)) snprintf(last, sizeof last, "%s", line);
  assert_int_equal(pclose(p), 0);
  assert_non_null(strstr(last, "\"top1\":"));
  assert_non_null(strstr(last, "\"top5\":1"));
  double top1 = atof(strstr(last, "\"top1\":") + 7);
  assert_true(fabs(top1 - tsm.top1) < 1e-9);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(tsm_sees_motion_tsn_does_not)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
