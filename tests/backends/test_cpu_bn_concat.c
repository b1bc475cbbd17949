/* A batch norm + ReLU absorbing the channel concat after it (U-Net's
 * up-path joined to its skip; backends/cpu/bnorm.c, the kernels' y_img_extra):
 * against the reference backend (training and evaluation, f32 and bf16,
 * the skip's gradient written by the concat first or added to another
 * consumer's), the same f32 step with the fusion off, and where it is
 * taken. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "graph/plan_internal.h"

static sp_value conv(sp_graph *g, sp_value x, const char *name, int out, int k) {
  return sp_conv2d(g, x, name, (sp_conv_args){.out_ch = out, .kernel = k, .pad = k / 2});
}

/* The skip: a first layer, so that it is in channel blocks. */
static sp_value skip_of(sp_graph *g, sp_value x) { return sp_relu(g, sp_batchnorm(g, conv(g, x, "conv0", 16, 3), "bn0")); }

/* up = relu(bn(conv(skip))) with `up_c` channels, joined to the skip. */
static sp_value joined(sp_graph *g, sp_value s, int up_c) {
  sp_value up = sp_relu(g, sp_batchnorm(g, conv(g, s, "up", up_c, 1), "up_bn"));
  sp_value both[2] = {up, s};
  return sp_concat(g, 2, both);
}

static sp_value unet_join(sp_graph *g, sp_value x) { return conv(g, joined(g, skip_of(g, x), 32), "head", 4, 1); }

/* The skip read again after the concat: that reader's backward runs first,
 * so the concat adds its part into the skip's gradient. */
static sp_value skip_read_after(sp_graph *g, sp_value x) {
  sp_value s = skip_of(g, x);
  sp_value y = conv(g, joined(g, s, 16), "head", 4, 1);
  return sp_add(g, y, conv(g, s, "side", 4, 1));
}

/* Not taken: the concat's other order, a part that is not whole blocks, a
 * hardswish instead of the ReLU. */
static sp_value skip_first(sp_graph *g, sp_value x) {
  sp_value s = skip_of(g, x);
  sp_value up = sp_relu(g, sp_batchnorm(g, conv(g, s, "up", 16, 1), "up_bn"));
  sp_value both[2] = {s, up};
  return conv(g, sp_concat(g, 2, both), "head", 4, 1);
}
/* 20 channels: a part block in 8- and 16-channel blocks alike. */
static sp_value part_block(sp_graph *g, sp_value x) { return conv(g, joined(g, skip_of(g, x), 20), "head", 4, 1); }
static sp_value hardswish_join(sp_graph *g, sp_value x) {
  sp_value s = skip_of(g, x);
  sp_value up = sp_hardswish(g, sp_batchnorm(g, conv(g, s, "up", 16, 1), "up_bn"));
  sp_value both[2] = {up, s};
  return conv(g, sp_concat(g, 2, both), "head", 4, 1);
}

/* How many concats of a plan of `body` a batch norm absorbed. */
static int absorbed(cmp_build_fn body, unsigned flags, int training) {
  cmp_case k = {"taken", body, 2, 5, 12, 12, training, flags, 0, 0};
  sp_graph *g;
  sp_plan *p = cmp_cpu_plan(&k, &g);
  int n = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    if (p->g->nodes[i].op == &sp_op_concat && p->nodes[i].absorbed_by >= 0) {
      if (p->g->nodes[p->nodes[i].absorbed_by].op != &sp_op_batchnorm) continue;
      n++;
    }
  cmp_plan_release(p, g);
  return n;
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  const cmp_build_fn bodies[2] = {unet_join, skip_read_after};
  for (int b = 0; b < 2; b++)
    for (int bf16 = 0; bf16 < 2; bf16++)
      for (int training = 1; training >= 0; training--) {
        cmp_case k = {"bn + concat", bodies[b], 3, 5, 10, 13, training, bf16 ? SP_PLAN_BF16 : 0, bf16 ? 6e-2 : 1e-4, 0};
        cmp_run(&k);
      }
}

static void fused_or_not(int path) { cpu_bnorm_fuse_concat = path == 0; }

/* The same f32 step apart: the same values copied in another order. */
static void same_as_apart(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"bn + concat vs apart", unet_join, 3, 5, 10, 13, 1, 0, 0, 0};
  cmp_two_paths(&k, fused_or_not, 1e-6);
  cmp_case s = {"bn + concat, skip read after, vs apart", skip_read_after, 2, 5, 9, 8, 1, 0, 0, 0};
  cmp_two_paths(&s, fused_or_not, 1e-6);
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  for (int training = 0; training < 2; training++) {
    const int blocked = absorbed(unet_join, 0, training); /* evaluation of small maps may stay plain */
    if (training) assert_int_equal(blocked, 1);
    assert_int_equal(absorbed(skip_read_after, 0, training), blocked);
    assert_int_equal(absorbed(skip_first, 0, training), 0);
    assert_int_equal(absorbed(part_block, 0, training), 0);
    assert_int_equal(absorbed(hardswish_join, 0, training), 0);
  }
  cpu_bnorm_fuse_concat = 0;
  assert_int_equal(absorbed(unet_join, 0, 1), 0);
  cpu_bnorm_fuse_concat = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_apart), cmocka_unit_test(taken_where_it_applies))
