/* The reference loops of 2-D convolution, shared by conv2d.c and
 * conv_transpose2d.c (op.h: sp_conv_geom). A transposed convolution is the
 * adjoint of a direct one: seen as that direct convolution (its output the
 * direct one's input), its forward is the direct input gradient, its input
 * gradient the direct forward, and its weight gradient the direct one with x
 * and dy swapped. So one set of loops serves both.
 *
 * The loops are written so that every element they write is owned by exactly
 * one loop iteration: the gather parallelises over output planes, the scatter
 * over input planes (each collects the outputs that read it), the weight
 * gradient over weight elements. No thread ever adds into an element another
 * thread writes, and each sum runs in a fixed order in double, so results do
 * not depend on the thread count. */
#include <stdlib.h>

#include "ops/op.h"

/* Below this many multiply-adds a parallel region costs more than it saves
 * (thread wake-up is tens of microseconds; worse on a loaded machine). */
#define PAR_MIN_WORK 32768

static int64_t conv_work(const sp_conv_geom *g) { return g->n * g->cout * g->ho * g->wo * g->cin_g * g->kh * g->kw; }

/* The outputs o in [*lo, *hi) whose tap lands inside the input:
 * 0 <= o*s + off < n_in, 0 <= o < n_out. Hoisting this bound out of the inner
 * loop leaves it branch-free (and vectorisable). */
static void tap_range(int64_t off, int64_t s, int64_t n_in, int64_t n_out, int64_t *lo, int64_t *hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  const int64_t last = n_in - 1 - off; /* o*s <= last */
  *hi = last < 0 ? 0 : last / s + 1;
  if (*hi > n_out) *hi = n_out;
  if (*lo > *hi) *lo = *hi;
}

/* One kh x kw weight plane wc between an input plane and an output plane,
 * walking (tap) in the outer loops and whole rows in the inner ones:
 * gather: acc (ho x wo) += src (h x w, the input) taps;
 * scatter: acc (h x w) += src (ho x wo, the output gradient) taps.
 * Each element receives its terms in (kh, kw) order, as the textbook
 * per-element sum; a float*float product is exact in double, so whether the
 * compiler fuses multiply-add does not change any bit. */
static void plane_taps(const sp_conv_geom *gp, const float *wc, const float *src, double *acc, int scatter) {
  const sp_conv_geom g = *gp;
  for (int64_t i = 0; i < g.kh; i++) {
    for (int64_t j = 0; j < g.kw; j++) {
      const double wv = wc[i * g.kw + j];
      const int64_t off = j * g.dw - g.pw;
      int64_t ow0, ow1;
      tap_range(off, g.sw, g.w, g.wo, &ow0, &ow1);
      for (int64_t oh = 0; oh < g.ho; oh++) {
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        if (scatter) {
          double *ar = acc + ih * g.w;
          const float *dyr = src + oh * g.wo;
          for (int64_t ow = ow0; ow < ow1; ow++) ar[ow * g.sw + off] += (double)dyr[ow] * wv;
        } else {
          const float *xr = src + ih * g.w;
          double *ar = acc + oh * g.wo;
          for (int64_t ow = ow0; ow < ow1; ow++) ar[ow] += (double)xr[ow * g.sw + off] * wv;
        }
      }
    }
  }
}

static void plane_init(double *acc, int64_t n, double v) {
  for (int64_t k = 0; k < n; k++) acc[k] = v;
}

static void plane_store(float *dst, const double *acc, int64_t n, int accumulate) {
  if (accumulate)
    for (int64_t k = 0; k < n; k++) dst[k] += (float)acc[k];
  else
    for (int64_t k = 0; k < n; k++) dst[k] = (float)acc[k];
}

void sp_conv_gather(const sp_conv_geom *gp, const float *x, const float *w, const float *bias, float *y,
                    int accumulate) {
  const sp_conv_geom g = *gp;
  const int64_t cout_g = g.cout / g.groups, hw_out = g.ho * g.wo;
#pragma omp parallel if (conv_work(&g) >= PAR_MIN_WORK)
  {
    double *acc = sp_xmalloc(sizeof(double) * (size_t)hw_out);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < g.n * g.cout; nc++) {
      const int64_t n = nc / g.cout, co = nc % g.cout, grp = co / cout_g;
      const float *xg = x + (n * g.cin + grp * g.cin_g) * g.h * g.w;
      const float *wc = w + co * g.cin_g * g.kh * g.kw;
      plane_init(acc, hw_out, bias ? bias[co] : 0.0);
      for (int64_t ci = 0; ci < g.cin_g; ci++) plane_taps(&g, wc + ci * g.kh * g.kw, xg + ci * g.h * g.w, acc, 0);
      plane_store(y + nc * hw_out, acc, hw_out, accumulate);
    }
    free(acc);
  }
}

void sp_conv_scatter(const sp_conv_geom *gp, const float *dy, const float *w, const float *bias, float *dx,
                     int accumulate) {
  const sp_conv_geom g = *gp;
  const int64_t cout_g = g.cout / g.groups, hw_out = g.ho * g.wo, hw_in = g.h * g.w;
#pragma omp parallel if (conv_work(&g) >= PAR_MIN_WORK)
  {
    double *acc = sp_xmalloc(sizeof(double) * (size_t)hw_in);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < g.n * g.cin; nc++) {
      const int64_t n = nc / g.cin, c = nc % g.cin, grp = c / g.cin_g, ci = c % g.cin_g;
      plane_init(acc, hw_in, bias ? bias[c] : 0.0);
      for (int64_t col = 0; col < cout_g; col++) {
        const int64_t co = grp * cout_g + col;
        plane_taps(&g, w + (co * g.cin_g + ci) * g.kh * g.kw, dy + (n * g.cout + co) * hw_out, acc, 1);
      }
      plane_store(dx + nc * hw_in, acc, hw_in, accumulate);
    }
    free(acc);
  }
}

void sp_conv_weight_grad(const sp_conv_geom *gp, const float *x, const float *dy, float *dw) {
  const sp_conv_geom g = *gp;
  const int64_t cout_g = g.cout / g.groups, hw_out = g.ho * g.wo;
  const int64_t nw = g.cout * g.cin_g * g.kh * g.kw;
#pragma omp parallel for schedule(static) if (conv_work(&g) >= PAR_MIN_WORK)
  for (int64_t e = 0; e < nw; e++) {
    const int64_t j = e % g.kw, i = (e / g.kw) % g.kh, ci = (e / (g.kw * g.kh)) % g.cin_g;
    const int64_t co = e / (g.kw * g.kh * g.cin_g), c = (co / cout_g) * g.cin_g + ci;
    double s = 0.0;
    for (int64_t n = 0; n < g.n; n++) {
      const float *xc = x + (n * g.cin + c) * g.h * g.w;
      const float *dyc = dy + (n * g.cout + co) * hw_out;
      for (int64_t oh = 0; oh < g.ho; oh++) {
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t ow = 0; ow < g.wo; ow++) {
          const int64_t iw = ow * g.sw - g.pw + j * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          s += (double)xc[ih * g.w + iw] * dyc[oh * g.wo + ow];
        }
      }
    }
    dw[e] += (float)s;
  }
}
