/* SGD / Adam / AdamW against PyTorch step by step, per-parameter weight-decay
 * groups, config errors, and the optimizer-state checkpoint round trip. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/optim.h"
#include "spry/safetensors.h"
#include "testkit.h"

#define RTOL 1e-6
#define ATOL 1e-7
#define N_STEPS 5

/* ---- PyTorch fixtures (tools/fixtures/optim.py) ---- */

typedef struct {
  const char *file;
  sp_opt_config cfg;
} fixture_case;

static sp_opt_config sgd(float momentum, int nesterov, float dampening, float wd) {
  sp_opt_config c = sp_opt_config_default(SP_OPT_SGD);
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.dampening = dampening;
  c.weight_decay = wd;
  return c;
}

static sp_opt_config adam(sp_opt_kind kind, float b1, float b2, float eps, float wd) {
  sp_opt_config c = sp_opt_config_default(kind);
  c.beta1 = b1;
  c.beta2 = b2;
  c.eps = eps;
  c.weight_decay = wd;
  return c;
}

static const sp_tensor *get(const sp_st_file *f, const char *name) {
  const sp_tensor *t = sp_st_get(f, name);
  if (!t) fail_msg("fixture has no tensor \"%s\"", name);
  assert_int_equal(t->dtype, SP_F32);
  return t;
}

static void copy_in(float *dst, const sp_st_file *f, const char *name, int64_t n) {
  const sp_tensor *t = get(f, name);
  assert_int_equal(sp_tensor_numel(t), n);
  memcpy(dst, t->data, (size_t)n * sizeof(float));
}

/* Worst error seen over all cases, reported at the end so the achieved
 * agreement is visible in the test log. */
static double worst_rel = 0, worst_abs = 0;

static void note_error(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > worst_abs) worst_abs = d;
    if (b[i] != 0 && d / fabs(b[i]) > worst_rel) worst_rel = d / fabs(b[i]);
  }
}

/* Runs the 5 recorded steps; returns the worst close-ratio seen (<= 1 passes). */
static double run_fixture(const char *file, const sp_opt_config *cfg, int note) {
  char path[1024];
  sp_st_file *f = sp_st_open(sp_test_fixture_path(file, path, sizeof path));
  if (!f) fail_msg("%s", sp_last_error());
  const int64_t nw = sp_tensor_numel(get(f, "w.init")), nb = sp_tensor_numel(get(f, "b.init"));
  float w[128], b[128], gw[128], gb[128];
  assert_true(nw <= 128 && nb <= 128);
  copy_in(w, f, "w.init", nw);
  copy_in(b, f, "b.init", nb);
  const float *lrs = get(f, "lr")->data;
  sp_opt_param ps[2] = {{"w", w, gw, nw, 0}, {"b", b, gb, nb, 1}};
  sp_optimizer *opt = sp_optimizer_new(cfg, 2, ps);
  if (!opt) fail_msg("%s: %s", file, sp_last_error());
  double worst = 0;
  char name[64];
  for (int k = 0; k < N_STEPS; k++) {
    snprintf(name, sizeof name, "grad.w.%d", k);
    copy_in(gw, f, name, nw);
    snprintf(name, sizeof name, "grad.b.%d", k);
    copy_in(gb, f, name, nb);
    assert_int_equal(sp_optimizer_step(opt, lrs[k]), 0);
    snprintf(name, sizeof name, "w.%d", k);
    const float *ew = get(f, name)->data;
    snprintf(name, sizeof name, "b.%d", k);
    const float *eb = get(f, name)->data;
    double rw = sp_test_close_ratio(w, ew, nw, RTOL, ATOL, NULL);
    double rb = sp_test_close_ratio(b, eb, nb, RTOL, ATOL, NULL);
    if (rw > worst) worst = rw;
    if (rb > worst) worst = rb;
    if (note) {
      note_error(w, ew, nw);
      note_error(b, eb, nb);
    }
  }
  assert_int_equal(sp_optimizer_steps(opt), N_STEPS);
  sp_optimizer_free(opt);
  sp_st_close(f);
  return worst;
}

static const fixture_case *cases(int *n) {
  static fixture_case c[10];
  c[0] = (fixture_case){"optim/sgd_plain.safetensors", sgd(0, 0, 0, 0)};
  c[1] = (fixture_case){"optim/sgd_momentum.safetensors", sgd(0.9f, 0, 0, 0)};
  c[2] = (fixture_case){"optim/sgd_nesterov.safetensors", sgd(0.9f, 1, 0, 0)};
  c[3] = (fixture_case){"optim/sgd_wd.safetensors", sgd(0.9f, 0, 0, 0.05f)};
  c[4] = (fixture_case){"optim/sgd_dampening.safetensors", sgd(0.8f, 0, 0.3f, 1e-4f)};
  c[5] = (fixture_case){"optim/adam.safetensors", adam(SP_OPT_ADAM, 0.9f, 0.999f, 1e-8f, 0)};
  c[6] = (fixture_case){"optim/adam_wd.safetensors", adam(SP_OPT_ADAM, 0.9f, 0.999f, 1e-8f, 1e-2f)};
  c[7] = (fixture_case){"optim/adam_betas.safetensors", adam(SP_OPT_ADAM, 0.8f, 0.95f, 1e-6f, 0.1f)};
  c[8] = (fixture_case){"optim/adamw_wd1e-2.safetensors", adam(SP_OPT_ADAMW, 0.9f, 0.999f, 1e-8f, 1e-2f)};
  c[9] = (fixture_case){"optim/adamw_wd1e-5.safetensors", adam(SP_OPT_ADAMW, 0.9f, 0.999f, 1e-8f, 1e-5f)};
  *n = 10;
  return c;
}

static void matches_pytorch(void **state) {
  (void)state;
  int n;
  const fixture_case *c = cases(&n);
  for (int i = 0; i < n; i++) {
    double r = run_fixture(c[i].file, &c[i].cfg, 1);
    print_message("%-34s worst |err|/(%.0e + %.0e*|ref|) = %.3f\n", c[i].file, ATOL, RTOL, r);
    if (!(r <= 1)) fail_msg("%s differs from PyTorch (ratio %g)", c[i].file, r);
  }
  print_message("all optimizer fixtures: max abs err %.3g, max rel err %.3g\n", worst_abs, worst_rel);
}

/* The fixtures must be able to fail: a wrong variant of each rule is caught. */
static void fixtures_catch_wrong_rules(void **state) {
  (void)state;
  sp_opt_config c;
  c = sgd(0.9f, 1, 0, 0); /* nesterov fixture run as heavy-ball momentum */
  c.nesterov = 0;
  assert_true(run_fixture("optim/sgd_nesterov.safetensors", &c, 0) > 1);
  c = sgd(0.9f, 0, 0, 0.05f); /* weight decay on the no_decay bias too */
  c.decay_norm_and_bias = 1;
  assert_true(run_fixture("optim/sgd_wd.safetensors", &c, 0) > 1);
  c = adam(SP_OPT_ADAMW, 0.9f, 0.999f, 1e-8f, 1e-2f); /* L2 instead of decoupled decay */
  assert_true(run_fixture("optim/adam_wd.safetensors", &c, 0) > 1);
  c = adam(SP_OPT_ADAM, 0.9f, 0.999f, 1e-8f, 1e-2f);
  assert_true(run_fixture("optim/adamw_wd1e-2.safetensors", &c, 0) > 1);
  c = adam(SP_OPT_ADAMW, 0.9f, 0.999f, 1e-8f, 1e-2f);
  c.decay_norm_and_bias = 1;
  assert_true(run_fixture("optim/adamw_wd1e-2.safetensors", &c, 0) > 1);
  c = adam(SP_OPT_ADAM, 0.8f, 0.95f, 1e-8f, 0.1f); /* eps matters at these grads */
  assert_true(run_fixture("optim/adam_betas.safetensors", &c, 0) > 1);
}

/* ---- per-parameter groups without fixtures ---- */

static void no_decay_group_gets_no_weight_decay(void **state) {
  (void)state;
  /* Zero gradients: the only change is weight decay. */
  float w[4] = {1, -2, 3, -4}, b[4] = {1, -2, 3, -4}, g[4] = {0};
  sp_opt_config c = sgd(0, 0, 0, 0.5f);
  sp_opt_param ps[2] = {{"conv.weight", w, g, 4, 0}, {"bn.bias", b, g, 4, 1}};
  sp_optimizer *o = sp_optimizer_new(&c, 2, ps);
  assert_non_null(o);
  assert_int_equal(sp_optimizer_step(o, 0.1f), 0);
  assert_true(fabsf(w[0] - 0.95f) < 1e-7f); /* 1 - 0.1*0.5*1 */
  assert_true(b[0] == 1.0f && b[3] == -4.0f);
  sp_optimizer_free(o);
  c.decay_norm_and_bias = 1;
  o = sp_optimizer_new(&c, 2, ps);
  assert_int_equal(sp_optimizer_step(o, 0.1f), 0);
  assert_true(fabsf(b[0] - 0.95f) < 1e-7f);
  sp_optimizer_free(o);
}

/* ---- errors ---- */

static void expect_bad(sp_opt_config c, const char *word) {
  float x = 0, g = 0;
  sp_opt_param p = {"x", &x, &g, 1, 0};
  sp_error_clear();
  sp_optimizer *o = sp_optimizer_new(&c, 1, &p);
  assert_null(o);
  if (!strstr(sp_last_error(), word)) fail_msg("error \"%s\" does not name %s", sp_last_error(), word);
}

static void bad_configs_are_refused(void **state) {
  (void)state;
  sp_opt_config c = adam(SP_OPT_ADAM, 1.0f, 0.999f, 1e-8f, 0);
  expect_bad(c, "beta1");
  c = adam(SP_OPT_ADAMW, 0.9f, -0.1f, 1e-8f, 0);
  expect_bad(c, "beta2");
  c = adam(SP_OPT_ADAM, 0.9f, NAN, 1e-8f, 0);
  expect_bad(c, "beta2");
  c = adam(SP_OPT_ADAM, 0.9f, 0.999f, -1e-8f, 0);
  expect_bad(c, "eps");
  expect_bad(sgd(-0.9f, 0, 0, 0), "momentum");
  expect_bad(sgd(0.9f, 0, 0, -1e-4f), "weight_decay");
  expect_bad(sgd(0, 1, 0, 0), "nesterov");
  expect_bad(sgd(0.9f, 1, 0.1f, 0), "nesterov");
  c = sgd(0, 0, 0, 0);
  c.kind = (sp_opt_kind)7;
  expect_bad(c, "kind");

  float x[2] = {0}, g[2] = {0};
  sp_opt_param dup[2] = {{"x", x, g, 1, 0}, {"x", x + 1, g + 1, 1, 0}};
  c = sgd(0.9f, 0, 0, 0);
  assert_null(sp_optimizer_new(&c, 2, dup));
  assert_non_null(strstr(sp_last_error(), "\"x\""));
  sp_opt_param nograd = {"y", x, NULL, 2, 0};
  assert_null(sp_optimizer_new(&c, 1, &nograd));
  assert_non_null(strstr(sp_last_error(), "gradient"));

  sp_opt_param ok = {"x", x, g, 2, 0};
  sp_optimizer *o = sp_optimizer_new(&c, 1, &ok);
  assert_non_null(o);
  assert_int_equal(sp_optimizer_step(o, -0.1f), -1);
  assert_non_null(strstr(sp_last_error(), "lr"));
  assert_int_equal(sp_optimizer_step(o, NAN), -1);
  assert_int_equal(sp_optimizer_steps(o), 0);
  sp_optimizer_free(o);

  sp_opt_kind k;
  assert_int_equal(sp_opt_kind_parse("AdamW", &k), 0);
  assert_int_equal(k, SP_OPT_ADAMW);
  assert_int_equal(sp_opt_kind_parse("rmsprop", &k), -1);
  assert_non_null(strstr(sp_last_error(), "rmsprop"));
}

/* ---- checkpoint round trip ---- */

#define RT_N 1000
#define RT_STEPS 8
#define RT_SPLIT 3

/* The gradient at a step depends on the step and the weights, like a real one. */
static void fake_grads(float *g, const float *w, int64_t n, int step) {
  sp_test_rng r = {(uint64_t)step * 7919u + 1};
  for (int64_t i = 0; i < n; i++) g[i] = 0.3f * w[i] + sp_test_rng_uniform(&r, -1, 1);
}

typedef struct {
  float w[RT_N], b[RT_N / 10], gw[RT_N], gb[RT_N / 10];
  sp_opt_param ps[2];
} model;

static void model_init(model *m) {
  sp_test_rng r = {42};
  sp_test_fill_uniform(&r, m->w, RT_N, -1, 1);
  sp_test_fill_uniform(&r, m->b, RT_N / 10, -1, 1);
  m->ps[0] = (sp_opt_param){"layer1.weight", m->w, m->gw, RT_N, 0};
  m->ps[1] = (sp_opt_param){"layer1.bias", m->b, m->gb, RT_N / 10, 1};
}

static void train(sp_optimizer *o, model *m, int from, int to) {
  for (int s = from; s < to; s++) {
    fake_grads(m->gw, m->w, RT_N, s);
    fake_grads(m->gb, m->b, RT_N / 10, s + 1000);
    assert_int_equal(sp_optimizer_step(o, 0.01f * (float)(s + 1)), 0);
  }
}

/* mode 0: full restore; 1: forget the state tensors; 2: forget the step count. */
static int resumed_equals_uninterrupted(const sp_opt_config *c, int mode) {
  static model a, b;
  model_init(&a);
  sp_optimizer *oa = sp_optimizer_new(c, 2, a.ps);
  assert_non_null(oa);
  train(oa, &a, 0, RT_STEPS);

  model_init(&b);
  sp_optimizer *ob = sp_optimizer_new(c, 2, b.ps);
  train(ob, &b, 0, RT_SPLIT);
  /* Save parameters + optimizer state as a checkpoint would. */
  char dir[256], path[512];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  int ns = sp_optimizer_state_count(ob);
  const char *names[8];
  sp_tensor ts[8];
  assert_true(ns + 2 <= 8);
  names[0] = "layer1.weight";
  ts[0] = sp_tensor_view(SP_F32, sp_shape1(RT_N), b.w);
  names[1] = "layer1.bias";
  ts[1] = sp_tensor_view(SP_F32, sp_shape1(RT_N / 10), b.b);
  for (int i = 0; i < ns; i++) {
    names[2 + i] = sp_optimizer_state_name(ob, i);
    ts[2 + i] = sp_optimizer_state_tensor(ob, i);
  }
  char meta[64];
  snprintf(meta, sizeof meta, "{\"optim_step\":\"%lld\"}", (long long)sp_optimizer_steps(ob));
  if (sp_st_save_tensors(path, ns + 2, names, ts, meta) != 0) fail_msg("%s", sp_last_error());
  sp_optimizer_free(ob);

  /* A fresh process: new buffers, new optimizer, load everything back. */
  memset(&b, 0, sizeof b);
  model_init(&b);
  memset(b.w, 0, sizeof b.w);
  memset(b.b, 0, sizeof b.b);
  ob = sp_optimizer_new(c, 2, b.ps);
  sp_st_file *f = sp_st_open(path);
  if (!f) fail_msg("%s", sp_last_error());
  sp_tensor tw = sp_tensor_view(SP_F32, sp_shape1(RT_N), b.w), tb = sp_tensor_view(SP_F32, sp_shape1(RT_N / 10), b.b);
  assert_int_equal(sp_st_read_into(f, "layer1.weight", &tw), 0);
  assert_int_equal(sp_st_read_into(f, "layer1.bias", &tb), 0);
  assert_int_equal(sp_optimizer_state_count(ob), ns);
  if (mode != 1)
    for (int i = 0; i < ns; i++) {
      sp_tensor t = sp_optimizer_state_tensor(ob, i);
      if (sp_st_read_into(f, sp_optimizer_state_name(ob, i), &t) != 0) fail_msg("%s", sp_last_error());
    }
  if (mode != 2) sp_optimizer_set_steps(ob, atoll(sp_st_meta(f, "optim_step")));
  sp_st_close(f);
  sp_test_rmtree(dir);
  train(ob, &b, RT_SPLIT, RT_STEPS);

  int same = memcmp(a.w, b.w, sizeof a.w) == 0 && memcmp(a.b, b.b, sizeof a.b) == 0;
  for (int i = 0; i < ns && same; i++) {
    sp_tensor x = sp_optimizer_state_tensor(oa, i), y = sp_optimizer_state_tensor(ob, i);
    same = strcmp(sp_optimizer_state_name(oa, i), sp_optimizer_state_name(ob, i)) == 0 &&
           memcmp(x.data, y.data, sp_tensor_bytes(&x)) == 0;
  }
  same = same && sp_optimizer_steps(oa) == sp_optimizer_steps(ob);
  sp_optimizer_free(oa);
  sp_optimizer_free(ob);
  return same;
}


/* A step taken in pieces (slots in reverse order, each in uneven chunks, as
 * the data-parallel trainer updates a bucket as soon as it is reduced) is
 * bitwise the whole step, for SGD with momentum + Nesterov + decay and AdamW. */
static void step_in_pieces_is_bitwise(void **state) {
  (void)state;
  sp_opt_config cs[2] = {sp_opt_config_default(SP_OPT_SGD), sp_opt_config_default(SP_OPT_ADAMW)};
  cs[0].momentum = 0.9f, cs[0].nesterov = 1, cs[0].weight_decay = 1e-3f;
  for (int k = 0; k < 2; k++) {
    static model a, b;
    model_init(&a);
    model_init(&b);
    sp_optimizer *oa = sp_optimizer_new(&cs[k], 2, a.ps), *ob = sp_optimizer_new(&cs[k], 2, b.ps);
    for (int s = 0; s < 4; s++) {
      float lr = 0.01f * (float)(s + 1);
      fake_grads(a.gw, a.w, RT_N, s), fake_grads(a.gb, a.b, RT_N / 10, s + 1000);
      fake_grads(b.gw, b.w, RT_N, s), fake_grads(b.gb, b.b, RT_N / 10, s + 1000);
      assert_int_equal(sp_optimizer_step(oa, lr), 0);
      for (int slot = 1; slot >= 0; slot--) {
        int64_t n = slot ? RT_N / 10 : RT_N;
        for (int64_t at = 0; at < n; at += 333) assert_int_equal(sp_optimizer_step_part(ob, lr, slot, at, at + 333 < n ? at + 333 : n), 0);
      }
      sp_optimizer_step_done(ob);
      assert_true(memcmp(a.w, b.w, sizeof a.w) == 0 && memcmp(a.b, b.b, sizeof a.b) == 0);
    }
    assert_int_equal(sp_optimizer_steps(oa), sp_optimizer_steps(ob));
    assert_int_equal(sp_optimizer_step_part(ob, 0.1f, 2, 0, 1), -1); /* no such slot */
    assert_int_equal(sp_optimizer_step_part(ob, 0.1f, 0, 5, RT_N + 1), -1);
    sp_optimizer_free(oa);
    sp_optimizer_free(ob);
  }
}

/* A gradient scale reads g * scale: with sums of 3 ranks' gradients and 1/3,
 * the step equals the one on g * (1/3) computed beforehand (what the
 * exchange's mean holds), bitwise, for SGD (momentum, decay) and AdamW; and a
 * wrong scale gives another step. */
static void grad_scale_is_the_mean(void **state) {
  (void)state;
  sp_opt_config cs[2] = {sp_opt_config_default(SP_OPT_SGD), sp_opt_config_default(SP_OPT_ADAMW)};
  cs[0].momentum = 0.9f, cs[0].weight_decay = 1e-3f;
  const float third = 1.0f / 3.0f;
  for (int k = 0; k < 2; k++) {
    static model a, b, c;
    model_init(&a), model_init(&b), model_init(&c);
    sp_optimizer *oa = sp_optimizer_new(&cs[k], 2, a.ps), *ob = sp_optimizer_new(&cs[k], 2, b.ps),
                 *oc = sp_optimizer_new(&cs[k], 2, c.ps);
    for (int s = 0; s < 3; s++) {
      fake_grads(a.gw, a.w, RT_N, s), fake_grads(a.gb, a.b, RT_N / 10, s + 1000);
      for (int i = 0; i < RT_N; i++) b.gw[i] = c.gw[i] = 3.0f * a.gw[i], a.gw[i] = b.gw[i] * third;
      for (int i = 0; i < RT_N / 10; i++) b.gb[i] = c.gb[i] = 3.0f * a.gb[i], a.gb[i] = b.gb[i] * third;
      assert_int_equal(sp_optimizer_step(oa, 0.01f), 0);
      sp_optimizer_set_grad_scale(ob, third);
      assert_int_equal(sp_optimizer_step(ob, 0.01f), 0);
      sp_optimizer_set_grad_scale(ob, 1.0f);
      sp_optimizer_set_grad_scale(oc, 0.5f);
      assert_int_equal(sp_optimizer_step(oc, 0.01f), 0);
      assert_true(memcmp(a.w, b.w, sizeof a.w) == 0 && memcmp(a.b, b.b, sizeof a.b) == 0);
      assert_true(memcmp(a.w, c.w, sizeof a.w) != 0);
    }
    sp_optimizer_free(oa), sp_optimizer_free(ob), sp_optimizer_free(oc);
  }
}

static void state_round_trip_is_bitwise(void **state) {
  (void)state;
  sp_opt_config cs[3] = {sgd(0.9f, 1, 0, 5e-4f), adam(SP_OPT_ADAM, 0.9f, 0.999f, 1e-8f, 1e-4f),
                         adam(SP_OPT_ADAMW, 0.9f, 0.999f, 1e-8f, 5e-2f)};
  for (int i = 0; i < 3; i++) {
    if (!resumed_equals_uninterrupted(&cs[i], 0)) fail_msg("%s: resumed run differs", sp_opt_kind_name(cs[i].kind));
    /* The comparison is sharp enough to see a missing piece of state. */
    assert_false(resumed_equals_uninterrupted(&cs[i], 1));
    if (cs[i].kind != SP_OPT_SGD) assert_false(resumed_equals_uninterrupted(&cs[i], 2));
  }
}

static void state_names_and_views(void **state) {
  (void)state;
  float w[3] = {0}, g[3] = {1, 2, 3};
  sp_opt_param p = {"fc.weight", w, g, 3, 0};
  sp_opt_config c = sp_opt_config_default(SP_OPT_ADAMW);
  sp_optimizer *o = sp_optimizer_new(&c, 1, &p);
  assert_int_equal(sp_optimizer_state_count(o), 2);
  assert_string_equal(sp_optimizer_state_name(o, 0), "fc.weight.exp_avg");
  assert_string_equal(sp_optimizer_state_name(o, 1), "fc.weight.exp_avg_sq");
  assert_int_equal(sp_optimizer_state_find(o, "fc.weight.exp_avg_sq"), 1);
  assert_int_equal(sp_optimizer_state_find(o, "fc.weight.momentum"), -1);
  assert_int_equal(sp_optimizer_step(o, 1e-3f), 0);
  sp_tensor m = sp_optimizer_state_tensor(o, 0);
  assert_int_equal(m.dtype, SP_F32);
  assert_int_equal(sp_tensor_numel(&m), 3);
  assert_true(fabsf(((float *)m.data)[2] - 0.3f) < 1e-7f); /* (1 - 0.9) * 3 */
  sp_optimizer_zero_grad(o);
  assert_true(g[0] == 0 && g[2] == 0);
  sp_optimizer_free(o);

  c = sp_opt_config_default(SP_OPT_SGD); /* plain SGD keeps no state */
  o = sp_optimizer_new(&c, 1, &p);
  assert_int_equal(sp_optimizer_state_count(o), 0);
  sp_optimizer_free(o);
  c.momentum = 0.9f;
  p.name = NULL; /* unnamed parameters still get distinct state names */
  o = sp_optimizer_new(&c, 1, &p);
  assert_string_equal(sp_optimizer_state_name(o, 0), "param0.momentum");
  sp_optimizer_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matches_pytorch), cmocka_unit_test(step_in_pieces_is_bitwise),
      cmocka_unit_test(grad_scale_is_the_mean),
      cmocka_unit_test(fixtures_catch_wrong_rules),
      cmocka_unit_test(no_decay_group_gets_no_weight_decay),
      cmocka_unit_test(bad_configs_are_refused),
      cmocka_unit_test(state_round_trip_is_bitwise),
      cmocka_unit_test(state_names_and_views),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
