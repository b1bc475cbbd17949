/* Broken inputs are skipped with a reason, counted, and never shift one
 * sample's points onto another image: truncated and corrupt JPEGs, missing
 * images, wrong point counts, NaN and absurd coordinates. */
#include <math.h>

#include "data_testutil.h"

static void write_sample(const char *dir, int id, const char *dat_text, int image_kind) {
  char path[1024];
  int w = 120, h = 90;
  float x = (float)(30 + 6 * id), y = (float)(40 + 2 * id);
  uint8_t *im = tu_face_image(w, h, x, y, 1);
  for (int j = 0; j < w * h * 3; j++) im[j] = im[j] >= 250 ? 250 : 40;
  snprintf(path, sizeof path, "%s/%02d-1m.jpg", dir, id);
  if (image_kind == 1) tu_write_jpeg(path, im, w, h, 95);
  if (image_kind == 2) tu_write_png(path, im, w, h); /* PNG bytes, .jpg name: fine */
  if (image_kind == 3) {                             /* truncated JPEG */
    tu_write_jpeg(path, im, w, h, 95);
    uint8_t *buf;
    size_t len;
    assert_int_equal(sp_read_file(path, &buf, &len), 0);
    tu_write_bytes(path, buf, len / 2);
    free(buf);
  }
  if (image_kind == 4) tu_write_text(path, "\xFF\xD8\xFF garbage that only starts like a JPEG");
  free(im);
  char text[256];
  if (!dat_text) {
    snprintf(text, sizeof text, "1 %g %g\n2 %g %g\n3 %g %g\n", x, y, x + 20, y - 10, x + 5, y + 15);
    dat_text = text;
  }
  snprintf(path, sizeof path, "%s/%02d-1m.dat", dir, id);
  tu_write_text(path, dat_text);
}

static void broken_samples_are_skipped(void **state) {
  (void)state;
  char dir[512];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  write_sample(dir, 1, NULL, 1);
  write_sample(dir, 2, NULL, 3);                          /* truncated JPEG */
  write_sample(dir, 3, "1 10 10\n2 20 20\n", 1);          /* 2 points, not 3 */
  write_sample(dir, 4, "1 10 10\n2 nan 20\n3 5 5\n", 1);  /* NaN */
  write_sample(dir, 5, NULL, 0);                          /* image missing */
  write_sample(dir, 6, NULL, 4);                          /* corrupt JPEG */
  write_sample(dir, 7, NULL, 2);                          /* PNG in a .jpg */
  write_sample(dir, 8, "1 10 10\n2 1e9 20\n3 5 5\n", 1);  /* absurd */
  write_sample(dir, 9, "1 10 10\n3 20 20\n4 5 5\n", 1);   /* broken numbering */
  write_sample(dir, 10, NULL, 1);
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 6);
  assert_int_equal(ds.skipped, 4);
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = 64;
  cc.threads = 2;
  sp_cache *c = sp_cache_build(&ds, &cc);
  assert_non_null(c);
  assert_int_equal(c->n, 3);
  assert_int_equal(c->skipped, 3);
  const int want[3] = {1, 7, 10};
  for (int i = 0; i < c->n; i++) {
    const char *img = ds.s[c->source[i]].image;
    char name[32];
    snprintf(name, sizeof name, "%02d-1m.jpg", want[i]);
    assert_non_null(strstr(img, name));
    /* This crop's dot is where this crop's own point 0 says. */
    const uint8_t *px = c->pixels + (size_t)i * 64 * 64 * 3;
    int best = -1, bi = 0;
    for (int j = 0; j < 64 * 64; j++) {
      int v = px[3 * j] + px[3 * j + 1] + px[3 * j + 2];
      if (v > best) { best = v; bi = j; }
    }
    float x = c->points[i * 6], y = c->points[i * 6 + 1];
    assert_true(hypot(bi % 64 - x, bi / 64 - y) < 2.5);
  }
  sp_cache_free(c);
  sp_dataset_free(&ds);
  /* Nothing usable at all: an error, not a crash. */
  sp_test_rmtree(dir);
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  write_sample(dir, 1, NULL, 3);
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_null(sp_cache_build(&ds, &cc));
  assert_non_null(strstr(sp_last_error(), "no image"));
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
  assert_int_equal(sp_dataset_open_dir("/nonexistent-spry-dir", &ds), -1);
  sp_dataset_free(&ds);
}

static void broken_copies_of_real_files(void **state) {
  (void)state;
  char src[1024], dir[512], dst[1024];
  if (!sp_test_data_path("imm_face_db/01-1m.jpg", src, sizeof src)) skip();
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  const char *names[3] = {"01-1m", "02-1m", "03-1m"};
  for (int i = 0; i < 3; i++) {
    for (int e = 0; e < 2; e++) {
      char rel[64];
      snprintf(rel, sizeof rel, "imm_face_db/%s.%s", names[i], e ? "dat" : "jpg");
      assert_non_null(sp_test_data_path(rel, src, sizeof src));
      uint8_t *buf;
      size_t len;
      assert_int_equal(sp_read_file(src, &buf, &len), 0);
      snprintf(dst, sizeof dst, "%s/%s.%s", dir, names[i], e ? "dat" : "jpg");
      /* 02: the JPEG cut at 60%; 03: the annotation loses its last line. */
      if (i == 1 && !e) len = len * 3 / 5;
      if (i == 2 && e) { while (len && buf[len - 1] == '\n') len--; while (len && buf[len - 1] != '\n') len--; }
      tu_write_bytes(dst, buf, len);
      free(buf);
    }
  }
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 2);
  assert_int_equal(ds.skipped, 1);
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = 64;
  sp_cache *c = sp_cache_build(&ds, &cc);
  assert_non_null(c);
  assert_int_equal(c->n, 1);
  assert_non_null(strstr(ds.s[c->source[0]].image, "01-1m.jpg"));
  sp_cache_free(c);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

/* A folder given where an image belongs: an error naming it, not an
 * allocation of the "size" a folder reports; and a file where a folder belongs. */
static void a_folder_is_not_an_image(void **state) {
  (void)state;
  char dir[512];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  uint8_t *buf = NULL;
  size_t len = 0;
  assert_int_equal(sp_read_file(dir, &buf, &len), -1);
  assert_null(buf);
  assert_non_null(strstr(sp_last_error(), dir));
  assert_non_null(strstr(sp_last_error(), "not a regular file"));
  sp_image im;
  assert_int_equal(sp_image_load(dir, 3, &im), -1);
  assert_non_null(strstr(sp_last_error(), "not a regular file"));
  /* And the other way round: a file, or nothing, where a dataset folder belongs. */
  char file[700];
  snprintf(file, sizeof file, "%s/notes.txt", dir);
  tu_write_text(file, "not a dataset");
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(file, &ds), -1);
  assert_non_null(strstr(sp_last_error(), "not a folder"));
  snprintf(file, sizeof file, "%s/missing", dir);
  assert_int_equal(sp_dataset_open_dir(file, &ds), -1);
  assert_non_null(strstr(sp_last_error(), "no such folder"));
  /* An empty folder is readable: it holds no annotations. */
  snprintf(file, sizeof file, "%s/empty", dir);
  assert_int_equal(sp_make_dirs(file), 0);
  assert_int_equal(sp_dataset_open_dir(file, &ds), -1);
  assert_non_null(strstr(sp_last_error(), "no annotations found"));
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(broken_samples_are_skipped),
      cmocka_unit_test(broken_copies_of_real_files),
      cmocka_unit_test(a_folder_is_not_an_image),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
