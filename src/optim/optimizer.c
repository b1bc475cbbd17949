/* Optimizer construction, validation, the step loop and the state table that
 * checkpoints read and write. The update math lives in sgd.c and adam.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "optim_impl.h"

double sp_opt_decimal(float f) {
  if (!isfinite(f)) return (double)f;
  char buf[32];
  /* 9 significant digits always round-trip a float, so the loop ends. */
  for (int digits = 1; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    if (strtof(buf, NULL) == f) return strtod(buf, NULL);
  }
  return (double)f;
}

sp_opt_config sp_opt_config_default(sp_opt_kind kind) {
  sp_opt_config c;
  memset(&c, 0, sizeof c);
  c.kind = kind;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  c.weight_decay = kind == SP_OPT_ADAMW ? 1e-2f : 0.0f;
  return c;
}

static const char *const kind_names[] = {"sgd", "adam", "adamw"};

const char *sp_opt_kind_name(sp_opt_kind kind) { return (unsigned)kind < 3 ? kind_names[kind] : "unknown"; }

int sp_opt_kind_parse(const char *name, sp_opt_kind *out) {
  for (int k = 0; k < 3; k++)
    if (name && strcasecmp(name, kind_names[k]) == 0) {
      *out = (sp_opt_kind)k;
      return 0;
    }
  return sp_error_set("unknown optimizer \"%s\" (expected sgd, adam or adamw)", name ? name : "(null)");
}

int sp_opt_config_check(const sp_opt_config *c) {
  if (!c) return sp_error_set("optimizer config is NULL");
  if ((unsigned)c->kind > SP_OPT_ADAMW)
    return sp_error_set("optimizer kind %d is not sgd, adam or adamw", (int)c->kind);
  /* `!(x >= 0)` rather than `x < 0` so NaN is refused too. */
  if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
    return sp_error_set("%s: weight_decay %g must be a finite number >= 0", sp_opt_kind_name(c->kind), c->weight_decay);
  if (c->kind == SP_OPT_SGD) {
    if (!(c->momentum >= 0) || !isfinite(c->momentum))
      return sp_error_set("sgd: momentum %g must be a finite number >= 0", c->momentum);
    if (!(c->dampening >= 0 && c->dampening <= 1))
      return sp_error_set("sgd: dampening %g must be in [0, 1]", c->dampening);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
      return sp_error_set("sgd: nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)", c->momentum,
                          c->dampening);
    return 0;
  }
  const char *k = sp_opt_kind_name(c->kind);
  if (!(c->beta1 >= 0 && c->beta1 < 1)) return sp_error_set("%s: beta1 %g must be in [0, 1)", k, c->beta1);
  if (!(c->beta2 >= 0 && c->beta2 < 1)) return sp_error_set("%s: beta2 %g must be in [0, 1)", k, c->beta2);
  if (!(c->eps >= 0) || !isfinite(c->eps)) return sp_error_set("%s: eps %g must be a finite number >= 0", k, c->eps);
  return 0;
}

static void add_state(sp_optimizer *o, const char *param, const char *suffix, float **slot, int64_t numel) {
  size_t len = strlen(param) + strlen(suffix) + 2;
  char *name = sp_xmalloc(len);
  snprintf(name, len, "%s.%s", param, suffix);
  /* Aligned and zeroed: Adam's moments start at 0; the momentum buffer is
   * overwritten on the first step. At least one byte so numel 0 is valid. */
  size_t bytes = (size_t)numel * sizeof(float);
  float *mem = sp_aligned_alloc(bytes ? bytes : 64);
  memset(mem, 0, bytes);
  *slot = mem;
  o->state_names[o->n_state] = name;
  o->state_data[o->n_state] = mem;
  o->state_numel[o->n_state] = numel;
  o->n_state++;
}

sp_optimizer *sp_optimizer_new(const sp_opt_config *cfg, int n, const sp_opt_param *params) {
  if (sp_opt_config_check(cfg) != 0) return NULL;
  if (n < 0 || (n > 0 && !params)) {
    sp_error_set("optimizer: %d parameters with %s table", n, params ? "a" : "no");
    return NULL;
  }
  char fallback[32];
  for (int i = 0; i < n; i++) {
    const sp_opt_param *p = &params[i];
    const char *name = p->name;
    if (!name) {
      snprintf(fallback, sizeof fallback, "param%d", i);
      name = fallback;
    }
    if (p->numel < 0) {
      sp_error_set("optimizer: parameter \"%s\" has numel %lld", name, (long long)p->numel);
      return NULL;
    }
    if (p->numel > 0 && (!p->data || !p->grad)) {
      sp_error_set("optimizer: parameter \"%s\" has no %s", name, p->data ? "gradient" : "data");
      return NULL;
    }
    for (int j = 0; j < i && p->name; j++)
      if (params[j].name && strcmp(params[j].name, p->name) == 0) {
        sp_error_set("optimizer: parameter name \"%s\" is used twice (state tensors would collide)", p->name);
        return NULL;
      }
  }
  sp_optimizer *o = sp_xcalloc(1, sizeof *o);
  o->cfg = *cfg;
  o->grad_scale = 1.0f;
  o->n = n;
  o->slots = sp_xcalloc(n > 0 ? (size_t)n : 1, sizeof *o->slots);
  int per = cfg->kind == SP_OPT_SGD ? (cfg->momentum != 0 ? 1 : 0) : 2;
  size_t cap = (size_t)n * per + 1;
  o->state_names = sp_xcalloc(cap, sizeof *o->state_names);
  o->state_data = sp_xcalloc(cap, sizeof *o->state_data);
  o->state_numel = sp_xcalloc(cap, sizeof *o->state_numel);
  double wd_d = sp_opt_decimal(cfg->weight_decay);
  for (int i = 0; i < n; i++) {
    sp_opt_slot *s = &o->slots[i];
    const sp_opt_param *p = &params[i];
    if (p->name) {
      s->name = sp_xstrdup(p->name);
    } else {
      snprintf(fallback, sizeof fallback, "param%d", i);
      s->name = sp_xstrdup(fallback);
    }
    s->data = p->data;
    s->grad = p->grad;
    s->numel = p->numel;
    int decayed = !p->no_decay || cfg->decay_norm_and_bias;
    s->wd = decayed ? cfg->weight_decay : 0.0f;
    s->wd_d = decayed ? wd_d : 0.0;
    if (cfg->kind == SP_OPT_SGD) {
      if (per) add_state(o, s->name, "momentum", &s->state0, s->numel);
    } else {
      add_state(o, s->name, "exp_avg", &s->state0, s->numel);
      add_state(o, s->name, "exp_avg_sq", &s->state1, s->numel);
    }
  }
  return o;
}

void sp_optimizer_free(sp_optimizer *o) {
  if (!o) return;
  for (int i = 0; i < o->n_state; i++) {
    free(o->state_names[i]);
    sp_aligned_free(o->state_data[i]);
  }
  for (int i = 0; i < o->n; i++) free(o->slots[i].name);
  free(o->state_names);
  free(o->state_data);
  free(o->state_numel);
  free(o->slots);
  free(o);
}

static int check_lr(const sp_optimizer *o, float lr) {
  if (!(lr >= 0) || !isfinite(lr))
    return sp_error_set("%s step %lld: lr %g must be a finite number >= 0", sp_opt_kind_name(o->cfg.kind),
                        (long long)o->steps + 1, lr);
  return 0;
}

/* The update of elements [b, e) of slot i in the coming step (o->steps + 1).
 * Every rule is elementwise, so pieces give exactly the whole. */
static void update_slot(const sp_optimizer *o, int i, int64_t b, int64_t e, float lr) {
  const sp_opt_config *c = &o->cfg;
  const sp_opt_slot *s = &o->slots[i];
  double lr_d = sp_opt_decimal(lr);
  if (c->kind == SP_OPT_SGD) {
    sp_sgd_update(s->data + b, s->grad + b, o->grad_scale, s->state0 ? s->state0 + b : NULL, e - b, c,
                  sp_opt_decimal(c->dampening), s->wd, lr_d, o->steps == 0);
  } else {
    sp_adam_update(s->data + b, s->grad + b, o->grad_scale, s->state0 + b, s->state1 + b, e - b, c,
                   sp_opt_decimal(c->beta1), sp_opt_decimal(c->beta2), sp_opt_decimal(c->eps), s->wd, s->wd_d, lr_d,
                   o->steps + 1);
  }
}

int sp_optimizer_step(sp_optimizer *o, float lr) {
  if (check_lr(o, lr)) return -1;
  for (int i = 0; i < o->n; i++) update_slot(o, i, 0, o->slots[i].numel, lr);
  o->steps++;
  return 0;
}

int sp_optimizer_step_part(sp_optimizer *o, float lr, int slot, int64_t begin, int64_t end) {
  if (check_lr(o, lr)) return -1;
  if (slot < 0 || slot >= o->n || begin < 0 || end > o->slots[slot].numel || begin > end)
    return sp_error_set("optimizer: slot %d elements [%lld, %lld) out of range", slot, (long long)begin,
                        (long long)end);
  update_slot(o, slot, begin, end, lr);
  return 0;
}

void sp_optimizer_step_done(sp_optimizer *o) { o->steps++; }

void sp_optimizer_set_grad_scale(sp_optimizer *o, float scale) { o->grad_scale = scale; }

int64_t sp_optimizer_steps(const sp_optimizer *o) { return o->steps; }

void sp_optimizer_set_steps(sp_optimizer *o, int64_t steps) { o->steps = steps < 0 ? 0 : steps; }

const sp_opt_config *sp_optimizer_config(const sp_optimizer *o) { return &o->cfg; }

void sp_optimizer_zero_grad(sp_optimizer *o) {
  for (int i = 0; i < o->n; i++)
    if (o->slots[i].numel > 0) memset(o->slots[i].grad, 0, (size_t)o->slots[i].numel * sizeof(float));
}

int sp_optimizer_state_count(const sp_optimizer *o) { return o->n_state; }

const char *sp_optimizer_state_name(const sp_optimizer *o, int i) {
  return i >= 0 && i < o->n_state ? o->state_names[i] : NULL;
}

sp_tensor sp_optimizer_state_tensor(const sp_optimizer *o, int i) {
  if (i < 0 || i >= o->n_state) {
    sp_tensor none;
    memset(&none, 0, sizeof none);
    return none;
  }
  return sp_tensor_view(SP_F32, sp_shape1(o->state_numel[i]), o->state_data[i]);
}

int sp_optimizer_state_find(const sp_optimizer *o, const char *name) {
  for (int i = 0; name && i < o->n_state; i++)
    if (strcmp(o->state_names[i], name) == 0) return i;
  return -1;
}
