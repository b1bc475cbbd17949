/* conv2d and conv_transpose2d: shape rules and their error text, gradients
 * against finite differences over random geometries (odd sizes, strides,
 * padding, dilation, groups, depthwise, with and without bias), PyTorch
 * fixtures, and results that do not depend on the OpenMP thread count. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "opcheck.h"

static int pick(sp_test_rng *r, int lo, int hi) { return lo + (int)(sp_test_rng_next(r) % (uint64_t)(hi - lo + 1)); }

static int n_random_cases(void) { return sp_test_sanitized() ? 4 : 14; }

/* ---- shape rules ------------------------------------------------------- */

static void conv2d_infer_shapes_and_errors(void **state) {
  (void)state;
  char err[256] = "";
  sp_shape out;
  sp_shape in[1] = {sp_shape4(2, 3, 7, 6)}, p[2] = {sp_shape4(8, 3, 3, 3), sp_shape1(8)};
  sp_conv2d_attr a = {2, 1, 1, 0, 1, 2, 1};
  assert_int_equal(sp_op_conv2d.infer(&a, 1, in, 2, p, &out, err, sizeof err), 0);
  /* Ho = (7+2-2-1)/2+1 = 4, Wo = (6+0-4-1)/1+1 = 2 */
  assert_int_equal(out.ndim, 4);
  assert_int_equal(out.d[0], 2);
  assert_int_equal(out.d[1], 8);
  assert_int_equal(out.d[2], 4);
  assert_int_equal(out.d[3], 2);

  sp_conv2d_attr plain = {1, 1, 0, 0, 1, 1, 1};
  p[0] = sp_shape4(8, 4, 3, 3);
  assert_int_equal(sp_op_conv2d.infer(&plain, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_string_equal(err, "conv2d: input has 3 channels but weight expects 4 (weight [8,4,3,3], groups 1)");

  p[0] = sp_shape4(8, 3, 3, 3);
  p[1] = sp_shape1(7);
  assert_int_equal(sp_op_conv2d.infer(&plain, 1, in, 2, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "bias [7]"));

  p[0] = sp_shape4(8, 3, 9, 3); /* kernel taller than the 7-row input */
  assert_int_equal(sp_op_conv2d.infer(&plain, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "larger than the padded input"));

  sp_conv2d_attr g2 = {1, 1, 0, 0, 1, 1, 2};
  in[0] = sp_shape4(1, 4, 5, 5);
  p[0] = sp_shape4(5, 2, 3, 3); /* 5 output channels do not split into 2 groups */
  assert_int_equal(sp_op_conv2d.infer(&g2, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "groups 2"));

  in[0] = sp_shape3(1, 4, 5);
  assert_int_equal(sp_op_conv2d.infer(&plain, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[1,4,5]"));
}

static void conv_transpose2d_infer_shapes_and_errors(void **state) {
  (void)state;
  char err[256] = "";
  sp_shape out;
  sp_shape in[1] = {sp_shape4(2, 4, 5, 4)}, p[2] = {sp_shape4(4, 3, 3, 2), sp_shape1(6)};
  sp_conv_transpose2d_attr a = {2, 3, 1, 0, 1, 2, 1, 2, 2};
  assert_int_equal(sp_op_conv_transpose2d.infer(&a, 1, in, 2, p, &out, err, sizeof err), 0);
  /* Ho = 4*2 - 2 + 1*2 + 1 + 1 = 10, Wo = 3*3 - 0 + 2*1 + 2 + 1 = 14; Cout = 3*2 */
  assert_int_equal(out.d[0], 2);
  assert_int_equal(out.d[1], 6);
  assert_int_equal(out.d[2], 10);
  assert_int_equal(out.d[3], 14);

  sp_conv_transpose2d_attr plain = {1, 1, 0, 0, 0, 0, 1, 1, 1};
  p[0] = sp_shape4(3, 3, 3, 3);
  assert_int_equal(sp_op_conv_transpose2d.infer(&plain, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_string_equal(err,
                      "conv_transpose2d: input has 4 channels but weight expects 3 (weight [3,3,3,3], groups 1)");

  sp_conv_transpose2d_attr bad_op = {2, 2, 0, 0, 2, 0, 1, 1, 1};
  p[0] = sp_shape4(4, 3, 3, 3);
  assert_int_equal(sp_op_conv_transpose2d.infer(&bad_op, 1, in, 1, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "output_padding 2,0"));

  p[1] = sp_shape1(4);
  assert_int_equal(sp_op_conv_transpose2d.infer(&plain, 1, in, 2, p, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "bias [4]"));
}

/* ---- gradients over random geometries ---------------------------------- */

static void conv2d_gradients_random(void **state) {
  (void)state;
  sp_test_rng r = {2024};
  for (int k = 0; k < n_random_cases(); k++) {
    sp_conv2d_attr a;
    a.groups = pick(&r, 1, 3);
    a.stride_h = pick(&r, 1, 3), a.stride_w = pick(&r, 1, 3);
    a.dil_h = pick(&r, 1, 2), a.dil_w = pick(&r, 1, 2);
    a.pad_h = pick(&r, 0, 2), a.pad_w = pick(&r, 0, 2);
    const int cin_g = pick(&r, 1, 3), cout_g = pick(&r, 1, 3);
    const int kh = pick(&r, 1, 4), kw = pick(&r, 1, 3);
    /* Inputs at least as large as the dilated kernel, odd sizes included. */
    const int h = a.dil_h * (kh - 1) + 1 + pick(&r, 0, 4), w = a.dil_w * (kw - 1) + 1 + pick(&r, 0, 5);
    const int bias = pick(&r, 0, 1);
    char label[128];
    snprintf(label, sizeof label, "conv2d #%d x[2,%d,%d,%d] w[%d,%d,%d,%d] s%d,%d p%d,%d d%d,%d g%d%s", k,
             cin_g * a.groups, h, w, cout_g * a.groups, cin_g, kh, kw, a.stride_h, a.stride_w, a.pad_h,
             a.pad_w, a.dil_h, a.dil_w, a.groups, bias ? " bias" : "");
    sp_opcheck_case c = {
        .label = label, .op = &sp_op_conv2d, .attr = &a, .n_in = 1,
        .in_shape = {sp_shape4(pick(&r, 1, 2), cin_g * a.groups, h, w)},
        .n_param = 1 + bias,
        .param_shape = {sp_shape4(cout_g * a.groups, cin_g, kh, kw), sp_shape1(cout_g * a.groups)},
        .seed = 100 + (uint64_t)k,
    };
    sp_opcheck_gradients(&c);
  }
}

static void conv2d_gradients_named_variants(void **state) {
  (void)state;
  /* Depthwise (groups == Cin, channel multiplier 2), strided and padded. */
  sp_conv2d_attr dw = {2, 2, 1, 1, 1, 1, 5};
  sp_opcheck_case c1 = {
      .label = "conv2d depthwise x2 s2 p1", .op = &sp_op_conv2d, .attr = &dw, .n_in = 1,
      .in_shape = {sp_shape4(2, 5, 9, 7)}, .n_param = 2,
      .param_shape = {sp_shape4(10, 1, 3, 3), sp_shape1(10)}, .seed = 7,
  };
  sp_opcheck_gradients(&c1);
  /* 1x1 strided projection (ResNet shortcut), no bias. */
  sp_conv2d_attr proj = {2, 2, 0, 0, 1, 1, 1};
  sp_opcheck_case c2 = {
      .label = "conv2d 1x1 s2", .op = &sp_op_conv2d, .attr = &proj, .n_in = 1,
      .in_shape = {sp_shape4(2, 4, 7, 8)}, .n_param = 1,
      .param_shape = {sp_shape4(6, 4, 1, 1)}, .seed = 8,
  };
  sp_opcheck_gradients(&c2);
  /* Padding larger than the kernel reach: border outputs see only zeros. */
  sp_conv2d_attr wide = {1, 1, 3, 2, 1, 1, 1};
  sp_opcheck_case c3 = {
      .label = "conv2d pad > reach", .op = &sp_op_conv2d, .attr = &wide, .n_in = 1,
      .in_shape = {sp_shape4(1, 2, 3, 4)}, .n_param = 2,
      .param_shape = {sp_shape4(3, 2, 2, 3), sp_shape1(3)}, .seed = 9,
  };
  sp_opcheck_gradients(&c3);
  /* A zero-initialised attr reads as stride 1, dilation 1, groups 1. */
  sp_conv2d_attr zero = {0};
  sp_opcheck_case c4 = {
      .label = "conv2d zero attr", .op = &sp_op_conv2d, .attr = &zero, .n_in = 1,
      .in_shape = {sp_shape4(1, 3, 5, 5)}, .n_param = 1,
      .param_shape = {sp_shape4(2, 3, 3, 3)}, .seed = 10,
  };
  sp_opcheck_gradients(&c4);
}

static void conv_transpose2d_gradients_random(void **state) {
  (void)state;
  sp_test_rng r = {4048};
  for (int k = 0; k < n_random_cases(); k++) {
    sp_conv_transpose2d_attr a;
    a.groups = pick(&r, 1, 3);
    a.stride_h = pick(&r, 1, 3), a.stride_w = pick(&r, 1, 3);
    a.dil_h = pick(&r, 1, 2), a.dil_w = pick(&r, 1, 2);
    const int cin_g = pick(&r, 1, 3), cout_g = pick(&r, 1, 3);
    const int kh = pick(&r, 1, 4), kw = pick(&r, 1, 3);
    const int h = pick(&r, 1, 5), w = pick(&r, 2, 6);
    /* Output padding below max(stride, dilation); padding that keeps Ho, Wo >= 1. */
    a.out_pad_h = pick(&r, 0, (a.stride_h > a.dil_h ? a.stride_h : a.dil_h) - 1);
    a.out_pad_w = pick(&r, 0, (a.stride_w > a.dil_w ? a.stride_w : a.dil_w) - 1);
    const int full_h = (h - 1) * a.stride_h + a.dil_h * (kh - 1) + a.out_pad_h + 1;
    const int full_w = (w - 1) * a.stride_w + a.dil_w * (kw - 1) + a.out_pad_w + 1;
    a.pad_h = pick(&r, 0, (full_h - 1) / 2 < 2 ? (full_h - 1) / 2 : 2);
    a.pad_w = pick(&r, 0, (full_w - 1) / 2 < 2 ? (full_w - 1) / 2 : 2);
    const int bias = pick(&r, 0, 1);
    char label[160];
    snprintf(label, sizeof label,
             "conv_transpose2d #%d x[*,%d,%d,%d] w[%d,%d,%d,%d] s%d,%d p%d,%d op%d,%d d%d,%d g%d%s", k,
             cin_g * a.groups, h, w, cin_g * a.groups, cout_g, kh, kw, a.stride_h, a.stride_w, a.pad_h,
             a.pad_w, a.out_pad_h, a.out_pad_w, a.dil_h, a.dil_w, a.groups, bias ? " bias" : "");
    sp_opcheck_case c = {
        .label = label, .op = &sp_op_conv_transpose2d, .attr = &a, .n_in = 1,
        .in_shape = {sp_shape4(pick(&r, 1, 2), cin_g * a.groups, h, w)},
        .n_param = 1 + bias,
        .param_shape = {sp_shape4(cin_g * a.groups, cout_g, kh, kw), sp_shape1(cout_g * a.groups)},
        .seed = 200 + (uint64_t)k,
    };
    sp_opcheck_gradients(&c);
  }
}

static void conv_transpose2d_gradients_named_variants(void **state) {
  (void)state;
  /* The usual 2x learned upsampler: k4 s2 p1. */
  sp_conv_transpose2d_attr up = {2, 2, 1, 1, 0, 0, 1, 1, 1};
  sp_opcheck_case c1 = {
      .label = "conv_transpose2d k4 s2 p1", .op = &sp_op_conv_transpose2d, .attr = &up, .n_in = 1,
      .in_shape = {sp_shape4(2, 3, 3, 4)}, .n_param = 2,
      .param_shape = {sp_shape4(3, 2, 4, 4), sp_shape1(2)}, .seed = 17,
  };
  sp_opcheck_gradients(&c1);
  /* Depthwise transposed conv. */
  sp_conv_transpose2d_attr dw = {2, 2, 1, 1, 1, 1, 1, 1, 4};
  sp_opcheck_case c2 = {
      .label = "conv_transpose2d depthwise s2 p1 op1", .op = &sp_op_conv_transpose2d, .attr = &dw, .n_in = 1,
      .in_shape = {sp_shape4(1, 4, 3, 5)}, .n_param = 1,
      .param_shape = {sp_shape4(4, 1, 3, 3)}, .seed = 18,
  };
  sp_opcheck_gradients(&c2);
}

/* ---- PyTorch fixtures (tools/fixtures/conv.py) -------------------------- */

static void conv2d_matches_pytorch(void **state) {
  (void)state;
  const double rtol = 1e-4, atol = 1e-5;
  sp_conv2d_attr a1 = {1, 1, 1, 1, 1, 1, 1};
  sp_opcheck_case c = {.label = "conv2d_basic", .op = &sp_op_conv2d, .attr = &a1, .n_in = 1, .n_param = 2};
  sp_opcheck_fixture(&c, "ops/conv2d_basic.safetensors", rtol, atol);
  sp_conv2d_attr a2 = {2, 1, 1, 2, 2, 1, 2};
  c.label = "conv2d_s2_p12_d21_g2", c.attr = &a2;
  sp_opcheck_fixture(&c, "ops/conv2d_s2_p12_d21_g2.safetensors", rtol, atol);
  sp_conv2d_attr a3 = {2, 2, 1, 1, 1, 1, 4};
  c.label = "conv2d_depthwise_nobias", c.attr = &a3, c.n_param = 1;
  sp_opcheck_fixture(&c, "ops/conv2d_depthwise_nobias.safetensors", rtol, atol);
  sp_conv2d_attr a4 = {2, 2, 0, 0, 1, 1, 1};
  c.label = "conv2d_1x1_s2", c.attr = &a4, c.n_param = 2;
  sp_opcheck_fixture(&c, "ops/conv2d_1x1_s2.safetensors", rtol, atol);
  sp_conv2d_attr a5 = {1, 2, 0, 0, 1, 1, 1};
  c.label = "conv2d_5x3_nopad", c.attr = &a5, c.n_param = 1;
  sp_opcheck_fixture(&c, "ops/conv2d_5x3_nopad.safetensors", rtol, atol);
}

static void conv_transpose2d_matches_pytorch(void **state) {
  (void)state;
  const double rtol = 1e-4, atol = 1e-5;
  sp_conv_transpose2d_attr a1 = {2, 2, 1, 1, 1, 1, 1, 1, 1};
  sp_opcheck_case c = {.label = "conv_transpose2d_s2_p1_op1", .op = &sp_op_conv_transpose2d, .attr = &a1,
                       .n_in = 1, .n_param = 2};
  sp_opcheck_fixture(&c, "ops/conv_transpose2d_s2_p1_op1.safetensors", rtol, atol);
  sp_conv_transpose2d_attr a2 = {2, 3, 1, 0, 0, 1, 2, 1, 2};
  c.label = "conv_transpose2d_g2_d2_nobias", c.attr = &a2, c.n_param = 1;
  sp_opcheck_fixture(&c, "ops/conv_transpose2d_g2_d2_nobias.safetensors", rtol, atol);
  sp_conv_transpose2d_attr a3 = {2, 2, 1, 1, 0, 0, 1, 1, 1};
  c.label = "conv_transpose2d_k4_s2_p1", c.attr = &a3, c.n_param = 2;
  sp_opcheck_fixture(&c, "ops/conv_transpose2d_k4_s2_p1.safetensors", rtol, atol);
}

/* ---- thread-count independence ------------------------------------------ */

typedef struct {
  sp_tensor x, w, b, y, dy, dx, dw, db;
} conv_bufs;

static void run_with_threads(const sp_op_def *op, const void *attr, conv_bufs *t, int threads) {
  omp_set_num_threads(threads);
  memset(t->dx.data, 0, sp_tensor_bytes(&t->dx));
  memset(t->dw.data, 0, sp_tensor_bytes(&t->dw));
  memset(t->db.data, 0, sp_tensor_bytes(&t->db));
  sp_op_args a = {.attr = attr, .n_in = 1, .in = {&t->x}, .d_in = {&t->dx}, .n_param = 2,
                  .param = {&t->w, &t->b}, .d_param = {&t->dw, &t->db}, .out = &t->y, .d_out = &t->dy};
  op->forward(&a);
  op->backward(&a);
}

static void same_bits_for_any_thread_count(const sp_op_def *op, const void *attr, sp_shape xs, sp_shape ws,
                                           sp_shape bs) {
  char err[256];
  sp_shape in[1] = {xs}, p[2] = {ws, bs}, ys;
  assert_int_equal(op->infer(attr, 1, in, 2, p, &ys, err, sizeof err), 0);
  conv_bufs t[2];
  sp_test_rng r = {99};
  for (int k = 0; k < 2; k++) {
    t[k] = (conv_bufs){sp_tensor_alloc(SP_F32, xs), sp_tensor_alloc(SP_F32, ws), sp_tensor_alloc(SP_F32, bs),
                       sp_tensor_alloc(SP_F32, ys), sp_tensor_alloc(SP_F32, ys), sp_tensor_alloc(SP_F32, xs),
                       sp_tensor_alloc(SP_F32, ws), sp_tensor_alloc(SP_F32, bs)};
  }
  sp_test_fill_uniform(&r, t[0].x.data, sp_tensor_numel(&t[0].x), -1, 1);
  sp_test_fill_uniform(&r, t[0].w.data, sp_tensor_numel(&t[0].w), -1, 1);
  sp_test_fill_uniform(&r, t[0].b.data, sp_tensor_numel(&t[0].b), -1, 1);
  sp_test_fill_uniform(&r, t[0].dy.data, sp_tensor_numel(&t[0].dy), -1, 1);
  memcpy(t[1].x.data, t[0].x.data, sp_tensor_bytes(&t[0].x));
  memcpy(t[1].w.data, t[0].w.data, sp_tensor_bytes(&t[0].w));
  memcpy(t[1].b.data, t[0].b.data, sp_tensor_bytes(&t[0].b));
  memcpy(t[1].dy.data, t[0].dy.data, sp_tensor_bytes(&t[0].dy));
  run_with_threads(op, attr, &t[0], 1);
  run_with_threads(op, attr, &t[1], 3);
  assert_memory_equal(t[0].y.data, t[1].y.data, sp_tensor_bytes(&t[0].y));
  assert_memory_equal(t[0].dx.data, t[1].dx.data, sp_tensor_bytes(&t[0].dx));
  assert_memory_equal(t[0].dw.data, t[1].dw.data, sp_tensor_bytes(&t[0].dw));
  assert_memory_equal(t[0].db.data, t[1].db.data, sp_tensor_bytes(&t[0].db));
  for (int k = 0; k < 2; k++) {
    sp_tensor *all[] = {&t[k].x, &t[k].w, &t[k].b, &t[k].y, &t[k].dy, &t[k].dx, &t[k].dw, &t[k].db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sp_tensor_free(all[i]);
  }
}

static void results_independent_of_thread_count(void **state) {
  (void)state;
  /* Large enough (> 32768 multiply-adds) that the kernels do go parallel. */
  sp_conv2d_attr a = {2, 1, 1, 1, 1, 2, 2};
  same_bits_for_any_thread_count(&sp_op_conv2d, &a, sp_shape4(4, 8, 17, 16), sp_shape4(12, 4, 3, 3),
                                 sp_shape1(12));
  sp_conv_transpose2d_attr t = {2, 2, 1, 1, 1, 1, 1, 1, 2};
  same_bits_for_any_thread_count(&sp_op_conv_transpose2d, &t, sp_shape4(4, 8, 9, 8), sp_shape4(8, 6, 3, 3),
                                 sp_shape1(12));
  omp_set_num_threads(omp_get_num_procs());
}

/* ---- NULL gradient pointers (frozen params, inputs without gradient) ---- */

/* Runs backward once with every gradient requested, then once per gradient
 * with only that one requested (the rest NULL): each must match the full run,
 * so skipping a NULL never disturbs the others. Also covers linear and
 * batchnorm, which share the (input, weight, bias) pattern. */
static void grads_alone_match_grads_together(const sp_op_def *op, const void *attr, sp_shape xs, int n_param,
                                             const sp_shape *ps, int n_state, int training) {
  char err[256];
  sp_shape in[1] = {xs}, ys;
  assert_int_equal(op->infer(attr, 1, in, n_param, ps, &ys, err, sizeof err), 0);
  sp_test_rng r = {5};
  sp_tensor x = sp_tensor_alloc(SP_F32, xs), y = sp_tensor_alloc(SP_F32, ys), dy = sp_tensor_alloc(SP_F32, ys);
  sp_tensor p[SP_OP_MAX_PARAM], st[SP_OP_MAX_PARAM];
  sp_tensor full[1 + SP_OP_MAX_PARAM], one[1 + SP_OP_MAX_PARAM];
  sp_test_fill_uniform(&r, x.data, sp_tensor_numel(&x), -1, 1);
  sp_test_fill_uniform(&r, dy.data, sp_tensor_numel(&dy), -1, 1);
  full[0] = sp_tensor_alloc(SP_F32, xs), one[0] = sp_tensor_alloc(SP_F32, xs);
  for (int i = 0; i < n_param; i++) {
    p[i] = sp_tensor_alloc(SP_F32, ps[i]);
    sp_test_fill_uniform(&r, p[i].data, sp_tensor_numel(&p[i]), -1, 1);
    full[1 + i] = sp_tensor_alloc(SP_F32, ps[i]), one[1 + i] = sp_tensor_alloc(SP_F32, ps[i]);
  }
  for (int i = 0; i < n_state; i++) {
    st[i] = sp_tensor_alloc(SP_F32, sp_shape1(xs.d[1]));
    sp_test_fill_uniform(&r, st[i].data, sp_tensor_numel(&st[i]), 0.5f, 1.5f);
  }
  size_t nsaved = op->saved_bytes ? op->saved_bytes(attr, 1, in, &ys) : 0;
  void *saved = nsaved ? sp_xmalloc(nsaved) : NULL;
  sp_op_args a = {.attr = attr, .n_in = 1, .in = {&x}, .d_in = {&full[0]}, .n_param = n_param, .n_state = n_state,
                  .out = &y, .d_out = &dy, .saved = saved, .training = training};
  for (int i = 0; i < n_param; i++) a.param[i] = &p[i], a.d_param[i] = &full[1 + i];
  for (int i = 0; i < n_state; i++) a.state[i] = &st[i];
  op->forward(&a);
  op->backward(&a);
  for (int k = 0; k <= n_param; k++) {
    memset(one[k].data, 0, sp_tensor_bytes(&one[k]));
    a.d_in[0] = k == 0 ? &one[0] : NULL;
    for (int i = 0; i < n_param; i++) a.d_param[i] = k == 1 + i ? &one[1 + i] : NULL;
    op->backward(&a);
    assert_memory_equal(one[k].data, full[k].data, sp_tensor_bytes(&one[k]));
  }
  a.d_in[0] = NULL; /* nothing requested: must be a no-op, not a crash */
  for (int i = 0; i < n_param; i++) a.d_param[i] = NULL;
  op->backward(&a);
  free(saved);
  for (int i = 0; i < n_state; i++) sp_tensor_free(&st[i]);
  for (int i = 0; i < n_param; i++) sp_tensor_free(&p[i]), sp_tensor_free(&full[1 + i]), sp_tensor_free(&one[1 + i]);
  sp_tensor_free(&full[0]), sp_tensor_free(&one[0]);
  sp_tensor_free(&x), sp_tensor_free(&y), sp_tensor_free(&dy);
}

static void null_gradient_pointers_are_skipped(void **state) {
  (void)state;
  sp_conv2d_attr c = {2, 1, 1, 0, 1, 1, 2};
  sp_shape cp[2] = {sp_shape4(6, 2, 3, 3), sp_shape1(6)};
  grads_alone_match_grads_together(&sp_op_conv2d, &c, sp_shape4(2, 4, 7, 5), 2, cp, 0, 1);
  sp_conv_transpose2d_attr t = {2, 2, 1, 0, 1, 0, 1, 1, 1};
  sp_shape tp[2] = {sp_shape4(3, 4, 3, 2), sp_shape1(4)};
  grads_alone_match_grads_together(&sp_op_conv_transpose2d, &t, sp_shape4(2, 3, 4, 5), 2, tp, 0, 1);
  sp_shape lp[2] = {sp_shape2(4, 9), sp_shape1(4)};
  grads_alone_match_grads_together(&sp_op_linear, NULL, sp_shape2(3, 9), 2, lp, 0, 1);
  const sp_batchnorm_attr bn = {1e-5f, 0.1f};
  sp_shape bp[2] = {sp_shape1(3), sp_shape1(3)};
  grads_alone_match_grads_together(&sp_op_batchnorm, &bn, sp_shape4(2, 3, 4, 3), 2, bp, 2, 1);
  grads_alone_match_grads_together(&sp_op_batchnorm, &bn, sp_shape2(5, 3), 2, bp, 2, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(conv2d_infer_shapes_and_errors),
      cmocka_unit_test(conv_transpose2d_infer_shapes_and_errors),
      cmocka_unit_test(conv2d_gradients_random),
      cmocka_unit_test(conv2d_gradients_named_variants),
      cmocka_unit_test(conv_transpose2d_gradients_random),
      cmocka_unit_test(conv_transpose2d_gradients_named_variants),
      cmocka_unit_test(conv2d_matches_pytorch),
      cmocka_unit_test(conv_transpose2d_matches_pytorch),
      cmocka_unit_test(results_independent_of_thread_count),
      cmocka_unit_test(null_gradient_pointers_are_skipped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
