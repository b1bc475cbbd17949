/* Samplers (TSN, dense), the pre-decoded frame folders and list files, and
 * the synthetic action set whose labels only motion can tell apart. */
#include <math.h>
#include <sys/stat.h>

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

static void test_tsn(void **state) {
  (void)state;
  int64_t a[8], b[8];
  const int64_t lens[] = {1, 5, 8, 9, 100, 301, 100000};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    int64_t n = lens[li];
    for (int idx = 0; idx < 50; idx++) {
      assert_int_equal(sp_sample_tsn(n, 8, 1, 3, 0, idx, a), 0);
      for (int k = 0; k < 8; k++) {
        assert_true(a[k] >= 0 && a[k] < n);
        if (k) assert_true(a[k] >= a[k - 1]); /* segments are in time order */
        if (n >= 8) {
          /* Inside segment k. */
          assert_true(a[k] >= (int64_t)((double)k * n / 8));
          assert_true(a[k] < (int64_t)((double)(k + 1) * n / 8));
        }
      }
      /* Deterministic in (seed, epoch, index). */
      assert_int_equal(sp_sample_tsn(n, 8, 1, 3, 0, idx, b), 0);
      assert_memory_equal(a, b, sizeof a);
    }
  }
  /* Different epochs draw different frames (for a long clip). */
  assert_int_equal(sp_sample_tsn(1000, 8, 1, 3, 0, 5, a), 0);
  assert_int_equal(sp_sample_tsn(1000, 8, 1, 3, 1, 5, b), 0);
  assert_memory_not_equal(a, b, sizeof a);
  /* Every frame of a segment is reachable. */
  int seen[10] = {0};
  for (int e = 0; e < 400; e++) {
    sp_sample_tsn(80, 8, 1, 1, e, 0, a);
    seen[a[3] - 30]++;
  }
  for (int i = 0; i < 10; i++) assert_true(seen[i] > 10);
  /* Testing: the centres, no randomness. */
  assert_int_equal(sp_sample_tsn(80, 8, 0, 1, 0, 0, a), 0);
  for (int k = 0; k < 8; k++) assert_int_equal(a[k], 10 * k + 5);
  assert_int_equal(sp_sample_tsn(80, 8, 0, 99, 7, 3, b), 0);
  assert_memory_equal(a, b, sizeof a);
  /* Fewer frames than segments: frames repeat in order. */
  assert_int_equal(sp_sample_tsn(3, 8, 0, 1, 0, 0, a), 0);
  const int64_t want[8] = {0, 0, 0, 1, 1, 1, 2, 2};
  for (int k = 0; k < 8; k++) assert_int_equal(a[k], want[k]);
  assert_int_equal(sp_sample_tsn(0, 8, 1, 1, 0, 0, a), -1);
  assert_int_equal(sp_sample_tsn(10, 0, 1, 1, 0, 0, a), -1);
}

static void test_dense(void **state) {
  (void)state;
  int64_t a[32], b[32];
  for (int idx = 0; idx < 200; idx++) {
    assert_int_equal(sp_sample_dense(300, 32, 2, 1, 0, 1, 5, 2, idx, a), 0);
    for (int t = 1; t < 32; t++) assert_int_equal(a[t] - a[t - 1], 2);
    assert_true(a[0] >= 0 && a[31] < 300);
    assert_int_equal(sp_sample_dense(300, 32, 2, 1, 0, 1, 5, 2, idx, b), 0);
    assert_memory_equal(a, b, sizeof a);
  }
  /* Start reaches both ends of its range [0, 300 - 63]. */
  int lo = 0, hi = 0;
  for (int e = 0; e < 3000; e++) {
    sp_sample_dense(300, 32, 2, 1, 0, 1, 5, e, 0, a);
    lo |= a[0] < 10;
    hi |= a[0] > 300 - 63 - 10;
    assert_true(a[0] <= 300 - 63);
  }
  assert_true(lo && hi);
  /* Multi-clip testing: evenly spaced from the first to the last start. */
  assert_int_equal(sp_sample_dense(300, 32, 2, 0, 0, 3, 0, 0, 0, a), 0);
  assert_int_equal(a[0], 0);
  assert_int_equal(sp_sample_dense(300, 32, 2, 0, 1, 3, 0, 0, 0, a), 0);
  assert_int_equal(a[0], 119); /* round(237 / 2) */
  assert_int_equal(sp_sample_dense(300, 32, 2, 0, 2, 3, 0, 0, 0, a), 0);
  assert_int_equal(a[0], 237);
  assert_int_equal(a[31], 299);
  assert_int_equal(sp_sample_dense(300, 32, 2, 0, 0, 1, 0, 0, 0, a), 0);
  assert_int_equal(a[0], 118);
  /* A clip shorter than the span: start 0, the tail clamped to the last frame. */
  assert_int_equal(sp_sample_dense(20, 32, 2, 1, 0, 1, 0, 0, 0, a), 0);
  assert_int_equal(a[0], 0);
  assert_int_equal(a[9], 18);
  assert_int_equal(a[10], 19);
  assert_int_equal(a[31], 19);
  assert_int_equal(sp_sample_dense(300, 32, 2, 0, 3, 3, 0, 0, 0, a), -1);
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += abs((int)a[i] - (int)b[i]);
  return s / n;
}

/* Video -> JPEG frame folder -> the same reader API: same count, same
 * frames up to JPEG loss, and geometry works on folders too. */
static void test_frame_folder_round_trip(void **state) {
  (void)state;
  char clip[600], dir[600];
  snprintf(clip, sizeof clip, "%s/rt.mp4", tmp);
  snprintf(dir, sizeof dir, "%s/rt_frames", tmp);
  sp_video_writer_config c = sp_video_writer_config_default(96, 64);
  vt_make_clip(clip, 40, &c);
  assert_int_equal(sp_prepare_video_frames(clip, dir, 0, 95), 40);
  char p[700];
  snprintf(p, sizeof p, "%s/img_00001.jpg", dir);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  snprintf(p, sizeof p, "%s/img_00040.jpg", dir);
  assert_int_equal(stat(p, &sb), 0);
  snprintf(p, sizeof p, "%s/img_00041.jpg", dir);
  assert_int_not_equal(stat(p, &sb), 0);

  sp_video *fv = sp_video_open(dir);
  assert_non_null(fv);
  sp_video_info in;
  assert_int_equal(sp_video_get_info(fv, &in), 0);
  assert_int_equal(in.frames, 40);
  assert_int_equal(in.width, 96);
  assert_int_equal(in.height, 64);
  assert_string_equal(in.container, "frames");
  sp_video_geom g = sp_video_geom_native();
  vt_ref r;
  vt_reference(clip, &g, &r);
  int64_t idx[5] = {39, 0, 17, 17, 5};
  uint8_t *out = malloc(r.fb * 5);
  assert_int_equal(sp_video_get_frames(fv, idx, 5, &g, out), 0);
  for (int j = 0; j < 5; j++) {
    double d = mean_abs_diff(out + j * r.fb, r.px + idx[j] * r.fb, r.fb);
    assert_true(d < 8.0); /* JPEG q95, 4:2:0, on a pattern of sharp coloured edges */
    if (idx[j] != 39) assert_true(mean_abs_diff(out + j * r.fb, r.px + 39 * r.fb, r.fb) > d);
  }
  /* Geometry on a folder: short side 32 + crop 32, CHW; DCT-scaled decode. */
  sp_video_geom sq = sp_video_geom_square(32, SP_VIDEO_CHW);
  int h, w;
  assert_int_equal(sp_video_out_size(fv, &sq, &h, &w), 0);
  assert_int_equal(h, 32);
  assert_int_equal(w, 32);
  assert_int_equal(sp_video_get_frames(fv, idx, 5, &sq, out), 0);
  vt_ref rs;
  vt_reference(clip, &sq, &rs);
  for (int j = 0; j < 5; j++) assert_true(mean_abs_diff(out + j * rs.fb, rs.px + idx[j] * rs.fb, rs.fb) < 6.0);
  int64_t past = 40;
  assert_int_equal(sp_video_get_frames(fv, &past, 1, &g, out), -1);
  free(out);
  free(r.px);
  free(rs.px);
  sp_video_close(fv);
}

static void test_lists_and_prepare(void **state) {
  (void)state;
  char set[600], list[700], frames[700], p[800];
  snprintf(set, sizeof set, "%s/set", tmp);
  assert_int_equal(sp_synth_actions(set, 8, 12, 32, 5), 0);
  /* The synth list reads back with labels and resolved paths. */
  snprintf(list, sizeof list, "%s/list.txt", set);
  sp_video_list l;
  assert_int_equal(sp_video_list_read(list, &l), 0);
  assert_int_equal(l.n, 8);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(l.label[i], i % 4);
    assert_non_null(strstr(l.path[i], sp_synth_class_name(i % 4)));
    assert_int_equal(l.frames[i], -1);
  }
  sp_video_list_free(&l);
  /* prepare list with the synth's label order reproduces its labels. */
  snprintf(p, sizeof p, "%s/labels.txt", set);
  snprintf(list, sizeof list, "%s/built.txt", set);
  assert_int_equal(sp_video_list_build(set, p, list), 8);
  assert_int_equal(sp_video_list_read(list, &l), 0);
  assert_int_equal(l.n, 8);
  for (int i = 0; i < 8; i++) {
    const char *cls = strrchr(l.path[i], '/');
    assert_non_null(cls);
    assert_non_null(strstr(l.path[i], sp_synth_class_name(l.label[i])));
  }
  sp_video_list_free(&l);
  /* Without --labels the set's own labels.txt numbers the classes (one
   * class order: the built list agrees with the synth's list.txt), and a
   * labels.txt beside a list made elsewhere names them in that order. */
  char other[700];
  snprintf(other, sizeof other, "%s/other", tmp);
  mkdir(other, 0777);
  snprintf(list, sizeof list, "%s/other/built.txt", tmp);
  assert_int_equal(sp_video_list_build(set, NULL, list), 8);
  assert_int_equal(sp_video_list_read(list, &l), 0);
  for (int i = 0; i < l.n; i++) assert_non_null(strstr(l.path[i], sp_synth_class_name(l.label[i])));
  sp_video_list_free(&l);
  snprintf(p, sizeof p, "%s/other/labels.txt", tmp);
  char *names = sp_test_slurp(p);
  assert_string_equal(names, "move_right\nmove_left\nrotate_cw\nrotate_ccw\n");
  free(names);
  FILE *f;
  /* Pre-decode the whole list; frames.list is `name n_frames label`. */
  snprintf(frames, sizeof frames, "%s/frames", tmp);
  sp_prepare_config cfg = {0, 90, 2};
  snprintf(list, sizeof list, "%s/list.txt", set);
  assert_int_equal(sp_prepare_frames(list, frames, &cfg), 8);
  snprintf(p, sizeof p, "%s/frames.list", frames);
  assert_int_equal(sp_video_list_read(p, &l), 0);
  assert_int_equal(l.n, 8);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(l.frames[i], 12);
    assert_int_equal(l.label[i], i % 4);
    sp_video *v = sp_video_open(l.path[i]);
    assert_non_null(v);
    assert_int_equal(sp_video_frame_count(v), 12);
    sp_video_close(v);
  }
  sp_video_list_free(&l);
  /* A malformed list is refused with file:line. */
  snprintf(p, sizeof p, "%s/bad.list", tmp);
  f = fopen(p, "w");
  fputs("a.mp4 1\nb.mp4 notanumber\n", f);
  fclose(f);
  assert_int_equal(sp_video_list_read(p, &l), -1);
  assert_non_null(strstr(sp_last_error(), "bad.list:2"));
}

/* Left is right played backwards: identical frame-averaged images (so
 * per-frame models cannot tell them apart), different first frames. */
static void test_synth_motion_only(void **state) {
  (void)state;
  const int F = 16, S = 48;
  size_t fb = (size_t)S * S * 3;
  uint8_t *fr = malloc(fb);
  double *mean[4];
  uint8_t *first[4];
  for (int cls = 0; cls < 4; cls++) {
    mean[cls] = calloc(fb, sizeof(double));
    first[cls] = malloc(fb);
    for (int t = 0; t < F; t++) {
      sp_synth_render(9, 3, cls, t, F, S, fr);
      if (t == 0) memcpy(first[cls], fr, fb);
      for (size_t i = 0; i < fb; i++) mean[cls][i] += fr[i];
    }
  }
  for (int pair = 0; pair < 4; pair += 2) {
    for (size_t i = 0; i < fb; i++) assert_true(fabs(mean[pair][i] - mean[pair + 1][i]) < 1e-9);
    assert_true(memcmp(first[pair], first[pair + 1], fb) != 0);
  }
  /* Translation and rotation do differ on average. */
  double d = 0;
  for (size_t i = 0; i < fb; i++) d += fabs(mean[0][i] - mean[2][i]);
  assert_true(d / fb / F > 0.5);
  /* Deterministic: same (seed, clip) same pixels; other clip differs. */
  uint8_t *again = malloc(fb);
  sp_synth_render(9, 3, 1, 5, F, S, fr);
  sp_synth_render(9, 3, 1, 5, F, S, again);
  assert_memory_equal(fr, again, fb);
  sp_synth_render(9, 4, 1, 5, F, S, again);
  assert_memory_not_equal(fr, again, fb);
  /* The set's clips decode to F frames each. */
  char set[600];
  snprintf(set, sizeof set, "%s/motion", tmp);
  assert_int_equal(sp_synth_actions(set, 4, F, S, 9), 0);
  for (int cls = 0; cls < 4; cls++) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s/clip_%05d.mp4", set, sp_synth_class_name(cls), cls);
    sp_video *v = sp_video_open(p);
    assert_non_null(v);
    assert_int_equal(sp_video_frame_count(v), F);
    sp_video_close(v);
  }
  /* After encoding too: the same scene as right and as left has the same
   * decoded average up to compression noise, far below the frame difference. */
  double *dm[2];
  uint8_t *df[2];
  for (int cls = 0; cls < 2; cls++) {
    char p[700];
    snprintf(p, sizeof p, "%s/scene3_%d.mp4", tmp, cls);
    sp_video_writer_config c = sp_video_writer_config_default(S, S);
    sp_video_writer *w = sp_video_writer_open(p, &c);
    assert_non_null(w);
    for (int t = 0; t < F; t++) {
      sp_synth_render(9, 3, cls, t, F, S, fr);
      assert_int_equal(sp_video_writer_add(w, fr), 0);
    }
    assert_int_equal(sp_video_writer_close(w), 0);
    sp_video_geom g = sp_video_geom_native();
    vt_ref r;
    vt_reference(p, &g, &r);
    assert_int_equal(r.n, F);
    dm[cls] = calloc(fb, sizeof(double));
    df[cls] = malloc(fb);
    memcpy(df[cls], r.px, fb);
    for (int t = 0; t < F; t++)
      for (size_t i = 0; i < fb; i++) dm[cls][i] += r.px[t * fb + i];
    free(r.px);
  }
  double avg = 0;
  for (size_t i = 0; i < fb; i++) avg += fabs(dm[0][i] - dm[1][i]) / F;
  avg /= fb;
  double firsts = mean_abs_diff(df[0], df[1], fb);
  print_message("decoded right vs left: averages differ by %.2f, first frames by %.2f\n", avg, firsts);
  assert_true(avg < 6.0); /* crf 20 on 48 px gratings; B/P order flips with time */
  assert_true(firsts > 4 * avg);
  for (int cls = 0; cls < 2; cls++) {
    free(dm[cls]);
    free(df[cls]);
  }
  for (int cls = 0; cls < 4; cls++) {
    free(mean[cls]);
    free(first[cls]);
  }
  free(fr);
  free(again);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tsn),
      cmocka_unit_test(test_dense),
      cmocka_unit_test(test_frame_folder_round_trip),
      cmocka_unit_test(test_lists_and_prepare),
      cmocka_unit_test(test_synth_motion_only),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
