/* The weight gradient of conv_stem.c's stem (bf16 training plans), from the
 * padded bf16 image forward saved and dy as it lies (channels-last):
 *
 *   dW[o][tap] (and dbias[o]) (=|+=) sum over positions of dy[pos][o] x[pos][tap]
 *
 * Per group of 8 output channels, up to TAP_BLOCK taps at once over a row,
 * each vector holding VW / 8 positions of dy as it lies and x repeated to
 * match; a row's sums in f32, added per thread in double, threads added in
 * order: the same bits for a given thread count. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/conv_stem.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

/* Weight-gradient vectors hold VW / 8 positions of 8 channels: dy as it
 * lies (channels-last), and each position's x repeated over its 8 lanes. */
enum { PP = VW / 8 };

/* Positions j.. of the 8 channels from c (a missing second position: 0). */
INLINE vfw dy_lanes(const uint16_t *dy, int64_t j, int64_t oc, int64_t c, int64_t ow) {
#ifdef __AVX512F__
  if (oc == 8 && j + 1 < ow) return vldw(dy, j * 8, 1, VW);
  const vf8 lo = vld(dy, j * oc + c, 1), hi = j + 1 < ow ? vld(dy, (j + 1) * oc + c, 1) : vbcast(0.0f);
  return __builtin_shufflevector(lo, hi, VW_ALL);
#else
  (void)ow;
  return vld(dy, j * oc + c, 1);
#endif
}

INLINE vfw x_lanes(const uint16_t *x, int64_t j) {
#ifdef __AVX512F__
  /* x[j] and x[j+1] as one word pair: lanes 0-7 take the low bf16, 8-15
   * the high one, each moved to the top of its f32. */
  uint32_t pair;
  memcpy(&pair, x + j, sizeof pair);
  const vu16 u = {pair, pair, pair, pair, pair, pair, pair, pair, pair, pair, pair, pair, pair, pair, pair, pair};
  const vu16 shift = {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0};
  return (vfw)((u << shift) & 0xffff0000u);
#else
  return vbcast(sp_bf16_widen(x[j]));
#endif
}

/* The lanes' positions summed: the 8 channels. */
INLINE vf8 fold(vfw v) {
#ifdef __AVX512F__
  return __builtin_shufflevector(v, v, VW_LO8) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
  return v;
#endif
}

enum { TAP_BLOCK = 10 }; /* accumulators per pass over a row: a 3x3 grey stem and its bias in one */

/* nb taps from t0 (tap k: the bias, summing dy) over one row, 8 channels
 * from c: summed in f32 per row, added into dw_row[t][o] in double. */
INLINE void tap_block(const stem_node *s, const void *const *src, const uint16_t *dy, int64_t c, int64_t t0,
                      const int nb, double *dw_row) {
  const int64_t oc = s->oc, ow = s->ow, k = s->k;
  vfw p[TAP_BLOCK];
  VEC_UNROLL
  for (int b = 0; b < nb; b++) p[b] = vbcastw(0.0f);
  for (int64_t j = 0; j < ow; j += PP) {
    const vfw d = dy_lanes(dy, j, oc, c, ow);
    VEC_UNROLL
    for (int b = 0; b < nb; b++) p[b] += t0 + b < k ? x_lanes((const uint16_t *)src[t0 + b], j) * d : d;
  }
  for (int b = 0; b < nb; b++) {
    const vf8 sum = fold(p[b]);
    for (int l = 0; l < 8; l++) dw_row[(t0 + b) * oc + c + l] += sum[l];
  }
}

/* One output row's weight gradient: per group of 8 output channels, the
 * taps (and the bias row dw_row[k][o], summing dy) TAP_BLOCK at a time. The
 * tap rows are padded with zeros past ow, so a missing second position
 * reads 0 there and its dy is 0 too. */
static void backward_row(const stem_node *s, const void *const *src, const uint16_t *dy, double *dw_row) {
  const int64_t taps = s->k + 1;
  for (int64_t c = 0; c < s->oc; c += 8)
    for (int64_t t0 = 0; t0 < taps; t0 += TAP_BLOCK) {
      const int64_t nb = taps - t0 < TAP_BLOCK ? taps - t0 : TAP_BLOCK;
      if (nb == TAP_BLOCK)
        tap_block(s, src, dy, c, t0, TAP_BLOCK, dw_row); /* a constant count: unrolled */
      else
        tap_block(s, src, dy, c, t0, (int)nb, dw_row);
    }
}

/* dW[o][tap] (and dbias[o]) += (or =, where marked fresh) sum over positions of dy[pos][o] x[pos][tap]:
 * rows in f32, added per thread in double, threads in order. */
void cpu_stem_backward(cpu_node *n, const sp_op_args *a) {
  const stem_node *s = (const stem_node *)n;
  if (!a->d_param[0] && !(s->has_bias && a->d_param[1])) return;
  const int64_t oc = s->oc, k = s->k, per = (k + 1) * oc; /* the last row: the bias */
  const uint16_t *dy = a->d_out->data;
#pragma omp parallel num_threads(s->threads)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num(), rows = s->n * s->oh;
    double *acc = s->acc + tid * per;
    const void *src[STEM_MAX_K];
    for (int64_t j = 0; j < per; j++) acc[j] = 0.0;
    for (int64_t row = rows * tid / nt; row < rows * (tid + 1) / nt; row++) {
      cpu_stem_tap_rows(s, s->img, row, NULL, src);
      backward_row(s, src, dy + row * s->ow * oc, acc);
    }
#pragma omp barrier
#pragma omp single
    {
      float *dw = a->d_param[0] ? a->d_param[0]->data : NULL;
      float *db = s->has_bias && a->d_param[1] ? a->d_param[1]->data : NULL;
      const int w_fresh = (a->d_param_fresh & 1u) != 0, b_fresh = (a->d_param_fresh & 2u) != 0;
      for (int64_t j = 0; j < per; j++) {
        double sum = 0.0;
        for (int64_t t = 0; t < nt; t++) sum += s->acc[t * per + j];
        const int64_t t = j / oc, o = j % oc;
        if (t == k) {
          if (db) db[o] = (b_fresh ? 0.0f : db[o]) + (float)sum;
        } else if (dw) {
          const int64_t r = t / (s->kw * s->ic), c = t / s->ic % s->kw, i = t % s->ic;
          float *d = &dw[((o * s->ic + i) * s->kh + r) * s->kw + c];
          *d = (w_fresh ? 0.0f : *d) + (float)sum;
        }
      }
    }
  }
}

#endif
