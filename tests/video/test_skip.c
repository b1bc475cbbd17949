/* Decoding only what a fetch needs stays exact. For every codec and
 * container where pictures nothing references are skipped (H.264 with
 * B-frames, b-pyramid, open GOPs and variable frame rate; x264's own default
 * settings; HEVC with and without temporal sub-layers; MPEG-4 Part 2 and
 * MPEG-2 with pts), random fetches equal a full sequential decode byte for
 * byte and equal a fetch that decodes every picture, while decoding fewer
 * pictures, with one decoder thread or several. Where skipping would not be exact or is not supported (MPEG-4 in
 * AVI without pts, VP9, GIF), the reader falls back to decoding everything,
 * and stays exact. A fetch also stops at its last wanted frame. */
#include "video_testutil.h"

static char tmp[512];

/* LeakSanitizer reads this at start-up: libx265 (Debian's 3.5, the encoder
 * that makes the HEVC clips here) keeps a few strings and buffers from
 * x265_encoder_open to exit. Only leaks whose stack passes through libx265. */
const char *__lsan_default_suppressions(void);
__attribute__((used)) const char *__lsan_default_suppressions(void) { return "leak:libx265.so\n"; }

static int setup(void **state) {
  (void)state;
  return sp_test_tmpdir(tmp, sizeof tmp) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

static int trials(void) { return sp_test_sanitized() ? 4 : 20; }

/* Fetches idx through a fresh handle (options opt) and returns its counters. */
static sp_video_stats fetch_counted(const char *path, const sp_video_options *opt, const int64_t *idx, int n,
                                    const sp_video_geom *g, size_t fb, uint8_t *out) {
  sp_video *v = sp_video_open_with(path, opt);
  if (!v) fail_msg("open %s: %s", path, sp_last_error());
  if (sp_video_get_frames(v, idx, n, g, out) != 0) fail_msg("%s: %s", path, sp_last_error());
  (void)fb;
  sp_video_stats s = sp_video_get_stats(v);
  sp_video_close(v);
  return s;
}

/* The checks every clip gets. want_skip: the reader must skip here (1) or
 * must fall back to full decoding (0). Returns the reference's frame count. */
static int64_t check_clip(const char *path, int want_skip) {
  sp_video *v = sp_video_open(path);
  if (!v) fail_msg("open %s: %s", path, sp_last_error());
  sp_video_info in;
  assert_int_equal(sp_video_get_info(v, &in), 0);
  if (in.skips_unreferenced != want_skip)
    fail_msg("%s (%s in %s, seekable %d): skips_unreferenced %d, expected %d", path, in.codec, in.container,
             in.seekable, in.skips_unreferenced, want_skip);
  sp_video_close(v);

  sp_video_geom g = sp_video_geom_native();
  vt_ref r;
  vt_reference(path, &g, &r);
  assert_true(r.n >= 16);
  vt_check_random_sets(path, &r, &g, trials(), 23);

  /* A TSN-like draw: one frame in each eighth. Skipping changes the work,
   * never the bytes. */
  int64_t idx[8];
  for (int k = 0; k < 8; k++) idx[k] = (r.n * k) / 8 + (k * 5) % (r.n / 8 > 0 ? r.n / 8 : 1);
  uint8_t *a = malloc(8 * r.fb), *b = malloc(8 * r.fb);
  sp_video_options skip = {.threads = 1}, full = {.threads = 1, .no_skip = 1};
  sp_video_stats sa = fetch_counted(path, &skip, idx, 8, &g, r.fb, a);
  sp_video_stats sb = fetch_counted(path, &full, idx, 8, &g, r.fb, b);
  for (int k = 0; k < 8; k++)
    if (memcmp(a + k * r.fb, r.px + idx[k] * r.fb, r.fb) != 0)
      fail_msg("%s: frame %lld differs from the full decode", path, (long long)idx[k]);
  assert_memory_equal(a, b, 8 * r.fb);
  /* Frame threads (for long runs) give the same bytes. */
  sp_video_options threads = {.threads = 3};
  memset(b, 0, 8 * r.fb);
  fetch_counted(path, &threads, idx, 8, &g, r.fb, b);
  assert_memory_equal(a, b, 8 * r.fb);
  print_message("%s: decoded %lld of %lld packets (%lld skipped); without skipping %lld\n", path,
                (long long)sa.decoded, (long long)sa.packets, (long long)sa.skipped, (long long)sb.decoded);
  assert_int_equal(sb.skipped, 0);
  if (want_skip) {
    assert_true(sa.skipped > 0);
    assert_true(sa.decoded < sb.decoded);
  } else {
    assert_int_equal(sa.skipped, 0);
  }
  free(a), free(b);
  int64_t n = r.n;
  free(r.px);
  return n;
}

static void make_and_check(const char *name, sp_video_writer_config *c, int frames, int want_skip) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  vt_make_clip(path, frames, c);
  assert_int_equal(check_clip(path, want_skip), frames);
}

static void test_h264_bframes(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 12;
  c.b_frames = 3; /* b-pyramid: the middle B of three is a reference */
  make_and_check("bframes.mp4", &c, 75, 1);
}

static void test_h264_open_gop_vfr(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 10;
  c.b_frames = 3;
  c.open_gop = 1;
  c.vfr = 1;
  make_and_check("opengop_vfr.mkv", &c, 61, 1);
}

/* x264 as `ffmpeg -c:v libx264` runs it: preset medium, keyint 250 with
 * scene cuts, 3 B-frames, b-pyramid, 3 references. */
static void test_h264_x264_defaults(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.encoder_defaults = 1;
  make_and_check("x264_defaults.mp4", &c, 90, 1);
}

static int have_encoder(const char *name) {
  if (avcodec_find_encoder_by_name(name)) return 1;
  print_message("no %s encoder in this libavcodec: skipped\n", name);
  return 0;
}

static void test_hevc(void **state) {
  (void)state;
  if (!have_encoder("libx265")) skip();
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.encoder = "libx265";
  c.gop = 16;
  c.b_frames = 4;
  c.open_gop = 1; /* CRA keyframes with leading (RASL) pictures */
  make_and_check("hevc.mkv", &c, 70, 1);
}

/* Non-reference B-frames on a temporal sub-layer of their own: only the
 * highest sub-layer's non-reference pictures are skipped. */
static void test_hevc_temporal_layers(void **state) {
  (void)state;
  if (!have_encoder("libx265")) skip();
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.encoder = "libx265";
  c.gop = 16;
  c.b_frames = 3;
  c.params = "temporal-layers=1:b-pyramid=0";
  make_and_check("hevc_tl.mp4", &c, 64, 1);
}

static void test_mpeg4_mp4(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.force_mpeg4 = 1;
  c.gop = 12;
  c.b_frames = 2;
  make_and_check("mpeg4.mp4", &c, 50, 1);
}

static void test_mpeg2(void **state) {
  (void)state;
  if (!have_encoder("mpeg2video")) skip();
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.encoder = "mpeg2video";
  c.gop = 12;
  c.b_frames = 2;
  make_and_check("mpeg2.mkv", &c, 50, 1);
}

/* ------------------------------------------------------------- fallbacks */

/* AVI stores no pts: a frame is named by its place in the decoder's output,
 * which skipped pictures would shift. */
static void test_fallback_mpeg4_avi(void **state) {
  (void)state;
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.force_mpeg4 = 1;
  c.gop = 12;
  c.b_frames = 2;
  make_and_check("mpeg4.avi", &c, 50, 0);
}

/* No parser for VP9 here (its hidden alt-ref frames included): everything
 * is decoded. */
static void test_fallback_vp9(void **state) {
  (void)state;
  if (!have_encoder("libvpx-vp9")) skip();
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.encoder = "libvpx-vp9";
  c.gop = 16;
  make_and_check("vp9.mkv", &c, 40, 0);
}

static void test_fallback_real_avi_and_gif(void **state) {
  (void)state;
  char buf[1024];
  const char *avi = sp_test_data_path("action_clips/ucf101/test.avi", buf, sizeof buf);
  if (!avi) skip();
  check_clip(avi, 0);
  char buf2[1024];
  const char *gif = sp_test_data_path("action_clips/ucf101/v_CricketShot_g04_c01_rgb.gif", buf2, sizeof buf2);
  if (gif) check_clip(gif, 0);
}

static void test_real_mp4(void **state) {
  (void)state;
  char buf[1024];
  const char *p = sp_test_data_path("action_clips/kinetics400/test.mp4", buf, sizeof buf);
  if (!p) skip();
  if (sp_test_sanitized()) skip(); /* 300 frames of reference at native size: slow there */
  check_clip(p, 1);
}

/* ------------------------------------------------------ stopping early */

/* One frame costs what it depends on: frame 0 is one picture, not the
 * pictures a decoder would take in before handing it out. And a B-frame
 * nothing references, fetched alone, decodes its references and itself. */
static void test_stops_at_last_wanted(void **state) {
  (void)state;
  char path[600];
  snprintf(path, sizeof path, "%s/stop.mp4", tmp);
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 30;
  c.b_frames = 2;
  vt_make_clip(path, 60, &c);
  sp_video_geom g = sp_video_geom_native();
  vt_ref r;
  vt_reference(path, &g, &r);
  uint8_t *out = malloc(r.fb);
  int64_t first = 0;
  sp_video_options o = {.threads = 1};
  sp_video_stats s = fetch_counted(path, &o, &first, 1, &g, r.fb, out);
  assert_memory_equal(out, r.px, r.fb);
  assert_int_equal(s.decoded, 1);
  /* Every packet sent and not skipped gave exactly one picture out. */
  int64_t mid = 14;
  s = fetch_counted(path, &o, &mid, 1, &g, r.fb, out);
  assert_memory_equal(out, r.px + mid * r.fb, r.fb);
  assert_int_equal(s.decoded, s.packets - s.skipped);
  assert_true(s.decoded <= 12);
  free(out);
  free(r.px);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_h264_bframes),          cmocka_unit_test(test_h264_open_gop_vfr),
      cmocka_unit_test(test_h264_x264_defaults),    cmocka_unit_test(test_hevc),
      cmocka_unit_test(test_hevc_temporal_layers),  cmocka_unit_test(test_mpeg4_mp4),
      cmocka_unit_test(test_mpeg2),                 cmocka_unit_test(test_fallback_mpeg4_avi),
      cmocka_unit_test(test_fallback_vp9),          cmocka_unit_test(test_fallback_real_avi_and_gif),
      cmocka_unit_test(test_real_mp4),              cmocka_unit_test(test_stops_at_last_wanted),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
