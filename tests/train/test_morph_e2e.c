/* `spry morph --weights` end to end: a tiny keypoint model trained for one
 * short epoch on synthetic faces predicts the points of two faces, and the
 * morph between them is written (frames, points.png, GIF). Covers the
 * predictor path of the CLI; the geometry itself is tested in
 * tests/data/test_morph.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spry/config.h"
#include "spry/data.h"
#include "spry/morph.h"
#include "spry/plot.h"
#include "spry/synth.h"
#include "spry/train.h"
#include "testkit.h"

static char dir[256];

static void morph_with_a_trained_model(void **state) {
  (void)state;
  if (!getenv("SPRY_BIN")) skip();
  char faces[512], run_dir[512], text[1024];
  snprintf(faces, sizeof faces, "%s/faces", dir);
  snprintf(run_dir, sizeof run_dir, "%s/run", dir);
  sp_synth_face_options o = sp_synth_face_defaults();
  o.progress = 0;
  assert_int_equal(sp_synth_faces(faces, 40, 11, &o), 0);
  snprintf(text, sizeof text,
           "model: vgg-face\ndata:\n  path: %s\n  val_fraction: 0.3\n  crop_size: 40\n  size: 32\n  channels: 1\n"
           "optimizer:\n  lr: 0.002\nepochs: 1\nbatch: 8\nseed: 3\nworkers: 1\n",
           faces);
  char set_out[600], *sets[1] = {set_out};
  snprintf(set_out, sizeof set_out, "out=%s", run_dir);
  sp_train_config cfg;
  char *cfg_text = NULL;
  if (sp_train_config_parse(text, "test", 1, sets, &cfg, &cfg_text) != 0) fail_msg("%s", sp_last_error());
  sp_train_summary s;
  if (sp_train_run(&cfg, cfg_text, 0, &s) != 0) fail_msg("training: %s", sp_last_error());
  free(cfg_text);

  /* The model's 68 points on two faces; colour frames although the model is
   * grey (the CLI predicts on a grey copy). */
  char args[3000], out[8192], path[700], out_dir[600];
  snprintf(out_dir, sizeof out_dir, "%s/morph", dir);
  snprintf(args, sizeof args,
           "morph --weights %s/best.safetensors %s/images/Synth_Person_0000_00.jpg "
           "%s/images/Synth_Person_0001_00.jpg --out %s --frames 3 --box-a 4,4,56,56",
           run_dir, faces, faces, out_dir);
  int rc = sp_test_run_cli(args, 1, out, sizeof out);
  if (rc != 0) fail_msg("spry morph failed: %s", out);
  assert_non_null(strstr(out, "\"keypoints\":68"));
  assert_non_null(strstr(out, "\"points_from\":\"model\""));
  for (int f = 0; f <= 3; f++) {
    snprintf(path, sizeof path, "%s/frame_%03d.png", out_dir, f);
    sp_image im;
    assert_int_equal(sp_image_load(path, 3, &im), 0);
    sp_image_free(&im);
  }
  /* Frame 0 is face A itself. */
  sp_image a, f0;
  snprintf(path, sizeof path, "%s/images/Synth_Person_0000_00.jpg", faces);
  assert_int_equal(sp_image_load(path, 3, &a), 0);
  snprintf(path, sizeof path, "%s/frame_000.png", out_dir);
  assert_int_equal(sp_image_load(path, 3, &f0), 0);
  assert_true(a.w == f0.w && a.h == f0.h);
  assert_memory_equal(a.px, f0.px, (size_t)a.w * a.h * 3);
  sp_image_free(&a), sp_image_free(&f0);
  int w, h;
  uint8_t *rgb;
  snprintf(path, sizeof path, "%s/morph.gif", out_dir);
  assert_int_equal(sp_gif_read(path, &w, &h, &rgb), 6);
  free(rgb);
  /* Mixed: A's points from a file, B's from the model. */
  snprintf(path, sizeof path, "%s/a.json", dir);
  FILE *fp = fopen(path, "w");
  fputs("[", fp);
  for (int i = 0; i < 68; i++) fprintf(fp, "%s[%d,%d]", i ? "," : "", 10 + i % 8 * 5, 10 + i / 8 * 5);
  fputs("]", fp);
  fclose(fp);
  snprintf(args, sizeof args,
           "morph --weights %s/best.safetensors --points-a %s %s/images/Synth_Person_0000_00.jpg "
           "%s/images/Synth_Person_0001_00.jpg --out %s --frames 2",
           run_dir, path, faces, faces, out_dir);
  assert_int_equal(sp_test_run_cli(args, 1, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"points_from\":\"mixed\""));
  /* 3 frames now, 4 before: the old run's last frame is gone. */
  char stale[700];
  snprintf(stale, sizeof stale, "%s/frame_003.png", out_dir);
  FILE *old = fopen(stale, "rb");
  if (old) fclose(old);
  assert_null(old);
  /* With both point files the checkpoint would go unused: refused. */
  snprintf(args, sizeof args,
           "morph --weights %s/best.safetensors --points-a %s --points-b %s %s/images/Synth_Person_0000_00.jpg "
           "%s/images/Synth_Person_0001_00.jpg --out %s --frames 2",
           run_dir, path, path, faces, faces, out_dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 2); /* a usage error */
  assert_non_null(strstr(out, "would not be used"));
  /* A missing checkpoint is an error naming it, and leaves no output folder. */
  snprintf(args, sizeof args, "morph --weights %s/none.safetensors %s/images/Synth_Person_0000_00.jpg "
           "%s/images/Synth_Person_0001_00.jpg --out %s/never/made", dir, faces, faces, dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 1);
  assert_non_null(strstr(out, "none.safetensors"));
  snprintf(stale, sizeof stale, "%s/never", dir);
  struct stat st;
  assert_int_not_equal(stat(stale, &st), 0);
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(morph_with_a_trained_model),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  sp_plot_release_caches(); /* the trainer's report drew text */
  return rc;
}
