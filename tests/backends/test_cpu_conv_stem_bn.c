/* A training plan's stem with its batch norm and ReLU as one node
 * (backends/cpu/conv_stem_bn.c), f32 and bf16 plans: against the reference
 * backend (output, loss, every gradient, the running statistics), against
 * the stem and the batch norm apart (oneDNN's convolution or the stem's own
 * node, and bnorm.c's batch norm) on the same values, over grey and colour
 * images, strides 1-3, padding, dilation, a bias, widths that end in a
 * partial vector or a lone position and a batch norm without a ReLU after
 * it; and taken only where it applies (below AVX-512 and with it). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* Each stem feeds its batch norm (and ReLU), then a 3x3 stride-2 conv, as
 * in vgg-face. */
static sp_value tail(sp_graph *g, sp_value x) {
  return sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
}
static sp_value bn_relu(sp_graph *g, sp_value x) { return tail(g, sp_relu(g, sp_batchnorm(g, x, "bn"))); }
static sp_value b_grey_s2(sp_graph *g, sp_value x) {
  return bn_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1}));
}
static sp_value b_grey_bias_no_relu(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1, .bias = 1});
  return tail(g, sp_batchnorm(g, x, "bn"));
}
static sp_value b_colour_s2(sp_graph *g, sp_value x) {
  return bn_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1}));
}
static sp_value b_grey_k5_s3(sp_graph *g, sp_value x) {
  return bn_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 5, .stride = 3, .pad = 2}));
}
static sp_value b_two_dilated(sp_graph *g, sp_value x) {
  return bn_relu(
      g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 2, .dilation = 2}));
}

static sp_value b_grey_k7_s2(sp_graph *g, sp_value x) {
  return bn_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 7, .stride = 2, .pad = 3}));
}
static sp_value b_grey_no_pad(sp_graph *g, sp_value x) {
  return bn_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3}));
}
static sp_value b_four_s1(sp_graph *g, sp_value x) {
  return bn_relu(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 8, .kernel = 3, .pad = 1}));
}

typedef struct {
  const char *label;
  cmp_build_fn body;
  int n, c, h, w;
} stem_case;

static const stem_case cases[] = {
    {"grey 3x3 s2, 19 wide", b_grey_s2, 3, 1, 23, 37},
    {"grey 3x3 s2, 24 wide", b_grey_s2, 2, 1, 16, 48},
    {"grey 3x3 s2, 5 wide", b_grey_s2, 3, 1, 11, 9},
    {"grey 3x3 bias, no relu", b_grey_bias_no_relu, 2, 1, 9, 21},
    {"colour 3x3 s2", b_colour_s2, 2, 3, 17, 30},
    {"grey 5x5 s3", b_grey_k5_s3, 2, 1, 20, 29},
    {"two channels dilated", b_two_dilated, 2, 2, 17, 21},
    {"grey 7x7 s2 (49 taps)", b_grey_k7_s2, 2, 1, 21, 26},
    {"four channels 3x3 s1", b_four_s1, 2, 4, 10, 13},
    {"grey 3x3 s1, no padding", b_grey_no_pad, 2, 1, 20, 27},
};

/* cases[i] as a training step, held to tol (0: cmp_run's default). */
static cmp_case training_case(size_t i, double tol) {
  return (cmp_case){cases[i].label, cases[i].body, cases[i].n, cases[i].c, cases[i].h, cases[i].w, 1, 0, tol, 0};
}

/* ... in a bf16 plan (6e-2: bf16's floor against the f32 reference). */
static cmp_case bf16_case(size_t i) {
  cmp_case k = training_case(i, 6e-2);
  k.flags = SP_PLAN_BF16;
  return k;
}

static int on_default = -1;
static void force_on(void) {
  if (on_default < 0) on_default = cpu_stem_bn_on;
  cpu_stem_bn_on = 1;
}
static void put_back(void) { cpu_stem_bn_on = on_default; }

static void require_avx2_build(void) {
#if !(defined(__AVX2__) && defined(__FMA__))
  printf("# built without AVX2 + FMA: the node does not exist here: skipped\n");
  skip();
#endif
}

/* Outputs from half the last-level cache stream past the caches (vgg-face
 * at batch 64): these small ones do not, so each case runs with the
 * threshold at 0 too. */
static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  require_avx2_build();
  force_on();
  for (int stream = 0; stream < 2; stream++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      cpu_bn_stream_bytes = stream ? 0 : -1;
      cmp_case k = training_case(i, 1e-4);
      cmp_run_counted(&k, &cpu_stem_bn_calls, 1, stream ? "stem + batch norm, streamed" : "stem + batch norm");
      if (!cmp_bf16_here()) continue;
      k = bf16_case(i);
      cmp_run_counted(&k, &cpu_stem_bn_calls, 1, stream ? "bf16 stem + batch norm, streamed" : "bf16 stem + batch norm");
    }
  cpu_bn_stream_bytes = -1;
  put_back();
}

static void fused_or_apart(int path) { cpu_stem_bn_on = path == 0 ? 1 : 0; }

/* One training step fused and one apart (oneDNN's convolution, bnorm.c's
 * batch norm), same parameters and inputs: the output and every gradient
 * agree to summation order (the statistics come from the image's sums, the
 * weight gradient from three sums per tap). */
static void same_as_apart(void **st) {
  (void)st;
  cmp_require_cpu();
  require_avx2_build();
  force_on();
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cmp_case k = training_case(c, 0);
    const long before = cpu_stem_bn_calls;
    /* The stem's bias before the batch norm has no true gradient: noise on both paths. */
    const cmp_two_opts o = {.shift_free = "stem"};
    cmp_two_paths_with(&k, fused_or_apart, 2e-5, &o);
    assert_true(cpu_stem_bn_calls > before);
    if (!cmp_bf16_here()) continue;
    /* bf16: apart, the stem's output is rounded to bf16 before the batch
     * norm reads it; here it stays f32 (a few bf16 steps apart). */
    k = bf16_case(c);
    const long before_bf16 = cpu_stem_bn_calls;
    cmp_two_paths_with(&k, fused_or_apart, 2e-2, &o);
    assert_true(cpu_stem_bn_calls > before_bf16);
  }
  put_back();
}

/* Without sp_plan_zero_grad between two steps the stem's and the batch
 * norm's gradients add (the node writes them only when told they are
 * fresh, which tests/backends/test_cpu_zero_grad.c covers). */
static void gradients_add(void **st) {
  (void)st;
  cmp_require_cpu();
  require_avx2_build();
  force_on();
  cmp_case k = training_case(0, 0);
  cmp_grad_adds_twice(&k, "stem.weight", 3);
  cmp_grad_adds_twice(&k, "bn.weight", 3);
  cmp_grad_adds_twice(&k, "bn.bias", 3);
  put_back();
}

/* One training step of k on ref and on cpu (same parameters, as cmp_run
 * sets them), the image x = offset + scale u (u uniform in [-1, 1]);
 * the cpu step run from inside a parallel region (its node's team of one,
 * smaller than the threads its plan was made for) where `team_of_one`, and
 * after sp_plan_zero_grad with every gradient NaN where `nan_grads` (a
 * gradient the node is told to overwrite is never read). Output, loss,
 * parameters (running statistics included) and, where `grads`, every
 * gradient within 1e-4 of ref. */
static void step_against_ref(const cmp_case *k, float offset, float scale, int team_of_one, int nan_grads,
                             int grads) {
  sp_shape ys = cmp_out_shape(k);
  sp_value y[2];
  sp_graph *g[2] = {cmp_graph(k, &y[0]), cmp_graph(k, &y[1])};
  sp_plan *p[2] = {cmp_plan(k, g[0], &ys, SP_BACKEND_REF, 0), cmp_plan(k, g[1], &ys, SP_BACKEND_CPU, 0)};
  const long before = cpu_stem_bn_calls;
  for (int b = 0; b < 2; b++) /* before either runs: a step moves the running statistics */
    for (int i = 0; i < sp_graph_param_count(g[b]); i++) {
      sp_tensor *v = sp_graph_param_value(g[b], i);
      sp_test_rng r = {1000u + (uint64_t)i};
      if (strstr(sp_graph_param_name(g[b], i), "running_var"))
        sp_test_fill_uniform(&r, v->data, sp_tensor_numel(v), 0.5f, 1.5f);
      else if (b == 1)
        memcpy(v->data, sp_graph_param_value(g[0], i)->data, sp_tensor_bytes(v));
    }
  for (int b = 0; b < 2; b++) {
    cmp_fill(p[b], 99, 0);
    sp_tensor *x = sp_plan_input(p[b], "x");
    for (int64_t i = 0; i < sp_tensor_numel(x); i++) ((float *)x->data)[i] = offset + scale * ((float *)x->data)[i];
    if (b == 1 && nan_grads) {
      for (int i = 0; i < sp_graph_param_count(g[b]); i++) {
        sp_tensor *gr = sp_graph_param_grad(g[b], i);
        for (int64_t j = 0; gr && j < sp_tensor_numel(gr); j++) ((float *)gr->data)[j] = NAN;
      }
      sp_plan_zero_grad(p[b]);
    } else {
      sp_graph_zero_grad(g[b]);
    }
    int rc = 0;
    if (b == 1 && team_of_one) {
      /* A step with every thread first, so each thread's scratch holds sums:
       * the step with one may not add the others' (the parameters, running
       * statistics included, put back after it). */
      const int np = sp_graph_param_count(g[b]);
      float **keep = malloc(sizeof(float *) * (size_t)np);
      for (int i = 0; i < np; i++) {
        const sp_tensor *v = sp_graph_param_value(g[b], i);
        keep[i] = malloc(sp_tensor_bytes(v));
        memcpy(keep[i], v->data, sp_tensor_bytes(v));
      }
      assert_int_equal(sp_plan_forward(p[b]) || sp_plan_backward(p[b]), 0);
      for (int i = 0; i < np; i++) {
        sp_tensor *v = sp_graph_param_value(g[b], i);
        memcpy(v->data, keep[i], sp_tensor_bytes(v));
        free(keep[i]);
      }
      free(keep);
      sp_graph_zero_grad(g[b]);
      /* Inside an active region the node's own gets one thread (no nesting). */
#pragma omp parallel num_threads(2)
#pragma omp single
      rc = sp_plan_forward(p[b]) || sp_plan_backward(p[b]);
    } else {
      rc = sp_plan_forward(p[b]) || sp_plan_backward(p[b]);
    }
    assert_int_equal(rc, 0);
  }
  assert_true(cpu_stem_bn_calls > before);
  cmp_tensor(k, "y", sp_plan_output(p[1], "y")->data, sp_plan_output(p[0], "y")->data,
             sp_tensor_numel(sp_plan_output(p[0], "y")), 1e-4);
  const double floor = cmp_grad_floor(g[0]);
  char what[600];
  for (int i = 0; i < sp_graph_param_count(g[0]); i++) {
    const char *name = sp_graph_param_name(g[0], i);
    cmp_tensor(k, name, sp_graph_param_value(g[1], i)->data, sp_graph_param_value(g[0], i)->data,
               sp_tensor_numel(sp_graph_param_value(g[0], i)), 1e-4);
    if (!grads || !sp_graph_param_grad(g[0], i)) continue;
    snprintf(what, sizeof what, "grad.%s", name);
    cmp_tensor_floor(k, what, sp_graph_param_grad(g[1], i)->data, sp_graph_param_grad(g[0], i)->data,
                     sp_tensor_numel(sp_graph_param_grad(g[0], i)), 1e-4, floor);
  }
  for (int b = 0; b < 2; b++) sp_plan_free(p[b]), sp_graph_free(g[b]);
}

/* Images as a user may feed them, 0..255 and not normalised, and 998..1002:
 * the image's sums are taken around its mean (gram_row's shift), so the
 * statistics keep their digits. Without the shift the stem without padding
 * fails on the second (0.7% in the variance; padding's zeros next to 1000
 * make the other stems' variances large). That one's gradients are not
 * compared: summing dy0 x with x near 1000 in f32 leaves every path 7-15% of
 * the largest apart (oneDNN's convolution and bnorm.c's too). */
static void image_far_from_zero(void **st) {
  (void)st;
  cmp_require_cpu();
  require_avx2_build();
  force_on();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cmp_case k = training_case(i, 1e-4);
    step_against_ref(&k, 128.0f, 100.0f, 0, 0, 1);
    step_against_ref(&k, 1000.0f, 2.0f, 0, 0, 0); /* a constant far from zero, and little else */
  }
  put_back();
}

/* Fewer threads than the plan was made for (a nested call), and gradients
 * left NaN for their first writer. */
static void small_team_and_stale_gradients(void **st) {
  (void)st;
  cmp_require_cpu();
  require_avx2_build();
  force_on();
  for (size_t i = 0; i < 3; i++) {
    cmp_case k = training_case(i, 1e-4);
    step_against_ref(&k, 0.0f, 1.0f, 1, 0, 1);
    step_against_ref(&k, 0.0f, 1.0f, 0, 1, 1);
  }
  put_back();
}

/* Taken for a training plan's conv (f32 or bf16) on the plain image (up to
 * 4 channels, a small window, 8 output channels, no input gradient) whose
 * sole consumer is a batch norm; by default on any machine. */
static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  require_avx2_build();
  force_on();
  sp_batchnorm_attr bn_at = {1e-5f, 0.1f};
  struct {
    int bf16, backward, training, need_dx, ic, kernel, oc, bn, bn_plain, relu, on, want;
  } t[] = {
      {0, 1, 1, 0, 1, 3, 8, 1, 0, 1, 1, 1},  /* vgg-face's stem */
      {0, 1, 1, 0, 3, 3, 8, 1, 0, 0, 1, 1},  /* colour, no ReLU */
      {0, 1, 1, 0, 1, 3, 8, 1, 0, 1, 0, 0},  /* switched off */
      {1, 1, 1, 0, 1, 3, 8, 1, 0, 1, 1, 1},  /* bf16 */
      {1, 1, 1, 0, 3, 3, 16, 1, 0, 1, 1, 0}, /* bf16, 16 channels: conv_stem.c's */
      {0, 0, 1, 0, 1, 3, 8, 1, 0, 1, 1, 0},  /* no backward */
      {0, 0, 0, 0, 1, 3, 8, 1, 0, 1, 1, 0},  /* inference */
      {0, 1, 1, 1, 1, 3, 8, 1, 0, 1, 1, 0},  /* the image's gradient wanted */
      {0, 1, 1, 0, 1, 3, 16, 1, 0, 1, 1, 0}, /* 16 channels */
      {0, 1, 1, 0, 8, 3, 8, 1, 0, 1, 1, 0},  /* 8 input channels */
      {0, 1, 1, 0, 1, 3, 8, 0, 0, 1, 1, 0},  /* no batch norm after it */
      {0, 1, 1, 0, 1, 3, 8, 1, 1, 1, 1, 0},  /* the batch norm's output a graph output */
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    cpu_stem_bn_on = t[i].on;
    sp_conv2d_attr at = {2, 2, 1, 1, 1, 1, 1};
    const int64_t out = (32 + 2 - t[i].kernel) / 2 + 1;
    sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, t[i].ic, 32, 32), sp_shape4(2, t[i].oc, out, out),
                                 sp_shape4(t[i].oc, t[i].ic, t[i].kernel, t[i].kernel), 0, t[i].bf16, NULL);
    p.run_backward = t[i].backward, p.training = t[i].training, p.need_d_in[0] = t[i].need_dx;
    if (t[i].bn) {
      p.consumer[0] = (sp_op_consumer){.op = &sp_op_batchnorm, .attr = &bn_at, .out_plain = t[i].bn_plain,
                                       .n_param = 2, .n_state = 2, .n_in = 1};
      p.consumer[0].out_shape = p.out_shape;
      if (t[i].relu) p.consumer[1] = (sp_op_consumer){.op = &sp_op_relu, .n_in = 1, .out_shape = p.out_shape};
    }
    assert_int_equal(cpu_conv_prepare(&p), 0);
    const int got = cpu_conv_is_stem_bn(p.state);
    if (got != t[i].want) fail_msg("case %zu: the fused stem %s", i, t[i].want ? "not taken" : "taken");
    if (got) assert_int_equal(p.absorb_consumer, 1 + t[i].relu);
    /* With AVX-512 the output is channels-last, which oneDNN's brgemm kernel
     * for the next layer reads as it lies (as 8-channel blocks, AVX2 kernels
     * ran the layers after it). Below it, one 8-channel block. */
    if (got)
      assert_int_equal(cpu_md_lanes(&((const cpu_node *)p.state)->out_md),
                       sp_backend_cpu_avx512() ? CPU_LANES_NHWC : 8);
    cpu_node_free(p.state);
  }
  /* The default: on wherever it applies (with AVX-512 too: its output is
   * declared channels-last there, which oneDNN's next kernel reads). */
  put_back();
  assert_int_equal(on_default, 1);
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_apart), cmocka_unit_test(gradients_add),
             cmocka_unit_test(image_far_from_zero), cmocka_unit_test(small_team_and_stale_gradients),
             cmocka_unit_test(taken_where_it_applies))
