/* The keypoint trainer end to end: a run interrupted mid-epoch and resumed
 * ends bit for bit where an uninterrupted run ends; eval and predict on its
 * checkpoint; and on the real IMM faces the nose-tip model gets well below
 * the error of predicting the mean position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spry/common.h"
#include "spry/config.h"
#include "spry/graph.h"
#include "spry/plot.h"
#include "spry/synth.h"
#include "spry/train.h"
#include "train/loop.h" /* sp_train_stop_after */
#include "testkit.h"

static char dir[256];

static int run(const char *config_text, const char *out, int n_sets, char **extra, int resume, sp_train_summary *s) {
  char set_out[600];
  snprintf(set_out, sizeof set_out, "out=%s", out);
  char *sets[16];
  int n = 0;
  sets[n++] = set_out;
  for (int i = 0; i < n_sets; i++) sets[n++] = extra[i];
  sp_train_config cfg;
  char *text = NULL;
  if (sp_train_config_parse(config_text, "test", n, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  int rc = sp_train_run(&cfg, text, resume, s);
  free(text);
  return rc;
}

static char config[1024];

static void interrupted_run_resumes_exactly(void **state) {
  (void)state;
  char straight[512], stopped[512], path[600];
  snprintf(straight, sizeof straight, "%s/straight", dir);
  snprintf(stopped, sizeof stopped, "%s/stopped", dir);
  sp_train_summary a, b;
  assert_int_equal(run(config, straight, 0, NULL, 0, &a), 0);
  /* 3 batches per epoch: stop after 4 steps = mid second epoch, as Ctrl-C would. */
  sp_train_stop_after(4);
  assert_int_equal(run(config, stopped, 0, NULL, 0, &b), 130);
  sp_train_stop_after(0);
  assert_int_equal(run(config, stopped, 0, NULL, 1, &b), 0);
  assert_true(a.val.mean_px == b.val.mean_px);
  assert_true(a.train_loss == b.train_loss);
  /* Same metrics history and same final weights, bit for bit. */
  snprintf(path, sizeof path, "%s/metrics.jsonl", straight);
  char *ma = sp_test_slurp(path);
  snprintf(path, sizeof path, "%s/metrics.jsonl", stopped);
  char *mb = sp_test_slurp(path);
  assert_non_null(ma);
  assert_non_null(mb);
  /* Timing fields differ; compare the losses of each line. */
  for (char *la = ma, *lb = mb; la && lb && *la; la = strchr(la, '\n'), lb = strchr(lb, '\n')) {
    if (*la == '\n') la++, lb++;
    if (!*la) break;
    double ta = strtod(strstr(la, "\"train_loss\":") + 13, NULL), tb = strtod(strstr(lb, "\"train_loss\":") + 13, NULL);
    assert_true(ta == tb);
  }
  free(ma);
  free(mb);
  sp_test_assert_same_checkpoint(straight, stopped);
  /* The report is there. */
  snprintf(path, sizeof path, "%s/index.html", straight);
  char *html = sp_test_slurp(path);
  assert_non_null(html);
  assert_non_null(strstr(html, "best.png"));
  free(html);
}

static int count_lines(const char *path) {
  char *text = sp_test_slurp(path);
  assert_non_null(text);
  int n = 0;
  for (const char *c = text; *c; c++) n += *c == '\n';
  free(text);
  return n;
}

/* metrics.jsonl logs each epoch once: a resumed run keeps the epochs its
 * checkpoint completed, and a fresh run into an old folder is refused unless
 * asked to overwrite it, and then starts the log again. */
static void each_epoch_is_logged_once(void **state) {
  (void)state;
  char out[512], path[600], best[600];
  snprintf(out, sizeof out, "%s/again", dir);
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  snprintf(best, sizeof best, "%s/best.safetensors", out);
  char *one_epoch[] = {"epochs=1"};
  sp_train_summary s;
  assert_int_equal(run(config, out, 1, one_epoch, 0, &s), 0);
  assert_int_equal(count_lines(path), 1);
  char *before = sp_test_slurp(best);
  assert_int_equal(run(config, out, 1, one_epoch, 0, &s), -1);
  assert_non_null(strstr(sp_last_error(), "holds another run's last.safetensors"));
  char *after = sp_test_slurp(best);
  assert_string_equal(before, after); /* nothing of the old run was touched */
  free(before), free(after);
  assert_int_equal(run(config, out, 1, one_epoch, SP_RUN_OVERWRITE, &s), 0);
  assert_int_equal(count_lines(path), 1);
  /* Nothing to resume: an error before any folder or cache is made. */
  char none[600];
  snprintf(none, sizeof none, "%s/never-trained", dir);
  assert_int_equal(run(config, none, 0, NULL, 1, &s), -1);
  assert_non_null(strstr(sp_last_error(), "no last.safetensors there"));
  FILE *f = fopen(none, "r");
  assert_null(f);
  /* Stopped in epoch 2 of 3 (3 batches each), resumed: 3 lines, not 4. */
  sp_train_stop_after(4);
  assert_int_equal(run(config, out, 0, NULL, SP_RUN_OVERWRITE, &s), 130);
  sp_train_stop_after(0);
  assert_int_equal(count_lines(path), 1);
  assert_int_equal(run(config, out, 0, NULL, 1, &s), 0);
  assert_int_equal(count_lines(path), 3);
  char *log = sp_test_slurp(path);
  assert_non_null(strstr(log, "{\"epoch\":1,"));
  assert_non_null(strstr(log, "{\"epoch\":3,"));
  free(log);
}

/* A checkpoint part left by a killed run (its writer gone) is removed at the
 * next start; a part whose writer still runs is left alone. */
static void stale_checkpoint_parts_are_removed(void **state) {
  (void)state;
  char out[512], dead[700], live[700];
  snprintf(out, sizeof out, "%s/parts", dir);
  assert_int_equal(sp_make_dirs(out), 0);
  pid_t child = fork();
  if (child == 0) _exit(0);
  assert_true(child > 0);
  assert_int_equal(waitpid(child, NULL, 0), child); /* a pid whose process is gone */
  snprintf(dead, sizeof dead, "%s/last.safetensors.tmp.%ld", out, (long)child);
  snprintf(live, sizeof live, "%s/best.safetensors.tmp.%ld", out, (long)getppid()); /* alive: our parent */
  sp_test_write_text(dead, "half a checkpoint");
  sp_test_write_text(live, "being written");
  char *one_epoch[] = {"epochs=1"};
  sp_train_summary s;
  assert_int_equal(run(config, out, 1, one_epoch, 0, &s), 0);
  assert_int_equal(access(dead, F_OK), -1);
  assert_int_equal(access(live, F_OK), 0);
  remove(live);
}

static void eval_and_predict_on_the_checkpoint(void **state) {
  (void)state;
  char args[1500], out[65536];
  snprintf(args, sizeof args, "eval --weights %s/straight/best.safetensors", dir);
  assert_int_equal(sp_test_run_cli(args, 0, out, sizeof out), 0);
  const char *last = strrchr(out, '{');
  assert_non_null(last);
  assert_non_null(strstr(last, "\"mean_px\":"));
  assert_non_null(strstr(last, "\"nme_io\":"));
  assert_non_null(strstr(last, "\"auc_010\":"));
  assert_non_null(strstr(last, "\"count\":"));
  /* Its loss is the run's validation loss of the epoch best.safetensors
   * holds: the same faces through the same frozen model. */
  const char *lk = strstr(last, "\"val_loss\":");
  assert_non_null(lk);
  double eval_loss = strtod(lk + 11, NULL), closest = INFINITY;
  snprintf(args, sizeof args, "%s/straight/metrics.jsonl", dir);
  char *metrics = sp_test_slurp(args);
  assert_non_null(metrics);
  for (const char *m = strstr(metrics, "\"val_loss\":"); m; m = strstr(m + 1, "\"val_loss\":"))
    closest = fmin(closest, fabs(strtod(m + 11, NULL) - eval_loss));
  free(metrics);
  if (!(closest <= 1e-5 * fabs(eval_loss)))
    fail_msg("eval loss %.8g is no epoch's val_loss (off by %g)", eval_loss, closest);
  /* An --out that cannot take the plot is a command-line error (exit 2)
   * before any work. */
  snprintf(args, sizeof args, "eval --weights %s/straight/best.safetensors --out %s/straight/metrics.jsonl", dir, dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 2);
  assert_non_null(strstr(out, "metrics.jsonl: not a writable folder"));
  /* predict: one JSON line per image, its faces, each with 68 finite points
   * near the image (regression heads may stray a little off it). */
  snprintf(
      args, sizeof args,
      "predict --weights %s/straight/best.safetensors --overlay %s/ov.png %s/faces/images/Synth_Person_0000_00.jpg",
      dir, dir, dir);
  assert_int_equal(sp_test_run_cli(args, 0, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"image\":"));
  assert_non_null(strstr(out, "\"faces\":[{\"box\":["));
  const char *pp = strstr(out, "\"points\":[");
  assert_non_null(pp);
  pp += 10;
  int points = 0;
  for (; *pp == '['; points++) {
    char *e;
    double x = strtod(pp + 1, &e), y = strtod(e + 1, &e);
    if (!(isfinite(x) && isfinite(y) && fabs(x) < 1000 && fabs(y) < 1000)) fail_msg("point %d: %g, %g", points, x, y);
    pp = e + 1;
    if (*pp == ',') pp++;
  }
  assert_int_equal(points, 68);
  char png[600];
  snprintf(png, sizeof png, "%s/ov.png", dir);
  FILE *f = fopen(png, "rb");
  assert_non_null(f);
  fclose(f);
  /* A box that misses the image is an error, not points in the padding. */
  snprintf(
      args, sizeof args,
      "predict --weights %s/straight/best.safetensors --box -100,-100,5,5 %s/faces/images/Synth_Person_0000_00.jpg",
      dir, dir);
  int st = sp_test_run_cli(args, 1, out, sizeof out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  assert_non_null(strstr(out, "lies outside the"));
  /* A bad image is an error naming it, not a crash. */
  snprintf(args, sizeof args, "predict --weights %s/straight/best.safetensors %s/nothing.jpg", dir, dir);
  st = sp_test_run_cli(args, 1, out, sizeof out);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  assert_non_null(strstr(out, "nothing.jpg"));
}

/* The last number under "key": in a metrics.jsonl text. */
static double last_value(const char *text, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  double v = NAN;
  for (const char *p = strstr(text, k); p; p = strstr(p + 1, k)) v = strtod(p + strlen(k), NULL);
  return v;
}

/* Edges of a run's numbers: a stop on an epoch's last step finishes that
 * epoch (its lr and speed logged, not zeros) and resumes to the same end as
 * an uninterrupted run; a finished run resumed says so and gives its figures
 * (one validation of the final model), not zeros. */
static void stops_at_epoch_ends_and_finished_runs(void **state) {
  (void)state;
  char out[512], path[600], straight[600];
  snprintf(out, sizeof out, "%s/edge", dir);
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  snprintf(straight, sizeof straight, "%s/straight", dir);
  sp_train_summary s;
  sp_train_stop_after(3); /* 3 batches per epoch: the last step of epoch 1 */
  assert_int_equal(run(config, out, 0, NULL, 0, &s), 130);
  sp_train_stop_after(0);
  char *log = sp_test_slurp(path);
  assert_non_null(log);
  assert_true(strstr(log, "{\"epoch\":1,") && !strstr(log, "{\"epoch\":2,"));
  if (!(last_value(log, "lr") > 0 && last_value(log, "images_per_s") > 0 && isfinite(last_value(log, "val_mean_px"))))
    fail_msg("epoch 1 of a run stopped on its last step logged zeros:\n%s", log);
  free(log);
  assert_int_equal(run(config, out, 0, NULL, SP_RUN_RESUME, &s), 0);
  sp_test_assert_same_checkpoint(straight, out);
  /* Finished: resumed, nothing to train, the figures of the final model. */
  log = sp_test_slurp(path);
  double last_px = last_value(log, "val_mean_px");
  free(log);
  assert_int_equal(run(config, out, 0, NULL, SP_RUN_RESUME, &s), 0);
  if (!(isfinite(s.val.mean_px) && fabs(s.val.mean_px - last_px) <= 1e-4 * last_px))
    fail_msg("a finished run resumed reports %g px, its last epoch %g px", s.val.mean_px, last_px);
  assert_true(isfinite(s.best_mean_px) && s.best_mean_px > 0);
}

/* --resume with another config is refused, naming the first differing key,
 * before anything of the run is touched; --resume-changed continues. */
static void resume_refuses_a_changed_config(void **state) {
  (void)state;
  char out[512], last[600];
  snprintf(out, sizeof out, "%s/changed", dir);
  snprintf(last, sizeof last, "%s/last.safetensors", out);
  sp_train_summary s;
  sp_train_stop_after(4);
  assert_int_equal(run(config, out, 0, NULL, 0, &s), 130);
  sp_train_stop_after(0);
  char *before = sp_test_slurp(last);
  char *lr[] = {"optimizer.lr=0.004"};
  assert_int_equal(run(config, out, 1, lr, SP_RUN_RESUME, &s), -1);
  if (!strstr(sp_last_error(), "optimizer.lr") || !strstr(sp_last_error(), "0.004"))
    fail_msg("the refusal does not name the key and value: %s", sp_last_error());
  char *after = sp_test_slurp(last);
  assert_string_equal(before, after);
  free(before), free(after);
  /* threads and workers are the machine's: not a change of the run. */
  char *threads[] = {"threads=1", "workers=1"};
  sp_train_stop_after(5);
  assert_int_equal(run(config, out, 2, threads, SP_RUN_RESUME, &s), 130);
  sp_train_stop_after(0);
  assert_int_equal(run(config, out, 1, lr, SP_RUN_RESUME | SP_RUN_RESUME_CHANGED, &s), 0);
}

static void imm_nose_beats_the_mean_position(void **state) {
  (void)state;
  char buf[1024];
  const char *imm = sp_test_data_path("imm_face_db", buf, sizeof buf);
  if (!imm) skip();
  if (sp_test_sanitized()) skip(); /* minutes under ASan; the synthetic runs cover the code */
  char text[2048], out[600];
  /* The whole photo, as the seed feeds it (no face box, no true points);
   * the cpu (oneDNN) backend makes 128x128 and 40 epochs some seconds. */
  snprintf(text, sizeof text,
           "model: vgg-nose\ndata:\n  path: %s\n  keypoints: [52]\n  box: image\n  crop_size: 160\n  size: 128\n"
           "  channels: 1\naugment:\n  scale: [0.85, 1.15]\n  rotate: 8\n  flip: 0.5\n  randaugment: [1, 5]\n"
           "optimizer:\n  type: adamw\n  lr: 0.002\nepochs: 40\nbatch: 16\nseed: 1\nbackend: cpu\n",
           imm);
  snprintf(out, sizeof out, "%s/nose", dir);
  sp_train_summary s;
  assert_int_equal(run(text, out, 0, NULL, 0, &s), 0);
  printf("# IMM nose tip: validation %.2f px (best %.2f), mean-position floor %.2f px\n", s.val.mean_px, s.best_mean_px,
         s.mean_shape_px);
  assert_true(s.best_mean_px < 0.7 * s.mean_shape_px);
  /* Validation runs frozen plans (weights prepared once per pass): every
   * epoch's pass must see that epoch's weights, so the losses differ. */
  char path[700], line[2048];
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  double first = NAN, last = NAN;
  while (fgets(line, sizeof line, f)) {
    const char *v = strstr(line, "\"val_loss\":");
    if (!v) continue;
    last = atof(v + 11);
    if (isnan(first)) first = last;
  }
  fclose(f);
  assert_true(isfinite(first) && isfinite(last) && last < 0.9 * first);
}

/* The report of the run in `d` says it computed in f32 although bf16 was asked. */
static void report_says_f32(const char *d) {
  char path[600], html[1 << 16];
  snprintf(path, sizeof path, "%s/index.html", d);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  const size_t n = fread(html, 1, sizeof html - 1, f);
  fclose(f);
  html[n] = 0;
  assert_non_null(strstr(html, "f32 (bf16 asked"));
}

/* `precision: bf16` reaches the training plan where bf16 is faster than f32
 * on this CPU (sp_backend_bf16_pays: AMX, or fast bf16 dot products): the
 * same run in bf16 ends near the f32 run but not on the same bits (before,
 * the keypoint trainer ignored the key and trained in f32). The config
 * refuses it with the ref backend (tests/train/test_config.c). Where bf16
 * is slower (no AMX, slow dot products) or absent (below AVX-512), the run
 * trains in f32 instead, after a note: the same bits as the f32 run, and
 * the report says so. SPRY_BF16=force takes the bf16 kernels wherever they
 * exist, SPRY_BF16=off never: both paths are checked on every machine. */
static void bf16_precision_trains_in_bf16(void **state) {
  (void)state;
#ifdef SPRY_HAVE_DNNL
  char f32_dir[512], bf16_dir[512], forced_dir[512], off_dir[512];
  snprintf(f32_dir, sizeof f32_dir, "%s/f32", dir);
  snprintf(bf16_dir, sizeof bf16_dir, "%s/bf16", dir);
  snprintf(forced_dir, sizeof forced_dir, "%s/bf16_forced", dir);
  snprintf(off_dir, sizeof off_dir, "%s/bf16_off", dir);
  char *cpu[] = {"backend=cpu"}, *cpu_bf16[] = {"backend=cpu", "precision=bf16"};
  sp_train_summary a, b, c, d;
  assert_int_equal(run(config, f32_dir, 1, cpu, 0, &a), 0);
  assert_int_equal(run(config, bf16_dir, 2, cpu_bf16, 0, &b), 0);
  printf("# train loss f32 %.6f bf16 %.6f\n", a.train_loss, b.train_loss);
  if (!sp_backend_bf16_pays(SP_BACKEND_CPU)) {
    printf("# %s: the bf16 run trained in f32\n", sp_last_error());
    sp_error_clear();
    assert_true(b.train_loss == a.train_loss);
    report_says_f32(bf16_dir);
  } else {
    assert_true(isfinite(b.train_loss) && b.train_loss != a.train_loss);
    assert_true(fabs(b.train_loss - a.train_loss) < 0.25 * a.train_loss);
  }
  if (sp_backend_bf16(SP_BACKEND_CPU)) { /* forced: the bf16 kernels, paying or not */
    setenv("SPRY_BF16", "force", 1);
    const int rc = run(config, forced_dir, 2, cpu_bf16, 0, &c);
    unsetenv("SPRY_BF16");
    assert_int_equal(rc, 0);
    printf("# forced bf16 %.6f\n", c.train_loss);
    assert_true(isfinite(c.train_loss) && c.train_loss != a.train_loss);
    assert_true(fabs(c.train_loss - a.train_loss) < 0.25 * a.train_loss);
  }
  sp_error_clear();
  setenv("SPRY_BF16", "off", 1);
  const int rc = run(config, off_dir, 2, cpu_bf16, 0, &d);
  unsetenv("SPRY_BF16");
  assert_int_equal(rc, 0);
  assert_true(d.train_loss == a.train_loss);
  report_says_f32(off_dir);
#else
  skip();
#endif
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  char faces[512];
  snprintf(faces, sizeof faces, "%s/faces", dir);
  sp_synth_face_options o = sp_synth_face_defaults();
  o.progress = 0;
  if (sp_synth_faces(faces, 60, 3, &o) != 0) {
    fprintf(stderr, "%s\n", sp_last_error());
    return 1;
  }
  snprintf(config, sizeof config,
           "model: vgg-face\ndata:\n  path: %s\n  val_fraction: 0.2\n  crop_size: 40\n  size: 32\n  channels: 1\n"
           "augment:\n  randaugment: [1, 5]\noptimizer:\n  lr: 0.002\nepochs: 3\nbatch: 16\nseed: 5\nworkers: 2\n",
           faces);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(interrupted_run_resumes_exactly),
      cmocka_unit_test(eval_and_predict_on_the_checkpoint),
      cmocka_unit_test(each_epoch_is_logged_once),
      cmocka_unit_test(stale_checkpoint_parts_are_removed),
      cmocka_unit_test(stops_at_epoch_ends_and_finished_runs),
      cmocka_unit_test(resume_refuses_a_changed_config),
      cmocka_unit_test(bf16_precision_trains_in_bf16),
      cmocka_unit_test(imm_nose_beats_the_mean_position),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  sp_plot_release_caches(); /* the run reports use fontconfig; its caches look like leaks */
  return rc;
}
