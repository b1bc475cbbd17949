/* A convolution node's forward primitive (conv.c): which oneDNN kernel and
 * layouts, with the post-ops a frozen plan folds in (ReLU, a residual add),
 * taken only where oneDNN keeps a fast kernel for them. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/conv_node.h"
#include "backends/cpu/cpu.h"
#include "ops/ops.h"

/* Forward from `src` into channels-last (its dtype), taken only where oneDNN runs
 * it on a brgemm kernel (its fast channels-last one): cpu_adopt's result
 * then, else 1. */
static int try_channels_last(sp_op_prep *p, conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src,
                             const dnnl_memory_desc_t *wei_any, const dnnl_memory_desc_t *dst_any,
                             const_dnnl_post_ops_t po) {
  dnnl_convolution_desc_t d;
  dnnl_memory_desc_t dst_cl;
  dnnl_primitive_desc_t pd;
  const dnnl_memory_desc_t *bias = s->has_bias || s->fold_bn ? &s->bias_md : NULL;
  dnnl_prop_kind_t prop = p->training ? dnnl_forward_training : dnnl_forward_inference;
  if (dnnl_memory_desc_init_by_tag(&dst_cl, 4, dst_any->dims, src->data_type, dnnl_acdb) != dnnl_success ||
      cpu_conv_init_fwd(g, &d, prop, src, wei_any, bias, &dst_cl) != 0 || cpu_pd(&d, NULL, po, &pd) != 0)
    return 1;
  if (!strstr(cpu_pd_impl(pd), "brg")) {
    dnnl_primitive_desc_destroy(pd);
    return 1;
  }
  s->fwd_pd = pd;
  return cpu_adopt(&s->base, pd, &s->fwd);
}

/* Forward: the input's own layout if oneDNN has a fast kernel for it. */
static int choose_fwd_with(sp_op_prep *p, conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src_any,
                           const dnnl_memory_desc_t *wei_any, const dnnl_memory_desc_t *dst_any,
                           const_dnnl_post_ops_t po) {
  dnnl_convolution_desc_t d;
  dnnl_prop_kind_t prop = p->training ? dnnl_forward_training : dnnl_forward_inference;
  const dnnl_memory_desc_t *bias = s->has_bias || s->fold_bn ? &s->bias_md : NULL;
  dnnl_memory_desc_t x_dt;
  if (!cpu_md_is_plain(&s->x_md) && s->x_md.data_type == src_any->data_type) {
    x_dt = s->x_md;
    dnnl_primitive_desc_t pd;
    if (cpu_conv_init_fwd(g, &d, prop, &x_dt, wei_any, bias, dst_any) == 0 && cpu_pd(&d, NULL, po, &pd) == 0) {
      if (!cpu_pd_is_ref(pd)) {
        s->fwd_pd = pd;
        return cpu_adopt(&s->base, pd, &s->fwd);
      }
      dnnl_primitive_desc_destroy(pd);
    }
  }
  /* Channels-last input of fewer than 16 channels (vgg-face's second layer,
   * after the channels-last stem): channels-last out if oneDNN has a brgemm
   * kernel for it. Without AMX its own choice reads plain NCHW (the input
   * reordered there in forward, its gradient back from 16-channel blocks in
   * backward: on Zen 5, bf16 b64, 5.4 of the layer's 12.8 ms a step). */
  if (s->x_md.data_type == src_any->data_type && cpu_md_lanes(&s->x_md) == CPU_LANES_NHWC && src_any->dims[1] < 16 &&
      !p->out_plain) {
    int r = try_channels_last(p, s, g, &s->x_md, wei_any, dst_any, po);
    if (r <= 0) return r;
  }
  /* bf16 on a plain input (the image): channels-last in and out if oneDNN
   * has a brgemm kernel for it. Its own choice there is a blocked layout on
   * a kernel without AMX, whose output the next (channels-last, AMX) layer
   * then reorders back, both ways, every step (vgg-face: 86 of 585 ms).
   * f32 too where the output has fewer than 16 channels: in 16-channel
   * blocks half of it would be padding, which the batch norm after it
   * walks and the next layer reorders away (vgg-face f32 on Zen 5, its
   * first ten nodes: 33-39 ms a step against 26-29 channels-last). */
  if ((src_any->data_type == dnnl_bf16 || dst_any->dims[1] < 16) && cpu_md_is_plain(&s->x_md) && !p->out_plain) {
    dnnl_memory_desc_t src_cl;
    int r = dnnl_memory_desc_init_by_tag(&src_cl, 4, src_any->dims, src_any->data_type, dnnl_acdb) == dnnl_success
                ? try_channels_last(p, s, g, &src_cl, wei_any, dst_any, po)
                : 1;
    if (r <= 0) return r;
  }
  /* f32 inference on the plain image, 3x3 kernels: oneDNN's direct kernel
   * reads NCHW as it is and writes the 16-channel blocks the next layers
   * use. Its own choice is channels-last in and out: the image reordered
   * before and the output after (ResUNet-50's 3 -> 32 stem at batch 64 on
   * Zen 5: 14.5 ms for the three standalone against 5.4; in the step the
   * stem and the layer after it 36.7-38.8 -> 27.8-29.8 ms). ResNet-50's 7x7
   * stem measured the same either way. */
  if (src_any->data_type == dnnl_f32 && !p->run_backward && cpu_md_is_plain(&s->x_md) && src_any->dims[1] < 16 &&
      wei_any->dims[2] <= 3 && wei_any->dims[3] <= 3 && !p->out_plain) {
    dnnl_primitive_desc_t pd;
    if (cpu_conv_init_fwd(g, &d, prop, &s->x_md, wei_any, bias, dst_any) == 0 && cpu_pd(&d, NULL, po, &pd) == 0) {
      if (!cpu_pd_is_ref(pd) && cpu_md_lanes(cpu_pd_md(pd, dnnl_query_dst_md, 0)) == 16) {
        s->fwd_pd = pd;
        return cpu_adopt(&s->base, pd, &s->fwd);
      }
      dnnl_primitive_desc_destroy(pd);
    }
    sp_error_clear();
  }
  if (cpu_conv_init_fwd(g, &d, prop, src_any, wei_any, bias, dst_any)) return -1;
  return cpu_make(&s->base, &d, NULL, po, &s->fwd_pd, &s->fwd);
}

/* The forward primitive, with the ReLU as an eltwise post-op when the
 * frozen plan folds conv + batch norm + ReLU into one node. */
int cpu_conv_choose_fwd(sp_op_prep *p, conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src_any,
                        const dnnl_memory_desc_t *wei_any, const dnnl_memory_desc_t *dst_any) {
  if (!s->post_relu && !s->post_add) return choose_fwd_with(p, s, g, src_any, wei_any, dst_any, NULL);
  dnnl_post_ops_t po;
  DNNL_TRY(dnnl_post_ops_create(&po));
  dnnl_status_t st = dnnl_success;
  if (s->post_add)
    st =
        s->post_sum ? dnnl_post_ops_append_sum(po, 1.0f) : dnnl_post_ops_append_binary(po, dnnl_binary_add, &s->add_md);
  if (st == dnnl_success && s->post_relu) st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
  /* With the add, the output takes the other input's layout (the add's
   * output as it would have been), which the binary post-op reads alike. */
  int rc = st == dnnl_success ? choose_fwd_with(p, s, g, src_any, wei_any, s->post_add ? &s->add_md : dst_any, po)
                              : cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_post_ops_append", st);
  dnnl_post_ops_destroy(po);
  return rc;
}

/* The residual as a sum post-op, in place over the add's other input where
 * the plan allows it (sp_op_consumer.other_overwritable): the binary
 * post-op wrote a fresh buffer, which the caches first read in. Frozen
 * ResUNet-50 f32, batch 64 (Xeon without AMX, 2 threads, the 16 encoder
 * conv3 nodes of a profile, 3 alternating pairs): 355-434 -> 342-347 ms. */
int cpu_conv_use_post_sum = 1;

/* Frozen inference: conv, its folded batch norm, then a residual add whose
 * other input is ready in a layout of the conv's dtype, and maybe a ReLU:
 * the add (and ReLU) as post-ops, so the block's output is written once
 * instead of conv out, add in/out and ReLU in/out (resunet50 bf16 batch 64:
 * the separate adds took 100 of 1400 ms). */
int cpu_conv_post_add_fits(const sp_op_prep *p, conv_node *s, dnnl_data_type_t dt) {
  if (!s->fold_bn || p->consumer[1].op != &sp_op_add || p->consumer[1].n_in != 2 || p->consumer[1].out_plain ||
      !sp_shape_equal(&p->consumer[1].other_shape, &p->out_shape))
    return 0;
  if (p->consumer[1].other_layout)
    s->add_md = *(const dnnl_memory_desc_t *)p->consumer[1].other_layout;
  else if (cpu_md_plain(&s->add_md, &p->consumer[1].other_shape, cpu_dt(p->consumer[1].other_dtype)))
    return 0;
  if (s->add_md.data_type != dt) return 0;
  s->add_other = p->consumer[1].other;
  s->post_sum = cpu_conv_use_post_sum && p->consumer[1].other_overwritable;
  return 1;
}

/* The add as a post-op saves a pass over the block's output, but with AMX
 * oneDNN 2.6 runs a 1x1 convolution with a binary post-op on an older,
 * slower kernel than its brgemm one (resunet50 bf16 inference with the adds
 * fused into its 1x1 convs: 59 / 63 images/s at batch 1 / 64; apart: 65 /
 * 68). So the add is taken only where the convolution keeps the kernel it
 * has without it. */
int cpu_conv_same_kernel_without_add(sp_op_prep *p, const conv_node *s, const cpu_conv_geom *g,
                                     const dnnl_memory_desc_t *wei_any) {
  dnnl_convolution_desc_t d;
  dnnl_primitive_desc_t pd;
  dnnl_prop_kind_t prop = p->training ? dnnl_forward_training : dnnl_forward_inference;
  if (cpu_conv_init_fwd(g, &d, prop, cpu_pd_md(s->fwd_pd, dnnl_query_src_md, 0), wei_any, &s->bias_md, &s->add_md) ||
      cpu_pd(&d, NULL, NULL, &pd)) {
    sp_error_clear();
    return 1; /* no other kernel to compare with */
  }
  const int same = strcmp(cpu_pd_impl(pd), cpu_pd_impl(s->fwd_pd)) == 0;
  dnnl_primitive_desc_destroy(pd);
  return same;
}
#endif
