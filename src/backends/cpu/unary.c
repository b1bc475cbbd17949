/* The one-input oneDNN node that relu (eltwise.c), pooling and upsampling
 * (pool.c) share: a forward primitive; a backward primitive writing the input
 * gradient, straight into it when this node writes it first, else into
 * scratch that an accumulating reorder then adds; the workspace (max-pool
 * argmax) in the saved region. The files that use it only make descriptors. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

static void unary_forward(cpu_node *n, const sp_op_args *a) { cpu_exec_run(&((cpu_unary *)n)->f); }

static void unary_backward(cpu_node *n, const sp_op_args *a) {
  cpu_unary *s = (cpu_unary *)n;
  if (!a->d_in[0]) return;
  cpu_exec_run(&s->b);
  cpu_exec_run(&s->b_out);
}

/* The workspace argument where the primitive has one; 0 otherwise. */
static int bind_ws(cpu_unary *s, cpu_exec *e, const sp_op_args *a) {
  return s->has_ws ? cpu_exec_arg(e, &s->base, DNNL_ARG_WORKSPACE, &s->ws_md, a->saved) : 0;
}

static int unary_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  cpu_unary *s = (cpu_unary *)n;
  cpu_exec_init(&s->f, s->fwd);
  if (cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->src_md, a->in[0]->data) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->dst_md, a->out->data) || bind_ws(s, &s->f, a) ||
      cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs))
    return -1;
  if (!s->run_backward || !a->d_in[0]) return 0;
  int fresh = (a->d_in_fresh & 1u) != 0;
  void *dsrc = fresh ? a->d_in[0]->data : bs + s->dsrc_off;
  cpu_exec_init(&s->b, s->bwd);
  if ((s->bwd_reads_dst && cpu_exec_arg(&s->b, n, DNNL_ARG_DST, &s->dst_md, a->out->data)) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_DST, &s->dst_md, a->d_out->data) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_SRC, &s->src_md, dsrc) || bind_ws(s, &s->b, a) ||
      cpu_exec_scratchpad(&s->b, n, s->bwd_pd, bs))
    return -1;
  if (fresh)
    cpu_exec_init(&s->b_out, NULL);
  else if (cpu_bind_reorder(&s->b_out, n, s->acc_pd, s->acc, dsrc, a->d_in[0]->data, bs))
    return -1;
  return 0;
}

static const cpu_vt unary_vt = {unary_forward, unary_backward, unary_bind, NULL};

cpu_unary *cpu_unary_new(sp_op_prep *p) {
  cpu_unary *s = cpu_node_new(sizeof *s, &unary_vt);
  s->run_backward = p->run_backward;
  return s;
}

void cpu_unary_forward_made(cpu_unary *s) {
  s->dst_md = *cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0);
  s->base.out_md = s->dst_md;
  const dnnl_memory_desc_t *ws = cpu_pd_md(s->fwd_pd, dnnl_query_workspace_md, 0);
  s->has_ws = ws && cpu_md_bytes(ws) > 0;
  if (s->has_ws) s->ws_md = *ws;
}

int cpu_unary_finish(sp_op_prep *p, cpu_unary *s, const void *bwd_desc) {
  size_t bwd = 0;
  if (bwd_desc) {
    if (cpu_make_backward_acc(&s->base, bwd_desc, s->fwd_pd, &s->src_md, &s->bwd_pd, &s->bwd, &s->acc_pd, &s->acc,
                              &bwd))
      return -1;
    s->dsrc_off = cpu_take(&bwd, cpu_md_bytes(&s->src_md));
  }
  p->saved_bytes = s->has_ws ? cpu_md_bytes(&s->ws_md) : 0;
  return cpu_report_scratch(p, &s->base, cpu_scratchpad_bytes(s->fwd_pd), bwd);
}
#endif
