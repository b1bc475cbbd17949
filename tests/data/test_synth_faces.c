/* Synthetic faces: the folder reads back as a youtube_faces_68 dataset, is
 * byte-identical for a seed, the landmarks sit on the drawn features (checked
 * on clean renders, with shifted points as a control that must fail), the
 * model is mirror-symmetric under the iBUG flip table, and poses vary. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "data_testutil.h"
#include "spry/synth.h"

/* Renders without blur, noise, hair or ears: what is left must match the points. */
static sp_synth_face_options clean_options(void) {
  sp_synth_face_options o = sp_synth_face_defaults();
  o.min_size = 160;
  o.max_size = 240;
  o.blur_prob = 0;
  o.noise_max = 0;
  o.hair_prob = 0;
  o.ear_prob = 0;
  o.progress = 0;
  return o;
}

static int n_faces(int full) { return sp_test_sanitized() ? full / 3 : full; }

static const uint8_t *pixel(const sp_image *im, float x, float y) {
  int ix = (int)lroundf(x), iy = (int)lroundf(y);
  ix = ix < 0 ? 0 : ix >= im->w ? im->w - 1 : ix;
  iy = iy < 0 ? 0 : iy >= im->h ? im->h - 1 : iy;
  return im->px + ((size_t)iy * im->w + ix) * 3;
}

static float luma(const uint8_t *p) { return 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]; }
static float redness(const uint8_t *p) { return (float)p[0] / (1.0f + p[0] + p[1] + p[2]); }
static float colour_dist(const uint8_t *a, const uint8_t *b) {
  float d = 0;
  for (int i = 0; i < 3; i++) d += ((float)a[i] - b[i]) * ((float)a[i] - b[i]);
  return sqrtf(d);
}

static void file_bytes(const char *path, uint8_t **buf, size_t *len) { assert_int_equal(sp_read_file(path, buf, len), 0); }

static void folder_reads_back(void **state) {
  (void)state;
  char dir[256];
  sp_test_tmpdir(dir, sizeof dir);
  sp_synth_face_options o = sp_synth_face_defaults();
  o.min_size = 96;
  o.max_size = 160;
  o.per_identity = 6;
  o.progress = 0;
  int n = n_faces(30);
  assert_int_equal(sp_synth_faces(dir, n, 5, &o), 0);
  sp_dataset ds;
  sp_dataset_init(&ds);
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, n);
  assert_int_equal(ds.k, 68);
  assert_int_equal(ds.skipped, 0);
  assert_int_equal(ds.n_identities, (n + 5) / 6);
  assert_string_equal(ds.identities[0], "Synth_Person_0000");
  assert_non_null(strstr(ds.s[7].image, "images/Synth_Person_0001_01.jpg"));
  for (int i = 0; i < ds.n; i++) {
    sp_image im;
    assert_int_equal(sp_image_load(ds.s[i].image, 3, &im), 0);
    assert_in_range(im.w, 96, 160);
    assert_in_range(im.h, 96, 160);
    for (int k = 0; k < 68; k++) {
      assert_true(ds.s[i].pts[2 * k] >= 0 && ds.s[i].pts[2 * k] <= im.w - 1);
      assert_true(ds.s[i].pts[2 * k + 1] >= 0 && ds.s[i].pts[2 * k + 1] <= im.h - 1);
    }
    sp_image_free(&im);
  }
  /* The header is the real layout's: an empty first cell, then 0..135. */
  char path[512];
  snprintf(path, sizeof path, "%s/keypoints.csv", dir);
  uint8_t *csv;
  size_t len;
  file_bytes(path, &csv, &len);
  assert_true(len > 20 && !memcmp(csv, ",0,1,2,", 7));
  assert_non_null(strstr((char *)csv, ",134,135\nSynth_Person_0000_00.jpg,"));
  free(csv);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void same_seed_same_bytes(void **state) {
  (void)state;
  char a[256], b[256], c[256];
  sp_test_tmpdir(a, sizeof a);
  sp_test_tmpdir(b, sizeof b);
  sp_test_tmpdir(c, sizeof c);
  sp_synth_face_options o = sp_synth_face_defaults();
  o.min_size = 96;
  o.max_size = 128;
  o.progress = 0;
  o.per_identity = 4;
  o.threads = 1;
  assert_int_equal(sp_synth_faces(a, 8, 42, &o), 0);
  o.threads = 3; /* a different thread count must not matter */
  assert_int_equal(sp_synth_faces(b, 8, 42, &o), 0);
  assert_int_equal(sp_synth_faces(c, 8, 43, &o), 0);
  const char *files[3] = {"keypoints.csv", "images/Synth_Person_0000_00.jpg", "images/Synth_Person_0001_10.jpg"};
  for (int f = 0; f < 3; f++) {
    char pa[512], pb[512], pc[512];
    snprintf(pa, sizeof pa, "%s/%s", a, files[f]);
    snprintf(pb, sizeof pb, "%s/%s", b, files[f]);
    snprintf(pc, sizeof pc, "%s/%s", c, files[f]);
    uint8_t *x, *y, *z;
    size_t nx, ny, nz;
    file_bytes(pa, &x, &nx);
    file_bytes(pb, &y, &ny);
    file_bytes(pc, &z, &nz);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    assert_true(nx != nz || memcmp(x, z, nx) != 0); /* another seed, another face */
    free(x);
    free(y);
    free(z);
  }
  sp_test_rmtree(a);
  sp_test_rmtree(b);
  sp_test_rmtree(c);
}

/* Fractions of eyes darker than the cheek, outer-lip points on lip colour,
 * jaw points with skin inside and something else outside. `shift` moves all
 * points (a control: misplaced points must fail these checks). */
static void feature_scores(int n, float shift_x, float shift_y, double *eyes, double *lips, double *jaw) {
  sp_synth_face_options o = clean_options();
  int eye_ok = 0, eye_n = 0, lip_ok = 0, lip_n = 0, jaw_ok = 0, jaw_n = 0;
  static const int inner_of[12] = {60, 61, 61, 62, 63, 63, 64, 65, 65, 66, 67, 67};
  for (int f = 0; f < n; f++) {
    sp_image im;
    float p[136];
    sp_synth_face_info info;
    assert_int_equal(sp_synth_face_render(77, f, f % 5, &o, &im, p, &info), 0);
    for (int i = 0; i < 68; i++) {
      p[2 * i] += shift_x;
      p[2 * i + 1] += shift_y;
    }
    float cheek_red[2];
    for (int side = 0; side < 2; side++) {
      int b = side ? 42 : 36, corner = side ? 54 : 48;
      float ex = 0, ey = 0;
      for (int k = 0; k < 6; k++) {
        ex += p[2 * (b + k)] / 6;
        ey += p[2 * (b + k) + 1] / 6;
      }
      float cx = 0.6f * ex + 0.4f * p[2 * corner], cy = 0.6f * ey + 0.4f * p[2 * corner + 1];
      const uint8_t *cheek = pixel(&im, cx, cy);
      cheek_red[side] = redness(cheek);
      eye_ok += luma(pixel(&im, ex, ey)) < luma(cheek) - 8;
      eye_n++;
    }
    for (int i = 48; i < 60; i++) {
      const float *q = p + 2 * i, *r = p + 2 * inner_of[i - 48];
      if (hypotf(r[0] - q[0], r[1] - q[1]) < 2.5f) continue; /* lip too thin to sample */
      const uint8_t *s = pixel(&im, q[0] + 0.4f * (r[0] - q[0]), q[1] + 0.4f * (r[1] - q[1]));
      lip_ok += redness(s) > 0.5f * (cheek_red[0] + cheek_red[1]) + 0.02f;
      lip_n++;
    }
    float mx = 0, my = 0;
    for (int i = 0; i < 68; i++) {
      mx += p[2 * i] / 68;
      my += p[2 * i + 1] / 68;
    }
    for (int i = 1; i < 16; i++) {
      float tx = p[2 * (i + 1)] - p[2 * (i - 1)], ty = p[2 * (i + 1) + 1] - p[2 * (i - 1) + 1];
      float nl = hypotf(tx, ty) + 1e-6f, nx = ty / nl, ny = -tx / nl;
      float px = p[2 * i], py = p[2 * i + 1];
      if (nx * (px - mx) + ny * (py - my) < 0) {
        nx = -nx;
        ny = -ny;
      }
      const uint8_t *in = pixel(&im, px - 3 * nx, py - 3 * ny), *in2 = pixel(&im, px - 6 * nx, py - 6 * ny);
      const uint8_t *out = pixel(&im, px + 3 * nx, py + 3 * ny);
      jaw_ok += colour_dist(in, out) > 25 && colour_dist(in, in2) < colour_dist(in, out);
      jaw_n++;
    }
    sp_image_free(&im);
  }
  *eyes = (double)eye_ok / eye_n;
  *lips = (double)lip_ok / (lip_n ? lip_n : 1);
  *jaw = (double)jaw_ok / jaw_n;
}

static void landmarks_on_drawn_features(void **state) {
  (void)state;
  int n = n_faces(24);
  double eyes, lips, jaw;
  feature_scores(n, 0, 0, &eyes, &lips, &jaw);
  print_message("eyes %.2f lips %.2f jaw %.2f\n", eyes, lips, jaw);
  assert_true(eyes >= 0.9);
  assert_true(lips >= 0.9);
  assert_true(jaw >= 0.85);
  /* Control: points 7 px off are not on the features. */
  feature_scores(n, 0, -7, &eyes, &lips, &jaw);
  print_message("shifted: eyes %.2f lips %.2f jaw %.2f\n", eyes, lips, jaw);
  assert_true(eyes < 0.75 || lips < 0.75 || jaw < 0.7);
}

/* Shape normalised by centroid, mean radius and the eye line's angle (so
 * roll noise does not swamp the comparison), optionally mirrored (x -> -x)
 * and re-indexed. */
static void add_shape(const float *p, const int *flip, double *acc) {
  double cx = 0, cy = 0, sc = 0, q[136];
  for (int i = 0; i < 68; i++) {
    int j = flip ? flip[i] : i;
    q[2 * i] = flip ? -p[2 * j] : p[2 * j];
    q[2 * i + 1] = p[2 * j + 1];
    cx += q[2 * i] / 68;
    cy += q[2 * i + 1] / 68;
  }
  for (int i = 0; i < 68; i++) sc += hypot(q[2 * i] - cx, q[2 * i + 1] - cy) / 68;
  double a = -atan2(q[2 * 45 + 1] - q[2 * 36 + 1], q[2 * 45] - q[2 * 36]), ca = cos(a), sa = sin(a);
  for (int i = 0; i < 68; i++) {
    double x = (q[2 * i] - cx) / sc, y = (q[2 * i + 1] - cy) / sc;
    acc[2 * i] += ca * x - sa * y;
    acc[2 * i + 1] += sa * x + ca * y;
  }
}

static void mirror_symmetry(void **state) {
  (void)state;
  const sp_scheme *sc = sp_scheme_ibug68();
  sp_synth_face_options o = clean_options();
  o.min_size = o.max_size = 96; /* only the points matter here */
  int n = n_faces(90);
  double plain[136] = {0}, mirrored[136] = {0}, unindexed[136] = {0};
  for (int f = 0; f < n; f++) {
    sp_image im;
    float p[136];
    sp_synth_face_info info;
    assert_int_equal(sp_synth_face_render(9, f, 0, &o, &im, p, &info), 0);
    /* Exact: the flipped, re-indexed points are the mirrored parameters' points. */
    float flipped[136], q[136];
    memcpy(flipped, p, sizeof p);
    sp_scheme_flip_points(sc, flipped, NULL, (float)im.w);
    sp_synth_face_params mp = sp_synth_face_mirror(&info.params, im.w);
    sp_synth_face_landmarks(&mp, q);
    for (int i = 0; i < 136; i++) assert_float_equal(flipped[i], q[i], 1e-3);
    add_shape(p, NULL, plain);
    add_shape(p, sc->flip, mirrored);
    float r[136];
    memcpy(r, p, sizeof p);
    for (int i = 0; i < 68; i++) r[2 * i] = (float)(im.w - 1) - p[2 * i];
    add_shape(r, NULL, unindexed);
    sp_image_free(&im);
  }
  /* Batch means: mirrored + re-indexed matches; mirrored alone does not. */
  double iod = hypot(plain[2 * 45] - plain[2 * 36], plain[2 * 45 + 1] - plain[2 * 36 + 1]) / n;
  double worst = 0, worst_unindexed = 0;
  for (int i = 0; i < 68; i++) {
    worst = fmax(worst, hypot(plain[2 * i] - mirrored[2 * i], plain[2 * i + 1] - mirrored[2 * i + 1]) / n / iod);
    worst_unindexed =
        fmax(worst_unindexed, hypot(plain[2 * i] - unindexed[2 * i], plain[2 * i + 1] - unindexed[2 * i + 1]) / n / iod);
  }
  print_message("mean-shape mismatch %.3f IOD (without re-indexing %.3f)\n", worst, worst_unindexed);
  assert_true(worst < 0.05);
  assert_true(worst_unindexed > 0.5);
}

static void poses_and_sizes_vary(void **state) {
  (void)state;
  sp_synth_face_options o = sp_synth_face_defaults();
  o.progress = 0;
  int n = n_faces(60);
  double sum = 0, sum2 = 0, lo = 1e9, hi = -1e9, roll_lo = 1e9, roll_hi = -1e9;
  int wmin = 1 << 30, wmax = 0, left = 0, right = 0;
  for (int f = 0; f < n; f++) {
    sp_image im;
    float p[136];
    sp_synth_face_info info;
    assert_int_equal(sp_synth_face_render(3, f / 4, f % 4, &o, &im, p, &info), 0);
    double y = info.params.yaw;
    sum += y;
    sum2 += y * y;
    lo = fmin(lo, y);
    hi = fmax(hi, y);
    roll_lo = fmin(roll_lo, info.params.roll);
    roll_hi = fmax(roll_hi, info.params.roll);
    wmin = im.w < wmin ? im.w : wmin;
    wmax = im.w > wmax ? im.w : wmax;
    /* The pixels agree with the yaw: the nose tip moves toward the far jaw side. */
    float d0 = hypotf(p[60] - p[0], p[61] - p[1]), d16 = hypotf(p[60] - p[32], p[61] - p[33]);
    if (y > 15) right += d16 < d0;
    if (y < -15) left += d0 < d16;
    if (fabs(y) > 15) assert_true(y > 0 ? d16 < d0 : d0 < d16);
    sp_image_free(&im);
  }
  double sd = sqrt(sum2 / n - (sum / n) * (sum / n));
  print_message("yaw sd %.1f range %.0f..%.0f, roll %.0f..%.0f, widths %d..%d\n", sd, lo, hi, roll_lo, roll_hi, wmin, wmax);
  assert_true(sd > 10);
  assert_true(lo < -15 && hi > 15);
  assert_true(roll_lo < -8 && roll_hi > 8);
  assert_true(left > 0 && right > 0);
  assert_true(wmax - wmin > 80);
}

static void cli_writes_a_dataset(void **state) {
  (void)state;
  const char *bin = getenv("SPRY_BIN");
  if (!bin) skip();
  char dir[256], cmd[1024];
  sp_test_tmpdir(dir, sizeof dir);
  snprintf(cmd, sizeof cmd, "'%s' synth faces --count 5 --out '%s/out' --seed 7 --size 96,128 --quiet", bin, dir);
  assert_int_equal(system(cmd), 0);
  sp_dataset ds;
  sp_dataset_init(&ds);
  snprintf(cmd, sizeof cmd, "%s/out", dir);
  assert_int_equal(sp_dataset_open_dir(cmd, &ds), 0);
  assert_int_equal(ds.n, 5);
  sp_dataset_free(&ds);
  snprintf(cmd, sizeof cmd, "'%s' synth faces --count 0 --out '%s/x' 2>/dev/null", bin, dir);
  assert_int_not_equal(system(cmd), 0);
  /* strtoull would take "-1" as 2^64 - 1: the message promises non-negative. */
  snprintf(cmd, sizeof cmd, "'%s' synth faces --count 2 --seed -1 --out '%s/y' 2>/dev/null", bin, dir);
  assert_int_not_equal(system(cmd), 0);
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(folder_reads_back),           cmocka_unit_test(same_seed_same_bytes),
      cmocka_unit_test(landmarks_on_drawn_features), cmocka_unit_test(mirror_symmetry),
      cmocka_unit_test(poses_and_sizes_vary),        cmocka_unit_test(cli_writes_a_dataset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
