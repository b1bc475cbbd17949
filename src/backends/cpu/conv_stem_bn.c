/* The first convolution of a training plan together with the batch norm
 * after it and the ReLU after that (8 output channels, a grey or colour
 * image whose gradient nobody needs): vgg-face's stem, in f32 and in bf16
 * plans. Its output before the batch norm is never stored, nor the
 * gradient there:
 *
 *   forward    the image padded once, in the plan's type (saved: backward
 *              reads it); pass A: the batch's mean and variance from sums
 *              of the image alone (gram_rows: the stem is linear in its
 *              taps); pass B: each stem row computed, normalised and ReLU'd
 *              in registers into the output. The running statistics move as
 *              the reference moves them.
 *   backward   one pass: each row computed again, with dz (the gradient
 *              after the ReLU) dy, the sums of dy and dy xhat and, per tap,
 *              of dy times the image; the weight gradient then from those
 *              and forward's sums (sbn_backward).
 *
 * Lanes: the 8 channels of PP positions a vector (two with AVX-512),
 * interleaved (lane 2c + p: channel c of position p), so the two values a
 * tap reads for them are one 8-byte broadcast from its row (a load, no
 * shuffle) against the tap's weights; one permute a vector turns it into
 * the output's channels-last bytes, and dz's into it. Forward and backward
 * compute each value before the ReLU by one expression (y_at, pre_relu):
 * the ReLU's mask in backward is forward's, bit for bit. In bf16 plans the
 * image and the weights are rounded to bf16 as the convolution's operands
 * (pass A's sums are of the rounded image too; a row's taps widened to f32
 * into L1 before the products), the stem's values stay f32 through the
 * batch norm and the output is rounded once.
 *
 * Why: apart, the stem wrote its output (vgg-face, batch 64: 64 x 8 x 112 x
 * 112, 25.7 MB in f32), the batch norm read it twice and wrote its own, and
 * backward read and wrote five such tensors more (the batch norm's two
 * passes, the weight gradient reading dy0): about 250 MB of memory traffic
 * a step in f32 for a stem of 58 M multiply-adds a pass. Here: the image
 * read once and its padded copy three times, the output written once and
 * dz read once. The first version (AVX2, one position per vector, the
 * image padded again by every pass, f32 plans only) took 8.9-9.2 -> 7.0-7.2
 * ms against the two apart (AMD Zen 3, vgg-face batch 64, per-node
 * profile); on a Xeon with AVX-512 and AMX it took 14-15 ms, more than the
 * two apart, and bf16 plans ran them apart (9.6 ms: the stem's own loops
 * and bnorm.c).
 *
 * Sums: of the image shifted by its mean (gram_rows) in f32 over blocks of
 * rows, backward's per row in f32; per thread in double, the threads that
 * ran added in thread order (the same bits for a given thread count). A bias before the batch norm gets no
 * gradient (it has none). */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/conv_stem.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "ops/ops.h"

/* 1: taken where it applies; 0: never (the stem's own node or oneDNN's
 * convolution, and bnorm.c's batch norm). */
int cpu_stem_bn_on = 1;
long cpu_stem_bn_calls;

#if defined(__AVX2__) && defined(__FMA__)
enum { C = 8, PP = VW / C }; /* output channels; positions a vector */

typedef struct {
  stem_node stem; /* geometry; wt and bias point into each pass's scratch, img into saved */
  int relu, update_running, stream;
  float eps, momentum;
  int64_t m;                                            /* values per channel: n oh ow */
  int64_t owv;                                          /* ow rounded up to VW: a shifted tap row (gram_rows) */
  size_t wt_off, bias_off, rows_off, part_off, blk_off; /* forward and backward scratch alike */
  size_t rows_slice, part_slice, blk_slice;
  size_t shift_off, gram_off, img_off; /* in saved, after the mean and variance: the taps' shifts; G, G1; the image */
} stem_bn_node;

/* One pass's view of the stem: wt and bias in this pass's scratch, the
 * weights (and bias) laid out tap-major again (backward's scratch is not
 * forward's), rounded to bf16 in a bf16 plan; the padded image. */
static stem_node stem_in(const stem_bn_node *s, const sp_op_args *a, char *sc) {
  stem_node st = s->stem;
  st.wt = (float *)(sc + s->wt_off), st.bias = (float *)(sc + s->bias_off);
  cpu_stem_weights(&st, a->param[0]->data, st.has_bias ? a->param[1]->data : NULL, NULL);
  st.img = (char *)a->saved + s->img_off;
  return st;
}

/* Where each tap reads row `row`: row 0's places (base, cpu_stem_tap_rows)
 * moved on by the rows between them, the same for every tap (one division
 * a row, not cpu_stem_tap_rows' two per tap). */
typedef struct {
  const char *base[STEM_MAX_K];
  const char *rows0[STEM_MAX_K];   /* the padded rows output row 0 reads, from their start (kh ic of them) */
  int64_t k, oh, image, out_row;   /* bytes: one image's padded planes; one output row's stride of padded rows */
  int64_t n_rows, row_bytes, last; /* rows0's count and length; the last output row */
} tap_walk;

static tap_walk tap_walk_of(const stem_node *st) {
  tap_walk w = {.k = st->k, .oh = st->oh, .n_rows = st->kh * st->ic, .last = st->n * st->oh - 1};
  const size_t es = st->bf16 ? 2 : 4, row = es * (size_t)(st->sw * st->wq);
  cpu_stem_tap_rows(st, st->img, 0, NULL, (const void **)w.base);
  for (int64_t r = 0; r < st->kh; r++)
    for (int64_t i = 0; i < st->ic; i++)
      w.rows0[r * st->ic + i] = (const char *)st->img + row * (size_t)(i * st->hp + r * st->dh);
  w.image = (int64_t)row * st->ic * st->hp, w.out_row = (int64_t)row * st->sh, w.row_bytes = (int64_t)row;
  return w;
}

INLINE int64_t row_offset(const tap_walk *w, int64_t row) { return row / w->oh * w->image + row % w->oh * w->out_row; }

/* Where the taps of output row `row` read; and the padded rows of the
 * output row PREFETCH_ROWS on asked for: a row's reads are a few runs of
 * 8-16 lines, short for the hardware's prefetch, and the loads waited on
 * them (vgg-face bf16 batch 64, one thread: pass A 2.95 -> 2.52 ms, pass B
 * 4.37 -> 3.68). */
enum { PREFETCH_ROWS = 2 };
INLINE void taps_at(const tap_walk *w, int64_t row, const void **src) {
  const int64_t d = row_offset(w, row);
  for (int64_t t = 0; t < w->k; t++) src[t] = w->base[t] + d;
  if (row + PREFETCH_ROWS > w->last) return;
  const int64_t ahead = row_offset(w, row + PREFETCH_ROWS);
  for (int64_t r = 0; r < w->n_rows; r++)
    for (int64_t b = 0; b < w->row_bytes; b += 64) __builtin_prefetch(w->rows0[r] + ahead + b);
}

/* What normalising takes per channel: the mean, 1 / std and the affine
 * map's scale and shift (gamma / std, beta - mean gamma / std). Forward and
 * backward compute them alike, so the ReLU's mask is the same. */
typedef struct {
  float mean[C], istd[C], scale[C], shift[C];
} bn_coef;

static bn_coef coef_of(const float *mean, const float *var, const float *gamma, const float *beta, float eps) {
  bn_coef k;
  for (int c = 0; c < C; c++) {
    const float is = 1.0f / sqrtf(var[c] + eps), g = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
    k.mean[c] = mean[c], k.istd[c] = is, k.scale[c] = g * is, k.shift[c] = b - mean[c] * g * is;
  }
  return k;
}

/* A row's constants in the vectors' lanes: channel l / PP at lane l. */
typedef struct {
  vfw w[STEM_MAX_K]; /* tap t's 8 weights */
  vfw bias, scale, shift, mean, istd;
} row_lanes;

static vfw lanes_of(const float *v8) {
  vfw v;
  for (int l = 0; l < VW; l++) v[l] = v8 ? v8[l / PP] : 0.0f;
  return v;
}

static void row_lanes_of(const stem_node *st, const bn_coef *k, row_lanes *L) {
  for (int64_t t = 0; t < st->k; t++) L->w[t] = lanes_of(st->wt + t * C);
  L->bias = lanes_of(st->has_bias ? st->bias : NULL);
  L->scale = lanes_of(k->scale), L->shift = lanes_of(k->shift), L->mean = lanes_of(k->mean),
  L->istd = lanes_of(k->istd);
}

/* A tap row's values at positions j.. (PP of them), each over its
 * position's lanes: with AVX-512 the two as one double, broadcast. */
INLINE vfw x_pair(const float *x, int64_t j) {
#ifdef __AVX512F__
  double two;
  memcpy(&two, x + j, sizeof two);
  return (vfw)_mm512_set1_pd(two);
#else
  return vbcastw(x[j]);
#endif
}

/* Interleaved lanes into channels-last (position 0's 8 channels, then
 * position 1's) and back; the 8 channels' sums over the positions. */
INLINE vfw to_positions(vfw v) {
#ifdef __AVX512F__
  return __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
#else
  return v;
#endif
}
INLINE vfw to_pairs(vfw v) {
#ifdef __AVX512F__
  return __builtin_shufflevector(v, v, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
#else
  return v;
#endif
}
INLINE vf8 channels_of(vfw v) {
#ifdef __AVX512F__
  return __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14) +
         __builtin_shufflevector(v, v, 1, 3, 5, 7, 9, 11, 13, 15);
#else
  return v;
#endif
}

/* The stem's value at g vectors of positions (j, j + PP, ...), bias
 * first, then the taps in order: one expression for forward and backward,
 * whatever g (g chains of FMAs side by side, so their latencies overlap). */
enum { G = 4 };
INLINE void y_at(const row_lanes *L, const float *const *rows, int64_t j, const int64_t k, const int g, vfw *y) {
  VEC_UNROLL
  for (int q = 0; q < g; q++) y[q] = L->bias;
  VEC_UNROLL
  for (int64_t t = 0; t < k; t++) {
    VEC_UNROLL
    for (int q = 0; q < g; q++) y[q] += x_pair(rows[t], j + q * PP) * L->w[t];
  }
}

/* A row's taps as f32 rows: the padded image's own in an f32 plan; in a
 * bf16 plan widened into buf (k rows of n values, n = ow rounded up to VW:
 * every position a vector's pair reads, ow itself where ow is odd). */
static void f32_rows(const stem_bn_node *s, const void *const *src, float *buf, int64_t n, const float **rows) {
  for (int64_t t = 0; t < s->stem.k; t++) {
    if (!s->stem.bf16) {
      rows[t] = src[t];
      continue;
    }
    float *r = buf + t * n;
    for (int64_t j = 0; j < n; j += VW) vstw(r, j, vldw(src[t], j, 1, VW), 0, VW); /* valid up to ow + VW */
    rows[t] = r;
  }
}

/* The value before the ReLU: one expression for forward and backward. */
INLINE vfw pre_relu(const row_lanes *L, vfw y) { return y * L->scale + L->shift; }

/* The batch statistics without the rows. With x_t[p] the value tap t reads
 * at position p and x'_t = x_t - s_t (s_t: a shift per input channel, near
 * the image's mean), y_c[p] = b_c + S_c + sum_t w_tc x'_t[p] with S_c =
 * sum_t w_tc s_t, so
 *   sum_p y_c = sum_t w_tc G1[t] + M (b_c + S_c)    G1[t]   = sum_p x'_t[p]
 *   M var_c = w_c^T G w_c - (w_c . G1)^2 / M        G[t][u] = sum_p x'_t[p] x'_u[p]
 * G and G1 depend on the image alone: per position k (k + 1) / 2 + k
 * products and sums (54 for a 3x3 grey stem) against the row's 72
 * multiply-adds, over a vector of positions at a time from the row's taps
 * shifted into L1 first (shifted_rows; the padding's zeros shifted too, so
 * the identities hold at the borders). Sums in f32 vectors over blocks of
 * FLUSH_ROWS rows, per thread in double. The shift keeps a large mean out
 * of G; what remains is the quadratic form's own cancellation where var_c
 * is small against the image's variance (a zero-sum filter on a smooth
 * image): about 1e-7 times their ratio, in the variance (1e-5 for a
 * Laplacian on a smooth photo in [0, 1], emulated). */
INLINE float hsum(vfw v) {
  vf8 h = channels_of(v);
  h += __builtin_shufflevector(h, h, 4, 5, 6, 7, 0, 1, 2, 3);
  h += __builtin_shufflevector(h, h, 2, 3, 0, 1, 6, 7, 4, 5);
  return h[0] + h[1];
}

/* Tap t's values over the row's positions, less s_t, as f32 at sh + t owv;
 * lanes past ow zero (not counted: 0 x anything finite). */
static void shifted_rows(const stem_bn_node *s, const void *const *src, const float *shift, float *sh, const int bf16) {
  const int64_t ow = s->stem.ow, owv = s->owv;
  viw tail;
  for (int l = 0; l < VW; l++) tail[l] = owv - VW + l < ow ? -1 : 0;
  for (int64_t t = 0; t < s->stem.k; t++) {
    const vfw st = vbcastw(shift[t]);
    for (int64_t j = 0; j < owv; j += VW) {
      vfw v = vldw(src[t], j, bf16, VW) - st; /* valid up to ow + VW: cpu_stem_geometry's wq */
      if (j + VW > ow) v = (vfw)((viw)v & tail);
      *(vfwu *)(sh + t * owv + j) = v;
    }
  }
}

/* The row's sums of the shifted taps (sh) added into blk, a thread's f32
 * vectors (G[t][u], u >= t, at t k + u; G1[t] at k k + t): summed across
 * lanes only every FLUSH_ROWS rows (gram_flush), not per row (54 sums
 * across 16 lanes a row cost more than the row's products). */
enum { FLUSH_ROWS = 8 }; /* then a lane has summed 8 rows of ow / VW values in f32 */
INLINE void gram_rows(const float *sh, int64_t owv, const int64_t k, vfw *blk) {
  VEC_UNROLL
  for (int64_t t = 0; t < k; t++) {
    vfw a[STEM_MAX_K + 1]; /* a[u - t]: x'_t x'_u; a[k - t]: x'_t */
    VEC_UNROLL
    for (int64_t u = t; u < k; u++) a[u - t] = blk[t * k + u];
    a[k - t] = blk[k * k + t];
    for (int64_t j = 0; j < owv; j += VW) {
      const vfw v = *(const vfwu *)(sh + t * owv + j);
      a[k - t] += v;
      VEC_UNROLL
      for (int64_t u = t; u < k; u++) a[u - t] += v * *(const vfwu *)(sh + u * owv + j);
    }
    VEC_UNROLL
    for (int64_t u = t; u < k; u++) blk[t * k + u] = a[u - t];
    blk[k * k + t] = a[k - t];
  }
}

static void gram_any(const float *sh, int64_t owv, int64_t k, vfw *blk) {
  if (k == 9) /* a 3x3 grey stem: unrolled */
    gram_rows(sh, owv, 9, blk);
  else
    gram_rows(sh, owv, k, blk);
}

/* blk's sums into g (double, the same places), blk cleared. */
static void gram_flush(vfw *blk, int64_t k, double *g) {
  for (int64_t t = 0; t < k; t++) {
    for (int64_t u = t; u < k; u++) g[t * k + u] += hsum(blk[t * k + u]), blk[t * k + u] = vbcastw(0.0f);
    g[k * k + t] += hsum(blk[k * k + t]), blk[k * k + t] = vbcastw(0.0f);
  }
}

/* s_t: the mean of the first image's plane that tap t reads (t % ic). */
static void tap_shifts(const stem_node *st, const float *x, float *shift) {
  const int64_t plane = st->ih * st->iw;
  for (int64_t i = 0; i < st->ic; i++) {
    double sum = 0;
    for (int64_t p = 0; p < plane; p++) sum += x[i * plane + p];
    for (int64_t t = i; t < st->k; t += st->ic) shift[t] = (float)(sum / (double)plane);
  }
}

/* sum_t w_tc s_t: what the shift takes out of channel c's values. */
static double shifted_out(const stem_node *st, const float *shift, int c) {
  double v = 0;
  for (int64_t t = 0; t < st->k; t++) v += (double)st->wt[t * C + c] * shift[t];
  return v;
}

/* Mean and (biased) variance per channel from the sums of all threads. */
static void stats_of(const stem_node *st, const double *g, const double *g1, const float *shift, double m, float *mean,
                     float *var) {
  const int64_t k = st->k;
  for (int c = 0; c < C; c++) {
    double s1 = 0, s2 = 0;
    for (int64_t t = 0; t < k; t++) {
      const double wt = st->wt[t * C + c];
      s1 += wt * g1[t];
      s2 += wt * wt * g[t * k + t];
      for (int64_t u = t + 1; u < k; u++) s2 += 2.0 * wt * st->wt[u * C + c] * g[t * k + u];
    }
    const double mu = s1 / m, v = s2 / m - mu * mu;
    mean[c] = (float)(mu + shifted_out(st, shift, c) + (st->has_bias ? st->bias[c] : 0.0f));
    var[c] = (float)(v > 0 ? v : 0);
  }
}

/* Output row `row`: each vector of positions normalised, ReLU'd where
 * `relu`, stored as it lies (past the caches where `stream`); a last lone
 * position (odd ow, AVX-512) stores its 8 lanes only. */
/* Output vectors j, j + PP, ... (g of them): normalised, ReLU'd where
 * `relu`, stored channels-last (past the caches where `stream`); a last
 * lone position (odd ow, AVX-512) stores its 8 lanes only. */
INLINE void out_vectors(const stem_bn_node *s, const row_lanes *L, const float *const *rows, void *out, int64_t j,
                        const int64_t k, const int bf16, const int g) {
  const int64_t ow = s->stem.ow;
  vfw z[G];
  y_at(L, rows, j, k, g, z);
  VEC_UNROLL
  for (int q = 0; q < g; q++) {
    const int64_t at = j + q * PP;
    vfw v = pre_relu(L, z[q]);
    if (s->relu) v = vrelu(v);
    v = to_positions(v);
    if (at + PP > ow)
      vstw(out, C * at, v, bf16, 8);
    else if (s->stream)
      vstw_nt(out, C * at, v, bf16, VW);
    else
      vstw(out, C * at, v, bf16, VW);
  }
}

INLINE void out_row(const stem_bn_node *s, const row_lanes *L, const float *const *rows, void *out, const int64_t k,
                    const int bf16) {
  int64_t j = 0;
  for (; j + G * PP <= s->stem.ow; j += G * PP) out_vectors(s, L, rows, out, j, k, bf16, G);
  for (; j < s->stem.ow; j += PP) out_vectors(s, L, rows, out, j, k, bf16, 1);
}

static void out_row_any(const stem_bn_node *s, const row_lanes *L, const float *const *rows, void *out) {
  const int64_t k = s->stem.k;
  if (s->stem.bf16)
    k == 9 ? out_row(s, L, rows, out, 9, 1) : out_row(s, L, rows, out, k, 1);
  else
    k == 9 ? out_row(s, L, rows, out, 9, 0) : out_row(s, L, rows, out, k, 0);
}

static void sbn_forward(cpu_node *n, const sp_op_args *a) {
  const stem_bn_node *s = (const stem_bn_node *)n;
  __atomic_add_fetch(&cpu_stem_bn_calls, 1, __ATOMIC_RELAXED);
  char *sc = a->scratch;
  const stem_node st = stem_in(s, a, sc);
  const sp_op_args *bn = a->consumer;
  const float *x = a->in[0]->data, *gamma = bn->n_param == 2 ? bn->param[0]->data : NULL,
              *beta = bn->n_param == 2 ? bn->param[1]->data : NULL;
  float *mean = a->saved, *var = mean + C;
  char *out = a->out->data;
  const int64_t rows = st.n * st.oh, kk = st.k, per = kk * kk + kk; /* per thread: G [k][k] (upper), then G1 [k] */
  const size_t out_row_bytes = (st.bf16 ? 2 : 4) * (size_t)(st.ow * C);
  float *shift = (float *)((char *)a->saved + s->shift_off); /* saved for backward */
  tap_shifts(&st, x, shift);
  cpu_stem_pad_image(&st, x, st.img);
  row_lanes L;
  const tap_walk walk = tap_walk_of(&st);
#pragma omp parallel num_threads(st.threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    float *sh = (float *)(sc + s->rows_off + (size_t)t * s->rows_slice);
    const void *src[STEM_MAX_K];
    double *g = (double *)(sc + s->part_off + (size_t)t * s->part_slice);
    vfw *blk = (vfw *)(sc + s->blk_off + (size_t)t * s->blk_slice);
    memset(g, 0, sizeof(double) * (size_t)per);
    memset(blk, 0, sizeof(vfw) * (size_t)per);
    int held = 0; /* rows in blk */
#pragma omp for schedule(static) nowait
    for (int64_t row = 0; row < rows; row++) {
      taps_at(&walk, row, src);
      st.bf16 ? shifted_rows(s, src, shift, sh, 1) : shifted_rows(s, src, shift, sh, 0);
      gram_any(sh, s->owv, kk, blk);
      if (++held == FLUSH_ROWS) gram_flush(blk, kk, g), held = 0;
    }
    gram_flush(blk, kk, g);
#pragma omp barrier
#pragma omp single
    {
      double *all = (double *)(sc + s->part_off); /* thread 0's, the others added in thread order */
      for (int u = 1; u < nt; u++) {
        const double *o = (const double *)(sc + s->part_off + (size_t)u * s->part_slice);
        for (int64_t i = 0; i < per; i++) all[i] += o[i];
      }
      stats_of(&st, all, all + kk * kk, shift, (double)s->m, mean, var);
      memcpy((char *)a->saved + s->gram_off, all, sizeof(double) * (size_t)per); /* for backward */
      const bn_coef k = coef_of(mean, var, gamma, beta, s->eps);
      row_lanes_of(&st, &k, &L);
    } /* its barrier: L is set */
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
      const float *f32[STEM_MAX_K];
      taps_at(&walk, row, src);
      f32_rows(s, src, sh, s->owv, f32);
      out_row_any(s, &L, f32, out + row * out_row_bytes);
    }
    if (s->stream) _mm_sfence(); /* the streamed lines out before the next layer reads them */
  }
  if (!s->update_running) return;
  for (int c = 0; c < C; c++) /* as the reference moves them */
    sp_bn_running_update(bn->state[0]->data, bn->state[1]->data, c, mean[c], var[c], (double)s->m, s->momentum);
}

/* One output row's backward: per vector of positions the stem's value
 * again, dy (dz where the ReLU passed it) into dys (a row, as dz lies), its
 * sums and those of dy xhat into sdy and sdx; then per block of up to 9 taps
 * the sums of dy times the tap's values into acc[tap][C] (double). (Not the
 * shifted value: a subtraction per product made backward 1.3 ms slower on
 * the first version.) */
/* dy at vectors j, j + PP, ... (g of them) into dys (as the lanes lie),
 * summed into a, and dy xhat into b. */
INLINE void dy_vectors(const stem_bn_node *s, const row_lanes *L, const float *const *rows, const void *dz, float *dys,
                       int64_t j, const int64_t k, const int bf16, const int g, vfw *a, vfw *b) {
  const int64_t ow = s->stem.ow;
  vfw y[G];
  y_at(L, rows, j, k, g, y);
  VEC_UNROLL
  for (int q = 0; q < g; q++) {
    const int64_t at = j + q * PP;
    vfw d = to_pairs(at + PP > ow ? vldw(dz, C * at, bf16, 8) : vldw(dz, C * at, bf16, VW)); /* a lone last position */
    if (s->relu) d = (vfw)((viw)d & (viw)(pre_relu(L, y[q]) > 0.0f));
    *a += d, *b += d * ((y[q] - L->mean) * L->istd);
    *(vfwu *)(dys + C * at) = d;
  }
}

/* One output row's backward: per vector of positions the stem's value
 * again, dy (dz where the ReLU passed it) into dys, its sums and those of
 * dy xhat into sdy and sdx; then per block of up to 9 taps the sums of dy
 * times the tap's values into acc[tap][C] (double). (Not the shifted value:
 * a subtraction per product made backward 1.3 ms slower on the first
 * version.) */
INLINE void grad_row(const stem_bn_node *s, const row_lanes *L, const float *const *rows, const void *dz, float *dys,
                     const int64_t k, const int bf16, double *acc, double *sdy, double *sdx) {
  const int64_t ow = s->stem.ow;
  vfw a = vbcastw(0.0f), b = a;
  int64_t j = 0;
  for (; j + G * PP <= ow; j += G * PP) dy_vectors(s, L, rows, dz, dys, j, k, bf16, G, &a, &b);
  for (; j < ow; j += PP) dy_vectors(s, L, rows, dz, dys, j, k, bf16, 1, &a, &b);
  const vf8 fa = channels_of(a), fb = channels_of(b);
  for (int c = 0; c < C; c++) sdy[c] += fa[c], sdx[c] += fb[c];
  for (int64_t t0 = 0; t0 < k; t0 += 9) {
    const int64_t nk = k - t0 < 9 ? k - t0 : 9;
    vfw p[9];
    VEC_UNROLL
    for (int q = 0; q < 9; q++) p[q] = vbcastw(0.0f);
    for (j = 0; j < ow; j += PP) {
      const vfw d = *(const vfwu *)(dys + C * j); /* a lone last position: its second position's lanes zero */
      VEC_UNROLL
      for (int q = 0; q < 9; q++)
        if (q < nk) p[q] += x_pair(rows[t0 + q], j) * d;
    }
    for (int q = 0; q < nk; q++) {
      const vf8 f = channels_of(p[q]);
      for (int c = 0; c < C; c++) acc[(t0 + q) * C + c] += f[c];
    }
  }
}

static void grad_row_any(const stem_bn_node *s, const row_lanes *L, const float *const *rows, const void *dz,
                         float *dys, double *acc, double *sdy, double *sdx) {
  const int64_t k = s->stem.k;
  if (s->stem.bf16)
    k == 9 ? grad_row(s, L, rows, dz, dys, 9, 1, acc, sdy, sdx) : grad_row(s, L, rows, dz, dys, k, 1, acc, sdy, sdx);
  else
    k == 9 ? grad_row(s, L, rows, dz, dys, 9, 0, acc, sdy, sdx) : grad_row(s, L, rows, dz, dys, k, 0, acc, sdy, sdx);
}

/* Backward in one pass over the rows. With dy0 = k1 (dy - c1 - xh c2) the
 * gradient before the batch norm (k1 = gamma / std, c1 and c2 the means
 * of dy and dy xh over the batch, known only at the end), the weight
 * gradient of tap t is
 *   sum dy0 x_t = k1 (sum dy x_t - c1 G1[t] - c2 sum xh x_t),
 * and as y is linear in the taps, sum xh x_t = istd (sum_u w_u G[u][t] +
 * (b - mean) G1[t]) comes from forward's sums of the image (saved). So the
 * pass sums dy x_t with dy and dy xh, and the terms meet after it. Per
 * thread in double, a row's sums in f32. */
enum { S_DY, S_DYXH, N_S }; /* per-channel sums after the taps' */

static void sbn_backward(cpu_node *n, const sp_op_args *a) {
  const stem_bn_node *s = (const stem_bn_node *)n;
  char *sc = a->scratch;
  const stem_node st = stem_in(s, a, sc);
  const sp_op_args *bn = a->consumer;
  const float *gamma = bn->n_param == 2 ? bn->param[0]->data : NULL,
              *beta = bn->n_param == 2 ? bn->param[1]->data : NULL;
  const char *dz = a->d_out->data;
  const float *mean = a->saved, *var = mean + C;
  const double *g = (const double *)((const char *)a->saved + s->gram_off), *g1 = g + st.k * st.k;
  const float *shift = (const float *)((const char *)a->saved + s->shift_off);
  const bn_coef k = coef_of(mean, var, gamma, beta, s->eps);
  row_lanes L;
  row_lanes_of(&st, &k, &L);
  const int64_t rows = st.n * st.oh, taps = st.k;
  const size_t dz_row_bytes = (st.bf16 ? 2 : 4) * (size_t)(st.ow * C);
  const int64_t per = taps * C + N_S * C; /* per thread: [tap][C] of dy x_t, then N_S x C */
  int team = 1;                           /* the threads that ran (fewer than asked under OMP_THREAD_LIMIT or nested) */
  const tap_walk walk = tap_walk_of(&st);
#pragma omp parallel num_threads(st.threads)
  {
    const int t = omp_get_thread_num();
#pragma omp single nowait
    team = omp_get_num_threads();
    const void *src[STEM_MAX_K];
    float *buf = (float *)(sc + s->rows_off + (size_t)t * s->rows_slice), *dys = buf + taps * s->owv;
    double *acc = (double *)(sc + s->part_off + (size_t)t * s->part_slice), *as = acc + taps * C;
    memset(acc, 0, sizeof(double) * (size_t)per);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
      const float *f32[STEM_MAX_K];
      taps_at(&walk, row, src);
      f32_rows(s, src, buf, s->owv, f32);
      grad_row_any(s, &L, f32, dz + row * dz_row_bytes, dys, acc, as + S_DY * C, as + S_DYXH * C);
    }
  }
  /* Threads in thread order, then the terms. */
  double tot[STEM_MAX_K * C + N_S * C] = {0};
  for (int u = 0; u < team; u++) {
    const double *acc = (const double *)(sc + s->part_off + (size_t)u * s->part_slice);
    for (int64_t i = 0; i < per; i++) tot[i] += acc[i];
  }
  const double *as = tot + taps * C, m = (double)s->m;
  float *dgamma = bn->n_param == 2 && bn->d_param[0] ? bn->d_param[0]->data : NULL;
  float *dbeta = bn->n_param == 2 && bn->d_param[1] ? bn->d_param[1]->data : NULL;
  float *dw = a->d_param[0] ? a->d_param[0]->data : NULL,
        *db = st.has_bias && a->d_param[1] ? a->d_param[1]->data : NULL;
  /* The plan leaves a gradient we are told to overwrite unzeroed (d_param_fresh): its old
   * value, even a NaN, is not read then. */
  const int fresh_w = (a->d_param_fresh & 1u) != 0, fresh_b = (a->d_param_fresh & 2u) != 0;
  for (int c = 0; c < C; c++) {
    /* With x' (gram_row), y - mean = sum_u w_u x'_u - w . G1 / m exactly
     * (mean = w . G1 / m + S + b), so sum_p (y - mean) x'_t = sum_u w_u
     * G[u][t] + shift G1[t] with shift = -w . G1 / m: taken in double from
     * the sums, not from the float mean (which, rounded near a large mean,
     * would leave sum xh nonzero). Then sum xh x_t = sum xh x'_t, and
     * sum x_t = G1[t] + m s_t. */
    double wg1 = 0;
    for (int64_t q = 0; q < taps; q++) wg1 += st.wt[q * C + c] * g1[q];
    const double istd = k.istd[c], k1 = (double)(gamma ? gamma[c] : 1.0f) * istd, c1 = as[S_DY * C + c] / m,
                 c2 = as[S_DYXH * C + c] / m, shift_c = -wg1 / m;
    if (dgamma) dgamma[c] += (float)as[S_DYXH * C + c];
    if (dbeta) dbeta[c] += (float)as[S_DY * C + c];
    if (db) db[c] = fresh_b ? 0.0f : db[c]; /* sum dy0 = 0: a bias before a batch norm has no gradient */
    for (int64_t q = 0; q < taps && dw; q++) {
      double gw = shift_c * g1[q]; /* sum xh x'_q / istd */
      for (int64_t u = 0; u < taps; u++) gw += st.wt[u * C + c] * g[u < q ? u * taps + q : q * taps + u];
      const int64_t rr = q / (st.kw * st.ic), cc = q / st.ic % st.kw, i = q % st.ic;
      float *to = dw + ((c * st.ic + i) * st.kh + rr) * st.kw + cc;
      *to = (fresh_w ? 0.0f : *to) + (float)(k1 * (tot[q * C + c] - c1 * (g1[q] + m * shift[q]) - c2 * istd * gw));
    }
  }
}

static int sbn_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  const stem_bn_node *s = (const stem_bn_node *)n;
  (void)fs, (void)bs;
  if (!a->consumer || (s->update_running && a->consumer->n_state < 2))
    return sp_error_set("conv stem + batch norm: the batch norm is not wired");
  return 0;
}

static const cpu_vt sbn_vt = {sbn_forward, sbn_backward, sbn_bind, NULL};

static size_t line_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

static int applies(const sp_op_prep *p) {
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  const sp_op_consumer *bn = &p->consumer[0];
  if (!cpu_stem_bn_on) return 0;
  return p->training && p->run_backward && !p->need_d_in[0] && !p->out_plain && p->in_layout[0] == NULL &&
         p->in_dtype[0] == SP_F32 && in->ndim == 4 && at->groups == 1 && in->d[1] <= STEM_MAX_IC &&
         in->d[1] * w->d[2] * w->d[3] <= STEM_MAX_K && w->d[0] == C && bn->op == &sp_op_batchnorm && !bn->out_plain &&
         (bn->n_param == 0 || bn->n_param == 2) && (bn->n_state == 0 || bn->n_state == 2);
}
#endif

int cpu_conv_stem_bn_prepare(sp_op_prep *p) {
#if defined(__AVX2__) && defined(__FMA__)
  if (!applies(p)) return 1;
  const sp_batchnorm_attr *at = p->consumer[0].attr;
  stem_bn_node *s = cpu_node_new(sizeof *s, &sbn_vt);
  cpu_stem_geometry(&s->stem, p); /* bf16: the plan's */
  s->relu = p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain;
  s->update_running = p->consumer[0].n_state == 2;
  s->eps = at ? at->eps : 1e-5f;
  s->momentum = at ? at->momentum : 0.1f;
  s->m = s->stem.n * s->stem.oh * s->stem.ow;
  s->owv = (s->stem.ow + VW - 1) / VW * VW;
  const dnnl_dims_t od = {s->stem.n, C, s->stem.oh, s->stem.ow};
  /* 8 channels channels-last are one 8-channel block: oneDNN's AVX2 kernels
   * read it as it lies. With AVX-512 the same bytes are declared
   * channels-last, which the next layer's brgemm kernel reads as they lie
   * (as nChw8c its AVX2 kernel ran, and wrote 8-channel blocks that the
   * layers after it ran on AVX2 too). */
  const dnnl_format_tag_t tag = sp_backend_cpu_avx512() ? dnnl_acdb : dnnl_aBcd8b;
  const size_t es = s->stem.bf16 ? 2 : 4;
  if (dnnl_memory_desc_init_by_tag(&s->stem.base.out_md, 4, od, s->stem.bf16 ? dnnl_bf16 : dnnl_f32, tag) !=
      dnnl_success) {
    cpu_node_free(&s->stem.base);
    return 1;
  }
  const int threads = s->stem.threads;
  /* A row's taps (forward: shifted, then widened; backward: widened), then backward's dy. */
  const int64_t k = s->stem.k;
  s->rows_slice = line_up(sizeof(float) * (size_t)(k * s->owv + C * (s->owv + PP)));
  const int64_t gram = k * k + k, sums = k * C + N_S * C;
  s->part_slice = line_up(sizeof(double) * (size_t)(gram > sums ? gram : sums));
  size_t scratch = 0; /* forward and backward alike */
  s->wt_off = cpu_take(&scratch, sizeof(float) * (size_t)(k * C));
  s->bias_off = cpu_take(&scratch, sizeof(float) * C);
  s->rows_off = cpu_take(&scratch, (size_t)threads * s->rows_slice);
  s->part_off = cpu_take(&scratch, (size_t)threads * s->part_slice);
  s->blk_slice = line_up(sizeof(vfw) * (size_t)gram);
  s->blk_off = cpu_take(&scratch, (size_t)threads * s->blk_slice);
  s->stream = (int64_t)es * s->m * C >= cpu_stream_threshold_plan(p->run_backward);
  /* The batch's mean and variance, the taps' shifts, the image's sums
   * (gram_rows), then the padded image. */
  s->shift_off = sizeof(float) * 2 * C;
  s->gram_off = s->shift_off + (sizeof(float) * (size_t)k + 7) / 8 * 8;
  s->img_off = line_up(s->gram_off + sizeof(double) * (size_t)gram);
  p->saved_bytes = s->img_off + es * (size_t)(s->stem.n * s->stem.ic * s->stem.hp * s->stem.sw * s->stem.wq);
  p->param_grad_overwrites = s->stem.has_bias ? 3u : 1u; /* when told (d_param_fresh) */
  p->absorb_consumer = 1 + s->relu;
  return cpu_report_scratch(p, &s->stem.base, scratch, scratch);
#else
  (void)p;
  return 1;
#endif
}

int cpu_conv_is_stem_bn(const void *state) {
#if defined(__AVX2__) && defined(__FMA__)
  return ((const cpu_node *)state)->vt == &sbn_vt;
#else
  (void)state;
  return 0;
#endif
}
#endif
