/* A ResNet block's last batch norm absorbing the residual add and the ReLU
 * after it (backends/cpu/bnorm.c, graph/plan.c): whole blocks against the
 * reference backend (identity and projection shortcuts, f32 and bf16,
 * training and inference, the residual's gradient written first or added
 * to another consumer's), the same f32 step with the fusion switched off,
 * and the fusion taken only where the add comes right after the batch norm
 * with its other input ready; with a projection shortcut, the main
 * branch's batch norm adopted by the shortcut's (bnorm_pair.c; the kernels
 * in test_cpu_bnorm_pair.c), against the two apart and where it is taken;
 * in frozen plans, the block's last conv taking the add as a sum post-op
 * over the residual's buffer (graph/plan.c's out_over_other) where nothing
 * reads the residual after the add and the conv does not read it itself,
 * against the reference with and without
 * it, and where it is taken. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "graph/plan_internal.h"

static sp_value conv_bn(sp_graph *g, sp_value x, const char *conv, const char *bn, int out, int k, int stride) {
  return sp_batchnorm(
      g, sp_conv2d(g, x, conv, (sp_conv_args){.out_ch = out, .kernel = k, .stride = stride, .pad = k / 2}), bn);
}

/* conv0 reads the image; its output layout is the image stem's (channels-
 * last bf16 where oneDNN has a brgemm kernel for it), which on a machine
 * without AMX is not the blocked layout of the convolutions after it. conv0b
 * gives the block an input in the layout of the block's own layers. */
static sp_value block_input(sp_graph *g, sp_value x) {
  return conv_bn(g, conv_bn(g, x, "conv0", "bn0", 16, 3, 1), "conv0b", "bn0b", 16, 1, 1);
}

/* The input with a gradient; then 1x1, 3x3, 1x1 and the shortcut: the input
 * itself, or a strided projection. */
static sp_value block(sp_graph *g, sp_value x, int out, int stride) {
  x = block_input(g, x);
  sp_value y = sp_relu(g, conv_bn(g, x, "conv1", "bn1", 8, 1, 1));
  y = sp_relu(g, conv_bn(g, y, "conv2", "bn2", 8, 3, stride));
  y = conv_bn(g, y, "conv3", "bn3", out, 1, 1);
  sp_value s = stride != 1 || out != 16 ? conv_bn(g, x, "down", "down_bn", out, 1, stride) : x;
  return sp_relu(g, sp_add(g, y, s));
}
/* A head after each case: the graph's output stays plain f32, which a fused
 * node's output could not be. */
static sp_value head(sp_graph *g, sp_value x) {
  return sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 4, .kernel = 1});
}
static sp_value identity_block(sp_graph *g, sp_value x) { return head(g, block(g, x, 16, 1)); }
static sp_value projection_block(sp_graph *g, sp_value x) { return head(g, block(g, x, 32, 2)); }

/* The block input feeds a second add after the block, whose backward runs
 * first: the fused node then adds into the input's gradient. */
static sp_value shared_input(sp_graph *g, sp_value x) {
  x = block_input(g, x);
  sp_value y = sp_relu(g, conv_bn(g, x, "conv1", "bn1", 16, 3, 1));
  y = sp_relu(g, sp_add(g, conv_bn(g, y, "conv2", "bn2", 16, 3, 1), x));
  return head(g, sp_relu(g, sp_add(g, y, x)));
}

typedef struct {
  const char *label;
  cmp_build_fn body;
} block_case;

static const block_case cases[] = {
    {"identity", identity_block}, {"projection", projection_block}, {"input shared", shared_input}};

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int bf16 = 0; bf16 < 2; bf16++) {
      cmp_case k = {cases[i].label, cases[i].body, 3, 5, 12, 12, 1, bf16 ? SP_PLAN_BF16 : 0, bf16 ? 6e-2 : 1e-4, 0};
      cmp_run(&k);
      k.training = 0; /* inference on running statistics: no mask kept */
      cmp_run(&k);
    }
}

static void fused_or_not(int path) { cpu_bnorm_fuse_add = path == 0; }

/* bn0's shift has no true gradient: conv0b and bn0b after it, a training
 * batch norm, take any per-channel shift of its input back out; nor has
 * bn0b's in the projection block, where only convolutions with training
 * batch norms read it. Both paths return rounding noise for them (bn0's at
 * most 6e-9 on Zen 3, where its weight gradient reaches 0.04), whose
 * relative difference means nothing (1.39 and 0.65 there; 0 on the AVX-512
 * machines, whose two paths summed them alike). */
static const cmp_two_opts bn0_shift_free = {.shift_free = "bn0."}, bn0_bn0b_shift_free = {.shift_free = "bn0"};

/* The fused f32 step against batch norm, add and ReLU apart: the same sums
 * in another order. (In bf16 the fused node rounds bn(x) + r once where the
 * two nodes round bn(x) first, so the two differ by more than rounding
 * order, 2e-3 in the output and 3e-2 in the first layer's gradient here;
 * against_ref holds the fused bf16 step to the reference instead.) */
static void same_as_unfused(void **st) {
  (void)st;
  cmp_require_cpu();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cmp_case k = {cases[i].label, cases[i].body, 3, 5, 12, 12, 1, 0, 0, 0};
    cmp_two_paths_with(&k, fused_or_not, 1e-5,
                       cases[i].body == projection_block ? &bn0_bn0b_shift_free : &bn0_shift_free);
  }
}

static void paired_or_not(int path) { cpu_bnorm_fuse_pair = path == 0; }

/* The projection block's two batch norms as one node (the shortcut's
 * adopting the main branch's, bnorm_pair.c) against the two apart, an f32
 * training step: the same sums in the same order. (Evaluation, where the
 * pair reads the main branch's input after that node's last step, is
 * against_ref's, in a plan that poisons dead buffers.) */
static void pair_same_as_apart(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"projection pair", projection_block, 3, 5, 12, 12, 1, 0, 0, 0};
  cmp_two_paths_with(&k, paired_or_not, 1e-5, &bn0_bn0b_shift_free);
}

/* The main branch's convolution output read again after the block: its
 * batch norm is not the only writer of that gradient, so not adopted. */
static sp_value main_input_shared(sp_graph *g, sp_value x) {
  x = block_input(g, x);
  sp_value c3 = sp_conv2d(g, x, "conv3", (sp_conv_args){.out_ch = 32, .kernel = 1});
  sp_value y = sp_batchnorm(g, c3, "bn3");
  sp_value s = conv_bn(g, x, "down", "down_bn", 32, 1, 1);
  sp_value out = sp_relu(g, sp_add(g, y, s));
  return head(g, sp_add(g, out, c3));
}

/* How many nodes of a plan of `body` another adopted. */
static int adopted_nodes(cmp_build_fn body, unsigned flags, int training) {
  cmp_case k = {"adopted", body, 2, 5, 12, 12, training, flags, 0, 0};
  sp_graph *g;
  sp_plan *p = cmp_cpu_plan(&k, &g);
  int n = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    if (p->nodes[i].adopted_by >= 0) {
      const int a = p->nodes[i].adopted_by;
      if (p->g->nodes[i].op != &sp_op_batchnorm || p->g->nodes[a].op != &sp_op_batchnorm || p->nodes[a].adopts != i)
        fail_msg("node %d adopted by %d: not a batch norm pair", i, a);
      n++;
    }
  cmp_plan_release(p, g);
  return n;
}

/* How many adds of a plan of `body` a batch norm absorbed. */
static int fused_adds(cmp_build_fn body, unsigned flags) {
  cmp_case k = {"taken", body, 2, 5, 12, 12, 1, flags, 0, 0};
  sp_graph *g;
  sp_plan *p = cmp_cpu_plan(&k, &g);
  int n = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    if (p->g->nodes[i].op == &sp_op_add && p->nodes[i].absorbed_by >= 0) {
      if (p->g->nodes[p->nodes[i].absorbed_by].op != &sp_op_batchnorm) fail_msg("an add absorbed by a non-batchnorm");
      n++;
    }
  cmp_plan_release(p, g);
  return n;
}

/* A batch norm whose add comes after another node, or that adds its output
 * to itself, keeps the add apart (as does a hardswish after the add). */
static sp_value bn_then_other_branch(sp_graph *g, sp_value x) {
  x = block_input(g, x);
  sp_value y = conv_bn(g, x, "conv1", "bn1", 16, 3, 1);
  sp_value s = sp_conv2d(g, x, "late", (sp_conv_args){.out_ch = 16, .kernel = 1});
  return head(g, sp_relu(g, sp_add(g, y, s)));
}
static sp_value bn_doubled(sp_graph *g, sp_value x) {
  x = block_input(g, x);
  sp_value y = conv_bn(g, x, "conv1", "bn1", 16, 3, 1);
  return head(g, sp_relu(g, sp_add(g, y, y)));
}
static sp_value hardswish_after(sp_graph *g, sp_value x) {
  x = block_input(g, x);
  return head(g, sp_hardswish(g, sp_add(g, conv_bn(g, x, "conv1", "bn1", 16, 3, 1), x)));
}

/* Blocks as wide as ResUNet-50's (64 channels in 16-channel blocks, which
 * oneDNN's direct 1x1 kernel takes with the sum post-op as it does without):
 * identity shortcut; projection; the input read again after the block. */
static sp_value wide_input(sp_graph *g, sp_value x) {
  return conv_bn(g, conv_bn(g, x, "conv0", "bn0", 64, 3, 1), "conv0b", "bn0b", 64, 1, 1);
}
static sp_value wide_block(sp_graph *g, sp_value x, int out, int shared) {
  x = wide_input(g, x);
  sp_value y = sp_relu(g, conv_bn(g, x, "conv1", "bn1", 16, 1, 1));
  y = sp_relu(g, conv_bn(g, y, "conv2", "bn2", 16, 3, 1));
  y = conv_bn(g, y, "conv3", "bn3", out, 1, 1);
  sp_value s = out != 64 ? conv_bn(g, x, "down", "down_bn", out, 1, 1) : x;
  y = sp_relu(g, sp_add(g, y, s));
  return head(g, shared ? sp_add(g, y, x) : y);
}
static sp_value wide_identity(sp_graph *g, sp_value x) { return wide_block(g, x, 64, 0); }
static sp_value wide_projection(sp_graph *g, sp_value x) { return wide_block(g, x, 128, 0); }
static sp_value wide_shared(sp_graph *g, sp_value x) { return wide_block(g, x, 64, 1); }
/* The conv reads the residual it adds (a basic block of one 1x1 layer): its
 * output may not overwrite its own input. */
static sp_value wide_reads_residual(sp_graph *g, sp_value x) {
  x = wide_input(g, x);
  return head(g, sp_relu(g, sp_add(g, conv_bn(g, x, "conv1", "bn1", 64, 1, 1), x)));
}

/* How many nodes of a frozen plan of `body` write their output over an
 * input (a conv with its residual add as a sum post-op). */
static int written_over(cmp_build_fn body, unsigned flags) {
  cmp_case k = {"over", body, 2, 5, 12, 12, 0, flags | SP_PLAN_FROZEN, 0, 0};
  sp_graph *g;
  sp_plan *p = cmp_cpu_plan(&k, &g);
  int n = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    if (p->nodes[i].over >= 0) {
      if (p->g->nodes[i].op != &sp_op_conv2d) fail_msg("node %d written over an input: not a conv", i);
      n++;
    }
  cmp_plan_release(p, g);
  return n;
}

/* Frozen inference: the block's last conv (or the projection's, whose batch
 * norm comes right before the add) folds its batch norm and takes the add
 * as a sum post-op over the residual where the add is its last reader, a
 * binary post-op into a buffer of its own where the residual is read after
 * the block (the input shared): against the reference either way, and with
 * the sum switched off. */
static void frozen_residual_in_place(void **st) {
  (void)st;
  cmp_require_cpu();
  static const block_case wide[] = {{"wide identity", wide_identity},
                                    {"wide projection", wide_projection},
                                    {"wide, input shared", wide_shared},
                                    {"wide, conv reads the residual", wide_reads_residual}};
  const int want[] = {1, 1, 0, 0};
  for (int sum = 1; sum >= 0; sum--) {
    cpu_conv_use_post_sum = sum;
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
      for (int bf16 = 0; bf16 < 1 + cmp_bf16_here(); bf16++) {
        const unsigned f = bf16 ? SP_PLAN_BF16 : 0;
        cmp_case k = {wide[i].label, wide[i].body, 3, 5, 12, 12, 0, f | SP_PLAN_FROZEN, bf16 ? 6e-2 : 1e-4, 0};
        cmp_run(&k);
        const int n = written_over(wide[i].body, f);
        printf("# [%s%s, sum %s] %d nodes written over their residual\n", wide[i].label, bf16 ? ", bf16" : "",
               sum ? "on" : "off", n);
        if (n != (sum ? want[i] : 0)) fail_msg("want %d", sum ? want[i] : 0);
      }
  }
  cpu_conv_use_post_sum = 1;
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  for (int bf16 = 0; bf16 < 1 + cmp_bf16_here(); bf16++) {
    const unsigned f = bf16 ? SP_PLAN_BF16 : 0;
    assert_int_equal(fused_adds(identity_block, f), 1);
    assert_int_equal(fused_adds(projection_block, f), 1);
    assert_int_equal(fused_adds(shared_input, f), 1); /* the second add: no batch norm before it */
    assert_int_equal(fused_adds(bn_then_other_branch, f), 0);
    assert_int_equal(fused_adds(bn_doubled, f), 0);
    assert_int_equal(fused_adds(hardswish_after, f), 0);
  }
  cpu_bnorm_fuse_add = 0;
  assert_int_equal(fused_adds(identity_block, cmp_bf16_here() ? SP_PLAN_BF16 : 0), 0);
  assert_int_equal(adopted_nodes(projection_block, 0, 1), 0); /* no absorbed add, no pair */
  cpu_bnorm_fuse_add = 1;
  /* The pair: the projection block's end in training, not the identity
   * block's (its other input is the block's input, no batch norm). */
  for (int bf16 = 0; bf16 < 1 + cmp_bf16_here(); bf16++) {
    const unsigned f = bf16 ? SP_PLAN_BF16 : 0;
    assert_int_equal(adopted_nodes(projection_block, f, 1), 1);
    assert_int_equal(adopted_nodes(identity_block, f, 1), 0);
    assert_int_equal(adopted_nodes(shared_input, f, 1), 0);
    assert_int_equal(fused_adds(main_input_shared, f), 1);
    assert_int_equal(adopted_nodes(main_input_shared, f, 1), 0);
  }
  cpu_bnorm_fuse_pair = 0;
  assert_int_equal(adopted_nodes(projection_block, 0, 1), 0);
  cpu_bnorm_fuse_pair = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_unfused),
             cmocka_unit_test(frozen_residual_in_place), cmocka_unit_test(pair_same_as_apart),
             cmocka_unit_test(taken_where_it_applies))
