/* `spry predict --overlay NAME` writes the format NAME says (issue 23,
 * figures): .jpg/.jpeg a JPEG, .png a PNG; any other name is a command-line
 * error (exit 2) naming the file, given before the checkpoint is loaded.
 * Runs the real binary on a one-epoch model of synthetic faces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testkit.h"

static char dir[256];
static char out[1 << 16];


static int starts_with(const char *path, const unsigned char *magic, size_t n) {
  unsigned char buf[8] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t got = fread(buf, 1, n, f);
  fclose(f);
  return got == n && memcmp(buf, magic, n) == 0;
}

static void overlay_format_follows_the_name(void **state) {
  (void)state;
  static const unsigned char jpeg[3] = {0xff, 0xd8, 0xff}, png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  char args[2048], path[512], photo[512];
  /* A refused name needs no model: the weights file does not even exist. */
  snprintf(args, sizeof args, "predict --weights %s/none.safetensors --overlay %s/out.bmp %s/x.jpg", dir, dir, dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 2);
  assert_non_null(strstr(out, "out.bmp"));
  assert_non_null(strstr(out, ".jpeg"));
  assert_null(strstr(out, "none.safetensors"));

  snprintf(args, sizeof args, "synth faces --count 40 --quiet --out %s/faces", dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 0);
  snprintf(args, sizeof args,
           "train %s/configs/synth-faces.yaml --set data.path=%s/faces --set out=%s/run --set epochs=1 "
           "--set data.size=32 --set data.crop_size=40 --set batch=8 --set threads=2 --set workers=1",
           getenv("SPRY_SOURCE_DIR"), dir, dir);
  if (sp_test_cli_exit(args, out, sizeof out) != 0) fail_msg("spry %s:\n%s", args, out);
  snprintf(photo, sizeof photo, "%s/faces/images/Synth_Person_0000_00.jpg", dir);
  const char *names[4] = {"ov.jpg", "ov.JPEG", "ov.png", "ov.Png"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    snprintf(args, sizeof args, "predict --weights %s/run/best.safetensors --overlay %s %s", dir, path, photo);
    if (sp_test_cli_exit(args, out, sizeof out) != 0) fail_msg("spry %s:\n%s", args, out);
    if (i < 2) assert_true(starts_with(path, jpeg, 3));
    else assert_true(starts_with(path, png, 8));
  }
}

static int setup(void **state) {
  (void)state;
  return sp_test_tmpdir(dir, sizeof dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(overlay_format_follows_the_name),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
