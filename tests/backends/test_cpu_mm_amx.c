/* bf16 products on AMX tiles (backends/cpu/mm_amx.c): against double sums
 * of the same bf16 values for shapes with every edge (a last block of 16
 * rows, several column panels, K of one step and of many), both weight
 * packings, with a bias, added into C, and with the columns' statistics
 * against double statistics of C as stored; in training graphs (1x1
 * convolutions forward and backward, a batch norm taking its statistics
 * from the convolution before it) against the reference backend and
 * against oneDNN's kernels. Skips where AMX is not usable. */
#include <math.h>
#include <stdint.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include <omp.h>

#include "amx_tiles.h"
#include "backends/cpu/shares.h"
#include "core/bf16.h"

/* C = A B (+ bias) (+ C's old values) for one shape and packing; with
 * stats, the columns' mean and variance too; with f32, C in f32 (the
 * epilogue's c32: no rounding, no bias or statistics). */
static void shape_out(int64_t m, int64_t k, int64_t n, int transposed, int with_bias, int accumulate, int stats,
                      int f32) {
  uint32_t seed = (uint32_t)(m * 7 + k * 131 + n * 17 + transposed);
  const int threads = omp_get_max_threads();
  uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(m * k)), *c = malloc(sizeof(uint16_t) * (size_t)(m * n));
  uint16_t *bp = sp_aligned_alloc(cpu_mm_amx_packed_bytes(k, n));
  float *w = malloc(sizeof(float) * (size_t)(k * n)), *bias = malloc(sizeof(float) * (size_t)n);
  float *mean = malloc(sizeof(float) * (size_t)n), *var = malloc(sizeof(float) * (size_t)n);
  double *want = malloc(sizeof(double) * (size_t)(m * n));
  double *work = sp_aligned_alloc(cpu_mm_amx_stats_bytes(n, threads));
  assert_non_null(a), assert_non_null(c), assert_non_null(bp), assert_non_null(w), assert_non_null(bias);
  assert_non_null(mean), assert_non_null(var), assert_non_null(want), assert_non_null(work);
  for (int64_t i = 0; i < m * k; i++) a[i] = sp_bf16_round(unit(&seed));
  for (int64_t i = 0; i < k * n; i++) w[i] = unit(&seed);
  for (int64_t j = 0; j < n; j++) bias[j] = 3.0f + unit(&seed); /* a mean far from 0: the shifted sums matter */
  for (int64_t i = 0; i < m * n; i++) c[i] = sp_bf16_round(unit(&seed));
  float *cf = malloc(sizeof(float) * (size_t)(m * n));
  assert_non_null(cf);
  for (int64_t i = 0; i < m * n; i++) cf[i] = unit(&seed) * 4.0f; /* f32: old values not on the bf16 grid */
  /* B[kk][j] as the packing reads it: w [k][n], or w [n][k] transposed. */
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = (with_bias ? bias[j] : 0.0) +
                 (accumulate ? (f32 ? (double)cf[i * n + j] : sp_bf16_widen(c[i * n + j])) : 0.0);
      for (int64_t kk = 0; kk < k; kk++)
        s += (double)sp_bf16_widen(a[i * k + kk]) *
             sp_bf16_widen(sp_bf16_round(transposed ? w[j * k + kk] : w[kk * n + j]));
      want[i * n + j] = s;
    }
  cpu_mm_amx_pack(w, k, n, transposed, bp, threads);
  const cpu_mm_epilogue e = {.bias = with_bias ? bias : NULL,
                             .accumulate = accumulate,
                             .mean = stats ? mean : NULL,
                             .var = var,
                             .stats = work,
                             .c32 = f32 ? cf : NULL};
  cpu_mm_amx(a, m, k, bp, n, f32 ? NULL : c, &e, threads);
  double worst = 0;
  for (int64_t i = 0; i < m * n; i++) {
    /* One bf16 rounding of an f32 sum: 2^-8 relative, plus the sum's own
     * error; f32: the sum's error alone. */
    const double err = f32 ? fabs(cf[i] - want[i]) : fabs(sp_bf16_widen(c[i]) - want[i]) - ldexp(fabs(want[i]), -8);
    worst = fmax(worst, err);
  }
  if (!(worst <= 1e-4 * sqrt((double)k))) {
    printf("m %ld k %ld n %ld transposed %d bias %d accumulate %d: error %g past the rounding\n", (long)m, (long)k,
           (long)n, transposed, with_bias, accumulate, worst);
    fail();
  }
  for (int64_t j = 0; stats && j < n; j++) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < m; i++) s += sp_bf16_widen(c[i * n + j]);
    const double mu = s / (double)m;
    for (int64_t i = 0; i < m; i++) s2 += (sp_bf16_widen(c[i * n + j]) - mu) * (sp_bf16_widen(c[i * n + j]) - mu);
    const double v = s2 / (double)m;
    if (!(fabs(mean[j] - mu) <= 1e-6 * (fabs(mu) + 1) && fabs(var[j] - v) <= 1e-5 * v + 1e-9)) {
      printf("m %ld k %ld n %ld column %ld: mean %.9g var %.9g, want %.9g %.9g\n", (long)m, (long)k, (long)n, (long)j,
             mean[j], var[j], mu, v);
      fail();
    }
  }
  free(a), free(c), free(cf), sp_aligned_free(bp), free(w), free(bias), free(mean), free(var), free(want);
  sp_aligned_free(work);
}

static void one_shape(int64_t m, int64_t k, int64_t n, int transposed, int with_bias, int accumulate, int stats) {
  shape_out(m, k, n, transposed, with_bias, accumulate, stats, 0);
}

static void against_double_sums(void **st) {
  (void)st;
  need_amx();
  static const int64_t shapes[][3] = {{16, 32, 32},   {48, 64, 96},    {240, 96, 32}, {784, 512, 288}, {1008, 64, 64},
                                      {64, 2048, 64}, {32, 256, 1024}, {48, 8, 32},   {112, 16, 64}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int transposed = 0; transposed < 2; transposed++) {
      one_shape(shapes[i][0], shapes[i][1], shapes[i][2], transposed, 0, 0, 0);
      one_shape(shapes[i][0], shapes[i][1], shapes[i][2], transposed, 1, 0, 1);
      one_shape(shapes[i][0], shapes[i][1], shapes[i][2], transposed, 0, 1, 0);
      shape_out(shapes[i][0], shapes[i][1], shapes[i][2], transposed, 0, 0, 0, 1); /* f32 C, written */
      shape_out(shapes[i][0], shapes[i][1], shapes[i][2], transposed, 0, 1, 0, 1); /* ... and added onto */
    }
  /* Panels of 32 columns: many panels, the threads splitting them. */
  const int64_t panel = cpu_mm_amx_panel_bytes;
  cpu_mm_amx_panel_bytes = 1;
  one_shape(240, 64, 160, 1, 1, 0, 1);
  one_shape(784, 512, 288, 0, 0, 1, 0);
  cpu_mm_amx_panel_bytes = panel;
}

/* The work's shares (shares.h) taken as threads come free, in a fixed
 * order per thread, or all by a team of one: C and its columns'
 * statistics the same bits (they are summed per share, merged in share
 * order); and C's rows streamed past the caches (cpu_mm_epilogue.stream;
 * malloc's rows, some lines whole, some not) the same bytes as stored. */
static void shares_same_bits(void **st) {
  (void)st;
  need_amx();
  static const int64_t shapes[][3] = {{1008, 64, 64}, {784, 512, 288}, {3136, 96, 160}, {48, 64, 96}};
  const int threads = omp_get_max_threads();
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t m = shapes[i][0], k = shapes[i][1], n = shapes[i][2];
    uint32_t seed = (uint32_t)(m + k + n);
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(m * k)), *c[4];
    uint16_t *bp = sp_aligned_alloc(cpu_mm_amx_packed_bytes(k, n));
    float *w = malloc(sizeof(float) * (size_t)(k * n)), *bias = malloc(sizeof(float) * (size_t)n), *mean[4], *var[4];
    double *work = sp_aligned_alloc(cpu_mm_amx_stats_bytes(n, threads));
    for (int64_t j = 0; j < m * k; j++) a[j] = sp_bf16_round(unit(&seed));
    for (int64_t j = 0; j < k * n; j++) w[j] = unit(&seed);
    for (int64_t j = 0; j < n; j++) bias[j] = 3.0f + unit(&seed);
    cpu_mm_amx_pack(w, k, n, 0, bp, threads);
    for (int r = 0; r < 4; r++) {
      c[r] = malloc(sizeof(uint16_t) * (size_t)(m * n));
      mean[r] = malloc(sizeof(float) * (size_t)n), var[r] = malloc(sizeof(float) * (size_t)n);
      const cpu_mm_epilogue e = {.bias = bias, .mean = mean[r], .var = var[r], .stats = work, .stream = r == 3};
      cpu_shares_dynamic = r != 1;
      /* r = 2: inside a region of one thread, the products' own region is
       * one thread too (nested regions are inactive). */
#pragma omp parallel num_threads(r == 2 ? 1 : 2)
#pragma omp single
      cpu_mm_amx(a, m, k, bp, n, c[r], &e, threads);
    }
    cpu_shares_dynamic = 1;
    for (int r = 1; r < 4; r++)
      if (memcmp(c[0], c[r], sizeof(uint16_t) * (size_t)(m * n)) ||
          memcmp(mean[0], mean[r], sizeof(float) * (size_t)n) || memcmp(var[0], var[r], sizeof(float) * (size_t)n))
        fail_msg("m %ld k %ld n %ld: %s differs", (long)m, (long)k, (long)n,
                 r == 1   ? "a fixed order"
                 : r == 2 ? "a team of one"
                          : "streamed");
    for (int r = 0; r < 4; r++) free(c[r]), free(mean[r]), free(var[r]);
    free(a), sp_aligned_free(bp), free(w), free(bias), sp_aligned_free(work);
  }
}

/* x -> 3x3 -> [1x1 a (bias) -> bn, 1x1 b] -> add -> relu -> 1x1 c -> bn
 * -> relu -> 1x1 e -> relu -> 1x1 d -> bn -> 1x1 post: a, b, c (64 -> 96
 * -> 32 channels), e (32 -> 8) and d (8 -> 32: one short step of K) on the
 * tiles; the batch norms after a, c and d take their statistics. */
static sp_value b_1x1s(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1});
  sp_value a = sp_batchnorm(g, sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 96, .kernel = 1, .bias = 1}), "bna");
  sp_value b = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 96, .kernel = 1});
  x = sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "c", (sp_conv_args){.out_ch = 32, .kernel = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bnc"));
  x = sp_relu(g, sp_conv2d(g, x, "e", (sp_conv_args){.out_ch = 8, .kernel = 1}));
  x = sp_batchnorm(g, sp_conv2d(g, x, "d", (sp_conv_args){.out_ch = 32, .kernel = 1}), "bnd");
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = 1});
}

static void tiles_or_onednn(int path) { cpu_use_mm_amx = path == 0; }
/* Every training output past the caches (cpu_train_stream_cap 0), or none. */
static void streamed_or_stored(int path) {
  cpu_train_stream_cap = path == 0 ? 0 : INT64_MAX;
  cpu_mm_amx_stream = 1;
}
static void stats_in_conv_or_bn(int path) { cpu_bn_stats_offer = path == 0; }

/* The case against the reference with the input gradients on oneDNN
 * (`forward` products on the tiles) and on the tiles too (`with_dx`), each
 * against oneDNN's kernels (2e-2: oneDNN sums in another order, then a batch
 * norm scales the difference) and with the statistics computed by the
 * batch norms themselves (1e-2: a last-bit change moves the bf16 roundings
 * after it). */
static void both_ways(cmp_case *k, long forward, long with_dx, const cmp_two_opts *o) {
  for (cpu_mm_amx_dx = 0; cpu_mm_amx_dx < 2; cpu_mm_amx_dx++) {
    k->tol = 6e-2;
    cmp_run_counted(k, &cpu_mm_amx_calls, cpu_mm_amx_dx ? with_dx : forward, "tile products");
    k->tol = 0;
    cmp_two_paths_with(k, tiles_or_onednn, 2e-2, o);
    cmp_two_paths_with(k, stats_in_conv_or_bn, 1e-2, o);
  }
  cpu_mm_amx_dx = 0;
}

static void graph_against_onednn_and_ref(void **st) {
  (void)st;
  need_amx();
  /* 3 images of 8 x 10: 240 rows, a last block of 16. */
  cmp_case k = {"1x1 on tiles", b_1x1s, 3, 3, 8, 10, 1, SP_PLAN_BF16, 6e-2, 0};
  /* By default the forward of the convolutions whose batch norm takes the
   * statistics (a, c, d); with cpu_mm_amx_dx the input gradients of a, b,
   * c and e too (d's has 8 columns: oneDNN). */
  cmp_run_counted(&k, &cpu_mm_amx_stats_calls, 3, "products with statistics");
  const cmp_two_opts a_bias = {.shift_free = "a."};
  both_ways(&k, 3, 7, &a_bias);
  /* Batch norms on oneDNN's kernels take no statistics: the convolutions'
   * forward stays on oneDNN too. */
  cpu_bnorm_use_onednn = 1;
  const long before = cpu_mm_amx_calls;
  k.tol = 6e-2;
  cmp_run(&k);
  assert_int_equal(cpu_mm_amx_calls, before);
  cpu_bnorm_use_onednn = 0;
  cpu_use_mm_amx = 1;
  cpu_bn_stats_offer = 1;
}

/* x -> 3x3 (64) -> up 2x2 stride 2 (32) -> bn -> relu -> up (32) -> bn ->
 * 1x1 post: both up-layers forward on the tiles, their pixels written from
 * the product's rows, their batch norms taking the statistics; the first
 * one's input gradient on the tiles too (64 columns a row). */
static sp_value b_up(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1});
  x = sp_conv_transpose2d(g, x, "up1", (sp_deconv_args){.out_ch = 32, .kernel = 2, .stride = 2});
  x = sp_relu(g, sp_batchnorm(g, x, "bn1"));
  x = sp_conv_transpose2d(g, x, "up2", (sp_deconv_args){.out_ch = 32, .kernel = 2, .stride = 2});
  x = sp_batchnorm(g, x, "bn2");
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

static void up_layers_against_onednn_and_ref(void **st) {
  (void)st;
  need_amx();
  /* 2 images of 4 x 6: 48 rows (a last block of 16), 192 after the first up. */
  cmp_case k = {"up-layers on tiles", b_up, 2, 3, 4, 6, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run_counted(&k, &cpu_mm_amx_stats_calls, 2, "up-layers with statistics");
  both_ways(&k, 2, 4, NULL);
  cpu_use_mm_amx = 1;
  cpu_bn_stats_offer = 1;
}

/* Both graphs with the products' outputs (and the batch norms') streamed
 * and stored: the same bits; the streamed run did stream. */
static void streamed_same_bits(void **st) {
  (void)st;
  need_amx();
  const int64_t cap = cpu_train_stream_cap;
  cmp_case k[2] = {{"1x1 on tiles", b_1x1s, 3, 3, 8, 10, 1, SP_PLAN_BF16, 0, 0},
                   {"up-layers on tiles", b_up, 2, 3, 4, 6, 1, SP_PLAN_BF16, 0, 0}};
  for (int i = 0; i < 2; i++) {
    const long before = cpu_mm_amx_streamed;
    cmp_two_paths(&k[i], streamed_or_stored, 0);
    if (cpu_mm_amx_streamed == before) fail_msg("%s: nothing streamed", k[i].label);
  }
  cpu_train_stream_cap = cap;
}

static void taken_where_it_fits(void **st) {
  (void)st;
  need_amx();
  assert_true(cpu_mm_amx_fits(50176, 256, 64));
  assert_true(cpu_mm_amx_fits(784, 2048, 2048));
  assert_true(cpu_mm_amx_fits(16, 32, 32));
  assert_true(cpu_mm_amx_fits(802816, 8, 32));  /* one short step */
  assert_false(cpu_mm_amx_fits(50176, 24, 32)); /* K not in 32s, nor 8 or 16 */
  assert_false(cpu_mm_amx_fits(50176, 64, 16)); /* N not in 32s */
  assert_false(cpu_mm_amx_fits(49, 512, 512));  /* rows not in 16s */
  cpu_use_mm_amx = 0;
  assert_false(cpu_mm_amx_fits(50176, 256, 64));
  cpu_use_mm_amx = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_double_sums), cmocka_unit_test(shares_same_bits),
             cmocka_unit_test(graph_against_onednn_and_ref), cmocka_unit_test(up_layers_against_onednn_and_ref),
             cmocka_unit_test(streamed_same_bits), cmocka_unit_test(taken_where_it_fits))
