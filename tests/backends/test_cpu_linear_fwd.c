/* The f32 forward product of large linear layers below AVX-512
 * (backends/cpu/linear_fwd.c): against a double-precision sum for shapes
 * with every kind of tail (rows not a multiple of 16 or 8, outputs not of
 * 6: 1 to 5 left, inputs past one chunk of 512 and not a multiple of it), with and
 * without a bias, on 1 to 3 threads; in training and frozen graphs against
 * the reference backend (the kernel held to run); a frozen plan follows
 * its weights; and taken only where it applies. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include <omp.h>

#include "backends/cpu/cpu.h"

static void one_shape(int64_t m, int64_t k, int64_t n, int bias, int threads) {
  sp_test_rng rng = {(uint64_t)(m * 131 + n * 17 + k)};
  float *x = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
  float *b = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)(m * n));
  void *scratch = malloc(cpu_linear_fwd_scratch_bytes(m, k, n));
  assert_non_null(x), assert_non_null(w), assert_non_null(b), assert_non_null(y), assert_non_null(scratch);
  sp_test_fill_uniform(&rng, x, m * k, -0.5f, 0.5f);
  sp_test_fill_uniform(&rng, w, n * k, -0.5f, 0.5f);
  sp_test_fill_uniform(&rng, b, n, -0.5f, 0.5f);
  for (int64_t i = 0; i < m * n; i++) y[i] = NAN; /* every value must be written */
  cpu_linear_fwd_f32(x, w, bias ? b : NULL, y, m, k, n, threads, scratch);
  double worst = 0, scale = 0;
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) {
      double s = bias ? b[c] : 0.0;
      for (int64_t t = 0; t < k; t++) s += (double)x[r * k + t] * w[c * k + t];
      scale = fmax(scale, fabs(s));
      const double e = fabs(y[r * n + c] - s);
      worst = isnan(e) ? INFINITY : fmax(worst, e);
    }
  if (!(worst <= 1e-5 * scale + 1e-6))
    fail_msg("m %ld k %ld n %ld bias %d threads %d: max error %g of %g", (long)m, (long)k, (long)n, bias, threads,
             worst, scale);
  free(x), free(w), free(b), free(y), free(scratch);
}

static void require_kernel(void) {
#if !(defined(__AVX2__) && defined(__FMA__))
  skip(); /* the build has no kernel: oneDNN's product runs everywhere */
#endif
}

static void against_double_sums(void **st) {
  (void)st;
  require_kernel();
  static const int64_t shapes[][3] = {{16, 1, 1},   {17, 13, 7}, {23, 600, 13},  {64, 1100, 37}, {70, 512, 6},
                                      {33, 513, 5}, {8, 40, 11}, {64, 2048, 64}, {20, 70, 14},   {40, 515, 9}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int bias = 0; bias < 2; bias++)
      for (int threads = 1; threads <= 3; threads++) one_shape(shapes[i][0], shapes[i][1], shapes[i][2], bias, threads);
}

/* 20 rows: a block of 16 and one of 8, four of them past the batch. */
static sp_value b_linear(sp_graph *g, sp_value x) {
  x = sp_linear(g, sp_flatten(g, x), "fc1", 3 * 9 * 7, 70, 1);
  return sp_linear(g, sp_relu(g, x), "fc2", 70, 13, 0);
}

/* Held to run on any machine, on layers of any size. */
static void hold_on(void) { cpu_linear_fwd_on = 2, cpu_linear_fwd_min_weights = 0; }
static void restore(void) { cpu_linear_fwd_on = 1, cpu_linear_fwd_min_weights = 1 << 20; }

static void graphs_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  require_kernel();
  hold_on();
  cmp_case train = {"linear forward kernel, training", b_linear, 20, 3, 9, 7, 1, 0, 1e-4, 0};
  cmp_run_counted(&train, &cpu_linear_fwd_calls, 2, "linear_fwd");
  cmp_case frozen = {"linear forward kernel, frozen", b_linear, 20, 3, 9, 7, 0, SP_PLAN_FROZEN, 1e-4, 0};
  cmp_run_counted(&frozen, &cpu_linear_fwd_calls, 2, "linear_fwd");
  /* Against a plan that is not frozen (the helper adds the flag). */
  cmp_case plain = {"linear forward kernel, frozen and not", b_linear, 20, 3, 9, 7, 0, 0, 1e-4, 0};
  cmp_frozen_follows_weights(&plain, "fc1.weight", 1.5f);
  restore();
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  require_kernel();
  const int here = !sp_backend_cpu_avx512();                      /* by default below AVX-512 only */
  assert_int_equal(cpu_linear_fwd_applies(64, 6272, 1024), here); /* vgg-face's fc1 at batch 64 */
  assert_int_equal(cpu_linear_fwd_applies(16, 6272, 1024), here); /* at the fewest rows */
  assert_false(cpu_linear_fwd_applies(129, 6272, 1024));          /* more than the chunk's share of L2 */
  assert_false(cpu_linear_fwd_applies(15, 6272, 1024));           /* fewer */
  assert_false(cpu_linear_fwd_applies(64, 1024, 136));            /* fc2: weights in cache */
  cpu_linear_fwd_on = 2;
  assert_true(cpu_linear_fwd_applies(64, 6272, 1024));
  cpu_linear_fwd_on = 0;
  assert_false(cpu_linear_fwd_applies(64, 6272, 1024));
  restore();
  /* In a plan: fc1 and fc2 at batch 20 are under the weights' minimum. */
  const long before = cpu_linear_fwd_calls;
  cmp_case k = {"linear forward, small layers", b_linear, 20, 3, 9, 7, 0, SP_PLAN_FROZEN, 1e-4, 0};
  cmp_run(&k);
  assert_int_equal(cpu_linear_fwd_calls, before);
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_double_sums), cmocka_unit_test(graphs_against_ref),
             cmocka_unit_test(taken_where_it_applies))
