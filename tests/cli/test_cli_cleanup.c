/* What a failed command leaves on disk: `spry eval --out`, `spry morph` and
 * `spry prepare frames` take back the folders (and files) they made when
 * they fail after making them, and never touch what was there before. Each
 * failure is a real one at the point that matters: a file size limit
 * (RLIMIT_FSIZE, a full disk for one file) on the CED plot or on the morph's
 * GIF, a folder in the way of a frame, and a clip whose frame size changes
 * mid-stream, so its first frames are written before the decode fails. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "spry/video.h"
#include "testkit.h"

static char tmp[512];
static char out[32768];

/* Runs spry ARGS; the exit code (-1: killed by a signal). cap > 0 limits
 * every file spry writes to cap bytes; SIGXFSZ is ignored (and stays so
 * across exec) so that a write past the cap fails with EFBIG, as on a full
 * disk, instead of killing spry. */
static int spry_capped(rlim_t cap, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int spry_capped(rlim_t cap, const char *fmt, ...) {
  char args[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  struct rlimit old;
  void (*old_handler)(int) = SIG_DFL;
  if (cap > 0) {
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    if (old.rlim_max != RLIM_INFINITY && old.rlim_max < cap) skip();
    struct rlimit lim = {cap, old.rlim_max};
    old_handler = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  }
  int st = sp_test_run_cli(args, 1, out, sizeof out);
  if (cap > 0) {
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
  }
  if (st == -1) skip();
  /* A sanitizer report exits 1 too: never mistake it for the expected failure. */
  if (strstr(out, "Sanitizer") || strstr(out, "runtime error:")) fail_msg("spry %s:\n%s", args, out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
#define spry(...) spry_capped(0, __VA_ARGS__)

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static long long file_size(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) fail_msg("%s: missing", path);
  return (long long)sb.st_size;
}

static void expect_said(const char *want) {
  if (!strstr(out, want)) fail_msg("output lacks '%s':\n%s", want, out);
}

/* ---- spry eval --out ---- */

static char weights[700];

/* A small checkpoint trained for one epoch on synthetic faces. */
static void make_checkpoint(void) {
  char faces[600], cfg[600], run[600], text[2048];
  snprintf(faces, sizeof faces, "%s/faces", tmp);
  snprintf(cfg, sizeof cfg, "%s/run.yaml", tmp);
  snprintf(run, sizeof run, "%s/run", tmp);
  snprintf(weights, sizeof weights, "%s/best.safetensors", run);
  if (exists(weights)) return;
  assert_int_equal(spry("synth faces --count 24 --per-identity 4 --size 48,64 --threads 2 --quiet --out %s", faces), 0);
  snprintf(text, sizeof text,
           "model: vgg-face\nout: %s\ndata:\n  path: %s\n  val_fraction: 0.34\n  crop_size: 40\n  size: 32\n"
           "  channels: 1\nepochs: 1\nbatch: 8\nseed: 3\nworkers: 1\nthreads: 2\n",
           run, faces);
  sp_test_write_text(cfg, text);
  if (spry("train %s", cfg) != 0) fail_msg("spry train:\n%s", out);
  assert_true(exists(weights));
}

static void eval_takes_back_the_out_folder_it_made(void **state) {
  (void)state;
  make_checkpoint();
  char base[600], dir[700], ced[800];
  /* Success: the nested --out is made and kept, with the plot in it. */
  snprintf(dir, sizeof dir, "%s/eval-ok/a/b/c", tmp);
  snprintf(ced, sizeof ced, "%s/ced.png", dir);
  if (spry("eval --weights %s --out %s", weights, dir) != 0) fail_msg("spry eval:\n%s", out);
  expect_said("\"mean_px\":");
  assert_true(exists(ced));
  const long long ced_bytes = file_size(ced);
  /* The plot cannot be written (files capped below its size): eval fails
   * after it made a/b/c, names the plot, and a/ is gone. */
  const rlim_t cap = 2048;
  assert_true(ced_bytes > (long long)cap);
  snprintf(base, sizeof base, "%s/eval-plot", tmp);
  mkdir(base, 0777);
  snprintf(dir, sizeof dir, "%s/a/b/c", base);
  snprintf(ced, sizeof ced, "%s/ced.png", dir);
  assert_int_equal(spry_capped(cap, "eval --weights %s --out %s", weights, dir), 1);
  expect_said(ced);
  snprintf(dir, sizeof dir, "%s/a", base);
  assert_false(exists(dir));
  assert_true(exists(base)); /* was there before: kept */
  /* Data that cannot be read: fails after --out was made, naming the data. */
  char empty[700];
  snprintf(empty, sizeof empty, "%s/no-faces", base);
  mkdir(empty, 0777);
  snprintf(dir, sizeof dir, "%s/a/b/c", base);
  assert_int_equal(spry("eval --weights %s --data %s --out %s", weights, empty, dir), 1);
  expect_said(empty);
  snprintf(dir, sizeof dir, "%s/a", base);
  assert_false(exists(dir));
  assert_true(exists(empty));
  /* The last part of --out cannot be made (a name longer than the file
   * system allows): the parents made before it go again. */
  char longname[300];
  memset(longname, 'x', 299);
  longname[299] = 0;
  snprintf(dir, sizeof dir, "%s/a/b/%s", base, longname);
  assert_int_equal(spry("eval --weights %s --out %s", weights, dir), 2);
  expect_said("cannot create folder");
  snprintf(dir, sizeof dir, "%s/a", base);
  assert_false(exists(dir));
}

/* ---- spry morph ---- */

enum { MW = 64, MH = 48, MK = 9 };

/* Noisy images (PNG and GIF cannot shrink them much) and two point sets. */
static void morph_inputs(char *a_img, char *b_img, char *a_pts, char *b_pts, size_t n) {
  snprintf(a_img, n, "%s/morph-in/a.png", tmp);
  snprintf(b_img, n, "%s/morph-in/b.png", tmp);
  snprintf(a_pts, n, "%s/morph-in/a.json", tmp);
  snprintf(b_pts, n, "%s/morph-in/b.json", tmp);
  char d[600];
  snprintf(d, sizeof d, "%s/morph-in", tmp);
  mkdir(d, 0777);
  sp_test_rng r = {11};
  uint8_t *px = malloc((size_t)MW * MH * 3);
  for (int img = 0; img < 2; img++) {
    uint8_t block[(MH / 8) * (MW / 8) * 3];
    for (size_t i = 0; i < sizeof block; i++) block[i] = (uint8_t)(sp_test_rng_next(&r) >> 24);
    for (int y = 0; y < MH; y++)
      for (int x = 0; x < MW; x++)
        for (int c = 0; c < 3; c++) px[((size_t)y * MW + x) * 3 + c] = block[((y / 8) * (MW / 8) + x / 8) * 3 + c];
    assert_int_equal(sp_write_png(img ? b_img : a_img, px, MH, MW, 3), 0);
  }
  free(px);
  static const float base[MK][2] = {{12, 10}, {32, 8}, {52, 10}, {20, 22}, {44, 22},
                                    {32, 28}, {14, 38}, {32, 40}, {50, 38}};
  for (int f = 0; f < 2; f++) {
    char text[1024];
    int len = snprintf(text, sizeof text, "[");
    for (int i = 0; i < MK; i++)
      len += snprintf(text + len, sizeof text - (size_t)len, "%s[%.1f,%.1f]", i ? "," : "", base[i][0] + 2 * f,
                      base[i][1] + (i % 3) * f);
    snprintf(text + len, sizeof text - (size_t)len, "]\n");
    sp_test_write_text(f ? b_pts : a_pts, text);
  }
}

static void morph_takes_back_what_it_wrote_in_a_folder_it_made(void **state) {
  (void)state;
  char a_img[600], b_img[600], a_pts[600], b_pts[600], dir[700], p[800];
  morph_inputs(a_img, b_img, a_pts, b_pts, sizeof a_img);
  const int frames = 60;
  /* Success first: the sizes of what it writes. */
  snprintf(dir, sizeof dir, "%s/morph-ok/out", tmp);
  if (spry("morph --points-a %s --points-b %s %s %s --out %s --frames %d", a_pts, b_pts, a_img, b_img, dir, frames) != 0)
    fail_msg("spry morph:\n%s", out);
  snprintf(p, sizeof p, "%s/points.png", dir);
  long long biggest = file_size(p);
  for (int f = 0; f <= frames; f++) {
    snprintf(p, sizeof p, "%s/frame_%03d.png", dir, f);
    long long s = file_size(p);
    if (s > biggest) biggest = s;
  }
  snprintf(p, sizeof p, "%s/morph.gif", dir);
  const long long gif = file_size(p);
  /* Every PNG fits under the cap, the GIF (written last) does not: the
   * run fails after points.png and all frames are written. */
  print_message("points.png and frames: at most %lld bytes; morph.gif %lld\n", biggest, gif);
  const rlim_t cap = (rlim_t)biggest + 1;
  if (gif <= (long long)cap) fail_msg("morph.gif (%lld bytes) is not larger than every PNG (%lld)", gif, biggest);
  char base[600];
  snprintf(base, sizeof base, "%s/morph-fail", tmp);
  mkdir(base, 0777);
  snprintf(dir, sizeof dir, "%s/a/b/out", base);
  assert_int_equal(spry_capped(cap, "morph --points-a %s --points-b %s %s %s --out %s --frames %d", a_pts, b_pts,
                               a_img, b_img, dir, frames),
                   1);
  expect_said("morph.gif");
  /* The frames, points.png, the folders it made: all gone. */
  snprintf(p, sizeof p, "%s/a", base);
  assert_false(exists(p));
  assert_true(exists(base));
}

static void morph_keeps_a_folder_that_was_there(void **state) {
  (void)state;
  char a_img[600], b_img[600], a_pts[600], b_pts[600], dir[700], p[800];
  morph_inputs(a_img, b_img, a_pts, b_pts, sizeof a_img);
  /* A folder named like frame 3 stops the run midway, after frames 0-2. */
  snprintf(dir, sizeof dir, "%s/morph-there", tmp);
  mkdir(dir, 0777);
  snprintf(p, sizeof p, "%s/notes.txt", dir);
  sp_test_write_text(p, "mine\n");
  snprintf(p, sizeof p, "%s/frame_003.png", dir);
  mkdir(p, 0777);
  assert_int_equal(spry("morph --points-a %s --points-b %s %s %s --out %s --frames 6", a_pts, b_pts, a_img, b_img, dir),
                   1);
  expect_said(p);
  /* Not a folder this run made: it and what was in it stay (and so do the
   * frames written before the failure: only a folder the run made is
   * emptied, since it cannot tell its files from older ones of that name). */
  assert_true(exists(p));
  snprintf(p, sizeof p, "%s/frame_002.png", dir);
  assert_true(exists(p));
  snprintf(p, sizeof p, "%s/notes.txt", dir);
  char *notes = sp_test_slurp(p);
  assert_non_null(notes);
  assert_string_equal(notes, "mine\n");
  free(notes);
  snprintf(p, sizeof p, "%s/morph.gif", dir);
  assert_false(exists(p));
}

/* ---- spry prepare frames ---- */

static void write_clip(const char *path, int w, int h, int frames, int seed) {
  sp_video_writer_config c = sp_video_writer_config_default(w, h);
  sp_video_writer *wr = sp_video_writer_open(path, &c);
  if (!wr) fail_msg("writer: %s", sp_last_error());
  uint8_t *rgb = malloc((size_t)w * h * 3);
  for (int t = 0; t < frames; t++) {
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        uint8_t *px = rgb + ((size_t)y * w + x) * 3;
        px[0] = (uint8_t)(x * 3 + t * 7 + seed), px[1] = (uint8_t)(y * 5 + t * 11), px[2] = (uint8_t)((x + t) / 8 % 2 * 200);
      }
    if (sp_video_writer_add(wr, rgb) != 0) fail_msg("writer add: %s", sp_last_error());
  }
  free(rgb);
  if (sp_video_writer_close(wr) != 0) fail_msg("writer close: %s", sp_last_error());
}

static int count_frame(int64_t i, const uint8_t *px, int h, int w, void *user) {
  (void)i, (void)px, (void)h, (void)w;
  ++*(int64_t *)user;
  return 0;
}

static void prepare_frames_leaves_no_folder_for_a_clip_that_fails_midway(void **state) {
  (void)state;
  char act[600], broken[700], part[700], p[900];
  snprintf(act, sizeof act, "%s/act", tmp);
  assert_int_equal(sp_synth_actions(act, 1, 8, 32, 2), 0); /* move_right/clip_00000.mp4 */
  /* Two MPEG-TS streams of different frame sizes, back to back: the first
   * 12 frames decode, then the frame size changes and the decode fails. */
  snprintf(broken, sizeof broken, "%s/broken", act);
  mkdir(broken, 0777);
  uint8_t *whole = NULL;
  size_t whole_n = 0;
  for (int k = 0; k < 2; k++) {
    snprintf(part, sizeof part, "%s/part%d.ts", broken, k);
    write_clip(part, k ? 48 : 64, k ? 32 : 48, 12, k);
    FILE *f = fopen(part, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    whole = realloc(whole, whole_n + (size_t)n);
    assert_int_equal(fread(whole + whole_n, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    whole_n += (size_t)n;
    remove(part);
  }
  snprintf(p, sizeof p, "%s/ab.ts", broken);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(whole, 1, whole_n, f), whole_n);
  fclose(f);
  free(whole);
  /* As the reader sees it: frames come out, then an error naming the file. */
  sp_video *v = sp_video_open(p);
  if (!v) fail_msg("%s", sp_last_error());
  sp_video_geom g = sp_video_geom_native();
  int64_t seen = 0;
  assert_int_equal(sp_video_decode_all(v, &g, count_frame, &seen), -1);
  assert_int_equal(seen, 12);
  assert_non_null(strstr(sp_last_error(), "ab.ts"));
  sp_video_close(v);

  /* With a good clip: exit 1, the good clip is prepared, the broken clip
   * leaves neither its folder nor its class folder. */
  char list[700], pf[700];
  snprintf(list, sizeof list, "%s/two.txt", act);
  sp_test_write_text(list, "move_right/clip_00000.mp4 0\nbroken/ab.ts 1\n");
  snprintf(pf, sizeof pf, "%s/prep/pf", tmp);
  assert_int_equal(spry("prepare frames --list %s --out %s --workers 1", list, pf), 1);
  expect_said("ab.ts: frame size changes mid-stream");
  expect_said("1 of 2 clips failed");
  snprintf(p, sizeof p, "%s/move_right/clip_00000/img_00008.jpg", pf);
  assert_true(exists(p));
  snprintf(p, sizeof p, "%s/broken/ab", pf);
  assert_false(exists(p));
  snprintf(p, sizeof p, "%s/broken", pf);
  assert_false(exists(p));
  snprintf(p, sizeof p, "%s/frames.list", pf);
  char *fl = sp_test_slurp(p);
  assert_non_null(fl);
  assert_string_equal(fl, "move_right/clip_00000 8 0\n");
  free(fl);

  /* Only the broken clip: exit 1 and no output folder at all. */
  snprintf(list, sizeof list, "%s/one.txt", act);
  sp_test_write_text(list, "broken/ab.ts 1\n");
  snprintf(pf, sizeof pf, "%s/prep-one/x/y", tmp);
  assert_int_equal(spry("prepare frames --list %s --out %s --workers 2", list, pf), 1);
  expect_said("none of its 1 clips could be decoded");
  snprintf(p, sizeof p, "%s/prep-one", tmp);
  assert_false(exists(p));

  /* An --out whose last part cannot be made (a name longer than the file
   * system allows): the parents made before it go again. */
  char longname[300];
  memset(longname, 'x', 299);
  longname[299] = 0;
  snprintf(list, sizeof list, "%s/good.txt", act);
  sp_test_write_text(list, "move_right/clip_00000.mp4 0\n");
  snprintf(pf, sizeof pf, "%s/prep-long/x/%s", tmp, longname);
  assert_int_equal(spry("prepare frames --list %s --out %s --workers 1", list, pf), 1);
  snprintf(p, sizeof p, "%s/prep-long", tmp);
  assert_false(exists(p));
}

static int setup(void **state) {
  (void)state;
  return sp_test_tmpdir(tmp, sizeof tmp) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(eval_takes_back_the_out_folder_it_made),
      cmocka_unit_test(morph_takes_back_what_it_wrote_in_a_folder_it_made),
      cmocka_unit_test(morph_keeps_a_folder_that_was_there),
      cmocka_unit_test(prepare_frames_leaves_no_folder_for_a_clip_that_fails_midway),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
