/* Keypoints on photos as a user has them (issue: face boxes). `spry predict`
 * with no box finds faces the way the model's run did and scores what
 * `spry eval` scores on the same photos; on group photos it finds every face
 * dlib's detector finds; a photo with no face is reported, not fatal; eval
 * names where its boxes came from and calls points-boxes optimistic. Runs
 * the real binary, as a user would. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spry/common.h"
#include "spry/data.h"
#include "spry/video.h"
#include "testkit.h"

static char dir[256];
static char out[1 << 20];

static int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

/* `spry ARGS`; fails the test unless it exits with `want`. */
static void spry(int want, int with_stderr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void spry(int want, int with_stderr, const char *fmt, ...) {
  char args[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  int rc = exit_code(sp_test_run_cli(args, with_stderr, out, sizeof out));
  if (rc != want) fail_msg("spry %s: exit %d, expected %d\n%s", args, rc, want, out);
}

/* One face's points from `"points":[[x,y],...]` at p; returns the count. */
static int parse_points(const char *p, float *pts, int max) {
  p = strstr(p, "\"points\":[");
  if (!p) return 0;
  p += 10;
  int n = 0;
  while (*p == '[' && n < max) {
    char *e;
    pts[2 * n] = strtof(p + 1, &e);
    if (*e != ',') break;
    pts[2 * n + 1] = strtof(e + 1, &e);
    if (*e != ']') break;
    n++;
    p = e + 1;
    if (*p == ',') p++;
  }
  return n;
}

/* Faces of one predict line: boxes [n][4] and the points of each. */
static int parse_faces(const char *line, float boxes[][4], float *pts, int k, int max) {
  const char *p = strstr(line, "\"faces\":[");
  assert_non_null(p);
  int n = 0;
  for (p = strstr(p, "{\"box\":["); p && n < max; p = strstr(p + 1, "{\"box\":[")) {
    assert_int_equal(sscanf(p, "{\"box\":[%f,%f,%f,%f]", &boxes[n][0], &boxes[n][1], &boxes[n][2], &boxes[n][3]), 4);
    assert_int_equal(parse_points(p, pts + (size_t)n * k * 2, k), k);
    n++;
  }
  return n;
}

/* The mean point error of predict's first face per line against truth. */
static double mean_error(const char *lines, int n_images, const float *truth, int k) {
  double sum = 0;
  const char *line = lines;
  float *pts = malloc(sizeof(float) * 2 * k);
  for (int i = 0; i < n_images; i++) {
    assert_non_null(line);
    assert_int_equal(parse_points(line, pts, k), k);
    for (int j = 0; j < k; j++)
      sum += hypot(pts[2 * j] - truth[((size_t)i * k + j) * 2], pts[2 * j + 1] - truth[((size_t)i * k + j) * 2 + 1]);
    line = strchr(line, '\n');
    if (line) line++;
  }
  free(pts);
  return sum / ((double)n_images * k);
}

static double json_number(const char *text, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(text, k);
  if (!p) fail_msg("no %s in %s", key, text);
  return strtod(p + strlen(k), NULL);
}

/* ------------------------------------------------------ synthetic (always) */

static char faces[600];

/* A whole-image model (the seed's IMM recipe, on synthetic faces): predict
 * on the photos, no box, scores what eval scores on them. */
static void predict_on_whole_photos_matches_eval(void **state) {
  (void)state;
  spry(0, 1,
       "train %s/configs/imm-face58.yaml --set data.path=%s --set data.split=none --set data.size=64 "
       "--set data.crop_size=72 --set epochs=4 --set batch=16 --set out=%s/whole --set workers=2",
       getenv("SPRY_SOURCE_DIR"), faces, dir);
  spry(0, 0, "eval --weights %s/whole/best.safetensors --data %s", dir, faces);
  assert_non_null(strstr(out, "\"box\":\"image\""));
  double eval_px = json_number(strrchr(out, '{'), "mean_px");
  /* Every image of the folder, with its truth from keypoints.csv. */
  char path[700];
  snprintf(path, sizeof path, "%s/keypoints.csv", faces);
  char *csv = sp_test_slurp(path);
  assert_non_null(csv);
  int n = 0;
  static char args[1 << 16];
  int o = snprintf(args, sizeof args, "predict --weights %s/whole/best.safetensors", dir);
  float *truth = malloc(sizeof(float) * 2 * 68 * 64);
  for (char *line = strchr(csv, '\n') + 1; *line && n < 64; line = strchr(line, '\n') + 1) {
    char name[256];
    if (sscanf(line, "%255[^,]", name) != 1) break;
    o += snprintf(args + o, sizeof args - (size_t)o, " %s/images/%s", faces, name);
    const char *p = strchr(line, ',');
    for (int j = 0; j < 136; j++) truth[(size_t)n * 136 + j] = strtof(p + 1, (char **)&p);
    n++;
  }
  free(csv);
  spry(0, 0, "%s", args);
  double predict_px = mean_error(out, n, truth, 68);
  free(truth);
  printf("# %d synthetic photos: eval %.3f px, predict %.3f px\n", n, eval_px, predict_px);
  if (fabs(eval_px - predict_px) > 0.5) fail_msg("predict %.3f px, eval %.3f px", predict_px, eval_px);
  /* One JSON line per image, each with one whole-image face. */
  float boxes[2][4], pts[2 * 68 * 2];
  *strchr(out, '\n') = 0;
  assert_int_equal(parse_faces(out, boxes, pts, 68, 2), 1);
  assert_true(boxes[0][0] == 0 && boxes[0][1] == 0);
  for (int j = 0; j < 136; j++) assert_true(isfinite(pts[j]) && fabsf(pts[j]) < 2000);
}

/* Evaluation names its box source; points boxes are called optimistic; a
 * boxes file is read through --boxes; bad boxes are refused or skipped with
 * the file and line. */
static void eval_names_its_boxes(void **state) {
  (void)state;
  spry(0, 1, "eval --weights %s/whole/best.safetensors --data %s --set data.box=points", dir, faces);
  assert_non_null(strstr(out, "optimistic"));
  assert_non_null(strstr(out, "\"box\":\"points\""));
  /* A boxes file for the folder: one face box per image (the points' box). */
  char path[700], csvp[700];
  snprintf(path, sizeof path, "%s/boxes.csv", dir);
  snprintf(csvp, sizeof csvp, "%s/keypoints.csv", faces);
  char *csv = sp_test_slurp(csvp);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "image,x,y,w,h,source\n");
  int n = 0;
  for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1, n++) {
    char name[256];
    if (sscanf(line, "%255[^,]", name) != 1) break;
    const char *p = strchr(line, ',');
    float pts[136], box[4];
    for (int j = 0; j < 136; j++) pts[j] = strtof(p + 1, (char **)&p);
    sp_points_box(pts, NULL, 68, box);
    /* The third row's box lies off its image: skipped, named by line. */
    fprintf(f, "%s,%g,%g,%g,%g,test\n", name, n == 2 ? 5000.f : box[0], box[1], box[2], box[3]);
  }
  fclose(f);
  free(csv);
  spry(0, 1, "eval --weights %s/whole/best.safetensors --data %s --boxes %s", dir, faces, path);
  assert_non_null(strstr(out, "\"box\":\"file\""));
  if (!strstr(out, "boxes.csv line 4") || !strstr(out, "lies outside the"))
    fail_msg("the bad row is not named:\n%s", out);
  assert_int_equal((int)json_number(strrchr(out, '{'), "count"), n - 1);
  /* A boxes file with a row for no image of the folder: refused, saying
   * that (not that the images failed to decode). */
  f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "image,x,y,w,h\nnot_in_the_folder.jpg,1,2,30,40\n");
  fclose(f);
  spry(1, 1, "eval --weights %s/whole/best.safetensors --data %s --boxes %s", dir, faces, path);
  if (!strstr(out, "has a row in the boxes file") || strstr(out, "could be decoded"))
    fail_msg("a boxes file without the folder's rows:\n%s", out);
  /* --box on predict: four finite numbers, w and h > 0, on the image. */
  const char *bad[] = {"0,0,inf,inf", "nan,0,10,10", "0,0,0,10", "1,2,3", "0,0,1e30,10", "-100,-100,5,5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char args[1500];
    snprintf(args, sizeof args, "predict --weights %s/whole/best.safetensors --box %s %s/images/Synth_Person_0000_00.jpg",
             dir, bad[i], faces);
    int rc = exit_code(sp_test_run_cli(args, 1, out, sizeof out));
    if (rc != 1 && rc != 2) fail_msg("--box %s: exit %d\n%s", bad[i], rc, out);
    assert_non_null(strstr(out, "--box"));
  }
}

/* ------------------------------------------------------------ real photos */

/* Trains a tiny 68-point heatmap model on the synthetic faces (crops cut from
 * the points: the model predicts faces it is given), enough to run. Validated
 * on the points' crops too: the detector's boxes for validation cost 66 of
 * the run's 78 s under the sanitizers (the detector at -O0), and what
 * this model scores is not what these tests check. */
static void train_68_model(void) {
  spry(0, 1,
       "train %s/configs/faces68-resunet18.yaml --set data.path=%s --set data.box=points --set data.val_box=points "
       "--set data.boxes= "
       "--set data.split=none --set data.size=64 --set data.crop_size=72 --set epochs=1 --set batch=8 "
       "--set out=%s/r68 --set workers=2",
       getenv("SPRY_SOURCE_DIR"), faces, dir);
}

/* On dlib_faces_68's group photos, predict with no box finds every face the
 * XML files list (dlib's detector made those boxes), and each face's points
 * lie in the crop cut around its box. */
static void predict_finds_every_face_of_group_photos(void **state) {
  (void)state;
  char buf[1024];
  const char *d68 = sp_test_data_path("dlib_faces_68", buf, sizeof buf);
  if (!d68) skip();
  train_68_model();
  const char *xmls[] = {"training_with_face_landmarks.xml", "testing_with_face_landmarks.xml"};
  int total = 0;
  /* Under the sanitizers the first file only (5 photos, 18 faces): each
   * predict there is a Debug build's detector and model, seconds a photo. */
  const int files = sp_test_sanitized() ? 1 : 2;
  for (int x = 0; x < files; x++) {
    sp_dataset ds;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", d68, xmls[x]);
    sp_dataset_init(&ds);
    assert_int_equal(sp_read_dlib_xml(path, &ds), 0);
    for (int i = 0; i < ds.n; i++) {
      if (i && !strcmp(ds.s[i].image, ds.s[i - 1].image)) continue;
      spry(0, 1, "predict --weights %s/r68/best.safetensors %s", dir, ds.s[i].image);
      static float boxes[64][4], pts[64 * 136];
      int n = parse_faces(strchr(out, '{'), boxes, pts, 68, 64), want = 0;
      for (int j = i; j < ds.n && !strcmp(ds.s[j].image, ds.s[i].image); j++) {
        want++;
        int found = 0;
        for (int f = 0; f < n; f++) found |= sp_box_iou(boxes[f], ds.s[j].box) >= 0.5;
        if (!found) fail_msg("%s: the face at %g,%g (%gx%g) was not found", ds.s[i].image, ds.s[j].box[0],
                             ds.s[j].box[1], ds.s[j].box[2], ds.s[j].box[3]);
      }
      if (n != want) fail_msg("%s: %d faces found, the XML lists %d", ds.s[i].image, n, want);
      for (int f = 0; f < n; f++) {
        sp_crop_rect r = sp_crop_rect_for_box(boxes[f], 0.1f); /* the run's margin */
        for (int j = 0; j < 68; j++) {
          float px = pts[(size_t)f * 136 + 2 * j], py = pts[(size_t)f * 136 + 2 * j + 1];
          if (!(px >= r.x0 - 1 && px <= r.x0 + r.w && py >= r.y0 - 1 && py <= r.y0 + r.h))
            fail_msg("%s face %d: point %d (%g, %g) outside its crop", ds.s[i].image, f, j, px, py);
        }
      }
      total += n;
    }
    sp_dataset_free(&ds);
  }
  assert_int_equal(total, files == 2 ? 18 + 25 : 18);
  /* A photo with no face beside one with faces: "faces":[] and a note, and
   * the other photo is still predicted; exit 0. */
  char blank[700];
  snprintf(blank, sizeof blank, "%s/blank.png", dir);
  uint8_t grey[64 * 48 * 3];
  memset(grey, 128, sizeof grey);
  assert_int_equal(sp_write_png(blank, grey, 48, 64, 3), 0);
  spry(0, 1, "predict --weights %s/r68/best.safetensors %s %s/2008_001009.jpg --overlay %s/ov.png", dir, blank, d68, dir);
  assert_non_null(strstr(out, "blank.png: no face found"));
  assert_non_null(strstr(out, "\"faces\":[]}"));
  assert_non_null(strstr(out, "2008_001009.jpg\",\"faces\":[{\"box\""));
  /* Morphing two plain photos takes the largest face of each. */
  spry(0, 0, "morph --weights %s/r68/best.safetensors %s/2008_001009.jpg %s/2009_004587.jpg --out %s/morph --frames 2",
       dir, d68, d68, dir);
  assert_non_null(strstr(out, "\"points_from\":\"model\""));
}

/* The seed's part 2 as shipped (fewer epochs), on IMM's validation persons:
 * predict on the plain photos scores what eval scores. */
static void imm_predict_matches_eval(void **state) {
  (void)state;
  char buf[1024];
  const char *imm = sp_test_data_path("imm_face_db", buf, sizeof buf);
  if (!imm) skip();
  if (sp_test_sanitized()) skip(); /* a real training run: minutes under ASan */
  spry(0, 1, "train %s/configs/imm-face58.yaml --set data.path=%s --set epochs=10 --set out=%s/imm",
       getenv("SPRY_SOURCE_DIR"), imm, dir);
  spry(0, 0, "eval --weights %s/imm/best.safetensors", dir);
  double eval_px = json_number(strrchr(out, '{'), "mean_px");
  assert_non_null(strstr(out, "\"box\":\"image\""));
  /* Persons 33-40, six views each: the run's validation split. */
  static char args[1 << 15];
  int o = snprintf(args, sizeof args, "predict --weights %s/imm/best.safetensors", dir), n = 0;
  float *truth = malloc(sizeof(float) * 58 * 2 * 48);
  for (int person = 33; person <= 40; person++)
    for (int view = 1; view <= 6; view++) {
      char stem[1200], path[1300];
      snprintf(stem, sizeof stem, "%s/%02d-%d%c", imm, person, view, 'm');
      snprintf(path, sizeof path, "%s.dat", stem);
      if (access(path, F_OK) != 0) snprintf(stem, sizeof stem, "%s/%02d-%d%c", imm, person, view, 'f');
      sp_kp_sample s;
      snprintf(path, sizeof path, "%s.dat", stem);
      assert_int_equal(sp_read_imm_dat(path, &s), 0);
      memcpy(truth + (size_t)n * 116, s.pts, sizeof(float) * 116);
      sp_kp_sample_free(&s);
      o += snprintf(args + o, sizeof args - (size_t)o, " %s.jpg", stem);
      n++;
    }
  spry(0, 0, "%s", args);
  double predict_px = mean_error(out, n, truth, 58);
  free(truth);
  printf("# IMM persons 33-40, whole photos: eval %.3f px, predict %.3f px\n", eval_px, predict_px);
  if (fabs(eval_px - predict_px) > 0.5) fail_msg("predict %.3f px, eval %.3f px", predict_px, eval_px);
}

static int setup(void **state) {
  (void)state;
  if (!sp_test_tmpdir(dir, sizeof dir)) return -1;
  snprintf(faces, sizeof faces, "%s/faces", dir);
  char args[800];
  snprintf(args, sizeof args, "synth faces --count 48 --out %s --seed 3 --quiet", faces);
  return exit_code(sp_test_run_cli(args, 1, out, sizeof out)) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(dir);
  return 0;
}

int main(void) {
  if (!getenv("SPRY_BIN") || !getenv("SPRY_SOURCE_DIR")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(predict_on_whole_photos_matches_eval),
      cmocka_unit_test(eval_names_its_boxes),
      cmocka_unit_test(predict_finds_every_face_of_group_photos),
      cmocka_unit_test(imm_predict_matches_eval),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
