/* Keypoint metrics on hand-computed cases; the video report's top-5 rule. */
#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/metrics.h"
#include "spry/plot.h"
#include "spry/video_train.h"
#include "testkit.h"

/* A 68-point face whose eye corners are known: every point at (100, 100)
 * except the eyes: left eye points at x 40..50 (outer corner 40), right eye
 * at x 150..160 (outer corner 160), all at y 80. Inter-ocular = 120,
 * inter-pupil = 155 - 45 = 110. */
static void make_face(float *p) {
  for (int i = 0; i < 68; i++) p[2 * i] = 100, p[2 * i + 1] = 100;
  for (int i = 0; i < 6; i++) {
    p[2 * (36 + i)] = 40 + 2 * i, p[2 * (36 + i) + 1] = 80;
    p[2 * (42 + i)] = 150 + 2 * i, p[2 * (42 + i) + 1] = 80;
  }
}

static void hand_computed_nme(void **state) {
  (void)state;
  float gt[2 * 68 * 2], pred[2 * 68 * 2];
  make_face(gt);
  make_face(gt + 136);
  for (int i = 0; i < 2 * 68 * 2; i++) pred[i] = gt[i];
  /* Face 0: every point 6 px to the right -> mean 6 px, NME-IO 0.05.
   * Face 1: every point 12 px down -> mean 12 px, NME-IO 0.10, IP 12/110. */
  for (int i = 0; i < 68; i++) pred[2 * i] += 6, pred[136 + 2 * i + 1] += 12;
  sp_eye_points eyes;
  assert_int_equal(sp_eye_points_for_k(68, &eyes), 1);
  sp_kp_metrics m;
  double per[2];
  assert_int_equal(sp_kp_metrics_compute(pred, gt, 2, 68, &eyes, &m, per), 0);
  assert_int_equal(m.count, 2);
  assert_true(fabs(m.mean_px - 9.0) < 1e-9);
  assert_true(fabs(per[0] - 0.05) < 1e-9);
  assert_true(fabs(per[1] - 0.10) < 1e-9);
  assert_true(fabs(m.nme_io - 0.075) < 1e-9);
  assert_true(fabs(m.nme_ip - (6.0 / 110 + 12.0 / 110) / 2) < 1e-9);
  assert_true(fabs(m.fr_008 - 0.5) < 1e-12); /* 0.10 > 0.08 fails; 0.05 passes */
  assert_true(fabs(m.fr_010 - 0.0) < 1e-12); /* 0.10 is not above 0.10 */
  assert_true(fabs(m.auc_010 - (0.5 + 0.0) / 2) < 1e-9);
  double t[11], frac[11];
  sp_ced_curve(per, 2, 0.1, 11, t, frac);
  assert_true(fabs(frac[4] - 0.0) < 1e-12 && fabs(frac[5] - 0.5) < 1e-12 && fabs(frac[10] - 1.0) < 1e-12);
}

/* A short run: every face's NME above the CED's 0.2. The chart keeps its
 * y axis at [0, 1] (the flat curve on the bottom edge, not mid-chart on a
 * -1..1 axis) and counts the faces it leaves off. */
static void ced_of_faces_off_the_chart(void **state) {
  (void)state;
  double per[5] = {0.35, 0.5, 0.21, 0.1, NAN};
  assert_int_equal(sp_ced_faces_above(per, 5, 0.2), 4); /* NaN is off the chart too */
  assert_int_equal(sp_ced_faces_above(per, 4, 0.5), 0);
  double off[3] = {0.4, 0.6, 0.9};
  char dir[512], path[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/ced.png", dir);
  assert_int_equal(sp_ced_png(path, 720, 480, off, 3, 1), 0);
  cairo_surface_t *s = cairo_image_surface_create_from_png(path);
  assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  cairo_surface_flush(s);
  uint32_t want = sp_plot_series_rgb(0);
  int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s), top = -1;
  const unsigned char *data = cairo_image_surface_get_data(s);
  /* The curve's highest row left of the legend (which sits top right). */
  for (int y = 0; y < h && top < 0; y++)
    for (int x = 0; x < w / 2 && top < 0; x++) {
      uint32_t v;
      memcpy(&v, data + (size_t)y * cairo_image_surface_get_stride(s) + 4 * (size_t)x, 4);
      int d = 0;
      for (int c = 0; c < 3; c++) {
        int e = abs((int)((v >> (16 - 8 * c)) & 255) - (int)((want >> (16 - 8 * c)) & 255));
        d = e > d ? e : d;
      }
      if (d <= 60) top = y;
    }
  cairo_surface_destroy(s);
  assert_true(top > h * 3 / 4);
  sp_test_rmtree(dir);
}

static void mirrored_face_uses_outer_corners(void **state) {
  (void)state;
  /* Swap which group is on the left: the normaliser must stay 120. */
  float gt[136], pred[136];
  make_face(gt);
  for (int i = 0; i < 68; i++) gt[2 * i] = 200 - gt[2 * i];
  for (int i = 0; i < 136; i++) pred[i] = gt[i] + (i % 2 ? 0 : 12);
  sp_eye_points eyes;
  sp_eye_points_for_k(68, &eyes);
  sp_kp_metrics m;
  sp_kp_metrics_compute(pred, gt, 1, 68, &eyes, &m, NULL);
  assert_true(fabs(m.nme_io - 0.1) < 1e-9);
}

static void no_eyes_gives_nan_nme(void **state) {
  (void)state;
  float gt[2] = {10, 10}, pred[2] = {13, 14};
  sp_eye_points eyes;
  assert_int_equal(sp_eye_points_for_k(1, &eyes), 0);
  sp_kp_metrics m;
  assert_int_equal(sp_kp_metrics_compute(pred, gt, 1, 1, &eyes, &m, NULL), 0);
  assert_true(fabs(m.mean_px - 5.0) < 1e-9);
  assert_true(isnan(m.nme_io));
  /* People read "n/a" where the JSON has null, not "nan". */
  char t[32];
  assert_string_equal(sp_metric_text(m.nme_io, 4, t, sizeof t), "n/a");
  assert_string_equal(sp_metric_text(0.123456, 4, t, sizeof t), "0.1235");
  assert_string_equal(sp_metric_text(m.mean_px, 3, t, sizeof t), "5.000");
  assert_int_equal(sp_kp_metrics_compute(pred, gt, 0, 1, &eyes, &m, NULL), -1);
}

/* The video report shows top-5 only where it can be below 1: with 5
 * classes or fewer every label is in the top 5. */
static void video_report_hides_top5_for_few_classes(void **state) {
  (void)state;
  char dir[512], p[700];
  if (!sp_test_tmpdir(dir, sizeof dir)) fail_msg("no temp dir");
  snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
  sp_test_write_text(p, "{\"epoch\":1,\"train_loss\":1.5,\"val_loss\":1.4,\"val_top1\":0.25,\"val_top5\":0.75,"
                        "\"lr\":0.01,\"clips_per_s\":10,\"epoch_s\":2}\n"
                        "{\"epoch\":2,\"train_loss\":1.2,\"val_loss\":1.1,\"val_top1\":0.5,\"val_top5\":1,"
                        "\"lr\":0.005,\"clips_per_s\":11,\"epoch_s\":2}\n");
  snprintf(p, sizeof p, "%s/index.html", dir);
  assert_int_equal(sp_video_report(dir, "tsm-r18", 101), 0);
  char *html = sp_test_slurp(p);
  assert_non_null(strstr(html, "validation top-5"));
  free(html);
  assert_int_equal(sp_video_report(dir, "tsm-r18", 4), 0);
  html = sp_test_slurp(p);
  assert_null(strstr(html, "validation top-5"));
  assert_non_null(strstr(html, "top-1 only"));
  assert_non_null(strstr(html, "best validation top-1"));
  free(html);
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hand_computed_nme),
      cmocka_unit_test(video_report_hides_top5_for_few_classes),
      cmocka_unit_test(ced_of_faces_off_the_chart),
      cmocka_unit_test(mirrored_face_uses_outer_corners),
      cmocka_unit_test(no_eyes_gives_nan_nme),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_plot_release_caches(); /* the figures' fontconfig caches look like leaks to LeakSanitizer */
  return rc;
}
