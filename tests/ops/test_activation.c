/* ReLU, HardSwish and dropout: finite-difference gradients away from the
 * kinks, PyTorch fixtures (dropout in eval mode only: PyTorch's RNG cannot be
 * reproduced), and the properties the dropout mask must have in training. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"
#include "ops/ops.h"

/* Small random NCHW shapes with odd sizes; fewer under sanitizers. */
static sp_shape random_shape(sp_test_rng *r) {
  return sp_shape4(1 + (int64_t)(sp_test_rng_next(r) % 2), 1 + (int64_t)(sp_test_rng_next(r) % 3),
                   1 + (int64_t)(sp_test_rng_next(r) % 9), 1 + (int64_t)(sp_test_rng_next(r) % 9));
}

static int n_trials(void) { return sp_test_sanitized() ? 2 : 5; }

static void relu_gradients(void **state) {
  (void)state;
  sp_test_rng r = {11};
  for (int t = 0; t < n_trials(); t++) {
    sp_opcheck_case c = {.label = "relu", .op = &sp_op_relu, .n_in = 1, .in_shape = {random_shape(&r)},
                         .seed = 100 + (uint64_t)t, .min_abs = 0.05f};
    sp_opcheck_gradients(&c);
  }
}

/* Uniform on [-5, 5] but at least 0.1 away from the kinks at -3 and +3 (the
 * finite-difference step is 0.01). */
static void hardswish_init(int kind, int index, sp_tensor *t, sp_test_rng *rng) {
  (void)kind;
  (void)index;
  float *x = t->data;
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) {
    float v;
    do v = sp_test_rng_uniform(rng, -5.0f, 5.0f);
    while (fabsf(v + 3.0f) < 0.1f || fabsf(v - 3.0f) < 0.1f);
    x[i] = v;
  }
}

static void hardswish_gradients(void **state) {
  (void)state;
  sp_test_rng r = {12};
  for (int t = 0; t < n_trials(); t++) {
    sp_opcheck_case c = {.label = "hardswish", .op = &sp_op_hardswish, .n_in = 1, .in_shape = {random_shape(&r)},
                         .seed = 200 + (uint64_t)t, .init = hardswish_init};
    sp_opcheck_gradients(&c);
  }
}

static void relu_hardswish_match_pytorch(void **state) {
  (void)state;
  sp_opcheck_case relu = {.label = "relu fixture", .op = &sp_op_relu, .n_in = 1};
  sp_opcheck_fixture(&relu, "ops/relu.safetensors", 1e-6, 1e-7);
  /* The fixture holds exact -3 and +3: PyTorch's gradient there is -0.5 and 1. */
  sp_opcheck_case hs = {.label = "hardswish fixture", .op = &sp_op_hardswish, .n_in = 1};
  sp_opcheck_fixture(&hs, "ops/hardswish.safetensors", 1e-6, 1e-6);
}

static void dropout_eval_matches_pytorch(void **state) {
  (void)state;
  sp_dropout_attr at = {0.3f};
  sp_opcheck_case c = {.label = "dropout eval fixture", .op = &sp_op_dropout, .attr = &at, .n_in = 1,
                       .training = 0};
  sp_opcheck_fixture(&c, "ops/dropout_eval.safetensors", 0, 1e-30);
}

static void dropout_gradients(void **state) {
  (void)state;
  /* With the seed fixed the training op is linear in x, so central
   * differences see exactly the mask that backward regenerates. */
  sp_test_rng r = {13};
  const float ps[] = {0.0f, 0.25f, 0.5f, 0.9f};
  for (int t = 0; t < 4; t++) {
    sp_dropout_attr at = {ps[t]};
    sp_opcheck_case c = {.label = "dropout train", .op = &sp_op_dropout, .attr = &at, .n_in = 1,
                         .in_shape = {random_shape(&r)}, .training = 1, .seed = 300 + (uint64_t)t};
    sp_opcheck_gradients(&c);
    c.label = "dropout eval";
    c.training = 0;
    sp_opcheck_gradients(&c);
  }
}

/* Runs dropout forward (and optionally backward) by hand on n elements. */
typedef struct {
  float *x, *y, *dy, *dx;
  sp_tensor tx, ty, tdy, tdx;
  sp_op_args a;
  sp_dropout_attr at;
} dropout_run;

static void dropout_setup(dropout_run *d, int64_t n, float p, uint64_t seed, int training) {
  memset(d, 0, sizeof *d);
  sp_shape s = sp_shape1(n);
  d->tx = sp_tensor_alloc(SP_F32, s);
  d->ty = sp_tensor_alloc(SP_F32, s);
  d->tdy = sp_tensor_alloc(SP_F32, s);
  d->tdx = sp_tensor_alloc(SP_F32, s);
  d->x = d->tx.data;
  d->y = d->ty.data;
  d->dy = d->tdy.data;
  d->dx = d->tdx.data;
  sp_test_rng r = {seed ^ 0x5eed};
  /* x away from 0 so that "dropped" and "zero output" mean the same thing. */
  sp_test_fill_uniform(&r, d->x, n, 0.5f, 1.5f);
  sp_test_fill_uniform(&r, d->dy, n, -1.0f, 1.0f);
  for (int64_t i = 0; i < n; i++) d->dx[i] = 1.0f;
  d->at.p = p;
  d->a.attr = &d->at;
  d->a.n_in = 1;
  d->a.in[0] = &d->tx;
  d->a.d_in[0] = &d->tdx;
  d->a.out = &d->ty;
  d->a.d_out = &d->tdy;
  d->a.training = training;
  d->a.seed = seed;
}

static void dropout_free(dropout_run *d) {
  sp_tensor_free(&d->tx);
  sp_tensor_free(&d->ty);
  sp_tensor_free(&d->tdy);
  sp_tensor_free(&d->tdx);
}

static void dropout_training_mask(void **state) {
  (void)state;
  const int64_t n = 200000;
  const float ps[] = {0.1f, 0.3f, 0.5f, 0.8f};
  for (int k = 0; k < 4; k++) {
    float p = ps[k], scale = 1.0f / (1.0f - p);
    dropout_run d;
    dropout_setup(&d, n, p, 42 + (uint64_t)k, 1);
    sp_op_dropout.forward(&d.a);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
      if (d.y[i] != 0.0f) {
        kept++;
        assert_true(fabsf(d.y[i] - d.x[i] * scale) <= 1e-6f * fabsf(d.x[i] * scale));
      }
    }
    /* Kept fraction within 5 standard deviations of 1 - p. */
    double frac = (double)kept / (double)n, sd = sqrt(p * (1.0 - p) / (double)n);
    if (fabs(frac - (1.0 - p)) > 5 * sd) fail_msg("dropout p=%g kept %.5f of elements, expected %.5f", p, frac, 1.0 - p);

    /* Backward accumulates dy * scale where kept, nothing where dropped. */
    sp_op_dropout.backward(&d.a);
    for (int64_t i = 0; i < n; i++) {
      float want = d.y[i] != 0.0f ? 1.0f + d.dy[i] * scale : 1.0f;
      if (fabsf(d.dx[i] - want) > 1e-6f) fail_msg("dropout backward at %lld: %g, want %g", (long long)i, d.dx[i], want);
    }

    /* Same seed: same mask, whatever the thread count. Other seed: another mask. */
    dropout_run same, other;
    dropout_setup(&same, n, p, 42 + (uint64_t)k, 1);
    dropout_setup(&other, n, p, 1042 + (uint64_t)k, 1);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    sp_op_dropout.forward(&same.a);
    omp_set_num_threads(threads);
    sp_op_dropout.forward(&other.a);
    assert_memory_equal(same.y, d.y, (size_t)n * sizeof(float));
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += (other.y[i] != 0.0f) != (d.y[i] != 0.0f);
    /* Two independent masks disagree on a fraction 2p(1-p) of elements. */
    assert_true((double)differ / (double)n > p * (1.0 - p));
    dropout_free(&same);
    dropout_free(&other);
    dropout_free(&d);
  }
}

static void dropout_edge_cases(void **state) {
  (void)state;
  const int64_t n = 1000;
  /* Eval mode and p = 0 are the identity; p = 1 drops everything (no NaN). */
  const float ps[] = {0.5f, 0.0f, 1.0f};
  const int training[] = {0, 1, 1};
  for (int k = 0; k < 3; k++) {
    dropout_run d;
    dropout_setup(&d, n, ps[k], 7, training[k]);
    sp_op_dropout.forward(&d.a);
    sp_op_dropout.backward(&d.a);
    for (int64_t i = 0; i < n; i++) {
      float want_y = ps[k] == 1.0f && training[k] ? 0.0f : d.x[i];
      float want_dx = ps[k] == 1.0f && training[k] ? 1.0f : 1.0f + d.dy[i];
      assert_true(d.y[i] == want_y);
      assert_true(d.dx[i] == want_dx);
    }
    dropout_free(&d);
  }
  char err[256];
  sp_dropout_attr bad = {1.5f};
  sp_shape s = sp_shape2(2, 3), o;
  assert_int_equal(sp_op_dropout.infer(&bad, 1, &s, 0, NULL, &o, err, sizeof err), -1);
  assert_non_null(strstr(err, "1.5"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(relu_gradients),
      cmocka_unit_test(hardswish_gradients),
      cmocka_unit_test(relu_hardswish_match_pytorch),
      cmocka_unit_test(dropout_eval_matches_pytorch),
      cmocka_unit_test(dropout_gradients),
      cmocka_unit_test(dropout_training_mask),
      cmocka_unit_test(dropout_edge_cases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
