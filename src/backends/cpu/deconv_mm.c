/* A transposed convolution whose kernel equals its stride (no padding, no
 * output padding, no dilation, one group, no bias: U-Net's 2x up-layer) on
 * bf16 channels-last activations, as matrix products. Each output pixel comes
 * from exactly one input pixel,
 *
 *   y[n, k i + a, k j + b, :] = x[n, i, j, :] W[:, :, a, b],
 *
 * so with M = N H W rows and the k*k taps side by side in the columns
 * (Wt[IC, (a k + b) OC + o] = W[IC, o, a, b]):
 *
 *   forward            Y2[M, kkOC] = X[M, IC] Wt, each row's k blocks of k OC
 *                      values then copied to their output pixels;
 *   backward           G[M, kkOC] gathered from dY the same way;
 *                      dX[M, IC] (=|+=) G Wt^T;   dWt[IC, kkOC] = X^T G,
 *                      added into the plain master gradient [IC, OC, k, k]
 *                      (dWt on AMX tiles by dw_amx.c where it fits).
 *
 * Why: oneDNN 2.6's AMX deconvolution kernels ran ResUNet-50's decoder
 * layers at 100-450 GFLOP/s (the 2048 -> 512 layer at 7x7, batch 16: 15 ms
 * forward, 33 ms weight gradient), where its brgemm matmul runs the same
 * products several times faster (7x7 layer: 21.6 ms for all three products
 * against 54.8). The copies are memory-bound passes over the output, so
 * narrow layers at high resolution, where the products are small and the
 * copies large, keep oneDNN: from 128 input channels (ResUNet-50 bf16 b16,
 * the step's deconvolutions: 141 ms all on oneDNN, 86-92 from 128 channels,
 * 93-95 from 64). With AMX the forward runs on mm_amx.c's tiles, which
 * write each row's k runs straight to their output pixels: no Y2 and no
 * copy, so narrow layers take it too (ResUNet-50's 64 -> 32 layer at 224 x
 * 224), and it sums the batch statistics of the batch norm after it.
 * Activations in blocked layouts (f32 plans) do not apply: their rows are no
 * matrix. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h" /* INLINE */
#include "core/bf16.h"
#include "ops/ops.h"

int64_t cpu_deconv_mm_min_channels = 128;

typedef struct {
  cpu_node base;
  int64_t n, h, w, ic, oc, k, m, cols;   /* m = n h w rows, cols = k k oc */
  int need_dx, need_dw, amx_dw, threads; /* amx_dw: dWt by dw_amx.c, not a matmul */
  /* Forward / the input gradient on mm_amx.c's tiles, not oneDNN's matmul:
   * forward writes the output pixels from its rows (no Y2, no copy) and the
   * output's batch statistics where a batch norm takes them (base.stats). */
  int amx_fwd, amx_dx;
  int stream;        /* amx_fwd's output past the caches (cpu_stream_threshold_plan) */
  uint16_t *wt_kept; /* frozen plans: Wt prepared once, again only when the parameters change */
  uint16_t *bp_kept; /* ... and Wt packed for the tiles */
  size_t bp_off, bpt_off, stats_off, stats_work_off;
  uint16_t *bp, *bpt; /* bound: Wt packed (forward), Wt^T packed (input gradient) */
  double *stats_work;
  dnnl_memory_desc_t x_md, wt_md, y2_md, wtt_md, xt_md, dwt_md;
  dnnl_primitive_desc_t fwd_pd, dx_pd[2], dw_pd; /* dx: [0] writes, [1] adds */
  dnnl_primitive_t fwd, dx_prim[2], dw_prim;
  size_t wt_off, y2_off, g_off, dwt_off, amx_off; /* Wt in saved (training) or forward scratch */
  uint16_t *wt, *y2, *g;
  float *dwt;
  char *amx_scratch;
  cpu_exec f, dx, dw;
} deconv_mm_node;

/* Wt[ic, (a k + b) oc + o] = bf16(W[ic, o, a, b]) and its way back,
 * dW[ic, o, a, b] (=|+=) dWt[ic, (a k + b) oc + o]: per input channel and
 * tap, a contiguous run of oc values on the Wt side, read or written with
 * stride kk on the W side. kk is a constant for the 2x2 up-layer (4), so
 * the compiler vectorises the strided side: with the tap innermost and
 * scalar rounding these took 4.4 and 3.6 ms a step for ResUNet-50's
 * 2048 -> 512 layer (4 M weights). */
INLINE void weights_to_wt(const deconv_mm_node *s, const float *w, const int64_t kk) {
  const int64_t oc = s->oc;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < s->ic; i++)
    for (int64_t t = 0; t < kk; t++) {
      uint16_t *d = s->wt + i * s->cols + t * oc;
      const float *from = w + i * oc * kk + t;
      for (int64_t o = 0; o < oc; o++) d[o] = sp_bf16_round(from[o * kk]);
    }
}

INLINE void wt_grad_to_weights(const deconv_mm_node *s, float *dw, int fresh, const int64_t kk) {
  const int64_t oc = s->oc;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < s->ic; i++)
    for (int64_t t = 0; t < kk; t++) {
      const float *g = s->dwt + i * s->cols + t * oc;
      float *d = dw + i * oc * kk + t;
      if (fresh)
        for (int64_t o = 0; o < oc; o++) d[o * kk] = g[o];
      else
        for (int64_t o = 0; o < oc; o++) d[o * kk] += g[o];
    }
}

static void prepare_weights(const deconv_mm_node *s, const float *w) {
  if (s->k == 2)
    weights_to_wt(s, w, 4);
  else
    weights_to_wt(s, w, s->k * s->k);
}

/* Row r = (n, i, j) of a [M, kkOC] matrix holds, for each a, the k OC-vectors
 * of output pixels (k i + a, k j .. k j + k - 1): one contiguous run of k OC
 * values in channels-last output. to_rows: output -> matrix (gather), else
 * matrix -> output (scatter). */
static void move_rows(const deconv_mm_node *s, uint16_t *mat, uint16_t *img, int to_rows) {
  const int64_t k = s->k, run = k * s->oc, ow = k * s->w, oh = k * s->h;
#pragma omp parallel for schedule(guided)
  for (int64_t r = 0; r < s->m; r++) {
    const int64_t j = r % s->w, i = (r / s->w) % s->h, n = r / (s->w * s->h);
    for (int64_t a = 0; a < k; a++) {
      uint16_t *row = mat + r * s->cols + a * run, *pix = img + ((n * oh + k * i + a) * ow + k * j) * s->oc;
      if (to_rows)
        memcpy(row, pix, sizeof(uint16_t) * (size_t)run);
      else
        memcpy(pix, row, sizeof(uint16_t) * (size_t)run);
    }
  }
}

static void deconv_mm_forward(cpu_node *n, const sp_op_args *a) {
  deconv_mm_node *s = (deconv_mm_node *)n;
  const int stale = !s->wt_kept || a->params_stale;
  if (stale) prepare_weights(s, a->param[0]->data);
  if (s->amx_fwd) {
    if (stale) cpu_mm_amx_pack_bf16(s->wt, s->ic, s->cols, 0, s->bp, s->threads);
    const cpu_mm_epilogue e = {.mean = n->stats_on ? n->stats : NULL,
                               .var = n->stats_on ? n->stats + s->oc : NULL,
                               .stats = s->stats_work,
                               .channels = s->oc,
                               .up_k = s->k,
                               .up_h = s->h,
                               .up_w = s->w,
                               .up_oc = s->oc,
                               .stream = s->stream};
    cpu_mm_amx(a->in[0]->data, s->m, s->ic, s->bp, s->cols, a->out->data, &e, s->threads);
    return;
  }
  cpu_exec_run(&s->f);
  move_rows(s, s->y2, a->out->data, 0);
}

/* Written where sp_plan_zero_grad marked dW (fresh), else added. */
static void add_weight_grad(const deconv_mm_node *s, float *dw, int fresh) {
  if (s->k == 2)
    wt_grad_to_weights(s, dw, fresh, 4);
  else
    wt_grad_to_weights(s, dw, fresh, s->k * s->k);
}

static void deconv_mm_backward(cpu_node *n, const sp_op_args *a) {
  deconv_mm_node *s = (deconv_mm_node *)n;
  const int dx = s->need_dx && a->d_in[0], dw = s->need_dw && a->d_param[0];
  if (!dx && !dw) return;
  move_rows(s, s->g, a->d_out->data, 1);
  if (dx && s->amx_dx) {
    cpu_mm_amx_pack_bf16(s->wt, s->cols, s->ic, 1, s->bpt, s->threads); /* B = Wt^T: Wt is [IC][cols] */
    const cpu_mm_epilogue add = {.accumulate = !(a->d_in_fresh & 1u)};
    cpu_mm_amx(s->g, s->m, s->cols, s->bpt, s->ic, a->d_in[0]->data, &add, s->threads);
  } else if (dx) {
    cpu_exec_run(&s->dx);
  }
  if (dw) {
    if (s->amx_dw) cpu_dw_amx(a->in[0]->data, s->g, s->m, s->ic, s->cols, s->dwt, 0, s->amx_scratch, s->threads);
    cpu_exec_run(&s->dw);
    add_weight_grad(s, a->d_param[0]->data, (a->d_param_fresh & 1u) != 0);
  }
}

static int deconv_mm_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  deconv_mm_node *s = (deconv_mm_node *)n;
  s->wt = s->wt_kept ? s->wt_kept : (uint16_t *)((s->need_dx ? (char *)a->saved : fs) + s->wt_off);
  s->y2 = (uint16_t *)(fs + s->y2_off);
  s->bp = s->bp_kept ? s->bp_kept : (uint16_t *)(fs + s->bp_off);
  if (n->stats_able)
    n->stats = (float *)((char *)a->saved + s->stats_off), s->stats_work = (double *)(fs + s->stats_work_off);
  cpu_exec_init(&s->f, s->fwd);
  if (!s->amx_fwd &&
      (cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->x_md, a->in[0]->data) ||
       cpu_exec_arg(&s->f, n, DNNL_ARG_WEIGHTS, &s->wt_md, s->wt) ||
       cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->y2_md, s->y2) || cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs)))
    return -1;
  if (!s->need_dx && !s->need_dw) return 0;
  s->g = (uint16_t *)(bs + s->g_off);
  s->bpt = (uint16_t *)(bs + s->bpt_off);
  s->dwt = (float *)(bs + s->dwt_off);
  s->amx_scratch = bs + s->amx_off;
  cpu_exec_init(&s->dx, NULL);
  cpu_exec_init(&s->dw, NULL);
  if (s->need_dx && a->d_in[0] && !s->amx_dx) {
    const int k = (a->d_in_fresh & 1u) ? 0 : 1;
    cpu_exec_init(&s->dx, s->dx_prim[k]);
    if (cpu_exec_arg(&s->dx, n, DNNL_ARG_SRC, &s->y2_md, s->g) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_WEIGHTS, &s->wtt_md, s->wt) ||
        cpu_exec_arg(&s->dx, n, DNNL_ARG_DST, &s->x_md, a->d_in[0]->data) ||
        cpu_exec_scratchpad(&s->dx, n, s->dx_pd[k], bs))
      return -1;
  }
  if (s->need_dw && a->d_param[0] && !s->amx_dw) {
    cpu_exec_init(&s->dw, s->dw_prim);
    if (cpu_exec_arg(&s->dw, n, DNNL_ARG_SRC, &s->xt_md, a->in[0]->data) ||
        cpu_exec_arg(&s->dw, n, DNNL_ARG_WEIGHTS, &s->y2_md, s->g) ||
        cpu_exec_arg(&s->dw, n, DNNL_ARG_DST, &s->dwt_md, s->dwt) || cpu_exec_scratchpad(&s->dw, n, s->dw_pd, bs))
      return -1;
  }
  return 0;
}

static const cpu_vt deconv_mm_vt = {deconv_mm_forward, deconv_mm_backward, deconv_mm_bind, NULL};

/* Forward on the tiles: the output's runs (k oc values) in whole 32-column
 * blocks. */
static int amx_fwd_fits(const sp_op_prep *p) {
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  const int64_t k = w->d[2], oc = p->out_shape.d[1];
  return (k * oc) % 32 == 0 && cpu_mm_amx_fits(in->d[0] * in->d[2] * in->d[3], in->d[1], k * k * oc);
}

/* The case this file covers, with the input as the plan hands it: from
 * cpu_deconv_mm_min_channels input channels, or any where the forward runs
 * on the tiles (no copy pass: narrow layers pay too). */
static int applies(const sp_op_prep *p, const dnnl_memory_desc_t *x) {
  const sp_conv_transpose2d_attr *at = p->attr;
  const sp_shape *w = &p->param_shape[0];
  return p->bf16 && !p->out_plain && p->n_param == 1 && at->groups == 1 && p->in_shape[0].ndim == 4 &&
         w->d[2] == w->d[3] && at->stride_h == w->d[2] && at->stride_w == w->d[3] && at->pad_h == 0 && at->pad_w == 0 &&
         at->out_pad_h == 0 && at->out_pad_w == 0 && at->dil_h == 1 && at->dil_w == 1 &&
         (p->in_shape[0].d[1] >= cpu_deconv_mm_min_channels || amx_fwd_fits(p)) && x->data_type == dnnl_bf16 &&
         cpu_md_lanes(x) == CPU_LANES_NHWC;
}

static int md2(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, dnnl_data_type_t dt) {
  dnnl_dims_t d = {rows, cols};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(md, 2, d, dt, dnnl_ab));
  return 0;
}

/* A rows x cols view of a row-major cols x rows matrix (its transpose). */
static int md2_t(dnnl_memory_desc_t *md, int64_t rows, int64_t cols) {
  dnnl_dims_t d = {rows, cols}, st = {1, rows};
  DNNL_TRY(dnnl_memory_desc_init_by_strides(md, 2, d, dnnl_bf16, st));
  return 0;
}

static size_t scratchpad(const_dnnl_primitive_desc_t pd) { return pd ? cpu_scratchpad_bytes(pd) : 0; }

static int setup(sp_op_prep *p, deconv_mm_node *s) {
  const sp_shape *in = &p->in_shape[0];
  s->n = in->d[0], s->ic = in->d[1], s->h = in->d[2], s->w = in->d[3];
  s->oc = p->out_shape.d[1], s->k = p->param_shape[0].d[2];
  s->m = s->n * s->h * s->w, s->cols = s->k * s->k * s->oc;
  s->need_dx = p->run_backward && p->need_d_in[0];
  s->need_dw = p->run_backward && p->param_grad[0];
  if (md2(&s->x_md, s->m, s->ic, dnnl_bf16) || md2(&s->wt_md, s->ic, s->cols, dnnl_bf16) ||
      md2(&s->y2_md, s->m, s->cols, dnnl_bf16) || md2_t(&s->wtt_md, s->cols, s->ic) || md2_t(&s->xt_md, s->ic, s->m) ||
      md2(&s->dwt_md, s->ic, s->cols, dnnl_f32))
    return -1;
  s->amx_fwd = amx_fwd_fits(p);
  s->stream = s->amx_fwd && cpu_mm_amx_stream &&
              (int64_t)(sizeof(uint16_t) * sp_shape_numel(&p->out_shape)) >= cpu_stream_threshold_plan(p->run_backward);
  s->amx_dx = s->need_dx && cpu_mm_amx_dx && cpu_mm_amx_fits(s->m, s->cols, s->ic);
  if (!s->amx_fwd && cpu_matmul_make(&s->base, &s->x_md, &s->wt_md, NULL, &s->y2_md, 0, &s->fwd_pd, &s->fwd)) return -1;
  for (int k = 0; s->need_dx && !s->amx_dx && k < 2; k++)
    if (cpu_matmul_make(&s->base, &s->y2_md, &s->wtt_md, NULL, &s->x_md, k, &s->dx_pd[k], &s->dx_prim[k])) return -1;
  s->threads = omp_get_max_threads();
  s->base.stats_able =
      s->amx_fwd && cpu_bn_stats_offer && p->training && p->run_backward && p->consumer[0].op == &sp_op_batchnorm;
  s->amx_dw = s->need_dw && cpu_dw_amx_fits(s->m, s->ic, s->cols);
  if (s->need_dw && !s->amx_dw &&
      cpu_matmul_make(&s->base, &s->xt_md, &s->y2_md, NULL, &s->dwt_md, 0, &s->dw_pd, &s->dw_prim))
    return -1;
  dnnl_dims_t od = {s->n, s->oc, s->k * s->h, s->k * s->w};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, dnnl_bf16, dnnl_acdb));
  /* Backward data reads the forward's bf16 weights: kept in the saved region. */
  size_t fwd = scratchpad(s->fwd_pd), bwd = 0, saved = 0;
  for (int k = 0; k < 2; k++)
    if (scratchpad(s->dx_pd[k]) > bwd) bwd = scratchpad(s->dx_pd[k]);
  if (scratchpad(s->dw_pd) > bwd) bwd = scratchpad(s->dw_pd);
  const size_t wt_bytes = sizeof(uint16_t) * (size_t)(s->ic * s->cols);
  const size_t bp_bytes = s->amx_fwd ? cpu_mm_amx_packed_bytes(s->ic, s->cols) : 0;
  if (p->frozen && !p->run_backward) {
    char *kept = cpu_node_keep(&s->base, wt_bytes + bp_bytes);
    s->wt_kept = (uint16_t *)kept;
    s->bp_kept = s->amx_fwd ? (uint16_t *)(kept + wt_bytes) : NULL;
  } else {
    s->wt_off = cpu_take(s->need_dx ? &saved : &fwd, wt_bytes);
    s->bp_off = cpu_take(&fwd, bp_bytes);
  }
  if (s->base.stats_able) {
    s->stats_off = cpu_take(&saved, 2 * sizeof(float) * (size_t)s->oc);
    s->stats_work_off = cpu_take(&fwd, cpu_mm_amx_stats_bytes(s->cols, s->threads));
  }
  s->y2_off = cpu_take(&fwd, s->amx_fwd ? 0 : sizeof(uint16_t) * (size_t)(s->m * s->cols));
  if (s->need_dx || s->need_dw) {
    s->g_off = cpu_take(&bwd, sizeof(uint16_t) * (size_t)(s->m * s->cols));
    s->bpt_off = cpu_take(&bwd, s->amx_dx ? cpu_mm_amx_packed_bytes(s->cols, s->ic) : 0);
    s->dwt_off = cpu_take(&bwd, s->need_dw ? sizeof(float) * (size_t)(s->ic * s->cols) : 0);
    s->amx_off = cpu_take(&bwd, s->amx_dw ? cpu_dw_amx_scratch_bytes(s->ic, s->cols, s->threads) : 0);
  }
  p->saved_bytes = saved;
  p->param_grad_overwrites = 1u;
  return cpu_report_scratch(p, &s->base, fwd, bwd);
}

int cpu_deconv_mm_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t x;
  if (cpu_md_input(&x, p, 0) || !applies(p, &x)) return 1;
  deconv_mm_node *s = cpu_node_new(sizeof *s, &deconv_mm_vt);
  if (setup(p, s) != 0) {
    cpu_node_free(&s->base);
    return 1; /* no fast matmul: oneDNN's deconvolution */
  }
  return 0;
}

int cpu_deconv_uses_matmul(const void *state) { return ((const cpu_node *)state)->vt == &deconv_mm_vt; }
#endif
