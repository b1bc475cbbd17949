/* Our Winograd F(4x4, 3x3) on 16-channel blocks (backends/cpu/conv_wino16.c,
 * planned by conv_wino.c), the forward and input gradient of narrow f32 3x3
 * stride-1 layers in AVX-512 builds: against the reference backend in
 * training, inference and frozen plans (a batch norm and ReLU folded), on
 * sizes that leave partial tiles, an odd number of 16-channel panels, an
 * input gradient added onto another's, output channels split between two
 * threads, outputs written through the caches instead of streamed; against
 * oneDNN's Winograd on the same values; and taken only where it applies. */
#include <omp.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* Skips where the path is not built (no AVX-512 in this build) or oneDNN
 * picks 8-channel blocks (a CPU below AVX-512). */
static void require_16_lanes(void) {
  cmp_require_cpu();
#ifndef __AVX512F__
  printf("# built without AVX-512: the 16-lane Winograd is not compiled in: skipped\n");
  skip();
#endif
  cmp_require_avx512("the 16-lane Winograd");
}

/* image -> 3x3 16 -> BN -> ReLU -> 3x3 48 (ours: three panels, forward and
 * input gradient) -> BN -> ReLU -> 3x3 32 with a bias (ours) -> ReLU -> 1x1 head. */
static sp_value b_stack(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "c0", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}), "bn0"));
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "c1", (sp_conv_args){.out_ch = 48, .kernel = 3, .pad = 1}), "bn1"));
  x = sp_relu(g, sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1, .bias = 1}));
  return sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

static void run_counted(const cmp_case *k, long at_least) {
  cmp_run_counted(k, &cpu_wino16_calls, at_least, "16-lane Winograd calls");
}

static void against_ref(void **st) {
  (void)st;
  require_16_lanes();
  cpu_wino16_min_tiles = 1; /* small images: a few tiles */
  /* Training: c1 and c2 forward and input gradient (c0 reads 3 channels). */
  cmp_case k = {"wino16, training, 7x9", b_stack, 2, 3, 7, 9, 1, 0, 0, 0};
  run_counted(&k, 4);
  k = (cmp_case){"wino16, training, 13x10", b_stack, 3, 3, 13, 10, 1, 0, 0, 0};
  run_counted(&k, 4);
  k = (cmp_case){"wino16, inference, 5x6", b_stack, 2, 3, 5, 6, 0, 0, 0, 0};
  run_counted(&k, 2);
  k.flags = SP_PLAN_FROZEN;
  k.label = "wino16, frozen, batch norm and ReLU folded";
  run_counted(&k, 2);
  k = (cmp_case){"wino16, input gradient added", cmp_b_3x3_two_readers, 2, 3, 9, 7, 1, 0, 0, 0};
  run_counted(&k, 4); /* a and b, forward and input gradient (pre reads 3 channels) */
  /* Outputs through the caches (the stores that streaming replaces). */
  cpu_wino16_stream = 0;
  k = (cmp_case){"wino16, training, stores through the caches", b_stack, 2, 3, 7, 9, 1, 0, 0, 0};
  run_counted(&k, 4);
  cpu_wino16_stream = 1;
  /* Few tiles, two threads: the forward splits the output panels. */
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  k = (cmp_case){"wino16, frozen, output channels split", b_stack, 1, 3, 8, 8, 0, SP_PLAN_FROZEN, 0, 0};
  run_counted(&k, 2);
  k = (cmp_case){"wino16, training, output channels split", b_stack, 1, 3, 8, 8, 1, 0, 0, 0};
  run_counted(&k, 4);
  omp_set_num_threads(threads);
  /* At the default threshold, on enough tiles (4 x 4 x 4 = 64, some partial). */
  cpu_wino16_min_tiles = 64;
  k = (cmp_case){"wino16, training, 15x13, default threshold", b_stack, 4, 3, 15, 13, 1, 0, 0, 0};
  run_counted(&k, 4);
}

static void ours_or_onednn(int path) { cpu_wino16_on = path == 0; }

/* The same convolutions summed another way: within f32 rounding of oneDNN's
 * Winograd (or direct) kernels, gradients included. */
static void same_as_onednn(void **st) {
  (void)st;
  require_16_lanes();
  const cmp_two_opts o = {.must_differ = 1};
  cpu_wino16_min_tiles = 1;
  const cmp_case cases[] = {{"wino16 vs onednn", b_stack, 2, 3, 7, 9, 1, 0, 0, 0},
                            {"wino16 vs onednn, added", cmp_b_3x3_two_readers, 2, 3, 9, 7, 1, 0, 0, 0}};
  for (int c = 0; c < 2; c++) cmp_two_paths_with(&cases[c], ours_or_onednn, 2e-5, &o);
  cpu_wino16_on = 1;
  cpu_wino16_min_tiles = 64;
}

/* Bits of cpu_conv_wino_own (1 forward, 2 input gradient, 4 weight
 * gradient) for a training convolution in 16-channel blocks. */
static int passes(int n, int ic, int oc, int hw, int k, int stride) {
  void *s = cmp_conv_node(n, ic, oc, hw, hw, k, stride, 0, 0, dnnl_aBcd16b);
  const int r = cpu_conv_wino_own(s);
  cpu_node_free(s);
  return r;
}

/* Forward and input gradient, never the weight gradient (oneDNN's), from 16
 * channels in and out to cpu_wino16_max_c_train in a training plan, from
 * cpu_wino16_min_tiles output tiles; not for strides, other kernels or
 * channels off the 16-channel blocks. */
static void taken_where_it_applies(void **st) {
  (void)st;
  require_16_lanes();
  cpu_wino16_min_tiles = 64;
  assert_int_equal(passes(2, 32, 32, 28, 3, 1), 3);  /* 98 tiles */
  assert_int_equal(passes(2, 16, 48, 28, 3, 1), 3);  /* 16 in, three panels out */
  assert_int_equal(passes(2, 128, 64, 28, 3, 1), 3); /* the training limit */
  assert_int_equal(passes(2, 256, 64, 28, 3, 1), 0); /* over it */
  assert_int_equal(passes(1, 32, 32, 28, 3, 1), 0);  /* 49 tiles */
  assert_int_equal(passes(2, 24, 32, 28, 3, 1), 0);  /* 24 channels: a padded block */
  assert_int_equal(passes(2, 32, 32, 28, 3, 2), 0);  /* stride 2 */
  assert_int_equal(passes(2, 32, 32, 28, 1, 1), 0);  /* 1x1 */
  assert_int_equal(passes(2, 32, 32, 28, 5, 1), 0);  /* 5x5 */
  cpu_wino16_dx = 0;
  assert_int_equal(passes(2, 32, 32, 28, 3, 1), 1);
  cpu_wino16_dx = 1;
  cpu_wino16_on = 0;
  assert_int_equal(passes(2, 32, 32, 28, 3, 1), 0);
  cpu_wino16_on = 1;
}

/* A frozen plan transforms its weights once: it takes layers up to
 * cpu_wino16_max_c (256) channels, a training plan up to 128. */
static void frozen_takes_wider_layers(void **st) {
  (void)st;
  require_16_lanes();
  cpu_wino16_min_tiles = 64;
  for (int frozen = 0; frozen < 2; frozen++)
    for (int c = 128; c <= 512; c *= 2) {
      dnnl_memory_desc_t md;
      dnnl_dims_t dims = {4, c, 14, 14};
      assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_aBcd16b), dnnl_success);
      sp_conv2d_attr at = {1, 1, 1, 1, 1, 1, 1};
      sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(4, c, 14, 14), sp_shape4(4, c, 14, 14),
                                   sp_shape4(c, c, 3, 3), 0, 0, &md);
      if (frozen) p.frozen = 1, p.training = 0, p.run_backward = 0, p.param_grad[0] = 0, p.need_d_in[0] = 0;
      assert_int_equal(cpu_conv_prepare(&p), 0);
      const int want = c <= (frozen ? 256 : 128); /* 64 tiles */
      if ((cpu_conv_wino_own(p.state) & 1) != want)
        fail_msg("%d channels, frozen %d: forward taken %d", c, frozen, !want);
      cpu_node_free(p.state);
    }
}

/* Where the 16-lane chunks go: at most CPU_WINO16_MAX_CHUNK tiles each,
 * whole register blocks where that loads no thread more. */
static void chunks_fit(void **st) {
  (void)st;
  static const int64_t shapes[][3] = {{64, 56, 56}, {64, 14, 14}, {16, 28, 28}, {4, 8, 8}, {3, 13, 15}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    cpu_wino m;
    size_t u, work;
    assert_int_equal(cpu_wino_prepare(&m, shapes[i][0], shapes[i][1], shapes[i][2], 64, 64, 0, 1, 16, &u, &work), 0);
    printf("# %ld tiles, %d threads: chunks of %ld%s\n", (long)m.tiles, m.threads, (long)m.chunk,
           m.by_panels ? " (split by output channels)" : "");
    assert_true(m.chunk >= 1 && m.chunk <= (m.by_panels ? m.tiles : CPU_WINO16_MAX_CHUNK));
    assert_int_equal(m.lanes, 16);
  }
  cpu_wino m;
  size_t u, work;
  assert_int_equal(cpu_wino_prepare(&m, 4, 8, 8, 24, 32, 0, 1, 16, &u, &work), 1); /* 24 channels: not in 16s */
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn), cmocka_unit_test(taken_where_it_applies),
             cmocka_unit_test(frozen_takes_wider_layers), cmocka_unit_test(chunks_fit))
