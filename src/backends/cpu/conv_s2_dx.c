/* The input gradient of a bf16 channels-last 3x3 convolution with stride 2
 * and padding 1 (even input size), as one forward convolution and a
 * shuffle:
 *
 *   D[n, a, b, (pa, pb, ic)] = sum over oc, da, db in {0, 1} of
 *                              dY[n, a + da, b + db, oc] W2[(pa, pb, ic), oc, da, db]
 *   dX[n, 2a + pa, 2b + pb, ic] (=|+=) D[n, a, b, (pa, pb, ic)]
 *
 * Each input position's row parity pa (column parity pb) fixes which taps
 * reach it: input row 2a + pa is read by output row oh through tap
 * kh = 2a + pa + 1 - 2 oh, so an even row only by oh = a (kh = 1), an odd
 * row by oh = a (kh = 2) and oh = a + 1 (kh = 0). W2 holds those taps,
 * zeros elsewhere: a 2x2 stride-1 convolution of dY (one zero row and
 * column past its end) with 4 IC outputs, whose output channels are the
 * four parity phases of dX.
 *
 * Why: oneDNN 2.6's AMX backward-data kernel for stride 2 ran at 200-500
 * GFLOP/s here, a third of its forward kernels' rate, while its brgemm
 * forward convolution runs this 2x2 problem (16/9 of the products, the
 * zeros) at 1.2-2.6 TFLOP/s. Per call (batch, channels, input size; ms,
 * 2 threads, Xeon with AMX; inputs cache-resident, so the memory side is
 * understated, and the step figures below are the ones that decide):
 * vgg-face's 64, 8 -> 16, 112: 2.87 -> 0.54 + the shuffle; ResNet-50's 16,
 * 128, 56: 3.98 -> 2.28; 16, 256, 28: 3.84 -> 1.70. Not for 512 channels (16, 512, 14: 3.63 -> 2.21): W2 is built from
 * the master weights every step, 16 OC IC values, which at 512 channels
 * costs what the product saves. Without AMX the forward kernel is no faster
 * than the backward one (and oneDNN picks blocked layouts there), and f32
 * is compute bound (the zeros cost 16/9): both keep oneDNN's kernel.
 *
 * In the step (same binary with and without, alternating, bf16 training,
 * img/s, medians): vgg-face b64 1940 -> 2066 (+6.5%; its 8 -> 16 layer's
 * backward 3.9 -> 2.9 ms), resunet50 b16 +1%, resnet50 b16 +1%.
 *
 * Values: W2 holds bf16(W) as the backward-data kernel reads it; each dX
 * value is one D value, summed in f32 and rounded once, as oneDNN's is. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

/* Input channels build_w2's per-thread row of W holds. */
enum { MAX_IC = 512 };

int cpu_conv_use_s2_dx = 1;
int64_t cpu_conv_s2_dx_max_channels = 256;

/* bf16 channels-last in and out, 3x3, stride 2, padding 1, no dilation, an
 * even input size, channels a multiple of 8 and at most the limit. */
static int fits(const cpu_conv_shape *c, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst) {
  return cpu_conv_use_s2_dx && src->data_type == dnnl_bf16 && dst->data_type == dnnl_bf16 &&
         cpu_md_lanes(src) == CPU_LANES_NHWC && cpu_md_lanes(dst) == CPU_LANES_NHWC && c->kh == 3 && c->kw == 3 &&
         c->sh == 2 && c->sw == 2 && c->pt == 1 && c->pl == 1 && c->dh == 1 && c->dw == 1 && c->ih % 2 == 0 &&
         c->iw % 2 == 0 && c->oh == c->ih / 2 && c->ow == c->iw / 2 && c->ic % 8 == 0 && c->ic <= MAX_IC &&
         c->ic <= cpu_conv_s2_dx_max_channels && c->oc <= cpu_conv_s2_dx_max_channels;
}

int cpu_s2dx_prepare(cpu_s2dx *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *src,
                     const dnnl_memory_desc_t *dst, size_t *bwd_scratch) {
  if (!fits(c, src, dst)) return 1;
  const int64_t batch = c->n, ic = c->ic, oc = c->oc, ih = c->ih, iw = c->iw;
  memset(m, 0, sizeof *m);
  m->n = batch, m->ic = ic, m->oc = oc, m->ih = ih, m->iw = iw, m->oh = ih / 2, m->ow = iw / 2;
  const dnnl_dims_t dy_d = {batch, oc, m->oh, m->ow}, d_d = {batch, 4 * ic, m->oh, m->ow}, w_d = {4 * ic, oc, 2, 2};
  const dnnl_dims_t one = {1, 1}, pad_l = {0, 0}, pad_r = {1, 1};
  dnnl_memory_desc_t w_any;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dy_md, 4, dy_d, dnnl_bf16, dnnl_acdb));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->d_md, 4, d_d, dnnl_bf16, dnnl_acdb));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->w_plain_md, 4, w_d, dnnl_bf16, dnnl_bacd));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, 4, w_d, dnnl_bf16, dnnl_format_tag_any));
  dnnl_convolution_desc_t d;
  DNNL_TRY(dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct, &m->dy_md, &w_any,
                                              NULL, &m->d_md, one, pad_l, pad_r));
  if (cpu_pd(&d, NULL, NULL, &m->pd)) return sp_error_clear(), 1;
  /* AMX only: with AVX512-BF16 alone (oneDNN capped at AVX512_CORE_BF16
   * here) the brgemm forward kernel saves nothing once the shuffle is
   * counted (64, 8 -> 16 at 112: 3.7 ms + shuffle against 4.2 for backward
   * data) or is much slower (16, 128 at 56: 29.0 against 16.3). */
  if (!strstr(cpu_pd_impl(m->pd), "brg") || !strstr(cpu_pd_impl(m->pd), "amx")) return cpu_pd_decline(&m->pd);
  size_t used;
  if (cpu_adopt_with_weights(n, m->pd, &m->prim, &m->w_plain_md, &m->w_md, &m->re_pd, &m->re, &used)) return -1;
  m->w_plain_off = cpu_take(&used, cpu_md_bytes(&m->w_plain_md));
  m->w_off = cpu_take(&used, cpu_md_bytes(&m->w_md));
  m->d_off = cpu_take(&used, cpu_md_bytes(&m->d_md));
  *bwd_scratch = used;
  return 0;
}

int cpu_s2dx_bind(cpu_s2dx *m, cpu_node *n, const void *dy, void *dx, char *bs) {
  m->w_plain = (uint16_t *)(bs + m->w_plain_off);
  m->d = (uint16_t *)(bs + m->d_off);
  m->dx = (uint16_t *)dx;
  if (cpu_bind_reorder(&m->w_re, n, m->re_pd, m->re, m->w_plain, bs + m->w_off, bs)) return -1;
  cpu_exec_init(&m->conv, m->prim);
  return cpu_exec_arg(&m->conv, n, DNNL_ARG_SRC, &m->dy_md, (void *)dy) ||
         cpu_exec_arg(&m->conv, n, DNNL_ARG_WEIGHTS, &m->w_md, bs + m->w_off) ||
         cpu_exec_arg(&m->conv, n, DNNL_ARG_DST, &m->d_md, m->d) || cpu_exec_scratchpad(&m->conv, n, m->pd, bs);
}

/* W2[(pa, pb, ic)][oc][da][db] = bf16(W[oc][ic][kh][kw]) or 0, stored
 * output channel of W outermost ([oc][q][da][db], oneDNN's bacd), so W is
 * read and W2 written in memory order. Per phase, the taps (kh 3 + kw) at
 * (da, db) = (0, 0), (0, 1), (1, 0), (1, 1) (an even row or column reads
 * tap 1 at offset 0 and none at 1; an odd one tap 2 at 0 and tap 0 at 1):
 *   (0, 0): 4 - - -   (0, 1): 5 3 - -   (1, 0): 7 - 1 -   (1, 1): 8 6 2 0
 * Written out: with the taps looked up per value, 256 channels took 0.45
 * ms a step, more than a tenth of what the path saves. */
static void build_w2(const cpu_s2dx *m, const float *w) {
  const int64_t ic_n = m->ic, oc_n = m->oc, phase = ic_n * 4, row = ic_n * 9, whole = row / VW * VW;
#pragma omp parallel for schedule(static) if (ic_n * oc_n >= 4096)
  for (int64_t oc = 0; oc < oc_n; oc++) {
    uint16_t kh[9 * MAX_IC]; /* W[oc] rounded, a vector at a time */
    const float *k32 = w + oc * row;
    for (int64_t i = 0; i < whole; i += VW) vstw(kh, i, vldw(k32, i, 0, VW), 1, VW);
    for (int64_t i = whole; i < row; i++) kh[i] = sp_bf16_round(k32[i]);
    uint16_t *o = m->w_plain + oc * 4 * phase;
    for (int64_t ic = 0; ic < ic_n; ic++, o += 4) {
      const uint16_t *k = kh + 9 * ic;
      uint16_t *p0 = o, *p1 = o + phase, *p2 = o + 2 * phase, *p3 = o + 3 * phase;
      p0[0] = k[4], p0[1] = p0[2] = p0[3] = 0;
      p1[0] = k[5], p1[1] = k[3], p1[2] = p1[3] = 0;
      p2[0] = k[7], p2[1] = 0, p2[2] = k[1], p2[3] = 0;
      p3[0] = k[8], p3[1] = k[6], p3[2] = k[2], p3[3] = k[0];
    }
  }
}

/* dX rows from D: per input row 2a + pa, position 2b + pb's IC values are
 * D(a, b)'s phase (pa, pb), so a pair of neighbouring positions is 2 IC
 * contiguous values on both sides. */
static void shuffle_into_dx(const cpu_s2dx *m, int accumulate) {
  const int64_t ic = m->ic, pair = 2 * ic;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < m->n * m->ih; r++) {
    const int64_t img = r / m->ih, y = r % m->ih, a = y / 2, pa = y % 2;
    const uint16_t *src = m->d + ((img * m->oh + a) * m->ow) * 4 * ic + pa * pair;
    uint16_t *dst = m->dx + r * m->iw * ic;
    for (int64_t b = 0; b < m->ow; b++) {
      const uint16_t *s = src + b * 4 * ic;
      uint16_t *d = dst + b * pair;
      int64_t i = 0;
      if (!accumulate) { /* 16 values (32 bytes) a move: pair is a multiple of 16 */
        for (; i < pair; i += 16) *(vh16u *)(d + i) = *(const vh16u *)(s + i);
        continue;
      }
      for (; i + VW <= pair; i += VW) vstw(d, i, vldw(d, i, 1, VW) + vldw(s, i, 1, VW), 1, VW);
      for (; i < pair; i += 8) vstw(d, i, vldw(d, i, 1, 8) + vldw(s, i, 1, 8), 1, 8);
    }
  }
}

void cpu_s2dx_run(const cpu_s2dx *m, const float *w, int accumulate) {
  build_w2(m, w);
  cpu_exec_run(&m->w_re);
  cpu_exec_run(&m->conv);
  shuffle_into_dx(m, accumulate);
}
#endif
