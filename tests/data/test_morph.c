/* Face morphing geometry (src/data/morph.c): Delaunay triangulations are
 * valid and Delaunay on random, collinear, grid (cocircular) and duplicate
 * inputs and cover the frame; the triangle warp keeps an image warped to its
 * own shape and moves content with the points; morph ends are the faces
 * themselves; the mean face; and `spry morph` end to end on given points. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/data.h"
#include "spry/morph.h"
#include "spry/video.h"
#include "testkit.h"

static double orient2(const float *p, int a, int b, int c) {
  return ((double)p[2 * b] - p[2 * a]) * ((double)p[2 * c + 1] - p[2 * a + 1]) -
         ((double)p[2 * b + 1] - p[2 * a + 1]) * ((double)p[2 * c] - p[2 * a]);
}

/* In-circle determinant of d against positively oriented abc, divided by
 * its first-order change when the four points move by up to `snap` (the
 * triangulation decides on points snapped to a grid of that step): a value
 * above 1 is a real violation, not a rounding of the input. */
static double incircle_rel(const float *p, int a, int b, int c, double dx, double dy, double snap) {
  double ax = p[2 * a] - dx, ay = p[2 * a + 1] - dy, bx = p[2 * b] - dx, by = p[2 * b + 1] - dy, cx = p[2 * c] - dx,
         cy = p[2 * c + 1] - dy;
  double det = (ax * ax + ay * ay) * (bx * cy - cx * by) + (bx * bx + by * by) * (cx * ay - ax * cy) +
               (cx * cx + cy * cy) * (ax * by - bx * ay);
  double s = fabs(ax) + fabs(ay) + fabs(bx) + fabs(by) + fabs(cx) + fabs(cy);
  return det / (64 * s * s * s * snap + 1e-300);
}

/* Area of the convex hull (monotone chain). */
static int cmp_xy(const void *a, const void *b) {
  const float *p = a, *q = b;
  return p[0] < q[0] ? -1 : p[0] > q[0] ? 1 : p[1] < q[1] ? -1 : p[1] > q[1];
}
static double hull_area(const float *pts, int n) {
  float *s = malloc(sizeof(float) * 2 * (size_t)n), *h = malloc(sizeof(float) * 4 * (size_t)n + 8);
  memcpy(s, pts, sizeof(float) * 2 * (size_t)n);
  qsort(s, (size_t)n, 2 * sizeof(float), cmp_xy);
  int k = 0;
#define CROSS(o, a, b) (((double)h[2 * (a)] - h[2 * (o)]) * ((double)(b)[1] - h[2 * (o) + 1]) - ((double)h[2 * (a) + 1] - h[2 * (o) + 1]) * ((double)(b)[0] - h[2 * (o)]))
  for (int i = 0; i < n; i++) {
    while (k >= 2 && CROSS(k - 2, k - 1, s + 2 * i) <= 0) k--;
    h[2 * k] = s[2 * i], h[2 * k + 1] = s[2 * i + 1], k++;
  }
  for (int i = n - 2, lo = k + 1; i >= 0; i--) {
    while (k >= lo && CROSS(k - 2, k - 1, s + 2 * i) <= 0) k--;
    h[2 * k] = s[2 * i], h[2 * k + 1] = s[2 * i + 1], k++;
  }
#undef CROSS
  double area = 0;
  for (int i = 0; i + 1 < k; i++) area += (double)h[2 * i] * h[2 * i + 3] - (double)h[2 * i + 2] * h[2 * i + 1];
  free(s);
  free(h);
  return fabs(area) / 2;
}

/* Every property a triangulation of pts must have; `distinct` = 1 when all
 * points are distinct (then every point must be a vertex). */
static void check_triangulation(const float *pts, int n, const int *t, int nt, int distinct) {
  int *used = calloc((size_t)n, sizeof(int));
  double area = 0, lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  for (int i = 0; i < 2 * n; i++) lo[i & 1] = fmin(lo[i & 1], pts[i]), hi[i & 1] = fmax(hi[i & 1], pts[i]);
  const double snap = fmax(hi[0] - lo[0], hi[1] - lo[1]) / (1 << 18);
  for (int i = 0; i < nt; i++) {
    for (int e = 0; e < 3; e++) {
      assert_true(t[3 * i + e] >= 0 && t[3 * i + e] < n);
      used[t[3 * i + e]] = 1;
    }
    double o = orient2(pts, t[3 * i], t[3 * i + 1], t[3 * i + 2]);
    assert_true(o > 0); /* non-degenerate, positively oriented */
    area += o / 2;
    /* Empty circumcircle: no point strictly inside. */
    for (int j = 0; j < n; j++) {
      if (j == t[3 * i] || j == t[3 * i + 1] || j == t[3 * i + 2]) continue;
      assert_true(incircle_rel(pts, t[3 * i], t[3 * i + 1], t[3 * i + 2], pts[2 * j], pts[2 * j + 1], snap) < 1);
    }
  }
  if (distinct)
    for (int i = 0; i < n; i++) assert_true(used[i]);
  /* No gaps or overlaps: the triangles tile the convex hull. */
  double hull = hull_area(pts, n);
  assert_true(fabs(area - hull) <= 1e-6 * hull);
  free(used);
}

static void delaunay_random_sets(void **state) {
  (void)state;
  sp_test_rng r = {42};
  const int sizes[] = {3, 4, 10, 58, 200, 500};
  for (int s = 0; s < 6; s++)
    for (int rep = 0; rep < 3; rep++) {
      int n = sizes[s];
      float *p = malloc(sizeof(float) * 2 * (size_t)n);
      sp_test_fill_uniform(&r, p, 2 * n, 0, 100);
      int *t, nt = sp_delaunay(p, n, &t);
      assert_true(nt >= 1);
      check_triangulation(p, n, t, nt, 1);
      free(t);
      free(p);
    }
}

static void delaunay_degenerate_sets(void **state) {
  (void)state;
  int *t;
  /* Fewer than three points, all collinear, all equal: no triangles. */
  float two[4] = {0, 0, 1, 1};
  assert_int_equal(sp_delaunay(two, 2, &t), 0);
  assert_null(t);
  float line[20];
  for (int i = 0; i < 10; i++) line[2 * i] = (float)i * 3, line[2 * i + 1] = (float)i * 2 + 1;
  assert_int_equal(sp_delaunay(line, 10, &t), 0);
  float same[8] = {5, 5, 5, 5, 5, 5, 5, 5};
  assert_int_equal(sp_delaunay(same, 4, &t), 0);
  /* A bad point is an error. */
  float bad[6] = {0, 0, 1, NAN, 2, 0};
  assert_int_equal(sp_delaunay(bad, 3, &t), -1);
  /* A 10 x 10 grid: every square's corners are cocircular; still 2 triangles
   * per cell, none degenerate. */
  float grid[200];
  for (int i = 0; i < 100; i++) grid[2 * i] = (float)(i % 10), grid[2 * i + 1] = (float)(i / 10);
  int nt = sp_delaunay(grid, 100, &t);
  assert_int_equal(nt, 162);
  check_triangulation(grid, 100, t, nt, 1);
  free(t);
  /* A line plus one point off it: a fan. */
  line[18] = 10, line[19] = 40;
  nt = sp_delaunay(line, 10, &t);
  assert_int_equal(nt, 8);
  check_triangulation(line, 10, t, nt, 1);
  free(t);
  /* Duplicates: each position triangulated once, by its first index. */
  sp_test_rng r = {7};
  float dup[2 * 60];
  sp_test_fill_uniform(&r, dup, 2 * 40, 0, 50);
  memcpy(dup + 80, dup, sizeof(float) * 40); /* points 40..59 repeat 0..19 */
  nt = sp_delaunay(dup, 60, &t);
  check_triangulation(dup, 60, t, nt, 0);
  for (int i = 0; i < 3 * nt; i++) assert_true(t[i] < 40);
  free(t);
}

/* Face-like points plus the frame points: the triangles tile the whole frame
 * (area w-1 x h-1), also when points sit on or next to the border. */
static void delaunay_covers_the_frame(void **state) {
  (void)state;
  sp_test_rng r = {3};
  const int w = 64, h = 48, k = 30;
  float p[2 * (30 + SP_MORPH_FRAME_POINTS)];
  for (int rep = 0; rep < 20; rep++) {
    sp_test_fill_uniform(&r, p, 2 * k, 0, 1);
    for (int i = 0; i < k; i++) p[2 * i] *= (float)(w - 1), p[2 * i + 1] *= (float)(h - 1);
    /* Some on the border (collinear with the frame points). */
    p[0] = 0, p[3] = (float)(h - 1), p[4] = (float)(w - 1);
    sp_morph_frame_points(w, h, p + 2 * k);
    int *t, nt = sp_delaunay(p, k + SP_MORPH_FRAME_POINTS, &t);
    check_triangulation(p, k + SP_MORPH_FRAME_POINTS, t, nt, 1);
    double area = 0;
    for (int i = 0; i < nt; i++) area += orient2(p, t[3 * i], t[3 * i + 1], t[3 * i + 2]) / 2;
    assert_true(fabs(area - (w - 1.0) * (h - 1.0)) < 1e-6 * w * h);
    free(t);
  }
}

/* A smooth colour test image (no edges, so bilinear resampling error is the
 * only error). */
static uint8_t *pattern(int w, int h, int c, int seed) {
  uint8_t *im = malloc((size_t)w * h * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int ch = 0; ch < c; ch++)
        im[((size_t)y * w + x) * c + ch] =
            (uint8_t)(127.5 + 120 * sin(0.11 * x * (ch + 1) + 0.07 * y + seed) * cos(0.05 * y * (seed + 1) - ch));
  return im;
}

static void random_face(sp_test_rng *r, int w, int h, int k, float *pts) {
  for (int i = 0; i < k; i++) {
    pts[2 * i] = sp_test_rng_uniform(r, 0.15f, 0.85f) * (float)(w - 1);
    pts[2 * i + 1] = sp_test_rng_uniform(r, 0.15f, 0.85f) * (float)(h - 1);
  }
}

static void warp_to_same_shape_is_identity(void **state) {
  (void)state;
  const int w = 64, h = 48, k = 20, n = k + SP_MORPH_FRAME_POINTS;
  sp_test_rng r = {11};
  for (int c = 1; c <= 3; c += 2) {
    uint8_t *src = pattern(w, h, c, 1), *dst = malloc((size_t)w * h * c);
    float p[2 * (20 + SP_MORPH_FRAME_POINTS)];
    random_face(&r, w, h, k, p);
    sp_morph_frame_points(w, h, p + 2 * k);
    int *t, nt = sp_delaunay(p, n, &t);
    assert_int_equal(sp_warp_triangles(src, w, h, c, p, dst, w, h, p, t, nt), 0);
    /* Every pixel (edges included: the frame points cover them) is kept. */
    for (size_t i = 0; i < (size_t)w * h * c; i++) assert_true(abs(dst[i] - src[i]) <= 1);
    free(t), free(src), free(dst);
  }
}

/* Bright-pixel centroid of a grey image. */
static void centroid(const uint8_t *im, int w, int h, double *cx, double *cy) {
  double sx = 0, sy = 0, s = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double v = im[(size_t)y * w + x];
      sx += v * x, sy += v * y, s += v;
    }
  *cx = sx / s, *cy = sy / s;
}

static void warp_moves_a_dot_with_its_points(void **state) {
  (void)state;
  const int w = 80, h = 60, k = 4, n = k + SP_MORPH_FRAME_POINTS;
  uint8_t *src = calloc((size_t)w * h, 1), *dst = malloc((size_t)w * h);
  for (int y = 19; y <= 21; y++)
    for (int x = 29; x <= 31; x++) src[y * w + x] = 255;
  /* Four points around the dot; the destination shape moves them by (7, 4). */
  float ps[2 * 12] = {20, 12, 40, 12, 40, 28, 20, 28}, pd[2 * 12];
  sp_morph_frame_points(w, h, ps + 2 * k);
  memcpy(pd, ps, sizeof pd);
  for (int i = 0; i < k; i++) pd[2 * i] += 7, pd[2 * i + 1] += 4;
  int *t, nt = sp_delaunay(pd, n, &t);
  assert_int_equal(sp_warp_triangles(src, w, h, 1, ps, dst, w, h, pd, t, nt), 0);
  double cx, cy;
  centroid(dst, w, h, &cx, &cy);
  assert_true(fabs(cx - 37) < 0.05 && fabs(cy - 24) < 0.05);
  /* The dot stays a dot: its pixels are exactly where it moved. */
  assert_int_equal(dst[24 * w + 37], 255);
  assert_int_equal(dst[20 * w + 30], 0);
  free(t), free(src), free(dst);
}

static void morph_ends_are_the_faces(void **state) {
  (void)state;
  const int w = 50, h = 40, c = 3, k = 12;
  sp_test_rng r = {5};
  float pa[24], pb[24];
  random_face(&r, w, h, k, pa);
  random_face(&r, w, h, k, pb);
  uint8_t *a = pattern(w, h, c, 2), *b = pattern(w, h, c, 3), *out = malloc((size_t)w * h * c);
  assert_int_equal(sp_morph_frame(a, pa, b, pb, w, h, c, k, 0, 0, out), 0);
  assert_memory_equal(out, a, (size_t)w * h * c);
  assert_int_equal(sp_morph_frame(a, pa, b, pb, w, h, c, k, 1, 1, out), 0);
  assert_memory_equal(out, b, (size_t)w * h * c);
  /* Same shapes: the middle frame is the plain cross-dissolve. */
  assert_int_equal(sp_morph_frame(a, pa, b, pa, w, h, c, k, 0.5, 0.5, out), 0);
  for (size_t i = 0; i < (size_t)w * h * c; i++) assert_true(abs(2 * out[i] - a[i] - b[i]) <= 2);
  /* The morph object hands out its clamped points (frame points last) and
   * triangles; a middle frame differs from both ends. */
  sp_morph *m = sp_morph_new(a, pa, b, pb, w, h, c, k);
  assert_non_null(m);
  int n, nt;
  const float *q = sp_morph_points(m, 1, &n);
  assert_int_equal(n, k + SP_MORPH_FRAME_POINTS);
  assert_true(q[0] == pb[0] && q[2 * k + 2] == (float)(w - 1));
  assert_non_null(sp_morph_triangles(m, &nt));
  assert_true(nt > k);
  assert_int_equal(sp_morph_render(m, 0.5, 0.5, out), 0);
  assert_true(memcmp(out, a, (size_t)w * h * c) && memcmp(out, b, (size_t)w * h * c));
  sp_morph_free(m);
  /* Bad sizes are errors, not crashes. */
  assert_null(sp_morph_new(a, pa, b, pb, 1, h, c, k));
  assert_int_equal(sp_morph_frame(a, pa, b, pb, w, h, 2, k, 0.5, 0.5, out), -1);
  free(a), free(b), free(out);
}

static void mean_face_and_resize(void **state) {
  (void)state;
  const int w = 40, h = 40, k = 6;
  sp_test_rng r = {9};
  float pa[12], pb[12], mean[12];
  random_face(&r, w, h, k, pa);
  memcpy(pb, pa, sizeof pb);
  uint8_t *a = pattern(w, h, 1, 4), *b = pattern(w, h, 1, 6), *out = malloc((size_t)w * h);
  const uint8_t *imgs[2] = {a, b};
  const float *pts[2] = {pa, pb};
  assert_int_equal(sp_mean_face(imgs, pts, 2, w, h, 1, k, out, mean), 0);
  for (int i = 0; i < w * h; i++) assert_true(abs(2 * out[i] - a[i] - b[i]) <= 2);
  for (int i = 0; i < 2 * k; i++) assert_true(fabs(mean[i] - pa[i]) < 1e-4);
  /* Resize: a dot at (10, 10) of a 40 x 40 image lands where its mapped
   * point says in the 80 x 60 one. */
  memset(a, 0, (size_t)w * h);
  a[10 * w + 10] = 255;
  uint8_t *big = malloc(80 * 60);
  float p[2] = {10, 10};
  sp_morph_resize(a, w, h, 1, big, 80, 60, p, 1);
  assert_true(fabs(p[0] - 20.5) < 1e-5 && fabs(p[1] - 15.25) < 1e-5);
  double cx, cy;
  centroid(big, 80, 60, &cx, &cy);
  assert_true(fabs(cx - p[0]) < 0.3 && fabs(cy - p[1]) < 0.3);
  free(a), free(b), free(out), free(big);
}

/* ---- CLI ---- */

static char dir[256];

static void write_points_json(const char *path, const float *p, int k) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "{\"image\":\"x\",\"points\":[");
  for (int i = 0; i < k; i++) fprintf(f, "%s[%.3f,%.3f]", i ? "," : "", p[2 * i], p[2 * i + 1]);
  fprintf(f, "]}\n");
  fclose(f);
}

static void cli_morph_with_given_points(void **state) {
  (void)state;
  if (!getenv("SPRY_BIN")) skip();
  const int w = 60, h = 48, k = 10;
  sp_test_rng r = {21};
  float pa[20], pb[20];
  random_face(&r, w, h, k, pa);
  random_face(&r, w, h, k, pb);
  for (int i = 0; i < 2 * k; i++) pb[i] *= 1.5f; /* B is 90 x 72: resized to A's size */
  uint8_t *a = pattern(w, h, 3, 7), *b = pattern(90, 72, 3, 8);
  char pa_img[512], pb_img[512], pa_json[512], pb_json[512], out_dir[512], args[3000], out[8192], path[700];
  snprintf(pa_img, sizeof pa_img, "%s/a.png", dir);
  snprintf(pb_img, sizeof pb_img, "%s/b.png", dir);
  snprintf(pa_json, sizeof pa_json, "%s/a.json", dir);
  snprintf(pb_json, sizeof pb_json, "%s/b.json", dir);
  snprintf(out_dir, sizeof out_dir, "%s/morph/out", dir);
  assert_int_equal(sp_write_png(pa_img, a, h, w, 3), 0);
  assert_int_equal(sp_write_png(pb_img, b, 72, 90, 3), 0);
  write_points_json(pa_json, pa, k);
  write_points_json(pb_json, pb, k);
  snprintf(args, sizeof args, "morph --points-a %s --points-b %s %s %s --out %s --frames 4 --delay 5", pa_json,
           pb_json, pa_img, pb_img, out_dir);
  assert_int_equal(sp_test_run_cli(args, 1, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"frames\":5"));
  assert_non_null(strstr(out, "\"keypoints\":10"));
  /* frame_000 is A; frame_004 is B at A's size. */
  sp_image f0, f4;
  snprintf(path, sizeof path, "%s/frame_000.png", out_dir);
  assert_int_equal(sp_image_load(path, 3, &f0), 0);
  assert_true(f0.w == w && f0.h == h);
  assert_memory_equal(f0.px, a, (size_t)w * h * 3);
  snprintf(path, sizeof path, "%s/frame_004.png", out_dir);
  assert_int_equal(sp_image_load(path, 3, &f4), 0);
  uint8_t *b_small = malloc((size_t)w * h * 3);
  sp_morph_resize(b, 90, 72, 3, b_small, w, h, NULL, 0);
  assert_memory_equal(f4.px, b_small, (size_t)w * h * 3);
  sp_image_free(&f0), sp_image_free(&f4);
  /* points.png and the GIF: A -> B -> A is 8 frames. */
  snprintf(path, sizeof path, "%s/points.png", out_dir);
  sp_image pp;
  assert_int_equal(sp_image_load(path, 3, &pp), 0);
  assert_true(pp.w > pp.h);
  sp_image_free(&pp);
  snprintf(path, sizeof path, "%s/morph.gif", out_dir);
  int gw, gh;
  uint8_t *rgb;
  assert_int_equal(sp_gif_read(path, &gw, &gh, &rgb), 8);
  assert_true(gw == w && gh == h);
  free(rgb);
  /* Mismatched point counts, a missing image, a bad point file: errors. */
  write_points_json(pb_json, pb, k - 1);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 1);
  assert_non_null(strstr(out, "correspond"));
  snprintf(args, sizeof args, "morph --points-a %s --points-b %s %s %s/nothing.png --out %s", pa_json, pa_json,
           pa_img, dir, out_dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 1);
  FILE *f = fopen(pb_json, "w");
  fputs("{\"points\": [[1, 2], [3]]}", f);
  fclose(f);
  snprintf(args, sizeof args, "morph --points-a %s --points-b %s %s %s --out %s", pa_json, pb_json, pa_img, pa_img,
           out_dir);
  assert_int_equal(sp_test_cli_exit(args, out, sizeof out), 1);
  assert_non_null(strstr(out, "point 1"));
  snprintf(args, sizeof args, "morph %s %s --out %s", pa_img, pa_img, out_dir);
  assert_int_equal(sp_test_run_cli(args, 1, out, sizeof out) >> 8, 2); /* neither weights nor points */
  free(a), free(b), free(b_small);
}

/* Two real IMM faces with their annotated points (.dat), end to end. */
static void imm_faces_morph(void **state) {
  (void)state;
  char b1[1024], b2[1024], b3[1024], b4[1024];
  const char *ia = sp_test_data_path("imm_face_db/01-1m.jpg", b1, sizeof b1);
  const char *ib = sp_test_data_path("imm_face_db/07-1m.jpg", b2, sizeof b2);
  const char *da = sp_test_data_path("imm_face_db/01-1m.dat", b3, sizeof b3);
  const char *db = sp_test_data_path("imm_face_db/07-1m.dat", b4, sizeof b4);
  if (!ia || !ib || !da || !db || !getenv("SPRY_BIN")) skip();
  char args[6000], out[8192], out_dir[512];
  snprintf(out_dir, sizeof out_dir, "%s/imm", dir);
  snprintf(args, sizeof args, "morph --points-a %s --points-b %s %s %s --out %s --frames %d --gif-size 160", da, db,
           ia, ib, out_dir, sp_test_sanitized() ? 2 : 6);
  assert_int_equal(sp_test_run_cli(args, 1, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"keypoints\":58"));
}

int main(void) {
  if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(delaunay_random_sets),
      cmocka_unit_test(delaunay_degenerate_sets),
      cmocka_unit_test(delaunay_covers_the_frame),
      cmocka_unit_test(warp_to_same_shape_is_identity),
      cmocka_unit_test(warp_moves_a_dot_with_its_points),
      cmocka_unit_test(morph_ends_are_the_faces),
      cmocka_unit_test(mean_face_and_resize),
      cmocka_unit_test(cli_morph_with_given_points),
      cmocka_unit_test(imm_faces_morph),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_test_rmtree(dir);
  return rc;
}
