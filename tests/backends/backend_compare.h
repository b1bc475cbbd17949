/* Runs the same graph on the ref backend and on the cpu backend and compares
 * what training sees: the output, the loss, every parameter gradient and the
 * BN running statistics after one forward + backward. Header-only: shared by
 * tests/backends/test_cpu_*.c.
 *
 * Each case builds `x -> body -> y`; the harness adds y as the output "y" and
 * an MSE loss against a random target, so y's gradient is dense and random.
 * A case with classes > 0 also gets an input "labels" (i32 [N], random in
 * [0, classes)) that its body may read (cross-entropy).
 * Tolerances are per tensor and norm-free: max |cpu - ref| <= tol * max |ref|
 * (+ 1e-12), which is what "1e-4 relative" means for tensors whose elements
 * cross zero. A gradient whose values all stay below 1% of the largest
 * gradient in the model (a bias right before BN has no true gradient: both
 * backends return rounding noise) is held to that 1% level instead. Plans are made with SP_PLAN_POISON, so a read of a dead buffer
 * (or of a blocked layout's padding after the buffer was reused) shows up as
 * NaN. */
#ifndef SPRY_TEST_BACKEND_COMPARE_H
#define SPRY_TEST_BACKEND_COMPARE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "backends/backend.h"
#include "spry/graph.h"
#include "testkit.h"

typedef sp_value (*cmp_build_fn)(sp_graph *g, sp_value x);

typedef struct {
  const char *label;
  cmp_build_fn build;
  int n, c, h, w;
  int training;   /* 1: training plan, forward + backward; 0: inference plan */
  unsigned flags; /* extra plan flags for the cpu plan (SP_PLAN_BF16) */
  double tol;     /* per-tensor tolerance; default 1e-4 */
  int classes;    /* > 0: an i32 input "labels" [N] in [0, classes) */
} cmp_case;

/* Skips the calling test when this build has no cpu backend. */
static inline void cmp_require_cpu(void) {
  if (!sp_backend_op(SP_BACKEND_CPU, &sp_op_relu)) {
    printf("# cpu backend not built (%s): skipped\n", sp_last_error());
    skip();
  }
}

static inline double cmp_max_err(const float *got, const float *want, int64_t n, int64_t *worst, double *scale) {
  double err = 0, mx = 0;
  *worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    if (!(d <= err)) err = d, *worst = i; /* NaN counts as worst */
    if (fabs(want[i]) > mx) mx = fabs(want[i]);
  }
  *scale = mx;
  return err;
}

/* bf16 runs (tol >= 1e-2) are judged by the tensor's relative L2 error,
 * ||cpu - ref|| / max(||ref||, floor * sqrt(n)): bf16 rounds every value,
 * and a few elements whose sign flips under rounding (a ReLU mask at zero)
 * would dominate a max-element measure without meaning anything. */
static inline void cmp_tensor_floor(const cmp_case *c, const char *what, const float *got, const float *want, int64_t n,
                                    double tol, double floor) {
  int64_t worst;
  double scale, err = cmp_max_err(got, want, n, &worst, &scale);
  if (tol >= 1e-2) {
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++)
      d2 += ((double)got[i] - want[i]) * ((double)got[i] - want[i]), r2 += (double)want[i] * want[i];
    double denom = fmax(sqrt(r2), floor * sqrt((double)n));
    if (getenv("SPRY_TEST_VERBOSE"))
      printf("# [%s] %s: relative L2 error %.3g\n", c->label, what, sqrt(d2) / (denom + 1e-30));
    if (!(sqrt(d2) <= tol * denom + 1e-12))
      fail_msg("[%s] %s: relative L2 error %.3g > %.1g (||ref|| %.3g, worst element %lld: cpu %.6g vs ref %.6g)",
               c->label, what, sqrt(d2) / (denom + 1e-30), tol, sqrt(r2), (long long)worst, got[worst], want[worst]);
    return;
  }
  if (scale < floor) scale = floor;
  if (!(err <= tol * scale + 1e-12))
    fail_msg("[%s] %s[%lld]: cpu %.8g vs ref %.8g (max error %.3g > %.1g x max |ref| %.3g)", c->label, what,
             (long long)worst, got[worst], want[worst], err, tol, scale);
}

static inline void cmp_tensor(const cmp_case *c, const char *what, const float *got, const float *want, int64_t n,
                              double tol) {
  cmp_tensor_floor(c, what, got, want, n, tol, 0);
}

/* 1% of the largest |gradient| over the graph's parameters (30% for bf16,
 * flags & SP_PLAN_BF16: a gradient that is zero in exact arithmetic, such as
 * a bias feeding a BN or a softmax, sums bf16-rounded terms and comes out at
 * about 2^-9 of its summands, i.e. ~1% of the large gradients). */
static inline double cmp_grad_floor_for(sp_graph *g, unsigned flags) {
  double mx = 0;
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    const sp_tensor *gr = sp_graph_param_grad(g, i);
    if (!gr) continue;
    for (int64_t j = 0; j < sp_tensor_numel(gr); j++) mx = fmax(mx, fabs(((const float *)gr->data)[j]));
  }
  return (flags & SP_PLAN_BF16 ? 0.3 : 0.01) * mx;
}

static inline double cmp_grad_floor(sp_graph *g) {
  double mx = 0;
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    const sp_tensor *gr = sp_graph_param_grad(g, i);
    if (!gr) continue;
    for (int64_t j = 0; j < sp_tensor_numel(gr); j++) mx = fmax(mx, fabs(((const float *)gr->data)[j]));
  }
  return 0.01 * mx;
}

static inline sp_graph *cmp_graph(const cmp_case *c, sp_value *y) {
  sp_graph *g = sp_graph_new(7);
  sp_value x = sp_graph_input(g, "x", SP_F32, c->c);
  *y = c->build(g, x);
  sp_graph_output(g, *y, "y");
  sp_value t = sp_graph_input(g, "t", SP_F32, -1);
  sp_graph_loss(g, sp_mse_loss(g, *y, t), 1.0f);
  if (sp_graph_error(g)) fail_msg("[%s] %s", c->label, sp_graph_error(g));
  return g;
}

/* 1 when this machine runs bf16 cpu plans; else 0, once saying why (a CPU
 * without AVX-512: the bf16 halves of the cases are left out there, their
 * f32 halves still run). */
static inline int cmp_bf16_here(void) {
  static int said;
  if (sp_backend_bf16(SP_BACKEND_CPU)) return 1;
  if (!said) printf("# bf16 cases left out: %s\n", sp_last_error());
  said = 1;
  return 0;
}

/* Skips the calling test (all of it about bf16) where bf16 does not run. */
static inline void cmp_require_bf16(void) {
  if (!cmp_bf16_here()) skip();
}

/* Skips the calling test where oneDNN runs below AVX-512: a test that a
 * path of ours is taken, for a path built on AVX-512's 16-channel blocks
 * (oneDNN's f32 kernels take 8-channel blocks below it, where the path
 * declines and oneDNN's own runs; the tests against the reference backend
 * cover that). */
static inline void cmp_require_avx512(const char *what) {
  if (sp_backend_cpu_avx512()) return;
  printf("# %s: built for AVX-512's 16-channel blocks; this CPU runs %s: skipped\n", what, sp_backend_cpu_isa());
  skip();
}

/* Skips the calling test where the CPU itself is below AVX2 + FMA (tests
 * that hold oneDNN to AVX2 with ONEDNN_MAX_CPU_ISA: the limit would not bind). */
static inline void cmp_require_avx2_cpu(void) {
  cmp_require_cpu();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    printf("# this CPU has no AVX2 + FMA: skipped\n");
    skip();
  }
}

static inline sp_plan *cmp_plan(const cmp_case *c, sp_graph *g, const sp_shape *y_shape, sp_backend b, unsigned flags) {
  sp_input_shape in[3] = {{"x", sp_shape4(c->n, c->c, c->h, c->w)}, {"t", *y_shape}, {"labels", sp_shape1(c->n)}};
  sp_plan *p = sp_plan_new(g, c->classes > 0 ? 3 : 2, in, b, c->training, SP_PLAN_POISON | flags);
  if (!p) fail_msg("[%s] %s plan: %s", c->label, sp_backend_name(b), sp_last_error());
  return p;
}

/* The output's shape, from a throwaway inference plan of the body alone. */
static inline sp_shape cmp_out_shape(const cmp_case *c) {
  sp_graph *g = sp_graph_new(7);
  sp_value x = sp_graph_input(g, "x", SP_F32, c->c);
  sp_value y = c->build(g, x);
  if (sp_graph_error(g)) fail_msg("[%s] %s", c->label, sp_graph_error(g));
  sp_input_shape in[2] = {{"x", sp_shape4(c->n, c->c, c->h, c->w)}, {"labels", sp_shape1(c->n)}};
  sp_plan *p = sp_plan_new(g, c->classes > 0 ? 2 : 1, in, SP_BACKEND_REF, 0, 0);
  if (!p) fail_msg("[%s] %s", c->label, sp_last_error());
  sp_shape s = *sp_plan_shape(p, y);
  sp_plan_free(p);
  sp_graph_free(g);
  return s;
}

static inline void cmp_fill(sp_plan *p, uint64_t seed, int classes) {
  sp_test_rng r = {seed};
  sp_tensor *x = sp_plan_input(p, "x"), *t = sp_plan_input(p, "t");
  sp_test_fill_uniform(&r, x->data, sp_tensor_numel(x), -1, 1);
  sp_test_fill_uniform(&r, t->data, sp_tensor_numel(t), -1, 1);
  if (classes > 0) {
    sp_tensor *l = sp_plan_input(p, "labels");
    for (int64_t i = 0; i < sp_tensor_numel(l); i++)
      ((int32_t *)l->data)[i] = (int32_t)(sp_test_rng_next(&r) % (uint64_t)classes);
  }
}

/* Every parameter of g uniform in [-0.5, 0.5] (parameter i from seed +
 * i), batch norms' running variances in [0.5, 2]: statistics away from 0
 * and 1, so that a frozen plan's folding of them is exercised. */
static inline void cmp_fill_params(sp_graph *g, uint64_t seed) {
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    sp_tensor *v = sp_graph_param_value(g, i);
    sp_test_rng r = {seed + (uint64_t)i};
    const int var = strstr(sp_graph_param_name(g, i), "running_var") != NULL;
    sp_test_fill_uniform(&r, v->data, sp_tensor_numel(v), var ? 0.5f : -0.5f, var ? 2.0f : 0.5f);
  }
}

/* k's cpu plan (k->flags) made with choose(path) in force and choose(0)
 * after (path 0: the path under test, on by default); parameters from
 * cmp_fill_params(seed), so two plans of one seed compare. */
static inline sp_plan *cmp_plan_path(const cmp_case *k, void (*choose)(int path), int path, sp_graph **g,
                                     uint64_t seed) {
  choose(path);
  sp_shape ys = cmp_out_shape(k);
  sp_value y;
  *g = cmp_graph(k, &y);
  cmp_fill_params(*g, seed);
  sp_plan *p = cmp_plan(k, *g, &ys, SP_BACKEND_CPU, k->flags);
  choose(0);
  return p;
}

/* Relative L2 difference of two f32 tensors of one shape. */
static inline double cmp_rel_l2(const sp_tensor *a, const sp_tensor *b) {
  double d2 = 0, r2 = 0;
  for (int64_t j = 0; j < sp_tensor_numel(a); j++) {
    const double d = (double)((const float *)a->data)[j] - ((const float *)b->data)[j];
    d2 += d * d, r2 += (double)((const float *)b->data)[j] * ((const float *)b->data)[j];
  }
  return sqrt(d2 / (r2 + 1e-30));
}

/* What cmp_two_paths_with checks beyond its tolerance (NULL: nothing). */
typedef struct {
  /* The outputs may not be identical: the path under test computes
   * differently (in another precision or order), so equal outputs mean it
   * did not run. */
  int must_differ;
  /* Biases whose parameter name starts with this have no true gradient (a
   * softmax after them ignores a shift): both paths return rounding noise,
   * held to 5e-2 of the bf16 floor of the largest gradient instead. */
  const char *shift_free;
  /* This parameter's gradient may not be identical (a path that computes
   * only a weight gradient leaves the output as it was). */
  const char *grad_differs;
} cmp_two_opts;

/* Relative L2 difference of a against b, the denominator at least floor per
 * element. */
static inline double cmp_rel_l2_floor(const sp_tensor *a, const sp_tensor *b, double floor) {
  double d2 = 0, r2 = 0;
  for (int64_t j = 0; j < sp_tensor_numel(a); j++) {
    const double x = ((const float *)a->data)[j], y = ((const float *)b->data)[j];
    d2 += (x - y) * (x - y), r2 += y * y;
  }
  return sqrt(d2) / fmax(sqrt(r2) + 1e-30, floor * sqrt((double)sp_tensor_numel(a)));
}

/* One training step of the case on the cpu backend twice, choose(0) before
 * the first plan is made (the path under test) and choose(1) before the
 * second (the path it replaces), same parameters and inputs: the output and
 * every parameter gradient agree within tol, relative L2 (two paths that sum
 * the same bf16 products in f32 differ by summation order only). */
static inline void cmp_two_paths_with(const cmp_case *k, void (*choose)(int path), double tol, const cmp_two_opts *o) {
  if ((k->flags & SP_PLAN_BF16) && !cmp_bf16_here()) return;
  sp_shape ys = cmp_out_shape(k);
  sp_graph *g[2];
  sp_plan *p[2];
  for (int m = 0; m < 2; m++) {
    choose(m);
    sp_value y;
    g[m] = cmp_graph(k, &y);
    p[m] = cmp_plan(k, g[m], &ys, SP_BACKEND_CPU, k->flags);
    cmp_fill(p[m], 99, 0);
    sp_graph_zero_grad(g[m]);
    assert_int_equal(sp_plan_forward(p[m]), 0);
    assert_int_equal(sp_plan_backward(p[m]), 0);
  }
  choose(0);
  const double dy = cmp_rel_l2(sp_plan_output(p[0], "y"), sp_plan_output(p[1], "y"));
  printf("# [%s] output: the two paths differ by %.3g (relative L2)\n", k->label, dy);
  if (!(dy <= tol)) fail_msg("[%s] the output differs between the two paths (%.3g)", k->label, dy);
  if (o && o->must_differ && !(dy > 0))
    fail_msg("[%s] the two paths gave identical outputs: the first did not run", k->label);
  const double floor = cmp_grad_floor_for(g[1], SP_PLAN_BF16);
  for (int i = 0; i < sp_graph_param_count(g[0]); i++) {
    const sp_tensor *a = sp_graph_param_grad(g[0], i), *b = sp_graph_param_grad(g[1], i);
    if (!a) continue;
    const char *name = sp_graph_param_name(g[0], i);
    const int shift_free =
        o && o->shift_free && !strncmp(name, o->shift_free, strlen(o->shift_free)) && strstr(name, ".bias");
    const double d = shift_free ? cmp_rel_l2_floor(a, b, floor) : cmp_rel_l2(a, b), limit = shift_free ? 5e-2 : tol;
    printf("# [%s] grad.%s: the two paths differ by %.3g\n", k->label, name, d);
    if (!(d <= limit)) fail_msg("[%s] grad.%s differs between the two paths (%.3g)", k->label, name, d);
    if (o && o->grad_differs && !strcmp(name, o->grad_differs) && !(d > 0))
      fail_msg("[%s] grad.%s is identical on both paths: the first did not run", k->label, name);
  }
  for (int m = 0; m < 2; m++) sp_plan_free(p[m]), sp_graph_free(g[m]);
}

static inline void cmp_two_paths(const cmp_case *k, void (*choose)(int path), double tol) {
  cmp_two_paths_with(k, choose, tol, NULL);
}

/* A frozen inference plan (k->flags | SP_PLAN_FROZEN) prepares its weights
 * once and again after sp_plan_params_changed: on the cpu backend its output
 * equals a plain plan's before and after the parameter `weight` is scaled by
 * `factor`, and the change shows. */
static inline void cmp_frozen_follows_weights(const cmp_case *k, const char *weight, float factor) {
  if ((k->flags & SP_PLAN_BF16) && !cmp_bf16_here()) return;
  sp_shape ys = cmp_out_shape(k);
  sp_value y;
  sp_graph *g = cmp_graph(k, &y);
  sp_plan *plain = cmp_plan(k, g, &ys, SP_BACKEND_CPU, k->flags);
  sp_plan *frozen = cmp_plan(k, g, &ys, SP_BACKEND_CPU, k->flags | SP_PLAN_FROZEN);
  const size_t bytes = sp_tensor_bytes(sp_plan_output(plain, "y"));
  float *first = malloc(bytes);
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      sp_tensor *w = sp_graph_param_value(g, sp_graph_param_find(g, weight));
      for (int64_t i = 0; i < sp_tensor_numel(w); i++) ((float *)w->data)[i] *= factor;
      sp_plan_params_changed(frozen);
    }
    cmp_fill(plain, 5, 0);
    cmp_fill(frozen, 5, 0);
    assert_int_equal(sp_plan_forward(plain), 0);
    assert_int_equal(sp_plan_forward(frozen), 0);
    assert_memory_equal(sp_plan_output(plain, "y")->data, sp_plan_output(frozen, "y")->data, bytes);
    if (round == 0)
      memcpy(first, sp_plan_output(frozen, "y")->data, bytes);
    else if (!memcmp(first, sp_plan_output(frozen, "y")->data, bytes))
      fail_msg("[%s] the frozen plan kept the old weights", k->label);
  }
  free(first);
  sp_plan_free(plain);
  sp_plan_free(frozen);
  sp_graph_free(g);
}

/* k's cpu training plan run twice without zero_grad: the gradient of
 * parameter `param` after the second backward pass must be twice the
 * first's (a path that wrote instead of adding would leave it once). */
static inline void cmp_grad_adds_twice(const cmp_case *k, const char *param, uint64_t seed) {
  sp_shape ys = cmp_out_shape(k);
  sp_value y;
  sp_graph *g = cmp_graph(k, &y);
  sp_plan *p = cmp_plan(k, g, &ys, SP_BACKEND_CPU, k->flags);
  cmp_fill(p, seed, 0);
  sp_graph_zero_grad(g);
  const sp_tensor *dw = NULL;
  for (int i = 0; i < sp_graph_param_count(g); i++)
    if (!strcmp(sp_graph_param_name(g, i), param)) dw = sp_graph_param_grad(g, i);
  assert_non_null(dw);
  assert_int_equal(sp_plan_forward(p), 0);
  assert_int_equal(sp_plan_backward(p), 0);
  const int64_t n = sp_tensor_numel(dw);
  float *once = malloc(sizeof(float) * (size_t)n);
  assert_non_null(once);
  memcpy(once, dw->data, sizeof(float) * (size_t)n);
  assert_int_equal(sp_plan_forward(p), 0);
  assert_int_equal(sp_plan_backward(p), 0);
  double err = 0, mx = 0;
  for (int64_t i = 0; i < n; i++) {
    const double want = 2.0 * once[i], got = ((const float *)dw->data)[i];
    err = fmax(err, fabs(got - want)), mx = fmax(mx, fabs(want));
  }
  printf("# %s after two backward passes: max |got - 2 once| = %.3g of %.3g\n", param, err, mx);
  assert_true(mx > 0);
  assert_true(err <= 1e-5 * mx);
  free(once);
  sp_plan_free(p);
  sp_graph_free(g);
}

/* The cpu plan of case k, for tests that look at what the plan chose
 * (which nodes absorbed, adopted, took a path); *g is its graph. Free both
 * with cmp_plan_release. */
static inline sp_plan *cmp_cpu_plan(const cmp_case *k, sp_graph **g) {
  sp_shape ys = cmp_out_shape(k);
  sp_value y;
  *g = cmp_graph(k, &y);
  return cmp_plan(k, *g, &ys, SP_BACKEND_CPU, k->flags);
}
static inline void cmp_plan_release(sp_plan *p, sp_graph *g) {
  sp_plan_free(p);
  sp_graph_free(g);
}

/* Runs the case on both backends and compares. */
static inline void cmp_run(const cmp_case *c) {
  if ((c->flags & SP_PLAN_BF16) && !cmp_bf16_here()) return;
  double tol = c->tol > 0 ? c->tol : 1e-4;
  sp_shape ys = cmp_out_shape(c);
  sp_value y[2];
  sp_graph *g[2] = {cmp_graph(c, &y[0]), cmp_graph(c, &y[1])};
  sp_plan *p[2] = {cmp_plan(c, g[0], &ys, SP_BACKEND_REF, 0), cmp_plan(c, g[1], &ys, SP_BACKEND_CPU, c->flags)};
  for (int b = 0; b < 2; b++) {
    for (int i = 0; i < sp_graph_param_count(g[b]); i++) {
      /* Same values in both graphs: BN running stats get a non-trivial start. */
      sp_tensor *v = sp_graph_param_value(g[b], i);
      sp_test_rng r = {1000u + (uint64_t)i};
      if (strstr(sp_graph_param_name(g[b], i), "running_var"))
        sp_test_fill_uniform(&r, v->data, sp_tensor_numel(v), 0.5f, 1.5f);
      else if (strstr(sp_graph_param_name(g[b], i), "running_mean"))
        sp_test_fill_uniform(&r, v->data, sp_tensor_numel(v), -0.2f, 0.2f);
      else if (b == 1)
        memcpy(v->data, sp_graph_param_value(g[0], i)->data, sp_tensor_bytes(v));
    }
    cmp_fill(p[b], 99, c->classes);
    sp_graph_zero_grad(g[b]);
    assert_int_equal(sp_plan_forward(p[b]), 0);
    if (c->training) assert_int_equal(sp_plan_backward(p[b]), 0);
  }
  const sp_tensor *out[2] = {sp_plan_output(p[0], "y"), sp_plan_output(p[1], "y")};
  cmp_tensor(c, "y", out[1]->data, out[0]->data, sp_tensor_numel(out[0]), tol);
  float loss[2] = {(float)sp_plan_loss(p[0]), (float)sp_plan_loss(p[1])};
  cmp_tensor(c, "loss", &loss[1], &loss[0], 1, tol);
  double floor = c->training ? cmp_grad_floor_for(g[0], c->flags) : 0;
  for (int i = 0; i < sp_graph_param_count(g[0]); i++) {
    const char *name = sp_graph_param_name(g[0], i);
    cmp_tensor(c, name, sp_graph_param_value(g[1], i)->data, sp_graph_param_value(g[0], i)->data,
               sp_tensor_numel(sp_graph_param_value(g[0], i)), tol);
    if (c->training && sp_graph_param_grad(g[0], i)) {
      char what[600];
      snprintf(what, sizeof what, "grad.%s", name);
      cmp_tensor_floor(c, what, sp_graph_param_grad(g[1], i)->data, sp_graph_param_grad(g[0], i)->data,
                       sp_tensor_numel(sp_graph_param_grad(g[0], i)), tol, floor);
    }
  }
  for (int b = 0; b < 2; b++) {
    sp_plan_free(p[b]);
    sp_graph_free(g[b]);
  }
}

/* What a plan hands a one-input convolution node's prepare(): a training
 * plan with backward and the input's gradient wanted, every parameter
 * trainable (a bias when `bias`), the input in `layout` (the producer's
 * dnnl_memory_desc_t; NULL: plain). Tests of which path a node takes set
 * the rest (consumer, run_backward) on the result. */
static inline sp_op_prep cmp_conv_prep(const sp_op_def *op, const void *attr, sp_shape in, sp_shape out,
                                       sp_shape weight, int bias, int bf16, const void *layout) {
  sp_op_prep p = {
      .op = op, .attr = attr, .n_in = 1, .n_param = bias ? 2 : 1, .training = 1, .run_backward = 1, .bf16 = bf16};
  p.in_shape[0] = in, p.out_shape = out;
  p.param_shape[0] = weight, p.param_grad[0] = 1;
  p.param_shape[1] = sp_shape1(out.d[1]), p.param_grad[1] = bias != 0;
  p.in_dtype[0] = SP_F32, p.in_layout[0] = layout, p.need_d_in[0] = 1;
  return p;
}

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* A conv2d node prepared on the cpu backend as a training plan would
 * (cmp_conv_prep): a square kernel k with padding k / 2, the input
 * [n, ic, h, w] in `tag` of the plan's dtype. Tests ask the returned state
 * which path it took, then cpu_node_free it. */
static inline void *cmp_conv_node(int64_t n, int64_t ic, int64_t oc, int64_t h, int64_t w, int k, int stride, int bias,
                                  int bf16, dnnl_format_tag_t tag) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {n, ic, h, w};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, bf16 ? dnnl_bf16 : dnnl_f32, tag), dnnl_success);
  const int pad = k / 2;
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  sp_conv2d_attr at = {stride, stride, pad, pad, 1, 1, 1};
  sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(n, ic, h, w), sp_shape4(n, oc, oh, ow),
                               sp_shape4(oc, ic, k, k), bias, bf16, &md);
  assert_int_equal(cpu_conv_prepare(&p), 0);
  return p.state;
}

/* cmp_run(k), then checks that a path of ours ran at least `at_least`
 * times: *calls is its counter, `what` names it in the log. */
static inline void cmp_run_counted(const cmp_case *k, const long *calls, long at_least, const char *what) {
  const long before = *calls;
  cmp_run(k);
  printf("# [%s] %s run: %ld\n", k->label, what, *calls - before);
  assert_true(*calls - before >= at_least);
}

/* One f32 convolution in 8-channel blocks (cmp_conv_node, h = w = hw) and
 * what `paths` should answer for its node. */
typedef struct {
  int ic, oc, k, stride, n, hw, want, bias;
} cmp_conv_taken;

/* Each case's node answers `paths` (a cpu_conv_* accessor) with its want. */
static inline void cmp_conv_taken_check(const cmp_conv_taken *cases, size_t n_cases, int (*paths)(const void *state)) {
  for (size_t t = 0; t < n_cases; t++) {
    const cmp_conv_taken *c = &cases[t];
    void *s = cmp_conv_node(c->n, c->ic, c->oc, c->hw, c->hw, c->k, c->stride, c->bias, 0, dnnl_aBcd8b);
    const int got = paths(s);
    cpu_node_free(s);
    if (got != c->want)
      fail_msg("case %zu (%d -> %d, k %d, stride %d, %d px, bias %d): %d, want %d", t, c->ic, c->oc, c->k, c->stride,
               c->hw, c->bias, got, c->want);
  }
}

/* The graphs the stride-2 kernels' tests share (test_cpu_s2dw.c,
 * test_cpu_wino_s2.c): image -> 3x3 16 (stride 1) -> BN -> ReLU -> 3x3/2 32
 * -> BN -> ReLU -> 3x3/2 32 with a bias -> ReLU -> 3x3/2 16 -> 1x1 head. */
static inline sp_value cmp_b_s2_stack(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "c0", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}), "bn0"));
  x = sp_relu(
      g,
      sp_batchnorm(g, sp_conv2d(g, x, "c1", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = 2, .pad = 1}), "bn1"));
  x = sp_relu(g, sp_conv2d(g, x, "c2", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = 2, .pad = 1, .bias = 1}));
  x = sp_conv2d(g, x, "c3", (sp_conv_args){.out_ch = 16, .kernel = 3, .stride = 2, .pad = 1});
  return sp_conv2d(g, sp_relu(g, x), "head", (sp_conv_args){.out_ch = 3, .kernel = 1, .bias = 1});
}

/* ... and two 3x3 convolutions of the given stride reading one value (the
 * first's input gradient adds onto the second's): stride 2 for the
 * stride-2 tests, 1 for the stride-1 Winograd ones (test_cpu_wino.c,
 * test_cpu_wino16.c). */
static inline sp_value cmp_b_3x3_two_readers_s(sp_graph *g, sp_value x, int stride) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}));
  sp_value a = sp_conv2d(g, x, "a", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = stride, .pad = 1});
  sp_value b = sp_conv2d(g, x, "b", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = stride, .pad = 1});
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", (sp_conv_args){.out_ch = 3, .kernel = 1});
}
static inline sp_value cmp_b_s2_two_readers(sp_graph *g, sp_value x) { return cmp_b_3x3_two_readers_s(g, x, 2); }
static inline sp_value cmp_b_3x3_two_readers(sp_graph *g, sp_value x) { return cmp_b_3x3_two_readers_s(g, x, 1); }

/* main() of a test that holds oneDNN to AVX2 (8-channel blocks on every
 * machine): set before anything asks oneDNN for the CPU's instruction set. */
#define CMP_AVX2_MAIN(...)                            \
  int main(void) {                                    \
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);          \
    const struct CMUnitTest tests[] = {__VA_ARGS__};  \
    return cmocka_run_group_tests(tests, NULL, NULL); \
  }
#endif

/* main() of a test of the cpu backend's own paths: its tests, or a SKIP
 * line in a build without oneDNN (the test functions then do not exist:
 * macro arguments that are not used are never compiled). */
#ifdef SPRY_HAVE_DNNL
#define CMP_CPU_MAIN(...)                             \
  int main(void) {                                    \
    const struct CMUnitTest tests[] = {__VA_ARGS__};  \
    return cmocka_run_group_tests(tests, NULL, NULL); \
  }
#else
#define CMP_CPU_MAIN(...)                             \
  int main(void) {                                    \
    printf("1..0 # SKIP oneDNN not in this build\n"); \
    return 0;                                         \
  }
#endif

#endif
