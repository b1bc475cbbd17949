/* The first convolution of a bf16 training plan when it reads the plain f32
 * image with few channels (grey or colour) and has a small window: forward
 * and weight gradient as loops of our own, from a padded bf16 copy of the
 * image (which backward reuses) into channels-last bf16.
 *
 * Why: oneDNN 2.6 has no AMX kernel for one input channel; vgg-face's stem
 * (1 -> 8 channels, 3x3, stride 2, 224x224, batch 64) took 3.0 ms forward on
 * its avx512 brgconv, 8.3 ms for the weight gradient and 1.7 ms to reorder
 * the image: 13 of a 65 ms bf16 step, for 58 M multiply-adds a pass. Here
 * (same shapes, 2 threads): padded copy 1.2-1.7 ms, forward rows 2.7 ms,
 * weight gradient about 5 ms; vgg-face bf16 steps 60-61 ms against 65-66.
 *
 * Forward: per 8 output positions and 8 output channels, eight vectors of
 * positions summed over the window's taps (one broadcast FMA each), then
 * transposed into channel vectors. The copy splits each padded row by column
 * phase (stride), so a tap's consecutive positions are consecutive values.
 * Weight gradient: per tap and 8 channels, the row's sum of x dy.
 *
 * Values are what the oneDNN path computes: the image and the weights are
 * rounded to bf16, products summed in f32, the output rounded to bf16 (the
 * tests find the outputs bit-identical). The weight gradient sums a row of
 * positions in f32 and rows in double, per thread over a static share of the
 * rows, added in thread order: the same bits for a given thread count. */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

enum { STEM_MAX_IC = 4, STEM_MAX_K = 49, STEM_MAX_OC = 64 };

int cpu_conv_use_stem = 1;

typedef struct {
  cpu_node base;
  int64_t n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, k; /* k = ic kh kw taps */
  int64_t hp, wq; /* the padded image's rows, and values per phase row (pad_image) */
  int has_bias, threads;
  size_t wt_off, acc_off; /* in forward / backward scratch */
  uint16_t *img;          /* bound: the padded bf16 image (saved for backward) */
  float *wt;
  double *acc;
} stem_node;

/* The image in bf16, zero-padded and split by column phase: padded row
 * (n, i, y) is sw rows of wq values, phase p holding padded columns
 * m sw + p. Position ox of tap column c then reads phase (c dw) % sw at
 * m = ox + (c dw) / sw: consecutive positions are consecutive values,
 * whatever the stride. Rows run long enough that the last group of 8
 * positions reads zeros, not the next row. Forward and backward read it;
 * it is what oneDNN's reorder gives its convolution, rearranged. */
INLINE void copy_phase(uint16_t *d, const float *from, int64_t n, const int64_t sw) {
  for (int64_t m = 0; m < n; m++) d[m] = sp_bf16_round(from[m * sw]);
}

static void pad_image(const stem_node *s, const float *x, uint16_t *img) {
  const int64_t rows = s->n * s->ic * s->hp, sw = s->sw, wq = s->wq;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t plane = r / s->hp, y = r % s->hp - s->ph;
    uint16_t *dst = img + r * sw * wq;
    memset(dst, 0, sizeof(uint16_t) * (size_t)(sw * wq));
    if (y < 0 || y >= s->ih) continue;
    const float *src = x + (plane * s->ih + y) * s->iw;
    for (int64_t p = 0; p < sw; p++) {
      /* m sw + p - pw in [0, iw) */
      const int64_t m0 = p >= s->pw ? 0 : (s->pw - p + sw - 1) / sw, m1 = (s->iw + s->pw - p + sw - 1) / sw;
      uint16_t *d = dst + p * wq;
      const int64_t n = (m1 < wq ? m1 : wq) - m0;
      const float *from = src + m0 * sw + p - s->pw; /* >= src by the choice of m0 */
      if (sw == 1)
        copy_phase(d + m0, from, n, 1); /* the stride a constant: vectorised */
      else if (sw == 2)
        copy_phase(d + m0, from, n, 2);
      else
        copy_phase(d + m0, from, n, sw);
    }
  }
}

/* Where tap (r, c, i) of output row `row` (image n, row oy) reads position
 * 0; position ox is ox values on. Taps in order t = (r kw + c) ic + i. */
static void tap_rows(const stem_node *s, const uint16_t *img, int64_t row, const uint16_t **src) {
  const int64_t n = row / s->oh, oy = row % s->oh;
  int64_t t = 0;
  for (int64_t r = 0; r < s->kh; r++)
    for (int64_t c = 0; c < s->kw; c++)
      for (int64_t i = 0; i < s->ic; i++) {
        const int64_t y = oy * s->sh + r * s->dh, off = c * s->dw;
        src[t++] = img + (((n * s->ic + i) * s->hp + y) * s->sw + off % s->sw) * s->wq + off / s->sw;
      }
}

INLINE float xval(const uint16_t *x, int64_t at) { return sp_bf16_widen(x[at]); }

/* Rows of a[] become columns: o[q][l] = a[l][q] (8 x 8, three shuffle stages). */
INLINE void transpose8(const vf8 *a, vf8 *o) {
  vf8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(a[i], a[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(a[i], a[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; h++) {
      u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int q = 0; q < 4; q++) {
    o[q] = __builtin_shufflevector(u[q], u[q + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    o[q + 4] = __builtin_shufflevector(u[q], u[q + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

/* One output row, channels-last: for every 8 positions and group of 8
 * output channels, 8 vectors of 8 positions (one per channel) summed over
 * the taps, then turned into 8 channel vectors, one per position. */
static void forward_row(const stem_node *s, const uint16_t *const *src, const float *bias, uint16_t *out) {
  const int64_t oc = s->oc;
  for (int64_t j = 0; j < s->ow; j += 8) {
    const int64_t np = s->ow - j < 8 ? s->ow - j : 8;
    for (int64_t c = 0; c < oc; c += 8) {
      vf8 a[8], o[8];
#pragma GCC unroll 8
      for (int l = 0; l < 8; l++) a[l] = vbcast(bias ? bias[c + l] : 0.0f);
      for (int64_t t = 0; t < s->k; t++) {
        const vf8 x = vld(src[t], j, 1);
        const float *w = s->wt + t * oc + c;
#pragma GCC unroll 8 /* a[] in registers */
        for (int l = 0; l < 8; l++) a[l] += x * w[l];
      }
      transpose8(a, o);
      for (int64_t q = 0; q < np; q++) vst(out, (j + q) * oc + c, o[q], 1);
    }
  }
}

/* One output row's weight gradient: per tap and group of 8 output channels,
 * the row's sum of x dy (four partial sums so the FMA chains overlap), added
 * into dw_row[t][o]; the bias row dw_row[k][o] sums dy. */
static void backward_row(const stem_node *s, const uint16_t *const *src, const uint16_t *dy, double *dw_row) {
  const int64_t oc = s->oc, ow = s->ow;
  for (int64_t c = 0; c < oc; c += 8)
    for (int64_t t = 0; t <= s->k; t++) {
      const uint16_t *x = t < s->k ? src[t] : NULL;
      vf8 p0 = vbcast(0.0f), p1 = p0, p2 = p0, p3 = p0;
      int64_t j = 0;
      if (x) {
        for (; j + 4 <= ow; j += 4) {
          p0 += xval(x, j) * vld(dy, j * oc + c, 1), p1 += xval(x, j + 1) * vld(dy, (j + 1) * oc + c, 1);
          p2 += xval(x, j + 2) * vld(dy, (j + 2) * oc + c, 1), p3 += xval(x, j + 3) * vld(dy, (j + 3) * oc + c, 1);
        }
        for (; j < ow; j++) p0 += xval(x, j) * vld(dy, j * oc + c, 1);
      } else {
        for (; j + 4 <= ow; j += 4) {
          p0 += vld(dy, j * oc + c, 1), p1 += vld(dy, (j + 1) * oc + c, 1);
          p2 += vld(dy, (j + 2) * oc + c, 1), p3 += vld(dy, (j + 3) * oc + c, 1);
        }
        for (; j < ow; j++) p0 += vld(dy, j * oc + c, 1);
      }
      const vf8 sum = (p0 + p1) + (p2 + p3);
      for (int l = 0; l < 8; l++) dw_row[t * oc + c + l] += sum[l];
    }
}

static void stem_forward(cpu_node *n, const sp_op_args *a) {
  const stem_node *s = (const stem_node *)n;
  const int64_t oc = s->oc;
  const float *w = a->param[0]->data, *bias = s->has_bias ? a->param[1]->data : NULL;
  /* [oc][ic][kh][kw] -> [tap][oc] in bf16 values, tap = (r kw + c) ic + i. */
  for (int64_t o = 0; o < oc; o++)
    for (int64_t i = 0; i < s->ic; i++)
      for (int64_t r = 0; r < s->kh; r++)
        for (int64_t c = 0; c < s->kw; c++)
          s->wt[((r * s->kw + c) * s->ic + i) * oc + o] =
              sp_bf16_widen(sp_bf16_round(w[((o * s->ic + i) * s->kh + r) * s->kw + c]));
  pad_image(s, a->in[0]->data, s->img);
  uint16_t *y = a->out->data;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < s->n * s->oh; row++) {
    const uint16_t *src[STEM_MAX_K];
    tap_rows(s, s->img, row, src);
    forward_row(s, src, bias, y + row * s->ow * oc);
  }
}

/* dW[o][tap] (and dbias[o]) += sum over positions of dy[pos][o] x[pos][tap]:
 * rows in f32, added per thread in double, threads in order. */
static void stem_backward(cpu_node *n, const sp_op_args *a) {
  const stem_node *s = (const stem_node *)n;
  if (!a->d_param[0] && !(s->has_bias && a->d_param[1])) return;
  const int64_t oc = s->oc, k = s->k, per = (k + 1) * oc; /* the last row: the bias */
  const uint16_t *dy = a->d_out->data;
#pragma omp parallel num_threads(s->threads)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num(), rows = s->n * s->oh;
    double *acc = s->acc + tid * per;
    const uint16_t *src[STEM_MAX_K];
    for (int64_t j = 0; j < per; j++) acc[j] = 0.0;
    for (int64_t row = rows * tid / nt; row < rows * (tid + 1) / nt; row++) {
      tap_rows(s, s->img, row, src);
      backward_row(s, src, dy + row * s->ow * oc, acc);
    }
#pragma omp barrier
#pragma omp single
    {
      float *dw = a->d_param[0] ? a->d_param[0]->data : NULL;
      float *db = s->has_bias && a->d_param[1] ? a->d_param[1]->data : NULL;
      for (int64_t j = 0; j < per; j++) {
        double sum = 0.0;
        for (int64_t t = 0; t < nt; t++) sum += s->acc[t * per + j];
        const int64_t t = j / oc, o = j % oc;
        if (t == k) {
          if (db) db[o] += (float)sum;
        } else if (dw) {
          const int64_t r = t / (s->kw * s->ic), c = t / s->ic % s->kw, i = t % s->ic;
          dw[((o * s->ic + i) * s->kh + r) * s->kw + c] += (float)sum;
        }
      }
    }
  }
}

static int stem_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  stem_node *s = (stem_node *)n;
  s->img = a->saved;
  s->wt = (float *)(fs + s->wt_off);
  s->acc = (double *)(bs + s->acc_off);
  return 0;
}

static const cpu_vt stem_vt = {stem_forward, stem_backward, stem_bind, NULL};

/* A bf16 training plan's conv on the plain f32 image, output channels-last
 * bf16, whose input gradient nobody needs. */
static int applies(const sp_op_prep *p) {
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  return p->bf16 && p->run_backward && !p->out_plain && !p->need_d_in[0] && p->in_layout[0] == NULL &&
         p->in_dtype[0] == SP_F32 && in->ndim == 4 && at->groups == 1 && in->d[1] <= STEM_MAX_IC &&
         in->d[1] * w->d[2] * w->d[3] <= STEM_MAX_K && w->d[0] % 8 == 0 && w->d[0] <= STEM_MAX_OC;
}

int cpu_conv_stem_prepare(sp_op_prep *p) {
  if (!cpu_conv_use_stem || !applies(p)) return 1;
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  stem_node *s = cpu_node_new(sizeof *s, &stem_vt);
  s->n = in->d[0], s->ic = in->d[1], s->ih = in->d[2], s->iw = in->d[3];
  s->oc = w->d[0], s->oh = p->out_shape.d[2], s->ow = p->out_shape.d[3], s->kh = w->d[2], s->kw = w->d[3];
  s->sh = at->stride_h, s->sw = at->stride_w, s->ph = at->pad_h, s->pw = at->pad_w, s->dh = at->dil_h,
  s->dw = at->dil_w;
  s->k = s->ic * s->kh * s->kw;
  s->has_bias = p->n_param > 1;
  s->threads = omp_get_max_threads();
  dnnl_dims_t od = {s->n, s->oc, s->oh, s->ow};
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, dnnl_bf16, dnnl_acdb) != dnnl_success) {
    cpu_node_free(&s->base);
    return 1;
  }
  s->hp = s->ih + 2 * s->ph;
  s->wq = s->ow + 8 + (s->kw - 1) * s->dw / s->sw; /* the last group of 8 and the widest tap offset */
  size_t fwd = 0, bwd = 0;
  s->wt_off = cpu_take(&fwd, sizeof(float) * (size_t)(s->k * s->oc));
  s->acc_off = cpu_take(&bwd, sizeof(double) * (size_t)((s->k + 1) * s->oc * s->threads));
  p->saved_bytes = sizeof(uint16_t) * (size_t)(s->n * s->ic * s->hp * s->sw * s->wq);
  return cpu_report_scratch(p, &s->base, fwd, bwd);
}

int cpu_conv_is_stem(const void *state) { return ((const cpu_node *)state)->vt == &stem_vt; }
#endif
