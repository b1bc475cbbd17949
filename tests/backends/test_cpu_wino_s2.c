/* Our Winograd for f32 3x3 stride-2 convolutions on 8-channel blocks
 * (backends/cpu/conv_wino_s2.c), with oneDNN held to AVX2 so that it runs
 * on any machine: the forward against the reference backend in training,
 * inference and frozen plans (a batch norm and ReLU folded, a bias), even
 * and odd sizes that leave partial tiles and windows past the edge, against
 * oneDNN's direct kernel on the same values, and taken only where it
 * applies. */
#include <stdlib.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* cmp_b_s2_stack (backend_compare.h): c1, c2 (with a bias) and c3 ours,
 * forward and input gradient; c0 stride 1. */

static void run_counted(const cmp_case *k, long at_least) {
  cmp_run_counted(k, &cpu_wino_calls, at_least, "stride-2 Winograd products");
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  cpu_wino_s2_min_tiles = cpu_wino_s2_min_tiles_dx = 1; /* small images: a few tiles */
  cpu_wino_s2_min_c_in = 16;                            /* narrow layers: plans take it from 64 */
  /* 16x24: whole 9x9 windows inside; 13x19 and 7x9: odd sizes, the last
   * window past the bottom and right edges, partial output tiles; 64x64 at
   * batch 4: many chunks of tiles a thread. */
  static const int sizes[][3] = {{2, 16, 24}, {3, 13, 19}, {2, 7, 9}, {1, 40, 34}, {4, 64, 64}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char label[3][64];
    snprintf(label[0], sizeof label[0], "wino s2, training, %dx%d", sizes[i][1], sizes[i][2]);
    cmp_case k = {label[0], cmp_b_s2_stack, sizes[i][0], 3, sizes[i][1], sizes[i][2], 1, 0, 0, 0};
    run_counted(&k, 6); /* forward and input gradient of c1, c2, c3 */
    snprintf(label[1], sizeof label[1], "wino s2, inference, %dx%d", sizes[i][1], sizes[i][2]);
    k.label = label[1], k.training = 0;
    run_counted(&k, 3);
    snprintf(label[2], sizeof label[2], "wino s2, frozen, %dx%d", sizes[i][1], sizes[i][2]);
    k.label = label[2], k.flags = SP_PLAN_FROZEN; /* c1's batch norm and ReLU folded */
    run_counted(&k, 3);
  }
  const cmp_case k = {"wino s2, input gradient added", cmp_b_s2_two_readers, 2, 3, 13, 18, 1, 0, 0, 0};
  run_counted(&k, 4); /* a and b: forward and input gradient */
  cpu_wino_s2_min_tiles = 192, cpu_wino_s2_min_tiles_dx = 512;
  cpu_wino_s2_min_c_in = 64;
}

static void ours_or_onednn(int path) { cpu_wino_s2_on = path == 0; }

/* The same convolutions summed another way: within f32 rounding of
 * oneDNN's direct kernel, gradients included. */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_two_opts o = {.must_differ = 1};
  cpu_wino_s2_min_tiles = cpu_wino_s2_min_tiles_dx = 1, cpu_wino_s2_min_c_in = 16;
  const cmp_case k = {"wino s2 vs onednn", cmp_b_s2_stack, 2, 3, 15, 18, 1, 0, 0, 0};
  cmp_two_paths_with(&k, ours_or_onednn, 2e-5, &o);
  cpu_wino_s2_on = 1;
  cpu_wino_s2_min_tiles = 192, cpu_wino_s2_min_tiles_dx = 512, cpu_wino_s2_min_c_in = 64;
}

/* f32 3x3, stride 2, padding 1, 64 to 128 input channels: the forward
 * (bit 0) where output channels come in 16s, from 192 output tiles of 4x4;
 * the input gradient (bit 1) where input channels come in 16s, from 512
 * tiles of each input phase (its weights are transformed every step);
 * not narrower or wider layers, 1x1, few tiles, or with the switch off. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_conv_taken cases[] = {{64, 128, 3, 2, 16, 28, 1, 0},  {128, 128, 3, 2, 4, 56, 1, 0},
                                  {128, 128, 3, 2, 8, 56, 3, 0},  {32, 64, 3, 2, 16, 28, 0, 0},
                                  {256, 256, 3, 2, 16, 28, 0, 0}, {64, 120, 3, 2, 8, 56, 2, 0},
                                  {64, 128, 1, 2, 16, 28, 0, 0},  {64, 128, 3, 2, 1, 28, 0, 0}};
  cmp_conv_taken_check(cases, sizeof cases / sizeof cases[0], cpu_conv_wino_own);
  cpu_wino_s2_on = 0;
  void *s = cmp_conv_node(8, 128, 128, 56, 56, 3, 2, 0, 0, dnnl_aBcd8b);
  assert_int_equal(cpu_conv_wino_own(s), 0);
  cpu_node_free(s);
  cpu_wino_s2_on = 1;
}

CMP_AVX2_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn), cmocka_unit_test(taken_where_it_applies))
#else
CMP_CPU_MAIN()
#endif
