/* An f32 training 3x3 convolution with stride 2 and padding 1 from an
 * 8-channel channels-last input (even height and width) into 16 to 64
 * channels-last output channels, no bias, as loops of our own: forward
 * (with the output's batch statistics for the batch norm after it),
 * input gradient and weight gradient. Where: vgg-face's second layer
 * (8 -> 16, 112 -> 56, after the stem).
 *
 * Why: oneDNN 2.6 ran its three passes at about a third of the FMA peak
 * (vgg-face batch 64, Xeon with AMX, 2 threads, ONEDNN_VERBOSE: forward
 * 4.3-4.4 ms on brgconv, backward data 4.7-4.9 and backward weights
 * 3.9-4.3 on jit:avx512_core; 0.46 GFLOP each), 13.3 ms of a 97 ms step.
 * With 8 input channels its kernels have 8 products a tap to sum before
 * they move on. Each pass moves 38 MB (the input 25.7, the output or its
 * gradient 12.8): about 1.5 ms at this machine's memory rate, as much again
 * as the products at the FMA peak, so the loops are built to overlap the
 * two (see pf_cursor).
 *
 * How, per output row (image n, row oy) of a thread's static share, the
 * input read where it lies (the first and a short last group of positions
 * from small padded copies):
 *   - forward: 16 output positions keep 16 accumulators (the output
 *     channels in the lanes); per tap and input channel a weight vector and
 *     16 FMAs, each with its input value broadcast from memory. The sums of
 *     the output and its square go to the batch norm after it
 *     (cpu_node.stats), which then makes no pass of its own for them;
 *   - input gradient: the two input columns 2a and 2a + 1 of a row are one
 *     vector (8 channels each, adjacent in memory). Column 2a is reached
 *     only by output column a through tap kx = 1, column 2a + 1 by output
 *     column a (kx = 2) and a + 1 (kx = 0); rows likewise (row 2b by output
 *     row b through ky = 1, row 2b + 1 by b (ky = 2) and b + 1 (ky = 0)).
 *     So per output channel a vector of [kx = 1 | kx = 2] weights times
 *     dY[a] and one of [0 | kx = 0] times dY[a + 1]: three quarters of the
 *     lanes useful, no transpose, and every input row written once, by
 *     the iteration of output row b (rows 2b and 2b + 1);
 *   - weight gradient: per kernel row, 24 sums (3 columns x 8 input
 *     channels, the output channels in the lanes) stay in registers over
 *     the output row, a dY vector times broadcast inputs; added into f32
 *     sums per thread, which go into doubles every FLUSH_ROWS rows, and the
 *     threads' doubles are added in thread order (the result does not
 *     depend on timing).
 * Backward runs both gradients in the same pass over output rows: dY's row
 * is read once for both. Outputs past half the last-level cache (the
 * output, a fresh input gradient) are written past the caches, as
 * bnorm_kernels.c's.
 *
 * Measured (vgg-face f32 batch 64, Xeon with AMX, 2 threads, this node and
 * oneDNN's alternating in one session, `ab_switch.sh cpu_conv_use_in8s2`,
 * medians of 5 runs a side, fwd + bwd per step): 10.5 against 13.8 ms, and
 * 12.3 against 17.0 with the batch norm's forward 4.7 against 5.5 in a
 * slower hour. Alone, batch 64, caches dirtied between calls: forward
 * 3.0-3.2 ms, both gradients 6.5. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/bnorm.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "ops/ops.h"

int cpu_conv_use_in8s2 = 1;
long cpu_in8s2_calls;

enum {
  IC = 8,
  L16 = 16,
  KS = 3,
  TAPS = KS * KS,
  MAX_OC = 64,
  PG = 16,         /* output positions (input column pairs) a group: one accumulator each */
  FLUSH_ROWS = 16, /* output rows whose weight-gradient sums stay in f32 */
  PF_ROWS = 1,     /* output rows ahead whose input lines are prefetched */
  PF_LINES = 4     /* of them, lines prefetched per tap of a forward group */
};

typedef struct {
  cpu_node base;
  int64_t n, ih, iw, oc, oh, ow;
  int need_dx, need_dw, threads, stream;
  size_t buf_bytes; /* per thread: the edge windows (windows(), dy_window()) */
  size_t fwd_buf_off, bwd_buf_off, sum_off, acc_off, stat_off;
  char *fs, *bs;
  /* Forward: [tap][input channel][oc]. Input gradient, per kernel row and
   * output channel, [8 lanes kx = 1 | 8 lanes kx = 2] and [0 | kx = 0]. */
  float wf[TAPS * IC * MAX_OC];
  float wa[KS * MAX_OC * L16], wb[KS * MAX_OC * L16];
} in8s2_node;

/* The weights as the loops read them, from the plain [oc][8][3][3] ones. */
static void arrange_weights(in8s2_node *s, const float *w) {
  const int64_t oc = s->oc;
  memset(s->wb, 0, sizeof s->wb);
  for (int64_t o = 0; o < oc; o++)
    for (int i = 0; i < IC; i++)
      for (int ky = 0; ky < KS; ky++)
        for (int kx = 0; kx < KS; kx++) {
          const float v = w[((o * IC + i) * KS + ky) * KS + kx];
          s->wf[((ky * KS + kx) * IC + i) * oc + o] = v;
          float *a = s->wa + (ky * oc + o) * L16, *b = s->wb + (ky * oc + o) * L16;
          if (kx == 1) a[i] = v;
          if (kx == 2) a[IC + i] = v;
          if (kx == 0) b[IC + i] = v;
        }
}

#if defined(__AVX512F__)
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* Lines to prefetch, a few at a time between the products: one range, then
 * a second. A burst of a row's 100-odd prefetches stalled the thread on its
 * fill buffers about as long as a copy of the row; spread out, they took
 * the forward pass from 4.2-4.3 to 3.2-3.3 ms (batch 64, caches dirtied by
 * 64 MB between calls). */
typedef struct {
  const char *at, *end, *at2, *end2;
} pf_cursor;

INLINE void pf_step(pf_cursor *c, int lines) {
  for (int i = 0; i < lines; i++) {
    if (c->at >= c->end) {
      if (c->at2 >= c->end2) return;
      c->at = c->at2, c->end = c->end2, c->at2 = c->end2;
    }
    _mm_prefetch(c->at, _MM_HINT_T0);
    c->at += 64;
  }
}

/* The lines output row r + PF_ROWS reads first: its two new input rows
 * (adjacent in memory; x) and its dY row (dy, backward). */
static pf_cursor ahead(const in8s2_node *s, const float *x, const float *dy, int64_t r) {
  pf_cursor c = {NULL, NULL, NULL, NULL};
  const int64_t next = r + PF_ROWS;
  if (next >= s->n * s->oh) return c;
  const int64_t n = next / s->oh, oy = next % s->oh, iy = 2 * oy, rows = iy + 1 < s->ih ? 2 : 1;
  if (x) {
    c.at = (const char *)(x + (n * s->ih + iy) * s->iw * IC);
    c.end = c.at + sizeof(float) * (size_t)(rows * s->iw * IC);
  }
  if (dy) {
    c.at2 = (const char *)(dy + next * s->ow * s->oc);
    c.end2 = c.at2 + sizeof(float) * (size_t)(s->ow * s->oc);
  }
  return c;
}

/* The input rows output row r reads, in place (NULL outside the image). */
static void input_rows(const in8s2_node *s, const float *x, int64_t r, const float *xr[KS]) {
  const int64_t n = r / s->oh, oy = r % s->oh;
  for (int k = 0; k < KS; k++) {
    const int64_t iy = 2 * oy + k - 1;
    xr[k] = iy < 0 || iy >= s->ih ? NULL : x + (n * s->ih + iy) * s->iw * IC;
  }
}

/* The windows of the forward group of pg positions from ox0 (per kernel
 * row, input columns 2 ox0 - 1 .. 2 (ox0 + pg) - 1): in place where they
 * lie inside the row, else copied into buf with the padding's zeros (the
 * first group, and a last one that reaches past the row). Reading in place
 * rather than copying every row into padded rows: the same time from
 * memory, 7% less from cache. */
static void windows(const in8s2_node *s, const float *const xr[KS], int64_t ox0, int pg, float *buf,
                    const float *win[KS]) {
  const int64_t first = 2 * ox0 - 1, cols = 2 * pg + 1;
  for (int ky = 0; ky < KS; ky++) {
    if (!xr[ky] || (first >= 0 && first + cols <= s->iw)) {
      win[ky] = xr[ky] ? xr[ky] + first * IC : NULL;
      continue;
    }
    float *to = buf + ky * (2 * PG + 1) * IC;
    for (int64_t j = 0; j < cols; j++) {
      const int64_t c = first + j;
      if (c >= 0 && c < s->iw)
        memcpy(to + j * IC, xr[ky] + c * IC, sizeof(float) * IC);
      else
        memset(to + j * IC, 0, sizeof(float) * IC);
    }
    win[ky] = to;
  }
}

/* The batch statistics of the output, for the batch norm after it
 * (cpu_node.stats): per thread, sums of y - K and (y - K)^2 over each row
 * in f32 (K the thread's first output position: the shift keeps the
 * variance exact where |mean| >> std, as bnorm_kernels.c's sums), added
 * into doubles per row; the threads' sums merged in thread order. */
typedef struct {
  v16 s1[MAX_OC / L16], s2[MAX_OC / L16]; /* this row's */
  float k[MAX_OC];
  double *d1, *d2; /* the thread's [oc] */
  int64_t count;
} row_stats;

/* Forward: output positions ox0 .. ox0 + np - 1 (np <= pg), channels
 * ob .. ob + 15, from their windows (NULL: padding). */
INLINE void fwd_group(const in8s2_node *s, const float *const win[KS], float *out, int64_t ox0, int64_t ob, int64_t np,
                      pf_cursor *pf, row_stats *st, const int pg) {
  const int64_t oc = s->oc;
  v16 acc[PG];
  VEC_UNROLL
  for (int q = 0; q < pg; q++) acc[q] = (v16){0};
  for (int ky = 0; ky < KS; ky++) {
    if (!win[ky]) continue;
    for (int kx = 0; kx < KS; kx++) {
      /* Position q's tap: window column 2 q + kx. The address hidden from
       * GCC so that each broadcast stays inside its FMA (a load port)
       * rather than a register broadcast on the FMAs' port. Broadcasting
       * each odd column once for the two FMAs that read it (kx = 2 and the
       * next position's kx = 0) ran slower: 2.8 against 2.2 ms a call at
       * batch 64 from cache, the FMAs into each sum then in a chain. */
      const float *xp = win[ky] + kx * IC;
      __asm__("" : "+r"(xp));
      pf_step(pf, PF_LINES);
      const float *wt = s->wf + (ky * KS + kx) * IC * oc + ob;
      for (int c = 0; c < IC; c++) {
        const v16 wv = *(const v16u *)(wt + c * oc);
        VEC_UNROLL
        for (int q = 0; q < pg; q++) acc[q] += xp[q * 2 * IC + c] * wv;
      }
    }
  }
  for (int64_t q = 0; q < np; q++) {
    float *o = out + (ox0 + q) * oc + ob;
    if (s->stream)
      _mm512_stream_ps(o, (__m512)acc[q]);
    else
      *(v16u *)o = acc[q];
  }
  if (st) {
    const int j = (int)(ob / L16);
    const v16 k = *(const v16u *)(st->k + ob);
    for (int64_t q = 0; q < np; q++) {
      const v16 d = acc[q] - k;
      st->s1[j] += d, st->s2[j] += d * d;
    }
  }
}

/* The thread's shift K: its first output position, computed alone. */
static void first_output(const in8s2_node *s, const float *x, int64_t r, float *k) {
  const float *xr[KS];
  input_rows(s, x, r, xr);
  for (int64_t o = 0; o < s->oc; o++) {
    float v = 0.0f;
    for (int ky = 0; ky < KS; ky++)
      for (int kx = 1; kx < KS; kx++) /* column -1 is the padding */
        for (int c = 0; c < IC; c++)
          if (xr[ky]) v += xr[ky][(kx - 1) * IC + c] * s->wf[((ky * KS + kx) * IC + c) * s->oc + o];
    k[o] = v;
  }
}

/* The threads' sums (doubles [thread][3][oc]: y - K, its square, K) into
 * mean and biased variance, merged in thread order. */
static void merge_stats(const in8s2_node *s, const double *all, const int64_t *count, int nt, float *mean, float *var) {
  for (int64_t c = 0; c < s->oc; c++) {
    double n = 0, m = 0, m2 = 0;
    for (int t = 0; t < nt; t++) {
      const double *d = all + (size_t)t * 3 * s->oc, nb = (double)count[t];
      if (nb == 0) continue;
      cpu_moments_merge(&n, &m, &m2, nb, d[2 * s->oc + c] + d[c] / nb, d[s->oc + c] - d[c] * d[c] / nb);
    }
    mean[c] = (float)m, var[c] = (float)(n > 0 ? (m2 > 0 ? m2 : 0) / n : 0);
  }
}

static void forward_all(const in8s2_node *s, const float *x, float *y) {
  const int64_t rows_all = s->n * s->oh, out_row = s->ow * s->oc;
  const int stats = s->base.stats_on;
  double *all = (double *)(s->fs + s->stat_off);
  int64_t count[64]; /* stats_able: at most 64 threads */
#pragma omp parallel num_threads(s->threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    float *buf = (float *)(s->fs + s->fwd_buf_off + (size_t)tid * s->buf_bytes);
    const int64_t r0 = rows_all * tid / nt, r1 = rows_all * (tid + 1) / nt;
    row_stats rs, *st = NULL;
    if (stats) {
      memset(&rs, 0, sizeof rs);
      rs.d1 = all + (size_t)tid * 3 * s->oc, rs.d2 = rs.d1 + s->oc;
      memset(rs.d1, 0, sizeof(double) * 3 * (size_t)s->oc);
      if (r0 < r1) first_output(s, x, r0, rs.k);
      for (int64_t c = 0; c < s->oc; c++) rs.d1[2 * s->oc + c] = rs.k[c];
      st = &rs;
    }
    for (int64_t r = r0; r < r1; r++) {
      const float *xr[KS], *win[KS];
      pf_cursor pf = ahead(s, x, NULL, r);
      input_rows(s, x, r, xr);
      float *out = y + r * out_row;
      for (int64_t ox0 = 0; ox0 < s->ow; ox0 += PG) {
        const int64_t np = s->ow - ox0 < PG ? s->ow - ox0 : PG;
        const int pg = np > PG / 2 ? PG : PG / 2;
        windows(s, xr, ox0, pg, buf, win);
        for (int64_t ob = 0; ob < s->oc; ob += L16)
          if (pg == PG)
            fwd_group(s, win, out, ox0, ob, np, &pf, st, PG);
          else
            fwd_group(s, win, out, ox0, ob, np, &pf, st, PG / 2);
      }
      if (st) { /* the row's f32 sums into the doubles */
        for (int64_t c = 0; c < s->oc; c++) rs.d1[c] += rs.s1[c / L16][c % L16], rs.d2[c] += rs.s2[c / L16][c % L16];
        memset(rs.s1, 0, sizeof rs.s1), memset(rs.s2, 0, sizeof rs.s2);
      }
    }
    if (s->stream) _mm_sfence();
    if (stats) {
      count[tid] = (r1 - r0) * s->ow;
#pragma omp barrier
#pragma omp single
      merge_stats(s, all, count, nt, s->base.stats, s->base.stats + s->oc);
    }
  }
}

/* Input gradient: column pairs a0 .. a0 + np - 1 of one input row from its
 * nc contributions (dY positions from a0 on, g[k]; kernel row ky[k]): pair
 * q reads dY positions a0 + q and a0 + q + 1. */
INLINE void dx_group(const in8s2_node *s, const float *const *g, const int *ky, int nc, float *dx_row, int64_t a0,
                     int64_t np, int add, pf_cursor *pf, const int pg) {
  const int64_t oc = s->oc;
  v16 acc[PG];
  VEC_UNROLL
  for (int q = 0; q < pg; q++) acc[q] = (v16){0};
  for (int k = 0; k < nc; k++) {
    const float *gp = g[k];
    __asm__("" : "+r"(gp));
    const float *wa = s->wa + ky[k] * oc * L16, *wb = s->wb + ky[k] * oc * L16;
    for (int64_t o = 0; o < oc; o++) {
      const v16 va = *(const v16u *)(wa + o * L16), vb = *(const v16u *)(wb + o * L16);
      pf_step(pf, 1);
      /* Two statements: as one sum GCC multiplied, fused and added. */
      VEC_UNROLL
      for (int q = 0; q < pg; q++) {
        acc[q] += gp[q * oc + o] * va;
        acc[q] += gp[(q + 1) * oc + o] * vb;
      }
    }
  }
  for (int64_t q = 0; q < np; q++) {
    float *d = dx_row + (a0 + q) * 2 * IC;
    if (add)
      *(v16u *)d += acc[q];
    else if (s->stream)
      _mm512_stream_ps(d, (__m512)acc[q]);
    else
      *(v16u *)d = acc[q];
  }
}

/* The dY positions a group of pg pairs from a0 reads (a0 .. a0 + pg) of
 * row g: in place inside the row, else copied into buf with zeros past it
 * (there is no output column ow). */
static const float *dy_window(const in8s2_node *s, const float *g, int64_t a0, int pg, float *buf) {
  if (a0 + pg < s->ow) return g + a0 * s->oc;
  const int64_t have = s->ow - a0;
  memcpy(buf, g + a0 * s->oc, sizeof(float) * (size_t)(have * s->oc));
  memset(buf + have * s->oc, 0, sizeof(float) * (size_t)((pg + 1 - have) * s->oc));
  return buf;
}

/* One input row from nc dY rows g[k] through kernel rows ky[k]. */
static void dx_row_of(const in8s2_node *s, const float *const *g, const int *ky, int nc, float *dx_row, int add,
                      float *buf, pf_cursor *pf) {
  for (int64_t a0 = 0; a0 < s->ow; a0 += PG) {
    const int64_t np = s->ow - a0 < PG ? s->ow - a0 : PG;
    const int pg = np > PG / 2 ? PG : PG / 2;
    const float *w[2];
    for (int k = 0; k < nc; k++) w[k] = dy_window(s, g[k], a0, pg, buf + k * (PG + 1) * s->oc);
    if (pg == PG)
      dx_group(s, w, ky, nc, dx_row, a0, np, add, pf, PG);
    else
      dx_group(s, w, ky, nc, dx_row, a0, np, add, pf, PG / 2);
  }
}

/* Weight gradient of one output row (input rows xr, dY row g) into the
 * thread's f32 sums [oc / 16][tap][ic][16]: per kernel row, 24 sums in
 * registers, a dY vector times broadcast inputs. Position ox reads input
 * columns 2 ox - 1 .. 2 ox + 1; position 0 skips the padding column. */
static void dw_row(const in8s2_node *s, const float *const xr[KS], const float *g, float *sums, pf_cursor *pf) {
  const int64_t oc = s->oc;
  for (int64_t ob = 0; ob < oc; ob += L16)
    for (int ky = 0; ky < KS; ky++) {
      if (!xr[ky]) continue;
      v16 sum[KS][IC]; /* 24 registers: the loops below unrolled in full (each at most 16) */
      VEC_UNROLL
      for (int kx = 0; kx < KS; kx++) {
        VEC_UNROLL
        for (int c = 0; c < IC; c++) sum[kx][c] = (v16){0};
      }
      const v16 g0 = *(const v16u *)(g + ob);
      VEC_UNROLL
      for (int kx = 1; kx < KS; kx++) {
        VEC_UNROLL
        for (int c = 0; c < IC; c++) sum[kx][c] += xr[ky][(kx - 1) * IC + c] * g0;
      }
      for (int64_t ox = 1; ox < s->ow; ox++) {
        const float *xp = xr[ky] + (2 * ox - 1) * IC;
        __asm__("" : "+r"(xp));
        const v16 gv = *(const v16u *)(g + ox * oc + ob);
        pf_step(pf, 1);
        VEC_UNROLL
        for (int kx = 0; kx < KS; kx++) {
          VEC_UNROLL
          for (int c = 0; c < IC; c++) sum[kx][c] += xp[kx * IC + c] * gv;
        }
      }
      float *to = sums + ((ob / L16) * TAPS + ky * KS) * IC * L16;
      VEC_UNROLL
      for (int kx = 0; kx < KS; kx++) {
        VEC_UNROLL
        for (int c = 0; c < IC; c++) *(v16 *)(to + (kx * IC + c) * L16) += sum[kx][c];
      }
    }
}

/* The thread's f32 sums into its doubles, and cleared. */
static void flush_sums(float *sums, double *acc, int64_t count) {
  for (int64_t i = 0; i < count; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(sums + i));
    _mm512_storeu_pd(acc + i, _mm512_add_pd(_mm512_loadu_pd(acc + i), v));
  }
  memset(sums, 0, sizeof(float) * (size_t)count);
}

/* Both gradients (dx or dw NULL where not wanted) in one pass over output
 * rows: row r's dY feeds its weight gradient and input rows 2 oy and
 * 2 oy + 1, each input row written once. */
static void backward_all(const in8s2_node *s, const float *x, const float *dy, float *dx, float *dw, int dx_add,
                         int dw_fresh) {
  const int64_t rows_all = s->n * s->oh, dx_row = s->iw * IC, dy_row = s->ow * s->oc;
  const int64_t sums_n = (s->oc / L16) * TAPS * IC * L16;
#pragma omp parallel num_threads(s->threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    float *buf = (float *)(s->bs + s->bwd_buf_off + (size_t)tid * s->buf_bytes);
    float *sums = (float *)(s->bs + s->sum_off) + (size_t)tid * sums_n;
    double *acc = (double *)(s->bs + s->acc_off) + (size_t)tid * sums_n;
    if (dw) {
      memset(sums, 0, sizeof(float) * (size_t)sums_n);
      memset(acc, 0, sizeof(double) * (size_t)sums_n);
    }
    const int64_t r0 = rows_all * tid / nt, r1 = rows_all * (tid + 1) / nt;
    int64_t since = 0;
    for (int64_t r = r0; r < r1; r++) {
      const int64_t oy = r % s->oh;
      const float *g0 = dy + r * dy_row;
      pf_cursor pf = ahead(s, dw ? x : NULL, dy, r);
      if (dw) {
        const float *xr[KS];
        input_rows(s, x, r, xr);
        dw_row(s, xr, g0, sums, &pf);
        if (++since == FLUSH_ROWS) flush_sums(sums, acc, sums_n), since = 0;
      }
      if (dx) {
        /* Input row 2 oy from dY row oy (ky = 1); row 2 oy + 1 from dY row
         * oy (ky = 2) and oy + 1 (ky = 0), the latter past the last row. */
        float *d = dx + (r / s->oh * s->ih + 2 * oy) * dx_row;
        const float *ge[1] = {g0}, *go[2] = {g0, g0 + dy_row};
        const int ke[1] = {1}, ko[2] = {2, 0};
        dx_row_of(s, ge, ke, 1, d, dx_add, buf, &pf);
        dx_row_of(s, go, ko, oy + 1 < s->oh ? 2 : 1, d + dx_row, dx_add, buf, &pf);
      }
    }
    if (dw) flush_sums(sums, acc, sums_n);
    if (s->stream) _mm_sfence();
#pragma omp barrier
    if (dw) {
      /* The threads' doubles in thread order, each output channel's sums by
       * one thread. */
      const double *all = (const double *)(s->bs + s->acc_off);
#pragma omp for schedule(static)
      for (int64_t o = 0; o < s->oc; o++)
        for (int i = 0; i < IC; i++)
          for (int t = 0; t < TAPS; t++) {
            double v = 0;
            const int64_t at = ((o / L16) * TAPS + t) * IC * L16 + i * L16 + o % L16;
            for (int k = 0; k < nt; k++) v += all[(size_t)k * sums_n + at];
            float *d = dw + (o * IC + i) * TAPS + t;
            *d = (float)v + (dw_fresh ? 0.0f : *d);
          }
    }
  }
}
#endif

static void in8s2_forward(cpu_node *nd, const sp_op_args *a) {
  in8s2_node *s = (in8s2_node *)nd;
  __atomic_add_fetch(&cpu_in8s2_calls, 1, __ATOMIC_RELAXED);
  arrange_weights(s, a->param[0]->data);
#if defined(__AVX512F__)
  forward_all(s, a->in[0]->data, a->out->data);
#endif
}

static void in8s2_backward(cpu_node *nd, const sp_op_args *a) {
  in8s2_node *s = (in8s2_node *)nd;
#if defined(__AVX512F__)
  float *dx = s->need_dx && a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dw = s->need_dw && a->d_param[0] ? a->d_param[0]->data : NULL;
  if (dx || dw)
    backward_all(s, a->in[0]->data, a->d_out->data, dx, dw, !(a->d_in_fresh & 1u), (a->d_param_fresh & 1u) != 0);
#else
  (void)s, (void)a;
#endif
}

static int in8s2_bind(cpu_node *nd, const sp_op_args *a, char *fs, char *bs) {
  (void)a;
  in8s2_node *s = (in8s2_node *)nd;
  s->fs = fs, s->bs = bs;
  return 0;
}

static const cpu_vt in8s2_vt = {in8s2_forward, in8s2_backward, in8s2_bind, NULL};

/* f32, AVX-512, not frozen; 3x3, stride 2, padding 1, one group, no
 * dilation, no bias; 8 channels-last input channels at an even size, 16 to
 * 64 output channels in 16s. */
static int applies(const sp_op_prep *p) {
#if defined(__AVX512F__)
  const sp_conv2d_attr *at = p->attr;
  const dnnl_memory_desc_t *md = p->in_layout[0];
  const sp_shape *x = &p->in_shape[0], *w = &p->param_shape[0], *y = &p->out_shape;
  return cpu_conv_use_in8s2 && !p->bf16 && !p->frozen && !p->out_plain && p->n_param == 1 && at && at->groups == 1 &&
         at->stride_h == 2 && at->stride_w == 2 && at->pad_h == 1 && at->pad_w == 1 && at->dil_h == 1 &&
         at->dil_w == 1 && x->ndim == 4 && x->d[1] == IC && w->d[1] == IC && w->d[0] % L16 == 0 && w->d[0] <= MAX_OC &&
         w->d[2] == KS && w->d[3] == KS && x->d[2] % 2 == 0 && x->d[3] % 2 == 0 && y->d[2] * 2 == x->d[2] &&
         y->d[3] * 2 == x->d[3] && md && md->data_type == dnnl_f32 && cpu_md_lanes(md) == CPU_LANES_NHWC;
#else
  (void)p;
  return 0;
#endif
}

int cpu_conv_in8s2_prepare(sp_op_prep *p) {
  if (!applies(p)) return 1;
  in8s2_node *s = cpu_node_new(sizeof *s, &in8s2_vt);
  const sp_shape *x = &p->in_shape[0];
  s->n = x->d[0], s->ih = x->d[2], s->iw = x->d[3];
  s->oc = p->param_shape[0].d[0], s->oh = p->out_shape.d[2], s->ow = p->out_shape.d[3];
  s->threads = omp_get_max_threads();
  s->need_dx = p->run_backward && p->need_d_in[0];
  s->need_dw = p->run_backward && p->param_grad[0];
  dnnl_dims_t od = {s->n, s->oc, s->oh, s->ow};
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, dnnl_f32, dnnl_acdb) != dnnl_success) {
    cpu_node_free(&s->base);
    return 1;
  }
  s->stream = (int64_t)cpu_md_bytes(&s->base.out_md) >= cpu_stream_threshold_plan(p->run_backward);
  /* The edge windows: forward's three rows of 2 PG + 1 columns, or the
   * input gradient's two dY windows of PG + 1 positions. */
  const size_t fwd_win = sizeof(float) * KS * (2 * PG + 1) * IC, dy_win = sizeof(float) * 2 * (PG + 1) * (size_t)s->oc;
  s->buf_bytes = ((fwd_win > dy_win ? fwd_win : dy_win) + 63) & ~(size_t)63;
  size_t fwd = 0, bwd = 0;
  s->fwd_buf_off = cpu_take(&fwd, (size_t)s->threads * s->buf_bytes);
  /* The output's batch statistics for the batch norm after it, where it
   * takes them (p->training: a batch norm there computes them). */
  s->base.stats_able = p->training && s->threads <= 64;
  if (s->base.stats_able) {
    s->stat_off = cpu_take(&fwd, sizeof(double) * 3 * (size_t)(s->threads * s->oc));
    s->base.stats = cpu_node_keep(&s->base, 2 * sizeof(float) * (size_t)s->oc);
  }
  if (p->run_backward) {
    const size_t sums = (size_t)(s->oc / L16) * TAPS * IC * L16;
    s->bwd_buf_off = cpu_take(&bwd, (size_t)s->threads * s->buf_bytes);
    s->sum_off = cpu_take(&bwd, (size_t)s->threads * sums * sizeof(float));
    s->acc_off = cpu_take(&bwd, (size_t)s->threads * sums * sizeof(double));
  }
  p->param_grad_overwrites = 1u; /* the weight gradient written where it is fresh (d_param_fresh) */
  return cpu_report_scratch(p, &s->base, fwd, bwd);
}

int cpu_conv_is_in8s2(const void *state) { return state && ((const cpu_node *)state)->vt == &in8s2_vt; }
#endif
