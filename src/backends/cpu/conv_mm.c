/* Backward of a 1x1, stride-1, unpadded convolution on channels-last bf16
 * activations as two matrix products (oneDNN's matmul primitive):
 *
 *   input gradient   dX[M, IC] (=|+=) dY[M, OC] W[OC, IC]
 *   weight gradient  dW[OC, IC]  +=   dY^T[OC, M] X[M, IC]
 *
 * with M = N H W. Why: oneDNN 2.6's AMX convolution kernels for these
 * backward passes ran at 40-300 GFLOP/s here (ResUNet-50's largest cost
 * after batch norm), while its brgemm matmul ran the same products 2-17x
 * faster (measured per shape, see bench/README_train.md). The layouts fit
 * without copies: channels-last dY and X are row-major [M, C] matrices, the
 * transposed dY is a stride, and a 1x1 weight's plain f32 gradient is
 * row-major [OC, IC], so the product accumulates straight into the master
 * gradient (sum post-op): no blocked gradient and no reorder after it. The
 * input gradient is written in place too, or added with a sum post-op when
 * another consumer wrote first (no scratch + accumulating reorder). Backward
 * data reads a bf16 copy of the weights, converted each step (OC x IC
 * values). A bias gradient is the column sums of dY.
 *
 * Strided (1x1, stride s, no padding: ResNet's projection shortcuts), M is
 * the output positions and X's rows are its grid positions (n, s i, s j):
 * they are gathered into xs for dW, and dX is computed compact in f32 then
 * spread over the input, the positions between the grid zero (or left as
 * they are where another consumer wrote first, the add rounded once).
 * oneDNN's AMX backward-data kernel took 8-14 ms a layer there (ResNet-50
 * bf16, batch 16), its forward 2-3. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

int cpu_matmul_make(cpu_node *n, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                    const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *c, int accumulate,
                    dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim) {
  dnnl_matmul_desc_t d;
  DNNL_TRY(dnnl_matmul_desc_init(&d, a, b, bias, c));
  dnnl_post_ops_t po;
  if (cpu_sum_post_ops(accumulate, &po)) return -1;
  int rc = cpu_pd(&d, NULL, po, pd);
  if (po) dnnl_post_ops_destroy(po);
  if (rc) return -1;
  if (cpu_pd_is_ref(*pd)) {
    dnnl_primitive_desc_destroy(*pd);
    return sp_error_set("matmul: only oneDNN's reference kernel for these shapes");
  }
  return cpu_adopt(n, *pd, prim);
}

static int matmul_pd(cpu_node *n, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *c,
                     int accumulate, dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim) {
  return cpu_matmul_make(n, a, b, NULL, c, accumulate, pd, prim);
}

int cpu_mm1x1_prepare(cpu_mm1x1 *m, cpu_node *n, int64_t rows, int64_t ic, int64_t oc, int need_dx, int need_dw,
                      int has_bias, const cpu_mm1x1_grid *grid, size_t *bwd_scratch) {
  memset(m, 0, sizeof *m);
  m->rows = rows, m->ic = ic, m->oc = oc, m->need_dx = need_dx, m->need_dw = need_dw, m->has_bias = has_bias;
  m->threads = omp_get_max_threads();
  if (grid) m->strided = 1, m->grid = *grid;
  dnnl_dims_t dy_d = {rows, oc}, x_d = {rows, ic}, w_d = {oc, ic}, dyt_d = {oc, rows}, dyt_s = {1, oc};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dy_md, 2, dy_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->x_md, 2, x_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->wh_md, 2, w_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dw_md, 2, w_d, dnnl_f32, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&m->dyt_md, 2, dyt_d, dnnl_bf16, dyt_s));
  size_t pad = 0;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dxs_md, 2, x_d, dnnl_f32, dnnl_ab));
  m->amx_dx = need_dx && !m->strided && cpu_mm_amx_dx && cpu_mm_amx_fits(rows, oc, ic);
  m->amx_fwd = !m->strided && cpu_mm_amx_fits(rows, ic, oc);
  if (need_dx && m->strided) {
    if (matmul_pd(n, &m->dy_md, &m->wh_md, &m->dxs_md, 0, &m->dx_pd[0], &m->dx_prim[0])) return -1;
    pad = cpu_scratchpad_bytes(m->dx_pd[0]);
  } else if (need_dx && !m->amx_dx) {
    if (matmul_pd(n, &m->dy_md, &m->wh_md, &m->x_md, 0, &m->dx_pd[0], &m->dx_prim[0]) ||
        matmul_pd(n, &m->dy_md, &m->wh_md, &m->x_md, 1, &m->dx_pd[1], &m->dx_prim[1]))
      return -1;
    for (int k = 0; k < 2; k++)
      if (cpu_scratchpad_bytes(m->dx_pd[k]) > pad) pad = cpu_scratchpad_bytes(m->dx_pd[k]);
  }
  m->thin_dw = need_dw && cpu_thin_dw_fits(oc, ic);
  m->amx_dw = need_dw && !m->thin_dw && cpu_dw_amx_fits(rows, oc, ic);
  if (need_dw && !m->thin_dw && !m->amx_dw) {
    for (int k = 0; k < 2; k++) {
      if (matmul_pd(n, &m->dyt_md, &m->x_md, &m->dw_md, k, &m->dw_pd[k], &m->dw_prim[k])) return -1;
      if (cpu_scratchpad_bytes(m->dw_pd[k]) > pad) pad = cpu_scratchpad_bytes(m->dw_pd[k]);
    }
  }
  size_t used = pad;
  if (need_dx) m->wh_off = cpu_take(&used, sizeof(uint16_t) * (size_t)(oc * ic)); /* = packed bytes */
  if (need_dw && has_bias) m->bias_off = cpu_take(&used, sizeof(double) * (size_t)(oc * m->threads));
  if (m->thin_dw) m->thin_off = cpu_take(&used, cpu_thin_dw_scratch_bytes(oc, ic, m->threads));
  if (m->amx_dw) m->amx_off = cpu_take(&used, cpu_dw_amx_scratch_bytes(oc, ic, m->threads));
  if (m->strided && need_dw) m->xs_off = cpu_take(&used, sizeof(uint16_t) * (size_t)(rows * ic));
  if (m->strided && need_dx) m->dxs_off = cpu_take(&used, sizeof(float) * (size_t)(rows * ic));
  *bwd_scratch = used;
  return 0;
}

int cpu_mm1x1_bind(cpu_mm1x1 *m, cpu_node *n, const sp_op_args *a, char *bs) {
  m->xs = m->strided && m->need_dw ? (uint16_t *)(bs + m->xs_off) : NULL;
  m->dxs = m->strided && m->need_dx ? (float *)(bs + m->dxs_off) : NULL;
  if (m->need_dx && a->d_in[0]) {
    const int k = (a->d_in_fresh & 1u) || m->strided ? 0 : 1;
    m->wh = (uint16_t *)(bs + m->wh_off);
    cpu_exec_init(&m->dx, m->amx_dx ? NULL : m->dx_prim[k]);
    if (!m->amx_dx && (cpu_exec_arg(&m->dx, n, DNNL_ARG_SRC, &m->dy_md, a->d_out->data) ||
                       cpu_exec_arg(&m->dx, n, DNNL_ARG_WEIGHTS, &m->wh_md, m->wh) ||
                       (m->strided ? cpu_exec_arg(&m->dx, n, DNNL_ARG_DST, &m->dxs_md, m->dxs)
                                   : cpu_exec_arg(&m->dx, n, DNNL_ARG_DST, &m->x_md, a->d_in[0]->data)) ||
                       cpu_exec_scratchpad(&m->dx, n, m->dx_pd[k], bs)))
      return -1;
  }
  if (m->need_dw) {
    m->bias_acc = m->has_bias ? (double *)(bs + m->bias_off) : NULL;
    m->thin_acc = m->thin_dw ? (double *)(bs + m->thin_off) : NULL;
    m->amx_scratch = m->amx_dw ? bs + m->amx_off : NULL;
    for (int k = 0; k < 2; k++) {
      cpu_exec_init(&m->dw[k], NULL);
      if (!a->d_param[0] || m->thin_dw || m->amx_dw) continue;
      cpu_exec_init(&m->dw[k], m->dw_prim[k]);
      if (cpu_exec_arg(&m->dw[k], n, DNNL_ARG_SRC, &m->dyt_md, a->d_out->data) ||
          cpu_exec_arg(&m->dw[k], n, DNNL_ARG_WEIGHTS, &m->x_md, m->xs ? (void *)m->xs : a->in[0]->data) ||
          cpu_exec_arg(&m->dw[k], n, DNNL_ARG_DST, &m->dw_md, a->d_param[0]->data) ||
          cpu_exec_scratchpad(&m->dw[k], n, m->dw_pd[k], bs))
        return -1;
    }
  }
  return 0;
}

/* dbias[o] (=|+=) sum over rows of dY[row, o]: per-thread double sums over
 * a static share of the rows, added in thread order. */
static void bias_grad(const cpu_mm1x1 *m, const uint16_t *dy, float *db, int fresh) {
  const int64_t oc = m->oc;
#pragma omp parallel num_threads(m->threads)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t r0 = m->rows * tid / nt, r1 = m->rows * (tid + 1) / nt;
    double *acc = m->bias_acc + tid * oc;
    for (int64_t o = 0; o < oc; o++) acc[o] = 0.0;
    for (int64_t r = r0; r < r1; r += 64) {
      const int64_t end = r + 64 < r1 ? r + 64 : r1;
      for (int64_t o = 0; o < oc; o++) {
        float s = 0.0f;
        for (int64_t q = r; q < end; q++) s += sp_bf16_widen(dy[q * oc + o]);
        acc[o] += s;
      }
    }
#pragma omp barrier
#pragma omp single
    for (int64_t o = 0; o < oc; o++) {
      double s = 0.0;
      for (int64_t t = 0; t < nt; t++) s += m->bias_acc[t * oc + o];
      db[o] = (fresh ? 0.0f : db[o]) + (float)s;
    }
  }
}

/* xs[(n, i, j)] = x[n, sh i, sw j]: the input rows the strided layer reads. */
static void gather_grid(const cpu_mm1x1 *m, const uint16_t *x) {
  const cpu_mm1x1_grid *g = &m->grid;
  const size_t bytes = sizeof(uint16_t) * (size_t)m->ic;
#pragma omp parallel for num_threads(m->threads) schedule(guided)
  for (int64_t r = 0; r < g->n * g->oh; r++) {
    const int64_t img = r / g->oh, i = r % g->oh;
    const uint16_t *src = x + ((img * g->ih + g->sh * i) * g->iw) * m->ic;
    uint16_t *dst = m->xs + r * g->ow * m->ic;
    for (int64_t j = 0; j < g->ow; j++) memcpy(dst + j * m->ic, src + g->sw * j * m->ic, bytes);
  }
}

/* A row of n f32 values into bf16 (rounded), or added onto bf16 values (the
 * sum rounded once). */
static void round_row(uint16_t *d, const float *s, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstw(d, i, vldw(s, i, 0, VW), 1, VW);
  for (; i < n; i++) d[i] = sp_bf16_round(s[i]);
}
static void add_row(uint16_t *d, const float *s, int64_t n) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstw(d, i, vldw(d, i, 1, VW) + vldw(s, i, 0, VW), 1, VW);
  for (; i < n; i++) d[i] = sp_bf16_round(sp_bf16_widen(d[i]) + s[i]);
}

/* dX from dxs: grid positions get dxs's rows rounded to bf16 (added to what
 * dX holds where another consumer wrote first: one rounding, as a sum
 * post-op does), the others zero where dX is written fresh. One input row
 * (n, y) a task. */
static void spread_grid(const cpu_mm1x1 *m, uint16_t *dx, int fresh) {
  const cpu_mm1x1_grid *g = &m->grid;
  const int64_t ic = m->ic, row = g->iw * ic;
#pragma omp parallel for num_threads(m->threads) schedule(guided)
  for (int64_t r = 0; r < g->n * g->ih; r++) {
    const int64_t img = r / g->ih, y = r % g->ih, i = y / g->sh;
    uint16_t *d = dx + r * row;
    if (y % g->sh || i >= g->oh) {
      if (fresh) memset(d, 0, sizeof(uint16_t) * (size_t)row);
      continue;
    }
    const float *s = m->dxs + (img * g->oh + i) * g->ow * ic;
    for (int64_t xx = 0; xx < g->iw; xx++) {
      const int64_t j = xx / g->sw;
      uint16_t *dp = d + xx * ic;
      if (xx % g->sw || j >= g->ow) {
        if (fresh) memset(dp, 0, sizeof(uint16_t) * (size_t)ic);
        continue;
      }
      const float *sp = s + j * ic;
      if (fresh)
        round_row(dp, sp, ic);
      else
        add_row(dp, sp, ic);
    }
  }
}

void cpu_mm1x1_backward(const cpu_mm1x1 *m, const sp_op_args *a) {
  if (m->xs && a->d_param[0]) gather_grid(m, a->in[0]->data);
  if (m->need_dx && a->d_in[0] && m->strided) {
    cpu_round_bf16(m->wh, a->param[0]->data, m->oc * m->ic);
    cpu_exec_run(&m->dx);
    spread_grid(m, a->d_in[0]->data, (a->d_in_fresh & 1u) != 0);
  } else if (m->need_dx && a->d_in[0]) {
    const float *w = a->param[0]->data;
    if (m->amx_dx) {
      cpu_mm_amx_pack(w, m->oc, m->ic, 0, m->wh, m->threads); /* B = W [OC][IC] as it lies */
      const cpu_mm_epilogue add = {.accumulate = !(a->d_in_fresh & 1u)};
      cpu_mm_amx(a->d_out->data, m->rows, m->oc, m->wh, m->ic, a->d_in[0]->data, &add, m->threads);
    } else {
      cpu_round_bf16(m->wh, w, m->oc * m->ic);
      cpu_exec_run(&m->dx);
    }
  }
  if (m->need_dw) {
    /* Written where sp_plan_zero_grad marked them (d_param_fresh), else added. */
    const int w_fresh = (a->d_param_fresh & 1u) != 0, b_fresh = (a->d_param_fresh & 2u) != 0;
    if (m->thin_dw && a->d_param[0])
      cpu_thin_dw(a->d_out->data, m->xs ? m->xs : a->in[0]->data, m->rows, m->oc, m->ic, a->d_param[0]->data,
                  m->thin_acc, m->threads, w_fresh);
    if (m->amx_dw && a->d_param[0])
      cpu_dw_amx(a->d_out->data, m->xs ? m->xs : a->in[0]->data, m->rows, m->oc, m->ic, a->d_param[0]->data, !w_fresh,
                 m->amx_scratch, m->threads);
    cpu_exec_run(&m->dw[w_fresh ? 0 : 1]);
    if (m->has_bias && a->n_param > 1 && a->d_param[1]) bias_grad(m, a->d_out->data, a->d_param[1]->data, b_fresh);
  }
}
#endif
