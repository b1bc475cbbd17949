/* Bad video files: every one must give an error naming the file, or a
 * shorter but correct result, and never hang (each case is timed). */
#include <sys/stat.h>
#include <time.h>

#include "video_testutil.h"

static char tmp[512];
static char good_mp4[600], good_avi[600];

static int setup(void **state) {
  (void)state;
  if (!sp_test_tmpdir(tmp, sizeof tmp)) return -1;
  snprintf(good_mp4, sizeof good_mp4, "%s/good.mp4", tmp);
  snprintf(good_avi, sizeof good_avi, "%s/good.avi", tmp);
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  c.gop = 10;
  vt_make_clip(good_mp4, 60, &c);
  c.force_mpeg4 = 1;
  vt_make_clip(good_avi, 60, &c);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*n);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

static void write_all(const char *path, const uint8_t *b, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
}

/* Opening must fail with a message that names the file. */
static void expect_open_error(const char *path, const char *why) {
  double t0 = sp_now();
  sp_video *v = sp_video_open(path);
  if (v) fail_msg("%s opened although it is %s", path, why);
  assert_non_null(strstr(sp_last_error(), path));
  assert_true(sp_now() - t0 < 10);
}

/* Either open fails, or every frame is fetched (possibly fewer than the
 * original had) or refused with an error naming the file; frames that come
 * back equal the intact file's frames. Bounded time throughout. Returns how
 * many frames were compared with the intact file's. */
static int expect_bounded(const char *path, int64_t original_frames, const vt_ref *intact) {
  double t0 = sp_now();
  sp_video *v = sp_video_open(path);
  if (!v) {
    assert_non_null(strstr(sp_last_error(), path));
    return 0;
  }
  int64_t n = sp_video_frame_count(v);
  if (n < 0) {
    assert_non_null(strstr(sp_last_error(), path));
    sp_video_close(v);
    return 0;
  }
  assert_true(n <= original_frames);
  sp_video_geom g = sp_video_geom_native();
  int h, w;
  assert_int_equal(sp_video_out_size(v, &g, &h, &w), 0);
  uint8_t *out = malloc((size_t)h * w * 3);
  int ok = 0, compared = 0;
  for (int64_t i = 0; i < n; i++) {
    if (sp_video_get_frames(v, &i, 1, &g, out) != 0) {
      assert_non_null(strstr(sp_last_error(), path));
      continue;
    }
    ok++;
    /* Frames before the damage must be the intact frames. */
    if (intact && i < 8 && (size_t)h * w * 3 == intact->fb) {
      assert_memory_equal(out, intact->px + (size_t)i * intact->fb, intact->fb);
      compared++;
    }
  }
  /* Past the end is an error, not a hang or a stale frame. */
  assert_int_equal(sp_video_get_frames(v, &n, 1, &g, out), -1);
  assert_non_null(strstr(sp_last_error(), "out of range"));
  free(out);
  sp_video_close(v);
  print_message("%s: %lld of %lld frames listed, %d fetched, %.2f s\n", path, (long long)n, (long long)original_frames,
                ok, sp_now() - t0);
  assert_true(sp_now() - t0 < 20);
  return compared;
}

static void test_missing_empty_garbage(void **state) {
  (void)state;
  char p[600];
  snprintf(p, sizeof p, "%s/missing.mp4", tmp);
  expect_open_error(p, "missing");
  snprintf(p, sizeof p, "%s/empty.mp4", tmp);
  write_all(p, NULL, 0);
  expect_open_error(p, "empty");
  snprintf(p, sizeof p, "%s/garbage.mp4", tmp);
  sp_test_rng r = {42};
  size_t n = 200000;
  uint8_t *g = malloc(n);
  for (size_t i = 0; i < n; i++) g[i] = (uint8_t)sp_test_rng_next(&r);
  write_all(p, g, n);
  free(g);
  expect_open_error(p, "random bytes");
  snprintf(p, sizeof p, "%s/notes.txt", tmp);
  write_all(p, (const uint8_t *)"path label\nthis is not a video\n", 31);
  expect_open_error(p, "text");
}

static void test_still_image(void **state) {
  (void)state;
  char p[600];
  snprintf(p, sizeof p, "%s/still.png", tmp);
  uint8_t rgb[32 * 24 * 3];
  vt_frame(3, 32, 24, rgb);
  assert_int_equal(sp_write_png(p, rgb, 24, 32, 3), 0);
  expect_open_error(p, "a still image");
  assert_non_null(strstr(sp_last_error(), "still image"));
}

static void truncated_case(const char *src, const char *name, double keep) {
  size_t n;
  uint8_t *b = read_all(src, &n);
  char p[600];
  snprintf(p, sizeof p, "%s/%s", tmp, name);
  write_all(p, b, (size_t)(n * keep));
  free(b);
  vt_ref intact;
  sp_video_geom g = sp_video_geom_native();
  vt_reference(src, &g, &intact);
  expect_bounded(p, 60, &intact);
  free(intact.px);
}

static void test_truncated_mp4(void **state) {
  (void)state;
  /* The MP4 index (moov) is at the end: a cut file cannot even be opened. */
  truncated_case(good_mp4, "cut.mp4", 0.6);
}

static void test_truncated_avi_overreports(void **state) {
  (void)state;
  /* AVI's header still claims 60 frames; the reader counts what is there. */
  truncated_case(good_avi, "cut.avi", 0.5);
  char p[600];
  snprintf(p, sizeof p, "%s/cut.avi", tmp);
  sp_video *v = sp_video_open(p);
  assert_non_null(v);
  sp_video_info in;
  assert_int_equal(sp_video_get_info(v, &in), 0);
  assert_int_equal(in.header_frames, 60);
  assert_true(in.frames < 60 && in.frames > 10);
  sp_video_close(v);
}

static void test_corrupt_middle(void **state) {
  (void)state;
  /* Garbage over the middle third of the packet data of both files. The
   * frames before the damage must come back as the intact file's (issue 19,
   * T3: this test compared no frame at all). */
  const char *src[2] = {good_mp4, good_avi};
  for (int k = 0; k < 2; k++) {
    size_t n;
    uint8_t *b = read_all(src[k], &n);
    sp_test_rng r = {7 + (uint64_t)k};
    for (size_t i = n / 3; i < n / 2; i++) b[i] = (uint8_t)sp_test_rng_next(&r);
    char p[600];
    snprintf(p, sizeof p, "%s/corrupt%d.%s", tmp, k, k ? "avi" : "mp4");
    write_all(p, b, n);
    free(b);
    vt_ref intact;
    sp_video_geom g = sp_video_geom_native();
    vt_reference(src[k], &g, &intact);
    int compared = expect_bounded(p, 60, &intact);
    free(intact.px);
    /* The damage starts past the first GOP: its frames were compared. */
    if (compared < 8) fail_msg("%s: only %d undamaged frames came back to compare", p, compared);
  }
}

static void test_bad_requests(void **state) {
  (void)state;
  sp_video *v = sp_video_open(good_mp4);
  assert_non_null(v);
  sp_video_geom g = sp_video_geom_native();
  uint8_t px[96 * 64 * 3];
  int64_t neg = -1, big = 60;
  assert_int_equal(sp_video_get_frames(v, &neg, 1, &g, px), -1);
  assert_int_equal(sp_video_get_frames(v, &big, 1, &g, px), -1);
  assert_non_null(strstr(sp_last_error(), "good.mp4"));
  int64_t last = 59;
  assert_int_equal(sp_video_get_frames(v, &last, 1, &g, px), 0);
  sp_video_close(v);
  /* A frame folder without frames. */
  char d[600];
  snprintf(d, sizeof d, "%s/emptydir", tmp);
  mkdir(d, 0777);
  expect_open_error(d, "an empty folder");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_missing_empty_garbage), cmocka_unit_test(test_still_image),
      cmocka_unit_test(test_truncated_mp4),         cmocka_unit_test(test_truncated_avi_overreports),
      cmocka_unit_test(test_corrupt_middle),        cmocka_unit_test(test_bad_requests),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
