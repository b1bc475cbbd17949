/* Spatial resizing ops on oneDNN: max/avg/global-avg pooling and 2x
 * upsampling (resampling), in the input's layout. They share one node type:
 * a forward primitive, a backward primitive writing the input gradient
 * (directly when fresh, else through scratch and an accumulating reorder),
 * and for max pooling the workspace (argmax) kept in the saved region. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "ops/ops.h"

typedef struct {
  cpu_node base;
  int run_backward;
  dnnl_memory_desc_t src_md, dst_md, ws_md;
  int has_ws;
  dnnl_primitive_desc_t fwd_pd, bwd_pd, acc_pd;
  dnnl_primitive_t fwd, bwd, acc;
  size_t dsrc_off;
  cpu_exec f, b, b_out;
} resize_node;

static void resize_forward(cpu_node *n, const sp_op_args *a) { cpu_exec_run(&((resize_node *)n)->f); }

static void resize_backward(cpu_node *n, const sp_op_args *a) {
  resize_node *s = (resize_node *)n;
  if (!a->d_in[0]) return;
  cpu_exec_run(&s->b);
  cpu_exec_run(&s->b_out);
}

static int resize_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  resize_node *s = (resize_node *)n;
  cpu_exec_init(&s->f, s->fwd);
  if (cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->src_md, a->in[0]->data) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->dst_md, a->out->data) ||
      (s->has_ws && cpu_exec_arg(&s->f, n, DNNL_ARG_WORKSPACE, &s->ws_md, a->saved)) ||
      cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs))
    return -1;
  if (!s->run_backward || !a->d_in[0]) return 0;
  int fresh = (a->d_in_fresh & 1u) != 0;
  void *dsrc = fresh ? a->d_in[0]->data : bs + s->dsrc_off;
  cpu_exec_init(&s->b, s->bwd);
  if (cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_DST, &s->dst_md, a->d_out->data) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_SRC, &s->src_md, dsrc) ||
      (s->has_ws && cpu_exec_arg(&s->b, n, DNNL_ARG_WORKSPACE, &s->ws_md, a->saved)) ||
      cpu_exec_scratchpad(&s->b, n, s->bwd_pd, bs))
    return -1;
  if (fresh) cpu_exec_init(&s->b_out, NULL);
  else if (cpu_bind_reorder(&s->b_out, n, s->acc_pd, s->acc, dsrc, a->d_in[0]->data, bs)) return -1;
  return 0;
}

static const cpu_vt resize_vt = {resize_forward, resize_backward, resize_bind, NULL};

/* What differs between pooling and resampling: how the descriptors are made. */
typedef struct {
  int pool;
  dnnl_alg_kind_t alg;
  dnnl_dims_t strides, kernel, dil, pad_l, pad_r;
  float factors[2];
} resize_geom;

static int init_fwd(const resize_geom *g, void *d, dnnl_prop_kind_t prop, const dnnl_memory_desc_t *src,
                    const dnnl_memory_desc_t *dst) {
  if (g->pool)
    DNNL_TRY(dnnl_pooling_v2_forward_desc_init(d, prop, g->alg, src, dst, g->strides, g->kernel, g->dil, g->pad_l,
                                               g->pad_r));
  else
    DNNL_TRY(dnnl_resampling_forward_desc_init(d, prop, g->alg, g->factors, src, dst));
  return 0;
}

static int init_bwd(const resize_geom *g, void *d, const dnnl_memory_desc_t *dsrc, const dnnl_memory_desc_t *ddst) {
  if (g->pool)
    DNNL_TRY(dnnl_pooling_v2_backward_desc_init(d, g->alg, dsrc, ddst, g->strides, g->kernel, g->dil, g->pad_l,
                                                g->pad_r));
  else
    DNNL_TRY(dnnl_resampling_backward_desc_init(d, g->alg, g->factors, dsrc, ddst));
  return 0;
}

static int resize_setup(sp_op_prep *p, resize_node *s, const resize_geom *g) {
  union {
    dnnl_pooling_v2_desc_t pool;
    dnnl_resampling_desc_t resample;
  } d;
  dnnl_memory_desc_t dst_any;
  s->run_backward = p->run_backward;
  if (cpu_md_input(&s->src_md, p, 0)) return -1;
  if (p->out_plain ? cpu_md_plain(&dst_any, &p->out_shape, dnnl_f32)
                   : cpu_md_any(&dst_any, &p->out_shape, s->src_md.data_type))
    return -1;
  dnnl_prop_kind_t prop = p->run_backward ? dnnl_forward_training : dnnl_forward_inference;
  if (init_fwd(g, &d, prop, &s->src_md, &dst_any) || cpu_make(&s->base, &d, NULL, NULL, &s->fwd_pd, &s->fwd)) return -1;
  s->dst_md = *cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0);
  s->base.out_md = s->dst_md;
  const dnnl_memory_desc_t *ws = cpu_pd_md(s->fwd_pd, dnnl_query_workspace_md, 0);
  s->has_ws = ws && cpu_md_bytes(ws) > 0;
  if (s->has_ws) s->ws_md = *ws;
  size_t bwd = 0;
  if (p->run_backward) {
    if (init_bwd(g, &d, &s->src_md, &s->dst_md) || cpu_make(&s->base, &d, s->fwd_pd, NULL, &s->bwd_pd, &s->bwd) ||
        cpu_make_reorder(&s->base, &s->src_md, &s->src_md, 1, &s->acc_pd, &s->acc))
      return -1;
    bwd = cpu_scratchpad_bytes(s->bwd_pd);
    if (cpu_scratchpad_bytes(s->acc_pd) > bwd) bwd = cpu_scratchpad_bytes(s->acc_pd);
    s->dsrc_off = cpu_take(&bwd, cpu_md_bytes(&s->src_md));
  }
  p->saved_bytes = s->has_ws ? cpu_md_bytes(&s->ws_md) : 0;
  p->fwd_scratch_bytes = cpu_scratchpad_bytes(s->fwd_pd);
  p->bwd_scratch_bytes = bwd;
  cpu_report(p, &s->base);
  return 0;
}

static int resize_prepare(sp_op_prep *p, const resize_geom *g) {
  if (p->in_shape[0].ndim != 4) return cpu_adapter_prepare(p);
  resize_node *s = cpu_node_new(sizeof *s, &resize_vt);
  if (resize_setup(p, s, g) != 0) return cpu_fallback(p, &s->base);
  return 0;
}

/* Right padding that yields the planned output size (covers ceil_mode). */
static void pool_geom(const sp_op_prep *p, const sp_pool2d_attr *at, resize_geom *g) {
  int64_t k[2] = {at->kernel_h, at->kernel_w}, st[2] = {at->stride_h, at->stride_w}, pd[2] = {at->pad_h, at->pad_w};
  g->pool = 1;
  for (int i = 0; i < 2; i++) {
    g->strides[i] = st[i], g->kernel[i] = k[i], g->dil[i] = 0, g->pad_l[i] = pd[i];
    g->pad_r[i] = (p->out_shape.d[2 + i] - 1) * st[i] + k[i] - p->in_shape[0].d[2 + i] - pd[i];
  }
}

int cpu_maxpool_prepare(sp_op_prep *p) {
  resize_geom g;
  pool_geom(p, p->attr, &g);
  g.alg = dnnl_pooling_max;
  return resize_prepare(p, &g);
}

int cpu_avgpool_prepare(sp_op_prep *p) {
  const sp_pool2d_attr *at = p->attr;
  /* PyTorch's divisor for windows that ceil_mode adds past the padded edge
   * differs from oneDNN's; those run the reference. */
  if (at->ceil_mode) return cpu_adapter_prepare(p);
  resize_geom g;
  pool_geom(p, at, &g);
  g.alg = at->count_include_pad ? dnnl_pooling_avg_include_padding : dnnl_pooling_avg_exclude_padding;
  return resize_prepare(p, &g);
}

int cpu_global_avgpool_prepare(sp_op_prep *p) {
  resize_geom g = {1, dnnl_pooling_avg_exclude_padding, {1, 1}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}};
  if (p->in_shape[0].ndim != 4) return cpu_adapter_prepare(p);
  g.kernel[0] = p->in_shape[0].d[2];
  g.kernel[1] = p->in_shape[0].d[3];
  return resize_prepare(p, &g);
}

int cpu_upsample_prepare(sp_op_prep *p) {
  const sp_upsample_attr *at = p->attr;
  resize_geom g = {0};
  g.alg = at->bilinear ? dnnl_resampling_linear : dnnl_resampling_nearest;
  g.factors[0] = g.factors[1] = (float)at->scale;
  return resize_prepare(p, &g);
}
#endif
