/* Issue 19 replayed on the real `spry` (under `make asan`, the sanitized
 * one): every bad input of the probe must end in an exit (no signal, no
 * sanitizer report), within 20 s, with a message naming the file and the
 * problem, and leave nothing behind (no run folder, no temporary file).
 * Then the signals: SIGKILL a real `spry train` mid-epoch and mid-cache-
 * write, SIGINT and SIGTERM through its handler, resume, and compare the
 * final weights with an uninterrupted run's, bit for bit. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spry/data.h"
#include "spry/safetensors.h"
#include "testkit.h"

static char tmp[512];
static char out[65536];
static char faces[600], sig_faces[600], good[700], img[700];

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* Runs spry ARGS: its exit code, after checking it exited by itself
 * (sp_test_cli_exit fails on signals and sanitizer reports) and, for a bad
 * input (limit > 0), within limit seconds. */
static int spry_within(double limit, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int spry_within(double limit, const char *fmt, ...) {
  char args[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  if (!getenv("SPRY_BIN")) skip();
  double t0 = sp_now();
  int code = sp_test_cli_exit(args, out, sizeof out);
  double s = sp_now() - t0;
  if (limit > 0 && s > limit) fail_msg("spry %s: took %.1f s (a hang is a bug too)", args, s);
  return code;
}
/* A bad input: an answer within 20 s. */
#define spry(...) spry_within(20, __VA_ARGS__)
/* Making what the cases need (faces, a trained checkpoint): no limit. */
#define spry_setup(...) spry_within(0, __VA_ARGS__)

static void said(const char *want) {
  if (!strstr(out, want)) fail_msg("the output lacks '%s':\n%s", want, out);
}

/* Synthetic faces and a checkpoint trained on them for one epoch (shared by
 * the cases below). */
static void make_checkpoint(void) {
  if (exists(good)) return;
  char cfg[700], text[2048];
  assert_int_equal(
      spry_setup("synth faces --count 24 --per-identity 4 --size 48,64 --threads 2 --quiet --out %s", faces), 0);
  snprintf(cfg, sizeof cfg, "%s/good.yaml", tmp);
  snprintf(text, sizeof text,
           "model: vgg-face\nout: %s/good\ndata:\n  path: %s\n  val_fraction: 0.34\n  crop_size: 40\n  size: 32\n"
           "  channels: 1\nepochs: 1\nbatch: 8\nseed: 3\nworkers: 1\nthreads: 1\n",
           tmp, faces);
  sp_test_write_text(cfg, text);
  if (spry_setup("train %s", cfg) != 0) fail_msg("spry train:\n%s", out);
  assert_true(exists(good));
}

/* A copy of the good checkpoint with one change (the tensors' data is the
 * good file's, changed where asked). */
typedef enum { KEEP, BIAS_1000, NAN_WEIGHT, CONFIG } change;
static void checkpoint_variant(const char *path, change what, const char *config) {
  sp_st_file *f = sp_st_open(good);
  assert_non_null(f);
  sp_st_writer *w = sp_st_writer_new();
  float *big = calloc(1000, sizeof(float)), *copy = NULL;
  for (int i = 0; i < sp_st_count(f); i++) {
    const char *name = sp_st_name(f, i);
    sp_tensor t = *sp_st_get(f, name);
    if (what == BIAS_1000 && !strcmp(name, "fc2.bias")) t = (sp_tensor){SP_F32, sp_shape1(1000), big};
    if (what == NAN_WEIGHT && !strcmp(name, "fc2.weight")) {
      copy = malloc(sp_tensor_bytes(&t));
      memcpy(copy, t.data, sp_tensor_bytes(&t));
      copy[7] = NAN;
      t.data = copy;
    }
    assert_int_equal(sp_st_writer_add(w, name, &t), 0);
  }
  for (int i = 0; i < sp_st_meta_count(f); i++) {
    const char *k = sp_st_meta_key(f, i);
    sp_st_writer_meta(w, k, what == CONFIG && !strcmp(k, "config") ? config : sp_st_meta(f, k));
  }
  /* The C1 reproduction: a head of 500 points and the structure loss. */
  if (what == BIAS_1000)
    sp_st_writer_meta(w, "config",
                      "model: vgg-face\ndata:\n  size: 32\n  crop_size: 40\n  channels: 1\n"
                      "loss:\n  structure_weight: 1\n  neighbours: 8\n");
  assert_int_equal(sp_st_writer_save(w, path), 0);
  sp_st_writer_free(w);
  sp_st_close(f);
  free(big);
  free(copy);
}

/* Damaged copies of a synthetic face's JPEG. */
static void jpeg_files(void) {
  uint8_t *buf;
  size_t len;
  assert_int_equal(sp_read_file(img, &buf, &len), 0);
  char p[700];
  snprintf(p, sizeof p, "%s/cut.jpg", tmp);
  write_bytes(p, "\xff\xd8\xff\xd9", 4);
  snprintf(p, sizeof p, "%s/half.jpg", tmp);
  write_bytes(p, buf, len / 2);
  /* 40000 x 40000 in the frame header: refused before any allocation. */
  for (size_t i = 0; i + 9 < len; i++)
    if (buf[i] == 0xFF && (buf[i + 1] == 0xC0 || buf[i + 1] == 0xC2)) {
      buf[i + 5] = buf[i + 7] = 0x9C;
      buf[i + 6] = buf[i + 8] = 0x40;
      break;
    }
  snprintf(p, sizeof p, "%s/huge.jpg", tmp);
  write_bytes(p, buf, len);
  free(buf);
  snprintf(p, sizeof p, "%s/text.jpg", tmp);
  write_bytes(p, "not an image\n", 13);
}

/* The probe's predict, detect and morph inputs. */
static void bad_photos_and_checkpoints(void **state) {
  (void)state;
  make_checkpoint();
  jpeg_files();
  static const char *const photos[] = {"cut.jpg", "half.jpg", "huge.jpg", "text.jpg", "missing.jpg"};
  for (size_t i = 0; i < sizeof photos / sizeof photos[0]; i++) {
    assert_int_equal(spry("predict --weights %s %s/%s", good, tmp, photos[i]), 1);
    said(photos[i]);
    assert_int_equal(spry("detect %s/%s", tmp, photos[i]), 1);
    said(photos[i]);
  }
  /* --box: non-finite, huge or off the image (C1, P5). */
  static const char *const boxes[] = {"0,0,inf,inf", "1e30,0,5,5", "0,0,-3,5", "nan,1,2,3", "1,2,3"};
  for (size_t i = 0; i < sizeof boxes / sizeof boxes[0]; i++) {
    assert_int_equal(spry("predict --weights %s --box %s %s", good, boxes[i], img), 2);
    said("--box");
  }
  /* Checkpoints: C1's head of 1000 outputs with the structure loss, NaN
   * weights (P5), a stored config with aliases (C4) or a huge size (C3). */
  char p[700];
  snprintf(p, sizeof p, "%s/c1.safetensors", tmp);
  checkpoint_variant(p, BIAS_1000, NULL);
  assert_int_equal(spry("predict --weights %s %s", p, img), 1);
  said("c1.safetensors");
  snprintf(p, sizeof p, "%s/nan.safetensors", tmp);
  checkpoint_variant(p, NAN_WEIGHT, NULL);
  assert_int_equal(spry("predict --weights %s %s", p, img), 1);
  said("nan.safetensors: 'fc2.weight' holds 1 NaN or infinite value(s)");
  snprintf(p, sizeof p, "%s/alias.safetensors", tmp);
  checkpoint_variant(p, CONFIG, "model: &m vgg-face\nx: *m\n");
  assert_int_equal(spry("predict --weights %s %s", p, img), 1);
  said("alias");
  snprintf(p, sizeof p, "%s/size.safetensors", tmp);
  checkpoint_variant(p, CONFIG, "model: vgg-face\ndata:\n  size: 4096\n  crop_size: 4096\n  channels: 1\n");
  setenv("SPRY_MAX_MEMORY_MB", "512", 1);
  int code = spry("predict --weights %s %s", p, img);
  unsetenv("SPRY_MAX_MEMORY_MB");
  assert_int_equal(code, 1);
  said("fc1.weight");
  said("needs");
  snprintf(p, sizeof p, "%s/text.safetensors", tmp);
  write_bytes(p, "model: vgg-face\n", 16);
  assert_int_equal(spry("predict --weights %s %s", p, img), 1);
  said("text.safetensors");
}

static void bad_morph_inputs(void **state) {
  (void)state;
  make_checkpoint();
  char a[700], b[700], dest[700];
  snprintf(a, sizeof a, "%s/inf.pts", tmp);
  sp_test_write_text(a, "version: 1\nn_points: 3\n{\n1 2\ninf 4\n5 6\n}\n");
  snprintf(b, sizeof b, "%s/ok.pts", tmp);
  sp_test_write_text(b, "version: 1\nn_points: 3\n{\n1 2\n3 4\n5 6\n}\n");
  snprintf(dest, sizeof dest, "%s/morph-out", tmp);
  assert_int_equal(spry("morph --points-a %s --points-b %s %s %s --out %s --frames 2", a, b, img, img, dest), 1);
  said("inf.pts: point 1");
  assert_false(exists(dest));
  /* --frames 10000 (C3): checked against memory, not an abort. */
  setenv("SPRY_MAX_MEMORY_MB", "64", 1);
  int code = spry("morph --points-a %s --points-b %s %s %s --out %s --frames 10000 --gif-size 0", b, b, img, img, dest);
  unsetenv("SPRY_MAX_MEMORY_MB");
  assert_int_equal(code, 1);
  said("--frames 10000");
  assert_false(exists(dest));
  snprintf(a, sizeof a, "%s/cut.jpg", tmp);
  assert_int_equal(spry("morph --weights %s %s %s --out %s", good, a, img, dest), 1);
  said("cut.jpg");
  assert_false(exists(dest));
}

/* Train with a bad config or bad data: an error naming it, and no run
 * folder left behind (it used to stay, empty, in 24 such cases). */
static void train_refuses(const char *name, const char *config_tail, const char *set, const char *want) {
  char cfg[700], run[700], text[4096];
  snprintf(cfg, sizeof cfg, "%s/%s.yaml", tmp, name);
  snprintf(run, sizeof run, "%s/runs/%s", tmp, name);
  snprintf(text, sizeof text, "model: vgg-face\nout: %s\nepochs: 1\nbatch: 4\nworkers: 1\nthreads: 1\n%s", run,
           config_tail);
  sp_test_write_text(cfg, text);
  int code = spry("train %s %s", cfg, set ? set : "");
  if (code != 1 && code != 2) fail_msg("train %s: exit %d\n%s", name, code, out);
  said(want);
  if (exists(run)) fail_msg("train %s left %s behind:\n%s", name, run, out);
}

static void bad_training_inputs(void **state) {
  (void)state;
  make_checkpoint();
  char text[2048], data[700], p[800];
  snprintf(text, sizeof text, "a: &a [x,x]\nb: [*a,*a]\ndata:\n  path: %s\n", faces);
  train_refuses("alias", text, NULL, "an alias (*a)");
  snprintf(text, sizeof text, "data:\n  path: %s\n", faces);
  train_refuses("set-dots", text, "--set ...=1", "empty part");
  /* C3: inside the documented range, more than this machine (here: 256 MB). */
  snprintf(text, sizeof text, "data:\n  path: %s\n  size: 4096\n  crop_size: 4096\n", faces);
  setenv("SPRY_MAX_MEMORY_MB", "256", 1);
  train_refuses("size-4096", text, NULL, "needs");
  unsetenv("SPRY_MAX_MEMORY_MB");
  /* A dlib XML cut mid-box (P8). */
  snprintf(data, sizeof data, "%s/cutxml", tmp);
  mkdir(data, 0755);
  snprintf(p, sizeof p, "%s/labels_with_face_landmarks.xml", data);
  sp_test_write_text(p,
                     "<dataset><images>\n<image file='a.jpg'>\n<box top='1' left='2' width='30' height='40'>\n"
                     "<part name='00' x='3' y='4'/>\n<par");
  snprintf(text, sizeof text, "data:\n  path: %s\n", data);
  train_refuses("cut-xml", text, NULL, "(1 skipped)");
  /* A keypoints.csv with a NUL byte (P8). */
  snprintf(data, sizeof data, "%s/nulcsv", tmp);
  mkdir(data, 0755);
  snprintf(p, sizeof p, "%s/keypoints.csv", data);
  write_bytes(p, "name,x0,y0\na_1.jpg,1,2\n\0b_1.jpg,3,4\n", 35);
  snprintf(text, sizeof text, "data:\n  path: %s\n", data);
  train_refuses("nul-csv", text, NULL, "NUL byte");
  /* Data that is all bad images: found after the folder was made. */
  snprintf(data, sizeof data, "%s/badimages", tmp);
  snprintf(p, sizeof p, "%s/images", data);
  mkdir(data, 0755);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/keypoints.csv", data);
  sp_test_write_text(p, "name,x0,y0\na_1.jpg,1,2\nb_2.jpg,3,4\nc_3.jpg,5,6\n");
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/images/%c_%d.jpg", data, 'a' + i, i + 1);
    write_bytes(p, "\xff\xd8\xff\xd9", 4);
  }
  snprintf(text, sizeof text, "data:\n  path: %s\n  split: none\n  keypoints: [0]\naugment:\n  flip: 0\n", data);
  train_refuses("bad-images", text, "--set model=vgg-nose", "could be decoded");
  /* A video list with a label typo (P5): five one-frame clips, one label
   * 99999. */
  uint8_t *jpg;
  size_t len;
  assert_int_equal(sp_read_file(img, &jpg, &len), 0);
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof p, "%s/clip%d", tmp, i);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/clip%d/img_00001.jpg", tmp, i);
    write_bytes(p, jpg, len);
  }
  free(jpg);
  snprintf(p, sizeof p, "%s/typo.list", tmp);
  sp_test_write_text(p, "clip0 0\nclip1 1\nclip2 2\nclip3 3\nclip4 99999\n");
  snprintf(text, sizeof text, "task: video\ndata:\n  train_list: %s\n", p);
  train_refuses("label-typo", text, "--set model=tsn-r18", "typo.list:5: label 99999 is far above the others");
}

static void bad_frame_folders_and_lists(void **state) {
  (void)state;
  char clip[700], p[800];
  snprintf(clip, sizeof clip, "%s/cutclip", tmp);
  mkdir(clip, 0755);
  snprintf(p, sizeof p, "%s/img_00001.jpg", clip);
  write_bytes(p, "\xff\xd8\xff\xd9", 4);
  assert_int_equal(spry("video info %s", clip), 1);
  said("img_00001.jpg");
  /* n_frames says 10^12 (C3). */
  snprintf(clip, sizeof clip, "%s/lyingclip", tmp);
  mkdir(clip, 0755);
  snprintf(p, sizeof p, "%s/img_00001.jpg", clip);
  uint8_t *buf;
  size_t len;
  assert_int_equal(sp_read_file(img, &buf, &len), 0);
  write_bytes(p, buf, len);
  free(buf);
  snprintf(p, sizeof p, "%s/n_frames", clip);
  sp_test_write_text(p, "1000000000000\n");
  assert_int_equal(spry("video info %s", clip), 1);
  said("n_frames: says 1000000000000 frames");
  /* prepare frames: two clips that would share a folder (P4). */
  snprintf(p, sizeof p, "%s/dup.list", tmp);
  sp_test_write_text(p, "../x/clip.mp4 0\n../y/clip.mp4 1\n");
  char dest[700];
  snprintf(dest, sizeof dest, "%s/frames-out", tmp);
  assert_int_equal(spry("prepare frames --list %s --out %s", p, dest), 1);
  said("share the frame folder");
  assert_false(exists(dest));
}

/* ---- signals ---- */

static char sig_cfg[700];

/* A run of 3 epochs of 10 steps, on faces of its own: long enough to be
 * stopped inside its second epoch (smaller under the sanitizers). */
static void signal_config(const char *run) {
  char text[2048];
  snprintf(sig_cfg, sizeof sig_cfg, "%s.yaml", run);
  snprintf(text, sizeof text,
           "model: vgg-face\nout: %s\ndata:\n  path: %s\n  val_fraction: 0.34\n  crop_size: 224\n  size: %d\n"
           "  channels: 3\nepochs: 3\nbatch: 4\nseed: 11\nworkers: 1\nthreads: 1\n",
           run, sig_faces, sp_test_sanitized() ? 64 : 96);
  sp_test_write_text(sig_cfg, text);
}

/* Starts `spry train CONFIG [--resume RUN]` with stderr on a terminal (the
 * progress bar draws only there), stdout to /dev/null; the pty's master in
 * *master. */
static pid_t start_train(const char *cfg, const char *resume, int *master) {
  int m, s;
  assert_int_equal(openpty(&m, &s, NULL, NULL, NULL), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(m);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(s, 2);
    const char *bin = getenv("SPRY_BIN");
    if (resume)
      execl(bin, bin, "train", cfg, "--resume", resume, (char *)NULL);
    else
      execl(bin, bin, "train", cfg, (char *)NULL);
    _exit(127);
  }
  close(s);
  *master = m;
  return pid;
}

/* Reads the child's terminal until the progress bar shows a step of epoch
 * 2 that is not its last; then sends sig. Returns 1 when sent mid-epoch. */
static int signal_mid_epoch(pid_t pid, int master, int sig) {
  char buf[4096], seen[65536] = "";
  size_t have = 0;
  double t0 = sp_now();
  while (sp_now() - t0 < 300) {
    struct pollfd pf = {master, POLLIN, 0};
    if (poll(&pf, 1, 200) <= 0) continue;
    ssize_t n = read(master, buf, sizeof buf - 1);
    if (n <= 0) return 0; /* the run ended first */
    if (have + (size_t)n >= sizeof seen) have = 0;
    memcpy(seen + have, buf, (size_t)n);
    have += (size_t)n;
    seen[have] = 0;
    for (const char *p = strstr(seen, "epoch 2/3 ["); p; p = strstr(p + 1, "epoch 2/3 [")) {
      int step, steps;
      const char *q = strchr(p, ']');
      if (q && sscanf(q + 1, " %d/%d", &step, &steps) == 2 && step >= 1 && step < steps - 1) {
        kill(pid, sig);
        return 1;
      }
    }
  }
  return 0;
}

/* Drains the terminal after the `have` bytes of log already read, and reaps
 * the child: its wait status. */
static int finish_from(pid_t pid, int master, char *log, size_t n, size_t have) {
  char buf[4096];
  for (;;) {
    ssize_t r = read(master, buf, sizeof buf);
    if (r <= 0) break;
    size_t c = (size_t)r < n - 1 - have ? (size_t)r : n - 1 - have;
    memcpy(log + have, buf, c);
    have += c;
  }
  log[have] = 0;
  close(master);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return st;
}

static int finish(pid_t pid, int master, char *log, size_t n) { return finish_from(pid, master, log, n, 0); }

/* Reads the terminal into log until it shows `text` (1) or the run ends or
 * a minute passes (0); *have: the bytes read. */
static int read_until(int master, const char *text, char *log, size_t n, size_t *have) {
  const double t0 = sp_now();
  while (sp_now() - t0 < 60) {
    struct pollfd pf = {master, POLLIN, 0};
    if (poll(&pf, 1, 200) <= 0) continue;
    if (*have + 1 >= n) return 0;
    ssize_t r = read(master, log + *have, n - 1 - *have);
    if (r <= 0) return 0;
    *have += (size_t)r;
    log[*have] = 0;
    if (strstr(log, text)) return 1;
  }
  return 0;
}

static int run_to_end(const char *cfg, const char *resume, char *log, size_t n) {
  int m;
  pid_t pid = start_train(cfg, resume, &m);
  return finish(pid, m, log, n);
}

static char reference[700];

static void clean_run(const char *what, int st, const char *log) {
  if (strstr(log, "Sanitizer") || strstr(log, "runtime error:")) fail_msg("%s: sanitizer report:\n%s", what, log);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("%s: status %d:\n%s", what, st, log);
}

/* The uninterrupted run every interrupted one must equal. */
static void make_reference(void) {
  snprintf(reference, sizeof reference, "%s/sig-reference", tmp);
  char p[800];
  snprintf(p, sizeof p, "%s/last.safetensors", reference);
  if (exists(p)) return;
  assert_int_equal(
      spry_setup("synth faces --count 60 --per-identity 4 --size 48,64 --threads 2 --quiet --out %s", sig_faces), 0);
  signal_config(reference);
  clean_run("the uninterrupted run", run_to_end(sig_cfg, NULL, out, sizeof out), out);
}

static int64_t saved_epoch(const char *run) {
  char p[800];
  snprintf(p, sizeof p, "%s/last.safetensors", run);
  sp_st_file *f = sp_st_open(p);
  if (!f) return -1;
  const char *e = sp_st_meta(f, "epoch");
  int64_t v = e ? atoll(e) : -1;
  sp_st_close(f);
  return v;
}

/* No temporary of any writer is left in a run folder. */
static void no_temporaries(const char *run) {
  DIR *d = opendir(run);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));)
    if (strstr(e->d_name, ".tmp")) fail_msg("%s/%s was left behind", run, e->d_name);
  closedir(d);
}

static void interrupted_run(const char *name, int sig) {
  make_checkpoint(); /* the faces */
  make_reference();
  char run[700];
  snprintf(run, sizeof run, "%s/sig-%s", tmp, name);
  signal_config(run);
  int m;
  pid_t pid = start_train(sig_cfg, NULL, &m);
  int sent = signal_mid_epoch(pid, m, sig);
  int st = finish(pid, m, out, sizeof out);
  if (!sent) fail_msg("%s: the run ended before its second epoch was under way:\n%s", name, out);
  if (strstr(out, "Sanitizer") || strstr(out, "runtime error:")) fail_msg("%s: sanitizer report:\n%s", name, out);
  if (sig == SIGKILL) {
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(saved_epoch(run), 1); /* the first epoch's checkpoint; the second was lost */
  } else {
    /* The handler: the step ends, last.safetensors holds it, exit 130. */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 130) fail_msg("%s: status %d:\n%s", name, st, out);
    if (!strstr(out, "interrupted at epoch 2 step")) fail_msg("%s:\n%s", name, out);
  }
  clean_run("the resumed run", run_to_end(sig_cfg, run, out, sizeof out), out);
  sp_test_assert_same_checkpoint(reference, run);
  no_temporaries(run);
}

static void sigkill_mid_epoch_then_resume(void **state) {
  (void)state;
  interrupted_run("kill", SIGKILL);
}

static void sigint_through_the_handler(void **state) {
  (void)state;
  interrupted_run("int", SIGINT);
}

static void sigterm_through_the_handler(void **state) {
  (void)state;
  interrupted_run("term", SIGTERM);
}

/* A second Ctrl-C quits at once (exit 130, no save); the first epoch's
 * checkpoint stays and the resumed run ends where an uninterrupted one does. */
static void second_ctrl_c_quits_at_once(void **state) {
  (void)state;
  make_checkpoint();
  make_reference();
  char run[700];
  snprintf(run, sizeof run, "%s/sig-twice", tmp);
  signal_config(run);
  int m;
  pid_t pid = start_train(sig_cfg, NULL, &m);
  int sent = signal_mid_epoch(pid, m, SIGINT);
  size_t have = 0;
  /* The second once the run has taken the first (sent at once, a loaded
   * machine may deliver both as one). */
  const int took = sent && read_until(m, "Ctrl-C again", out, sizeof out, &have);
  if (took) kill(pid, SIGINT);
  int st = finish_from(pid, m, out, sizeof out, have);
  if (!sent) fail_msg("the run ended before its second epoch was under way:\n%s", out);
  if (!took) fail_msg("the run never said it took the first Ctrl-C:\n%s", out);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 130) fail_msg("status %d:\n%s", st, out);
  if (!strstr(out, "Ctrl-C again to quit at once")) fail_msg("no word of the first Ctrl-C:\n%s", out);
  /* The step may have ended (and saved) between the two: either way the
   * run stops, and resuming ends on the reference's weights. */
  if (!strstr(out, "quitting at once") && !strstr(out, "interrupted at epoch 2")) fail_msg("%s", out);
  clean_run("the resumed run", run_to_end(sig_cfg, run, out, sizeof out), out);
  sp_test_assert_same_checkpoint(reference, run);
  no_temporaries(run);
}

/* SIGKILL while the crop cache is being written: the temporary is left, the
 * next start removes it, rebuilds, and trains to the reference's weights. */
static void sigkill_mid_cache_write(void **state) {
  (void)state;
  make_checkpoint();
  make_reference();
  char run[700], tmpfile[900];
  snprintf(run, sizeof run, "%s/sig-cache", tmp);
  signal_config(run);
  int caught = 0;
  for (int attempt = 0; attempt < 20 && !caught; attempt++) {
    sp_test_rmtree(run);
    int m;
    pid_t pid = start_train(sig_cfg, NULL, &m);
    char done[900];
    snprintf(tmpfile, sizeof tmpfile, "%s/cache_train.bin.tmp%ld", run, (long)pid);
    snprintf(done, sizeof done, "%s/cache_train.bin", run);
    double t0 = sp_now();
    /* Between the temporary's creation and its rename: poll closely. */
    while (!caught && !exists(done) && sp_now() - t0 < 120) {
      if (exists(tmpfile))
        caught = kill(pid, SIGKILL) == 0;
      else
        usleep(50);
    }
    if (!caught) kill(pid, SIGKILL); /* missed it: again */
    finish(pid, m, out, sizeof out);
    if (caught && !exists(tmpfile)) caught = 0; /* renamed in between */
  }
  if (!caught) fail_msg("never caught the cache write in 20 runs");
  clean_run("the run after the kill", run_to_end(sig_cfg, NULL, out, sizeof out), out);
  if (!strstr(out, "a cache an interrupted run left half written")) fail_msg("no word of the removal:\n%s", out);
  assert_false(exists(tmpfile));
  sp_test_assert_same_checkpoint(reference, run);
  no_temporaries(run);
}

static int setup(void **state) {
  (void)state;
  if (!sp_test_tmpdir(tmp, sizeof tmp)) return -1;
  snprintf(faces, sizeof faces, "%s/faces", tmp);
  snprintf(sig_faces, sizeof sig_faces, "%s/sig-faces", tmp);
  snprintf(good, sizeof good, "%s/good/best.safetensors", tmp);
  snprintf(img, sizeof img, "%s/images/Synth_Person_0000_00.jpg", faces);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(tmp);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_photos_and_checkpoints),    cmocka_unit_test(bad_morph_inputs),
      cmocka_unit_test(bad_training_inputs),           cmocka_unit_test(bad_frame_folders_and_lists),
      cmocka_unit_test(sigkill_mid_epoch_then_resume), cmocka_unit_test(sigint_through_the_handler),
      cmocka_unit_test(sigterm_through_the_handler),   cmocka_unit_test(second_ctrl_c_quits_at_once),
      cmocka_unit_test(sigkill_mid_cache_write),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
