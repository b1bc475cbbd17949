/* A direct f32 3x3 convolution (padding 1, stride 1 or 2) of frozen plans
 * on 8-channel blocks (nChw8c in and out, below AVX-512), for layers with
 * few output positions and many channels: batch 1's deep layers, where the
 * weights (9.4 MB at 512 channels) are the large operand and the
 * activations fit in L2.
 *
 * The weights are packed once into panels of 16 output channels, each
 * panel's taps in the order the kernel reads them ([cb][tap][8 input
 * channels][16 outputs]), so a thread streams each panel from memory once
 * a call and keeps it in L2 while it makes every output position of those
 * 16 channels. The input is copied first into zero-padded planes, so every
 * tap of every position is a load without an edge test, and a group of up
 * to 6 output positions may span rows (each position its own offset). Per
 * group, 12 accumulators (16 channels x 6 positions) take, for every input
 * channel and tap, two weight vectors against the position's value
 * broadcast: 2 loads and 6 broadcasts feed 12 FMAs (rows8.h's register
 * block, which the fused stem uses on rows).
 *
 * Why: oneDNN 2.6's AVX2 direct kernel ran ResUNet-50's batch-1 layers of
 * 512 channels at 7x7 at 83-90 GFLOP/s (Zen 3, 2 threads, FMA peak about
 * 185; 63 on one thread against a core's ~95), its stride-2 layers at
 * 83-115, and our Winograd does not pay at 4 tiles (conv_wino.c). */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

int cpu_direct8_on = 1;
long cpu_direct8_calls;
int64_t cpu_direct8_max_positions = 256;
int64_t cpu_direct8_min_c_in = 64;
int cpu_direct8_prefetch = 1;

enum { PANEL8 = 16, GROUP = 6, TAPS = 9 };

int cpu_direct8_prepare(cpu_direct8 *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int64_t stride,
                        size_t *w_bytes, size_t *work_bytes) {
  memset(m, 0, sizeof *m);
  if (n < 1 || h < 1 || w < 1 || c_in < 8 || c_in % 8 || c_out < PANEL8 || c_out % PANEL8 ||
      (stride != 1 && stride != 2))
    return 1;
  m->n = n, m->h = h, m->w = w, m->c_in = c_in, m->c_out = c_out, m->stride = stride;
  m->ho = (h - 1) / stride + 1, m->wo = (w - 1) / stride + 1;
  /* Padded rows 0 .. hp - 1: the input at 1 .. h, and as far as the last
   * output row's window reaches (stride 2 on an even size stops short). */
  const int64_t reach_h = stride * (m->ho - 1) + 3, reach_w = stride * (m->wo - 1) + 3;
  m->hp = reach_h > h + 2 ? reach_h : h + 2, m->wp = reach_w > w + 2 ? reach_w : w + 2;
  m->plane = m->hp * m->wp * 8;
  *w_bytes = sizeof(float) * (size_t)(TAPS * c_in * c_out);
  *work_bytes = sizeof(float) * (size_t)(n * (c_in / 8) * m->plane) + 64;
  return 0;
}

/* packed[panel][cb][tap][k][16] = w[16 panel + lane][8 cb + k][tap]. */
void cpu_direct8_weights(const cpu_direct8 *m, float *packed, const float *w) {
  const int64_t ci = m->c_in, panels = m->c_out / PANEL8, cb_n = ci / 8;
#pragma omp parallel for schedule(static)
  for (int64_t pc = 0; pc < panels * cb_n; pc++) {
    const int64_t panel = pc / cb_n, cb = pc % cb_n;
    float *dst = packed + pc * TAPS * 8 * PANEL8;
    for (int t = 0; t < TAPS; t++)
      for (int k = 0; k < 8; k++)
        for (int lane = 0; lane < PANEL8; lane++)
          dst[(t * 8 + k) * PANEL8 + lane] = w[((panel * PANEL8 + lane) * ci + cb * 8 + k) * TAPS + t];
  }
}

/* Output positions at offs (pg of them) for the panel's 16 channels: the
 * sums over every input block and tap, + bias, ReLU'd, stored into the two
 * output blocks o0, o1 at the positions' indices. */
INLINE void group(const cpu_direct8 *m, const float *wt, const float *xin, const int64_t *off, const int64_t *at,
                  vf8 b0, vf8 b1, float *o0, float *o1, int relu, const char *pf, int64_t pf_lines, const int pg) {
  vf8 acc[GROUP][2];
  VEC_UNROLL for (int q = 0; q < pg; q++) acc[q][0] = b0, acc[q][1] = b1;
  const int64_t cb_n = m->c_in / 8, wp8 = m->wp * 8;
  for (int64_t cb = 0; cb < cb_n; cb++) {
    const float *xb = xin + cb * m->plane;
    for (int64_t i = 0; i < pf_lines; i++) _mm_prefetch(pf + (cb * pf_lines + i) * 64, _MM_HINT_T1);
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 3; c++, wt += 8 * PANEL8) {
        const float *xt = xb + r * wp8 + c * 8;
        VEC_UNROLL for (int k = 0; k < 8; k++) {
          const vf8 w0 = vload_f(wt + k * PANEL8), w1 = vload_f(wt + k * PANEL8 + 8);
          VEC_UNROLL for (int q = 0; q < pg; q++) {
            const vf8 v = vbcast(xt[off[q] + k]);
            acc[q][0] += v * w0;
            acc[q][1] += v * w1;
          }
        }
      }
  }
  VEC_UNROLL for (int q = 0; q < pg; q++) {
    *(vf8u *)(o0 + at[q] * 8) = relu ? vrelu8(acc[q][0]) : acc[q][0];
    *(vf8u *)(o1 + at[q] * 8) = relu ? vrelu8(acc[q][1]) : acc[q][1];
  }
}

/* The zero-padded copy of image img's input block cb. */
static void pad_block(const cpu_direct8 *m, const float *x, float *xp, int64_t img, int64_t cb) {
  const int64_t cb_n = m->c_in / 8, h = m->h, w = m->w, wp = m->wp;
  const float *src = x + (img * cb_n + cb) * h * w * 8;
  float *dst = xp + (img * cb_n + cb) * m->plane;
  memset(dst, 0, sizeof(float) * (size_t)(wp * 8)); /* top row */
  for (int64_t y = 0; y < h; y++) {
    float *row = dst + (y + 1) * wp * 8;
    memset(row, 0, sizeof(float) * 8);
    memcpy(row + 8, src + y * w * 8, sizeof(float) * (size_t)(w * 8));
    memset(row + (w + 1) * 8, 0, sizeof(float) * (size_t)((wp - w - 1) * 8));
  }
  memset(dst + (h + 1) * wp * 8, 0, sizeof(float) * (size_t)((m->hp - h - 1) * wp * 8)); /* bottom rows */
}

void cpu_direct8_run(const cpu_direct8 *m, const float *packed, const float *x, float *y, const float *bias, int relu,
                     char *work) {
  float *xp = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  const int64_t cb_n = m->c_in / 8, panels = m->c_out / PANEL8, positions = m->ho * m->wo, s = m->stride;
  const int64_t panel_floats = cb_n * TAPS * 8 * PANEL8;
  cpu_direct8_calls++;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t ic = 0; ic < m->n * cb_n; ic++) pad_block(m, x, xp, ic / cb_n, ic % cb_n);
      /* Panel-major: a thread's panels each read from memory once. */
#pragma omp for schedule(static)
    for (int64_t job = 0; job < panels * m->n; job++) {
      const int64_t panel = job / m->n, img = job % m->n, ob = panel * PANEL8;
      const float *wt = packed + panel * panel_floats, *xin = xp + img * cb_n * m->plane;
      float *o0 = y + (img * (m->c_out / 8) + ob / 8) * positions * 8, *o1 = o0 + positions * 8;
      const vf8 b0 = bias ? vload_f(bias + ob) : vbcast(0.0f), b1 = bias ? vload_f(bias + ob + 8) : b0;
      /* Groups of 6 and 5 positions (5 x 2 sums still cover the FMA's
       * latency), so no group runs short: 49 = 4 x 6 + 5 x 5. */
      const int64_t groups = (positions + GROUP - 1) / GROUP, sixes = positions - groups * (GROUP - 1);
      for (int64_t g = 0, p0 = 0; g < groups; g++) {
        const int64_t np =
            sixes >= 0 ? (g < sixes ? GROUP : GROUP - 1) : (positions - p0 < GROUP ? positions - p0 : GROUP);
        int64_t off[GROUP], at[GROUP];
        for (int q = 0; q < GROUP; q++) {
          const int64_t p = p0 + (q < np ? q : 0), oy = p / m->wo, ox = p % m->wo;
          off[q] = (s * oy * m->wp + s * ox) * 8, at[q] = p;
        }
        /* The next panel's weights into L2 while this one's products run,
         * a share each group (none past the last panel). */
        const int64_t lines = panel_floats * 4 / 64, per_group = (lines + groups - 1) / groups;
        const int64_t pf_lines = panel + 1 < panels && cpu_direct8_prefetch ? (per_group + cb_n - 1) / cb_n : 0;
        const char *pf = (const char *)(wt + panel_floats) + g * pf_lines * cb_n * 64;
        switch (np) {
          case 6: group(m, wt, xin, off, at, b0, b1, o0, o1, relu, pf, pf_lines, 6); break;
          case 5: group(m, wt, xin, off, at, b0, b1, o0, o1, relu, pf, pf_lines, 5); break;
          case 4: group(m, wt, xin, off, at, b0, b1, o0, o1, relu, pf, pf_lines, 4); break;
          case 3: group(m, wt, xin, off, at, b0, b1, o0, o1, relu, pf, pf_lines, 3); break;
          case 2: group(m, wt, xin, off, at, b0, b1, o0, o1, relu, pf, pf_lines, 2); break;
          default: group(m, wt, xin, off, at, b0, b1, o0, o1, relu, pf, pf_lines, 1); break;
        }
        p0 += np;
      }
    }
  }
}
#endif
