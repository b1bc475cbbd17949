/* The weight gradient of bf16 1x1 convolutions on AMX tiles
 * (backends/cpu/dw_amx.c): against double-precision sums of the same bf16
 * values for shapes with every edge (a 16-channel block left over on either
 * side, the transposed side swapped, positions not a multiple of 32, one
 * chunk and many, fewer positions than threads need), written fresh and
 * added; in training graphs (1x1 convolutions, a kernel = stride transposed
 * convolution, kxk convolutions on the packed im2col, chunked and all rows at
 * once) against oneDNN's matmul and the reference backend; and taken
 * only where it fits. Skips where AMX is not usable. */
#include <math.h>
#include <stdint.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include <omp.h>

#include "amx_tiles.h"
#include "core/bf16.h"

static void one_shape(int64_t rows, int64_t oc, int64_t ic, int accumulate) {
  uint32_t seed = (uint32_t)(rows * 7 + oc * 131 + ic);
  uint16_t *dy = malloc(sizeof(uint16_t) * (size_t)(rows * oc)), *x = malloc(sizeof(uint16_t) * (size_t)(rows * ic));
  float *dw = malloc(sizeof(float) * (size_t)(oc * ic));
  double *want = malloc(sizeof(double) * (size_t)(oc * ic));
  const int threads = omp_get_max_threads();
  char *scratch = sp_aligned_alloc(cpu_dw_amx_scratch_bytes(oc, ic, threads));
  assert_non_null(dy), assert_non_null(x), assert_non_null(dw), assert_non_null(want), assert_non_null(scratch);
  for (int64_t i = 0; i < rows * oc; i++) dy[i] = sp_bf16_round(unit(&seed));
  for (int64_t i = 0; i < rows * ic; i++) x[i] = sp_bf16_round(unit(&seed));
  for (int64_t i = 0; i < oc * ic; i++) dw[i] = unit(&seed);
  double scale = 1e-30;
  for (int64_t o = 0; o < oc; o++)
    for (int64_t c = 0; c < ic; c++) {
      double s = accumulate ? dw[o * ic + c] : 0.0;
      for (int64_t p = 0; p < rows; p++) s += (double)sp_bf16_widen(dy[p * oc + o]) * sp_bf16_widen(x[p * ic + c]);
      want[o * ic + c] = s;
      scale = fmax(scale, fabs(s));
    }
  cpu_dw_amx(dy, x, rows, oc, ic, dw, accumulate, scratch, threads);
  double worst = 0;
  for (int64_t i = 0; i < oc * ic; i++) worst = fmax(worst, fabs(dw[i] - want[i]));
  if (!(worst <= 1e-5 * scale)) {
    printf("rows %ld oc %ld ic %ld accumulate %d: max error %g of %g\n", (long)rows, (long)oc, (long)ic, accumulate,
           worst, scale);
    fail();
  }
  free(dy), free(x), free(dw), free(want), sp_aligned_free(scratch);
}

static void against_double_sums(void **st) {
  (void)st;
  need_amx();
  static const int64_t shapes[][3] = {{1, 16, 16},     {31, 16, 32},     {100, 48, 32},  {1000, 32, 80},
                                      {5000, 64, 256}, {3000, 512, 128}, {4099, 96, 16}, {70, 256, 256}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int accumulate = 0; accumulate < 2; accumulate++)
      one_shape(shapes[i][0], shapes[i][1], shapes[i][2], accumulate);
}

/* x -> conv3 -> [1x1 a (bias), 1x1 b] -> add -> 1x1 c -> 1x1 post: a and b
 * (32 -> 48, the wider side transposed) and c (48 -> 16) take the tiles. */
static sp_value b_1x1s(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  sp_value a = sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 48, .kernel = 1, .bias = 1});
  sp_value b = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 48, .kernel = 1});
  x = sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "c", (sp_conv_args){.out_ch = 16, .kernel = 1});
  return sp_conv2d(g, sp_relu(g, x), "post", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = 1});
}

static void tiles_or_matmul(int path) { cpu_conv_use_dw_amx = path == 0; }

static void graph_against_matmul_and_ref(void **st) {
  (void)st;
  need_amx();
  cpu_dw_amx_min_rows = 1;
  cmp_case k = {"1x1 dW on tiles", b_1x1s, 3, 3, 19, 13, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  k.tol = 0;
  cmp_two_paths(&k, tiles_or_matmul, 1e-4); /* both sum bf16 products in f32, in another order */
  cpu_conv_use_dw_amx = 1;
  cpu_dw_amx_min_rows = 2048;
}

/* A transposed convolution with kernel = stride (deconv_mm.c): its weight
 * gradient X^T G, 32 input channels x 2 x 2 x 24 columns, on the tiles. */
static sp_value b_up2(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 24, .kernel = 2, .stride = 2});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

static void deconv_against_matmul_and_ref(void **st) {
  (void)st;
  need_amx();
  cpu_dw_amx_min_rows = 1;
  cpu_deconv_mm_min_channels = 1;
  cmp_case k = {"deconv dW on tiles", b_up2, 3, 3, 11, 9, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  cmp_two_paths(&k, tiles_or_matmul, 1e-4);
  cpu_conv_use_dw_amx = 1;
  cpu_deconv_mm_min_channels = 128;
  cpu_dw_amx_min_rows = 2048;
}

/* kxk weight gradients (conv_bww_mm.c) with col packed: the products on the
 * tiles read col's tiles where they lie. 64 -> 64 3x3, 64 -> 48 3x3 stride
 * 2, 48 -> 32 dilated 3x3 (48 columns a tap: a 64-column block straddles two
 * taps). */
static sp_value b_kxk(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1});
  x = sp_conv2d(g, x, "c3", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1});
  x = sp_conv2d(g, x, "s2", (sp_conv_args){.out_ch = 48, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_conv2d(g, x, "dil", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 2, .dilation = 2});
  return sp_conv2d(g, x, "post", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* The kxk graph at two sizes against the reference and two paths against
 * each other; whole_min_t: cpu_bww_whole_min_t meanwhile. */
static void kxk_paths(const char *label, void (*choose)(int path), int64_t whole_min_t) {
  cpu_conv_bww_min_channels = 1;
  const int sizes[2][2] = {{9, 7}, {23, 19}};
  for (int i = 0; i < 2; i++) {
    cpu_bww_whole_min_t = whole_min_t;
    cmp_case k = {label, b_kxk, 3, 3, sizes[i][0], sizes[i][1], 1, SP_PLAN_BF16, 6e-2, 0};
    cmp_run(&k);
    cmp_two_paths(&k, choose, 1e-4);
  }
  cpu_conv_use_dw_amx = 1;
  cpu_bww_whole_min_t = 2 << 20;
  cpu_conv_bww_min_channels = 64;
}

static void kxk_against_matmul_and_ref(void **st) {
  (void)st;
  need_amx();
  kxk_paths("kxk dW on tiles", tiles_or_matmul, 2 << 20); /* the same bits: oneDNN's brgemm also starts from T's sums */
  void *c = cmp_conv_node(2, 64, 64, 9, 7, 3, 1, 0, 1, dnnl_acdb);
  assert_int_equal(cpu_conv_bww_amx(c), cpu_conv_bww_packed(c));
  cpu_node_free(c);
}

/* The whole-layer form (all rows at once, T's columns split among threads):
 * forced on the kxk graph's layers, against the chunked form and the
 * reference; and taken by a 512-channel 3x3 layer at 7x7 (ResNet-50's
 * layer4), not by one at 28x28. */
static void whole_or_chunks(int path) { cpu_bww_whole_min_t = path == 0 ? 0 : INT64_MAX; }

static void kxk_whole_layer(void **st) {
  (void)st;
  need_amx();
  kxk_paths("kxk dW, whole layer", whole_or_chunks, 0);
  void *c = cmp_conv_node(16, 512, 512, 7, 7, 3, 1, 0, 1, dnnl_acdb);
  if (cpu_conv_bww_amx(c)) assert_true(cpu_conv_bww_whole(c));
  cpu_node_free(c);
  c = cmp_conv_node(2, 128, 128, 28, 28, 3, 1, 0, 1, dnnl_acdb);
  assert_false(cpu_conv_bww_whole(c));
  cpu_node_free(c);
}

static void taken_where_it_fits(void **st) {
  (void)st;
  need_amx();
  assert_true(cpu_dw_amx_fits(50176, 256, 64));
  assert_true(cpu_dw_amx_fits(12544, 256, 768));
  assert_true(cpu_dw_amx_fits(3136, 1024, 512));
  assert_false(cpu_dw_amx_fits(784, 2048, 2048)); /* 4 M sums: oneDNN */
  assert_false(cpu_dw_amx_fits(50176, 68, 32));   /* 68 not in 16s */
  assert_false(cpu_dw_amx_fits(2047, 64, 64));    /* short */
  cpu_conv_use_dw_amx = 0;
  assert_false(cpu_dw_amx_fits(50176, 256, 64));
  cpu_conv_use_dw_amx = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_double_sums), cmocka_unit_test(graph_against_matmul_and_ref),
             cmocka_unit_test(deconv_against_matmul_and_ref), cmocka_unit_test(kxk_against_matmul_and_ref),
             cmocka_unit_test(kxk_whole_layer), cmocka_unit_test(taken_where_it_fits))
