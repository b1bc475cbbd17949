/* Graph construction: nodes, named parameters, scopes, build errors. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "graph/graph_internal.h"
#include "spry/rng.h"

const char *sp_backend_name(sp_backend b) { return b == SP_BACKEND_CPU ? "cpu" : "ref"; }

int sp_backend_parse(const char *name, sp_backend *out) {
  if (!strcmp(name, "ref"))
    *out = SP_BACKEND_REF;
  else if (!strcmp(name, "cpu"))
    *out = SP_BACKEND_CPU;
  else
    return sp_error_set("unknown backend '%s' (expected ref or cpu)", name);
  return 0;
}

void sp_backend_time_reorders(int on) { sp_backend_cpu_time_reorders(on); }
double sp_backend_reorder_seconds(void) { return sp_backend_cpu_reorder_seconds(); }

const char *sp_backend_default_name(void) {
#ifdef SPRY_HAVE_DNNL
  return "cpu";
#else
  return "ref";
#endif
}

sp_graph *sp_graph_new(uint64_t seed) {
  sp_graph *g = sp_xcalloc(1, sizeof *g);
  g->seed = seed;
  return g;
}

void sp_graph_free(sp_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++) {
    free(g->nodes[i].name);
    free(g->nodes[i].attr);
  }
  for (int i = 0; i < g->n_params; i++) {
    free(g->params[i].name);
    sp_tensor_free(&g->params[i].value);
    if (g->params[i].grad.data) sp_tensor_free(&g->params[i].grad);
  }
  free(g->nodes);
  free(g->params);
  free(g->error);
  free(g);
}

int sp_graph_fail(sp_graph *g, const char *fmt, ...) {
  if (!g->error) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->error = sp_xstrdup(msg);
  }
  return -1;
}

const char *sp_graph_error(const sp_graph *g) { return g->error; }
int sp_graph_node_count(const sp_graph *g) { return g->n_nodes; }
const char *sp_graph_node_name(const sp_graph *g, int i) { return i >= 0 && i < g->n_nodes ? g->nodes[i].name : NULL; }

int sp_graph_value_param(const sp_graph *g, sp_value v, int i) {
  if (v < 0 || v >= g->n_nodes || i < 0 || i >= g->nodes[v].n_param) return -1;
  return g->nodes[v].param[i];
}

void sp_graph_push_scope(sp_graph *g, const char *fmt, ...) {
  SP_ASSERT(g->scope_depth < 32);
  size_t len = strlen(g->scope);
  g->scope_len[g->scope_depth++] = (int)len;
  char part[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(part, sizeof part, fmt, ap);
  va_end(ap);
  snprintf(g->scope + len, sizeof g->scope - len, "%s%s", len ? "." : "", part);
}

void sp_graph_pop_scope(sp_graph *g) {
  SP_ASSERT(g->scope_depth > 0);
  g->scope[g->scope_len[--g->scope_depth]] = 0;
}

const char *sp_graph_scoped(const sp_graph *g, const char *name, char *buf, size_t n) {
  if (g->scope[0] && name && name[0])
    snprintf(buf, n, "%s.%s", g->scope, name);
  else
    snprintf(buf, n, "%s", g->scope[0] ? g->scope : (name ? name : ""));
  return buf;
}

static sp_node *push_node(sp_graph *g) {
  if (g->n_nodes == g->cap_nodes) {
    g->cap_nodes = g->cap_nodes ? 2 * g->cap_nodes : 64;
    g->nodes = sp_xrealloc(g->nodes, sizeof(sp_node) * (size_t)g->cap_nodes);
  }
  sp_node *n = &g->nodes[g->n_nodes++];
  memset(n, 0, sizeof *n);
  return n;
}

sp_value sp_graph_input(sp_graph *g, const char *name, sp_dtype dtype, int channels) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].op && !strcmp(g->nodes[i].name, name))
      return sp_graph_fail(g, "graph input '%s' declared twice", name);
  sp_node *n = push_node(g);
  n->name = sp_xstrdup(name);
  n->input_dtype = dtype;
  n->channels = channels;
  return g->n_nodes - 1;
}

void sp_graph_output(sp_graph *g, sp_value v, const char *name) {
  if (v < 0 || v >= g->n_nodes) return;
  g->nodes[v].is_output = 1;
  if (name) {
    free(g->nodes[v].name);
    g->nodes[v].name = sp_xstrdup(name);
  }
}

void sp_graph_output_aux(sp_graph *g, sp_value v, const char *name) {
  sp_graph_output(g, v, name);
  if (v >= 0 && v < g->n_nodes) g->nodes[v].is_aux = 1;
}

void sp_graph_loss(sp_graph *g, sp_value v, float weight) {
  if (v < 0 || v >= g->n_nodes) return;
  if (!g->nodes[v].op || !(g->nodes[v].op->flags & SP_OP_IS_LOSS)) {
    sp_graph_fail(g, "node '%s' is not a loss", g->nodes[v].name);
    return;
  }
  g->nodes[v].is_loss = 1;
  g->nodes[v].loss_weight = weight;
}

int sp_graph_channels(const sp_graph *g, sp_value v) { return v >= 0 && v < g->n_nodes ? g->nodes[v].channels : -1; }

/* Per-parameter seed from its name, so initial values do not depend on the
 * order models register parameters in. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void init_param(sp_tensor *t, sp_init init, int64_t fan, uint64_t key) {
  float *x = t->data;
  int64_t n = sp_tensor_numel(t);
  sp_rng r = sp_rng_make(key);
  switch (init) {
    case SP_INIT_ZERO: memset(x, 0, sizeof(float) * (size_t)n); break;
    case SP_INIT_ONE:
      for (int64_t i = 0; i < n; i++) x[i] = 1.0f;
      break;
    case SP_INIT_UNIFORM_FAN_IN: {
      float bound = fan > 0 ? 1.0f / sqrtf((float)fan) : 0.0f;
      for (int64_t i = 0; i < n; i++) x[i] = sp_rng_range(&r, -bound, bound);
      break;
    }
    case SP_INIT_KAIMING_NORMAL: {
      float sd = fan > 0 ? sqrtf(2.0f / (float)fan) : 0.0f;
      for (int64_t i = 0; i < n; i++) x[i] = sd * sp_rng_normal(&r);
      break;
    }
  }
}

int sp_graph_param(sp_graph *g, const char *name, sp_shape shape, sp_init init, int64_t fan, unsigned flags) {
  char full[512];
  sp_graph_scoped(g, name, full, sizeof full);
  if (sp_graph_param_find(g, full) >= 0) return sp_graph_fail(g, "parameter '%s' registered twice", full);
  /* Model sizes come from a config, or a checkpoint's stored one: parameters
   * that would not fit are a build error naming the one that tipped it,
   * never an abort in the allocator (sp_mem_check). */
  double have = 0, need = 4.0 * (double)sp_shape_numel(&shape) * ((flags & SP_PARAM_BUFFER) ? 1 : 2);
  for (int i = 0; i < g->n_params; i++)
    have += (double)sp_tensor_bytes(&g->params[i].value) + (double)sp_tensor_bytes(&g->params[i].grad);
  char what[700];
  snprintf(what, sizeof what, "the model's parameters up to '%s' (%.0f values)", full, (double)sp_shape_numel(&shape));
  if (!(need >= 0) || sp_mem_check(have + need, what) != 0) return sp_graph_fail(g, "%s", sp_last_error());
  if (g->n_params == g->cap_params) {
    g->cap_params = g->cap_params ? 2 * g->cap_params : 64;
    g->params = sp_xrealloc(g->params, sizeof(sp_param) * (size_t)g->cap_params);
  }
  sp_param *p = &g->params[g->n_params];
  memset(p, 0, sizeof *p);
  p->name = sp_xstrdup(full);
  p->flags = flags;
  p->value = sp_tensor_alloc(SP_F32, shape);
  init_param(&p->value, init, fan, sp_rng_key(g->seed, name_hash(full), 0));
  if (!(flags & SP_PARAM_BUFFER)) p->grad = sp_tensor_alloc(SP_F32, shape);
  return g->n_params++;
}

int sp_graph_param_count(const sp_graph *g) { return g->n_params; }
const char *sp_graph_param_name(const sp_graph *g, int id) { return g->params[id].name; }
unsigned sp_graph_param_flags(const sp_graph *g, int id) { return g->params[id].flags; }
sp_tensor *sp_graph_param_value(sp_graph *g, int id) { return &g->params[id].value; }
sp_tensor *sp_graph_param_grad(sp_graph *g, int id) { return g->params[id].grad.data ? &g->params[id].grad : NULL; }

int sp_graph_param_find(const sp_graph *g, const char *name) {
  for (int i = 0; i < g->n_params; i++)
    if (!strcmp(g->params[i].name, name)) return i;
  return -1;
}

/* Gradients come to tens or hundreds of MB (ResUNet-50: 120) and one
 * thread's memset runs well below the memory bandwidth (vgg-face: 3.7 ms of a
 * 70 ms bf16 step), so every thread clears its share of each large one. */
void sp_graph_zero_grad(sp_graph *g) { sp_graph_zero_grads_except(g, NULL); }

void sp_graph_zero_grads_except(sp_graph *g, const unsigned char *skip) {
#pragma omp parallel
  {
    const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    for (int i = 0; i < g->n_params; i++) {
      char *d = g->params[i].grad.data;
      if (!d || (skip && skip[i])) continue;
      const size_t bytes = sp_tensor_bytes(&g->params[i].grad);
      if (bytes < ((size_t)1 << 16)) {
        if (t == 0) memset(d, 0, bytes);
        continue;
      }
      const size_t a = (bytes * t / nt) & ~(size_t)63, b = t + 1 == nt ? bytes : (bytes * (t + 1) / nt) & ~(size_t)63;
      memset(d + a, 0, b - a);
    }
  }
}

int64_t sp_graph_param_numel(const sp_graph *g, int trainable_only) {
  int64_t n = 0;
  for (int i = 0; i < g->n_params; i++)
    if (!trainable_only || !(g->params[i].flags & SP_PARAM_BUFFER)) n += sp_tensor_numel(&g->params[i].value);
  return n;
}

sp_value sp_graph_node(sp_graph *g, const sp_op_def *op, const void *attr, size_t attr_size, const char *name, int n_in,
                       const sp_value *in, int n_param, const int *params, int n_state, const int *states,
                       int channels) {
  char full[512];
  sp_graph_scoped(g, name && name[0] ? name : op->name, full, sizeof full);
  if (n_in > SP_OP_MAX_IN || n_param > SP_OP_MAX_PARAM || n_state > SP_OP_MAX_PARAM)
    return sp_graph_fail(g, "%s '%s': too many inputs or parameters", op->name, full);
  for (int i = 0; i < n_in; i++)
    if (in[i] < 0 || in[i] >= g->n_nodes) return -1; /* an earlier builder failed: its error is kept */
  for (int i = 0; i < n_param; i++)
    if (params[i] < 0) return -1;
  for (int i = 0; i < n_state; i++)
    if (states[i] < 0) return -1;
  sp_node *n = push_node(g);
  n->op = op;
  n->name = sp_xstrdup(full);
  if (attr_size) {
    n->attr = sp_xmalloc(attr_size);
    memcpy(n->attr, attr, attr_size);
  }
  n->n_in = n_in;
  n->n_param = n_param;
  n->n_state = n_state;
  for (int i = 0; i < n_in; i++) n->in[i] = in[i];
  for (int i = 0; i < n_param; i++) n->param[i] = params[i];
  for (int i = 0; i < n_state; i++) n->state[i] = states[i];
  n->channels = channels;
  return g->n_nodes - 1;
}
