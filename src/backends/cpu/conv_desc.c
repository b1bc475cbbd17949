/* oneDNN's descriptors of a convolution or transposed convolution node
 * (conv.c): its geometry from the op's attributes and shapes, the forward
 * and backward operation descriptors, and the weights' plain and "any"
 * memory descriptors. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "ops/ops.h"

/* Winograd for f32 3x3 stride-1 convolutions where it pays (conv_winograd.c). */
static void choose_algorithms(const sp_op_prep *p, cpu_conv_geom *g) {
  const int w = cpu_conv_winograd_choice(p, g->groups, g->strides, g->dil, g->pad_l, g->pad_r);
  for (int i = 0; i < 3; i++) g->alg[i] = (w >> i) & 1 ? dnnl_convolution_winograd : dnnl_convolution_direct;
}

void cpu_conv_geom_of_conv(const sp_op_prep *p, cpu_conv_geom *g) {
  const sp_conv2d_attr *at = p->attr;
  *g = (cpu_conv_geom){0,
                       at->groups,
                       {at->stride_h, at->stride_w},
                       {at->dil_h - 1, at->dil_w - 1},
                       {at->pad_h, at->pad_w},
                       {at->pad_h, at->pad_w},
                       {dnnl_convolution_direct, dnnl_convolution_direct, dnnl_convolution_direct}};
  /* oneDNN wants the right padding that reproduces the output size exactly;
   * PyTorch's floor can drop input rows, which a smaller right pad expresses. */
  for (int i = 0; i < 2; i++) {
    int64_t in = p->in_shape[0].d[2 + i], out = p->out_shape.d[2 + i], k = p->param_shape[0].d[2 + i];
    g->pad_r[i] = (out - 1) * g->strides[i] + (k - 1) * (g->dil[i] + 1) + 1 - in - g->pad_l[i];
  }
  choose_algorithms(p, g);
}

void cpu_conv_geom_of_deconv(const sp_op_prep *p, cpu_conv_geom *g) {
  const sp_conv_transpose2d_attr *at = p->attr;
  *g = (cpu_conv_geom){1,
                       1,
                       {at->stride_h, at->stride_w},
                       {at->dil_h - 1, at->dil_w - 1},
                       {at->pad_h, at->pad_w},
                       {at->pad_h - at->out_pad_h, at->pad_w - at->out_pad_w},
                       {dnnl_deconvolution_direct, dnnl_deconvolution_direct, dnnl_deconvolution_direct}};
}

int cpu_conv_init_fwd(const cpu_conv_geom *g, dnnl_convolution_desc_t *d, dnnl_prop_kind_t prop,
                      const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                      const dnnl_memory_desc_t *dst) {
  if (g->deconv)
    DNNL_TRY(dnnl_dilated_deconvolution_forward_desc_init(d, prop, dnnl_deconvolution_direct, src, wei, bias, dst,
                                                          g->strides, g->dil, g->pad_l, g->pad_r));
  else
    DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(d, prop, g->alg[0], src, wei, bias, dst, g->strides, g->dil,
                                                        g->pad_l, g->pad_r));
  return 0;
}

int cpu_conv_init_bwd_data(const cpu_conv_geom *g, dnnl_convolution_desc_t *d, const dnnl_memory_desc_t *dsrc,
                           const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *ddst) {
  if (g->deconv)
    DNNL_TRY(dnnl_dilated_deconvolution_backward_data_desc_init(d, dnnl_deconvolution_direct, dsrc, wei, ddst,
                                                                g->strides, g->dil, g->pad_l, g->pad_r));
  else
    DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(d, g->alg[1], dsrc, wei, ddst, g->strides, g->dil,
                                                              g->pad_l, g->pad_r));
  return 0;
}

int cpu_conv_init_bwd_wei(const cpu_conv_geom *g, dnnl_convolution_desc_t *d, const dnnl_memory_desc_t *src,
                          const dnnl_memory_desc_t *dwei, const dnnl_memory_desc_t *dbias,
                          const dnnl_memory_desc_t *ddst) {
  if (g->deconv)
    DNNL_TRY(dnnl_dilated_deconvolution_backward_weights_desc_init(d, dnnl_deconvolution_direct, src, dwei, dbias, ddst,
                                                                   g->strides, g->dil, g->pad_l, g->pad_r));
  else
    DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(d, g->alg[2], src, dwei, dbias, ddst, g->strides,
                                                                 g->dil, g->pad_l, g->pad_r));
  return 0;
}

/* Plain f32 weights as the graph stores them, in oneDNN's dims: conv
 * [O, I/g, kh, kw] (goihw when grouped); transposed conv stores [I, O, kh, kw],
 * which is oneDNN's (O, I, kh, kw) in iohw order. */
int cpu_conv_weight_mds(const sp_op_prep *p, const cpu_conv_geom *g, dnnl_memory_desc_t *plain, dnnl_memory_desc_t *any,
                        dnnl_data_type_t dt) {
  const sp_shape *w = &p->param_shape[0];
  dnnl_dims_t d;
  if (g->deconv) {
    d[0] = w->d[1], d[1] = w->d[0], d[2] = w->d[2], d[3] = w->d[3];
    DNNL_TRY(dnnl_memory_desc_init_by_tag(plain, 4, d, dnnl_f32, dnnl_iohw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(any, 4, d, dt, dnnl_format_tag_any));
  } else if (g->groups > 1) {
    d[0] = g->groups, d[1] = w->d[0] / g->groups, d[2] = w->d[1], d[3] = w->d[2], d[4] = w->d[3];
    DNNL_TRY(dnnl_memory_desc_init_by_tag(plain, 5, d, dnnl_f32, dnnl_goihw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(any, 5, d, dt, dnnl_format_tag_any));
  } else {
    d[0] = w->d[0], d[1] = w->d[1], d[2] = w->d[2], d[3] = w->d[3];
    DNNL_TRY(dnnl_memory_desc_init_by_tag(plain, 4, d, dnnl_f32, dnnl_oihw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(any, 4, d, dt, dnnl_format_tag_any));
  }
  return 0;
}
#endif
