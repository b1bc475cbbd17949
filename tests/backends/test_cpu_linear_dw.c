/* The f32 weight gradient of linear layers with few rows
 * (backends/cpu/linear_dw.c): against a double-precision sum for shapes
 * with every kind of tail (rows of dW not a multiple of 6, columns not of
 * 64 or 16), written fresh (streaming stores where aligned) and added onto
 * what is there, at an aligned and a misaligned destination; in a training
 * graph against the reference backend with the kernel and with sgemm; and
 * taken only up to cpu_linear_dw_max_rows rows. */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include <omp.h>

#include "backends/cpu/cpu.h"

static float unit(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / (float)(1u << 24) - 0.5f;
}

static void one_shape(int64_t m, int64_t n, int64_t k, int accumulate, int misalign) {
  uint32_t seed = (uint32_t)(m * 131 + n * 17 + k);
  float *dy = malloc(sizeof(float) * (size_t)(m * n)), *x = malloc(sizeof(float) * (size_t)(m * k));
  float *buf = sp_aligned_alloc(sizeof(float) * (size_t)(n * k + 16)), *dw = buf + misalign;
  double *want = malloc(sizeof(double) * (size_t)(n * k));
  assert_non_null(dy), assert_non_null(x), assert_non_null(buf), assert_non_null(want);
  for (int64_t i = 0; i < m * n; i++) dy[i] = unit(&seed);
  for (int64_t i = 0; i < m * k; i++) x[i] = unit(&seed);
  for (int64_t i = 0; i < n * k; i++) dw[i] = unit(&seed);
  double scale = 0;
  for (int64_t j = 0; j < n; j++)
    for (int64_t c = 0; c < k; c++) {
      double s = 0;
      for (int64_t t = 0; t < m; t++) s += (double)dy[t * n + j] * x[t * k + c];
      want[j * k + c] = accumulate ? s + dw[j * k + c] : s;
      if (fabs(want[j * k + c]) > scale) scale = fabs(want[j * k + c]);
    }
  float *pack = malloc(cpu_linear_dw_pack_bytes(m, n) + 1);
  assert_non_null(pack);
  cpu_linear_dw_f32(dy, x, dw, m, n, k, accumulate, omp_get_max_threads(), pack);
  free(pack);
  double worst = 0;
  for (int64_t i = 0; i < n * k; i++) worst = fmax(worst, fabs(dw[i] - want[i]));
  if (worst > 1e-5 * scale + 1e-7) {
    printf("dW m %ld n %ld k %ld accumulate %d misalign %d: max error %g of %g\n", (long)m, (long)n, (long)k,
           accumulate, misalign, worst, scale);
    fail();
  }
  free(dy), free(x), sp_aligned_free(buf), free(want);
}

static void against_double_sums(void **st) {
  (void)st;
  static const int64_t shapes[][3] = {{1, 1, 1},   {3, 7, 200},    {64, 13, 97}, {8, 64, 288}, {130, 5, 70},
                                      {64, 6, 64}, {17, 12, 1000}, {64, 19, 35}, {5, 6, 16}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int accumulate = 0; accumulate < 2; accumulate++)
      for (int misalign = 0; misalign < 2; misalign++)
        one_shape(shapes[i][0], shapes[i][1], shapes[i][2], accumulate, misalign);
}

static sp_value b_linear(sp_graph *g, sp_value x) {
  x = sp_linear(g, sp_flatten(g, x), "fc1", 3 * 9 * 7, 70, 1);
  return sp_linear(g, sp_relu(g, x), "fc2", 70, 13, 0);
}

static void graph_both_paths(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"linear dW kernel", b_linear, 5, 3, 9, 7, 1, 0, 1e-4, 0};
  cmp_run(&k);
  cpu_linear_dw_max_rows = 0; /* sgemm */
  k.label = "linear dW sgemm";
  cmp_run(&k);
  cpu_linear_dw_max_rows = 128;
}

static void taken_where_it_applies(void **st) {
  (void)st;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  assert_true(cpu_linear_dw_applies(64));
  assert_true(cpu_linear_dw_applies(128));
#endif
  assert_false(cpu_linear_dw_applies(129));
  assert_false(cpu_linear_dw_applies(0));
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_double_sums), cmocka_unit_test(graph_both_paths),
             cmocka_unit_test(taken_where_it_applies))
