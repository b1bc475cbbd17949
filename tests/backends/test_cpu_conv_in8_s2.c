/* The f32 3x3 stride-2 convolution from 8 channels-last channels
 * (backends/cpu/conv_in8_s2.c), as vgg-face's second layer has it (the
 * stem's 8 channels, then 16 at half the size): whole blocks against the
 * reference backend in training, with widths whose last group of positions
 * is short (5 of 8, 3 of 8) and more output channel blocks than one; the
 * input gradient written first and added onto another consumer's; a weight
 * gradient that adds across two backward passes; the same step on oneDNN's
 * kernels (cpu_conv_use_in8s2 = 0); and where it is taken. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "graph/plan_internal.h"

static sp_value conv(sp_graph *g, sp_value x, const char *name, int out, int k, int stride) {
  return sp_conv2d(g, x, name, (sp_conv_args){.out_ch = out, .kernel = k, .stride = stride, .pad = k / 2});
}

/* 8 channels channels-last (what oneDNN writes from the plain graph input
 * at 8 channels), a batch norm and a ReLU: the stem's shape. */
static sp_value narrow_in(sp_graph *g, sp_value x) {
  return sp_relu(g, sp_batchnorm(g, conv(g, x, "conv0", 8, 3, 1), "bn0"));
}

static sp_value block_of(sp_graph *g, sp_value x, int oc) {
  x = narrow_in(g, x);
  sp_value y = sp_relu(g, sp_batchnorm(g, conv(g, x, "conv1", oc, 3, 2), "bn1"));
  return conv(g, y, "head", 4, 1, 1);
}
static sp_value block16(sp_graph *g, sp_value x) { return block_of(g, x, 16); }
static sp_value block48(sp_graph *g, sp_value x) { return block_of(g, x, 48); }

/* The layer's input also read by a 1x1 stride-2 layer, the two summed. The
 * layer made after the other runs its backward first: made second, its
 * input gradient is written fresh; made first, it adds onto the other's. */
static sp_value shared_input(sp_graph *g, sp_value x, int ours_first) {
  x = narrow_in(g, x);
  sp_value a, b;
  if (ours_first) {
    a = conv(g, x, "conv1", 16, 3, 2);
    b = conv(g, x, "side", 16, 1, 2);
  } else {
    b = conv(g, x, "side", 16, 1, 2);
    a = conv(g, x, "conv1", 16, 3, 2);
  }
  return conv(g, sp_relu(g, sp_add(g, a, b)), "head", 4, 1, 1);
}
static sp_value ours_adds(sp_graph *g, sp_value x) { return shared_input(g, x, 1); }
static sp_value ours_writes(sp_graph *g, sp_value x) { return shared_input(g, x, 0); }

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
  /* Output widths 8 (one short group), 21 (16 + 5), 35 (16 + 16 + 3). */
  const int hw[3][2] = {{16, 16}, {10, 42}, {12, 70}};
  for (int i = 0; i < 3; i++) {
    cmp_case k = {"in8s2", block16, 2, 3, hw[i][0], hw[i][1], 1, 0, 1e-4, 0};
    cmp_run_counted(&k, &cpu_in8s2_calls, 1, "in8s2");
    cmp_case w = {"in8s2 48 channels", block48, 2, 3, hw[i][0], hw[i][1], 1, 0, 1e-4, 0};
    cmp_run_counted(&w, &cpu_in8s2_calls, 1, "in8s2");
  }
  cmp_case a = {"in8s2 adds its input gradient", ours_adds, 2, 3, 12, 38, 1, 0, 1e-4, 0};
  cmp_run_counted(&a, &cpu_in8s2_calls, 1, "in8s2");
  cmp_case b = {"in8s2 writes its input gradient", ours_writes, 2, 3, 12, 38, 1, 0, 1e-4, 0};
  cmp_run_counted(&b, &cpu_in8s2_calls, 1, "in8s2");
  /* An inference plan folds the batch norm into oneDNN's kernel instead. */
  cmp_case e = {"in8s2 inference", block16, 2, 3, 16, 16, 0, 0, 1e-4, 0};
  cmp_run(&e);
}

/* The weight gradient adds onto what is there (a second backward pass
 * without zeroing doubles it). */
static void weight_gradient_adds(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  cmp_case k = {"in8s2 twice", block48, 2, 3, 12, 38, 1, 0, 0, 0};
  cmp_grad_adds_twice(&k, "conv1.weight", 5);
}

static void ours_or_onednn(int path) { cpu_conv_use_in8s2 = path == 0; }

/* The same step on oneDNN's kernels: the same products summed in another
 * order (the weight gradient's per row in f32, then in doubles). */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  const long before = cpu_in8s2_calls;
  cmp_case k = {"in8s2 vs onednn", block16, 4, 3, 24, 46, 1, 0, 0, 0};
  cmp_two_paths(&k, ours_or_onednn, 1e-5);
  cmp_case s = {"in8s2 shared vs onednn", ours_adds, 2, 3, 16, 30, 1, 0, 0, 0};
  cmp_two_paths(&s, ours_or_onednn, 1e-5);
  assert_true(cpu_in8s2_calls >= before + 2);
}

static void stats_given_or_not(int path) { cpu_bn_stats_offer = path == 0; }

/* The batch norm after it takes its output's statistics from the forward
 * pass: the same step with the batch norm computing them itself. */
static void batch_statistics(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  cmp_case k = {"in8s2 block", block48, 2, 3, 12, 38, 1, 0, 0, 0};
  sp_graph *g;
  sp_plan *p = cmp_cpu_plan(&k, &g);
  int offered = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    if (cpu_conv_is_in8s2(p->nodes[i].impl_state)) offered += ((const cpu_node *)p->nodes[i].impl_state)->stats_on;
  cmp_plan_release(p, g);
  assert_int_equal(offered, 1);
  cmp_two_paths(&k, stats_given_or_not, 1e-5);
  cmp_run(&k); /* and against the reference, given */
}

/* One node on a channels-last input (or blocks) and whether it is ours. */
static int taken(int ic, int oc, int stride, int h, int w, int bias, dnnl_format_tag_t tag) {
  void *s = cmp_conv_node(2, ic, oc, h, w, 3, stride, bias, 0, tag);
  const int got = cpu_conv_is_in8s2(s);
  cpu_node_free(s);
  return got;
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!avx512()) skip();
  assert_int_equal(taken(8, 16, 2, 112, 112, 0, dnnl_acdb), 1);
  assert_int_equal(taken(8, 64, 2, 20, 34, 0, dnnl_acdb), 1);
  assert_int_equal(taken(8, 16, 1, 112, 112, 0, dnnl_acdb), 0);   /* stride 1 */
  assert_int_equal(taken(8, 16, 2, 112, 112, 1, dnnl_acdb), 0);   /* a bias */
  assert_int_equal(taken(16, 16, 2, 112, 112, 0, dnnl_acdb), 0);  /* 16 input channels */
  assert_int_equal(taken(8, 24, 2, 112, 112, 0, dnnl_acdb), 0);   /* not in 16s */
  assert_int_equal(taken(8, 80, 2, 112, 112, 0, dnnl_acdb), 0);   /* over 64 */
  assert_int_equal(taken(8, 16, 2, 111, 112, 0, dnnl_acdb), 0);   /* odd height */
  assert_int_equal(taken(8, 16, 2, 112, 112, 0, dnnl_aBcd8b), 0); /* channel blocks */
  cpu_conv_use_in8s2 = 0;
  assert_int_equal(taken(8, 16, 2, 112, 112, 0, dnnl_acdb), 0);
  cpu_conv_use_in8s2 = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(weight_gradient_adds), cmocka_unit_test(same_as_onednn),
             cmocka_unit_test(batch_statistics), cmocka_unit_test(taken_where_it_applies))
