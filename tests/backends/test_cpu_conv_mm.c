/* 1x1 convolutions whose backward runs as matrix products
 * (backends/cpu/conv_mm.c) against the reference backend, in bf16 training
 * plans (channels-last activations): the input gradient written fresh and
 * added onto another consumer's, the weight gradient accumulated into the
 * plain master gradient, with and without bias; and the same plans with the
 * products switched off (oneDNN's convolution backward) for comparison. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* x -> conv3 -> [1x1 a (bias), 1x1 b] -> add -> 1x1 post: the input of the
 * two 1x1 convolutions gets its gradient from both (the second adds). */
static sp_value b_two_1x1(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", 32, 3, 1, 1, 1, 1, 0);
  sp_value a = sp_conv2d(g, x, "a", 48, 1, 1, 0, 1, 1, 1), b = sp_conv2d(g, x, "b", 48, 1, 1, 0, 1, 1, 0);
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", 5, 1, 1, 0, 1, 1, 1);
}

/* 8 channels in, 20 out (no multiple of 16), then a shortcut add. */
static sp_value b_narrow_1x1(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", 8, 3, 1, 1, 1, 1, 0);
  sp_value y = sp_conv2d(g, x, "c", 20, 1, 1, 0, 1, 1, 1);
  return sp_conv2d(g, sp_add(g, y, sp_conv2d(g, x, "d", 20, 3, 1, 1, 1, 1, 0)), "post", 4, 1, 1, 0, 1, 1, 0);
}

static void run_both(cmp_build_fn body, const char *label) {
  cmp_case k = {label, body, 3, 3, 9, 7, 1, SP_PLAN_BF16, 6e-2};
  cmp_run(&k); /* products */
  cpu_conv_use_matmul = 0;
  cmp_run(&k); /* oneDNN's convolution backward */
  cpu_conv_use_matmul = 1;
  k.flags = 0, k.tol = 1e-4; /* f32 plans keep oneDNN's (blocked layouts) */
  cmp_run(&k);
}

static void two_consumers(void **st) {
  (void)st;
  cmp_require_cpu();
  run_both(b_two_1x1, "two 1x1");
}

static void narrow_channels(void **st) {
  (void)st;
  cmp_require_cpu();
  run_both(b_narrow_1x1, "narrow 1x1");
}

/* The products are taken for channels-last bf16 (what bf16 plans give
 * convolutions here) and only there. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  for (int t = 0; t < 2; t++) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {2, 64, 9, 7};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, t ? dnnl_f32 : dnnl_bf16, dnnl_acdb), dnnl_success);
    sp_conv2d_attr at = {1, 1, 0, 0, 1, 1, 1};
    sp_op_prep p = {.op = &sp_op_conv2d, .attr = &at, .n_in = 1, .n_param = 1, .training = 1, .run_backward = 1,
                    .bf16 = !t};
    p.in_shape[0] = sp_shape4(2, 64, 9, 7), p.out_shape = sp_shape4(2, 32, 9, 7);
    p.param_shape[0] = sp_shape4(32, 64, 1, 1), p.param_grad[0] = 1;
    p.in_dtype[0] = SP_F32, p.in_layout[0] = &md, p.need_d_in[0] = 1;
    assert_int_equal(cpu_conv_prepare(&p), 0);
    assert_int_equal(cpu_conv_uses_matmul(p.state), !t);
    cpu_node_free(p.state);
  }
}
#endif

int main(void) {
#ifdef SPRY_HAVE_DNNL
  const struct CMUnitTest tests[] = {cmocka_unit_test(two_consumers), cmocka_unit_test(narrow_channels),
                                     cmocka_unit_test(taken_where_it_applies)};
  return cmocka_run_group_tests(tests, NULL, NULL);
#else
  printf("1..0 # SKIP oneDNN not in this build\n");
  return 0;
#endif
}
