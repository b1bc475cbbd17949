/* Our weight gradient for f32 3x3 stride-2 convolutions on 8-channel blocks
 * (backends/cpu/conv_s2_dw.c), with oneDNN held to AVX2 so that it runs on
 * any machine: against the reference backend in training (rows of several
 * lengths, the padding's edges, several images a band and several bands a
 * thread, two readers of one input), added onto the last pass's, against
 * oneDNN's kernel on the same values, and taken only where it applies. */
#include <stdlib.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* cmp_b_s2_stack (backend_compare.h): c1 and c3 ours; c2 not (its bias's
 * gradient would need a pass of its own); c0 stride 1. */

/* Runs k, checking our loops ran at least `at_least` times. */
static void run_counted(const cmp_case *k, long at_least) {
  cmp_run_counted(k, &cpu_s2dw_calls, at_least, "stride-2 weight gradients");
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  /* c1 and c3: rows of 12 / 3 output positions (16 x 24), 20 / 5, 28 / 7;
   * a band holds several images at these sizes. */
  cmp_case k = {"s2dw, 16x24", cmp_b_s2_stack, 2, 3, 16, 24, 1, 0, 0, 0};
  run_counted(&k, 2);
  k = (cmp_case){"s2dw, 8x40", cmp_b_s2_stack, 3, 3, 8, 40, 1, 0, 0, 0};
  run_counted(&k, 2);
  k = (cmp_case){"s2dw, 24x56", cmp_b_s2_stack, 1, 3, 24, 56, 1, 0, 0, 0};
  run_counted(&k, 2);
  k = (cmp_case){"s2dw, two readers", cmp_b_s2_two_readers, 2, 3, 8, 16, 1, 0, 0, 0};
  run_counted(&k, 2);
  /* Several bands a thread (a band of one row). */
  cpu_s2dw_band_positions = 1;
  k = (cmp_case){"s2dw, a band a row", cmp_b_s2_stack, 3, 3, 16, 24, 1, 0, 0, 0};
  run_counted(&k, 2);
  cpu_s2dw_band_positions = 256;
}

/* A second backward pass without zero_grad adds the weight gradient onto
 * the first: twice the first (the adding write ran). */
static void weight_gradient_adds(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_case k = {"s2dw, weight gradient twice", cmp_b_s2_stack, 2, 3, 16, 24, 1, 0, 0, 0};
  const long before = cpu_s2dw_calls;
  cmp_grad_adds_twice(&k, "c1.weight", 5);
  assert_int_equal(cpu_s2dw_calls - before, 4); /* two passes of c1 and c3 */
}

static void ours_or_onednn(int path) { cpu_s2dw_own = path == 0; }

/* The same sums in another order: within f32 rounding of oneDNN's kernel. */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_two_opts o[2] = {{.grad_differs = "c1.weight"}, {.grad_differs = "a.weight"}};
  const cmp_case cases[] = {{"s2dw vs onednn", cmp_b_s2_stack, 2, 3, 16, 24, 1, 0, 0, 0},
                            {"s2dw vs onednn, two readers", cmp_b_s2_two_readers, 2, 3, 8, 16, 1, 0, 0, 0}};
  for (int c = 0; c < 2; c++) cmp_two_paths_with(&cases[c], ours_or_onednn, 2e-5, &o[c]);
  cpu_s2dw_own = 1;
}

/* f32 3x3, stride 2, padding 1, an even input, 8-channel blocks, input
 * channels in 8s up to 64, output channels in 16s, no bias; not for stride
 * 1, other kernels, an odd input or wider layers. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_conv_taken cases[] = {
      {16, 32, 3, 2, 2, 28, 1, 0}, {8, 16, 3, 2, 1, 56, 1, 0},   {64, 128, 3, 2, 1, 14, 1, 0},
      {24, 32, 3, 2, 2, 28, 1, 0}, {16, 24, 3, 2, 2, 28, 0, 0},  {16, 32, 3, 1, 2, 28, 0, 0},
      {16, 32, 3, 2, 2, 27, 0, 0}, {16, 32, 1, 2, 2, 28, 0, 0},  {16, 32, 5, 2, 2, 28, 0, 0},
      {16, 32, 3, 2, 2, 28, 0, 1}, {128, 128, 3, 2, 1, 28, 0, 0}};
  cmp_conv_taken_check(cases, sizeof cases / sizeof cases[0], cpu_conv_s2dw_own);
  cpu_s2dw_own = 0;
  void *s = cmp_conv_node(2, 16, 32, 28, 28, 3, 2, 0, 0, dnnl_aBcd8b);
  assert_int_equal(cpu_conv_s2dw_own(s), 0);
  cpu_node_free(s);
  cpu_s2dw_own = 1;
}

CMP_AVX2_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(weight_gradient_adds), cmocka_unit_test(same_as_onednn),
              cmocka_unit_test(taken_where_it_applies))
#else
CMP_CPU_MAIN()
#endif
