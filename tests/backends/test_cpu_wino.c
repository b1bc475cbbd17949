/* Our Winograd F(4x4, 3x3) for f32 3x3 convolutions on 8-channel blocks
 * (backends/cpu/conv_wino.c), with oneDNN held to AVX2 so that it runs
 * on any machine: forward and backward data against the reference backend
 * in training, inference and frozen plans (a batch norm and ReLU folded),
 * sizes that leave partial tiles at the edges, outputs streamed past the
 * caches, an input gradient added onto another's, a weight gradient added onto the last pass's, against oneDNN's
 * direct kernel on the same values, and taken only where it applies. */
#include <omp.h>
#include <stdlib.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* image -> 3x3 (16, not ours: 3 plain channels in) -> BN -> ReLU -> 3x3 32
 * (ours: forward, input and weight gradients) -> BN -> ReLU -> 3x3 16 (ours
 * but the weight gradient: it has a bias) -> 1x1 head. */
static sp_value b_stack(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "c0", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}), "bn0"));
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "c1", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}), "bn1"));
  x = sp_relu(g, sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1, .bias = 1}));
  return sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* Runs k, checking our products ran at least `at_least` times. */
static void run_counted(const cmp_case *k, long at_least) {
  cmp_run_counted(k, &cpu_wino_calls, at_least, "Winograd F(4x4, 3x3) products");
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  cpu_wino_min_tiles = cpu_wino_min_tiles_frozen = 1; /* small images: a few tiles */
  /* Training: c1 and c2 forward and backward data, c1's weight gradient. */
  cmp_case k = {"wino, training, 7x9", b_stack, 2, 3, 7, 9, 1, 0, 0, 0};
  run_counted(&k, 5);
  k = (cmp_case){"wino, training, 8x8", b_stack, 3, 3, 8, 8, 1, 0, 0, 0};
  run_counted(&k, 5);
  k = (cmp_case){"wino, inference, 5x6", b_stack, 2, 3, 5, 6, 0, 0, 0, 0};
  run_counted(&k, 2);
  k.flags = SP_PLAN_FROZEN;
  k.label = "wino, frozen, batch norm and ReLU folded";
  run_counted(&k, 2);
  /* Outputs past the caches (every output over the threshold here): even
   * widths with a short last tile (10 = 4 + 4 + 2, 6 = 4 + 2) stream; the
   * odd width above kept its stores. */
  cpu_bn_stream_bytes = 0;
  const long streamed = cpu_wino_streamed;
  k = (cmp_case){"wino, frozen, outputs streamed", b_stack, 2, 3, 6, 10, 0, SP_PLAN_FROZEN, 0, 0};
  run_counted(&k, 2);
  k = (cmp_case){"wino, training, outputs streamed", b_stack, 2, 3, 8, 6, 1, 0, 0, 0};
  run_counted(&k, 5);
  printf("# outputs streamed: %ld\n", cpu_wino_streamed - streamed);
  assert_true(cpu_wino_streamed - streamed >= 4); /* c1 and c2 forward, both plans */
  cpu_bn_stream_bytes = -1;
  k = (cmp_case){"wino, input gradient added", cmp_b_3x3_two_readers, 2, 3, 9, 7, 1, 0, 0, 0};
  run_counted(&k, 6); /* a and b: all three passes (pre reads the plain image) */
  /* The weight gradient's other form (wide layers: every tile transformed
   * first, whole xi a thread) on the same small layers. */
  cpu_wino_dw_per_thread_max = 0;
  k = (cmp_case){"wino, training, weight gradient over all tiles", b_stack, 2, 3, 7, 9, 1, 0, 0, 0};
  run_counted(&k, 5);
  cpu_wino_dw_per_thread_max = (size_t)1 << 20;
  /* Few tiles, two threads: c1's forward splits its two 16-channel panels
   * between them (by_panels); then the same with chunks of tiles only. */
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  k = (cmp_case){"wino, training, 7x9, output channels split", b_stack, 2, 3, 7, 9, 1, 0, 0, 0};
  run_counted(&k, 5);
  k.flags = SP_PLAN_FROZEN;
  k.training = 0;
  k.label = "wino, frozen, output channels split";
  run_counted(&k, 2);
  cpu_wino_by_panels_max_tiles = 0;
  k = (cmp_case){"wino, training, 7x9, tiles split only", b_stack, 2, 3, 7, 9, 1, 0, 0, 0};
  run_counted(&k, 5);
  cpu_wino_by_panels_max_tiles = 64;
  omp_set_num_threads(threads);
  /* At the default threshold, on enough tiles (3 x 4 x 4 = 48 here, some
   * partial). */
  cpu_wino_min_tiles = 48;
  k = (cmp_case){"wino, training, 13x15, default threshold", b_stack, 3, 3, 13, 15, 1, 0, 0, 0};
  run_counted(&k, 5);
  cpu_wino_min_tiles_frozen = 16;
}

/* A second backward pass without zero_grad adds the weight gradient onto
 * the first: twice the first (the adding write ran). */
static void weight_gradient_adds(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  cpu_wino_min_tiles = 1;
  const cmp_case k = {"wino, weight gradient twice", b_stack, 2, 3, 8, 9, 1, 0, 0, 0};
  const long before = cpu_wino_calls;
  cmp_grad_adds_twice(&k, "c1.weight", 5);
  assert_int_equal(cpu_wino_calls - before, 10); /* 5 a pass, c1's weight gradient among them */
  cpu_wino_min_tiles = 48;
}

static void ours_or_onednn(int path) { cpu_wino_own = path == 0; }

/* The same convolution summed another way: within f32 rounding of oneDNN's
 * direct kernel, gradients included. */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_two_opts o = {.must_differ = 1};
  cpu_wino_min_tiles = 1;
  const cmp_case cases[] = {{"wino vs onednn", b_stack, 2, 3, 7, 9, 1, 0, 0, 0},
                            {"wino vs onednn, added", cmp_b_3x3_two_readers, 2, 3, 9, 7, 1, 0, 0, 0}};
  for (int c = 0; c < 2; c++) cmp_two_paths_with(&cases[c], ours_or_onednn, 2e-5, &o);
  cpu_wino_own = 1;
  cpu_wino_min_tiles = 48;
}

/* f32 3x3, stride 1, padding 1, 8-channel blocks, from 48 output tiles of
 * 4x4: the forward where input channels come in 8s and output channels in
 * 16s, the input gradient where the other way round, the weight gradient as
 * forward; not for strides, other kernels, few tiles, or (the weight
 * gradient) a bias. Bits: 1 forward, 2 input gradient, 4 weight gradient. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  const cmp_conv_taken cases[] = {{16, 32, 3, 1, 2, 28, 7, 0}, {64, 64, 3, 1, 1, 28, 7, 0}, {16, 24, 3, 1, 2, 28, 2, 0},
                                  {24, 16, 3, 1, 2, 28, 5, 0}, {16, 32, 3, 2, 2, 28, 0, 0}, {16, 32, 1, 1, 2, 28, 0, 0},
                                  {16, 32, 5, 1, 2, 28, 0, 0}, {16, 32, 3, 1, 3, 14, 7, 0}, {16, 32, 3, 1, 2, 14, 0, 0},
                                  {16, 32, 3, 1, 2, 28, 3, 1}};
  cmp_conv_taken_check(cases, sizeof cases / sizeof cases[0], cpu_conv_wino_own);
  cpu_wino_own = 0;
  void *s = cmp_conv_node(2, 16, 32, 28, 28, 3, 1, 0, 0, dnnl_aBcd8b);
  assert_int_equal(cpu_conv_wino_own(s), 0);
  cpu_node_free(s);
  cpu_wino_own = 1;
}

/* A frozen (inference) plan transforms its weights once: it takes the
 * forward from cpu_wino_min_tiles_frozen tiles (16: 14x14 at batch 1),
 * where a training plan needs cpu_wino_min_tiles (48). */
static void frozen_from_fewer_tiles(void **st) {
  (void)st;
  cmp_require_avx2_cpu();
  for (int hw = 7; hw <= 14; hw += 7)
    for (int frozen = 0; frozen < 2; frozen++) {
      dnnl_memory_desc_t md;
      dnnl_dims_t dims = {1, 64, hw, hw};
      assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_aBcd8b), dnnl_success);
      sp_conv2d_attr at = {1, 1, 1, 1, 1, 1, 1};
      sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(1, 64, hw, hw), sp_shape4(1, 64, hw, hw),
                                   sp_shape4(64, 64, 3, 3), 0, 0, &md);
      if (frozen) p.frozen = 1, p.training = 0, p.run_backward = 0, p.param_grad[0] = 0, p.need_d_in[0] = 0;
      assert_int_equal(cpu_conv_prepare(&p), 0);
      const int want = frozen && hw == 14; /* 16 tiles; 7x7 has 4 */
      if ((cpu_conv_wino_own(p.state) & 1) != want)
        fail_msg("%dx%d frozen %d: forward taken %d", hw, hw, frozen, !want);
      cpu_node_free(p.state);
    }
}

/* Every thread gets its share of the tiles, within a quarter of a chunk
 * (chunks come in multiples of the threads, at most 96 tiles each). */
static void chunks_balanced(void **st) {
  (void)st;
  static const int64_t shapes[][3] = {{1, 14, 14},  {1, 28, 28}, {64, 7, 7}, {16, 28, 28}, {64, 14, 14},
                                      {16, 56, 56}, {3, 13, 15}, {1, 8, 8},  {5, 9, 7}};
  const int64_t saved = cpu_wino_min_tiles;
  cpu_wino_min_tiles = 1;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    cpu_wino m;
    size_t u, work;
    assert_int_equal(cpu_wino_prepare(&m, shapes[i][0], shapes[i][1], shapes[i][2], 64, 64, 0, 0, 8, &u, &work), 0);
    if (m.by_panels) { /* the threads split the output channels: every one all tiles */
      printf("# %ld tiles, %d threads: split by output channels\n", (long)m.tiles, m.threads);
      assert_true(m.tiles <= cpu_wino_by_panels_max_tiles && m.chunk == m.tiles);
      continue;
    }
    /* schedule(static): contiguous runs of chunks, the first chunks %
     * threads threads one more; the last chunk partial */
    const int64_t chunks = (m.tiles + m.chunk - 1) / m.chunk, q = chunks / m.threads, r = chunks % m.threads;
    int64_t most = 0;
    for (int t = 0; t < m.threads; t++) {
      const int64_t c0 = t * q + (t < r ? t : r), c1 = c0 + q + (t < r);
      const int64_t t1 = c1 * m.chunk < m.tiles ? c1 * m.chunk : m.tiles;
      if (t1 - c0 * m.chunk > most) most = t1 - c0 * m.chunk;
    }
    const int64_t fair = (m.tiles + m.threads - 1) / m.threads;
    printf("# %ld tiles, %d threads: chunks of %ld, at most %ld a thread (fair %ld)\n", (long)m.tiles, m.threads,
           (long)m.chunk, (long)most, (long)fair);
    assert_true(m.chunk >= 1 && m.chunk <= 96);
    assert_true(most <= fair + (m.chunk / 4 > 6 ? m.chunk / 4 : 6)); /* the old rounding: 144 of 256, 36 of 49 */
  }
  cpu_wino_min_tiles = saved;
}

/* With two threads, up to cpu_wino_by_panels_max_tiles tiles (64) split
 * the output channels where each thread gets a 16-channel panel: 14x14
 * and 28x28 at batch 1 (16 and 49 tiles), not 56x56 (196) nor 16 output
 * channels (one panel); never the weight gradient. */
static void by_panels_where_few_tiles(void **st) {
  (void)st;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  static const int64_t cases[][5] = {
      {14, 14, 64, 64, 1}, {28, 28, 64, 64, 1}, {56, 56, 64, 64, 0}, {14, 14, 64, 16, 0}, {13, 15, 32, 32, 1}};
  const int64_t saved = cpu_wino_min_tiles;
  cpu_wino_min_tiles = 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cpu_wino m;
    size_t u, work;
    assert_int_equal(cpu_wino_prepare(&m, 1, cases[i][0], cases[i][1], cases[i][2], cases[i][3], 0, 0, 8, &u, &work),
                     0);
    if (m.by_panels != cases[i][4]) fail_msg("case %zu: by_panels %d", i, m.by_panels);
    assert_int_equal(cpu_wino_dw_prepare(&m, 1, cases[i][0], cases[i][1], cases[i][2], cases[i][3], &work), 0);
    assert_int_equal(m.by_panels, 0);
  }
  cpu_wino_min_tiles = saved;
  omp_set_num_threads(threads);
}

CMP_AVX2_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(weight_gradient_adds), cmocka_unit_test(same_as_onednn),
              cmocka_unit_test(taken_where_it_applies), cmocka_unit_test(frozen_from_fewer_tiles),
              cmocka_unit_test(chunks_balanced), cmocka_unit_test(by_panels_where_few_tiles))
#else
CMP_CPU_MAIN()
#endif
