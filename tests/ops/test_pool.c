/* Max/average/global pooling, BlurPool and upsampling: finite-difference
 * gradients over random shapes and attributes (odd sizes, stride, padding,
 * ceil_mode, count_include_pad), PyTorch fixtures, and shape-rule errors. */
#include <stdio.h>
#include <string.h>

#include "opcheck.h"
#include "ops/ops.h"

static int n_trials(void) { return sp_test_sanitized() ? 6 : 24; }

static int64_t rand_in(sp_test_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(sp_test_rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Distinct values at least 0.05 apart in every tensor (a shuffled ramp), so a
 * finite-difference step of 0.01 never changes which element wins a max. */
static void distinct_init(int kind, int index, sp_tensor *t, sp_test_rng *rng) {
  (void)kind;
  (void)index;
  float *x = t->data;
  int64_t n = sp_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) x[i] = 0.05f * (float)(i - n / 2);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(sp_test_rng_next(rng) % (uint64_t)(i + 1));
    float v = x[i];
    x[i] = x[j];
    x[j] = v;
  }
}

static sp_pool2d_attr random_pool_attr(sp_test_rng *r) {
  sp_pool2d_attr at;
  at.kernel_h = (int)rand_in(r, 1, 4);
  at.kernel_w = (int)rand_in(r, 1, 4);
  at.stride_h = (int)rand_in(r, 1, 3);
  at.stride_w = (int)rand_in(r, 1, 3);
  at.pad_h = (int)rand_in(r, 0, at.kernel_h / 2);
  at.pad_w = (int)rand_in(r, 0, at.kernel_w / 2);
  at.count_include_pad = (int)rand_in(r, 0, 1);
  at.ceil_mode = (int)rand_in(r, 0, 1);
  return at;
}

static sp_shape random_pool_input(sp_test_rng *r, const sp_pool2d_attr *at) {
  int64_t hmin = at->kernel_h - 2 * at->pad_h, wmin = at->kernel_w - 2 * at->pad_w;
  return sp_shape4(rand_in(r, 1, 2), rand_in(r, 1, 3), rand_in(r, hmin > 1 ? hmin : 1, 11),
                   rand_in(r, wmin > 1 ? wmin : 1, 11));
}

static void pool_label(char *buf, size_t n, const char *op, const sp_pool2d_attr *at, const sp_shape *s) {
  char sb[64];
  snprintf(buf, n, "%s k%dx%d s%dx%d p%dx%d ceil%d incl%d on %s", op, at->kernel_h, at->kernel_w, at->stride_h,
           at->stride_w, at->pad_h, at->pad_w, at->ceil_mode, at->count_include_pad, sp_shape_str(s, sb, sizeof sb));
}

static void maxpool2d_gradients(void **state) {
  (void)state;
  sp_test_rng r = {21};
  char label[160];
  for (int t = 0; t < n_trials(); t++) {
    sp_pool2d_attr at = random_pool_attr(&r);
    sp_opcheck_case c = {.label = label, .op = &sp_op_maxpool2d, .attr = &at, .n_in = 1,
                         .in_shape = {random_pool_input(&r, &at)}, .seed = 1000 + (uint64_t)t,
                         .init = distinct_init};
    pool_label(label, sizeof label, "maxpool2d", &at, &c.in_shape[0]);
    sp_opcheck_gradients(&c);
  }
}

static void avgpool2d_gradients(void **state) {
  (void)state;
  sp_test_rng r = {22};
  char label[160];
  for (int t = 0; t < n_trials(); t++) {
    sp_pool2d_attr at = random_pool_attr(&r);
    sp_opcheck_case c = {.label = label, .op = &sp_op_avgpool2d, .attr = &at, .n_in = 1,
                         .in_shape = {random_pool_input(&r, &at)}, .seed = 2000 + (uint64_t)t};
    pool_label(label, sizeof label, "avgpool2d", &at, &c.in_shape[0]);
    sp_opcheck_gradients(&c);
  }
}

static void global_avgpool_gradients(void **state) {
  (void)state;
  sp_test_rng r = {23};
  for (int t = 0; t < n_trials() / 2; t++) {
    sp_opcheck_case c = {.label = "global_avgpool", .op = &sp_op_global_avgpool, .n_in = 1,
                         .in_shape = {sp_shape4(rand_in(&r, 1, 3), rand_in(&r, 1, 4), rand_in(&r, 1, 9),
                                                rand_in(&r, 1, 9))},
                         .seed = 3000 + (uint64_t)t};
    sp_opcheck_gradients(&c);
  }
}

static void blurpool_gradients(void **state) {
  (void)state;
  sp_test_rng r = {24};
  char label[160], sb[64];
  for (int t = 0; t < n_trials(); t++) {
    sp_blurpool_attr at = {(int)rand_in(&r, 1, 5), (int)rand_in(&r, 1, 3)};
    int64_t min = at.filter_size / 2 + 1; /* reflect padding must be < the dim */
    sp_opcheck_case c = {.label = label, .op = &sp_op_blurpool, .attr = &at, .n_in = 1,
                         .in_shape = {sp_shape4(rand_in(&r, 1, 2), rand_in(&r, 1, 3), rand_in(&r, min, 11),
                                                rand_in(&r, min, 11))},
                         .seed = 4000 + (uint64_t)t};
    snprintf(label, sizeof label, "blurpool f%d s%d on %s", at.filter_size, at.stride,
             sp_shape_str(&c.in_shape[0], sb, sizeof sb));
    sp_opcheck_gradients(&c);
  }
}

static void upsample_gradients(void **state) {
  (void)state;
  sp_test_rng r = {25};
  char label[160], sb[64];
  for (int t = 0; t < n_trials(); t++) {
    sp_upsample_attr at = {(int)rand_in(&r, 1, 3), (int)rand_in(&r, 0, 1)};
    sp_opcheck_case c = {.label = label, .op = &sp_op_upsample, .attr = &at, .n_in = 1,
                         .in_shape = {sp_shape4(rand_in(&r, 1, 2), rand_in(&r, 1, 3), rand_in(&r, 1, 7),
                                                rand_in(&r, 1, 7))},
                         .seed = 5000 + (uint64_t)t};
    snprintf(label, sizeof label, "upsample x%d %s on %s", at.scale, at.bilinear ? "bilinear" : "nearest",
             sp_shape_str(&c.in_shape[0], sb, sizeof sb));
    sp_opcheck_gradients(&c);
  }
}

static void pooling_matches_pytorch(void **state) {
  (void)state;
  struct {
    const char *file;
    const sp_op_def *op;
    sp_pool2d_attr at;
  } cases[] = {
      /* kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, count_include_pad, ceil_mode */
      {"ops/maxpool2d_k3s2p1.safetensors", &sp_op_maxpool2d, {3, 3, 2, 2, 1, 1, 1, 0}},
      {"ops/maxpool2d_k3s2_ceil.safetensors", &sp_op_maxpool2d, {3, 3, 2, 2, 0, 0, 1, 1}},
      {"ops/maxpool2d_k2s2.safetensors", &sp_op_maxpool2d, {2, 2, 2, 2, 0, 0, 1, 0}},
      {"ops/maxpool2d_k32s21p10_ceil.safetensors", &sp_op_maxpool2d, {3, 2, 2, 1, 1, 0, 1, 1}},
      {"ops/avgpool2d_k3s2p1.safetensors", &sp_op_avgpool2d, {3, 3, 2, 2, 1, 1, 1, 0}},
      {"ops/avgpool2d_k3s2p1_nopad.safetensors", &sp_op_avgpool2d, {3, 3, 2, 2, 1, 1, 0, 0}},
      {"ops/avgpool2d_k3s2p1_ceil.safetensors", &sp_op_avgpool2d, {3, 3, 2, 2, 1, 1, 1, 1}},
      {"ops/avgpool2d_k2s2_ceil_nopad.safetensors", &sp_op_avgpool2d, {2, 2, 2, 2, 0, 0, 0, 1}},
      {"ops/avgpool2d_k32s21p10_ceil.safetensors", &sp_op_avgpool2d, {3, 2, 2, 1, 1, 0, 1, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sp_opcheck_case c = {.label = cases[i].file, .op = cases[i].op, .attr = &cases[i].at, .n_in = 1};
    sp_opcheck_fixture(&c, cases[i].file, 1e-5, 1e-6);
  }
  sp_opcheck_case g = {.label = "global_avgpool", .op = &sp_op_global_avgpool, .n_in = 1};
  sp_opcheck_fixture(&g, "ops/global_avgpool.safetensors", 1e-5, 1e-6);
}

static void blurpool_upsample_match_pytorch(void **state) {
  (void)state;
  struct {
    const char *file;
    sp_blurpool_attr at;
  } blur[] = {
      {"ops/blurpool_f3s2.safetensors", {3, 2}}, {"ops/blurpool_f2s2.safetensors", {2, 2}},
      {"ops/blurpool_f4s2.safetensors", {4, 2}}, {"ops/blurpool_f5s2.safetensors", {5, 2}},
      {"ops/blurpool_f3s1.safetensors", {3, 1}},
  };
  for (size_t i = 0; i < sizeof blur / sizeof blur[0]; i++) {
    sp_opcheck_case c = {.label = blur[i].file, .op = &sp_op_blurpool, .attr = &blur[i].at, .n_in = 1};
    sp_opcheck_fixture(&c, blur[i].file, 1e-5, 1e-6);
  }
  struct {
    const char *file;
    sp_upsample_attr at;
  } up[] = {
      {"ops/upsample_nearest_s2.safetensors", {2, 0}}, {"ops/upsample_nearest_s3.safetensors", {3, 0}},
      {"ops/upsample_bilinear_s2.safetensors", {2, 1}}, {"ops/upsample_bilinear_s3.safetensors", {3, 1}},
  };
  for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
    sp_opcheck_case c = {.label = up[i].file, .op = &sp_op_upsample, .attr = &up[i].at, .n_in = 1};
    sp_opcheck_fixture(&c, up[i].file, 1e-5, 1e-6);
  }
}

/* infer's result, or -1 with the error text checked for `want`. */
static int infer_expect(const sp_op_def *op, const void *attr, sp_shape in, sp_shape *out, const char *want) {
  char err[256] = "";
  int rc = op->infer(attr, 1, &in, 0, NULL, out, err, sizeof err);
  if (rc != 0 && want && !strstr(err, want)) fail_msg("%s: error \"%s\" does not mention \"%s\"", op->name, err, want);
  return rc;
}

static void shape_rules(void **state) {
  (void)state;
  sp_shape o;
  sp_pool2d_attr k3s2p1 = {3, 3, 2, 2, 1, 1, 1, 0};
  assert_int_equal(infer_expect(&sp_op_maxpool2d, &k3s2p1, sp_shape4(2, 3, 112, 111), &o, NULL), 0);
  assert_true(sp_shape_equal(&o, &(sp_shape){4, {2, 3, 56, 56}}));
  /* ceil_mode: the last window must start inside the input or left padding. */
  sp_pool2d_attr k2s2p1c = {2, 2, 2, 2, 1, 1, 1, 1};
  assert_int_equal(infer_expect(&sp_op_avgpool2d, &k2s2p1c, sp_shape4(1, 1, 4, 5), &o, NULL), 0);
  assert_true(o.d[2] == 3 && o.d[3] == 3);
  sp_pool2d_attr badpad = {3, 3, 1, 1, 2, 2, 1, 0};
  assert_int_equal(infer_expect(&sp_op_maxpool2d, &badpad, sp_shape4(1, 1, 8, 8), &o, "padding"), -1);
  sp_pool2d_attr big = {5, 5, 1, 1, 0, 0, 1, 0};
  assert_int_equal(infer_expect(&sp_op_avgpool2d, &big, sp_shape4(1, 1, 4, 8), &o, "[1,1,4,8]"), -1);
  assert_int_equal(infer_expect(&sp_op_maxpool2d, &k3s2p1, sp_shape2(4, 8), &o, "[4,8]"), -1);
  assert_int_equal(infer_expect(&sp_op_global_avgpool, NULL, sp_shape4(2, 5, 7, 3), &o, NULL), 0);
  assert_true(sp_shape_equal(&o, &(sp_shape){4, {2, 5, 1, 1}}));
  /* BlurPool keeps ceil(H / stride) for every filter size. */
  for (int f = 1; f <= 5; f++) {
    sp_blurpool_attr b = {f, 2};
    assert_int_equal(infer_expect(&sp_op_blurpool, &b, sp_shape4(1, 2, 9, 8), &o, NULL), 0);
    assert_true(o.d[2] == 5 && o.d[3] == 4);
  }
  sp_blurpool_attr b5 = {5, 2};
  assert_int_equal(infer_expect(&sp_op_blurpool, &b5, sp_shape4(1, 2, 2, 8), &o, "[1,2,2,8]"), -1);
  sp_blurpool_attr b9 = {9, 2};
  assert_int_equal(infer_expect(&sp_op_blurpool, &b9, sp_shape4(1, 2, 20, 20), &o, "filter_size"), -1);
  sp_upsample_attr u3 = {3, 1};
  assert_int_equal(infer_expect(&sp_op_upsample, &u3, sp_shape4(1, 2, 5, 4), &o, NULL), 0);
  assert_true(o.d[2] == 15 && o.d[3] == 12);
  sp_upsample_attr u0 = {0, 0};
  assert_int_equal(infer_expect(&sp_op_upsample, &u0, sp_shape4(1, 2, 5, 4), &o, "scale"), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(maxpool2d_gradients),
      cmocka_unit_test(avgpool2d_gradients),
      cmocka_unit_test(global_avgpool_gradients),
      cmocka_unit_test(blurpool_gradients),
      cmocka_unit_test(upsample_gradients),
      cmocka_unit_test(pooling_matches_pytorch),
      cmocka_unit_test(blurpool_upsample_match_pytorch),
      cmocka_unit_test(shape_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
