/* linear in bf16 training plans on a plain [N, IN] input as oneDNN matmuls
 * (AMX brgemm where present) on the plain master weights:
 *
 *   forward          y[N, OUT]   = x[N, IN] Wh^T + b    (Wh = bf16(W), a stride view)
 *   input gradient   dx[N, IN] (=|+=) dy[N, OUT] Wh
 *   weight gradient  dW[OUT, IN] (=|+=) dy^T x            (f32, in place)
 *
 * Why: the inner-product primitive (linear.c) wants blocked weights, so each
 * step reordered vgg-face's 1024 x 6272 fc1 weights in (f32 -> blocked bf16)
 * and its gradient out (blocked f32 -> plain, summing): 41 of a 480 ms bf16
 * step (ONEDNN_VERBOSE, batch 64). Here the weights are only rounded to bf16
 * where they lie (one streaming pass into saved, which backward data reads
 * too) and the gradient product accumulates into the master gradient. An f32
 * input (the flatten before fc1 hands over plain f32) is rounded into saved
 * once. Graph outputs (f32) keep the inner product. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/bf16.h"

typedef struct {
  cpu_node base;
  int64_t n, in, out;
  int has_bias, x_f32, need_dx, need_dw;
  int dw_wide, threads; /* the weight gradient on dw_amx.c's wide form */
  char *bwd_scratch;
  dnnl_memory_desc_t xh_md, wt_md, wh_md, b_md, y_md, dx_md, dyt_md, dw_md;
  dnnl_primitive_desc_t fwd_pd, dx_pd[2], dw_pd[2]; /* [0] writes, [1] adds */
  dnnl_primitive_t fwd, dx_prim[2], dw_prim[2];
  size_t xh_off, wh_off;
  uint16_t *xh, *wh;
  cpu_exec f, dx, dw[2];
} mm_node;

static void mm_forward(cpu_node *n, const sp_op_args *a) {
  mm_node *s = (mm_node *)n;
  if (s->x_f32) cpu_round_bf16(s->xh, a->in[0]->data, s->n * s->in);
  cpu_round_bf16(s->wh, a->param[0]->data, s->out * s->in);
  cpu_exec_run(&s->f);
}

static void mm_backward(cpu_node *n, const sp_op_args *a) {
  mm_node *s = (mm_node *)n;
  if (s->need_dx && a->d_in[0]) cpu_exec_run(&s->dx);
  /* Weight and bias gradients are written where sp_plan_zero_grad marked
   * them (d_param_fresh), else added into. */
  if (s->need_dw && a->d_param[0]) {
    const int fresh = (a->d_param_fresh & 1u) != 0;
    if (s->dw_wide)
      cpu_dw_amx_wide(a->d_out->data, s->xh, s->n, s->out, s->in, a->d_param[0]->data, !fresh, s->bwd_scratch,
                      s->threads);
    else
      cpu_exec_run(&s->dw[fresh ? 0 : 1]);
  }
  if (s->has_bias && a->d_param[1]) { /* column sums of dy (N is a batch: short) */
    const uint16_t *dy = a->d_out->data;
    float *db = a->d_param[1]->data;
    if (a->d_param_fresh & 2u) memset(db, 0, sizeof(float) * (size_t)s->out);
    for (int64_t i = 0; i < s->n; i++)
      for (int64_t o = 0; o < s->out; o++) db[o] += sp_bf16_widen(dy[i * s->out + o]);
  }
}

static int mm_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  mm_node *s = (mm_node *)n;
  s->xh = s->x_f32 ? (uint16_t *)((char *)a->saved + s->xh_off) : (uint16_t *)a->in[0]->data;
  s->wh = (uint16_t *)((char *)a->saved + s->wh_off);
  s->bwd_scratch = bs;
  cpu_exec_init(&s->f, s->fwd);
  if (cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->xh_md, s->xh) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_WEIGHTS, &s->wt_md, s->wh) ||
      (s->has_bias && cpu_exec_arg(&s->f, n, DNNL_ARG_BIAS, &s->b_md, a->param[1]->data)) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->y_md, a->out->data) || cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs))
    return -1;
  if (s->need_dx && a->d_in[0]) {
    const int k = (a->d_in_fresh & 1u) ? 0 : 1;
    cpu_exec_init(&s->dx, s->dx_prim[k]);
    if (cpu_exec_arg(&s->dx, n, DNNL_ARG_SRC, &s->y_md, a->d_out->data) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_WEIGHTS, &s->wh_md, s->wh) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_DST, &s->dx_md, a->d_in[0]->data) ||
        cpu_exec_scratchpad(&s->dx, n, s->dx_pd[k], bs))
      return -1;
  }
  for (int k = 0; k < 2 && s->need_dw && a->d_param[0]; k++) {
    cpu_exec_init(&s->dw[k], s->dw_prim[k]);
    if (cpu_exec_arg(&s->dw[k], n, DNNL_ARG_SRC, &s->dyt_md, a->d_out->data) ||
        cpu_exec_arg(&s->dw[k], n, DNNL_ARG_WEIGHTS, &s->xh_md, s->xh) ||
        cpu_exec_arg(&s->dw[k], n, DNNL_ARG_DST, &s->dw_md, a->d_param[0]->data) ||
        cpu_exec_scratchpad(&s->dw[k], n, s->dw_pd[k], bs))
      return -1;
  }
  return 0;
}

static const cpu_vt mm_vt = {mm_forward, mm_backward, mm_bind, NULL};

static size_t grow(size_t have, const_dnnl_primitive_desc_t pd) {
  return pd && cpu_scratchpad_bytes(pd) > have ? cpu_scratchpad_bytes(pd) : have;
}

static int mm_setup(sp_op_prep *p, mm_node *s, const dnnl_memory_desc_t *x_md) {
  s->n = p->in_shape[0].d[0], s->in = p->in_shape[0].d[1], s->out = p->out_shape.d[1];
  s->has_bias = p->n_param > 1;
  s->x_f32 = x_md->data_type == dnnl_f32;
  s->need_dx = p->need_d_in[0];
  s->need_dw = p->param_grad[0];
  dnnl_dims_t x_d = {s->n, s->in}, wt_d = {s->in, s->out}, wt_s = {1, s->in}, w_d = {s->out, s->in}, b_d = {1, s->out},
              y_d = {s->n, s->out}, dyt_d = {s->out, s->n}, dyt_s = {1, s->out};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->xh_md, 2, x_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&s->wt_md, 2, wt_d, dnnl_bf16, wt_s));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->wh_md, 2, w_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->b_md, 2, b_d, dnnl_f32, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->y_md, 2, y_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->dx_md, 2, x_d, x_md->data_type, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&s->dyt_md, 2, dyt_d, dnnl_bf16, dyt_s));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->dw_md, 2, w_d, dnnl_f32, dnnl_ab));
  if (cpu_matmul_make(&s->base, &s->xh_md, &s->wt_md, s->has_bias ? &s->b_md : NULL, &s->y_md, 0, &s->fwd_pd, &s->fwd))
    return -1;
  size_t bwd = 0;
  if (s->need_dx) {
    for (int k = 0; k < 2; k++)
      if (cpu_matmul_make(&s->base, &s->y_md, &s->wh_md, NULL, &s->dx_md, k, &s->dx_pd[k], &s->dx_prim[k])) return -1;
    bwd = grow(grow(bwd, s->dx_pd[0]), s->dx_pd[1]);
  }
  s->threads = omp_get_max_threads();
  s->dw_wide = s->need_dw && cpu_dw_amx_wide_fits(s->n, s->out, s->in);
  if (s->dw_wide) {
    const size_t wide = cpu_dw_amx_wide_scratch_bytes(s->n, s->out, s->in, s->threads);
    bwd = bwd > wide ? bwd : wide;
  }
  if (s->need_dw) {
    for (int k = 0; k < 2; k++)
      if (cpu_matmul_make(&s->base, &s->dyt_md, &s->xh_md, NULL, &s->dw_md, k, &s->dw_pd[k], &s->dw_prim[k])) return -1;
    bwd = grow(grow(bwd, s->dw_pd[0]), s->dw_pd[1]);
    p->param_grad_overwrites = s->has_bias ? 3u : 1u;
  }
  size_t saved = 0;
  s->wh_off = cpu_take(&saved, sizeof(uint16_t) * (size_t)(s->out * s->in));
  if (s->x_f32) s->xh_off = cpu_take(&saved, sizeof(uint16_t) * (size_t)(s->n * s->in));
  s->base.out_md = s->y_md;
  p->saved_bytes = saved;
  p->fwd_scratch_bytes = cpu_scratchpad_bytes(s->fwd_pd);
  p->bwd_scratch_bytes = bwd;
  cpu_report(p, &s->base);
  return 0;
}

int cpu_linear_mm_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t x_md;
  if (!p->bf16 || !p->run_backward || p->frozen || p->out_plain || p->in_shape[0].ndim != 2 ||
      cpu_md_input(&x_md, p, 0) || !cpu_md_is_plain(&x_md) ||
      (x_md.data_type != dnnl_f32 && x_md.data_type != dnnl_bf16))
    return 1;
  mm_node *s = cpu_node_new(sizeof *s, &mm_vt);
  if (mm_setup(p, s, &x_md) != 0) {
    cpu_node_free(&s->base);
    return 1; /* no fast matmul: the inner product */
  }
  return 0;
}
#endif
