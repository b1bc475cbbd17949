/* The animated GIF writer (src/io/morph_gif.c): header, loop extension and
 * frame count; exact round trips through our reader for grey frames and for
 * colour frames with at most 256 colours (LZW table resets, 12-bit codes and
 * the KwKwK case included); a small error for many colours; FFmpeg decodes the
 * same pixels; bad files are errors, not crashes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/morph.h"
#include "spry/video.h"
#include "testkit.h"

static char dir[256];

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

/* Writes frames and reads them back as RGB; returns the frame count. */
static int round_trip(const char *name, uint8_t **frames, int n, int w, int h, int c, uint8_t **rgb) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_int_equal(sp_gif_write(path, (const uint8_t *const *)frames, n, w, h, c, 7), 0);
  int rw, rh, got = sp_gif_read(path, &rw, &rh, rgb);
  assert_int_equal(got, n);
  assert_true(rw == w && rh == h);
  return got;
}

static void grey_frames_round_trip_exactly(void **state) {
  (void)state;
  /* Noise fills the 4096-entry code table many times over (clear codes,
   * 12-bit codes); a flat frame makes long runs (the KwKwK case). */
  const int w = 203, h = 151;
  sp_test_rng r = {1};
  uint8_t *f[3];
  for (int i = 0; i < 3; i++) {
    f[i] = malloc((size_t)w * h);
    for (int j = 0; j < w * h; j++) f[i][j] = i == 1 ? 77 : (uint8_t)(sp_test_rng_next(&r) >> 56);
  }
  for (int j = 0; j < w * h; j += 5) f[2][j] = 0; /* some structure */
  uint8_t *rgb;
  round_trip("grey.gif", f, 3, w, h, 1, &rgb);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < w * h; j++)
      for (int ch = 0; ch < 3; ch++) assert_int_equal(rgb[((size_t)i * w * h + j) * 3 + ch], f[i][j]);
  free(rgb);
  /* The file: GIF89a, 256-entry global table, loops forever. */
  char path[512];
  size_t n;
  snprintf(path, sizeof path, "%s/grey.gif", dir);
  uint8_t *file = slurp(path, &n);
  assert_memory_equal(file, "GIF89a", 6);
  assert_int_equal(file[10], 0xF7);
  assert_memory_equal(file + 13 + 768 + 3, "NETSCAPE2.0", 11);
  assert_int_equal(file[n - 1], 0x3B);
  free(file);
  for (int i = 0; i < 3; i++) free(f[i]);
}

static void colour_frames(void **state) {
  (void)state;
  const int w = 64, h = 40;
  sp_test_rng r = {2};
  /* 200 distinct colours: the palette holds them all, so the round trip is exact. */
  uint8_t pal[200][3];
  for (int i = 0; i < 200; i++)
    for (int ch = 0; ch < 3; ch++) pal[i][ch] = (uint8_t)(sp_test_rng_next(&r) >> 56);
  uint8_t *f[4];
  for (int i = 0; i < 4; i++) {
    f[i] = malloc((size_t)w * h * 3);
    for (int j = 0; j < w * h; j++) memcpy(f[i] + 3 * j, pal[(j / 7 + i * 13 + (j % w) / 9) % 200], 3);
  }
  uint8_t *rgb;
  round_trip("few.gif", f, 4, w, h, 3, &rgb);
  for (int i = 0; i < 4; i++) assert_memory_equal(rgb + (size_t)i * w * h * 3, f[i], (size_t)w * h * 3);
  free(rgb);
  /* A gradient filling a 3-D block of colour space (10240 colours): 256
   * boxes of ~40 levels a side give ~6-10 levels mean error at best. */
  for (int i = 0; i < 4; i++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        uint8_t *p = f[i] + 3 * ((size_t)y * w + x);
        p[0] = (uint8_t)(x * 4), p[1] = (uint8_t)(y * 6), p[2] = (uint8_t)(60 * i + x + y);
      }
  round_trip("many.gif", f, 4, w, h, 3, &rgb);
  double err = 0;
  int worst = 0;
  for (size_t j = 0; j < (size_t)4 * w * h * 3; j++) {
    int d = abs(rgb[j] - f[j / ((size_t)w * h * 3)][j % ((size_t)w * h * 3)]);
    err += d, worst = d > worst ? d : worst;
  }
  err /= 4.0 * w * h * 3;
  print_message("# many colours: mean abs error %.2f, worst %d\n", err, worst);
  assert_true(err < 8 && worst < 40);
  free(rgb);

  /* FFmpeg reads the same frames (the few-colour ones, restored below). */
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < w * h; j++) memcpy(f[i] + 3 * j, pal[(j / 7 + i * 13 + (j % w) / 9) % 200], 3);
  char path[512];
  snprintf(path, sizeof path, "%s/few.gif", dir);
  sp_video *v = sp_video_open(path);
  assert_non_null(v);
  assert_int_equal(sp_video_frame_count(v), 4);
  int64_t idx[4] = {0, 1, 2, 3};
  uint8_t *dec = malloc((size_t)4 * w * h * 3);
  sp_video_geom g = sp_video_geom_native();
  assert_int_equal(sp_video_get_frames(v, idx, 4, &g, dec), 0);
  for (int i = 0; i < 4; i++) assert_memory_equal(dec + (size_t)i * w * h * 3, f[i], (size_t)w * h * 3);
  sp_video_close(v);
  free(dec);
  for (int i = 0; i < 4; i++) free(f[i]);
}

static void bad_input(void **state) {
  (void)state;
  char path[512], bad[600];
  uint8_t px[3] = {1, 2, 3}, *one = px, *rgb;
  int w, h;
  /* A 1 x 1 frame works. */
  snprintf(path, sizeof path, "%s/one.gif", dir);
  assert_int_equal(sp_gif_write(path, (const uint8_t *const *)&one, 1, 1, 1, 3, 0), 0);
  assert_int_equal(sp_gif_read(path, &w, &h, &rgb), 1);
  assert_memory_equal(rgb, px, 3);
  free(rgb);
  /* Bad arguments. */
  assert_int_equal(sp_gif_write(path, (const uint8_t *const *)&one, 1, 1, 1, 2, 0), -1);
  assert_int_equal(sp_gif_write(path, (const uint8_t *const *)&one, 0, 1, 1, 3, 0), -1);
  /* Truncated at every length, and not a GIF: errors. */
  size_t n;
  snprintf(path, sizeof path, "%s/grey.gif", dir);
  uint8_t *file = slurp(path, &n);
  assert_non_null(file);
  snprintf(bad, sizeof bad, "%s/cut.gif", dir);
  for (size_t cut = 0; cut < n; cut += cut < 2000 ? 97 : 4099) {
    FILE *f = fopen(bad, "wb");
    fwrite(file, 1, cut, f);
    fclose(f);
    assert_int_equal(sp_gif_read(bad, &w, &h, &rgb), -1);
    assert_null(rgb);
  }
  memcpy(file, "PNG", 3);
  FILE *f = fopen(bad, "wb");
  fwrite(file, 1, n, f);
  fclose(f);
  assert_int_equal(sp_gif_read(bad, &w, &h, &rgb), -1);
  assert_non_null(strstr(sp_last_error(), "not a GIF"));
  free(file);
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(grey_frames_round_trip_exactly),
      cmocka_unit_test(colour_frames),
      cmocka_unit_test(bad_input),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  return rc;
}
