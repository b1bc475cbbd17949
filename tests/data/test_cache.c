/* The crop cache: points land on the same pixels after decode + crop +
 * resize (also through the reduced DCT decode), the on-disk file round-trips
 * bit for bit and is rebuilt when a source file or the settings change. */
#include <math.h>
#include <sys/stat.h>

#include "data_testutil.h"

/* Writes n images with a dot at point 0 and a .dat with 3 points each. */
static void write_imm_like(const char *dir, int n, int w, int h) {
  char path[1024], text[512];
  for (int i = 0; i < n; i++) {
    float x = (float)(w / 3 + 7 * i), y = (float)(h / 2 + 5 * i);
    uint8_t *im = tu_face_image(w, h, x, y, w > 400 ? 3 : 1);
    /* A dark flat background so the dot is the brightest thing in the crop. */
    for (int j = 0; j < w * h * 3; j++) im[j] = im[j] >= 250 ? 250 : 40;
    snprintf(path, sizeof path, "%s/%02d-1m.jpg", dir, i + 1);
    tu_write_jpeg(path, im, w, h, 98);
    free(im);
    snprintf(path, sizeof path, "%s/%02d-1m.dat", dir, i + 1);
    snprintf(text, sizeof text, "1 %g %g\n2 %g %g\n3 %g %g\n", x, y, x + w / 6.0, y - h / 8.0, x + w / 10.0,
             y + h / 7.0);
    tu_write_text(path, text);
  }
}

static void check_dots(const sp_cache *c) {
  for (int i = 0; i < c->n; i++) {
    /* The brightest spot of the crop is the dot drawn at point 0. */
    const uint8_t *px = c->pixels + (size_t)i * c->size * c->size * 3;
    int best = -1, bi = 0;
    for (int j = 0; j < c->size * c->size; j++) {
      int v = px[3 * j] + px[3 * j + 1] + px[3 * j + 2];
      if (v > best) { best = v; bi = j; }
    }
    /* Centroid of the plateau (over half the peak above the background). */
    double sw = 0, sx = 0, sy = 0;
    int bx = bi % c->size, by = bi / c->size;
    for (int yy = by - 8; yy <= by + 8; yy++)
      for (int xx = bx - 8; xx <= bx + 8; xx++) {
        if (xx < 0 || yy < 0 || xx >= c->size || yy >= c->size) continue;
        const uint8_t *q = px + ((size_t)yy * c->size + xx) * 3;
        double v = q[0] + q[1] + q[2] - 120.0;
        if (v * 2 < best - 120) continue;
        sw += v; sx += v * xx; sy += v * yy;
      }
    float x = c->points[(size_t)i * c->k * 2], y = c->points[(size_t)i * c->k * 2 + 1];
    if (hypot(sx / sw - x, sy / sw - y) > 0.75)
      fail_msg("sample %d: point 0 at (%.2f, %.2f), dot at (%.2f, %.2f)", i, x, y, sx / sw, sy / sw);
  }
}

static void points_land_on_pixels(void **state) {
  (void)state;
  char dir[512];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  /* 800x600 with a small face: the crop is >= 4x the working size, so the
   * JPEG is decoded at reduced scale; the dot must still be where the point is. */
  write_imm_like(dir, 4, 800, 600);
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 4);
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = 48;
  cc.threads = 2;
  sp_cache *c = sp_cache_build(&ds, &cc);
  assert_non_null(c);
  assert_int_equal(c->n, 4);
  check_dots(c);
  sp_cache_free(c);
  cc.size = 160; /* full-scale decode path */
  c = sp_cache_build(&ds, &cc);
  assert_non_null(c);
  check_dots(c);
  sp_cache_free(c);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void cache_file_round_trip_and_invalidation(void **state) {
  (void)state;
  char dir[512], cache_path[1024], img[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  write_imm_like(dir, 5, 160, 120);
  snprintf(cache_path, sizeof cache_path, "%s/crops.cache", dir);
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = 32;
  int rebuilt = -1;
  sp_cache *ram = sp_cache_build(&ds, &cc);
  sp_cache *c = sp_cache_open(cache_path, &ds, &cc, &rebuilt);
  assert_non_null(c);
  assert_int_equal(rebuilt, 1);
  sp_cache_free(c);
  c = sp_cache_open(cache_path, &ds, &cc, &rebuilt);
  assert_non_null(c);
  assert_int_equal(rebuilt, 0);
  assert_true(c->from_file);
  assert_int_equal(c->n, ram->n);
  assert_memory_equal(c->pixels, ram->pixels, (size_t)ram->n * 32 * 32 * 3);
  assert_memory_equal(c->points, ram->points, sizeof(float) * 2 * ram->n * ram->k);
  assert_memory_equal(c->source, ram->source, sizeof(int32_t) * ram->n);
  sp_cache_free(c);
  /* Changing a source image (new content and size) rebuilds. */
  uint8_t *im = tu_face_image(160, 120, 10, 10, 4);
  snprintf(img, sizeof img, "%s/03-1m.jpg", dir);
  tu_write_jpeg(img, im, 160, 120, 60);
  free(im);
  c = sp_cache_open(cache_path, &ds, &cc, &rebuilt);
  assert_non_null(c);
  assert_int_equal(rebuilt, 1);
  assert_true(memcmp(c->pixels + 2 * 32 * 32 * 3, ram->pixels + 2 * 32 * 32 * 3, 32 * 32 * 3) != 0);
  sp_cache_free(c);
  c = sp_cache_open(cache_path, &ds, &cc, &rebuilt);
  assert_int_equal(rebuilt, 0);
  sp_cache_free(c);
  /* Changing the crop settings rebuilds; so does a corrupt file. */
  cc.margin = 0.4f;
  c = sp_cache_open(cache_path, &ds, &cc, &rebuilt);
  assert_int_equal(rebuilt, 1);
  sp_cache_free(c);
  FILE *f = fopen(cache_path, "r+b");
  assert_non_null(f);
  assert_int_equal(fputs("JUNK", f) >= 0, 1);
  fclose(f);
  c = sp_cache_open(cache_path, &ds, &cc, &rebuilt);
  assert_non_null(c);
  assert_int_equal(rebuilt, 1);
  sp_cache_free(c);
  sp_cache_free(ram);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void real_imm_cache(void **state) {
  (void)state;
  char dir[1024];
  if (!sp_test_data_path("imm_face_db", dir, sizeof dir)) skip();
  sp_dataset ds, tr;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(sp_dataset_split_identity(&ds, SP_SPLIT_VAL, 0.2, &tr), 0);
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = sp_test_sanitized() ? 48 : 96;
  sp_cache *c = sp_cache_build(&tr, &cc);
  assert_non_null(c);
  assert_int_equal(c->n, 48);
  /* Points sit inside the crop with the margin around them. */
  for (int i = 0; i < c->n * c->k; i++) {
    assert_true(c->points[2 * i] > 0 && c->points[2 * i] < cc.size - 1);
    assert_true(c->points[2 * i + 1] > 0 && c->points[2 * i + 1] < cc.size - 1);
  }
  sp_cache_free(c);
  sp_dataset_free(&tr);
  sp_dataset_free(&ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(points_land_on_pixels),
      cmocka_unit_test(cache_file_round_trip_and_invalidation),
      cmocka_unit_test(real_imm_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
