/* The heatmap head's per-tile exponential kernels (conv_softargmax.c): the
 * sums forward (max, sum of exp, and the column- and row-weighted sums),
 * their merge across an image's tiles, and the logit gradient backward.
 * What each computes: conv_softargmax.h. */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <omp.h>

#include "backends/cpu/conv_softargmax.h"
#include "backends/cpu/exp_nonpos.h"
#include "backends/cpu/vec.h"

/* The tile kernels walk a heatmap's positions VW at a time (vfw, vec.h: one
 * AVX-512 vector of 16, or one AVX2 vector of 8), so its sums stay in
 * registers. At 16 lanes on AVX2 (two registers a value), GCC 12 built the
 * compares of the max lane by lane and moved the sums through the stack and
 * general registers: the head took 10% of a ResUNet-50 f32 inference step
 * on AMD Zen 3, most of it in tile_sums. */

static inline vfw ldw(const float *p) { return *(const vfwu *)p; }
/* a where a > b, else b (b where either is NaN): vmaxps's rule, one
 * instruction where the vector is one register (GCC 12 built the compare
 * and a blend). */
static inline vfw maxw(vfw a, vfw b) {
#if defined(__AVX512F__)
  return (vfw)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
  if (VW == 8) return (vfw)_mm256_max_ps((__m256)a, (__m256)b);
#endif
  const viw m = (viw)(a > b);
  return (vfw)(((viw)a & m) | ((viw)b & ~m));
}

/* exp_nonpos (exp_nonpos.h) on VW lanes: the same steps and constants. */
static inline vfw expw(vfw x) {
  x = maxw(x, vbcastw(-87.0f));
  const vfw t = x * 1.44269504f + EXP_NONPOS_MAGIC, n = t - EXP_NONPOS_MAGIC;
  const vfw r = x - n * EXP_NONPOS_LN2_HI - n * EXP_NONPOS_LN2_LO;
  vfw p = vbcastw(exp_nonpos_c[0]);
  for (int i = 1; i < EXP_NONPOS_TERMS; i++) p = p * r + exp_nonpos_c[i];
#ifdef __AVX512F__
  /* 2^n in one instruction (vscalefps) instead of building its bits, an
   * add, a shift and a multiply: the same value, since exp(-87) is still a
   * normal float or rounds alike below it (frozen f32 ResUNet-50, batch 64,
   * the node with the head: 135-138 -> 127-135 ms, two runs each). */
  return (vfw)_mm512_scalef_ps((__m512)(p * r + 1.0f), (__m512)n);
#else
  const vuw two_n = ((vuw)t - 0x4B400000u + 127u) << 23;
  return (p * r + 1.0f) * (vfw)two_n;
#endif
}

/* Lanes [0, n) of a vector set (n <= VW). */
static inline viw first_lanes(int64_t n) {
  viw iota;
  for (int q = 0; q < VW; q++) iota[q] = q;
  return iota < (viw){0} + (int)n;
}

/* The tile's positions' columns and rows as floats, rt of each (a last
 * vector's lanes past the tile read finite values, masked after). */
void csam_tile_coords(const csam_node *s, int64_t p0, float *jc, float *ic) {
  int64_t i = p0 / s->w, j = p0 % s->w;
  for (int64_t r = 0; r < s->rt; r++) {
    jc[r] = (float)j, ic[r] = (float)i;
    if (++j == s->w) j = 0, i++;
  }
}

/* One tile's partial sums per heatmap: part = [max | sum | column sum | row
 * sum], kp floats each, exponentials taken against the tile's own max. A
 * heatmap's lanes sum rows / 16 values in float each, then add in double. */
void csam_tile_sums(const csam_node *s, const float *lt, const float *b, const float *jc, const float *ic, int64_t np,
                    float *part) {
  const int64_t kp = s->kp, full = np / VW * VW;
  const viw tail = first_lanes(np - full);
  for (int64_t k = 0; k < s->k; k++) {
    const float *row = lt + k * s->ldl;
    /* Four running maxima of the logits before the bias (one would wait on
     * itself every vector); the bias added once after. */
    vfw m0 = vbcastw(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int64_t r = 0;
    for (; r + 4 * VW <= full; r += 4 * VW) {
      m0 = maxw(m0, ldw(row + r)), m1 = maxw(m1, ldw(row + r + VW));
      m2 = maxw(m2, ldw(row + r + 2 * VW)), m3 = maxw(m3, ldw(row + r + 3 * VW));
    }
    for (; r < full; r += VW) m0 = maxw(m0, ldw(row + r));
    if (full < np) m1 = maxw(m1, (vfw)(((viw)ldw(row + full) & tail) | ((viw)vbcastw(-INFINITY) & ~tail)));
    const vfw m4 = maxw(maxw(m0, m1), maxw(m2, m3));
    float mr = m4[0];
    for (int q = 1; q < VW; q++) mr = mr > m4[q] ? mr : m4[q];
    const float mk = mr + b[k];
    const vfw sh = vbcastw(b[k] - mk); /* exp(l + b - max): one add a vector */
    vfw fs = vbcastw(0.0f), fx = fs, fy = fs;
    for (int64_t r = 0; r < full; r += VW) {
      const vfw e = expw(ldw(row + r) + sh);
      fs += e, fx += e * ldw(jc + r), fy += e * ldw(ic + r);
    }
    if (full < np) {
      const vfw e = (vfw)((viw)expw(ldw(row + full) + sh) & tail);
      fs += e, fx += e * ldw(jc + full), fy += e * ldw(ic + full);
    }
    double sum = 0, sx = 0, sy = 0;
    for (int q = 0; q < VW; q++) sum += fs[q], sx += fx[q], sy += fy[q];
    part[k] = mk;
    part[kp + k] = (float)sum, part[2 * kp + k] = (float)sx, part[3 * kp + k] = (float)sy;
  }
}

/* Per heatmap: the tiles' partial sums rescaled to the common max, the
 * expected column and row (scaled into y) and what backward needs. */
void csam_merge_tiles(const csam_node *s, const float *part, float *y, csam_stat *st) {
  const int64_t kp = s->kp;
#pragma omp parallel for schedule(static) num_threads(s->threads)
  for (int64_t q = 0; q < s->n * s->k; q++) {
    const int64_t img = q / s->k, k = q % s->k;
    float mx = -INFINITY;
    for (int64_t t = 0; t < s->tiles; t++) mx = fmaxf(mx, part[((img * s->tiles + t) * 4) * kp + k]);
    double sum = 0.0, sx = 0.0, sy = 0.0;
    for (int64_t t = 0; t < s->tiles; t++) {
      const float *pt = part + (img * s->tiles + t) * 4 * kp;
      const double f = exp((double)pt[k] - (double)mx);
      sum += f * pt[kp + k], sx += f * pt[2 * kp + k], sy += f * pt[3 * kp + k];
    }
    const double ex = sx / sum, ey = sy / sum;
    y[2 * q] = (float)(ex * s->scale);
    y[2 * q + 1] = (float)(ey * s->scale);
    st[img * kp + k] = (csam_stat){mx, (float)(1.0 / sum), (float)ex, (float)ey};
  }
}

/* Per image and heatmap, dL = p (a j + b i + c) with p = exp(L - max) inv_sum:
 * coef = [a | b | c | max | inv_sum], kp floats each, zero past the real
 * heatmaps (their dL is 0). */
void csam_backward_coefs(const csam_node *s, const csam_stat *st, const float *dy, float *coef) {
  const int64_t kp = s->kp;
  for (int64_t img = 0; img < s->n; img++) {
    float *cf = coef + img * 5 * kp;
    for (int64_t k = 0; k < kp; k++) {
      const int real = k < s->k;
      const csam_stat q = real ? st[img * kp + k] : (csam_stat){0};
      const float ca = real ? s->scale * dy[2 * (img * s->k + k)] : 0.0f;
      const float cb = real ? s->scale * dy[2 * (img * s->k + k) + 1] : 0.0f;
      cf[k] = ca, cf[kp + k] = cb, cf[2 * kp + k] = real ? -(ca * q.ex + cb * q.ey) : 0.0f;
      cf[3 * kp + k] = real ? q.max : 0.0f, cf[4 * kp + k] = real ? q.inv_sum : 0.0f;
    }
  }
}

/* One tile's logit gradient dLt in the plan's precision (positions past np
 * zero, so the products see no stale values) and its row sums added into
 * db. Rows go in order: a row's last vector may write zeros into the next
 * row's start, which that row then writes. */
void csam_tile_grad(const csam_node *s, const float *lt, const float *b, const float *cf, const float *jc,
                    const float *ic, int64_t np, void *dl, double *db) {
  const int64_t kp = s->kp, full = np / VW * VW;
  const viw tail = first_lanes(np - full);
  for (int64_t k = 0; k < s->k; k++) {
    const float *row = lt + k * s->ldl;
    const int64_t at = k * s->ldd;
    const vfw bm = vbcastw(b[k]), mx = vbcastw(cf[3 * kp + k]), inv = vbcastw(cf[4 * kp + k]);
    const vfw ca = vbcastw(cf[k]), cb = vbcastw(cf[kp + k]), cc = vbcastw(cf[2 * kp + k]);
    vfw fs = vbcastw(0.0f);
    for (int64_t r = 0; r < full; r += VW) {
      const vfw g = expw(ldw(row + r) + bm - mx) * inv * (ca * ldw(jc + r) + cb * ldw(ic + r) + cc);
      vstw(dl, at + r, g, !s->f32, VW);
      fs += g;
    }
    if (full < np) {
      const vfw g =
          (vfw)((viw)(expw(ldw(row + full) + bm - mx) * inv * (ca * ldw(jc + full) + cb * ldw(ic + full) + cc)) & tail);
      vstw(dl, at + full, g, !s->f32, VW);
      fs += g;
    }
    for (int64_t r = full + (full < np ? VW : 0); r < s->rows; r += VW) vstw(dl, at + r, vbcastw(0.0f), !s->f32, VW);
    double sum = 0;
    for (int q = 0; q < VW; q++) sum += fs[q];
    db[k] += sum;
  }
}
#endif
