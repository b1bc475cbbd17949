/* relu on oneDNN's eltwise, in the input's layout. The graph keeps relu's
 * output (not its input) alive for backward, so the primitive is the
 * "use dst for backward" flavour. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

typedef struct {
  cpu_node base;
  int run_backward;
  dnnl_memory_desc_t md;
  dnnl_primitive_desc_t fwd_pd, bwd_pd, acc_pd;
  dnnl_primitive_t fwd, bwd, acc;
  size_t dsrc_off;
  cpu_exec f, b, b_out;
} relu_node;

static void relu_forward(cpu_node *n, const sp_op_args *a) { cpu_exec_run(&((relu_node *)n)->f); }

static void relu_backward(cpu_node *n, const sp_op_args *a) {
  relu_node *s = (relu_node *)n;
  if (!a->d_in[0]) return;
  cpu_exec_run(&s->b);
  cpu_exec_run(&s->b_out);
}

static int relu_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  relu_node *s = (relu_node *)n;
  cpu_exec_init(&s->f, s->fwd);
  if (cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->md, a->in[0]->data) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->md, a->out->data) || cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs))
    return -1;
  if (!s->run_backward || !a->d_in[0]) return 0;
  int fresh = (a->d_in_fresh & 1u) != 0;
  void *dsrc = fresh ? a->d_in[0]->data : bs + s->dsrc_off;
  cpu_exec_init(&s->b, s->bwd);
  if (cpu_exec_arg(&s->b, n, DNNL_ARG_DST, &s->md, a->out->data) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_DST, &s->md, a->d_out->data) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_SRC, &s->md, dsrc) || cpu_exec_scratchpad(&s->b, n, s->bwd_pd, bs))
    return -1;
  if (fresh) cpu_exec_init(&s->b_out, NULL);
  else if (cpu_bind_reorder(&s->b_out, n, s->acc_pd, s->acc, dsrc, a->d_in[0]->data, bs)) return -1;
  return 0;
}

static const cpu_vt relu_vt = {relu_forward, relu_backward, relu_bind, NULL};

static int relu_setup(sp_op_prep *p, relu_node *s) {
  s->run_backward = p->run_backward;
  if (cpu_md_input(&s->md, p, 0)) return -1;
  if (p->out_plain && !(cpu_md_is_plain(&s->md) && s->md.data_type == dnnl_f32))
    return sp_error_set("a blocked relu cannot write a plain graph output");
  dnnl_eltwise_desc_t d;
  dnnl_prop_kind_t prop = p->run_backward ? dnnl_forward_training : dnnl_forward_inference;
  DNNL_TRY(dnnl_eltwise_forward_desc_init(&d, prop, dnnl_eltwise_relu_use_dst_for_bwd, &s->md, 0.0f, 0.0f));
  if (cpu_make(&s->base, &d, NULL, NULL, &s->fwd_pd, &s->fwd)) return -1;
  s->base.out_md = s->md;
  size_t bwd = 0;
  if (p->run_backward) {
    DNNL_TRY(dnnl_eltwise_backward_desc_init(&d, dnnl_eltwise_relu_use_dst_for_bwd, &s->md, &s->md, 0.0f, 0.0f));
    if (cpu_make_backward_acc(&s->base, &d, s->fwd_pd, &s->md, &s->bwd_pd, &s->bwd, &s->acc_pd, &s->acc, &bwd))
      return -1;
    s->dsrc_off = cpu_take(&bwd, cpu_md_bytes(&s->md));
  }
  p->saved_bytes = 0;
  return cpu_report_scratch(p, &s->base, cpu_scratchpad_bytes(s->fwd_pd), bwd);
}

int cpu_relu_prepare(sp_op_prep *p) {
  relu_node *s = cpu_node_new(sizeof *s, &relu_vt);
  if (relu_setup(p, s) != 0) return cpu_fallback(p, &s->base);
  return 0;
}
#endif
