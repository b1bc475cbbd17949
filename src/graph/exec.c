/* Plan execution: forward in node order, backward in reverse, no allocation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan_internal.h"
#include "spry/rng.h"

void sp_plan_set_step(sp_plan *p, uint64_t step) { p->step = step; }
void sp_plan_enable_profile(sp_plan *p, int on) { p->profile = on; }

int sp_plan_profile(const sp_plan *p, int node, double *fwd_s, double *bwd_s, const char **op_name) {
  if (node < 0 || node >= p->g->n_nodes) return -1;
  *fwd_s = p->nodes[node].t_fwd;
  *bwd_s = p->nodes[node].t_bwd;
  *op_name = p->g->nodes[node].op ? p->g->nodes[node].op->name : "input";
  return 0;
}

/* Test aid: fills every buffer whose life ends at `step` with NaN, so a later
 * read of dead memory shows up in the results. */
static void poison_dead(sp_plan *p, int step) {
  for (int r = 0; r < p->n_reqs; r++) {
    const sp_buffer_req *b = &p->reqs[r];
    if (b->end != step) continue;
    float *x = (float *)((char *)p->arena + b->offset);
    for (size_t k = 0; k < b->bytes / sizeof(float); k++) x[k] = NAN;
  }
}

int sp_plan_forward(sp_plan *p) {
  const sp_graph *g = p->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    if (!nd->op || pn->absorbed_by >= 0) continue;
    pn->args.seed = sp_rng_key(g->seed, p->step, (uint64_t)i);
    double t0 = p->profile ? sp_now() : 0;
    pn->args.scratch = pn->fwd_scratch;
    pn->args.params_stale = p->params_stale;
    p->impl[i]->forward(&pn->args);
    if (p->profile) pn->t_fwd += sp_now() - t0;
    if (p->flags & SP_PLAN_POISON) poison_dead(p, i);
  }
  if (p->flags & SP_PLAN_FROZEN) p->params_stale = 0;
  return 0;
}

void sp_plan_params_changed(sp_plan *p) { p->params_stale = 1; }

static void grad_ready(sp_plan *p, int node) {
  const int *first = p->grad_ready, *ids = p->grad_ready + p->g->n_nodes + 1;
  if (first[node + 1] > first[node]) p->grad_hook(p->grad_hook_user, ids + first[node], first[node + 1] - first[node]);
}

/* Zeroes the gradients of node i's inputs that i writes first (the grads of
 * i's inputs whose latest consumer is i), just before `runner`'s backward:
 * i itself, or the node that adopted it. */
static void zero_first_writes(sp_plan *p, int i, int runner) {
  const sp_node *nd = &p->g->nodes[i];
  if (!nd->op) return;
  for (int k = 0; k < nd->n_in; k++) {
    plan_node *src = &p->nodes[nd->in[k]];
    if (src->grad_buf >= 0 && src->first_writer == i) {
      int seen = 0; /* the same input twice (x + x): zero once */
      for (int j = 0; j < k; j++) seen |= nd->in[j] == nd->in[k];
      /* An implementation that overwrites a fresh gradient needs no zeros,
       * unless this node's backward does not run at all. */
      int overwrites = (p->impl[runner]->flags & SP_OP_GRAD_OVERWRITES_FRESH) && p->nodes[runner].run_backward;
      if (!seen && !overwrites) memset(src->grad.data, 0, p->reqs[src->grad_buf].bytes);
    }
  }
}

int sp_plan_backward(sp_plan *p) {
  const sp_graph *g = p->g;
  if (!p->training) return sp_error_set("backward on a plan made for inference (training = 0)");
  int n = g->n_nodes;
  /* Zeroing happens just before a gradient buffer's first writer runs; index
   * the buffers by that writer once per call (cheap: one pass over nodes). */
  for (int i = n - 1; i >= 0; i--) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    /* A node absorbed by its producer (fusion) shares its gradient buffer:
     * nothing to zero, nothing to run. An adopted one's backward ran in its
     * adopter's: its parameters' gradients are complete from here on. */
    if (pn->absorbed_by >= 0) continue;
    if (pn->adopted_by >= 0) {
      if (pn->run_backward && p->grad_hook) grad_ready(p, i);
      continue;
    }
    zero_first_writes(p, i, i);
    if (pn->adopts >= 0) zero_first_writes(p, pn->adopts, i);
    if (!pn->run_backward) continue;
    if (nd->is_loss) {
      float *d = pn->grad.data;
      d[0] = (pn->first_writer == i ? 0.0f : d[0]) + nd->loss_weight;
    }
    double t0 = p->profile ? sp_now() : 0;
    pn->args.scratch = pn->bwd_scratch;
    p->impl[i]->backward(&pn->args);
    if (p->profile) pn->t_bwd += sp_now() - t0;
    if (p->flags & SP_PLAN_POISON) poison_dead(p, BSTEP(p, i));
    if (p->grad_hook) grad_ready(p, i);
  }
  for (int i = 0; i < n; i++) p->nodes[i].args.d_param_fresh = 0; /* sp_plan_zero_grad's marks are spent */
  return 0;
}

/* A parameter's first writer in backward is the latest node in forward
 * order whose backward runs and uses it. Where that node's implementation
 * overwrites the gradient when told (param_overwrites), it is told
 * (d_param_fresh) and the gradient keeps its old values until then; a
 * parameter it uses twice, or one an absorbed node uses, is zeroed. */
void sp_plan_zero_grad(sp_plan *p) {
  sp_graph *g = p->g;
  if (p->n_grad_marked < g->n_params) { /* the first call (parameters are fixed by then) */
    free(p->grad_marked);
    p->grad_marked = sp_xmalloc((size_t)g->n_params * 2 + 1);
    p->n_grad_marked = g->n_params;
  }
  unsigned char *marked = p->grad_marked, *decided = marked + g->n_params;
  memset(marked, 0, (size_t)g->n_params * 2);
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    pn->args.d_param_fresh = 0;
    if (!nd->op || !p->training) continue;
    const int absorbed = pn->absorbed_by >= 0 || pn->adopted_by >= 0; /* its backward runs in another node's */
    if (!absorbed && !pn->run_backward) continue;
    for (int k = 0; k < nd->n_param; k++) {
      const int q = nd->param[k];
      if (decided[q]) continue;
      decided[q] = 1;
      int twice = 0;
      for (int j = 0; j < nd->n_param; j++) twice |= j != k && nd->param[j] == q;
      if (!absorbed && !twice && ((pn->param_overwrites >> k) & 1u) && pn->args.d_param[k]) {
        pn->args.d_param_fresh |= 1u << k;
        marked[q] = 1;
      }
    }
  }
  sp_graph_zero_grads_except(g, marked);
}

double sp_plan_loss(const sp_plan *p) {
  double total = 0;
  for (int i = 0; i < p->g->n_nodes; i++)
    if (p->g->nodes[i].is_loss) total += (double)p->g->nodes[i].loss_weight * ((const float *)p->nodes[i].act.data)[0];
  return total;
}

int sp_plan_grad_ready_node(const sp_plan *p, int param) {
  const sp_graph *g = p->g;
  if (!p->training || param < 0 || param >= g->n_params || !g->params[param].grad.data) return -1;
  /* Backward runs in reverse node order, so the last backward to add into a
   * gradient is that of the earliest running node that uses the parameter
   * (a fused node's backward runs in the node that absorbed it). */
  int best = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const sp_node *nd = &g->nodes[i];
    int runs_in = p->nodes[i].absorbed_by >= 0 ? p->nodes[i].absorbed_by : i;
    if (!nd->op || !p->nodes[runs_in].run_backward) continue;
    for (int k = 0; k < nd->n_param; k++)
      if (nd->param[k] == param && (best < 0 || runs_in < best)) best = runs_in;
  }
  return best;
}

void sp_plan_set_grad_hook(sp_plan *p, sp_grad_ready_fn fn, void *user) {
  const int n = p->g->n_nodes, np = p->g->n_params;
  free(p->grad_ready);
  p->grad_ready = NULL;
  p->grad_hook = NULL;
  if (!fn) return;
  /* Counting sort of the parameters by the node that finalises them. */
  int *node_of = sp_xmalloc(sizeof(int) * (size_t)(np ? np : 1));
  int *r = sp_xcalloc((size_t)(n + 1 + np), sizeof(int));
  for (int q = 0; q < np; q++) {
    node_of[q] = sp_plan_grad_ready_node(p, q);
    if (node_of[q] >= 0) r[node_of[q] + 1]++;
  }
  for (int i = 0; i < n; i++) r[i + 1] += r[i];
  int *fill = sp_xmalloc(sizeof(int) * (size_t)(n + 1));
  memcpy(fill, r, sizeof(int) * (size_t)(n + 1));
  for (int q = 0; q < np; q++)
    if (node_of[q] >= 0) r[n + 1 + fill[node_of[q]]++] = q;
  free(fill);
  free(node_of);
  p->grad_ready = r;
  p->grad_hook = fn;
  p->grad_hook_user = user;
}
