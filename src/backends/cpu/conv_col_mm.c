/* A bf16 training convolution with few output positions and many weights
 * (ResNet's last stage: 3x3 between 512 channels at 7x7) as im2col and
 * products, forward and input gradient, on mm_amx.c's tiles where they fit
 * (else oneDNN's matmul, which ran them at about 560 GFLOP/s):
 *
 *   forward   col[M, K] = x under each output's window   (K = kh kw ic, in that order)
 *             Y[M, OC]  = col Wt^T                       (Wt[OC][K]: W's taps moved before its channels)
 *   dX        dcol[M, K] = dY Wt                         (f32)
 *             dX[n, y, x, :] (=|+=) sum of the dcol values that each tap took from (y, x)
 *
 * with M = N OH OW output positions, channels-last rows. Why: oneDNN 2.6's
 * convolution kernels run these layers at a fraction of its matmul's rate
 * (ResNet-50 bf16 batch 16, Xeon with AMX, 2 threads, per call: the 3x3
 * 512 -> 512 layer at 7x7 forward 6.3 ms, backward data 10.4; at stride 2
 * from 14x14 10.3 and 18.7; the same products of 3.7 GFLOP at 64 channels
 * and 56x56 take 3.4 and 4.0). Their weights (2.4 M) outweigh their
 * activations (0.4 M values), and the kernels spread few positions over
 * many weight blocks. As products, M = 784 rows against K = 4608 columns
 * keep the tiles busy; col (7 MB) and dcol (14 MB) are the price.
 *
 * Wt is made once a step in forward from the f32 master weights (it
 * replaces the reorder oneDNN's kernel needed) and kept for backward; the
 * weight gradient stays conv_bww_mm.c's. The input gradient sums each
 * input's taps in f32 and rounds once (added onto dX's values where another
 * consumer wrote first, also rounded once). */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

int cpu_conv_use_col_mm = 1;
int64_t cpu_col_mm_max_positions = 64; /* output positions per image (OH OW) up to which it is taken */
int64_t cpu_col_mm_min_channels = 256;
long cpu_col_mm_calls;
int cpu_col_mm_amx = 1; /* the products on mm_amx.c's tiles where they fit (0: oneDNN's matmul) */

static int applies(const cpu_conv_shape *c) {
  return cpu_conv_use_col_mm && c->kh * c->kw > 1 && c->oh * c->ow <= cpu_col_mm_max_positions &&
         c->ic >= cpu_col_mm_min_channels && c->oc % 16 == 0 && c->ic % 16 == 0;
}

int cpu_colmm_prepare(cpu_colmm *m, cpu_node *n, const cpu_conv_shape *c, int need_dx, size_t *fwd_scratch,
                      size_t *bwd_scratch) {
  memset(m, 0, sizeof *m);
  if (!applies(c)) return 1;
  m->c = *c;
  m->m = c->n * c->oh * c->ow, m->k = c->kh * c->kw * c->ic, m->need_dx = need_dx;
  m->threads = omp_get_max_threads();
  dnnl_dims_t col_d = {m->m, m->k}, wtt_d = {m->k, c->oc}, wtt_s = {1, m->k}, y_d = {m->m, c->oc}, wt_d = {c->oc, m->k};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->col_md, 2, col_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&m->wtt_md, 2, wtt_d, dnnl_bf16, wtt_s));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->y_md, 2, y_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->wt_md, 2, wt_d, dnnl_bf16, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dcol_md, 2, col_d, dnnl_f32, dnnl_ab));
  m->amx = cpu_col_mm_amx && cpu_mm_amx_fits(m->m, m->k, c->oc);
  m->amx_dx = need_dx && cpu_col_mm_amx && cpu_mm_amx_fits(m->m, c->oc, m->k);
  /* oneDNN's matmul where the tiles do not take the products; no fast one
   * for these shapes: not taken (oneDNN's convolution stays). */
  if (!m->amx && cpu_matmul_make(n, &m->col_md, &m->wtt_md, NULL, &m->y_md, 0, &m->fwd_pd, &m->fwd))
    return sp_error_clear(), 1;
  if (need_dx && !m->amx_dx && cpu_matmul_make(n, &m->y_md, &m->wt_md, NULL, &m->dcol_md, 0, &m->dx_pd, &m->dx))
    return sp_error_clear(), 1;
  size_t f = m->amx ? 0 : cpu_scratchpad_bytes(m->fwd_pd);
  m->col_off = cpu_take(&f, sizeof(uint16_t) * (size_t)(m->m * m->k));
  if (m->amx) m->bp_off = cpu_take(&f, cpu_mm_amx_packed_bytes(m->k, c->oc));
  *fwd_scratch = f;
  size_t b = need_dx && !m->amx_dx ? cpu_scratchpad_bytes(m->dx_pd) : 0;
  if (need_dx) m->dcol_off = cpu_take(&b, sizeof(float) * (size_t)(m->m * m->k));
  if (m->amx_dx) m->bpx_off = cpu_take(&b, cpu_mm_amx_packed_bytes(c->oc, m->k));
  *bwd_scratch = b;
  m->wt_bytes = sizeof(uint16_t) * (size_t)(c->oc * m->k);
  return 0;
}

int cpu_colmm_bind(cpu_colmm *m, cpu_node *n, const void *x, void *y, uint16_t *wt, const void *dy, char *fs,
                   char *bs) {
  m->x = x, m->wt = wt;
  m->col = (uint16_t *)(fs + m->col_off);
  m->y = y, m->bp = m->amx ? (uint16_t *)(fs + m->bp_off) : NULL;
  cpu_exec_init(&m->fwd_run, m->fwd);
  if (!m->amx &&
      (cpu_exec_arg(&m->fwd_run, n, DNNL_ARG_SRC, &m->col_md, m->col) ||
       cpu_exec_arg(&m->fwd_run, n, DNNL_ARG_WEIGHTS, &m->wtt_md, wt) ||
       cpu_exec_arg(&m->fwd_run, n, DNNL_ARG_DST, &m->y_md, y) || cpu_exec_scratchpad(&m->fwd_run, n, m->fwd_pd, fs)))
    return -1;
  cpu_exec_init(&m->dx_run, NULL);
  if (!m->need_dx || !dy) return 0;
  m->dcol = (float *)(bs + m->dcol_off);
  m->dy = dy, m->bpx = m->amx_dx ? (uint16_t *)(bs + m->bpx_off) : NULL;
  if (m->amx_dx) return 0;
  cpu_exec_init(&m->dx_run, m->dx);
  if (cpu_exec_arg(&m->dx_run, n, DNNL_ARG_SRC, &m->y_md, (void *)dy) ||
      cpu_exec_arg(&m->dx_run, n, DNNL_ARG_WEIGHTS, &m->wt_md, wt) ||
      cpu_exec_arg(&m->dx_run, n, DNNL_ARG_DST, &m->dcol_md, m->dcol) ||
      cpu_exec_scratchpad(&m->dx_run, n, m->dx_pd, bs))
    return -1;
  return 0;
}

/* Wt[o][(kh, kw, i)] = bf16(W[o][i][kh][kw]): per output channel, its
 * [IC][taps] block turned into [taps][IC]. */
static void make_wt(const cpu_colmm *m, const float *w) {
  const int64_t taps = m->c.kh * m->c.kw, ic = m->c.ic;
#pragma omp parallel for num_threads(m->threads) schedule(guided)
  for (int64_t o = 0; o < m->c.oc; o++) {
    const float *src = w + o * ic * taps;
    uint16_t *dst = m->wt + o * m->k;
    for (int64_t t = 0; t < taps; t++)
      for (int64_t i = 0; i < ic; i++) dst[t * ic + i] = sp_bf16_round(src[i * taps + t]);
  }
}

/* col's rows, the threads splitting them (conv_bww_mm.c's im2col). */
static void im2col(const cpu_colmm *m) {
#pragma omp parallel num_threads(m->threads)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num(), r0 = m->m * t / nt, r1 = m->m * (t + 1) / nt;
    cpu_im2col_rows(&m->c, m->x, m->col + r0 * m->k, r0, r1 - r0);
  }
}

void cpu_colmm_forward(const cpu_colmm *m, const float *w) {
  cpu_col_mm_calls++;
  make_wt(m, w);
  im2col(m);
  if (m->amx) {
    cpu_mm_amx_pack_bf16(m->wt, m->k, m->c.oc, 1, m->bp, m->threads);
    cpu_mm_amx(m->col, m->m, m->k, m->bp, m->c.oc, m->y, NULL, m->threads);
  } else {
    cpu_exec_run(&m->fwd_run);
  }
}

/* The output position a tap reads input (y, x) for along one axis, or -1:
 * o s - p + t d = y. */
static inline int64_t out_of(int64_t y, int64_t t, int64_t s, int64_t p, int64_t d, int64_t on) {
  const int64_t v = y + p - t * d;
  if (v < 0 || v % s) return -1;
  return v / s < on ? v / s : -1;
}

/* dX row by row (n, y): each pixel's taps summed in f32 from dcol, then
 * rounded once into dX (or onto its values). */
void cpu_colmm_dx(const cpu_colmm *m, void *dx_out, int fresh) {
  if (m->amx_dx) {
    cpu_mm_amx_pack_bf16(m->wt, m->c.oc, m->k, 0, m->bpx, m->threads); /* B = Wt [OC][K] as it lies */
    const cpu_mm_epilogue f32 = {.c32 = m->dcol};
    cpu_mm_amx(m->dy, m->m, m->c.oc, m->bpx, m->k, NULL, &f32, m->threads);
  } else {
    cpu_exec_run(&m->dx_run);
  }
  const cpu_conv_shape *c = &m->c;
  const int64_t ic = c->ic;
  uint16_t *dx = dx_out;
#pragma omp parallel num_threads(m->threads)
  {
    float acc[1024] __attribute__((aligned(64)));
#pragma omp for schedule(guided)
    for (int64_t r = 0; r < c->n * c->ih; r++) {
      const int64_t img = r / c->ih, y = r % c->ih;
      for (int64_t x = 0; x < c->iw; x++) {
        uint16_t *d = dx + (r * c->iw + x) * ic;
        for (int64_t i0 = 0; i0 < ic; i0 += 1024) {
          const int64_t len = ic - i0 < 1024 ? ic - i0 : 1024;
          for (int64_t i = 0; i < len; i += VW) vstw(acc, i, vbcastw(0.0f), 0, VW);
          for (int64_t kh = 0; kh < c->kh; kh++) {
            const int64_t oy = out_of(y, kh, c->sh, c->pt, c->dh, c->oh);
            if (oy < 0) continue;
            for (int64_t kw = 0; kw < c->kw; kw++) {
              const int64_t ox = out_of(x, kw, c->sw, c->pl, c->dw, c->ow);
              if (ox < 0) continue;
              const float *s = m->dcol + ((img * c->oh + oy) * c->ow + ox) * m->k + (kh * c->kw + kw) * ic + i0;
              for (int64_t i = 0; i < len; i += VW) vstw(acc, i, vldw(acc, i, 0, VW) + vldw(s, i, 0, VW), 0, VW);
            }
          }
          for (int64_t i = 0; i < len; i += VW)
            vstw(d + i0, i, fresh ? vldw(acc, i, 0, VW) : vldw(d + i0, i, 1, VW) + vldw(acc, i, 0, VW), 1, VW);
        }
      }
    }
  }
}
#endif
