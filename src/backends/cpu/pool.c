/* Spatial resizing ops on oneDNN: max/avg/global-avg pooling and 2x
 * upsampling (resampling), in the input's layout: unary nodes (unary.c)
 * whose descriptors come from a resize_geom. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "ops/ops.h"

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
    DNNL_TRY(
        dnnl_pooling_v2_backward_desc_init(d, g->alg, dsrc, ddst, g->strides, g->kernel, g->dil, g->pad_l, g->pad_r));
  else
    DNNL_TRY(dnnl_resampling_backward_desc_init(d, g->alg, g->factors, dsrc, ddst));
  return 0;
}

static int resize_setup(sp_op_prep *p, cpu_unary *s, const resize_geom *g) {
  union {
    dnnl_pooling_v2_desc_t pool;
    dnnl_resampling_desc_t resample;
  } d;
  dnnl_memory_desc_t dst_any;
  if (cpu_md_input(&s->src_md, p, 0)) return -1;
  if (p->out_plain ? cpu_md_plain(&dst_any, &p->out_shape, dnnl_f32)
                   : cpu_md_any(&dst_any, &p->out_shape, s->src_md.data_type))
    return -1;
  dnnl_prop_kind_t prop = p->run_backward ? dnnl_forward_training : dnnl_forward_inference;
  if (init_fwd(g, &d, prop, &s->src_md, &dst_any) || cpu_make(&s->base, &d, NULL, NULL, &s->fwd_pd, &s->fwd)) return -1;
  cpu_unary_forward_made(s);
  if (p->run_backward && init_bwd(g, &d, &s->src_md, &s->dst_md)) return -1;
  return cpu_unary_finish(p, s, p->run_backward ? &d : NULL);
}

static int resize_prepare(sp_op_prep *p, const resize_geom *g) {
  if (p->in_shape[0].ndim != 4) return cpu_adapter_prepare(p);
  cpu_unary *s = cpu_unary_new(p);
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
  const int own = cpu_maxpool_own_prepare(p); /* channels-last: maxpool_cl.c */
  if (own <= 0) return own;
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
