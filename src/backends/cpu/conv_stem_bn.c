/* The first convolution of an f32 training plan together with the batch
 * norm after it and the ReLU after that (8 output channels, a grey or
 * colour image whose gradient nobody needs): vgg-face's stem.
 * Its output before the batch norm is never stored, nor the gradient
 * there:
 *
 *   forward    pass A: the batch's mean and variance from sums of the image
 *              alone (gram_row: the stem is linear in its taps); pass B:
 *              each stem row computed (conv_stem.c's 8-lane loops),
 *              normalised and ReLU'd in registers into the output. The
 *              running statistics move as the reference moves them.
 *   backward   one pass: each row computed again into a row buffer (L1),
 *              with dz (the gradient after the ReLU) dy, the sums of dy and
 *              dy xhat and, per tap, of dy times the image; the weight
 *              gradient then from those and forward's sums (sbn_backward).
 *
 * Why: apart, the stem wrote its output (vgg-face, batch 64: 64 x 8 x 112 x
 * 112 f32, 25.7 MB), the batch norm read it twice and wrote its own, and
 * backward read and wrote five such tensors more (the batch norm's two
 * passes, the weight gradient reading dy0): about 250 MB of memory traffic
 * a step for a stem of 58 M multiply-adds a pass. Here: the image (12.8 MB)
 * three times, the output written once and dz read once. vgg-face batch
 * 64, AMD Zen 3, 2 threads, alternating runs, per-node profile: stem and
 * batch norm 8.9-9.2 -> 7.0-7.2 ms a step (forward about even, backward
 * 5.1 -> 3.1), the step 2-3% faster. With AVX-512 (Xeon without AMX, 2
 * threads, the same loops on 8 lanes, output declared channels-last) the
 * stem and batch norm took 8.8 ms against 11.2 apart and vgg-face f32 b64
 * trained 3-5% faster (4 alternating pairs, 72.8-75.7 against 75.8-78.5
 * ms a step). Declared as 8-channel blocks there, it had lost (81-82
 * against 75 ms): oneDNN then ran the next two layers on its AVX2 kernels.
 *
 * Sums: of the image shifted by its mean (gram_row), per row in f32, per
 * thread in double, the threads that ran added in thread order (the same
 * bits for a given thread count). The ReLU's mask in backward is the
 * forward's expression on the same row, bit for bit. A bias before the
 * batch norm gets no gradient (it has none). */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/conv_stem.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "ops/ops.h"

/* 1: taken where it applies; 0: never (oneDNN's convolution and bnorm.c's
 * batch norm). */
int cpu_stem_bn_on = 1;
long cpu_stem_bn_calls;

#if defined(__AVX2__) && defined(__FMA__)
enum { C = 8 }; /* output channels: one vector */

typedef struct {
  stem_node stem; /* geometry; wt and bias point into each pass's scratch */
  int relu, update_running;
  float eps, momentum;
  int64_t m; /* values per channel: n oh ow */
  int stream;
  size_t wt_off, bias_off, pad_off, row_off, part_off; /* forward and backward scratch alike */
  size_t dw_off;                                       /* backward scratch: per-thread sums (sbn_backward) */
  size_t shift_off, gram_off; /* in saved, after the mean and variance: the taps' shifts; G, G1 (gram_row) */
  size_t pad_slice, row_slice, part_slice, dw_slice;
} stem_bn_node;

/* One pass's view of the stem: wt and bias in this pass's scratch, the
 * weights (and bias) laid out tap-major again (backward's scratch is not
 * forward's). */
static stem_node stem_in(const stem_bn_node *s, const sp_op_args *a, char *sc) {
  stem_node st = s->stem;
  st.wt = (float *)(sc + s->wt_off), st.bias = (float *)(sc + s->bias_off);
  cpu_stem_weights(&st, a->param[0]->data, st.has_bias ? a->param[1]->data : NULL, NULL);
  return st;
}

typedef struct {
  char *pad;
  float *row; /* position p's 8 channels at row + 8 (1 + p) */
  int64_t pad_held[STEM_MAX_K];
} thread_rows;

static thread_rows rows_of(const stem_bn_node *s, char *sc, int t) {
  thread_rows r = {
      sc + s->pad_off + (size_t)t * s->pad_slice, (float *)(sc + s->row_off + (size_t)t * s->row_slice), {0}};
  for (int k = 0; k < STEM_MAX_K; k++) r.pad_held[k] = -1;
  return r;
}

/* What normalising takes per channel: the mean, 1 / std and the affine
 * map's scale and shift (gamma / std, beta - mean gamma / std). Forward and
 * backward compute them alike, so the ReLU's mask is the same. */
typedef struct {
  vf8 mean, istd, scale, shift;
} bn_coef;

static bn_coef coef_of(const float *mean, const float *var, const float *gamma, const float *beta, float eps) {
  bn_coef k;
  for (int c = 0; c < C; c++) {
    const float is = 1.0f / sqrtf(var[c] + eps), g = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
    k.mean[c] = mean[c], k.istd[c] = is, k.scale[c] = g * is, k.shift[c] = b - mean[c] * g * is;
  }
  return k;
}

/* The value before the ReLU: one expression for forward and backward. */
INLINE vf8 pre_relu(const bn_coef *k, vf8 y) { return y * k->scale + k->shift; }

/* The batch statistics without the rows. With x_t[p] the value tap t reads
 * at position p and x'_t = x_t - s_t (s_t: a shift per input channel, near
 * the image's mean), y_c[p] = b_c + S_c + sum_t w_tc x'_t[p] with S_c =
 * sum_t w_tc s_t, so
 *   sum_p y_c = sum_t w_tc G1[t] + M (b_c + S_c)    G1[t]   = sum_p x'_t[p]
 *   M var_c = w_c^T G w_c - (w_c . G1)^2 / M        G[t][u] = sum_p x'_t[p] x'_u[p]
 * G and G1 depend on the image alone: per position k (k + 1) / 2 + k
 * products and sums (54 for a 3x3 grey stem) against the row's 72 FMAs
 * and 72 broadcasts, from the padded rows in L1 (the padding's zeros
 * shifted too, so the identities hold at the borders). Sums per row in
 * f32 (ow values), per thread in double. The shift keeps a large mean out
 * of G; what remains is the quadratic form's own cancellation where var_c
 * is small against the image's variance (a zero-sum filter on a smooth
 * image): about 1e-7 times their ratio, in the variance (1e-5 for a
 * Laplacian on a smooth photo in [0, 1], emulated). */
INLINE void gram_row(const void *const *src, int64_t ow, const int64_t k, const float *shift, double *g, double *g1) {
  vi8 iota;
  for (int l = 0; l < 8; l++) iota[l] = l;
  const vi8 tail = iota < (vi8){0} + (int)(ow % 8); /* the last vector's lanes inside the row */
  const int64_t full = ow / 8 * 8;
  VEC_UNROLL
  for (int64_t t = 0; t < k; t++) {
    const float *xt = src[t];
    const vf8 st = vbcast(shift[t]);
    vf8 a[STEM_MAX_K + 1]; /* a[u - t]: x'_t x'_u; a[k - t]: x'_t */
    VEC_UNROLL
    for (int64_t u = t; u <= k; u++) a[u - t] = vbcast(0.0f);
    for (int64_t j = 0; j < ow; j += 8) {
      vf8 v = vload_f(xt + j) - st;
      if (j >= full) v = (vf8)((vi8)v & tail); /* past the row: not counted (0 x anything finite) */
      a[k - t] += v;
      VEC_UNROLL
      for (int64_t u = t; u < k; u++) a[u - t] += v * (vload_f((const float *)src[u] + j) - vbcast(shift[u]));
    }
    VEC_UNROLL
    for (int64_t u = t; u <= k; u++) {
      float sum = 0.0f;
      for (int l = 0; l < 8; l++) sum += a[u - t][l];
      if (u < k)
        g[t * k + u] += sum;
      else
        g1[t] += sum;
    }
  }
}

static void gram_any(const void *const *src, int64_t ow, int64_t k, const float *shift, double *g, double *g1) {
  if (k == 9)
    gram_row(src, ow, 9, shift, g, g1);
  else
    gram_row(src, ow, k, shift, g, g1);
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

static void sbn_forward(cpu_node *n, const sp_op_args *a) {
  const stem_bn_node *s = (const stem_bn_node *)n;
  __atomic_add_fetch(&cpu_stem_bn_calls, 1, __ATOMIC_RELAXED);
  char *sc = a->scratch;
  const stem_node st = stem_in(s, a, sc);
  const sp_op_args *bn = a->consumer;
  const float *x = a->in[0]->data, *gamma = bn->n_param == 2 ? bn->param[0]->data : NULL,
              *beta = bn->n_param == 2 ? bn->param[1]->data : NULL;
  float *mean = a->saved, *var = mean + C, *out = a->out->data;
  const int64_t rows = st.n * st.oh, ow = st.ow;
  const int64_t kk = st.k, per = kk * kk + kk; /* per thread: G [k][k] (upper), then G1 [k] */
  bn_coef k;
  float *shift = (float *)((char *)a->saved + s->shift_off); /* saved for backward */
  tap_shifts(&st, x, shift);
#pragma omp parallel num_threads(st.threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    thread_rows r = rows_of(s, sc, t);
    const void *src[STEM_MAX_K];
    double *g = (double *)(sc + s->part_off + (size_t)t * s->part_slice);
    memset(g, 0, sizeof(double) * (size_t)per);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
      cpu_stem_window(&st, x, row, r.pad, r.pad_held, src);
      gram_any(src, ow, kk, shift, g, g + kk * kk);
    }
#pragma omp single
    {
      double *all = (double *)(sc + s->part_off); /* thread 0's, the others added in thread order */
      for (int u = 1; u < nt; u++) {
        const double *o = (const double *)(sc + s->part_off + (size_t)u * s->part_slice);
        for (int64_t i = 0; i < per; i++) all[i] += o[i];
      }
      stats_of(&st, all, all + kk * kk, shift, (double)s->m, mean, var);
      memcpy((char *)a->saved + s->gram_off, all, sizeof(double) * (size_t)per); /* for backward */
      k = coef_of(mean, var, gamma, beta, s->eps);
    } /* its barrier: k is set */
    const vf8 ss[2] = {k.scale, k.shift};
    const int stream = s->stream && ((uintptr_t)out & 31) == 0; /* rows of ow x 32 bytes: all aligned then */
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; row++)
      cpu_stem_row8_bn(&st, x, row, r.pad, r.pad_held, out + row * ow * C, ss, s->relu, stream);
    if (stream) _mm_sfence(); /* the streamed lines out before the next layer reads them */
  }
  if (!s->update_running) return;
  for (int c = 0; c < C; c++) /* as the reference moves them */
    sp_bn_running_update(bn->state[0]->data, bn->state[1]->data, c, mean[c], var[c], (double)s->m, s->momentum);
}

/* dy at position j of the row: dz where the ReLU passed it (all of dz
 * without one); xh the normalised value. */
INLINE vf8 dy_at(const stem_bn_node *s, const bn_coef *k, const float *row, const float *dz, int64_t j, vf8 *xh) {
  const vf8 y = vload_f(row + 8 * (1 + j)), d = vload_f(dz + 8 * j);
  *xh = (y - k->mean) * k->istd;
  return s->relu ? (vf8)((vi8)d & (vi8)(pre_relu(k, y) > 0.0f)) : d;
}

/* acc[t0 + q] (per channel) += sum over the row's positions of v[j] times
 * tap t0 + q's image value, nine taps at a time in registers. (Not the
 * shifted value: a subtraction per FMA made backward 1.3 ms slower.) */
INLINE void tap_sums(const float *v, const void *const *src, int64_t ow, int64_t taps, double *acc) {
  for (int64_t t0 = 0; t0 < taps; t0 += 9) {
    const int64_t nk = taps - t0 < 9 ? taps - t0 : 9;
    vf8 a[9];
    VEC_UNROLL
    for (int q = 0; q < 9; q++) a[q] = vbcast(0.0f);
    if (nk == 9)
      for (int64_t j = 0; j < ow; j++) {
        const vf8 g = vload_f(v + 8 * j);
        VEC_UNROLL
        for (int q = 0; q < 9; q++) a[q] += vbcast(((const float *)src[t0 + q])[j]) * g;
      }
    else
      for (int64_t j = 0; j < ow; j++) {
        const vf8 g = vload_f(v + 8 * j);
        for (int q = 0; q < nk; q++) a[q] += vbcast(((const float *)src[t0 + q])[j]) * g;
      }
    for (int q = 0; q < nk; q++)
      for (int c = 0; c < C; c++) acc[(t0 + q) * C + c] += a[q][c];
  }
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
  const float *x = a->in[0]->data, *gamma = bn->n_param == 2 ? bn->param[0]->data : NULL,
              *beta = bn->n_param == 2 ? bn->param[1]->data : NULL, *dz = a->d_out->data;
  const float *mean = a->saved, *var = mean + C;
  const double *g = (const double *)((const char *)a->saved + s->gram_off), *g1 = g + st.k * st.k;
  const float *shift = (const float *)((const char *)a->saved + s->shift_off);
  const bn_coef k = coef_of(mean, var, gamma, beta, s->eps);
  const int64_t rows = st.n * st.oh, ow = st.ow, taps = st.k;
  const int64_t per = taps * C + N_S * C; /* per thread: [tap][C] of dy x_t, then N_S x C */
  int team = 1;                           /* the threads that ran (fewer than asked under OMP_THREAD_LIMIT or nested) */
#pragma omp parallel num_threads(st.threads)
  {
    const int t = omp_get_thread_num();
#pragma omp single nowait
    team = omp_get_num_threads();
    thread_rows r = rows_of(s, sc, t);
    const void *src[STEM_MAX_K];
    double *acc = (double *)(sc + s->dw_off + (size_t)t * s->dw_slice), *as = acc + taps * C;
    memset(acc, 0, sizeof(double) * (size_t)per);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
      cpu_stem_row8(&st, x, row, r.pad, r.pad_held, r.row, src);
      const float *d = dz + row * ow * C;
      float *dys = r.row + 8;
      vf8 sdy = vbcast(0.0f), sdx = sdy, xh;
      for (int64_t j = 0; j < ow; j++) {
        const vf8 dy = dy_at(s, &k, r.row, d, j, &xh);
        sdy += dy, sdx += dy * xh;
        *(vf8u *)(dys + 8 * j) = dy; /* over y, read already */
      }
      for (int c = 0; c < C; c++) as[S_DY * C + c] += sdy[c], as[S_DYXH * C + c] += sdx[c];
      tap_sums(dys, src, ow, taps, acc);
    }
  }
  /* Threads in thread order, then the terms. */
  double tot[STEM_MAX_K * C + N_S * C] = {0};
  for (int u = 0; u < team; u++) {
    const double *acc = (const double *)(sc + s->dw_off + (size_t)u * s->dw_slice);
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
  return !p->bf16 && p->training && p->run_backward && !p->need_d_in[0] && !p->out_plain && p->in_layout[0] == NULL &&
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
  cpu_stem_geometry(&s->stem, p);
  s->relu = p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain;
  s->update_running = p->consumer[0].n_state == 2;
  s->eps = at ? at->eps : 1e-5f;
  s->momentum = at ? at->momentum : 0.1f;
  s->m = s->stem.n * s->stem.oh * s->stem.ow;
  const dnnl_dims_t od = {s->stem.n, C, s->stem.oh, s->stem.ow};
  /* 8 channels channels-last are one 8-channel block: oneDNN's AVX2 kernels
   * read it as it lies. With AVX-512 the same bytes are declared
   * channels-last, which the next layer's brgemm kernel reads as they lie
   * (as nChw8c its AVX2 kernel ran, and wrote 8-channel blocks that the
   * layers after it ran on AVX2 too). */
  const dnnl_format_tag_t tag = sp_backend_cpu_avx512() ? dnnl_acdb : dnnl_aBcd8b;
  if (dnnl_memory_desc_init_by_tag(&s->stem.base.out_md, 4, od, dnnl_f32, tag) != dnnl_success) {
    cpu_node_free(&s->stem.base);
    return 1;
  }
  const int threads = s->stem.threads;
  s->pad_slice = cpu_stem_pad_slice(&s->stem);
  s->row_slice = line_up(sizeof(float) * (size_t)(C * (s->stem.ow + 1)));
  s->part_slice = line_up(sizeof(double) * (size_t)(s->stem.k * s->stem.k + s->stem.k));
  s->dw_slice = line_up(sizeof(double) * (size_t)(s->stem.k * C + N_S * C));
  size_t fwd = 0;
  s->wt_off = cpu_take(&fwd, sizeof(float) * (size_t)(s->stem.k * C));
  s->bias_off = cpu_take(&fwd, sizeof(float) * C);
  s->pad_off = cpu_take(&fwd, (size_t)threads * s->pad_slice);
  s->row_off = cpu_take(&fwd, (size_t)threads * s->row_slice);
  s->part_off = cpu_take(&fwd, (size_t)threads * s->part_slice);
  size_t bwd = fwd; /* the same places, then the weight gradient's sums */
  s->dw_off = cpu_take(&bwd, (size_t)threads * s->dw_slice);
  s->stream = (int64_t)sizeof(float) * s->m * C >= cpu_stream_threshold();
  /* The batch's mean and variance, the taps' shifts, then the image's sums (gram_row). */
  s->shift_off = sizeof(float) * 2 * C;
  s->gram_off = s->shift_off + (sizeof(float) * (size_t)s->stem.k + 7) / 8 * 8;
  p->saved_bytes = s->gram_off + sizeof(double) * (size_t)(s->stem.k * s->stem.k + s->stem.k);
  p->param_grad_overwrites = s->stem.has_bias ? 3u : 1u; /* when told (d_param_fresh) */
  p->absorb_consumer = 1 + s->relu;
  return cpu_report_scratch(p, &s->stem.base, fwd, bwd);
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
