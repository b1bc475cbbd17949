/* Issue 19 in io/: readers of files keep to the allocation policy. A GIF
 * header of 13 bytes may claim a 65535 x 65535 screen (12.9 GB of canvas),
 * and a few bytes per 1x1 frame add a whole screen each to the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"
#include "spry/morph.h"
#include "testkit.h"

static char dir[256];

static const char *write_gif(const char *name, const uint8_t *b, size_t n) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
  return path;
}

static void gif_sizes_follow_the_allocation_policy(void **state) {
  (void)state;
  setenv("SPRY_MAX_MEMORY_MB", "64", 1);
  /* GIF89a, 65535 x 65535, no palette, then the trailer. */
  static const uint8_t huge[] = {'G', 'I', 'F', '8', '9', 'a', 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0x3B};
  int w, h;
  uint8_t *rgb = NULL;
  assert_int_equal(sp_gif_read(write_gif("huge.gif", huge, sizeof huge), &w, &h, &rgb), -1);
  sp_assert_error_has("huge.gif: a 65535x65535 GIF screen needs");
  assert_null(rgb);
  /* 4000 x 4000 (48 MB of canvas, allowed) and 1x1 frames of 15 bytes each,
   * every one a whole screen in the output: the second would make 96 MB. */
  uint8_t bomb[13 + 40 * 15 + 1] = {'G', 'I', 'F', '8', '9', 'a', 0xA0, 0x0F, 0xA0, 0x0F, 0, 0, 0};
  size_t n = 13;
  /* LZW, minimum code size 2, 3-bit codes: clear (4), pixel 0, end (5). */
  static const uint8_t frame[15] = {0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0};
  for (int f = 0; f < 40; f++) memcpy(bomb + n, frame, sizeof frame), n += sizeof frame;
  bomb[n++] = 0x3B;
  assert_int_equal(sp_gif_read(write_gif("bomb.gif", bomb, n), &w, &h, &rgb), -1);
  sp_assert_error_has("bomb.gif: 2 frames of a 4000x4000 GIF needs");
  assert_null(rgb);
  /* The same frames on a small screen read back. */
  bomb[6] = bomb[8] = 8, bomb[7] = bomb[9] = 0;
  assert_int_equal(sp_gif_read(write_gif("small.gif", bomb, n), &w, &h, &rgb), 40);
  assert_true(w == 8 && h == 8);
  free(rgb);
  unsetenv("SPRY_MAX_MEMORY_MB");
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gif_sizes_follow_the_allocation_policy),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  return rc;
}
