/* Plan internals shared by plan.c and exec.c. */
#ifndef SPRY_PLAN_INTERNAL_H
#define SPRY_PLAN_INTERNAL_H

#include "graph/graph_internal.h"

#define BSTEP(p, i) (2 * (p)->g->n_nodes - 1 - (i))

typedef struct {
  sp_shape shape;
  sp_dtype dtype;
  int needs_grad, reaches_loss, run_backward;
  int act_buf, grad_buf, saved_buf;
  int first_writer; /* node whose backward first accumulates into grad (zero it before) */
  size_t saved_bytes;
  sp_tensor act, grad;
  sp_op_args args;
  double t_fwd, t_bwd;
  /* Fast backends: the layout prepare() reported (NULL: plain), the byte size
   * of the activation (and gradient) buffer, and per-step scratch buffers. */
  void *impl_state; /* prepare()'s state (sp_op_args.impl) */
  int absorbed_by;  /* >= 0: that node computes this one (fusion); this node shares its buffers and never runs */
  /* >= 0: that node (later) adopted this one (sp_op_prep.adopt_other): this
   * node's forward runs, its backward is the adopter's; adopts: the reverse. */
  int adopted_by, adopts;
  int over; /* >= 0: this node's output is written over that value's buffer (sp_op_prep.out_over_other) */
  unsigned param_overwrites; /* prepare()'s param_grad_overwrites */
  const void *layout;
  size_t act_bytes;
  size_t fwd_scratch_bytes, bwd_scratch_bytes;
  int fwd_scratch_buf, bwd_scratch_buf;
  void *fwd_scratch, *bwd_scratch;
} plan_node;

struct sp_plan {
  sp_graph *g;
  sp_backend backend;
  int training;
  unsigned flags;
  plan_node *nodes;
  const sp_op_def **impl;
  sp_buffer_req *reqs;
  int n_reqs;
  void *arena;
  size_t arena_bytes, naive_bytes;
  uint64_t step;
  int profile;
  int params_stale; /* SP_PLAN_FROZEN: prepare weights at the next forward */
  /* Gradient-ready hook: grad_ready[0..n_nodes] are offsets into
   * grad_ready[n_nodes + 1 ..], the parameters final after each node's
   * backward (built by sp_plan_set_grad_hook). */
  sp_grad_ready_fn grad_hook;
  void *grad_hook_user;
  int *grad_ready;
  /* sp_plan_zero_grad: per parameter, 1 where the first writer overwrites. */
  unsigned char *grad_marked;
  int n_grad_marked;
};

#endif
