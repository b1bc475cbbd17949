/* Global gradient norm and clip_grad_norm_ against PyTorch. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/optim.h"
#include "spry/safetensors.h"
#include "testkit.h"

static void against_fixture(const char *file, int expect_clipped) {
  char path[1024], name[32];
  sp_st_file *f = sp_st_open(sp_test_fixture_path(file, path, sizeof path));
  if (!f) fail_msg("%s", sp_last_error());
  float g[3][64];
  sp_opt_param ps[3];
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "grad%d", i);
    const sp_tensor *t = sp_st_get(f, name);
    assert_non_null(t);
    int64_t n = sp_tensor_numel(t);
    assert_true(n <= 64);
    memcpy(g[i], t->data, (size_t)n * sizeof(float));
    ps[i] = (sp_opt_param){NULL, g[i], g[i], n, 0};
  }
  double max_norm = ((const float *)sp_st_get(f, "max_norm")->data)[0];
  double ref_norm = ((const float *)sp_st_get(f, "norm")->data)[0];
  double norm = sp_clip_grad_norm(3, ps, max_norm);
  print_message("%s: norm %.9g, PyTorch %.9g (rel %.2g)\n", file, norm, ref_norm, fabs(norm - ref_norm) / ref_norm);
  assert_true(fabs(norm - ref_norm) <= 1e-6 * ref_norm);
  assert_true((norm > max_norm) == expect_clipped);
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "clipped%d", i);
    const sp_tensor *t = sp_st_get(f, name);
    double r = sp_test_close_ratio(g[i], t->data, ps[i].numel, 1e-6, 1e-7, NULL);
    if (!(r <= 1)) fail_msg("%s: %s differs from PyTorch (ratio %g)", file, name, r);
  }
  if (expect_clipped) /* the clipped gradients have (just under) max_norm */
    assert_true(fabs(sp_grad_global_norm(3, ps) - max_norm) < 1e-5);
  sp_st_close(f);
}

static void clip_matches_pytorch(void **state) {
  (void)state;
  against_fixture("optim/clip.safetensors", 1);
  against_fixture("optim/clip_noop.safetensors", 0);
}

static void norm_of_known_values(void **state) {
  (void)state;
  float a[2] = {3, 0}, b[1] = {4};
  sp_opt_param ps[2] = {{"a", a, a, 2, 0}, {"b", b, b, 1, 1}};
  assert_true(sp_grad_global_norm(2, ps) == 5.0);
  /* Below the threshold nothing changes, bit for bit. */
  assert_true(sp_clip_grad_norm(2, ps, 5.5) == 5.0);
  assert_true(a[0] == 3 && b[0] == 4);
  assert_true(sp_clip_grad_norm(2, ps, 1.0) == 5.0);
  assert_true(fabsf(a[0] - 0.6f) < 1e-6f && fabsf(b[0] - 0.8f) < 1e-6f);
  /* All-zero gradients stay zero (no 0/0). */
  float z[3] = {0};
  sp_opt_param pz = {"z", z, z, 3, 0};
  assert_true(sp_clip_grad_norm(1, &pz, 1.0) == 0.0);
  assert_true(z[0] == 0 && z[1] == 0 && z[2] == 0);
  assert_true(sp_grad_global_norm(0, NULL) == 0.0);
}

/* Same data, different thread counts: the same norm to the last bit. */
static void norm_does_not_depend_on_threads(void **state) {
  (void)state;
  const int64_t n = sp_test_sanitized() ? 300001 : 3000001;
  float *g = sp_xmalloc((size_t)n * sizeof(float));
  sp_test_rng r = {5};
  sp_test_fill_uniform(&r, g, n, -1, 1);
  sp_opt_param p = {"g", g, g, n, 0};
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double one = sp_grad_global_norm(1, &p);
  omp_set_num_threads(3);
  double three = sp_grad_global_norm(1, &p);
  omp_set_num_threads(saved);
  assert_true(one == three);
  /* And it is the norm: E[u^2] = 1/3 for u uniform in [-1, 1]. */
  assert_true(fabs(one / sqrt((double)n / 3) - 1) < 0.01);
  free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(clip_matches_pytorch),
      cmocka_unit_test(norm_of_known_values),
      cmocka_unit_test(norm_does_not_depend_on_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
