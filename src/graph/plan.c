/* Plans: shape inference, liveness, arena placement and tensor wiring for one
 * set of input shapes. Execution is in exec.c.
 *
 * Timeline: forward of node i is step i; backward of node i is step 2N-1-i.
 * A buffer is live over [first step that writes it, last step that reads it]:
 *  - activation of i: from i to its last forward consumer, extended to the
 *    backward of any consumer whose backward reads its inputs, to the
 *    forward and backward of the node that adopted a consumer, and to i's
 *    own backward when that reads the output; inputs, outputs and losses
 *    live forever;
 *  - gradient of i: from the backward of its last consumer (the first to
 *    accumulate into it; it is zeroed just before; where that consumer was
 *    adopted, its adopter's backward) to i's own backward;
 *  - saved scratch of i: from i's forward to i's backward;
 *  - a fast backend's per-step scratch of i: step i, and step 2N-1-i.
 *
 * Fast backends (cpu) take part through their ops' prepare/bind/release hooks
 * (ops/op.h): prepare runs in node order before memory planning and reports
 * each output's layout and byte size (blocked layouts pad channels; bf16
 * halves them), the saved and scratch bytes; bind runs once the buffers have
 * addresses. Graph outputs the plan keeps and losses are always plain, so sp_plan_output and
 * sp_plan_loss read them as row-major f32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "graph/plan_internal.h"

static int fail_node(const sp_graph *g, int i, const char *why) {
  const sp_node *n = &g->nodes[i];
  return sp_error_set("node %d '%s' (%s): %s", i, n->name, n->op ? n->op->name : "input", why);
}

static int infer_shapes(sp_plan *p, int n_inputs, const sp_input_shape *inputs) {
  const sp_graph *g = p->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const sp_node *n = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    char err[512] = "", a[64];
    if (!n->op) {
      int found = 0;
      for (int k = 0; k < n_inputs; k++)
        if (!strcmp(inputs[k].name, n->name)) {
          pn->shape = inputs[k].shape;
          found = 1;
        }
      if (!found) return fail_node(g, i, "no shape given for this graph input");
      if (n->channels > 0 && (pn->shape.ndim < 2 || pn->shape.d[1] != n->channels)) {
        snprintf(err, sizeof err, "the graph expects %d channels in dim 1 but the shape is %s", n->channels,
                 sp_shape_str(&pn->shape, a, sizeof a));
        return fail_node(g, i, err);
      }
      pn->dtype = n->input_dtype;
      continue;
    }
    sp_shape in[SP_OP_MAX_IN], ps[SP_OP_MAX_PARAM];
    for (int k = 0; k < n->n_in; k++) in[k] = p->nodes[n->in[k]].shape;
    for (int k = 0; k < n->n_param; k++) ps[k] = g->params[n->param[k]].value.shape;
    if (n->op->infer(n->attr, n->n_in, in, n->n_param, ps, &pn->shape, err, sizeof err) != 0) {
      char shapes[512] = "";
      size_t used = 0;
      for (int k = 0; k < n->n_in; k++)
        used += (size_t)snprintf(shapes + used, sizeof shapes - used, "%s%s", k ? ", " : "",
                                 sp_shape_str(&in[k], a, sizeof a));
      char msg[1100];
      snprintf(msg, sizeof msg, "%s (input shapes %s)", err, shapes);
      return fail_node(g, i, msg);
    }
    pn->dtype = SP_F32;
  }
  return 0;
}

/* needs_grad: a trainable parameter is upstream. reaches_loss: a loss is
 * downstream. Backward runs only where both hold. */
static void mark_gradients(sp_plan *p) {
  const sp_graph *g = p->g;
  int n = g->n_nodes;
  for (int i = 0; i < n; i++) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    if (!nd->op || (nd->op->flags & SP_OP_NO_GRAD)) continue;
    for (int k = 0; k < nd->n_param; k++)
      if (!(g->params[nd->param[k]].flags & SP_PARAM_BUFFER)) pn->needs_grad = 1;
    for (int k = 0; k < nd->n_in; k++)
      if (p->nodes[nd->in[k]].needs_grad) pn->needs_grad = 1;
  }
  for (int i = n - 1; i >= 0; i--) {
    const sp_node *nd = &g->nodes[i];
    if (nd->is_loss) p->nodes[i].reaches_loss = 1;
    if (!p->nodes[i].reaches_loss || !nd->op) continue;
    for (int k = 0; k < nd->n_in; k++) p->nodes[nd->in[k]].reaches_loss = 1;
  }
  for (int i = 0; i < n; i++)
    p->nodes[i].run_backward = p->training && p->nodes[i].needs_grad && p->nodes[i].reaches_loss;
}

/* An output this plan keeps readable (plain layout, alive to the end): every
 * graph output, unless the caller said it reads only the losses
 * (SP_PLAN_LOSS_ONLY); auxiliary ones not in frozen plans. */
static int kept_output(const sp_plan *p, const sp_node *nd) {
  return nd->is_output && !(p->flags & SP_PLAN_LOSS_ONLY) && !(nd->is_aux && (p->flags & SP_PLAN_FROZEN));
}

/* Lets the backend choose each node's implementation state, output layout
 * and buffer sizes; nodes without a prepare hook get plain sizes. */
/* Each node's sole consumer: -1 none, -2 many (a node may absorb only a sole
 * consumer). The caller frees the array. */
static int *sole_consumers(const sp_graph *g) {
  int *consumer = sp_xmalloc(sizeof(int) * (size_t)(g->n_nodes ? g->n_nodes : 1));
  for (int i = 0; i < g->n_nodes; i++) consumer[i] = -1;
  for (int c = 0; c < g->n_nodes; c++)
    for (int k = 0; k < g->nodes[c].n_in; k++) {
      int v = g->nodes[c].in[k];
      consumer[v] = consumer[v] == -1 ? c : -2;
    }
  return consumer;
}

/* Which input of consumer c (two inputs) is not i, when c comes right after
 * i: that other input is then computed before i (a node reads only earlier
 * ones), so i may absorb c and read it itself. -1 otherwise. */
static int other_input_ready(const sp_graph *g, int i, int c) {
  const sp_node *cn = &g->nodes[c];
  if (cn->n_in != 2 || c != i + 1) return -1;
  const int k = cn->in[0] == i ? 1 : 0;
  return cn->in[1 - k] == i && cn->in[k] != i ? k : -1;
}

/* Whether node j, which computes the other input of i's consumer c, may be
 * adopted by i (sp_op_prep.adopt_other): c is its only consumer, it
 * absorbed nothing and nothing adopted it, its output is not kept, its
 * backward runs as i's does (so what i writes for it is wanted, and its
 * gradients live while i's backward runs), and it is the only consumer of
 * each of its inputs (so i, running j's backward early, is still the first
 * and only writer of their gradients). */
static int adoptable(const sp_plan *p, const int *consumer, int i, int c, int j) {
  const sp_node *jn = &p->g->nodes[j];
  const plan_node *pj = &p->nodes[j];
  if (!jn->op || consumer[j] != c || kept_output(p, jn) || jn->is_loss || !pj->impl_state || pj->absorbed_by >= 0 ||
      pj->adopted_by >= 0 || pj->run_backward != p->nodes[i].run_backward)
    return 0;
  for (int k = 0; k < jn->n_in; k++)
    if (consumer[jn->in[k]] != j) return 0;
  for (int m = j + 1; m < i; m++)
    if (p->nodes[m].absorbed_by == j) return 0;
  return 1;
}

/* Whether value o, the other input of node i's chain link c, may be
 * overwritten by i's output (sp_op_consumer.other_overwritable): no
 * backward reads it or runs at i, an op computes it (graph inputs are the
 * caller's), it is not kept, nothing adopted it, and c (which runs inside i)
 * is its only reader from i on: not i itself (a conv reading the shortcut
 * it adds), no node between them, none after. */
static int overwritable(const sp_plan *p, int i, int c, int o) {
  const sp_graph *g = p->g;
  const sp_node *on = &g->nodes[o];
  if (!on->op || kept_output(p, on) || on->is_loss || p->nodes[o].run_backward || p->nodes[i].run_backward ||
      p->nodes[c].run_backward || p->nodes[o].adopted_by >= 0)
    return 0;
  for (int r = o + 1; r < g->n_nodes; r++)
    for (int k = 0; k < g->nodes[r].n_in; k++)
      if (g->nodes[r].in[k] == o && ((r >= i && r != c) || p->nodes[r].run_backward)) return 0;
  return 1;
}

/* What node i's backend is told in prepare: shapes, layouts and dtypes of its
 * inputs, which gradients are wanted, and the up to SP_OP_CHAIN ops after it
 * that it may absorb. */
static void fill_prep(const sp_plan *p, int i, const int *consumer, sp_op_prep *pr) {
  const sp_graph *g = p->g;
  const sp_node *nd = &g->nodes[i];
  const plan_node *pn = &p->nodes[i];
  memset(pr, 0, sizeof *pr);
  pr->op = nd->op;
  pr->attr = nd->attr;
  pr->n_in = nd->n_in;
  for (int k = 0; k < nd->n_in; k++) {
    const plan_node *src = &p->nodes[nd->in[k]];
    pr->in_shape[k] = src->shape;
    pr->in_dtype[k] = src->dtype;
    pr->in_layout[k] = src->layout;
    pr->need_d_in[k] = pn->run_backward && src->run_backward;
  }
  pr->n_param = nd->n_param;
  for (int k = 0; k < nd->n_param; k++) {
    pr->param_shape[k] = g->params[nd->param[k]].value.shape;
    pr->param_grad[k] = g->params[nd->param[k]].grad.data != NULL;
  }
  pr->n_state = nd->n_state;
  pr->out_shape = pn->shape;
  pr->training = p->training;
  pr->run_backward = pn->run_backward;
  pr->out_plain = kept_output(p, nd) || nd->is_loss;
  pr->bf16 = (p->flags & SP_PLAN_BF16) != 0;
  pr->frozen = (p->flags & SP_PLAN_FROZEN) != 0;
  pr->out_bytes = pn->act_bytes;
  pr->saved_bytes = pn->saved_bytes;
  if (nd->n_in >= 1) {
    const int j = nd->in[0];
    const plan_node *pj = &p->nodes[j];
    if (g->nodes[j].op && consumer[j] == i && pj->impl_state && pj->absorbed_by < 0 && pj->adopted_by < 0)
      pr->in0_op = g->nodes[j].op, pr->in0_state = pj->impl_state;
  }
  /* The chain of sole consumers (sp_op_prep.consumer): each link offered
   * while the one before it need not write its own output. A two-input
   * link qualifies when it comes right after the node before it and its
   * other input comes before i (so i reads it ready, and it is not i's own
   * output, which i's buffer would then hold). */
  int out_plain = pr->out_plain;
  for (int k = 0, prev = i, c = consumer[i]; k < SP_OP_CHAIN && c >= 0 && !out_plain; k++, prev = c, c = consumer[c]) {
    const sp_node *cn = &g->nodes[c];
    const int other = other_input_ready(g, prev, c);
    if (cn->n_in != 1 && !(other >= 0 && cn->in[other] < i)) break;
    sp_op_consumer *oc = &pr->consumer[k];
    oc->op = cn->op;
    oc->attr = cn->attr;
    oc->out_plain = out_plain = kept_output(p, cn) || cn->is_loss;
    oc->n_param = cn->n_param;
    oc->n_state = cn->n_state;
    for (int j = 0; j < cn->n_param; j++) oc->param_shape[j] = g->params[cn->param[j]].value.shape;
    oc->out_shape = p->nodes[c].shape;
    oc->n_in = cn->n_in;
    if (cn->n_in > 1) {
      const plan_node *o = &p->nodes[cn->in[other]];
      oc->other = other;
      oc->other_is_in0 = cn->in[other] == nd->in[0];
      oc->other_shape = o->shape;
      oc->other_dtype = o->dtype;
      oc->other_layout = o->layout;
      oc->other_overwritable = overwritable(p, i, c, cn->in[other]);
      if (k == 0 && adoptable(p, consumer, i, c, cn->in[other])) {
        oc->other_op = g->nodes[cn->in[other]].op;
        oc->other_state = p->nodes[cn->in[other]].impl_state;
      }
    }
  }
}

static int prepare_nodes(sp_plan *p) {
  sp_graph *g = p->g;
  int *consumer = sole_consumers(g);
  for (int i = 0; i < g->n_nodes; i++)
    p->nodes[i].absorbed_by = p->nodes[i].adopted_by = p->nodes[i].adopts = p->nodes[i].over = -1;
  int rc = 0;
  for (int i = 0; i < g->n_nodes && rc == 0; i++) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    pn->act_bytes = (size_t)sp_shape_numel(&pn->shape) * sp_dtype_size(pn->dtype);
    pn->saved_bytes = 0;
    if (pn->absorbed_by >= 0) {
      const plan_node *host = &p->nodes[pn->absorbed_by];
      pn->layout = host->layout;
      pn->act_bytes = host->act_bytes;
      continue;
    }
    if (!nd->op) continue;
    if (nd->op->saved_bytes) {
      sp_shape in[SP_OP_MAX_IN];
      for (int k = 0; k < nd->n_in; k++) in[k] = p->nodes[nd->in[k]].shape;
      pn->saved_bytes = nd->op->saved_bytes(nd->attr, nd->n_in, in, &pn->shape);
    }
    const sp_op_def *impl = p->impl[i];
    if (!impl->prepare) continue;
    sp_op_prep pr;
    fill_prep(p, i, consumer, &pr);
    if (impl->prepare(&pr) != 0) {
      char why[600];
      snprintf(why, sizeof why, "%s backend: %s", sp_backend_name(p->backend), sp_last_error());
      rc = fail_node(g, i, why);
      break;
    }
    for (int k = 0, c = consumer[i]; k < pr.absorb_consumer && k < SP_OP_CHAIN && pr.consumer[k].op;
         k++, c = consumer[c])
      p->nodes[c].absorbed_by = i;
    const int ov = pr.out_over_other - 1; /* the link whose other input the output overwrites */
    if (ov >= 0) {
      int c = consumer[i];
      for (int k = 0; k < ov && c >= 0; k++) c = consumer[c];
      if (ov >= pr.absorb_consumer || ov >= SP_OP_CHAIN || !pr.consumer[ov].other_overwritable || c < 0) {
        rc = fail_node(g, i, "backend wrote its output over an input the plan did not offer");
        break;
      }
      pn->over = g->nodes[c].in[pr.consumer[ov].other];
    }
    if (pr.adopt_other && pr.absorb_consumer >= 1 && pr.consumer[0].other_state) {
      const int j = g->nodes[consumer[i]].in[pr.consumer[0].other];
      p->nodes[j].adopted_by = i, pn->adopts = j;
    }
    pn->impl_state = pr.state;
    pn->param_overwrites = pr.param_grad_overwrites;
    pn->layout = pr.out_layout;
    pn->act_bytes = pr.out_bytes;
    pn->saved_bytes = pr.saved_bytes;
    pn->fwd_scratch_bytes = pr.fwd_scratch_bytes;
    pn->bwd_scratch_bytes = pr.bwd_scratch_bytes;
  }
  free(consumer);
  return rc;
}

static int add_req(sp_plan *p, size_t bytes, int start, int end) {
  sp_buffer_req *r = &p->reqs[p->n_reqs];
  r->bytes = bytes;
  r->start = start;
  r->end = end;
  p->naive_bytes += bytes;
  return p->n_reqs++;
}

static int plan_memory(sp_plan *p) {
  const sp_graph *g = p->g;
  int n = g->n_nodes, forever = 2 * n;
  p->reqs = sp_xcalloc((size_t)(5 * n + 1), sizeof(sp_buffer_req));
  for (int i = 0; i < n; i++) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    int end = i;
    for (int c = i + 1; c < n; c++) {
      const sp_node *cn = &g->nodes[c];
      for (int k = 0; k < cn->n_in; k++) {
        if (cn->in[k] != i) continue;
        if (c > end) end = c;
        if (p->nodes[c].run_backward && (cn->op->flags & SP_OP_BWD_NEEDS_INPUT) && BSTEP(p, c) > end) end = BSTEP(p, c);
        /* The adopter of c reads c's inputs in its own forward (and in its
         * backward, which comes before c's). */
        const int a = p->nodes[c].adopted_by;
        if (a > end) end = a;
        if (a >= 0 && p->nodes[a].run_backward && BSTEP(p, a) > end) end = BSTEP(p, a);
      }
    }
    if (pn->run_backward && nd->op && (nd->op->flags & SP_OP_BWD_NEEDS_OUTPUT) && BSTEP(p, i) > end) end = BSTEP(p, i);
    /* Inputs too: a caller fills them once and may run forward again (or
     * read them back); they are small next to the activations. */
    if (kept_output(p, nd) || nd->is_loss || !nd->op) end = forever;
    size_t bytes = pn->act_bytes;
    int host = pn->absorbed_by;
    if (host >= 0) { /* shares the host's buffer: extend its life instead */
      pn->act_buf = p->nodes[host].act_buf;
      if (p->reqs[pn->act_buf].end < end) p->reqs[pn->act_buf].end = end;
    } else if (pn->over >= 0) { /* written over an input it reads last: that buffer, living on */
      pn->act_buf = p->nodes[pn->over].act_buf;
      sp_buffer_req *r = &p->reqs[pn->act_buf];
      if (r->bytes < bytes) r->bytes = bytes;
      if (r->end < end) r->end = end;
    } else {
      pn->act_buf = add_req(p, bytes, nd->op ? i : 0, end);
    }

    pn->grad_buf = -1;
    if (pn->run_backward) {
      /* The latest consumer whose backward runs is the first to accumulate;
       * a loss with no such consumer is seeded with its weight instead. */
      int first = BSTEP(p, i);
      pn->first_writer = i;
      for (int c = n - 1; c > i; c--) {
        const sp_node *cn = &g->nodes[c];
        int uses = 0;
        for (int k = 0; k < cn->n_in; k++) uses |= cn->in[k] == i;
        if (uses && p->nodes[c].run_backward) {
          /* An adopted node's backward runs in its adopter's, earlier. */
          first = BSTEP(p, p->nodes[c].adopted_by >= 0 ? p->nodes[c].adopted_by : c);
          pn->first_writer = c;
          break;
        }
      }
      if (host >= 0 && p->nodes[host].grad_buf >= 0) {
        pn->grad_buf = p->nodes[host].grad_buf;
        if (p->reqs[pn->grad_buf].start > first) p->reqs[pn->grad_buf].start = first;
      } else {
        pn->grad_buf = add_req(p, bytes, first, BSTEP(p, i));
      }
    }

    pn->saved_buf = -1;
    if (pn->saved_bytes) pn->saved_buf = add_req(p, pn->saved_bytes, i, pn->run_backward ? BSTEP(p, i) : i);
    pn->fwd_scratch_buf = pn->fwd_scratch_bytes ? add_req(p, pn->fwd_scratch_bytes, i, i) : -1;
    pn->bwd_scratch_buf =
        pn->run_backward && pn->bwd_scratch_bytes ? add_req(p, pn->bwd_scratch_bytes, BSTEP(p, i), BSTEP(p, i)) : -1;
  }
  p->arena_bytes = sp_memplan_place(p->reqs, p->n_reqs, p->flags & SP_PLAN_NO_REUSE);
  /* Input shapes come from a config (data.size, batch), or a checkpoint's
   * stored one: an arena that would not fit is refused, naming them. */
  char what[600], shape[96];
  int at = snprintf(what, sizeof what, "a plan of");
  for (int i = 0; i < g->n_nodes && at < (int)sizeof what - 120; i++)
    if (!g->nodes[i].op)
      at += snprintf(what + at, sizeof what - (size_t)at, " %s %s", g->nodes[i].name,
                     sp_shape_str(&p->nodes[i].shape, shape, sizeof shape));
  if (sp_mem_check((double)p->arena_bytes, what) != 0) return -1;
  p->arena = sp_aligned_alloc(p->arena_bytes ? p->arena_bytes : 64);
  memset(p->arena, 0, p->arena_bytes);
  return 0;
}

static void wire(sp_plan *p) {
  sp_graph *g = p->g;
  char *base = p->arena;
  for (int i = 0; i < g->n_nodes; i++) {
    plan_node *pn = &p->nodes[i];
    pn->act = sp_tensor_view(pn->dtype, pn->shape, base + p->reqs[pn->act_buf].offset);
    if (pn->grad_buf >= 0) pn->grad = sp_tensor_view(SP_F32, pn->shape, base + p->reqs[pn->grad_buf].offset);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const sp_node *nd = &g->nodes[i];
    plan_node *pn = &p->nodes[i];
    if (!nd->op) continue;
    sp_op_args *a = &pn->args;
    memset(a, 0, sizeof *a);
    a->attr = nd->attr;
    a->n_in = nd->n_in;
    for (int k = 0; k < nd->n_in; k++) {
      plan_node *src = &p->nodes[nd->in[k]];
      a->in[k] = &src->act;
      a->d_in[k] = (pn->run_backward && src->grad_buf >= 0) ? &src->grad : NULL;
    }
    a->n_param = nd->n_param;
    for (int k = 0; k < nd->n_param; k++) {
      sp_param *prm = &g->params[nd->param[k]];
      a->param[k] = &prm->value;
      a->d_param[k] = prm->grad.data ? &prm->grad : NULL;
    }
    a->n_state = nd->n_state;
    for (int k = 0; k < nd->n_state; k++) a->state[k] = &g->params[nd->state[k]].value;
    a->out = &pn->act;
    a->d_out = pn->grad_buf >= 0 ? &pn->grad : NULL;
    a->saved = pn->saved_buf >= 0 ? base + p->reqs[pn->saved_buf].offset : NULL;
    a->training = p->training;
    a->impl = pn->impl_state;
    pn->fwd_scratch = pn->fwd_scratch_buf >= 0 ? base + p->reqs[pn->fwd_scratch_buf].offset : NULL;
    pn->bwd_scratch = pn->bwd_scratch_buf >= 0 ? base + p->reqs[pn->bwd_scratch_buf].offset : NULL;
    for (int k = 0; k < nd->n_in; k++) {
      int seen = 0; /* the same input twice (x + x): only the first use is fresh */
      for (int j = 0; j < k; j++) seen |= nd->in[j] == nd->in[k];
      if (a->d_in[k] && !seen && p->nodes[nd->in[k]].first_writer == i) a->d_in_fresh |= 1u << k;
    }
  }
  /* A host reads what it absorbed (a folded batch norm's statistics, a
   * residual add's other input, a fused conv's weights): the absorbed nodes
   * in order, its direct consumer first. */
  for (int i = 0; i < g->n_nodes; i++) {
    const int h = p->nodes[i].absorbed_by;
    if (h < 0) continue;
    sp_op_args *host = &p->nodes[h].args;
    int k = 0;
    while (k < SP_OP_CHAIN && host->chain[k]) k++;
    if (k < SP_OP_CHAIN) host->chain[k] = &p->nodes[i].args;
    host->consumer = host->chain[0], host->consumer2 = host->chain[1];
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (p->nodes[i].adopts >= 0) p->nodes[i].args.adopted = &p->nodes[p->nodes[i].adopts].args;
}

/* Backend state that needs buffer addresses (primitive arguments). */
static int bind_nodes(sp_plan *p) {
  for (int i = 0; i < p->g->n_nodes; i++) {
    const sp_op_def *impl = p->impl[i];
    plan_node *pn = &p->nodes[i];
    if (!impl || !impl->bind || !pn->impl_state) continue;
    if (impl->bind(pn->impl_state, &pn->args, pn->fwd_scratch, pn->bwd_scratch) != 0) {
      char why[600];
      snprintf(why, sizeof why, "%s backend: %s", sp_backend_name(p->backend), sp_last_error());
      return fail_node(p->g, i, why);
    }
  }
  return 0;
}

sp_plan *sp_plan_new(sp_graph *g, int n_inputs, const sp_input_shape *inputs, sp_backend backend, int training,
                     unsigned flags) {
  if (g->error) {
    sp_error_set("graph has a build error: %s", g->error);
    return NULL;
  }
  sp_plan *p = sp_xcalloc(1, sizeof *p);
  p->g = g;
  p->backend = backend;
  p->training = training;
  p->flags = flags;
  p->params_stale = 1;
  if ((flags & SP_PLAN_FROZEN) && training) {
    sp_error_set("a frozen-weights plan (SP_PLAN_FROZEN) cannot train: its weights change every step");
    free(p);
    return NULL;
  }
  p->nodes = sp_xcalloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(plan_node));
  p->impl = sp_xcalloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(const sp_op_def *));
  for (int i = 0; i < g->n_nodes; i++) {
    if (!g->nodes[i].op) continue;
    p->impl[i] = sp_backend_op(backend, g->nodes[i].op);
    if (!p->impl[i]) {
      sp_plan_free(p);
      return NULL;
    }
  }
  if (infer_shapes(p, n_inputs, inputs) != 0) {
    sp_plan_free(p);
    return NULL;
  }
  if ((flags & SP_PLAN_BF16) && !sp_backend_bf16(backend)) {
    sp_plan_free(p);
    return NULL;
  }
  mark_gradients(p);
  if (prepare_nodes(p) != 0) {
    sp_plan_free(p);
    return NULL;
  }
  if (plan_memory(p) != 0) {
    sp_plan_free(p);
    return NULL;
  }
  wire(p);
  if (bind_nodes(p) != 0) {
    sp_plan_free(p);
    return NULL;
  }
  return p;
}

void sp_plan_free(sp_plan *p) {
  if (!p) return;
  for (int i = 0; p->nodes && i < p->g->n_nodes; i++)
    if (p->impl[i] && p->impl[i]->release && p->nodes[i].impl_state) p->impl[i]->release(p->nodes[i].impl_state);
  sp_aligned_free(p->arena);
  free(p->reqs);
  free(p->nodes);
  free(p->impl);
  free(p->grad_ready);
  free(p->grad_marked);
  free(p);
}

sp_tensor *sp_plan_input(sp_plan *p, const char *name) {
  for (int i = 0; i < p->g->n_nodes; i++)
    if (!p->g->nodes[i].op && !strcmp(p->g->nodes[i].name, name)) return &p->nodes[i].act;
  sp_error_set("plan has no input named '%s'", name);
  return NULL;
}

/* A node computed inside another (absorbed), or one that computes others
 * after it, shares one buffer holding the last one's output, in its layout
 * and size: no value of its own to hand out. */
const sp_tensor *sp_plan_value(const sp_plan *p, sp_value v) {
  if (v < 0 || v >= p->g->n_nodes) return NULL;
  int host = p->nodes[v].absorbed_by >= 0;
  for (int i = v + 1; i < p->g->n_nodes && !host; i++) host = p->nodes[i].absorbed_by == v;
  if (host) {
    sp_error_set("value of node %d ('%s') is fused with the nodes next to it; mark it a graph output to keep it", v,
                 p->g->nodes[v].name);
    return NULL;
  }
  return &p->nodes[v].act;
}

const sp_tensor *sp_plan_output(const sp_plan *p, const char *name) {
  for (int i = 0; i < p->g->n_nodes; i++)
    if (p->g->nodes[i].is_output && !strcmp(p->g->nodes[i].name, name)) {
      if (kept_output(p, &p->g->nodes[i])) return &p->nodes[i].act;
      sp_error_set("output '%s' is not kept by a plan made with %s", name,
                   p->flags & SP_PLAN_LOSS_ONLY ? "SP_PLAN_LOSS_ONLY" : "SP_PLAN_FROZEN (an auxiliary output)");
      return NULL;
    }
  return NULL;
}

const sp_shape *sp_plan_shape(const sp_plan *p, sp_value v) {
  return v >= 0 && v < p->g->n_nodes ? &p->nodes[v].shape : NULL;
}

size_t sp_plan_arena_bytes(const sp_plan *p) { return p->arena_bytes; }
size_t sp_plan_naive_bytes(const sp_plan *p) { return p->naive_bytes; }

int sp_plan_verify(const sp_plan *p) {
  for (int i = 0; i < p->n_reqs; i++)
    for (int j = i + 1; j < p->n_reqs; j++) {
      const sp_buffer_req *a = &p->reqs[i], *b = &p->reqs[j];
      if (!a->bytes || !b->bytes) continue;
      int live_together = a->start <= b->end && b->start <= a->end;
      int overlap = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
      if (live_together && overlap)
        return sp_error_set("buffers %d [%d,%d] and %d [%d,%d] are live together and overlap in memory", i, a->start,
                            a->end, j, b->start, b->end);
    }
  return 0;
}
