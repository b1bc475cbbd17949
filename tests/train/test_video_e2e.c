/* The video trainer end to end on the synthetic action set (4 classes that
 * differ only in the direction of motion or rotation): TSM, which mixes
 * neighbouring frames, beats TSN, which averages frames independently and so
 * cannot tell a clip from its reverse; a Multigrid run of the same epochs
 * takes clearly less time and stays close to the normal run; `spry eval`
 * reproduces the trainer's top-1 from the checkpoint as JSON; a Multigrid run
 * stopped mid-epoch (as Ctrl-C stops it) and resumed ends bit for bit where
 * the uninterrupted run ends.
 * The reference backend is plain C: the full comparison (3 runs of 8 epochs,
 * minutes) runs with SPRY_LONG_TESTS=1; by default (and under sanitizers)
 * a one-epoch smoke run of every path (TSM, TSN, Multigrid, eval) stays
 * under a minute. bench/run_multigrid.sh measures the real comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/train.h"
#include "train/loop.h" /* sp_train_stop_after */
#include "spry/video_train.h"
#include "spry/plot.h"
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

/* rc of the run (0, or 130 when stopped); resume continues out/NAME. */
static const char *train_set = "train"; /* the folder under dir the runs train on */
static int train_rc(const char *model, const char *name, int multigrid, int epochs, int resume, sp_video_summary *s) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "task: video\nmodel: %s\nmodel_options: {base_width: 8}\n"
           "data: {train_list: %s/%s/list.txt, val_list: %s/val/list.txt, segments: 4, size: 32, short_side: 32,"
           " flip: 0, mean: 0.5, std: 0.25}\n"
           "optimizer: {type: sgd, lr: 0.0125, momentum: 0.9, weight_decay: 0.0001}\n" /* as configs/synth-*: Multigrid scales it up */
           "schedule: {decay: cosine, warmup_epochs: 1}\n"
           "multigrid: {long: %s, short: %s}\n"
           "epochs: %d\nbatch: 4\nworkers: 2\nseed: 3\nout: %s/%s\nbackend: ref\n",
           model, dir, train_set, dir, multigrid ? "true" : "false", multigrid > 1 ? "true" : "false", epochs, dir, name);
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_parse(yaml, name, 0, NULL, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  int rc = sp_video_train_run(&cfg, text, resume, s);
  free(text);
  return rc;
}

/* multigrid: 0 off, 1 long cycle, 2 long and short cycles. */
static int train(const char *model, const char *name, int multigrid, int epochs, sp_video_summary *s) {
  int rc = train_rc(model, name, multigrid, epochs, 0, s);
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

/* The iterations each epoch of a run took, from its metrics.jsonl. */
static int epoch_iterations(const char *name, int64_t *it, int cap) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, name);
  char *m = sp_test_slurp(path);
  assert_non_null(m);
  int n = 0;
  for (const char *p = m; n < cap && (p = strstr(p, "\"iterations\":")); p += 13) it[n++] = atoll(p + 13);
  free(m);
  return n;
}

static void interrupted_multigrid_run_resumes_exactly(void **state) {
  (void)state;
  /* Long and short cycles: the batch shape changes within and between
   * epochs, so a resume has to land on the same shape of the same schedule. */
  char p[600];
  snprintf(p, sizeof p, "%s/train48", dir);
  assert_int_equal(sp_synth_actions(p, 48, 8, 32, 4), 0);
  train_set = "train48";
  sp_video_summary a, b;
  train("tsm-r18", "mg-straight", 2, 3, &a);
  int64_t it[8];
  assert_int_equal(epoch_iterations("mg-straight", it, 8), 3);
  /* Stop one step into the first epoch with at least two iterations after
   * the first epoch: mid-epoch, past an epoch boundary. */
  int64_t stop_at = it[0], e = 1;
  while (e < 3 && it[e] < 2) stop_at += it[e++];
  assert_true(e < 3);
  stop_at++;
  /* Nothing to resume: refused before the run folder is made. */
  assert_int_equal(train_rc("tsm-r18", "never-trained", 2, 3, 1, &b), -1);
  if (!strstr(sp_last_error(), "no last.safetensors there")) fail_msg("%s", sp_last_error());
  snprintf(p, sizeof p, "%s/never-trained", dir);
  FILE *none = fopen(p, "r");
  assert_null(none);
  sp_train_stop_after(stop_at);
  int rc = train_rc("tsm-r18", "mg-stopped", 2, 3, 0, &b);
  sp_train_stop_after(0);
  if (rc != 130) fail_msg("the stopped run returned %d: %s", rc, sp_last_error());
  rc = train_rc("tsm-r18", "mg-stopped", 2, 3, 1, &b);
  if (rc != 0) fail_msg("the resumed run: %s", sp_last_error());
  assert_true(a.train_loss == b.train_loss);
  assert_true(a.top1 == b.top1);
  /* The resumed run's summary is the whole run's, not its resumed part's. */
  assert_int_equal(b.iterations, a.iterations);
  assert_true(b.train_s > 0);
  /* The same losses per epoch and the same final weights and optimizer
   * state, bit for bit. */
  char pa[700], pb[700];
  snprintf(pa, sizeof pa, "%s/mg-straight/metrics.jsonl", dir);
  snprintf(pb, sizeof pb, "%s/mg-stopped/metrics.jsonl", dir);
  char *ma = sp_test_slurp(pa), *mb = sp_test_slurp(pb);
  assert_non_null(ma);
  assert_non_null(mb);
  int lines = 0;
  for (const char *la = ma, *lb = mb; (la = strstr(la, "\"train_loss\":")) && (lb = strstr(lb, "\"train_loss\":"));
       la += 13, lb += 13, lines++)
    assert_true(strtod(la + 13, NULL) == strtod(lb + 13, NULL));
  assert_int_equal(lines, 3);
  int lines_b = 0; /* the resumed log holds each epoch once */
  for (const char *lb = mb; (lb = strstr(lb, "\"train_loss\":")); lb += 13) lines_b++;
  assert_int_equal(lines_b, 3);
  free(ma);
  free(mb);
  /* The report: figures of the log and an index.html that shows them. */
  snprintf(pa, sizeof pa, "%s/mg-straight/index.html", dir);
  char *html = sp_test_slurp(pa);
  assert_non_null(html);
  assert_non_null(strstr(html, "accuracy.png"));
  assert_non_null(strstr(html, "throughput.png"));
  assert_null(strstr(html, "validation top-5")); /* 4 classes: top-5 is always 1 */
  free(html);
  snprintf(pa, sizeof pa, "%s/mg-straight/accuracy.png", dir);
  FILE *png = fopen(pa, "rb");
  assert_non_null(png);
  fclose(png);
  /* A video checkpoint given to predict is named as such. */
  char args[1600], out[4096];
  snprintf(args, sizeof args, "predict --weights %s/mg-straight/best.safetensors %s/face.jpg", dir, dir);
  int prc = sp_test_run_cli(args, 1, out, sizeof out);
  if (prc != -1) {
    assert_int_not_equal(prc, 0);
    assert_non_null(strstr(out, "a video model's checkpoint"));
  }
  snprintf(pa, sizeof pa, "%s/mg-straight", dir);
  snprintf(pb, sizeof pb, "%s/mg-stopped", dir);
  sp_test_assert_same_checkpoint(pa, pb);
  train_set = "train";
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(tsm_sees_motion_tsn_does_not),
                                     cmocka_unit_test(interrupted_multigrid_run_resumes_exactly)};
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  sp_plot_release_caches(); /* the run reports use fontconfig; its caches look like leaks */
  return rc;
}
