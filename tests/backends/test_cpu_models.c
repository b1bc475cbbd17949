/* Whole models on the cpu backend against the ref backend: the seed's VGG
 * trained 5 steps with AdamW (losses per step, final parameters), the
 * residual BlurPool / soft-argmax net and the TSM block of
 * tests/models/test_torch_parity.c (loss and every gradient), and bitwise
 * run-to-run reproducibility; frozen inference plans (weights prepared once),
 * and the VGG's on 16 real IMM photos at batch 16 (inference and a training
 * step). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_compare.h"
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#endif
#include "spry/data.h"
#include "spry/models.h"
#include "spry/optim.h"
#include "spry/train.h"

typedef sp_value (*model_fn)(sp_graph *g, sp_value x, sp_value t);

static sp_value vgg(sp_graph *g, sp_value x, sp_value t) {
  sp_value p = sp_model_vgg(g, x, 64, 64, 58);
  return sp_l1_loss(g, p, t);
}

static sp_value conv_bn(sp_graph *g, sp_value x, const char *conv, const char *bn, int out, int k, int s, int pad) {
  return sp_batchnorm(g, sp_conv2d(g, x, conv, (sp_conv_args){.out_ch = out, .kernel = k, .stride = s, .pad = pad}),
                      bn);
}

static sp_value residual(sp_graph *g, sp_value x, sp_value t) {
  x = sp_relu(g, conv_bn(g, x, "stem", "stem_bn", 8, 3, 1, 1));
  sp_value y = sp_relu(g, conv_bn(g, x, "b1_conv1", "b1_bn1", 8, 3, 1, 1));
  x = sp_relu(g, sp_add(g, conv_bn(g, y, "b1_conv2", "b1_bn2", 8, 3, 1, 1), x));
  y = sp_hardswish(g, conv_bn(g, x, "b2_conv1", "b2_bn1", 16, 3, 2, 1));
  sp_value s = conv_bn(g, sp_blurpool(g, x, 3, 2), "b2_down", "b2_down_bn", 16, 1, 1, 0);
  x = sp_hardswish(g, sp_add(g, conv_bn(g, y, "b2_conv2", "b2_bn2", 16, 3, 1, 1), s));
  x = sp_upsample(g, sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = 1}), 2, 1);
  return sp_l1_loss(g, sp_softargmax(g, x, 1.0f), t);
}

/* A wide bottleneck's end at 6x6 (ResNet-50's layer3 at 96 px). With AMX,
 * the last 1x1 conv with the residual add as a binary post-op ran on a
 * oneDNN 2.6 kernel that writes past its output at this size and gets values
 * wrong (now never taken: backends/cpu/core.c; test_cpu_onednn_impl.c). */
static sp_value bottleneck6(sp_graph *g, sp_value x, sp_value t) {
  x = sp_relu(g, conv_bn(g, x, "stem", "stem_bn", 1024, 1, 1, 0)); /* the add's other input: bf16, as in a net */
  sp_value y = sp_relu(g, conv_bn(g, x, "b_conv1", "b_bn1", 256, 1, 1, 0));
  x = sp_relu(g, sp_add(g, conv_bn(g, y, "b_conv2", "b_bn2", 1024, 1, 1, 0), x));
  x = sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 5, .kernel = 1, .bias = 1});
  return sp_l1_loss(g, sp_softargmax(g, x, 1.0f), t);
}

/* ResUNet's head: a 1x1 conv whose heatmaps are a graph output (for figures)
 * and feed soft-argmax. */
static sp_value heatmap_head(sp_graph *g, sp_value x, sp_value t) {
  x = sp_relu(g, conv_bn(g, x, "stem", "stem_bn", 16, 3, 1, 1));
  /* No bias: soft-argmax is shift invariant, so its gradient is ~0 (rounding). */
  sp_value h = sp_conv2d(g, x, "head", (sp_conv_args){.out_ch = 5, .kernel = 1});
  sp_graph_output(g, h, "heatmaps");
  return sp_l1_loss(g, sp_softargmax(g, h, 1.0f), t);
}

static sp_value tsm(sp_graph *g, sp_value x, sp_value t) {
  const int segments = 4, c = 16;
  sp_value y = sp_tshift(g, x, segments, 0.125f, 0.125f);
  y = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, y, "conv1", (sp_conv_args){.out_ch = c, .kernel = 3, .pad = 1}), "bn1"));
  y = sp_batchnorm(g, sp_conv2d(g, y, "conv2", (sp_conv_args){.out_ch = c, .kernel = 3, .pad = 1}), "bn2");
  x = sp_relu(g, sp_add(g, y, x));
  x = sp_global_avgpool(g, x);
  int64_t frames[4] = {2, 1, segments, c};
  x = sp_reshape(g, x, 4, frames);
  sp_pool2d_attr mean_t = {segments, 1, segments, 1, 0, 0, 1, 0};
  x = sp_graph_node(g, &sp_op_avgpool2d, &mean_t, sizeof mean_t, "consensus", 1, &x, 0, NULL, 0, NULL, 1);
  x = sp_linear(g, sp_flatten(g, x), "fc", c, 3, 1);
  return sp_cross_entropy(g, x, t);
}

/* ResUNet-50 at 96 px: in an inference plan oneDNN picks channels-last for
 * some decoder convs and blocked for others, so an add meets two layouts
 * (backends/cpu/join.c reorders one of them). */
static sp_value resunet50(sp_graph *g, sp_value x, sp_value t) {
  sp_model_spec spec = {.name = "resunet50", .channels = 3, .height = 96, .width = 96, .keypoints = 5};
  return sp_l1_loss(g, sp_model_build(g, &spec, x), t);
}

typedef struct {
  const char *label;
  model_fn build;
  int channels, targets; /* channels of x; of t (-1 unknown) */
  sp_dtype target_dtype;
  sp_shape x_shape, t_shape;
} model_case;

static const model_case vgg_case = {"vgg-face", vgg, 1, 58, SP_F32, {4, {4, 1, 64, 64}}, {3, {4, 58, 2}}};
static const model_case residual_case = {"residual", residual, 3, 5, SP_F32, {4, {2, 3, 12, 12}}, {3, {2, 5, 2}}};
static const model_case resunet50_case = {"resunet50", resunet50, 3, 5, SP_F32, {4, {1, 3, 96, 96}}, {3, {1, 5, 2}}};
static const model_case bottleneck6_case = {"bottleneck-6x6",   bottleneck6,   64, 5, SP_F32,
                                            {4, {1, 64, 6, 6}}, {3, {1, 5, 2}}};
static const model_case head_case = {"heatmap-head", heatmap_head, 3, 5, SP_F32, {4, {2, 3, 16, 16}}, {3, {2, 5, 2}}};
static const model_case tsm_case = {"tsm", tsm, 16, -1, SP_I32, {4, {8, 16, 6, 6}}, {1, {2}}};

typedef struct {
  sp_graph *g;
  sp_plan *p;
} run;

static run make_run(const model_case *m, sp_backend b, unsigned flags, const sp_graph *init) {
  run r;
  r.g = sp_graph_new(3);
  sp_value x = sp_graph_input(r.g, "x", SP_F32, m->channels), t = sp_graph_input(r.g, "t", m->target_dtype, m->targets);
  sp_graph_loss(r.g, m->build(r.g, x, t), 1.0f);
  if (sp_graph_error(r.g)) fail_msg("[%s] %s", m->label, sp_graph_error(r.g));
  if (init)
    for (int i = 0; i < sp_graph_param_count(r.g); i++)
      memcpy(sp_graph_param_value(r.g, i)->data, sp_graph_param_value((sp_graph *)init, i)->data,
             sp_tensor_bytes(sp_graph_param_value(r.g, i)));
  sp_input_shape in[2] = {{"x", m->x_shape}, {"t", m->t_shape}};
  r.p = sp_plan_new(r.g, 2, in, b, 1, SP_PLAN_POISON | flags);
  if (!r.p) fail_msg("[%s] %s plan: %s", m->label, sp_backend_name(b), sp_last_error());
  return r;
}

static void fill(const model_case *m, run *r, uint64_t seed) {
  sp_test_rng rng = {seed};
  sp_tensor *x = sp_plan_input(r->p, "x"), *t = sp_plan_input(r->p, "t");
  sp_test_fill_uniform(&rng, x->data, sp_tensor_numel(x), -1, 1);
  if (m->target_dtype == SP_I32)
    for (int64_t i = 0; i < sp_tensor_numel(t); i++) ((int32_t *)t->data)[i] = (int32_t)(sp_test_rng_next(&rng) % 3);
  else
    sp_test_fill_uniform(&rng, t->data, sp_tensor_numel(t), 4, 60);
}

static float step(run *r) {
  sp_graph_zero_grad(r->g);
  assert_int_equal(sp_plan_forward(r->p), 0);
  assert_int_equal(sp_plan_backward(r->p), 0);
  return (float)sp_plan_loss(r->p);
}

static void free_run(run *r) {
  sp_plan_free(r->p);
  sp_graph_free(r->g);
}

/* Reviewed bf16 tolerances for the seed's VGG at batch 4, 64x64 (relative L2
 * error per gradient, measured x ~1.5). bf16 error compounds going backward:
 * each of the 8 conv+BN stages rounds its input gradient to bf16, and BN's
 * backward (dy - mean(dy) - xhat * mean(dy xhat)) cancels most of dy when a
 * channel has few values (16 at the last stage here) and the targets are
 * random, so the relative error grows ~1.6x per stage: measured 2% at fc1,
 * 3.5% (layers.4), 7-8% (3), 14-33% (2), 26-56% (1), 64% at the first conv.
 * At batch 16, 128x128 the same stages measure half that, and every op
 * alone stays within 3% (test_cpu_ops.c), so this is bf16, not a kernel. */
static double vgg_bf16_tol(const char *name) {
  static const struct {
    const char *prefix;
    double tol;
  } t[] = {{"layers.0.", 0.95}, {"layers.1.", 0.85}, {"layers.2.", 0.5}, {"layers.3.", 0.25}, {"layers.4.", 0.13}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strncmp(name, t[i].prefix, strlen(t[i].prefix))) return t[i].tol;
  return 6e-2;
}

/* ||got - want|| / max(||want||, floor sqrt(n)): cmp_tensor_floor's
 * measure for bf16 runs. */
static double rel_l2(const float *got, const float *want, int64_t n, double floor) {
  double d2 = 0, r2 = 0;
  for (int64_t i = 0; i < n; i++)
    d2 += ((double)got[i] - want[i]) * ((double)got[i] - want[i]), r2 += (double)want[i] * want[i];
  return sqrt(d2) / (fmax(sqrt(r2), floor * sqrt((double)n)) + 1e-30);
}

/* One step: loss and every gradient within tol of ref (the VGG table for
 * bf16 VGG). bf16 runs take each gradient's median error over BF16_SEEDS
 * inputs: at these sizes the first stages' gradients are mostly bf16 noise
 * that any change in where a kernel rounds draws again (VGG's first conv,
 * seeds 2, 3, 5, 6: 0.65, 0.44, 0.64, 0.60 with its batch norm apart, 0.66,
 * 0.56, 1.15, 0.49 fused; the residual net's stem 0.02-0.11 either way), so
 * one input's error says little about a kernel. */
enum { BF16_SEEDS = 3 };
static void gradients_match(const model_case *m, unsigned flags, double tol) {
  const int seeds = flags & SP_PLAN_BF16 ? BF16_SEEDS : 1;
  cmp_case c = {m->label, NULL, 0, 0, 0, 0, 1, flags, tol, 0};
  double *err = NULL;
  int n_par = 0;
  for (int k = 0; k < seeds; k++) {
    run ref = make_run(m, SP_BACKEND_REF, 0, NULL), cpu = make_run(m, SP_BACKEND_CPU, flags, ref.g);
    fill(m, &ref, 5 + (uint64_t)k);
    fill(m, &cpu, 5 + (uint64_t)k);
    float l_ref = step(&ref), l_cpu = step(&cpu);
    printf("# %s: loss ref %.7f cpu %.7f\n", m->label, l_ref, l_cpu);
    cmp_tensor(&c, "loss", &l_cpu, &l_ref, 1, tol);
    double floor = cmp_grad_floor_for(ref.g, flags);
    char what[600];
    n_par = sp_graph_param_count(ref.g);
    if (!err) err = calloc((size_t)(n_par * seeds), sizeof *err);
    for (int i = 0; i < n_par; i++) {
      const sp_tensor *gr = sp_graph_param_grad(ref.g, i);
      if (!gr) continue;
      const float *got = sp_graph_param_grad(cpu.g, i)->data;
      if (seeds == 1) {
        snprintf(what, sizeof what, "grad.%s", sp_graph_param_name(ref.g, i));
        cmp_tensor_floor(&c, what, got, gr->data, sp_tensor_numel(gr), tol, floor);
      } else {
        err[i * seeds + k] = rel_l2(got, gr->data, sp_tensor_numel(gr), floor);
      }
    }
    if (k < seeds - 1 || seeds == 1) {
      free_run(&ref);
      free_run(&cpu);
      continue;
    }
    for (int i = 0; i < n_par; i++) { /* the medians, against the tolerance */
      if (!sp_graph_param_grad(ref.g, i)) continue;
      double *e = err + i * seeds;
      for (int a = 1; a < seeds; a++)
        for (int b = a; b > 0 && e[b] < e[b - 1]; b--) {
          const double t = e[b];
          e[b] = e[b - 1], e[b - 1] = t;
        }
      const char *name = sp_graph_param_name(ref.g, i);
      const double t = m == &vgg_case ? vgg_bf16_tol(name) : tol, med = e[seeds / 2];
      printf("# [%s] grad.%s: median relative L2 error %.3g (%.3g-%.3g)\n", m->label, name, med, e[0], e[seeds - 1]);
      if (!(med <= t)) fail_msg("[%s] grad.%s: median relative L2 error %.3g > %.2g", m->label, name, med, t);
    }
    free_run(&ref);
    free_run(&cpu);
  }
  free(err);
}

static void residual_net_f32(void **s) {
  (void)s;
  cmp_require_cpu();
  gradients_match(&residual_case, 0, 1e-4);
}

/* A training plan that reads only the loss (what the trainer makes): the
 * heatmaps output is no longer kept, so the cpu backend fuses the head conv
 * with soft-argmax (conv_softargmax.c), or runs the two in its own layout;
 * either way the loss and every gradient still match the reference, and the
 * output is refused rather than read stale. */
static void loss_only_training_plan(void **s) {
  (void)s;
  cmp_require_cpu();
  gradients_match(&head_case, SP_PLAN_LOSS_ONLY, 1e-4); /* fused */
#ifdef SPRY_HAVE_DNNL
  cpu_conv_use_softargmax = 0; /* apart: the heatmaps' buffer is reused once soft-argmax has read it */
#endif
  gradients_match(&head_case, SP_PLAN_LOSS_ONLY, 1e-4);
  run kept = make_run(&head_case, SP_BACKEND_CPU, 0, NULL),
      dropped = make_run(&head_case, SP_BACKEND_CPU, SP_PLAN_LOSS_ONLY, NULL);
  assert_non_null(sp_plan_output(kept.p, "heatmaps"));
  assert_null(sp_plan_output(dropped.p, "heatmaps"));
  assert_non_null(strstr(sp_last_error(), "SP_PLAN_LOSS_ONLY"));
  assert_true(sp_plan_arena_bytes(dropped.p) < sp_plan_arena_bytes(kept.p));
  free_run(&kept);
  free_run(&dropped);
#ifdef SPRY_HAVE_DNNL
  cpu_conv_use_softargmax = 1;
#endif
}

static void tsm_block_f32(void **s) {
  (void)s;
  cmp_require_cpu();
  gradients_match(&tsm_case, 0, 1e-4);
}

/* Multigrid's situation: one graph, plans of several spatial sizes and
 * batches used in turn (each plan's primitives, weight copies and arena its
 * own; parameters and gradients shared). Every step on every plan must give
 * the reference's gradients. */
static void plans_of_several_sizes(void **s) {
  (void)s;
  cmp_require_cpu();
  const model_case *m = &tsm_case;
  run ref = make_run(m, SP_BACKEND_REF, 0, NULL), cpu = make_run(m, SP_BACKEND_CPU, 0, ref.g);
  const int sizes[3][2] = {{6, 2}, {4, 2}, {8, 2}}; /* H = W, clips (the block's consensus takes 2) */
  sp_plan *rp[3], *cp[3];
  for (int k = 0; k < 3; k++) {
    sp_input_shape in[2] = {{"x", sp_shape4(sizes[k][1] * 4, 16, sizes[k][0], sizes[k][0])},
                            {"t", sp_shape1(sizes[k][1])}};
    rp[k] = sp_plan_new(ref.g, 2, in, SP_BACKEND_REF, 1, 0);
    cp[k] = sp_plan_new(cpu.g, 2, in, SP_BACKEND_CPU, 1, 0);
    assert_non_null(rp[k]);
    assert_non_null(cp[k]);
  }
  cmp_case c = {"tsm sizes", NULL, 0, 0, 0, 0, 1, 0, 1e-4, 0};
  double floor = cmp_grad_floor_for(ref.g, 0);
  for (int it = 0; it < 7; it++) {
    int k = (it * 2) % 3; /* 0, 2, 1, 0, 2, 1, 0 */
    run r = {ref.g, rp[k]}, q = {cpu.g, cp[k]};
    fill(m, &r, 40 + (uint64_t)it);
    fill(m, &q, 40 + (uint64_t)it);
    float lr_ = step(&r), lc = step(&q);
    cmp_tensor(&c, "loss", &lc, &lr_, 1, 1e-4);
    char what[600];
    for (int i = 0; i < sp_graph_param_count(ref.g); i++) {
      const sp_tensor *gr = sp_graph_param_grad(ref.g, i);
      if (!gr) continue;
      snprintf(what, sizeof what, "step %d size %d grad.%s", it, sizes[k][0], sp_graph_param_name(ref.g, i));
      cmp_tensor_floor(&c, what, sp_graph_param_grad(cpu.g, i)->data, gr->data, sp_tensor_numel(gr), 1e-4, floor);
    }
  }
  for (int k = 0; k < 3; k++) sp_plan_free(rp[k]), sp_plan_free(cp[k]);
  free_run(&ref);
  free_run(&cpu);
}

/* The same with the whole TSM-R18 (width 16) that Multigrid trains on the
 * synthetic set, at its three short-cycle sizes (32, 48, 64 px: layer4 meets
 * 1x1, 2x2 and 2x2 maps, oneDNN picks other kernels per size). */
static sp_value tsm_r18(sp_graph *g, sp_value x, sp_value t) {
  sp_tsn_config tc = sp_tsn_config_default(18, 4, 4, 1);
  tc.width = 16;
  return sp_cross_entropy(g, sp_model_tsn(g, x, &tc), t);
}
static const model_case tsm_r18_case = {"tsm-r18", tsm_r18, 3, -1, SP_I32, {4, {8, 3, 32, 32}}, {1, {2}}};

static void tsm_r18_plans_of_several_sizes(void **s) {
  (void)s;
  cmp_require_cpu();
  const model_case *m = &tsm_r18_case;
  run ref = make_run(m, SP_BACKEND_REF, 0, NULL), cpu = make_run(m, SP_BACKEND_CPU, 0, ref.g);
  const int sizes[3][2] = {{32, 4}, {48, 2}, {64, 1}}; /* H = W, clips of 4 frames */
  sp_plan *rp[3], *cp[3];
  for (int k = 0; k < 3; k++) {
    sp_input_shape in[2] = {{"x", sp_shape4(sizes[k][1] * 4, 3, sizes[k][0], sizes[k][0])},
                            {"t", sp_shape1(sizes[k][1])}};
    rp[k] = sp_plan_new(ref.g, 2, in, SP_BACKEND_REF, 1, 0);
    cp[k] = sp_plan_new(cpu.g, 2, in, SP_BACKEND_CPU, 1, 0);
    assert_non_null(rp[k]);
    assert_non_null(cp[k]);
  }
  cmp_case c = {"tsm-r18 sizes", NULL, 0, 0, 0, 0, 1, 0, 1e-4, 0};
  for (int it = 0; it < 3; it++) {
    int k = it;
    run r = {ref.g, rp[k]}, q = {cpu.g, cp[k]};
    fill(m, &r, 70 + (uint64_t)it);
    fill(m, &q, 70 + (uint64_t)it);
    float lr_ = step(&r), lc = step(&q);
    printf("# size %d: loss ref %.7f cpu %.7f\n", sizes[k][0], lr_, lc);
    cmp_tensor(&c, "loss", &lc, &lr_, 1, 1e-4);
    double floor = cmp_grad_floor_for(ref.g, 0);
    char what[600];
    for (int i = 0; i < sp_graph_param_count(ref.g); i++) {
      const sp_tensor *gr = sp_graph_param_grad(ref.g, i);
      if (!gr) continue;
      snprintf(what, sizeof what, "size %d grad.%s", sizes[k][0], sp_graph_param_name(ref.g, i));
      cmp_tensor_floor(&c, what, sp_graph_param_grad(cpu.g, i)->data, gr->data, sp_tensor_numel(gr), 1e-4, floor);
    }
  }
  for (int k = 0; k < 3; k++) sp_plan_free(rp[k]), sp_plan_free(cp[k]);
  free_run(&ref);
  free_run(&cpu);
}

static void vgg_gradients_f32(void **s) {
  (void)s;
  cmp_require_cpu();
  gradients_match(&vgg_case, 0, 1e-4);
}

/* 5 training steps. With SGD (momentum) the two runs train independently and
 * the losses must agree within 1e-4 relative at every step. With AdamW the
 * cpu run is given ref's parameters after every step: Adam divides by the
 * gradient's own magnitude, so the rounding noise in a gradient that is zero
 * in exact arithmetic (fc1.bias feeds a BN, whose mean removes it) becomes a
 * full lr-sized step in a random direction, and independent runs drift apart
 * as any two float32 implementations do (see tests/models/test_torch_parity.c).
 * Synced, every step's loss and gradients are checked. */
static void train_5_steps(sp_opt_kind kind, float lr, int sync) {
  run ref = make_run(&vgg_case, SP_BACKEND_REF, 0, NULL), cpu = make_run(&vgg_case, SP_BACKEND_CPU, 0, ref.g);
  sp_opt_config cfg = sp_opt_config_default(kind);
  if (kind == SP_OPT_SGD) cfg.momentum = 0.9f;
  int n_ref, n_cpu;
  sp_opt_param *pr = sp_train_opt_params(ref.g, &n_ref), *pc = sp_train_opt_params(cpu.g, &n_cpu);
  sp_optimizer *o_ref = sp_optimizer_new(&cfg, n_ref, pr), *o_cpu = sp_optimizer_new(&cfg, n_cpu, pc);
  cmp_case c = {sync ? "vgg-face AdamW (synced)" : "vgg-face SGD", NULL, 0, 0, 0, 0, 1, 0, 1e-4, 0};
  char what[600];
  for (int k = 0; k < 5; k++) {
    fill(&vgg_case, &ref, 100 + (uint64_t)k);
    fill(&vgg_case, &cpu, 100 + (uint64_t)k);
    float l_ref = step(&ref), l_cpu = step(&cpu);
    printf("# %s step %d: loss ref %.7f cpu %.7f\n", c.label, k, l_ref, l_cpu);
    cmp_tensor(&c, "loss", &l_cpu, &l_ref, 1, 1e-4);
    double floor = cmp_grad_floor(ref.g);
    for (int i = 0; sync && i < sp_graph_param_count(ref.g); i++) {
      const sp_tensor *gr = sp_graph_param_grad(ref.g, i);
      if (!gr) continue;
      snprintf(what, sizeof what, "step %d grad.%s", k, sp_graph_param_name(ref.g, i));
      cmp_tensor_floor(&c, what, sp_graph_param_grad(cpu.g, i)->data, gr->data, sp_tensor_numel(gr), 1e-4, floor);
    }
    assert_int_equal(sp_optimizer_step(o_ref, lr), 0);
    assert_int_equal(sp_optimizer_step(o_cpu, lr), 0);
    for (int i = 0; sync && i < sp_graph_param_count(ref.g); i++)
      memcpy(sp_graph_param_value(cpu.g, i)->data, sp_graph_param_value(ref.g, i)->data,
             sp_tensor_bytes(sp_graph_param_value(ref.g, i)));
  }
  sp_optimizer_free(o_ref);
  sp_optimizer_free(o_cpu);
  free(pr);
  free(pc);
  free_run(&ref);
  free_run(&cpu);
}

static void vgg_training_5_steps(void **s) {
  (void)s;
  cmp_require_cpu();
  train_5_steps(SP_OPT_SGD, 0.01f, 0);
  /* Synced, on oneDNN's direct kernels only. From step 1 this case has
   * gradients that rounding moves a lot while the loss does not: the
   * reference itself, built with -O0 (the sanitizer build) and with -O2,
   * gives the same loss to 9 digits and a first-layer gradient 16% apart.
   * The direct kernels happen to round like the reference in both builds;
   * Winograd (f32 3x3 from 32 channels) rounds otherwise, and is held to
   * the reference one step at a time in test_cpu_winograd.c; so does the
   * fused stem + batch norm (test_cpu_conv_stem_bn.c). */
  const int stem_bn = cpu_stem_bn_on; /* the fused stem + batch norm (conv_stem_bn.c) sums in other orders too */
  cpu_conv_winograd = 0, cpu_stem_bn_on = 0;
  train_5_steps(SP_OPT_ADAMW, 1e-3f, 1);
  cpu_conv_winograd = 1, cpu_stem_bn_on = stem_bn;
}

/* Same seed, same thread count: bitwise the same loss and gradients. */
static void reproducible(const model_case *m, unsigned flags) {
  run a = make_run(m, SP_BACKEND_CPU, flags, NULL), b = make_run(m, SP_BACKEND_CPU, flags, a.g);
  fill(m, &a, 9);
  fill(m, &b, 9);
  float la = step(&a), lb = step(&b);
  if (memcmp(&la, &lb, sizeof la)) fail_msg("[%s] loss %.9g then %.9g", m->label, la, lb);
  for (int i = 0; i < sp_graph_param_count(a.g); i++) {
    const sp_tensor *ga = sp_graph_param_grad(a.g, i);
    if (ga && memcmp(ga->data, sp_graph_param_grad(b.g, i)->data, sp_tensor_bytes(ga)))
      fail_msg("[%s] gradient of %s differs between two identical runs", m->label, sp_graph_param_name(a.g, i));
  }
  free_run(&a);
  free_run(&b);
}

static void reproducible_f32(void **s) {
  (void)s;
  cmp_require_cpu();
  reproducible(&vgg_case, 0);
  reproducible(&residual_case, 0);
}

/* bf16 (bf16 weights and activations, f32 accumulation and parameter
 * gradients) against the f32 reference. Reviewed tolerance: 6e-2 relative L2
 * error per tensor (measured up to 3.4% on these nets; bias gradients that
 * are zero in exact arithmetic are held to the bf16 floor, see
 * backend_compare.h). */
static void models_bf16(void **s) {
  (void)s;
  cmp_require_cpu();
  cmp_require_bf16();
  gradients_match(&residual_case, SP_PLAN_BF16, 6e-2);
  gradients_match(&tsm_case, SP_PLAN_BF16, 6e-2);
  gradients_match(&vgg_case, SP_PLAN_BF16, 6e-2);
  reproducible(&vgg_case, SP_PLAN_BF16);
}

/* Inference loss of m on both backends, the cpu plan frozen (weights
 * prepared once, SP_PLAN_FROZEN). */
static double eval_loss(sp_plan *p) {
  assert_int_equal(sp_plan_forward(p), 0);
  return sp_plan_loss(p);
}

/* Residual adds in the frozen plans below, and those a conv took as a post-op. */
static int frozen_adds, frozen_adds_fused;

/* flags: SP_PLAN_BF16 or 0; tol: relative, for the losses; factor: the
 * weight change (every conv and linear weight). */
static void frozen(const model_case *m, unsigned flags, double tol, float factor) {
  run ref = make_run(m, SP_BACKEND_REF, 0, NULL);
  /* Trained-looking batch norms (statistics, scale, shift) and biases, so
   * that folding them into the convolutions (what a frozen cpu plan does)
   * is a real transformation: every 1-D tensor in [0.5, 1.5). */
  sp_test_rng rng = {21};
  for (int i = 0; i < sp_graph_param_count(ref.g); i++) {
    sp_tensor *t = sp_graph_param_value(ref.g, i);
    if (t->shape.ndim == 1) sp_test_fill_uniform(&rng, t->data, sp_tensor_numel(t), 0.5f, 1.5f);
  }
  run cpu = make_run(m, SP_BACKEND_CPU, 0, ref.g);
  sp_input_shape in[2] = {{"x", m->x_shape}, {"t", m->t_shape}};
  sp_plan *pr = sp_plan_new(ref.g, 2, in, SP_BACKEND_REF, 0, 0),
          *pc = sp_plan_new(cpu.g, 2, in, SP_BACKEND_CPU, 0, SP_PLAN_FROZEN | flags);
  assert_non_null(pr);
  assert_non_null(pc);
  run er = {ref.g, pr}, ec = {cpu.g, pc};
  fill(m, &er, 11);
  fill(m, &ec, 11);
  /* Zero targets: the L1 loss is then the size of the predictions, which
   * the weights below change (random targets would hide them at init). */
  memset(sp_plan_input(pr, "t")->data, 0, sp_tensor_bytes(sp_plan_input(pr, "t")));
  memset(sp_plan_input(pc, "t")->data, 0, sp_tensor_bytes(sp_plan_input(pc, "t")));
  sp_plan_enable_profile(pc, 1);
  double l0 = eval_loss(pr), c0 = eval_loss(pc);
  if (!(fabs(c0 - l0) <= tol * fabs(l0))) fail_msg("[%s] frozen loss %.9g, reference %.9g", m->label, c0, l0);
  /* Each batch norm right after a conv was folded into it: never run; so
   * were the residual adds after those (the conv's binary post-op). */
  int folded = 0, bns = 0, relus = 0, post_ops = 0, adds = 0, adds_fused = 0;
  for (int i = 0; i < sp_graph_node_count(cpu.g); i++) {
    double f, b;
    const char *op;
    assert_int_equal(sp_plan_profile(pc, i, &f, &b, &op), 0);
    if (strcmp(op, "batchnorm") == 0) bns++, folded += f == 0;
    if (strcmp(op, "relu") == 0) relus++, post_ops += f == 0; /* the conv's post-op (or fused elsewhere) */
    if (strcmp(op, "add") == 0) adds++, adds_fused += f == 0;
  }
  assert_true(folded > 0);
  print_message("# %s%s: %d of %d batch norms folded, %d of %d relus fused, %d of %d adds fused\n", m->label,
                flags ? " bf16" : "", folded, bns, post_ops, relus, adds_fused, adds);
  frozen_adds += adds, frozen_adds_fused += adds_fused;
  assert_true(fabs(eval_loss(pc) - c0) == 0); /* again, from the kept weights */
  /* Change every conv and linear weight on both graphs (the ones the cpu
   * backend prepares): the frozen plan keeps computing with the prepared
   * ones (that is what it promises) until told. */
  for (int i = 0; i < sp_graph_param_count(ref.g); i++) {
    sp_tensor *a = sp_graph_param_value(ref.g, i), *b = sp_graph_param_value(cpu.g, i);
    if (a->shape.ndim < 2) continue;
    for (int64_t j = 0; j < sp_tensor_numel(a); j++) ((float *)a->data)[j] = ((float *)b->data)[j] *= factor;
  }
  double l1 = eval_loss(pr);
  print_message("# %s: %.9g -> %.9g\n", m->label, l0, l1);
  assert_true(fabs(l1 - l0) > 1e-3 * fabs(l0));
  assert_true(fabs(eval_loss(pc) - c0) == 0);
  sp_plan_params_changed(pc);
  const double c1 = eval_loss(pc);
  if (!(fabs(c1 - l1) <= tol * fabs(l1))) fail_msg("[%s] frozen loss %.9g, reference %.9g", m->label, c1, l1);
  sp_plan_free(pr);
  sp_plan_free(pc);
  free_run(&ref);
  free_run(&cpu);
}

static void frozen_inference(void **s) {
  (void)s;
  cmp_require_cpu();
  frozen(&vgg_case, 0, 1e-4, 2.0f);
  frozen(&residual_case, 0, 1e-4, 2.0f);
  frozen(&resunet50_case, 0, 1e-4, 2.0f);
  /* bf16: the add post-op reads the other input in bf16, as the add did.
   * A milder change for ResUNet-50: doubling every weight of 50 layers on fixed batch
   * statistics grows the activations by 2^50, where bf16 rounding alone
   * moves the saturated soft-argmax anywhere. */
  if (cmp_bf16_here()) {
    frozen(&residual_case, SP_PLAN_BF16, 3e-2, 2.0f);
    frozen(&bottleneck6_case, SP_PLAN_BF16, 3e-2, 2.0f);
    frozen(&resunet50_case, SP_PLAN_BF16, 3e-2, 1.05f);
  }
#ifdef SPRY_HAVE_DNNL
  /* A conv takes the add only where oneDNN keeps the kernel it has without
   * the post-op (backends/cpu/conv.c, same_kernel_without_add): its brgemm
   * kernels take no binary post-op in oneDNN 2.6. On the AMX machine: 5 of
   * resunet50's 21 in f32, none in bf16. Some, on every AVX-512 machine. */
  if (dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core) assert_true(frozen_adds_fused > 0);
  print_message("# frozen plans: %d of %d adds fused\n", frozen_adds_fused, frozen_adds);
#endif
  /* Training plans change their weights every step: refused. */
  run r = make_run(&residual_case, SP_BACKEND_REF, 0, NULL);
  sp_input_shape in[2] = {{"x", residual_case.x_shape}, {"t", residual_case.t_shape}};
  assert_null(sp_plan_new(r.g, 2, in, SP_BACKEND_CPU, 1, SP_PLAN_FROZEN));
  assert_non_null(strstr(sp_last_error(), "SP_PLAN_FROZEN"));
  free_run(&r);
}

/* The seed's VGG at 96 px on 16 real photos of ../shared/data/imm_face_db
 * (the whole photo, grey), as `spry predict` or `spry eval` run it at batch
 * 16: a frozen cpu plan's predictions against the ref backend's. At this
 * size the frozen f32 stem computes the second layer (9216 positions) and
 * fc1 (1152 -> 1024, 16 rows) runs linear_fwd.c; below AVX-512 both must
 * have run. */
enum { IMM_N = 16, IMM_S = 96, IMM_K = 58 };

/* The first photo of IMM persons 1..16, whole, grey, IMM_S x IMM_S, scaled
 * to [-1, 1], into each of the n inputs x[b] ([IMM_N, 1, IMM_S, IMM_S]). 0,
 * or -1 (SKIP printed) where ../shared/data is absent. */
static int load_imm_photos(float *const *x, int n) {
  char path[4096], name[64];
  if (!sp_test_data_path("imm_face_db/01-1m.jpg", path, sizeof path)) {
    printf("# ../shared/data absent: skipped\n");
    return -1;
  }
  for (int i = 0; i < IMM_N; i++) {
    sp_image im;
    snprintf(name, sizeof name, "imm_face_db/%02d-1m.jpg", i + 1); /* the first photo of person i + 1 (m or f) */
    if (!sp_test_data_path(name, path, sizeof path)) snprintf(name, sizeof name, "imm_face_db/%02d-1f.jpg", i + 1);
    if (!sp_test_data_path(name, path, sizeof path) || sp_image_load(path, 1, &im) != 0)
      fail_msg("%s: missing or unreadable (%s)", name, sp_last_error());
    uint8_t px[IMM_S * IMM_S];
    sp_image_crop(&im, sp_crop_rect_whole(im.w, im.h), IMM_S, 1, px);
    sp_image_free(&im);
    for (int b = 0; b < n; b++)
      for (int j = 0; j < IMM_S * IMM_S; j++) x[b][(size_t)i * IMM_S * IMM_S + j] = (float)px[j] / 127.5f - 1.0f;
  }
  return 0;
}

static void real_faces_frozen_vgg(void **s) {
  (void)s;
  cmp_require_cpu();
  enum { N = IMM_N, S = IMM_S, K = IMM_K };
  sp_graph *g[2];
  sp_plan *p[2];
  sp_input_shape in[1] = {{"x", sp_shape4(N, 1, S, S)}};
  for (int b = 0; b < 2; b++) {
    g[b] = sp_graph_new(9);
    sp_value x = sp_graph_input(g[b], "x", SP_F32, 1);
    sp_graph_output(g[b], sp_model_vgg(g[b], x, S, S, K), "y");
    assert_null(sp_graph_error(g[b]));
  }
  /* Trained-looking batch norms and biases (every 1-D tensor in [0.5, 1.5)), the same in both. */
  sp_test_rng rng = {23};
  for (int i = 0; i < sp_graph_param_count(g[0]); i++) {
    sp_tensor *t = sp_graph_param_value(g[0], i);
    if (t->shape.ndim == 1) sp_test_fill_uniform(&rng, t->data, sp_tensor_numel(t), 0.5f, 1.5f);
    memcpy(sp_graph_param_value(g[1], i)->data, t->data, sp_tensor_bytes(t));
  }
  p[0] = sp_plan_new(g[0], 1, in, SP_BACKEND_REF, 0, 0);
  p[1] = sp_plan_new(g[1], 1, in, SP_BACKEND_CPU, 0, SP_PLAN_FROZEN);
  assert_non_null(p[0]);
  assert_non_null(p[1]);
  float *const x[2] = {sp_plan_input(p[0], "x")->data, sp_plan_input(p[1], "x")->data};
  if (load_imm_photos(x, 2) != 0) {
    for (int b = 0; b < 2; b++) sp_plan_free(p[b]), sp_graph_free(g[b]);
    skip();
  }
#ifdef SPRY_HAVE_DNNL
  const long fused = cpu_stem_fused_calls, linear = cpu_linear_fwd_calls;
#endif
  for (int b = 0; b < 2; b++) assert_int_equal(sp_plan_forward(p[b]), 0);
  const sp_tensor *want = sp_plan_output(p[0], "y"), *got = sp_plan_output(p[1], "y");
  cmp_case c = {"vgg-face 96 on IMM photos, frozen", NULL, 0, 0, 0, 0, 0, SP_PLAN_FROZEN, 1e-4, 0};
  cmp_tensor(&c, "predictions", got->data, want->data, sp_tensor_numel(want), 1e-4);
#ifdef SPRY_HAVE_DNNL
  printf("# fused stem calls %ld, linear_fwd calls %ld\n", cpu_stem_fused_calls - fused, cpu_linear_fwd_calls - linear);
#if defined(__AVX2__) && defined(__FMA__)
  if (!sp_backend_cpu_avx512()) {
    assert_int_equal(cpu_stem_fused_calls - fused, 1);
    assert_int_equal(cpu_linear_fwd_calls - linear, 1);
  }
#endif
#endif
  for (int b = 0; b < 2; b++) sp_plan_free(p[b]), sp_graph_free(g[b]);
}

static sp_value vgg96(sp_graph *g, sp_value x, sp_value t) {
  return sp_l1_loss(g, sp_model_vgg(g, x, IMM_S, IMM_S, IMM_K), t);
}

/* One f32 training step of the seed's VGG at 96 px on the same 16 photos
 * (batch statistics of real images), cpu against ref: the loss and every
 * gradient. On the cpu backend the stem, its batch norm and ReLU run as
 * one node (conv_stem_bn.c, switched on with AVX-512 too). */
static void real_faces_training_vgg(void **s) {
  (void)s;
  cmp_require_cpu();
  static const model_case m = {"vgg-face 96 on IMM photos, training", vgg96, 1, IMM_K, SP_F32,
                               {4, {IMM_N, 1, IMM_S, IMM_S}}, {3, {IMM_N, IMM_K, 2}}};
#ifdef SPRY_HAVE_DNNL
  const int on = cpu_stem_bn_on;
  cpu_stem_bn_on = 2;
  const long calls = cpu_stem_bn_calls;
#endif
  run ref = make_run(&m, SP_BACKEND_REF, 0, NULL), cpu = make_run(&m, SP_BACKEND_CPU, 0, ref.g);
  fill(&m, &ref, 5);
  fill(&m, &cpu, 5);
  float *const x[2] = {sp_plan_input(ref.p, "x")->data, sp_plan_input(cpu.p, "x")->data};
  if (load_imm_photos(x, 2) != 0) {
    free_run(&ref), free_run(&cpu);
    skip();
  }
  float l_ref = step(&ref), l_cpu = step(&cpu);
  cmp_case c = {m.label, NULL, 0, 0, 0, 0, 1, 0, 1e-4, 0};
  printf("# %s: loss ref %.7f cpu %.7f\n", m.label, l_ref, l_cpu);
  cmp_tensor(&c, "loss", &l_cpu, &l_ref, 1, 1e-4);
  const double floor = cmp_grad_floor(ref.g);
  char what[600];
  for (int i = 0; i < sp_graph_param_count(ref.g); i++) {
    const sp_tensor *gr = sp_graph_param_grad(ref.g, i);
    if (!gr) continue;
    snprintf(what, sizeof what, "grad.%s", sp_graph_param_name(ref.g, i));
    cmp_tensor_floor(&c, what, sp_graph_param_grad(cpu.g, i)->data, gr->data, sp_tensor_numel(gr), 1e-4, floor);
  }
#ifdef SPRY_HAVE_DNNL
  printf("# fused stem + batch norm calls %ld\n", cpu_stem_bn_calls - calls);
#if defined(__AVX2__) && defined(__FMA__)
  assert_int_equal(cpu_stem_bn_calls - calls, 1);
#endif
  cpu_stem_bn_on = on;
#endif
  free_run(&ref);
  free_run(&cpu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(real_faces_frozen_vgg),
      cmocka_unit_test(real_faces_training_vgg),
      cmocka_unit_test(frozen_inference),
      cmocka_unit_test(plans_of_several_sizes),
      cmocka_unit_test(tsm_r18_plans_of_several_sizes),
      cmocka_unit_test(residual_net_f32),
      cmocka_unit_test(loss_only_training_plan),
      cmocka_unit_test(tsm_block_f32),
      cmocka_unit_test(vgg_gradients_f32),
      cmocka_unit_test(vgg_training_5_steps),
      cmocka_unit_test(reproducible_f32),
      cmocka_unit_test(models_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
