/* A 3x3 convolution (stride 1, padding 1, no bias) between two 8-channel
 * maps held in 16-channel blocks (nChw16c, half of each position padding),
 * f32, as loops of our own: forward, input gradient and weight gradient, in
 * plans that do not fold weights (training, evaluation). Where: ResUNet-50's
 * last decoder block (8 -> 8 at 224x224), between its 1x1 layers, whose
 * 8-channel outputs oneDNN keeps in 16-channel blocks on AVX-512.
 *
 * Why: on those blocks oneDNN 2.6 has only its reference kernel forward, so
 * it read the input reordered to plain NCHW (5.0 ms a step at batch 16) and
 * ran its direct kernel (5.7 ms); backward data ran on the padded blocks,
 * 16 x 16 channels for 8 x 8 (14 ms, a quarter of it useful), and the
 * weight gradient on channels-last copies of both (6.5 ms plus reorders):
 * about 36 of ResUNet-50's f32 step (Xeon, 2 threads, per-node profile).
 *
 * How: the output's 16 lanes are a position's output channels (8 real, and
 * 8 whose weights are zero, so the padding stays zero), and per tap and
 * input channel the input value is broadcast: half the lanes are wasted,
 * where oneDNN's blocks wasted three quarters, and no transpose is needed.
 * Per output row, the three input rows it reads sit in a ring of compact
 * 8-channel rows with a zero position either side (the padding), about
 * 22 KB a thread; a block of 16 positions keeps 16 accumulators.
 * The input gradient is the same loop on dY with the kernel flipped and its
 * channels swapped. The weight gradient keeps, per kernel row, 24 sums
 * (3 columns x 8 input channels, the output channels in the lanes), a dY
 * vector times a broadcast input value; each row's f32 sums go into per-
 * thread doubles, added in thread order. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "ops/ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

int cpu_conv_use_mid8 = 1;
long cpu_mid8_calls;

enum { C8 = 8, L16 = 16, TAPS = 9, PB = 16 /* positions a block */ };

typedef struct {
  cpu_node base;
  int64_t n, h, w;
  int need_dx, need_dw, threads, stream;
  size_t ring_bytes, fwd_ring_off, bwd_ring_off, acc_off;
  char *fs, *bs;
  /* Forward and input-gradient weights: [tap][input channel][16 lanes], the
   * lanes the output channels (8, then zeros). */
  float wf[TAPS * C8 * L16];
  float wb[TAPS * C8 * L16];
} mid8_node;

#if defined(__AVX512F__)
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* Row iy of image n (16-lane positions) into a ring row: 8 channels a
 * position, position 0 and w + 1 zero; zeros outside the image. */
static void load_row(const mid8_node *s, const float *x, int64_t n, int64_t iy, float *row) {
  const int64_t w = s->w;
  if (iy < 0 || iy >= s->h) {
    memset(row, 0, sizeof(float) * (size_t)(w + 2) * C8);
    return;
  }
  const float *src = x + ((n * s->h + iy) * w) * L16;
  memset(row, 0, sizeof(float) * C8);
  memset(row + (w + 1) * C8, 0, sizeof(float) * C8);
  for (int64_t x0 = 0; x0 < w; x0++) memcpy(row + (x0 + 1) * C8, src + x0 * L16, sizeof(float) * C8);
}

/* The three input rows output row r (of n h) reads, in the thread's ring:
 * input row iy in slot (iy + 1) % 3, so the next output row of the same
 * image loads one new row. *have: the output row the ring was filled for. */
static void ring_rows(const mid8_node *s, const float *x, float *buf, int64_t r, int64_t *have, const float *rows[3]) {
  const int64_t n = r / s->h, oy = r % s->h, row_f = (s->w + 2) * C8;
  float *slot[3];
  for (int k = 0; k < 3; k++) slot[k] = buf + ((oy + k) % 3) * row_f;
  if (*have == r - 1 && oy > 0)
    load_row(s, x, n, oy + 1, slot[2]);
  else
    for (int k = 0; k < 3; k++) load_row(s, x, n, oy + k - 1, slot[k]);
  *have = r;
  for (int k = 0; k < 3; k++) rows[k] = slot[k];
}

/* One output row from the ring's three rows: out (=|+=) sum over taps and
 * channels of row[ky][(x + kx) * 8 + c] wt[(ky * 3 + kx) * 8 + c]. */
static void conv_row(const float *const rows[3], const float *wt, float *out, int64_t w, int add, int nt) {
  int64_t x0 = 0;
  for (; x0 + PB <= w; x0 += PB) {
    v16 acc[PB];
    VEC_UNROLL
    for (int p = 0; p < PB; p++) acc[p] = (v16){0};
    for (int t = 0; t < TAPS; t++) {
      const float *r = rows[t / 3] + (x0 + t % 3) * C8;
      for (int c = 0; c < C8; c++) {
        const v16 wv = *(const v16u *)(wt + (t * C8 + c) * L16);
        VEC_UNROLL
        for (int p = 0; p < PB; p++) acc[p] += r[p * C8 + c] * wv;
      }
    }
    VEC_UNROLL
    for (int p = 0; p < PB; p++) {
      float *o = out + (x0 + p) * L16;
      if (add)
        *(v16 *)o += acc[p];
      else if (nt)
        _mm512_stream_ps(o, (__m512)acc[p]);
      else
        *(v16 *)o = acc[p];
    }
  }
  for (; x0 < w; x0++) { /* the tail, a position at a time */
    v16 acc = {0};
    for (int t = 0; t < TAPS; t++)
      for (int c = 0; c < C8; c++) acc += rows[t / 3][(x0 + t % 3) * C8 + c] * *(const v16u *)(wt + (t * C8 + c) * L16);
    float *o = out + x0 * L16;
    *(v16 *)o = add ? *(v16 *)o + acc : acc;
  }
}

/* y (=|+=) x * wt over all rows; x and y in 16-lane positions. */
static void conv_all(const mid8_node *s, const float *x, float *y, const float *wt, char *ring, int add) {
  const int64_t rows_all = s->n * s->h;
#pragma omp parallel num_threads(s->threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    float *buf = (float *)(ring + (size_t)tid * s->ring_bytes);
    const int64_t r0 = rows_all * tid / nt, r1 = rows_all * (tid + 1) / nt;
    int64_t have = -2;
    for (int64_t r = r0; r < r1; r++) {
      const float *rows[3];
      ring_rows(s, x, buf, r, &have, rows);
      conv_row(rows, wt, y + r * s->w * L16, s->w, add, s->stream && !add);
    }
    if (s->stream) _mm_sfence();
  }
}

/* dW[o][i][ky][kx] (=|+=) sum of dY[o] x[i] over positions. */
static void weight_grad(const mid8_node *s, const float *x, const float *dy, float *dw, int fresh) {
  const int64_t rows_all = s->n * s->h;
  enum { SUMS = TAPS * C8 * L16 };
#pragma omp parallel num_threads(s->threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    float *buf = (float *)(s->bs + s->bwd_ring_off + (size_t)tid * s->ring_bytes);
    double *acc = (double *)(s->bs + s->acc_off) + (size_t)tid * SUMS;
    memset(acc, 0, sizeof(double) * SUMS);
    const int64_t r0 = rows_all * tid / nt, r1 = rows_all * (tid + 1) / nt;
    int64_t have = -2;
    for (int64_t r = r0; r < r1; r++) {
      const float *rows[3];
      ring_rows(s, x, buf, r, &have, rows);
      const float *g = dy + r * s->w * L16;
      for (int ky = 0; ky < 3; ky++) {
        v16 sum[3 * C8]; /* 24 registers: the loops below unrolled in full */
        VEC_UNROLL
        for (int kx = 0; kx < 3; kx++) {
          VEC_UNROLL
          for (int c = 0; c < C8; c++) sum[kx * C8 + c] = (v16){0};
        }
        const float *xr = rows[ky];
        for (int64_t x0 = 0; x0 < s->w; x0++) {
          /* The position's 24 inputs (3 columns x 8 channels, in a row)
           * broadcast from memory inside the FMAs: with the address hidden
           * from it, GCC no longer keeps the 16 a position shares with the
           * next in registers, broadcast on the port the FMAs need. */
          const float *xp = xr + x0 * C8;
          __asm__("" : "+r"(xp));
          const v16 gv = *(const v16 *)(g + x0 * L16);
          VEC_UNROLL
          for (int kx = 0; kx < 3; kx++) {
            VEC_UNROLL
            for (int c = 0; c < C8; c++) sum[kx * C8 + c] += xp[kx * C8 + c] * gv;
          }
        }
        for (int k = 0; k < 3 * C8; k++) {
          double *a = acc + ((ky * 3 + k / C8) * C8 + k % C8) * L16;
          for (int l = 0; l < C8; l++) a[l] += sum[k][l];
        }
      }
    }
#pragma omp barrier
#pragma omp single
    for (int o = 0; o < C8; o++)
      for (int i = 0; i < C8; i++)
        for (int t = 0; t < TAPS; t++) {
          double v = 0;
          for (int k = 0; k < nt; k++) v += ((double *)(s->bs + s->acc_off))[(size_t)k * SUMS + (t * C8 + i) * L16 + o];
          float *d = dw + (o * C8 + i) * TAPS + t;
          *d = (float)v + (fresh ? 0.0f : *d);
        }
  }
}
#endif

/* The weights as the loops read them, from the plain [8][8][3][3] ones. */
static void arrange_weights(mid8_node *s, const float *w) {
  memset(s->wf, 0, sizeof s->wf);
  memset(s->wb, 0, sizeof s->wb);
  for (int o = 0; o < C8; o++)
    for (int i = 0; i < C8; i++)
      for (int t = 0; t < TAPS; t++) {
        const float v = w[(o * C8 + i) * TAPS + t];
        s->wf[(t * C8 + i) * L16 + o] = v;
        s->wb[((TAPS - 1 - t) * C8 + o) * L16 + i] = v; /* flipped, the channels swapped */
      }
}

static void mid8_forward(cpu_node *nd, const sp_op_args *a) {
  mid8_node *s = (mid8_node *)nd;
  __atomic_add_fetch(&cpu_mid8_calls, 1, __ATOMIC_RELAXED);
  arrange_weights(s, a->param[0]->data);
#if defined(__AVX512F__)
  conv_all(s, a->in[0]->data, a->out->data, s->wf, s->fs + s->fwd_ring_off, 0);
#endif
}

static void mid8_backward(cpu_node *nd, const sp_op_args *a) {
  mid8_node *s = (mid8_node *)nd;
#if defined(__AVX512F__)
  if (s->need_dx && a->d_in[0])
    conv_all(s, a->d_out->data, a->d_in[0]->data, s->wb, s->bs + s->bwd_ring_off, !(a->d_in_fresh & 1u));
  if (s->need_dw && a->d_param[0])
    weight_grad(s, a->in[0]->data, a->d_out->data, a->d_param[0]->data, (a->d_param_fresh & 1u) != 0);
#else
  (void)s, (void)a;
#endif
}

static int mid8_bind(cpu_node *nd, const sp_op_args *a, char *fs, char *bs) {
  (void)a;
  mid8_node *s = (mid8_node *)nd;
  s->fs = fs, s->bs = bs;
  return 0;
}

static const cpu_vt mid8_vt = {mid8_forward, mid8_backward, mid8_bind, NULL};

/* f32, AVX-512, not frozen; 3x3, stride 1, padding 1, one group, no
 * dilation, no bias; 8 channels in and out, the input in 16-channel blocks. */
static int applies(const sp_op_prep *p) {
#if defined(__AVX512F__)
  const sp_conv2d_attr *at = p->attr;
  const dnnl_memory_desc_t *md = p->in_layout[0];
  const sp_shape *x = &p->in_shape[0], *w = &p->param_shape[0], *y = &p->out_shape;
  return cpu_conv_use_mid8 && !p->bf16 && !p->frozen && !p->out_plain && p->n_param == 1 && at && at->groups == 1 &&
         at->stride_h == 1 && at->stride_w == 1 && at->pad_h == 1 && at->pad_w == 1 && at->dil_h == 1 &&
         at->dil_w == 1 && x->ndim == 4 && x->d[1] == C8 && w->d[0] == C8 && w->d[1] == C8 && w->d[2] == 3 &&
         w->d[3] == 3 && y->d[2] == x->d[2] && y->d[3] == x->d[3] && md && md->data_type == dnnl_f32 &&
         cpu_md_lanes(md) == L16;
#else
  (void)p;
  return 0;
#endif
}

int cpu_conv_mid8_prepare(sp_op_prep *p) {
  if (!applies(p)) return 1;
  mid8_node *s = cpu_node_new(sizeof *s, &mid8_vt);
  const sp_shape *x = &p->in_shape[0];
  s->n = x->d[0], s->h = x->d[2], s->w = x->d[3];
  s->threads = omp_get_max_threads();
  s->need_dx = p->run_backward && p->need_d_in[0];
  s->need_dw = p->run_backward && p->param_grad[0];
  s->base.out_md = *(const dnnl_memory_desc_t *)p->in_layout[0]; /* the input's blocks */
  s->stream = (int64_t)cpu_md_bytes(&s->base.out_md) >= cpu_stream_threshold_plan(p->run_backward);
  s->ring_bytes = ((size_t)(s->w + 2) * C8 * 3 * sizeof(float) + 63) & ~(size_t)63;
  size_t fwd = 0, bwd = 0;
  s->fwd_ring_off = cpu_take(&fwd, (size_t)s->threads * s->ring_bytes);
  if (p->run_backward) {
    s->bwd_ring_off = cpu_take(&bwd, (size_t)s->threads * s->ring_bytes);
    s->acc_off = cpu_take(&bwd, (size_t)s->threads * TAPS * C8 * L16 * sizeof(double));
  }
  return cpu_report_scratch(p, &s->base, fwd, bwd);
}

int cpu_conv_is_mid8(const void *state) { return state && ((const cpu_node *)state)->vt == &mid8_vt; }
#endif
