/* Gradient checks and PyTorch fixture comparisons for any op (opcheck.h). */
#include "opcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/safetensors.h"

typedef struct {
  sp_tensor in[SP_OP_MAX_IN], d_in[SP_OP_MAX_IN];
  sp_tensor param[SP_OP_MAX_PARAM], d_param[SP_OP_MAX_PARAM];
  sp_tensor state[SP_OP_MAX_PARAM], state0[SP_OP_MAX_PARAM];
  sp_tensor out, d_out;
  void *saved;
  size_t saved_bytes;
  sp_op_args args;
} op_run;

static void check_fail(const sp_opcheck_case *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check_fail(const sp_opcheck_case *c, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail_msg("[%s] %s", c->label ? c->label : c->op->name, msg);
}

/* Allocates the run from explicit shapes, wires sp_op_args, runs infer. */
static void setup(op_run *r, const sp_opcheck_case *c, const sp_shape *in_shape, const sp_dtype *in_dtype,
                  const sp_shape *param_shape, const sp_shape *state_shape) {
  memset(r, 0, sizeof *r);
  sp_shape out_shape;
  char err[512] = "";
  if (c->op->infer(c->attr, c->n_in, in_shape, c->n_param, param_shape, &out_shape, err, sizeof err) != 0)
    check_fail(c, "infer refused the case: %s", err);
  for (int i = 0; i < c->n_in; i++) {
    r->in[i] = sp_tensor_alloc(in_dtype[i], in_shape[i]);
    if (!c->no_grad[i] && in_dtype[i] == SP_F32) r->d_in[i] = sp_tensor_alloc(SP_F32, in_shape[i]);
  }
  for (int i = 0; i < c->n_param; i++) {
    r->param[i] = sp_tensor_alloc(SP_F32, param_shape[i]);
    r->d_param[i] = sp_tensor_alloc(SP_F32, param_shape[i]);
  }
  for (int i = 0; i < c->n_state; i++) {
    r->state[i] = sp_tensor_alloc(SP_F32, state_shape[i]);
    r->state0[i] = sp_tensor_alloc(SP_F32, state_shape[i]);
  }
  r->out = sp_tensor_alloc(SP_F32, out_shape);
  r->d_out = sp_tensor_alloc(SP_F32, out_shape);
  r->saved_bytes = c->op->saved_bytes ? c->op->saved_bytes(c->attr, c->n_in, in_shape, &out_shape) : 0;
  r->saved = r->saved_bytes ? sp_aligned_alloc(r->saved_bytes) : NULL;

  sp_op_args *a = &r->args;
  a->attr = c->attr;
  a->n_in = c->n_in;
  for (int i = 0; i < c->n_in; i++) {
    a->in[i] = &r->in[i];
    a->d_in[i] = r->d_in[i].data ? &r->d_in[i] : NULL;
  }
  a->n_param = c->n_param;
  for (int i = 0; i < c->n_param; i++) {
    a->param[i] = &r->param[i];
    a->d_param[i] = &r->d_param[i];
  }
  a->n_state = c->n_state;
  for (int i = 0; i < c->n_state; i++) a->state[i] = &r->state[i];
  a->out = &r->out;
  a->d_out = &r->d_out;
  a->saved = r->saved;
  a->training = c->training;
  a->seed = c->seed ? c->seed : 0x5eed;
}

static void teardown(op_run *r, const sp_opcheck_case *c) {
  for (int i = 0; i < c->n_in; i++) {
    sp_tensor_free(&r->in[i]);
    if (r->d_in[i].data) sp_tensor_free(&r->d_in[i]);
  }
  for (int i = 0; i < c->n_param; i++) {
    sp_tensor_free(&r->param[i]);
    sp_tensor_free(&r->d_param[i]);
  }
  for (int i = 0; i < c->n_state; i++) {
    sp_tensor_free(&r->state[i]);
    sp_tensor_free(&r->state0[i]);
  }
  sp_tensor_free(&r->out);
  sp_tensor_free(&r->d_out);
  sp_aligned_free(r->saved);
}

static void fill_nan(sp_tensor *t) {
  float *x = t->data;
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) x[i] = NAN;
}

static void run_forward(op_run *r, const sp_opcheck_case *c) {
  for (int i = 0; i < c->n_state; i++) memcpy(r->state[i].data, r->state0[i].data, sp_tensor_bytes(&r->state[i]));
  if (r->saved) memset(r->saved, 0xff, r->saved_bytes); /* NaN pattern: backward must read only what forward wrote */
  c->op->forward(&r->args);
}

/* sum(out * d_out) in double: the scalar whose gradient backward computes. */
static double projected(const op_run *r) {
  const float *o = r->out.data, *g = r->d_out.data;
  double s = 0;
  for (int64_t i = 0; i < sp_tensor_numel(&r->out); i++) s += (double)o[i] * (double)g[i];
  return s;
}

static void init_tensor(const sp_opcheck_case *c, int kind, int idx, sp_tensor *t, sp_test_rng *rng) {
  if (c->init) {
    c->init(kind, idx, t, rng);
    return;
  }
  if (t->dtype != SP_F32) {
    memset(t->data, 0, sp_tensor_bytes(t));
    return;
  }
  float lo = c->lo, hi = c->hi;
  if (lo == 0 && hi == 0) lo = -1, hi = 1;
  float *x = t->data;
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) {
    do x[i] = sp_test_rng_uniform(rng, lo, hi);
    while (kind == 0 && c->min_abs > 0 && fabsf(x[i]) < c->min_abs);
  }
}

/* Compares analytic and numeric derivatives for up to max_checks elements of x. */
static void check_tensor(op_run *r, const sp_opcheck_case *c, const char *what, int idx, sp_tensor *x,
                         const float *analytic, sp_test_rng *rng) {
  double eps = c->eps > 0 ? c->eps : 1e-2;
  double rtol = c->rtol > 0 ? c->rtol : 2e-2, atol = c->atol > 0 ? c->atol : 2e-3;
  int64_t n = sp_tensor_numel(x);
  int max_checks = c->max_checks > 0 ? c->max_checks : 64;
  float *v = x->data;
  for (int k = 0; k < (n < max_checks ? n : max_checks); k++) {
    int64_t i = n <= max_checks ? k : (int64_t)(sp_test_rng_next(rng) % (uint64_t)n);
    float keep = v[i];
    v[i] = (float)(keep + eps);
    run_forward(r, c);
    double plus = projected(r);
    v[i] = (float)(keep - eps);
    run_forward(r, c);
    double minus = projected(r);
    v[i] = keep;
    /* Use the actually representable step so float rounding of x+-eps does not bias it. */
    double numeric = (plus - minus) / ((double)(float)(keep + eps) - (double)(float)(keep - eps));
    double err = fabs(numeric - analytic[i]);
    if (!(err <= atol + rtol * fabs(numeric)))
      check_fail(c, "%s%d[%lld]: analytic %.6g vs numeric %.6g (|diff| %.3g > atol %.1g + rtol %.1g)", what, idx,
           (long long)i, analytic[i], numeric, err, atol, rtol);
  }
}

void sp_opcheck_gradients(const sp_opcheck_case *c) {
  sp_dtype dt[SP_OP_MAX_IN];
  for (int i = 0; i < c->n_in; i++) dt[i] = c->in_dtype[i];
  op_run r;
  setup(&r, c, c->in_shape, dt, c->param_shape, c->state_shape);
  sp_test_rng rng = {c->seed ? c->seed : 42};
  for (int i = 0; i < c->n_in; i++) init_tensor(c, 0, i, &r.in[i], &rng);
  for (int i = 0; i < c->n_param; i++) init_tensor(c, 1, i, &r.param[i], &rng);
  for (int i = 0; i < c->n_state; i++) {
    init_tensor(c, 2, i, &r.state0[i], &rng);
    if (strstr(c->op->name, "batchnorm") && i == 1) { /* a variance must be positive */
      float *v = r.state0[i].data;
      for (int64_t j = 0; j < sp_tensor_numel(&r.state0[i]); j++) v[j] = 0.5f + fabsf(v[j]);
    }
  }

  /* Forward writes every element, deterministically. */
  fill_nan(&r.out);
  run_forward(&r, c);
  int64_t n_out = sp_tensor_numel(&r.out);
  float *first = sp_xmalloc(sizeof(float) * (size_t)(n_out ? n_out : 1));
  memcpy(first, r.out.data, sizeof(float) * (size_t)n_out);
  for (int64_t i = 0; i < n_out; i++)
    if (!isfinite(((float *)r.out.data)[i])) check_fail(c, "forward left out[%lld] = %g", (long long)i, ((float *)r.out.data)[i]);
  fill_nan(&r.out);
  run_forward(&r, c);
  if (memcmp(first, r.out.data, sizeof(float) * (size_t)n_out) != 0) check_fail(c, "forward is not deterministic");
  free(first);

  /* Backward accumulates: pre-fill gradients with known values, subtract after. */
  sp_test_fill_uniform(&rng, r.d_out.data, sp_tensor_numel(&r.d_out), -1, 1);
  if (c->op->flags & SP_OP_IS_LOSS) ((float *)r.d_out.data)[0] = 0.75f; /* a loss weight */
  float *pre_in[SP_OP_MAX_IN] = {0}, *pre_p[SP_OP_MAX_PARAM] = {0};
  for (int i = 0; i < c->n_in; i++)
    if (r.d_in[i].data) {
      sp_test_fill_uniform(&rng, r.d_in[i].data, sp_tensor_numel(&r.d_in[i]), -1, 1);
      pre_in[i] = sp_xmalloc(sp_tensor_bytes(&r.d_in[i]));
      memcpy(pre_in[i], r.d_in[i].data, sp_tensor_bytes(&r.d_in[i]));
    }
  for (int i = 0; i < c->n_param; i++) {
    sp_test_fill_uniform(&rng, r.d_param[i].data, sp_tensor_numel(&r.d_param[i]), -1, 1);
    pre_p[i] = sp_xmalloc(sp_tensor_bytes(&r.d_param[i]));
    memcpy(pre_p[i], r.d_param[i].data, sp_tensor_bytes(&r.d_param[i]));
  }
  run_forward(&r, c);
  c->op->backward(&r.args);
  for (int i = 0; i < c->n_in; i++)
    if (pre_in[i]) {
      float *g = r.d_in[i].data;
      for (int64_t j = 0; j < sp_tensor_numel(&r.d_in[i]); j++) g[j] -= pre_in[i][j];
      check_tensor(&r, c, "d_in", i, &r.in[i], g, &rng);
      free(pre_in[i]);
    }
  for (int i = 0; i < c->n_param; i++) {
    float *g = r.d_param[i].data;
    for (int64_t j = 0; j < sp_tensor_numel(&r.d_param[i]); j++) g[j] -= pre_p[i][j];
    check_tensor(&r, c, "d_param", i, &r.param[i], g, &rng);
    free(pre_p[i]);
  }
  teardown(&r, c);
}

static const sp_tensor *need(const sp_opcheck_case *c, sp_st_file *f, const char *file, const char *name) {
  const sp_tensor *t = sp_st_get(f, name);
  if (!t) check_fail(c, "fixture %s has no tensor '%s'", file, name);
  return t;
}

static void compare(const sp_opcheck_case *c, const char *what, const sp_tensor *got, const sp_tensor *want,
                    double rtol, double atol) {
  char a[64], b[64];
  if (!sp_shape_equal(&got->shape, &want->shape))
    check_fail(c, "%s: shape %s vs PyTorch %s", what, sp_shape_str(&got->shape, a, sizeof a),
         sp_shape_str(&want->shape, b, sizeof b));
  int64_t worst;
  double ratio = sp_test_close_ratio(got->data, want->data, sp_tensor_numel(got), rtol, atol, &worst);
  if (!(ratio <= 1.0))
    check_fail(c, "%s[%lld]: spry %.8g vs PyTorch %.8g (rtol %.1g, atol %.1g)", what, (long long)worst,
         ((const float *)got->data)[worst], ((const float *)want->data)[worst], rtol, atol);
}

void sp_opcheck_fixture(const sp_opcheck_case *c, const char *file, double rtol, double atol) {
  char path[1024], name[32];
  sp_test_fixture_path(file, path, sizeof path);
  sp_st_file *f = sp_st_open(path);
  if (!f) check_fail(c, "cannot open fixture: %s", sp_last_error());
  sp_shape in_shape[SP_OP_MAX_IN], p_shape[SP_OP_MAX_PARAM], s_shape[SP_OP_MAX_PARAM];
  sp_dtype dt[SP_OP_MAX_IN];
  const sp_tensor *src_in[SP_OP_MAX_IN], *src_p[SP_OP_MAX_PARAM], *src_s[SP_OP_MAX_PARAM];
  for (int i = 0; i < c->n_in; i++) {
    snprintf(name, sizeof name, "in%d", i);
    src_in[i] = need(c, f, file, name);
    in_shape[i] = src_in[i]->shape;
    dt[i] = src_in[i]->dtype;
  }
  for (int i = 0; i < c->n_param; i++) {
    snprintf(name, sizeof name, "param%d", i);
    src_p[i] = need(c, f, file, name);
    p_shape[i] = src_p[i]->shape;
  }
  for (int i = 0; i < c->n_state; i++) {
    snprintf(name, sizeof name, "state%d", i);
    src_s[i] = need(c, f, file, name);
    s_shape[i] = src_s[i]->shape;
  }
  op_run r;
  setup(&r, c, in_shape, dt, p_shape, s_shape);
  for (int i = 0; i < c->n_in; i++) memcpy(r.in[i].data, src_in[i]->data, sp_tensor_bytes(&r.in[i]));
  for (int i = 0; i < c->n_param; i++) memcpy(r.param[i].data, src_p[i]->data, sp_tensor_bytes(&r.param[i]));
  for (int i = 0; i < c->n_state; i++) memcpy(r.state0[i].data, src_s[i]->data, sp_tensor_bytes(&r.state0[i]));

  fill_nan(&r.out);
  run_forward(&r, c);
  compare(c, "out", &r.out, need(c, f, file, "out"), rtol, atol);
  for (int i = 0; i < c->n_state; i++) {
    snprintf(name, sizeof name, "state_out%d", i);
    const sp_tensor *want = sp_st_get(f, name);
    if (want) compare(c, name, &r.state[i], want, rtol, atol);
  }
  if (!(c->op->flags & SP_OP_NO_GRAD)) {
    const sp_tensor *dout = need(c, f, file, "dout");
    memcpy(r.d_out.data, dout->data, sp_tensor_bytes(&r.d_out));
    c->op->backward(&r.args);
    for (int i = 0; i < c->n_in; i++) {
      if (!r.d_in[i].data) continue;
      snprintf(name, sizeof name, "din%d", i);
      compare(c, name, &r.d_in[i], need(c, f, file, name), rtol, atol);
    }
    for (int i = 0; i < c->n_param; i++) {
      snprintf(name, sizeof name, "dparam%d", i);
      compare(c, name, &r.d_param[i], need(c, f, file, name), rtol, atol);
    }
  }
  teardown(&r, c);
  sp_st_close(f);
}
