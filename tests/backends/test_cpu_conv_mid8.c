/* The 3x3 convolution between two 8-channel maps in 16-channel blocks
 * (backends/cpu/conv_mid8.c), as ResUNet-50's last decoder block has it
 * (1x1 down to 8 channels, batch norm, ReLU, the 3x3, batch norm, ReLU, 1x1
 * back up): whole blocks against the reference backend (training; and
 * evaluation, where these small maps stay plain and oneDNN runs), widths that leave a tail after the 16-position blocks, the
 * input gradient written first or added to another consumer's; the same
 * step on oneDNN's kernels (cpu_conv_use_mid8 = 0); and where it is taken. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "graph/plan_internal.h"

static sp_value conv(sp_graph *g, sp_value x, const char *name, int out, int k) {
  return sp_conv2d(g, x, name, (sp_conv_args){.out_ch = out, .kernel = k, .pad = k / 2});
}

/* A first layer, so that what follows reads 16-channel blocks (on the
 * plain graph input oneDNN writes an 8-channel output channels-last). */
static sp_value blocks_in(sp_graph *g, sp_value x) {
  return sp_relu(g, sp_batchnorm(g, conv(g, x, "conv0", 16, 3), "bn0"));
}

/* 1x1 to 8 channels (oneDNN writes them in 16-channel blocks), the 3x3, 1x1 back. */
static sp_value mid_block(sp_graph *g, sp_value x) {
  x = blocks_in(g, x);
  sp_value a = sp_relu(g, sp_batchnorm(g, conv(g, x, "conv1", 8, 1), "bn1"));
  sp_value b = sp_relu(g, sp_batchnorm(g, conv(g, a, "conv2", 8, 3), "bn2"));
  return conv(g, sp_batchnorm(g, conv(g, b, "conv3", 16, 1), "bn3"), "head", 4, 1);
}

/* The 3x3's input also read by a later layer: its gradient is added to. */
static sp_value mid_input_shared(sp_graph *g, sp_value x) {
  x = blocks_in(g, x);
  sp_value a = sp_relu(g, sp_batchnorm(g, conv(g, x, "conv1", 8, 1), "bn1"));
  sp_value b = sp_relu(g, sp_batchnorm(g, conv(g, a, "conv2", 8, 3), "bn2"));
  sp_value c = sp_add(g, conv(g, b, "conv3", 8, 1), a);
  return conv(g, c, "head", 4, 1);
}

/* Not taken: 16 channels, a bias, stride 2. */
static sp_value wider(sp_graph *g, sp_value x) {
  x = blocks_in(g, x);
  sp_value a = sp_relu(g, sp_batchnorm(g, conv(g, x, "conv1", 16, 1), "bn1"));
  return conv(g, conv(g, a, "conv2", 16, 3), "head", 4, 1);
}
static sp_value biased(sp_graph *g, sp_value x) {
  x = blocks_in(g, x);
  sp_value a = sp_relu(g, sp_batchnorm(g, conv(g, x, "conv1", 8, 1), "bn1"));
  return conv(g, sp_conv2d(g, a, "conv2", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1, .bias = 1}), "head", 4, 1);
}
static sp_value strided(sp_graph *g, sp_value x) {
  x = blocks_in(g, x);
  sp_value a = sp_relu(g, sp_batchnorm(g, conv(g, x, "conv1", 8, 1), "bn1"));
  return conv(g, sp_conv2d(g, a, "conv2", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1}), "head", 4,
              1);
}

/* How many nodes of a plan of `body` ran (or would run) the loops. */
static int taken(cmp_build_fn body, int training) {
  cmp_case k = {"taken", body, 2, 16, 10, 21, training, 0, 0, 0};
  sp_graph *g;
  sp_plan *p = cmp_cpu_plan(&k, &g);
  int n = 0;
  for (int i = 0; i < p->g->n_nodes; i++) n += cpu_conv_is_mid8(p->nodes[i].impl_state);
  cmp_plan_release(p, g);
  return n;
}

static int avx512(void) {
#if defined(__AVX512F__)
  return 1;
#else
  printf("# not an AVX-512 build: the loops are not built\n");
  return 0;
#endif
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  const int widths[3] = {16, 21, 40}; /* one block; a tail of 5; two blocks and a tail of 8 */
  for (int wi = 0; wi < 3; wi++)
    for (int training = 1; training >= 0; training--) {
      const long before = cpu_mid8_calls;
      cmp_case k = {"mid8", mid_block, 3, 16, 7, widths[wi], training, 0, 1e-4, 0};
      cmp_run(&k);
      /* (Evaluation plans of these small maps keep them plain: not taken.) */
      if (training && cpu_mid8_calls == before) fail_msg("the loops did not run (width %d)", widths[wi]);
      cmp_case s = {"mid8 shared input", mid_input_shared, 2, 16, 9, widths[wi], training, 0, 1e-4, 0};
      cmp_run(&s);
    }
}

static void ours_or_onednn(int path) { cpu_conv_use_mid8 = path == 0; }

/* The same step on oneDNN's kernels: the same products summed in another
 * order (the weight gradient's per row in f32, then in doubles). */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  /* The forward sums in oneDNN's order (taps, then channels), so the
   * outputs may match bit for bit: the call count shows the loops ran. */
  const long before = cpu_mid8_calls;
  cmp_case k = {"mid8 vs onednn", mid_block, 4, 16, 12, 37, 1, 0, 0, 0};
  cmp_two_paths(&k, ours_or_onednn, 1e-5);
  cmp_case s = {"mid8 shared vs onednn", mid_input_shared, 2, 16, 8, 24, 1, 0, 0, 0};
  cmp_two_paths(&s, ours_or_onednn, 1e-5);
  assert_true(cpu_mid8_calls >= before + 2);
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  assert_int_equal(taken(mid_block, 1), 1);
  assert_int_equal(taken(mid_input_shared, 1), 1);
  assert_int_equal(taken(wider, 1), 0);
  assert_int_equal(taken(biased, 1), 0);
  assert_int_equal(taken(strided, 1), 0);
  cpu_conv_use_mid8 = 0;
  assert_int_equal(taken(mid_block, 1), 0);
  cpu_conv_use_mid8 = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn), cmocka_unit_test(taken_where_it_applies))
