/* The input gradient of a 1x1 stride-1 convolution (f32, or bf16 in
 * channel blocks) that adds onto a
 * gradient already there, as a forward convolution with a sum post-op:
 *
 *   dX[n, ic, p] += sum over oc of dY[n, oc, p] W[oc, ic]
 *
 * is the 1x1 convolution of dY (OC channels in, IC out) with W^T.
 *
 * Where: a value read by two layers, the second of whose backward passes
 * adds its gradient onto the first's. In a ResNet that is every block's
 * input (read by conv1 and by the residual add or the shortcut), and in
 * ResUNet's decoder every block's concatenated input (conv1 and the 1x1
 * shortcut).
 *
 * Why: oneDNN 2.6's backward-data convolutions take no sum post-op, so that
 * gradient went to scratch and an accumulating reorder added it in: its
 * generic `simple:any` kernel, about 28 GB/s, 52 ms of the f32 resunet50
 * b16 step (2260 ms). Forward kernels take the sum: the gradient is written
 * once, added as it is stored. Per call (Xeon with AMX, 2 threads, nChw16c,
 * caches flushed, ms; backward data + the reorder -> forward with the sum
 * + W^T's reorder):
 *
 *   batch 16, 256 -> 64 at 56x56     5.23 + 5.41 -> 5.86 + 0.10
 *   batch 16, 1024 -> 256 at 14x14   4.58 + 1.47 -> 4.79 + 0.24
 *   batch 16, 2048 -> 512 at 7x7     5.15 + 0.75 -> 5.13 + 0.56
 *   batch 16, 384 -> 128 at 56x56   13.89 + 8.14 -> 14.96 + 0.12
 *   batch 16, 32 -> 8 at 224x224     7.04 + 10.22 -> 7.31 + 0.02
 *
 * A gradient written fresh keeps backward data, which reads the forward's
 * weights as they are (no W^T to build, and no faster kernel here).
 *
 * W^T: the plain master weights [OC, IC] read as [IC, OC] through strides
 * (oneDNN's iohw), reordered once a step into the primitive's blocks, in
 * place of backward data's own weight reorder.
 *
 * bf16: plans with AMX run 1x1 backward as matrix products (conv_mm.c) on
 * channels-last; without AMX oneDNN picks 16-channel blocks and the same
 * sums arise. With ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 standing in for such
 * a machine, resunet50 bf16 b16's reorders went from 71-77 to 31-35 ms a
 * step. The sum is one bf16 rounding of the f32 product plus dX (backward
 * data + the reorder rounded twice). */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"

int cpu_conv_use_dx_fwd = 1;
long cpu_dxfwd_calls;

static int fits(const cpu_conv_shape *c, const dnnl_memory_desc_t *x_md, const dnnl_memory_desc_t *dy_md) {
  return cpu_conv_use_dx_fwd && (x_md->data_type == dnnl_f32 || x_md->data_type == dnnl_bf16) &&
         dy_md->data_type == x_md->data_type && !cpu_md_is_plain(x_md) && c->kh == 1 && c->kw == 1 && c->sh == 1 &&
         c->sw == 1 && c->pt == 0 && c->pl == 0 && c->ih == c->oh && c->iw == c->ow;
}

int cpu_dxfwd_prepare(cpu_dxfwd *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *x_md,
                      const dnnl_memory_desc_t *dy_md, size_t *bwd_scratch) {
  memset(m, 0, sizeof *m);
  if (!fits(c, x_md, dy_md)) return 1;
  const dnnl_dims_t wt = {c->ic, c->oc, 1, 1}, one = {1, 1}, zero = {0, 0};
  dnnl_memory_desc_t w_any;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->wt_plain_md, 4, wt, dnnl_f32, dnnl_iohw));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, 4, wt, x_md->data_type, dnnl_format_tag_any));
  m->dy_md = *dy_md, m->dx_md = *x_md;
  dnnl_convolution_desc_t d;
  DNNL_TRY(dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct, &m->dy_md, &w_any,
                                              NULL, &m->dx_md, one, zero, zero));
  dnnl_post_ops_t po;
  DNNL_TRY(dnnl_post_ops_create(&po));
  const dnnl_status_t st = dnnl_post_ops_append_sum(po, 1.0f);
  const int made = st == dnnl_success && cpu_pd(&d, NULL, po, &m->pd) == 0;
  dnnl_post_ops_destroy(po);
  if (!made) return sp_error_clear(), 1;
  /* Only a real kernel on exactly these layouts (the reference one, or a
   * layout of its own for dX, would cost more than the reorder saves). */
  if (cpu_pd_is_ref(m->pd) || !cpu_md_equal(cpu_pd_md(m->pd, dnnl_query_dst_md, 0), x_md) ||
      !cpu_md_equal(cpu_pd_md(m->pd, dnnl_query_src_md, 0), dy_md))
    return cpu_pd_decline(&m->pd);
  size_t used;
  if (cpu_adopt_with_weights(n, m->pd, &m->prim, &m->wt_plain_md, &m->wt_md, &m->re_pd, &m->re, &used)) return -1;
  m->wt_off = cpu_take(&used, cpu_md_bytes(&m->wt_md));
  *bwd_scratch = used;
  return 0;
}

int cpu_dxfwd_bind(cpu_dxfwd *m, cpu_node *n, const float *w, const void *dy, void *dx, char *bs) {
  if (cpu_bind_reorder(&m->wt_re, n, m->re_pd, m->re, (void *)w, bs + m->wt_off, bs)) return -1;
  cpu_exec_init(&m->conv, m->prim);
  return cpu_exec_arg(&m->conv, n, DNNL_ARG_SRC, &m->dy_md, (void *)dy) ||
         cpu_exec_arg(&m->conv, n, DNNL_ARG_WEIGHTS, &m->wt_md, bs + m->wt_off) ||
         cpu_exec_arg(&m->conv, n, DNNL_ARG_DST, &m->dx_md, dx) || cpu_exec_scratchpad(&m->conv, n, m->pd, bs);
}

void cpu_dxfwd_run(const cpu_dxfwd *m) {
  cpu_dxfwd_calls++;
  cpu_exec_run(&m->wt_re);
  cpu_exec_run(&m->conv);
}
#endif
