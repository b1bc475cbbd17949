/* Flip tables: mirroring twice is the identity, user tables are validated,
 * and on the real data the mirrored, re-indexed mean shape matches the
 * unmirrored one (which a wrong table would not). */
#include <math.h>

#include "data_testutil.h"

static void flip_twice_is_identity(void **state) {
  (void)state;
  const sp_scheme *schemes[2] = {sp_scheme_ibug68(), sp_scheme_imm58()};
  sp_test_rng r = {7};
  for (int s = 0; s < 2; s++) {
    const sp_scheme *sc = schemes[s];
    float pts[2 * SP_MAX_KEYPOINTS], orig[2 * SP_MAX_KEYPOINTS];
    uint8_t flags[SP_MAX_KEYPOINTS], oflags[SP_MAX_KEYPOINTS];
    sp_test_fill_uniform(&r, pts, 2 * sc->k, -20, 300);
    for (int i = 0; i < sc->k; i++) flags[i] = (uint8_t)(i % 3);
    memcpy(orig, pts, sizeof(float) * 2 * sc->k);
    memcpy(oflags, flags, (size_t)sc->k);
    sp_scheme_flip_points(sc, pts, flags, 200);
    assert_true(memcmp(orig, pts, sizeof(float) * 2 * sc->k) != 0);
    /* Point i after one flip is the mirror of point flip[i]. */
    assert_float_equal(pts[0], 199 - orig[2 * sc->flip[0]], 1e-4);
    assert_int_equal(flags[0], oflags[sc->flip[0]]);
    sp_scheme_flip_points(sc, pts, flags, 200);
    for (int i = 0; i < 2 * sc->k; i++) assert_float_equal(pts[i], orig[i], 1e-4);
    assert_memory_equal(flags, oflags, (size_t)sc->k);
  }
  assert_ptr_equal(sp_scheme_for_k(68), sp_scheme_ibug68());
  assert_ptr_equal(sp_scheme_for_k(58), sp_scheme_imm58());
  assert_null(sp_scheme_for_k(5));
}

static void user_table_validation(void **state) {
  (void)state;
  sp_scheme sc;
  int good[5] = {1, 0, 2, 4, 3};
  assert_int_equal(sp_scheme_from_table("five", 5, good, &sc), 0);
  assert_int_equal(sc.k, 5);
  assert_int_equal(sc.flip[3], 4);
  int not_pairing[3] = {1, 2, 0};
  assert_int_equal(sp_scheme_from_table("cyc", 3, not_pairing, &sc), -1);
  assert_non_null(strstr(sp_last_error(), "not a pairing"));
  int out_of_range[2] = {0, 2};
  assert_int_equal(sp_scheme_from_table("oor", 2, out_of_range, &sc), -1);
}

/* Mean of shapes normalised by centroid and size, optionally mirrored about
 * each shape's centroid (x -> -x) and re-indexed with flip. */
static void mean_shape(const sp_dataset *ds, const int *flip, double *mean) {
  int k = ds->k;
  memset(mean, 0, sizeof(double) * 2 * k);
  for (int n = 0; n < ds->n; n++) {
    const float *p = ds->s[n].pts;
    double cx = 0, cy = 0, sc = 0;
    for (int i = 0; i < k; i++) { cx += p[2 * i]; cy += p[2 * i + 1]; }
    cx /= k; cy /= k;
    for (int i = 0; i < k; i++) sc += hypot(p[2 * i] - cx, p[2 * i + 1] - cy);
    sc /= k;
    for (int i = 0; i < k; i++) {
      int j = flip ? flip[i] : i;
      double x = (p[2 * j] - cx) / sc, y = (p[2 * j + 1] - cy) / sc;
      mean[2 * i] += (flip ? -x : x) / ds->n;
      mean[2 * i + 1] += y / ds->n;
    }
  }
}

static double mirror_error(const sp_dataset *ds, const int *flip) {
  double a[2 * SP_MAX_KEYPOINTS], b[2 * SP_MAX_KEYPOINTS], worst = 0;
  mean_shape(ds, NULL, a);
  mean_shape(ds, flip, b);
  for (int i = 0; i < ds->k; i++) worst = fmax(worst, hypot(a[2 * i] - b[2 * i], a[2 * i + 1] - b[2 * i + 1]));
  return worst; /* in units of the mean point-to-centroid distance */
}

static void check_mean_shape(const char *rel, const sp_scheme *sc) {
  char dir[1024];
  if (!sp_test_data_path(rel, dir, sizeof dir)) skip();
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.k, sc->k);
  double err = mirror_error(&ds, sc->flip);
  int ident[SP_MAX_KEYPOINTS];
  for (int i = 0; i < sc->k; i++) ident[i] = i;
  double err_wrong = mirror_error(&ds, ident);
  /* Swapping just the two eyes must also be caught. */
  int swapped[SP_MAX_KEYPOINTS];
  memcpy(swapped, sc->flip, sizeof(int) * sc->k);
  int t = swapped[0]; swapped[0] = swapped[1]; swapped[1] = t;
  double err_swap = mirror_error(&ds, swapped);
  print_message("%s: mirrored mean shape error %.4f (identity table %.3f, one swap %.3f)\n", rel, err, err_wrong,
                err_swap);
  assert_true(err < 0.15); /* real faces are not perfectly symmetric */
  assert_true(err_wrong > 0.5);
  assert_true(err_swap > 3 * err);
  sp_dataset_free(&ds);
}

static void youtube68_mean_shape_mirrors(void **state) {
  (void)state;
  check_mean_shape("youtube_faces_68", sp_scheme_ibug68());
}

static void imm58_mean_shape_mirrors(void **state) {
  (void)state;
  check_mean_shape("imm_face_db", sp_scheme_imm58());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(flip_twice_is_identity),
      cmocka_unit_test(user_table_validation),
      cmocka_unit_test(youtube68_mean_shape_mirrors),
      cmocka_unit_test(imm58_mean_shape_mirrors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
