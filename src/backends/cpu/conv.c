/* conv2d and conv_transpose2d on oneDNN: forward, backward data, backward
 * weights (+ bias), in the layouts oneDNN picks (format_any).
 *
 * Forward reorders the f32 master weights into the primitive's layout (and
 * bf16 in bf16 plans) every step, into the saved region, because backward
 * data reads the same copy; an input that arrives in another layout than the
 * primitive wants (the image, usually) is reordered once too. The weight
 * gradient comes out in oneDNN's layout and is reordered into the plain f32
 * parameter gradient with a sum post-op (gradients accumulate).
 *
 * Layout choice: each primitive is first asked for the layouts the tensors
 * already have (the input's, the forward weights') and, if oneDNN would run
 * its reference kernel for them, asked again with format_any; the backward
 * primitives then reorder the weights / the input they need in backward
 * scratch. (Small channel counts are the usual case: oneDNN's forward takes
 * a plain input for 8 input channels, its backward kernels want it blocked.)
 *
 * Frozen inference plans keep the prepared weights and fold a following
 * batch norm (running statistics) into them: w' = w g / sqrt(v + eps),
 * b' = (b - m) g / sqrt(v + eps) + beta, so the BN pass disappears. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/conv_node.h"
#include "backends/cpu/cpu.h"
#include "ops/ops.h"

int cpu_conv_use_matmul = 1;
int cpu_conv_mm_strided = 1;
int64_t cpu_conv_bww_min_channels = 64;

/* The accessors below (for tests) read a conv node; a prepare that fell back
 * to the plain adapter (no oneDNN primitive for the case, e.g. bf16 below
 * AVX-512) made another kind of node, which reads as a conv node with
 * every path off. */
static const cpu_vt conv_vt;
static const conv_node *conv_of(const void *state) {
  static const conv_node none;
  return state && ((const cpu_node *)state)->vt == &conv_vt ? state : &none;
}

int cpu_conv_uses_matmul(const void *state) { return conv_of(state)->mm; }
int cpu_conv_uses_col_mm(const void *state) { return conv_of(state)->colmm; }
int cpu_conv_uses_dw_blocked(const void *state) { return conv_of(state)->dw_blocked; }
int cpu_conv_winograd_passes(const void *state) {
  const conv_node *s = conv_of(state);
  const_dnnl_primitive_desc_t pd[3] = {s->fwd_pd, s->bwd_data_pd, s->bwd_wei_pd};
  int passes = 0;
  for (int i = 0; i < 3; i++)
    if (pd[i] && strstr(cpu_pd_impl(pd[i]), "wino")) passes |= 1 << i;
  return passes;
}
int cpu_conv_uses_s2_dx(const void *state) { return conv_of(state)->s2dx; }
int cpu_conv_dx_fwd_ready(const void *state) { return conv_of(state)->dxfwd; }
int cpu_conv_deconv_1x1(const void *state) { return conv_of(state)->dc1; }
int cpu_conv_deconv_1x1_bwd(const void *state) { return conv_of(state)->dcb; }
int cpu_conv_wino_own(const void *state) {
  return conv_of(state)->wino | conv_of(state)->wino_dx << 1 | conv_of(state)->wino_dw << 2;
}
int cpu_conv_s2dw_own(const void *state) { return conv_of(state)->s2dw; }
int cpu_conv_src_lanes(const void *state) { return cpu_md_lanes(&conv_of(state)->src_md); }
int cpu_conv_reorders_src(const void *state) { return conv_of(state)->reorder_src; }
int cpu_conv_dst_lanes(const void *state) { return cpu_md_lanes(&conv_of(state)->dst_md); }
static const cpu_bww_mm *bww_of(const conv_node *s) { return s->bww ? &s->bwwmm : NULL; }
int cpu_conv_bww_packed(const void *state) { return bww_of(conv_of(state)) && bww_of(conv_of(state))->packed; }
int cpu_conv_bww_amx(const void *state) { return bww_of(conv_of(state)) && bww_of(conv_of(state))->amx; }
int cpu_conv_bww_whole(const void *state) { return bww_of(conv_of(state)) && bww_of(conv_of(state))->whole; }
int cpu_conv_bww_small(const void *state) { return bww_of(conv_of(state)) && bww_of(conv_of(state))->small; }
int cpu_conv_uses_thin_dw(const void *state) { return conv_of(state)->mm && conv_of(state)->mm1x1.thin_dw; }

/* Folds the absorbed batch norm's running statistics into plain weights and
 * a bias (the reorder then takes them into the primitive's layout). */
static void fold_bn(conv_node *s, const sp_op_args *a) {
  const float *w = a->param[0]->data, *b = s->has_bias ? a->param[1]->data : NULL;
  const int64_t oc = s->n_bias, per = sp_tensor_numel(a->param[0]) / oc;
  for (int64_t o = 0; o < oc; o++) {
    float scale;
    cpu_bn_fold(a->consumer, o, b ? b[o] : 0.0f, &scale, &s->bfold[o]);
    for (int64_t j = 0; j < per; j++) s->wfold[o * per + j] = w[o * per + j] * scale;
  }
}

static void conv_forward(cpu_node *n, const sp_op_args *a) {
  conv_node *s = (conv_node *)n;
  if (s->reorder_src) cpu_exec_run(&s->x_src);
  if (s->dc1) {
    cpu_dc1_run(&s->d1, a->param[0]->data, s->fold_bn ? a->consumer : NULL, a->params_stale);
    return;
  }
  if (s->wino) {
    if (!s->wei_kept || a->params_stale) {
      if (s->fold_bn) fold_bn(s, a);
      cpu_wino_weights(&s->wf, s->wf_u, s->fold_bn ? s->wfold : a->param[0]->data, NULL);
    }
    cpu_wino_run(&s->wf, s->wf_u, s->wf_src, a->out->data, s->wf_bias, s->post_relu, 0, s->wf_work);
    return;
  }
  if (s->mm_fwd && s->base.stats_on) {
    const cpu_mm1x1 *m = &s->mm1x1;
    cpu_mm_amx_pack(a->param[0]->data, m->ic, m->oc, 1, s->mm_w, m->threads); /* B = W^T: W is [OC][IC] */
    const cpu_mm_epilogue e = {.bias = s->has_bias ? a->param[1]->data : NULL,
                               .mean = s->base.stats_on ? s->base.stats : NULL,
                               .var = s->base.stats + m->oc, /* stats_on: bound */
                               .stats = s->stats_work,
                               .stream = s->mm_stream};
    cpu_mm_amx(a->in[0]->data, m->rows, m->ic, s->mm_w, m->oc, a->out->data, &e, m->threads);
    return;
  }
  if (s->colmm) {
    cpu_colmm_forward(&s->cm, a->param[0]->data);
    return;
  }
  if (!s->wei_kept || a->params_stale) {
    if (s->fold_bn) fold_bn(s, a);
    cpu_exec_run(&s->w_wei);
  }
  cpu_exec_run(&s->conv);
}

static void conv_backward(cpu_node *n, const sp_op_args *a) {
  conv_node *s = (conv_node *)n;
  if (s->mm) {
    cpu_mm1x1_backward(&s->mm1x1, a);
    return;
  }
  if (s->dcb) cpu_dcb_run(&s->db, (a->d_in_fresh & 1u) != 0, (a->d_param_fresh & 1u) != 0);
  if (s->wino_dx && a->d_in[0]) {
    cpu_wino_weights(&s->wb, s->wb_u, a->param[0]->data, NULL);
    cpu_wino_run(&s->wb, s->wb_u, a->d_out->data, a->d_in[0]->data, NULL, 0, !(a->d_in_fresh & 1u), s->wb_work);
  }
  if (s->s2dx && a->d_in[0]) cpu_s2dx_run(&s->s2, a->param[0]->data, !(a->d_in_fresh & 1u));
  if (s->colmm && a->d_in[0]) cpu_colmm_dx(&s->cm, a->d_in[0]->data, (a->d_in_fresh & 1u) != 0);
  if (s->dxfwd_on) {
    cpu_dxfwd_run(&s->dxf);
  } else if (s->need_dx && a->d_in[0]) {
    if (s->reorder_wei_bd) cpu_exec_run(&s->w_bd);
    cpu_exec_run(&s->dx);
    cpu_exec_run(&s->dx_out);
  }
  if (s->need_dw) {
    if (s->reorder_src_bw) cpu_exec_run(&s->s_bw);
    if (s->reorder_ddst_bw) cpu_exec_run(&s->d_bw);
    cpu_exec_run(&s->dw);
    /* Parameter gradients: written where sp_plan_zero_grad marked them, else added. */
    if (a->d_param[0]) cpu_exec_run(&s->dw_out[a->d_param_fresh & 1u]);
    if (s->has_bias && a->d_param[1]) {
      if (a->d_param_fresh & 2u)
        memcpy(a->d_param[1]->data, s->dbias, sizeof(float) * (size_t)s->n_bias);
      else
        cpu_add_f32(a->d_param[1]->data, s->dbias, (size_t)s->n_bias);
    }
  } else if (s->bww && a->d_param[0]) {
    cpu_bww_mm_run(&s->bwwmm, (a->d_param_fresh & 1u) != 0);
  } else if (s->dw_blocked && a->d_param[0]) {
    cpu_dw_blocked(&s->dwb, a->d_param[0]->data, s->dwb_scratch, s->dwb_threads, (a->d_param_fresh & 1u) != 0);
  } else if (s->wino_dw && a->d_param[0]) {
    cpu_wino_dw_run(&s->wd, s->wd_src, a->d_out->data, a->d_param[0]->data, (a->d_param_fresh & 1u) != 0,
                    s->wb_work_base);
  } else if (s->s2dw && a->d_param[0]) {
    cpu_s2dw_run(&s->sd, s->wd_src, a->d_out->data, a->d_param[0]->data, (a->d_param_fresh & 1u) != 0, s->wb_work_base);
  }
}

static int conv_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  conv_node *s = (conv_node *)n;
  char *keep = s->run_backward ? (char *)a->saved : fs;
  void *src = s->reorder_src ? keep + s->src_off : a->in[0]->data, *wei = s->wei_kept ? s->wei_kept : keep + s->wei_off;
  if (s->reorder_src && cpu_bind_reorder(&s->x_src, n, s->re_pd[R_SRC], s->re[R_SRC], a->in[0]->data, src, fs))
    return -1;
  void *wsrc = s->fold_bn ? (void *)s->wfold : a->param[0]->data;
  if (s->fold_bn && (!a->consumer || a->consumer->n_state < 2))
    return sp_error_set("conv: folded batch norm not wired");
  if (s->post_add && !a->consumer2) return sp_error_set("conv: absorbed residual add not wired");
  if (s->post_sum && a->out->data != a->consumer2->in[s->add_other]->data)
    return sp_error_set("conv: the residual's buffer not given as the output");
  if (cpu_bind_reorder(&s->w_wei, n, s->re_pd[R_WEI], s->re[R_WEI], wsrc, wei, fs)) return -1;
  void *bias = s->fold_bn ? (void *)s->bfold : s->has_bias ? a->param[1]->data : NULL;
  cpu_exec_init(&s->conv, s->fwd);
  if (cpu_exec_arg(&s->conv, n, DNNL_ARG_SRC, &s->src_md, src) ||
      cpu_exec_arg(&s->conv, n, DNNL_ARG_WEIGHTS, &s->wei_md, wei) ||
      cpu_exec_arg(&s->conv, n, DNNL_ARG_DST, &s->dst_md, a->out->data) ||
      (bias && !s->dc1 && cpu_exec_arg(&s->conv, n, DNNL_ARG_BIAS, &s->bias_md, bias)) ||
      (s->post_add && !s->post_sum &&
       cpu_exec_arg(&s->conv, n, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, &s->add_md,
                    a->consumer2->in[s->add_other]->data)) ||
      cpu_exec_scratchpad(&s->conv, n, s->fwd_pd, fs))
    return -1;
  s->mm_w = (uint16_t *)wei;
  if (s->colmm && cpu_colmm_bind(&s->cm, n, src, a->out->data, (uint16_t *)wei,
                                 s->run_backward && a->d_in[0] ? a->d_out->data : NULL, fs, bs))
    return -1;
  if (s->base.stats_able)
    s->base.stats = (float *)(keep + s->stats_off), s->stats_work = (double *)(fs + s->stats_work_off);
  if (s->dc1 && cpu_dc1_bind(&s->d1, n, src, a->out->data, fs + s->dc1_off)) return -1;
  if (s->cat) {
    if (!a->chain[2] || a->chain[2]->n_in != 2) return sp_error_set("deconv: absorbed concat not wired");
    cpu_dc1_bind_skip(&s->d1, a->chain[2]->in[1]->data);
  }
  if (s->wino) {
    s->wf_src = src, s->wf_bias = bias;
    s->wf_u = s->wei_kept ? s->wf_u : (float *)(fs + s->wf_u_off), s->wf_work = fs + s->wf_work_off;
  }
  if (!s->run_backward) return 0;
  if (s->wino_dx) s->wb_u = (float *)bs, s->wb_work = bs + s->wb_work_off;
  s->wd_src = src, s->wb_work_base = bs;
  if (s->mm) return cpu_mm1x1_bind(&s->mm1x1, n, a, bs);
  if (s->s2dx && a->d_in[0] && cpu_s2dx_bind(&s->s2, n, a->d_out->data, a->d_in[0]->data, bs)) return -1;
  if (s->dcb && cpu_dcb_bind(&s->db, n, a->param[0]->data, src, a->d_out->data, a->d_in[0] ? a->d_in[0]->data : NULL,
                             a->d_param[0] ? a->d_param[0]->data : NULL, bs))
    return -1;
  s->dxfwd_on = s->dxfwd && s->need_dx && a->d_in[0] && !(a->d_in_fresh & 1u);
  if (s->dxfwd_on && cpu_dxfwd_bind(&s->dxf, n, a->param[0]->data, a->d_out->data, a->d_in[0]->data, bs)) return -1;
  if (s->need_dx && a->d_in[0] && !s->dxfwd_on) {
    /* Straight into the input's gradient when layouts match and nothing was
     * accumulated there yet; else through scratch and an (accumulating) reorder. */
    int fresh = (a->d_in_fresh & 1u) != 0, direct = fresh && cpu_md_equal(&s->dsrc_md, &s->x_md);
    void *dsrc = direct ? a->d_in[0]->data : bs + s->dsrc_off, *wbd = s->reorder_wei_bd ? bs + s->wbd_off : wei;
    if (s->reorder_wei_bd &&
        cpu_bind_reorder(&s->w_bd, n, s->re_pd[R_WEI_BD], s->re[R_WEI_BD], a->param[0]->data, wbd, bs))
      return -1;
    cpu_exec_init(&s->dx, s->bwd_data);
    if (cpu_exec_arg(&s->dx, n, DNNL_ARG_DIFF_DST, &s->dst_md, a->d_out->data) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_WEIGHTS, &s->wei_bd_md, wbd) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_DIFF_SRC, &s->dsrc_md, dsrc) ||
        cpu_exec_scratchpad(&s->dx, n, s->bwd_data_pd, bs))
      return -1;
    int r = fresh ? R_DX_SET : R_DX_ACC;
    if (direct)
      cpu_exec_init(&s->dx_out, NULL);
    else if (cpu_bind_reorder(&s->dx_out, n, s->re_pd[r], s->re[r], dsrc, a->d_in[0]->data, bs))
      return -1;
  }
  if (s->need_dw) {
    void *sbw = s->reorder_src_bw ? bs + s->sbw_off : src;
    void *dbw = s->reorder_ddst_bw ? bs + s->dbw_off : a->d_out->data;
    s->dbias = (float *)(bs + s->dbias_off);
    if (s->reorder_src_bw && cpu_bind_reorder(&s->s_bw, n, s->re_pd[R_SRC_BW], s->re[R_SRC_BW], src, sbw, bs))
      return -1;
    if (s->reorder_ddst_bw &&
        cpu_bind_reorder(&s->d_bw, n, s->re_pd[R_DDST_BW], s->re[R_DDST_BW], a->d_out->data, dbw, bs))
      return -1;
    cpu_exec_init(&s->dw, s->bwd_wei);
    if (cpu_exec_arg(&s->dw, n, DNNL_ARG_SRC, &s->src_bw_md, sbw) ||
        cpu_exec_arg(&s->dw, n, DNNL_ARG_DIFF_DST, &s->ddst_bw_md, dbw) ||
        cpu_exec_arg(&s->dw, n, DNNL_ARG_DIFF_WEIGHTS, &s->dwei_md, bs + s->dwei_off) ||
        (s->has_bias && cpu_exec_arg(&s->dw, n, DNNL_ARG_DIFF_BIAS, &s->bias_md, s->dbias)) ||
        cpu_exec_scratchpad(&s->dw, n, s->bwd_wei_pd, bs))
      return -1;
    for (int k = 0; k < 2 && a->d_param[0]; k++)
      if (cpu_bind_reorder(&s->dw_out[k], n, s->re_pd[k ? R_DW_SET : R_DW], s->re[k ? R_DW_SET : R_DW],
                           bs + s->dwei_off, a->d_param[0]->data, bs))
        return -1;
  }
  if (s->bww && a->d_param[0] && cpu_bww_mm_bind(&s->bwwmm, src, a->d_out->data, a->d_param[0]->data, bs)) return -1;
  if (s->dw_blocked) {
    /* conv: columns from X, rows from dY; transposed: the other way round. */
    cpu_dwb_side *x_side = s->dwb_x_rows ? &s->dwb.b : &s->dwb.a, *dy_side = s->dwb_x_rows ? &s->dwb.a : &s->dwb.b;
    x_side->t = src;
    dy_side->t = a->d_out->data;
    s->dwb_scratch = bs;
  }
  return 0;
}

static void conv_release(cpu_node *n) { cpu_bww_mm_release(&((conv_node *)n)->bwwmm); }

static const cpu_vt conv_vt = {conv_forward, conv_backward, conv_bind, conv_release};

/* Backward data: write diff_src in the input's layout and read the forward
 * weights if a fast kernel takes them; else oneDNN's choice. */
static int choose_bwd_data(conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src_any,
                           const dnnl_memory_desc_t *wei_any) {
  dnnl_convolution_desc_t d;
  const dnnl_memory_desc_t *tries[3][2] = {{&s->x_md, &s->wei_md}, {&s->x_md, wei_any}, {src_any, wei_any}};
  for (int t = 0; t < 3; t++) {
    if (tries[t][0]->data_type != src_any->data_type) continue;
    dnnl_primitive_desc_t pd;
    if (cpu_conv_init_bwd_data(g, &d, tries[t][0], tries[t][1], &s->dst_md) || cpu_pd(&d, s->fwd_pd, NULL, &pd))
      continue;
    if (t < 2 && cpu_pd_is_ref(pd)) {
      dnnl_primitive_desc_destroy(pd);
      continue;
    }
    s->bwd_data_pd = pd;
    s->dsrc_md = *cpu_pd_md(pd, dnnl_query_diff_src_md, 0);
    s->wei_bd_md = *cpu_pd_md(pd, dnnl_query_weights_md, 0);
    return cpu_adopt(&s->base, pd, &s->bwd_data);
  }
  return sp_error_set("no backward-data convolution for these layouts");
}

/* Backward weights: read the source the forward used and the output
 * gradient as it is if a fast kernel takes them; else channels-last (oneDNN's
 * brgemm kernels take any channel count there, its blocked kernels do not
 * take 8 input channels); else oneDNN's choice. */
static int choose_bwd_wei(conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src_any,
                          const dnnl_memory_desc_t *dwei_any) {
  dnnl_convolution_desc_t d;
  dnnl_memory_desc_t src_nhwc, dst_nhwc, dst_any;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&src_nhwc, 4, src_any->dims, src_any->data_type, dnnl_acdb));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst_nhwc, 4, s->dst_md.dims, s->dst_md.data_type, dnnl_acdb));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst_any, 4, s->dst_md.dims, s->dst_md.data_type, dnnl_format_tag_any));
  const dnnl_memory_desc_t *tries[4][2] = {
      {&s->src_md, &s->dst_md}, {&s->x_md, &s->dst_md}, {&src_nhwc, &dst_nhwc}, {src_any, &dst_any}};
  for (int t = 0; t < 4; t++) {
    dnnl_primitive_desc_t pd;
    if (tries[t][0]->data_type != src_any->data_type ||
        cpu_conv_init_bwd_wei(g, &d, tries[t][0], dwei_any, s->has_bias ? &s->bias_md : NULL, tries[t][1]) ||
        cpu_pd(&d, s->fwd_pd, NULL, &pd))
      continue;
    if (t < 3 && cpu_pd_is_ref(pd)) {
      dnnl_primitive_desc_destroy(pd);
      continue;
    }
    s->bwd_wei_pd = pd;
    s->src_bw_md = *cpu_pd_md(pd, dnnl_query_src_md, 0);
    s->ddst_bw_md = *cpu_pd_md(pd, dnnl_query_diff_dst_md, 0);
    s->dwei_md = *cpu_pd_md(pd, dnnl_query_diff_weights_md, 0);
    return cpu_adopt(&s->base, pd, &s->bwd_wei);
  }
  return sp_error_set("no backward-weights convolution for these layouts");
}

static void grow(size_t *to, const_dnnl_primitive_desc_t pd) {
  if (pd && cpu_scratchpad_bytes(pd) > *to) *to = cpu_scratchpad_bytes(pd);
}

/* Backward as matrix products (conv_mm.c): a training 1x1 convolution,
 * stride 1, no padding, one group, whose input and output are bf16
 * channels-last as forward reads and writes them. */
static int mm_applies(const sp_op_prep *p, const conv_node *s, const cpu_conv_geom *g) {
  const sp_shape *w = &p->param_shape[0];
  /* Strided (ResNet's projection shortcuts, 1x1 stride 2): the products on
   * the grid positions (cpu_mm1x1_grid); a negative right padding is input
   * the grid never reads (an even size at stride 2). oneDNN 2.6's AMX
   * backward-data kernel ran these at 8-14 ms a layer where the forward took
   * 2-3 (ResNet-50 bf16, batch 16). */
  const int strided = g->strides[0] > 1 || g->strides[1] > 1;
  return cpu_conv_use_matmul && p->run_backward && p->bf16 && !g->deconv && g->groups == 1 && w->d[2] == 1 &&
         w->d[3] == 1 && (!strided || cpu_conv_mm_strided) && g->pad_l[0] == 0 && g->pad_l[1] == 0 &&
         (strided ? g->pad_r[0] <= 0 && g->pad_r[1] <= 0 : g->pad_r[0] == 0 && g->pad_r[1] == 0) &&
         cpu_md_equal(&s->x_md, &s->src_md) && s->src_md.data_type == dnnl_bf16 && s->dst_md.data_type == dnnl_bf16 &&
         cpu_md_lanes(&s->src_md) == CPU_LANES_NHWC && cpu_md_lanes(&s->dst_md) == CPU_LANES_NHWC;
}

/* The weight gradient as im2col + matmul (conv_bww_mm.c): bf16 training,
 * channels-last input and output, one group, no bias, and at least 64 input
 * channels: narrower layers (the stem, ResUNet's 32-channel decoder at full
 * resolution) spend more on the im2col copy than the product saves
 * (measured, alternating with oneDNN's kernel: 64 channels at 56x56 22-25 vs
 * 25-30 ms, 512 at 7x7 66-73 vs 108-278; 32 at 224x224 102-182 vs 87-136).
 * Stems on the image (1 or 3 channels) take it where AMX is usable, from an
 * im2col of our own into the tiles' layout (cpu_bww_small_applies): ResNet-50's
 * 7x7 stem at batch 16, fwd + bwd 17.4 -> 10.8 ms a step (alternating runs;
 * oneDNN's kernel wrote blocked f32 that its generic reorder then turned into
 * the plain 7x7 gradient). A 1-channel input is plain and channels-last at
 * once. */
static int bww_applies(const sp_op_prep *p, const conv_node *s, const cpu_conv_geom *g) {
  return cpu_conv_use_matmul && p->run_backward && p->bf16 && !g->deconv && g->groups == 1 && !s->has_bias &&
         (cpu_conv_bww_min_channels <= p->in_shape[0].d[1] ||
          cpu_bww_small_applies(p->in_shape[0].d[1], p->out_shape.d[1], p->param_shape[0].d[2],
                                p->param_shape[0].d[3])) &&
         p->param_grad[0] && s->src_md.data_type == dnnl_bf16 && s->dst_md.data_type == dnnl_bf16 &&
         (cpu_md_lanes(&s->src_md) == CPU_LANES_NHWC || (p->in_shape[0].d[1] == 1 && cpu_md_is_plain(&s->src_md))) &&
         cpu_md_lanes(&s->dst_md) == CPU_LANES_NHWC;
}

/* The weight gradient on 16-channel blocks, in registers
 * (conv_dw_blocked.c): bf16 training where oneDNN chose aBcd16b in and out,
 * which it does on machines without AMX (with AMX it takes channels-last and
 * the matmul paths above apply). Any convolution; transposed ones with
 * kernel = stride and no padding (U-Net's up-layers). False where the
 * channel counts do not fit; else it fills s->dwb but for the tensors. */
static int dw_blocked_setup(const sp_op_prep *p, conv_node *s, const cpu_conv_geom *g) {
  const sp_shape *w = &p->param_shape[0], *in = &p->in_shape[0], *out = &p->out_shape;
  const int64_t kh = w->d[2], kw = w->d[3], kk = kh * kw;
  if (!(p->run_backward && p->bf16 && g->groups == 1 && !s->has_bias && !s->mm && p->param_grad[0] &&
        s->src_md.data_type == dnnl_bf16 && s->dst_md.data_type == dnnl_bf16 && cpu_md_lanes(&s->src_md) == 16 &&
        cpu_md_lanes(&s->dst_md) == 16 && in->ndim == 4))
    return 0;
  const cpu_dwb_side x = {NULL, in->d[1], in->d[2], in->d[3], 1, 1, 0, 0, 0, 0},
                     y = {NULL, out->d[1], out->d[2], out->d[3], 1, 1, 0, 0, 0, 0};
  cpu_dwb_shape *d = &s->dwb;
  s->dwb_x_rows = g->deconv;
  if (g->deconv) {
    if (g->strides[0] != kh || g->strides[1] != kw || g->pad_l[0] || g->pad_l[1] || g->dil[0] || g->dil[1] ||
        !cpu_dw_blocked_fits(in->d[1], out->d[1]))
      return 0;
    /* Over input positions: X itself, dY at (y k + i, x k + j); dW [IC][OC][k][k]. */
    *d = (cpu_dwb_shape){in->d[0], in->d[2], in->d[3], kh, kw, y, x, out->d[1] * kk, kk, 1};
    d->a.sy = kh, d->a.sx = kw, d->a.dy = 1, d->a.dx = 1;
  } else {
    /* Every size: ResNet's 512-channel 3x3 layers at 7x7 (2.4 M dW values,
     * whose per-tap sums go through memory) were left to oneDNN after per-call
     * timings in session 30 (8.0-8.3 against 6.0-8.3 ms, stride 2 15.8 against
     * 11.1); per node, in one run with the kernel of session 31 (resnet50 bf16
     * b16, five alternating pairs, backward ms a step), oneDNN's stride 2 took
     * 15.5-18.1 against 12.1-13.4 here, stride 1 11.0-14.4 against 10.6-11.7.
     * Not for few channels with taps: per tap, working out where each
     * position reads costs more than the few products it feeds (ResUNet-50's
     * 16 -> 16 3x3 at 112x112, bf16 b16: 8.6 ms backward against oneDNN's
     * 4.1; vgg-face's 16 -> 32 3x3 gained, 4.4 -> 3.5). */
    if (kk > 1 && out->d[1] * in->d[1] < 512) return 0;
    const int unit = kk == 1 && g->strides[0] == 1 && g->strides[1] == 1 && !g->pad_l[0] && !g->pad_l[1] &&
                     in->d[2] == out->d[2] && in->d[3] == out->d[3];
    if (!cpu_dw_blocked_fits(out->d[1], in->d[1])) {
      /* 8 input channels into a multiple of 16 (ResUNet's 8 -> 32 at full
       * resolution), 1x1 stride 1: the roles swap, input channels as rows,
       * both sides read in place; dW [OC][IC] is then written by column. */
      if (!unit || !cpu_dw_blocked_fits(in->d[1], out->d[1])) return 0;
      *d = (cpu_dwb_shape){out->d[0], out->d[2], out->d[3], 1, 1, y, x, 1, in->d[1], 1};
      s->dwb_x_rows = 1;
      return 1;
    }
    /* Over output positions: dY itself, X at (y s + i d - pad, ...); dW [OC][IC][kh][kw]. */
    *d = (cpu_dwb_shape){out->d[0], out->d[2], out->d[3], kh, kw, x, y, in->d[1] * kk, kk, 1};
    d->a.sy = g->strides[0], d->a.sx = g->strides[1], d->a.dy = g->dil[0] + 1, d->a.dx = g->dil[1] + 1;
    d->a.oy = -g->pad_l[0], d->a.ox = -g->pad_l[1];
  }
  return 1;
}

/* Our Winograd F(4x4, 3x3) (conv_wino.c): f32 3x3, stride 1, padding 1,
 * one group, the output the input's size, ... */
static int wino_geometry(const sp_op_prep *p, const cpu_conv_geom *g, const dnnl_memory_desc_t *in,
                         const dnnl_memory_desc_t *out) {
  const sp_shape *w = &p->param_shape[0];
  return !p->bf16 && !g->deconv && g->groups == 1 && w->d[2] == 3 && w->d[3] == 3 && g->strides[0] == 1 &&
         g->strides[1] == 1 && !g->dil[0] && !g->dil[1] && g->pad_l[0] == 1 && g->pad_l[1] == 1 && g->pad_r[0] == 1 &&
         g->pad_r[1] == 1 && in->data_type == dnnl_f32 && out->data_type == dnnl_f32 &&
         p->in_shape[0].d[2] == p->out_shape.d[2] && p->in_shape[0].d[3] == p->out_shape.d[3];
}

/* ... from 8-channel blocks into 8-channel blocks (what oneDNN picks below
 * AVX-512, where it has no Winograd kernel of its own) ... */
static int wino_fits(const sp_op_prep *p, const cpu_conv_geom *g, const dnnl_memory_desc_t *in,
                     const dnnl_memory_desc_t *out) {
  return wino_geometry(p, g, in, out) && cpu_md_lanes(in) == 8 && cpu_md_lanes(out) == 8;
}

/* ... or, forward in AVX-512 builds, 16-channel blocks (conv_wino16.c):
 * from cpu_wino16_min_c channels in and out up to cpu_wino16_max_c where
 * the weights are transformed once (frozen), cpu_wino16_max_c_train where
 * on every call, and from cpu_wino16_min_tiles output tiles; the rest stays
 * on oneDNN's Winograd (conv_winograd.c). */
static int wino16_fits(const sp_op_prep *p, const cpu_conv_geom *g, const dnnl_memory_desc_t *in,
                       const dnnl_memory_desc_t *out, int frozen) {
#ifdef __AVX512F__
  const int64_t ci = p->param_shape[0].d[1], co = p->param_shape[0].d[0], *y = p->out_shape.d;
  const int64_t most = frozen ? cpu_wino16_max_c : cpu_wino16_max_c_train;
  return cpu_wino16_on && wino_geometry(p, g, in, out) && cpu_md_lanes(in) == 16 && cpu_md_lanes(out) == 16 &&
         ci >= cpu_wino16_min_c && ci <= most && co >= cpu_wino16_min_c && co <= most &&
         y[0] * ((y[2] + 3) / 4) * ((y[3] + 3) / 4) >= cpu_wino16_min_tiles;
#else
  (void)p, (void)g, (void)in, (void)out, (void)frozen;
  return 0;
#endif
}

/* ... and with stride 2 (conv_wino_s2.c): the output the standard size for
 * padding 1, (h - 1) / 2 + 1. */
static int wino_s2_fits(const sp_op_prep *p, const cpu_conv_geom *g, const dnnl_memory_desc_t *in,
                        const dnnl_memory_desc_t *out) {
  const sp_shape *w = &p->param_shape[0], *x = &p->in_shape[0], *y = &p->out_shape;
  return cpu_wino_s2_on && !p->bf16 && !g->deconv && g->groups == 1 && w->d[2] == 3 && w->d[3] == 3 &&
         g->strides[0] == 2 && g->strides[1] == 2 && !g->dil[0] && !g->dil[1] && g->pad_l[0] == 1 && g->pad_l[1] == 1 &&
         in->data_type == dnnl_f32 && out->data_type == dnnl_f32 && cpu_md_lanes(in) == 8 && cpu_md_lanes(out) == 8 &&
         y->d[2] == (x->d[2] - 1) / 2 + 1 && y->d[3] == (x->d[3] - 1) / 2 + 1;
}

/* The weight gradient of a stride-2 layer by conv_s2_dw.c: f32 3x3, stride
 * 2, padding 1, an even input (the output half of it), one group, no bias,
 * from the input as forward read it, in 8-channel blocks like dY. *bwd
 * grows to its work memory (after the input gradient, from its start). */
static void s2dw_setup(const sp_op_prep *p, conv_node *s, const cpu_conv_geom *g, size_t *bwd) {
  const sp_shape *w = &p->param_shape[0], *in = &p->in_shape[0], *out = &p->out_shape;
  size_t work;
  if (!s->need_dw || s->has_bias || !p->param_grad[0] || p->bf16 || g->deconv || g->groups != 1 || w->d[2] != 3 ||
      w->d[3] != 3 || g->strides[0] != 2 || g->strides[1] != 2 || g->dil[0] || g->dil[1] || g->pad_l[0] != 1 ||
      g->pad_l[1] != 1 || in->d[2] != 2 * out->d[2] || in->d[3] != 2 * out->d[3] || s->dst_md.data_type != dnnl_f32 ||
      cpu_md_lanes(&s->dst_md) != 8 || s->src_md.data_type != dnnl_f32 || cpu_md_lanes(&s->src_md) != 8 ||
      cpu_s2dw_prepare(&s->sd, in->d[0], in->d[2], in->d[3], in->d[1], out->d[1], &work))
    return;
  s->s2dw = 1, s->need_dw = 0;
  if (work > *bwd) *bwd = work;
}

/* The backward data and backward weights primitives conv_setup still needs
 * (need_dx, need_dw) and the reorders around them. */
static int choose_backward(conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src_any,
                           const dnnl_memory_desc_t *wei_any) {
  dnnl_memory_desc_t dwei_any;
  if (s->need_dx) {
    if (choose_bwd_data(s, g, src_any, wei_any)) return -1;
    /* dc1, wino: forward makes W' or U instead */
    s->reorder_wei_bd = s->dc1 || s->wino || !cpu_md_equal(&s->wei_bd_md, &s->wei_md);
    if ((s->reorder_wei_bd &&
         cpu_make_reorder(&s->base, &s->wplain_md, &s->wei_bd_md, 0, &s->re_pd[R_WEI_BD], &s->re[R_WEI_BD])) ||
        cpu_make_reorder(&s->base, &s->dsrc_md, &s->x_md, 0, &s->re_pd[R_DX_SET], &s->re[R_DX_SET]) ||
        cpu_make_reorder(&s->base, &s->dsrc_md, &s->x_md, 1, &s->re_pd[R_DX_ACC], &s->re[R_DX_ACC]))
      return -1;
  }
  if (s->need_dw) {
    if (cpu_md_retype(&dwei_any, wei_any, dnnl_f32) || choose_bwd_wei(s, g, src_any, &dwei_any)) return -1;
    s->reorder_src_bw = !cpu_md_equal(&s->src_bw_md, &s->src_md);
    s->reorder_ddst_bw = !cpu_md_equal(&s->ddst_bw_md, &s->dst_md);
    if ((s->reorder_ddst_bw &&
         cpu_make_reorder(&s->base, &s->dst_md, &s->ddst_bw_md, 0, &s->re_pd[R_DDST_BW], &s->re[R_DDST_BW])) ||
        (s->reorder_src_bw &&
         cpu_make_reorder(&s->base, &s->src_md, &s->src_bw_md, 0, &s->re_pd[R_SRC_BW], &s->re[R_SRC_BW])) ||
        cpu_make_reorder(&s->base, &s->dwei_md, &s->wplain_md, 1, &s->re_pd[R_DW], &s->re[R_DW]) ||
        cpu_make_reorder(&s->base, &s->dwei_md, &s->wplain_md, 0, &s->re_pd[R_DW_SET], &s->re[R_DW_SET]))
      return -1;
  }
  return 0;
}

/* Scratch: the largest primitive scratchpad first, then temporaries; the
 * weights in the saved region, or for a frozen plan in the node's own memory.
 * mm_bwd, bww_bwd: what the bf16 matmul backward paths need instead. */
static void place_buffers(sp_op_prep *p, conv_node *s, size_t mm_bwd, size_t bww_bwd) {
  size_t fwd = 0, bwd = 0, keep = 0;
  for (int r = 0; r < N_REORDERS; r++) grow(r <= R_WEI ? &fwd : &bwd, s->re_pd[r]);
  grow(&fwd, s->fwd_pd);
  if (s->colmm && s->cm_fwd > fwd) fwd = s->cm_fwd; /* in place of the convolution's, from 0 */
  grow(&bwd, s->bwd_data_pd);
  grow(&bwd, s->bwd_wei_pd);
  size_t *k = s->run_backward ? &keep : &fwd;
  if (s->reorder_src) s->src_off = cpu_take(k, cpu_md_bytes(&s->src_md));
  /* A frozen plan keeps the prepared weights in the node's own memory and
   * reorders them only when the parameters changed. */
  if (p->frozen && !s->run_backward) {
    size_t wb = s->dc1 || s->wino ? 0 : cpu_md_bytes(&s->wei_md), used = 0;
    const int fold = s->fold_bn && !s->dc1; /* dc1 folds into its own W' */
    size_t at_w = cpu_take(&used, wb), at_f = cpu_take(&used, fold ? cpu_md_bytes(&s->wplain_md) : 0),
           at_b = cpu_take(&used, fold ? sizeof(float) * (size_t)s->n_bias : 0), at_d1 = cpu_take(&used, s->dc1_kept),
           at_u = cpu_take(&used, s->wino ? s->wf_u_bytes : 0);
    char *kept = cpu_node_keep(&s->base, used);
    s->wei_kept = kept + at_w;
    if (s->wino) s->wf_u = (float *)(kept + at_u);
    if (s->dc1) cpu_dc1_keep(&s->d1, kept + at_d1);
    if (s->fold_bn) s->wfold = (float *)(kept + at_f), s->bfold = (float *)(kept + at_b);
  } else {
    const size_t wb = cpu_md_bytes(&s->wei_md), packed = s->mm_fwd  ? cpu_mm_amx_packed_bytes(s->mm1x1.ic, s->mm1x1.oc)
                                                         : s->colmm ? s->cm.wt_bytes
                                                                    : 0;
    s->wei_off = cpu_take(k, wb > packed ? wb : packed);
    if (s->wino) s->wf_u_off = cpu_take(&fwd, s->wf_u_bytes);
  }
  if (s->base.stats_able) {
    s->stats_off = cpu_take(k, 2 * sizeof(float) * (size_t)s->mm1x1.oc);
    s->stats_work_off = cpu_take(&fwd, cpu_mm_amx_stats_bytes(s->mm1x1.oc, s->mm1x1.threads));
  }
  if (s->dc1) s->dc1_off = cpu_take(&fwd, s->dc1_fwd);
  if (s->wino) s->wf_work_off = cpu_take(&fwd, s->wf_work_bytes);
  if (s->need_dx) {
    s->dsrc_off = cpu_take(&bwd, cpu_md_bytes(&s->dsrc_md));
    if (s->reorder_wei_bd) s->wbd_off = cpu_take(&bwd, cpu_md_bytes(&s->wei_bd_md));
  }
  if (s->need_dw) {
    s->dwei_off = cpu_take(&bwd, cpu_md_bytes(&s->dwei_md));
    s->dbias_off = cpu_take(&bwd, sizeof(float) * (size_t)s->n_bias);
    if (s->reorder_src_bw) s->sbw_off = cpu_take(&bwd, cpu_md_bytes(&s->src_bw_md));
    if (s->reorder_ddst_bw) s->dbw_off = cpu_take(&bwd, cpu_md_bytes(&s->ddst_bw_md));
  }
  if (s->mm) bwd = mm_bwd;
  if (bww_bwd > bwd) bwd = bww_bwd; /* runs after backward data: the same scratch */
  p->saved_bytes = keep;
  p->fwd_scratch_bytes = fwd;
  p->bwd_scratch_bytes = bwd;
  p->absorb_consumer = s->post_add ? (s->post_relu ? 3 : 2) : s->post_relu ? 2 + s->cat : s->fold_bn;
  p->out_over_other = s->post_sum ? 2 : 0; /* the add: consumer[1] */
  /* Every weight-gradient path (oneDNN's with its reorder, conv_mm.c,
   * conv_bww_mm.c) writes the parameter gradients when told. */
  p->param_grad_overwrites = s->run_backward ? (s->has_bias ? 3u : 1u) : 0u;
}

static int conv_setup(sp_op_prep *p, conv_node *s, const cpu_conv_geom *g) {
  dnnl_data_type_t dt = p->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t src_any, wei_any, dst_any;
  s->has_bias = p->n_param > 1;
  s->run_backward = p->run_backward;
  /* Inference on fixed weights: a batch norm on running statistics right
   * after the conv is folded into it. Not after a transposed convolution:
   * oneDNN 2.6 runs its bias and post-ops as a generic pass (ResUNet-50's
   * last up-layer, bf16 b64: 32 ms plain, 1.9 s with bias and ReLU, 5.3 s
   * with the shift as a binary post-op); deconv_1x1.c's form folds it. */
  s->fold_bn = p->frozen && !p->training && !p->run_backward && !g->deconv && p->consumer[0].op == &sp_op_batchnorm &&
               p->consumer[0].n_state >= 2 && !p->consumer[0].out_plain;
  /* ... and the ReLU after that batch norm runs as the conv's post-op. */
  s->post_relu = s->fold_bn && p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain;
  /* ... or the residual add after it, and the ReLU after that. */
  s->post_add = !s->post_relu && cpu_conv_post_add_fits(p, s, dt);
  if (s->post_add) s->post_relu = p->consumer[2].op == &sp_op_relu && !p->consumer[2].out_plain;
  s->need_dx = p->run_backward && p->need_d_in[0];
  s->need_dw = p->run_backward && (p->param_grad[0] || (s->has_bias && p->param_grad[1]));
  if (cpu_md_input(&s->x_md, p, 0) || cpu_md_any(&src_any, &p->in_shape[0], dt) ||
      cpu_conv_weight_mds(p, g, &s->wplain_md, &wei_any, dt))
    return -1;
  if (p->out_plain ? cpu_md_plain(&dst_any, &p->out_shape, dnnl_f32) : cpu_md_any(&dst_any, &p->out_shape, dt))
    return -1;
  sp_shape bs = sp_shape1(p->out_shape.d[1]);
  if (cpu_md_plain(&s->bias_md, &bs, dnnl_f32)) return -1;
  s->n_bias = bs.d[0];

  /* The add as a sum post-op where the plan allows it, else as a binary one:
   * each only where a fast kernel takes it and keeps the kernel it has
   * without it. */
  for (int sum = s->post_sum; s->post_add && sum >= 0; sum--) {
    s->post_sum = sum;
    if (cpu_conv_choose_fwd(p, s, g, &src_any, &wei_any, &dst_any) == 0 && !cpu_pd_is_ref(s->fwd_pd) &&
        cpu_md_equal(cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0), &s->add_md) &&
        cpu_conv_same_kernel_without_add(p, s, g, &wei_any))
      break;
    /* No fast kernel takes the add, or only a slower one: conv + batch norm
     * alone at the end (a primitive made on the way stays with the node,
     * which frees it). */
    sp_error_clear();
    s->fwd_pd = NULL, s->fwd = NULL;
    if (sum == 0) s->post_add = s->post_relu = s->post_sum = 0;
  }
  if (!s->fwd_pd && cpu_conv_choose_fwd(p, s, g, &src_any, &wei_any, &dst_any)) return -1;
  s->src_md = *cpu_pd_md(s->fwd_pd, dnnl_query_src_md, 0);
  s->wei_md = *cpu_pd_md(s->fwd_pd, dnnl_query_weights_md, 0);
  s->dst_md = *cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0);
  s->base.out_md = s->dst_md;
  s->reorder_src = !cpu_md_equal(&s->x_md, &s->src_md);
  if (s->reorder_src && cpu_make_reorder(&s->base, &s->x_md, &s->src_md, 0, &s->re_pd[R_SRC], &s->re[R_SRC])) return -1;
  if (cpu_make_reorder(&s->base, &s->wplain_md, &s->wei_md, 0, &s->re_pd[R_WEI], &s->re[R_WEI])) return -1;

  size_t mm_bwd = 0;
  const sp_shape *ins = &p->in_shape[0], *outs = &p->out_shape;
  const cpu_mm1x1_grid grid = {ins->d[0], ins->d[2], ins->d[3], outs->d[2], outs->d[3], g->strides[0], g->strides[1]};
  const int strided = g->strides[0] > 1 || g->strides[1] > 1;
  s->mm = mm_applies(p, s, g) &&
          cpu_mm1x1_prepare(&s->mm1x1, &s->base, sp_shape_numel(outs) / outs->d[1], ins->d[1], outs->d[1], s->need_dx,
                            s->need_dw, s->has_bias, strided ? &grid : NULL, &mm_bwd) == 0;
  if (s->mm) s->need_dx = s->need_dw = 0; /* the products do both */
  /* ... and forward, where it computes the statistics of the batch norm
   * after it too (offered here, taken by that batch norm's prepare:
   * cpu_node.stats; forward stays on oneDNN if it is not). Alone the tiles
   * ran these products no faster than oneDNN's kernel on a loaded host
   * (bench/README_train.md, session 65). */
  const int stats_next = cpu_bn_stats_offer && p->training && p->consumer[0].op == &sp_op_batchnorm;
  s->mm_fwd =
      s->mm && s->mm1x1.amx_fwd && stats_next && !s->fold_bn && !s->post_relu && !s->post_add && !s->reorder_src;
  s->base.stats_able = s->mm_fwd;
  s->mm_stream =
      s->mm_fwd && cpu_mm_amx_stream && (int64_t)cpu_md_bytes(&s->dst_md) >= cpu_stream_threshold_plan(p->run_backward);
  const sp_shape *in = &p->in_shape[0], *out = &p->out_shape, *w = &p->param_shape[0];
  const cpu_conv_shape cs = {in->d[0],      in->d[2],    in->d[3],    in->d[1],      out->d[2],
                             out->d[3],     out->d[1],   w->d[2],     w->d[3],       g->strides[0],
                             g->strides[1], g->pad_l[0], g->pad_l[1], g->dil[0] + 1, g->dil[1] + 1};
  /* Frozen: the batch norm after it folds into the 1x1 form (and the ReLU). */
  const int bn_next = p->frozen && !p->training && !p->run_backward && p->consumer[0].op == &sp_op_batchnorm &&
                      p->consumer[0].n_state >= 2 && !p->consumer[0].out_plain;
  const int fold = bn_next ? 1 + (p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain) : 0;
  const int dc1 = g->deconv && !s->has_bias
                      ? cpu_dc1_prepare(&s->d1, &s->base, &cs, &s->src_md, &s->dst_md, p->frozen && !s->run_backward,
                                        fold, &s->dc1_fwd, &s->dc1_kept)
                      : 1;
  if (dc1 < 0) return -1;
  if ((s->dc1 = dc1 == 0)) s->fold_bn = fold > 0, s->post_relu = fold == 2;
  /* ... and in either form the concat after the ReLU (U-Net's skip join):
   * written in place, the skip copied after it. */
  s->cat = s->dc1 && cpu_dc1_concat_prepare(&s->d1, p, &s->base.out_md) == 0;
  /* Few output positions, many weights: forward and the input gradient as
   * im2col + matmul (conv_col_mm.c). */
  if (p->run_backward && p->bf16 && !g->deconv && g->groups == 1 && !s->has_bias && !s->fold_bn && !s->post_add &&
      cpu_md_equal(&s->x_md, &s->src_md) && cpu_md_lanes(&s->src_md) == CPU_LANES_NHWC &&
      cpu_md_lanes(&s->dst_md) == CPU_LANES_NHWC) {
    const int r = cpu_colmm_prepare(&s->cm, &s->base, &cs, s->need_dx, &s->cm_fwd, &s->cm_bwd);
    if (r < 0) return -1;
    if ((s->colmm = r == 0)) s->need_dx = 0;
  }
  size_t s2dx_bwd = s->cm_bwd, bww_bwd = 0; /* s2dx: the input gradient as a 2x2 forward convolution (conv_s2_dx.c) */
  const int s2dx = s->need_dx && !g->deconv && g->groups == 1 && cpu_md_equal(&s->x_md, &s->src_md)
                       ? cpu_s2dx_prepare(&s->s2, &s->base, &cs, &s->src_md, &s->dst_md, &s2dx_bwd)
                       : 1;
  if (s2dx < 0) return -1;
  if ((s->s2dx = s2dx == 0)) s->need_dx = 0;
  size_t dcb_bwd = 0; /* a transposed convolution's backward as 1x1 products (deconv_1x1_bwd.c) */
  const int dcb = g->deconv && !s->has_bias && (s->need_dx || s->need_dw) && !s->reorder_src
                      ? cpu_dcb_prepare(&s->db, &s->base, &cs, &s->src_md, &s->dst_md, s->need_dx, s->need_dw, &dcb_bwd)
                      : 1;
  if (dcb < 0) return -1;
  if ((s->dcb = dcb == 0)) s->need_dx = s->need_dw = 0;
  if (dcb_bwd > s2dx_bwd) s2dx_bwd = dcb_bwd;
  /* Winograd of our own where oneDNN has none: forward on the blocks it
   * chose, backward data from dY's blocks into the input's. */
  const int wf_frozen = p->frozen && !s->run_backward;
  const int wf_lanes = wino_fits(p, g, &s->src_md, &s->dst_md)                ? 8
                       : wino16_fits(p, g, &s->src_md, &s->dst_md, wf_frozen) ? 16
                                                                              : 0;
  s->wino = !s->post_add && !s->colmm && wf_lanes &&
            cpu_wino_prepare(&s->wf, in->d[0], in->d[2], in->d[3], in->d[1], out->d[1], 0, wf_frozen, wf_lanes,
                             &s->wf_u_bytes, &s->wf_work_bytes) == 0;
  if (!s->wino && !s->post_add && wino_s2_fits(p, g, &s->src_md, &s->dst_md))
    s->wino = cpu_wino_s2_prepare(&s->wf, in->d[0], in->d[2], in->d[3], in->d[1], out->d[1], 0, &s->wf_u_bytes,
                                  &s->wf_work_bytes) == 0;
  const int wb_lanes = wino_fits(p, g, &s->x_md, &s->dst_md)                         ? 8
                       : cpu_wino16_dx && wino16_fits(p, g, &s->x_md, &s->dst_md, 0) ? 16
                                                                                     : 0;
  if (s->need_dx && ((wb_lanes && cpu_wino_prepare(&s->wb, in->d[0], in->d[2], in->d[3], out->d[1], in->d[1], 1, 0,
                                                   wb_lanes, &s->wb_u_bytes, &s->wb_work_bytes) == 0) ||
                     (wino_s2_fits(p, g, &s->x_md, &s->dst_md) &&
                      cpu_wino_s2_prepare(&s->wb, in->d[0], in->d[2], in->d[3], in->d[1], out->d[1], 1, &s->wb_u_bytes,
                                          &s->wb_work_bytes) == 0))) {
    s->wino_dx = 1, s->need_dx = 0;
    size_t used = 0;
    cpu_take(&used, s->wb_u_bytes);
    s->wb_work_off = cpu_take(&used, s->wb_work_bytes);
    if (used > s2dx_bwd) s2dx_bwd = used; /* runs before the weight gradient: the same scratch */
  }
  /* ... and the weight gradient from the input as forward read it (no bias:
   * its gradient would need a pass of its own). */
  if (s->need_dw && !s->has_bias && p->param_grad[0] && wino_fits(p, g, &s->src_md, &s->dst_md) &&
      cpu_wino_dw_prepare(&s->wd, in->d[0], in->d[2], in->d[3], in->d[1], out->d[1], &s->wd_work_bytes) == 0) {
    s->wino_dw = 1, s->need_dw = 0;
    if (s->wd_work_bytes > s2dx_bwd) s2dx_bwd = s->wd_work_bytes; /* after backward data: the same scratch */
  }
  s2dw_setup(p, s, g, &s2dx_bwd);
  if (s->need_dw && bww_applies(p, s, g)) {
    s->bww = cpu_bww_mm_prepare(&s->bwwmm, &s->base, &cs, &bww_bwd) == 0;
    if (s->bww) s->need_dw = 0; /* the products do it */
  }
  if (s->need_dw && dw_blocked_setup(p, s, g)) {
    s->dw_blocked = 1;
    s->need_dw = 0;
    /* After backward data, like the products: the same scratch from 0. */
    s->dwb_threads = omp_get_max_threads();
    bww_bwd = cpu_dw_blocked_scratch_bytes(&s->dwb, s->dwb_threads);
  }
  if (choose_backward(s, g, &src_any, &wei_any)) return -1;
  size_t dxf_bwd = 0; /* in place of backward data where the gradient is added (known at bind) */
  const int dxf = s->need_dx && !g->deconv && g->groups == 1
                      ? cpu_dxfwd_prepare(&s->dxf, &s->base, &cs, &s->x_md, &s->dst_md, &dxf_bwd)
                      : 1;
  if (dxf < 0) return -1;
  s->dxfwd = dxf == 0;
  if (dxf_bwd > s2dx_bwd) s2dx_bwd = dxf_bwd;
  place_buffers(p, s, mm_bwd, bww_bwd > s2dx_bwd ? bww_bwd : s2dx_bwd); /* one after the other, same scratch */
  cpu_report(p, &s->base);
  return 0;
}

int cpu_conv_prepare(sp_op_prep *p) {
  if (p->in_shape[0].ndim != 4) return cpu_adapter_prepare(p);
  int r = cpu_conv_stem_bn_prepare(p); /* f32 training: the stem with its batch norm and ReLU */
  if (r <= 0) return r;
  r = cpu_conv_stem_prepare(p); /* bf16 training, on the grey or colour image */
  if (r <= 0) return r;
  r = cpu_conv_narrow_prepare(p); /* inference, 3x3 on a narrow channels-last input */
  if (r <= 0) return r;
  r = cpu_conv_softargmax_prepare(p); /* a heatmap head with soft-argmax after it */
  if (r <= 0) return r;
  r = cpu_conv_mid8_prepare(p); /* f32, 3x3 between 8-channel maps in 16-channel blocks */
  if (r <= 0) return r;
  r = cpu_conv_in8s2_prepare(p); /* f32 training, 3x3 stride 2 from 8 channels-last channels */
  if (r <= 0) return r;
  cpu_conv_geom g;
  cpu_conv_geom_of_conv(p, &g);
  conv_node *s = cpu_node_new(sizeof *s, &conv_vt);
  if (conv_setup(p, s, &g) == 0) return 0;
  if (g.alg[0] != dnnl_convolution_direct) {
    /* No Winograd kernel for these layouts or post-ops: the direct ones. */
    cpu_node_free(&s->base);
    sp_error_clear();
    g.alg[0] = g.alg[1] = g.alg[2] = dnnl_convolution_direct;
    s = cpu_node_new(sizeof *s, &conv_vt);
    if (conv_setup(p, s, &g) == 0) return 0;
  }
  return cpu_fallback(p, &s->base);
}

int cpu_deconv_prepare(sp_op_prep *p) {
  const sp_conv_transpose2d_attr *at = p->attr;
  if (p->in_shape[0].ndim != 4 || at->groups != 1) return cpu_adapter_prepare(p);
  const int r = cpu_deconv_mm_prepare(p); /* kernel = stride, bf16 channels-last: as matmuls */
  if (r <= 0) return r;
  cpu_conv_geom g;
  cpu_conv_geom_of_deconv(p, &g);
  conv_node *s = cpu_node_new(sizeof *s, &conv_vt);
  if (conv_setup(p, s, &g) != 0) return cpu_fallback(p, &s->base);
  return 0;
}
#endif
