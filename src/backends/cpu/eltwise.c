/* relu on oneDNN's eltwise, in the input's layout (a unary node, unary.c).
 * The graph keeps relu's output (not its input) alive for backward, so the
 * primitive is the "use dst for backward" flavour. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

static int relu_setup(sp_op_prep *p, cpu_unary *s) {
  if (cpu_md_input(&s->src_md, p, 0)) return -1;
  if (p->out_plain && !(cpu_md_is_plain(&s->src_md) && s->src_md.data_type == dnnl_f32))
    return sp_error_set("a blocked relu cannot write a plain graph output");
  dnnl_eltwise_desc_t d;
  dnnl_prop_kind_t prop = p->run_backward ? dnnl_forward_training : dnnl_forward_inference;
  DNNL_TRY(dnnl_eltwise_forward_desc_init(&d, prop, dnnl_eltwise_relu_use_dst_for_bwd, &s->src_md, 0.0f, 0.0f));
  if (cpu_make(&s->base, &d, NULL, NULL, &s->fwd_pd, &s->fwd)) return -1;
  cpu_unary_forward_made(s);
  s->bwd_reads_dst = 1;
  if (p->run_backward)
    DNNL_TRY(
        dnnl_eltwise_backward_desc_init(&d, dnnl_eltwise_relu_use_dst_for_bwd, &s->src_md, &s->src_md, 0.0f, 0.0f));
  return cpu_unary_finish(p, s, p->run_backward ? &d : NULL);
}

int cpu_relu_prepare(sp_op_prep *p) {
  cpu_unary *s = cpu_unary_new(p);
  if (relu_setup(p, s) != 0) return cpu_fallback(p, &s->base);
  return 0;
}
#endif
