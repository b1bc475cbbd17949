/* linear on oneDNN's inner product: forward, backward data, backward weights
 * (+ bias), for bf16 plans, frozen plans and inputs in a blocked layout
 * (other f32 plans on a plain input go to linear_gemm.c). Same scheme as
 * conv.c: master weights reordered each forward into the saved region,
 * weight gradient reordered with a sum post-op into the plain f32 parameter
 * gradient. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

enum { R_SRC, R_WEI, R_DX_SET, R_DX_ACC, R_DW, N_REORDERS };

typedef struct {
  cpu_node base;
  int has_bias, need_dx, need_dw, run_backward, reorder_src;
  dnnl_memory_desc_t x_md, src_md, wplain_md, wei_md, bias_md, dst_md, dwei_md;
  dnnl_primitive_desc_t fwd_pd, bwd_data_pd, bwd_wei_pd, re_pd[N_REORDERS];
  dnnl_primitive_t fwd, bwd_data, bwd_wei, re[N_REORDERS];
  size_t src_off, wei_off, dsrc_off, dwei_off, dbias_off;
  void *wei_kept; /* frozen plans: the prepared weights */
  cpu_exec x_src, w_wei, ip, dx, dx_out, dw, dw_out;
  float *dbias;
  int64_t n_bias;
} linear_node;

static void linear_forward(cpu_node *n, const sp_op_args *a) {
  linear_node *s = (linear_node *)n;
  if (s->reorder_src) cpu_exec_run(&s->x_src);
  if (!s->wei_kept || a->params_stale) cpu_exec_run(&s->w_wei);
  cpu_exec_run(&s->ip);
}

static void linear_backward(cpu_node *n, const sp_op_args *a) {
  linear_node *s = (linear_node *)n;
  if (s->need_dx && a->d_in[0]) {
    cpu_exec_run(&s->dx);
    cpu_exec_run(&s->dx_out);
  }
  if (s->need_dw) {
    cpu_exec_run(&s->dw);
    if (a->d_param[0]) cpu_exec_run(&s->dw_out);
    if (s->has_bias && a->d_param[1]) cpu_add_f32(a->d_param[1]->data, s->dbias, (size_t)s->n_bias);
  }
}

static int linear_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  linear_node *s = (linear_node *)n;
  char *keep = s->run_backward ? (char *)a->saved : fs;
  void *src = s->reorder_src ? keep + s->src_off : a->in[0]->data, *wei = s->wei_kept ? s->wei_kept : keep + s->wei_off;
  if (s->reorder_src && cpu_bind_reorder(&s->x_src, n, s->re_pd[R_SRC], s->re[R_SRC], a->in[0]->data, src, fs))
    return -1;
  if (cpu_bind_reorder(&s->w_wei, n, s->re_pd[R_WEI], s->re[R_WEI], a->param[0]->data, wei, fs)) return -1;
  cpu_exec_init(&s->ip, s->fwd);
  if (cpu_exec_arg(&s->ip, n, DNNL_ARG_SRC, &s->src_md, src) ||
      cpu_exec_arg(&s->ip, n, DNNL_ARG_WEIGHTS, &s->wei_md, wei) ||
      cpu_exec_arg(&s->ip, n, DNNL_ARG_DST, &s->dst_md, a->out->data) ||
      (s->has_bias && cpu_exec_arg(&s->ip, n, DNNL_ARG_BIAS, &s->bias_md, a->param[1]->data)) ||
      cpu_exec_scratchpad(&s->ip, n, s->fwd_pd, fs))
    return -1;
  if (!s->run_backward) return 0;
  if (s->need_dx && a->d_in[0]) {
    int fresh = (a->d_in_fresh & 1u) != 0, direct = fresh && !s->reorder_src;
    void *dsrc = direct ? a->d_in[0]->data : bs + s->dsrc_off;
    cpu_exec_init(&s->dx, s->bwd_data);
    if (cpu_exec_arg(&s->dx, n, DNNL_ARG_DIFF_DST, &s->dst_md, a->d_out->data) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_WEIGHTS, &s->wei_md, wei) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_DIFF_SRC, &s->src_md, dsrc) ||
        cpu_exec_scratchpad(&s->dx, n, s->bwd_data_pd, bs))
      return -1;
    int r = fresh ? R_DX_SET : R_DX_ACC;
    if (direct)
      cpu_exec_init(&s->dx_out, NULL);
    else if (cpu_bind_reorder(&s->dx_out, n, s->re_pd[r], s->re[r], dsrc, a->d_in[0]->data, bs))
      return -1;
  }
  if (s->need_dw) {
    s->dbias = (float *)(bs + s->dbias_off);
    cpu_exec_init(&s->dw, s->bwd_wei);
    if (cpu_exec_arg(&s->dw, n, DNNL_ARG_SRC, &s->src_md, src) ||
        cpu_exec_arg(&s->dw, n, DNNL_ARG_DIFF_DST, &s->dst_md, a->d_out->data) ||
        cpu_exec_arg(&s->dw, n, DNNL_ARG_DIFF_WEIGHTS, &s->dwei_md, bs + s->dwei_off) ||
        (s->has_bias && cpu_exec_arg(&s->dw, n, DNNL_ARG_DIFF_BIAS, &s->bias_md, s->dbias)) ||
        cpu_exec_scratchpad(&s->dw, n, s->bwd_wei_pd, bs))
      return -1;
    if (a->d_param[0] &&
        cpu_bind_reorder(&s->dw_out, n, s->re_pd[R_DW], s->re[R_DW], bs + s->dwei_off, a->d_param[0]->data, bs))
      return -1;
  }
  return 0;
}

static const cpu_vt linear_vt = {linear_forward, linear_backward, linear_bind, NULL};

static int linear_setup(sp_op_prep *p, linear_node *s) {
  dnnl_data_type_t dt = p->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t src_any, wei_any, dst_any, dwei_any;
  s->has_bias = p->n_param > 1;
  s->run_backward = p->run_backward;
  s->need_dx = p->run_backward && p->need_d_in[0];
  s->need_dw = p->run_backward && (p->param_grad[0] || (s->has_bias && p->param_grad[1]));
  if (cpu_md_input(&s->x_md, p, 0) || cpu_md_any(&src_any, &p->in_shape[0], dt) ||
      cpu_md_plain(&s->wplain_md, &p->param_shape[0], dnnl_f32) || cpu_md_any(&wei_any, &p->param_shape[0], dt))
    return -1;
  if (p->out_plain ? cpu_md_plain(&dst_any, &p->out_shape, dnnl_f32) : cpu_md_any(&dst_any, &p->out_shape, dt))
    return -1;
  sp_shape bs = sp_shape1(p->out_shape.d[1]);
  if (cpu_md_plain(&s->bias_md, &bs, dnnl_f32)) return -1;
  s->n_bias = bs.d[0];

  dnnl_inner_product_desc_t d;
  dnnl_prop_kind_t prop = p->training ? dnnl_forward_training : dnnl_forward_inference;
  DNNL_TRY(
      dnnl_inner_product_forward_desc_init(&d, prop, &src_any, &wei_any, s->has_bias ? &s->bias_md : NULL, &dst_any));
  if (cpu_make(&s->base, &d, NULL, NULL, &s->fwd_pd, &s->fwd)) return -1;
  s->src_md = *cpu_pd_md(s->fwd_pd, dnnl_query_src_md, 0);
  s->wei_md = *cpu_pd_md(s->fwd_pd, dnnl_query_weights_md, 0);
  s->dst_md = *cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0);
  s->base.out_md = s->dst_md;
  s->reorder_src = !cpu_md_equal(&s->x_md, &s->src_md);
  if (s->reorder_src && cpu_make_reorder(&s->base, &s->x_md, &s->src_md, 0, &s->re_pd[R_SRC], &s->re[R_SRC])) return -1;
  if (cpu_make_reorder(&s->base, &s->wplain_md, &s->wei_md, 0, &s->re_pd[R_WEI], &s->re[R_WEI])) return -1;
  if (s->need_dx) {
    DNNL_TRY(dnnl_inner_product_backward_data_desc_init(&d, &s->src_md, &s->wei_md, &s->dst_md));
    if (cpu_make(&s->base, &d, s->fwd_pd, NULL, &s->bwd_data_pd, &s->bwd_data) ||
        cpu_make_reorder(&s->base, &s->src_md, &s->x_md, 0, &s->re_pd[R_DX_SET], &s->re[R_DX_SET]) ||
        cpu_make_reorder(&s->base, &s->src_md, &s->x_md, 1, &s->re_pd[R_DX_ACC], &s->re[R_DX_ACC]))
      return -1;
  }
  if (s->need_dw) {
    if (cpu_md_retype(&dwei_any, &wei_any, dnnl_f32)) return -1;
    DNNL_TRY(dnnl_inner_product_backward_weights_desc_init(&d, &s->src_md, &dwei_any, s->has_bias ? &s->bias_md : NULL,
                                                           &s->dst_md));
    if (cpu_make(&s->base, &d, s->fwd_pd, NULL, &s->bwd_wei_pd, &s->bwd_wei)) return -1;
    s->dwei_md = *cpu_pd_md(s->bwd_wei_pd, dnnl_query_diff_weights_md, 0);
    if (cpu_make_reorder(&s->base, &s->dwei_md, &s->wplain_md, 1, &s->re_pd[R_DW], &s->re[R_DW])) return -1;
  }
  size_t fwd = 0, bwd = 0, keep = 0;
  for (int r = 0; r < N_REORDERS; r++) {
    if (!s->re_pd[r]) continue;
    size_t b = cpu_scratchpad_bytes(s->re_pd[r]);
    if (r <= R_WEI && b > fwd) fwd = b;
    if (r > R_WEI && b > bwd) bwd = b;
  }
  if (cpu_scratchpad_bytes(s->fwd_pd) > fwd) fwd = cpu_scratchpad_bytes(s->fwd_pd);
  if (s->bwd_data_pd && cpu_scratchpad_bytes(s->bwd_data_pd) > bwd) bwd = cpu_scratchpad_bytes(s->bwd_data_pd);
  if (s->bwd_wei_pd && cpu_scratchpad_bytes(s->bwd_wei_pd) > bwd) bwd = cpu_scratchpad_bytes(s->bwd_wei_pd);
  size_t *k = s->run_backward ? &keep : &fwd;
  if (s->reorder_src) s->src_off = cpu_take(k, cpu_md_bytes(&s->src_md));
  /* A frozen plan keeps the prepared weights in the node's own memory and
   * reorders them only when the parameters changed. */
  if (p->frozen && !s->run_backward)
    s->wei_kept = cpu_node_keep(&s->base, cpu_md_bytes(&s->wei_md));
  else
    s->wei_off = cpu_take(k, cpu_md_bytes(&s->wei_md));
  if (s->need_dx) s->dsrc_off = cpu_take(&bwd, cpu_md_bytes(&s->src_md));
  if (s->need_dw) {
    s->dwei_off = cpu_take(&bwd, cpu_md_bytes(&s->dwei_md));
    s->dbias_off = cpu_take(&bwd, sizeof(float) * (size_t)s->n_bias);
  }
  p->saved_bytes = keep;
  p->fwd_scratch_bytes = fwd;
  p->bwd_scratch_bytes = bwd;
  cpu_report(p, &s->base);
  return 0;
}

int cpu_linear_prepare(sp_op_prep *p) {
  if (p->in_shape[0].ndim != 2) return cpu_adapter_prepare(p);
  int r = cpu_linear_gemm_prepare(p); /* f32 on a plain input: no weight reorders */
  if (r <= 0) return r;
  r = cpu_linear_mm_prepare(p); /* bf16 training on a plain input: the same, as matmuls */
  if (r <= 0) return r;
  linear_node *s = cpu_node_new(sizeof *s, &linear_vt);
  if (linear_setup(p, s) != 0) return cpu_fallback(p, &s->base);
  return 0;
}
#endif
