/* Issue 19's findings in the video layer, each as it was found: frame
 * folders with a JPEG cut before its frame header (C2), an n_frames file
 * saying 10^12 (C3) or a half-written frame (P5); `prepare frames` writing
 * outside --out or merging two clips of one base name (P4); a label typo
 * sizing a 100000-class model (P5). */
#include <sys/stat.h>
#include <unistd.h>

#include "spry/data.h"
#include "video_testutil.h"

static char dir[256];

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

/* A folder of n good frames (48x32), made by the library's own writer. */
static void frame_folder(const char *path, int n) {
  mkdir(path, 0755);
  uint8_t rgb[48 * 32 * 3];
  for (int t = 0; t < n; t++) {
    char p[600];
    snprintf(p, sizeof p, "%s/img_%05d.jpg", path, t + 1);
    vt_frame(t, 48, 32, rgb);
    assert_int_equal(sp_write_jpeg(p, rgb, 32, 48, 3, 90), 0);
  }
}

/* C2: `printf '\xff\xd8\xff\xd9' > img_00001.jpg` read uninitialised sizes. */
static void cut_frame_is_an_error(void **state) {
  (void)state;
  char clip[512], p[600];
  snprintf(clip, sizeof clip, "%s/cut", dir);
  mkdir(clip, 0755);
  snprintf(p, sizeof p, "%s/img_00001.jpg", clip);
  write_bytes(p, "\xff\xd8\xff\xd9", 4);
  assert_null(sp_video_open(clip));
  sp_assert_error_has("img_00001.jpg is not a usable JPEG (no image in it");
}

/* C3: an n_frames file saying 10^12 sized the keyframe table: an abort. */
static void lying_frame_count_is_an_error(void **state) {
  (void)state;
  char clip[512], p[600];
  snprintf(clip, sizeof clip, "%s/lying", dir);
  frame_folder(clip, 3);
  snprintf(p, sizeof p, "%s/n_frames", clip);
  write_bytes(p, "1000000000000\n", 14);
  sp_video *v = sp_video_open(clip);
  assert_null(v);
  sp_assert_error_has("n_frames: says 1000000000000 frames, the folder holds 3");
  /* The right count is believed. */
  write_bytes(p, "3\n", 2);
  assert_non_null(v = sp_video_open(clip));
  assert_int_equal(sp_video_frame_count(v), 3);
  sp_video_close(v);
}

/* P5: a half-written frame was decoded with invented pixels. */
static void half_written_frame_is_an_error(void **state) {
  (void)state;
  char clip[512], p[600];
  snprintf(clip, sizeof clip, "%s/half", dir);
  frame_folder(clip, 3);
  snprintf(p, sizeof p, "%s/img_00002.jpg", clip);
  uint8_t *buf;
  size_t len;
  assert_int_equal(sp_read_file(p, &buf, &len), 0);
  write_bytes(p, buf, len * 2 / 3);
  free(buf);
  sp_video *v = sp_video_open(clip);
  assert_non_null(v);
  sp_video_geom g = sp_video_geom_native();
  uint8_t out[48 * 32 * 3];
  int64_t good = 2, bad = 1;
  assert_int_equal(sp_video_get_frames(v, &good, 1, &g, out), 0);
  assert_int_equal(sp_video_get_frames(v, &bad, 1, &g, out), -1);
  sp_assert_error_has("img_00002.jpg");
  /* The handle is still good for the next frame. */
  assert_int_equal(sp_video_get_frames(v, &good, 1, &g, out), 0);
  sp_video_close(v);
}

/* P4: list paths with ".." put frames outside --out; two clips of one base
 * name shared a frame folder and mixed their labels. */
static void prepare_stays_inside_out(void **state) {
  (void)state;
  char lists[512], other[512], p[700], list[600], out[600];
  snprintf(lists, sizeof lists, "%s/lists", dir);
  snprintf(other, sizeof other, "%s/elsewhere", dir);
  mkdir(lists, 0755);
  mkdir(other, 0755);
  sp_video_writer_config c = sp_video_writer_config_default(48, 32);
  snprintf(p, sizeof p, "%s/clip.mp4", other);
  vt_make_clip(p, 4, &c);
  snprintf(list, sizeof list, "%s/train.list", lists);
  FILE *f = fopen(list, "w");
  fprintf(f, "../elsewhere/clip.mp4 0\n");
  fclose(f);
  snprintf(out, sizeof out, "%s/frames", lists);
  sp_prepare_config pc = {0, 90, 1};
  assert_int_equal(sp_prepare_frames(list, out, &pc), 1);
  snprintf(p, sizeof p, "%s/clip/img_00001.jpg", out);
  assert_int_equal(access(p, F_OK), 0);
  /* Before the fix: DIR/elsewhere/clip/, beside the video, outside --out. */
  snprintf(p, sizeof p, "%s/clip", other);
  assert_int_equal(access(p, F_OK), -1);

  /* Two clips named clip.mp4 in two folders outside the list's folder. */
  char more[600];
  snprintf(more, sizeof more, "%s/more", dir);
  mkdir(more, 0755);
  snprintf(p, sizeof p, "%s/clip.mp4", more);
  vt_make_clip(p, 4, &c);
  f = fopen(list, "w");
  fprintf(f, "../elsewhere/clip.mp4 0\n../more/clip.mp4 1\n");
  fclose(f);
  snprintf(out, sizeof out, "%s/frames2", lists);
  assert_int_equal(sp_prepare_frames(list, out, &pc), -1);
  sp_assert_error_has("train.list:2:");
  sp_assert_error_has("share the frame folder 'clip' with line 1");
  assert_int_equal(access(out, F_OK), -1); /* refused before anything was made */
}

/* P5: a label typo 99999 in a 4-class list built a 100000-class model. */
static void label_typo_is_refused(void **state) {
  (void)state;
  char list[600];
  snprintf(list, sizeof list, "%s/typo.list", dir);
  FILE *f = fopen(list, "w");
  fprintf(f, "a.mp4 0\nb.mp4 1\nc.mp4 2\nd.mp4 3\ne.mp4 99999\nf.mp4 2\n");
  fclose(f);
  sp_video_list l;
  assert_int_equal(sp_video_list_read(list, &l), 0);
  assert_int_equal(sp_video_list_check_dense(&l, list, NULL, NULL), -1);
  sp_assert_error_has("typo.list:5: label 99999 is far above the others");
  /* Dense labels, and a validation list using some of them, are fine. */
  l.label[4] = 1;
  assert_int_equal(sp_video_list_check_dense(&l, list, &l, list), 0);
  sp_video_list_free(&l);
}

/* P8: a NUL byte cut a path short. */
static void list_with_nul_is_refused(void **state) {
  (void)state;
  char list[600];
  snprintf(list, sizeof list, "%s/nul.list", dir);
  write_bytes(list, "a.mp4 0\nb\0.mp4 1\n", 17);
  sp_video_list l;
  assert_int_equal(sp_video_list_read(list, &l), -1);
  sp_assert_error_has("nul.list:2: a NUL byte");
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cut_frame_is_an_error),         cmocka_unit_test(lying_frame_count_is_an_error),
      cmocka_unit_test(half_written_frame_is_an_error), cmocka_unit_test(prepare_stays_inside_out),
      cmocka_unit_test(label_typo_is_refused),         cmocka_unit_test(list_with_nul_is_refused),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  return rc;
}
