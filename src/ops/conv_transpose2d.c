/* Transposed 2-D convolution (PyTorch ConvTranspose2d semantics): the adjoint
 * of conv2d with respect to its input. Input pixel (ih, iw) scatters through
 * tap (i, j) onto output pixel (ih*s - p + i*d, iw*s - p + j*d).
 *
 * As in conv2d.c, each kernel is written as a gather so that one loop
 * iteration owns each element it writes: forward over (n, cout), input
 * gradient over (n, cin), weight gradient over weight elements. Sums run in
 * double in a fixed order, so results do not depend on the thread count. */
#include <stdio.h>
#include <stdlib.h>

#include "ops/ops.h"

/* Below this many multiply-adds a parallel region costs more than it saves
 * (thread wake-up is tens of microseconds; worse on a loaded machine). */
#define PAR_MIN_WORK 32768

typedef struct {
  int64_t n, cin, h, w;         /* input */
  int64_t cout_g, kh, kw;       /* weight [cin, cout_g, kh, kw] */
  int64_t cout, cin_g, ho, wo;  /* output */
  int64_t sh, sw, ph, pw, oph, opw, dh, dw, groups;
} tconv_geom;

/* 0 for stride, dilation or groups reads as 1 (their PyTorch default), so a
 * zero-initialised attr struct means a plain stride-1 transposed conv. */
static int64_t or_one(int v) { return v == 0 ? 1 : v; }

static int geom_from(const sp_conv_transpose2d_attr *a, const sp_shape *x, const sp_shape *w,
                     tconv_geom *g, char *err, size_t errlen) {
  char xs[64], ws[64];
  sp_conv_transpose2d_attr def = {1, 1, 0, 0, 0, 0, 1, 1, 1};
  if (!a) a = &def;
  g->sh = or_one(a->stride_h), g->sw = or_one(a->stride_w);
  g->ph = a->pad_h, g->pw = a->pad_w;
  g->oph = a->out_pad_h, g->opw = a->out_pad_w;
  g->dh = or_one(a->dil_h), g->dw = or_one(a->dil_w);
  g->groups = or_one(a->groups);
  if (x->ndim != 4) {
    snprintf(err, errlen, "conv_transpose2d: input must be [N,C,H,W], got %s",
             sp_shape_str(x, xs, sizeof xs));
    return -1;
  }
  if (w->ndim != 4) {
    snprintf(err, errlen, "conv_transpose2d: weight must be [Cin,Cout/groups,kh,kw], got %s",
             sp_shape_str(w, ws, sizeof ws));
    return -1;
  }
  sp_shape_str(x, xs, sizeof xs);
  sp_shape_str(w, ws, sizeof ws);
  if (g->sh < 0 || g->sw < 0 || g->dh < 0 || g->dw < 0 || g->groups < 0 || g->ph < 0 ||
      g->pw < 0 || g->oph < 0 || g->opw < 0) {
    snprintf(err, errlen, "conv_transpose2d: negative attribute (stride %lld,%lld pad %lld,%lld "
             "output_padding %lld,%lld dilation %lld,%lld groups %lld)",
             (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw,
             (long long)g->oph, (long long)g->opw, (long long)g->dh, (long long)g->dw,
             (long long)g->groups);
    return -1;
  }
  /* PyTorch's rule: output padding only resolves the ambiguity of a strided
   * or dilated shape, so it must stay below one of them. */
  if ((g->oph >= g->sh && g->oph >= g->dh) || (g->opw >= g->sw && g->opw >= g->dw)) {
    snprintf(err, errlen, "conv_transpose2d: output_padding %lld,%lld must be smaller than either "
             "stride %lld,%lld or dilation %lld,%lld",
             (long long)g->oph, (long long)g->opw, (long long)g->sh, (long long)g->sw,
             (long long)g->dh, (long long)g->dw);
    return -1;
  }
  g->n = x->d[0], g->cin = x->d[1], g->h = x->d[2], g->w = x->d[3];
  g->cout_g = w->d[1], g->kh = w->d[2], g->kw = w->d[3];
  if (w->d[0] != g->cin) {
    snprintf(err, errlen, "conv_transpose2d: input has %lld channels but weight expects %lld (weight %s, groups %lld)",
             (long long)g->cin, (long long)w->d[0], ws, (long long)g->groups);
    return -1;
  }
  if (g->cin % g->groups) {
    snprintf(err, errlen, "conv_transpose2d: groups %lld must divide the %lld input channels (input %s, weight %s)",
             (long long)g->groups, (long long)g->cin, xs, ws);
    return -1;
  }
  g->cin_g = g->cin / g->groups;
  g->cout = g->cout_g * g->groups;
  g->ho = (g->h - 1) * g->sh - 2 * g->ph + g->dh * (g->kh - 1) + g->oph + 1;
  g->wo = (g->w - 1) * g->sw - 2 * g->pw + g->dw * (g->kw - 1) + g->opw + 1;
  if (g->n < 1 || g->cin < 1 || g->h < 1 || g->w < 1 || g->cout_g < 1 || g->kh < 1 || g->kw < 1) {
    snprintf(err, errlen, "conv_transpose2d: empty tensor (input %s, weight %s)", xs, ws);
    return -1;
  }
  if (g->ho < 1 || g->wo < 1) {
    snprintf(err, errlen, "conv_transpose2d: output would be %lldx%lld: padding %lld,%lld is too large "
             "(input %s, weight %s)",
             (long long)g->ho, (long long)g->wo, (long long)g->ph, (long long)g->pw, xs, ws);
    return -1;
  }
  return 0;
}

static int tconv_infer(const void *attr, int n_in, const sp_shape *in, int n_param,
                       const sp_shape *param, sp_shape *out, char *err, size_t errlen) {
  if (n_in != 1 || n_param < 1 || n_param > 2) {
    snprintf(err, errlen, "conv_transpose2d: expects 1 input and 1-2 params (weight, bias), got %d and %d",
             n_in, n_param);
    return -1;
  }
  tconv_geom g;
  if (geom_from(attr, &in[0], &param[0], &g, err, errlen)) return -1;
  if (n_param == 2 && (param[1].ndim != 1 || param[1].d[0] != g.cout)) {
    char bs[64], ws[64];
    snprintf(err, errlen, "conv_transpose2d: bias %s must be [%lld] to match weight %s and groups %lld",
             sp_shape_str(&param[1], bs, sizeof bs), (long long)g.cout,
             sp_shape_str(&param[0], ws, sizeof ws), (long long)g.groups);
    return -1;
  }
  *out = sp_shape4(g.n, g.cout, g.ho, g.wo);
  return 0;
}

static void geom_of_args(const sp_op_args *a, tconv_geom *g) {
  char err[256];
  if (geom_from(a->attr, &a->in[0]->shape, &a->param[0]->shape, g, err, sizeof err))
    sp_panic("%s", err); /* infer accepted these shapes: a graph bug */
}

/* The inputs i in [*lo, *hi) whose tap lands inside the output:
 * 0 <= i*s + off < n_out, 0 <= i < n_in. Hoisting this bound out of the inner
 * loop leaves it branch-free (and vectorisable). */
static void tap_range(int64_t off, int64_t s, int64_t n_out, int64_t n_in, int64_t *lo, int64_t *hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  const int64_t last = n_out - 1 - off; /* i*s <= last */
  *hi = last < 0 ? 0 : last / s + 1;
  if (*hi > n_in) *hi = n_in;
  if (*lo > *hi) *lo = *hi;
}

/* Forward and the input gradient walk (channel, tap) in the outer loops and
 * whole rows in the inner ones, accumulating into a per-thread double plane
 * that one iteration owns. Each element still receives its terms in
 * (channel, kh, kw) order, as the per-element textbook sum would; a
 * float*float product is exact in double, so fused multiply-add or not, the
 * bits are the same. */
static void tconv_forward(const sp_op_args *a) {
  tconv_geom g;
  geom_of_args(a, &g);
  const int64_t work = g.n * g.cin * g.h * g.w * g.cout_g * g.kh * g.kw;
  const float *x = a->in[0]->data, *w = a->param[0]->data;
  const float *b = a->n_param > 1 && a->param[1] ? a->param[1]->data : NULL;
  float *y = a->out->data;
  const int64_t khw = g.kh * g.kw, hw_out = g.ho * g.wo;
#pragma omp parallel if (work >= PAR_MIN_WORK)
  {
    double *acc = sp_xmalloc(sizeof(double) * (size_t)hw_out);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < g.n * g.cout; nc++) {
      const int64_t n = nc / g.cout, co = nc % g.cout, grp = co / g.cout_g, col = co % g.cout_g;
      const double init = b ? b[co] : 0.0;
      for (int64_t k = 0; k < hw_out; k++) acc[k] = init;
      /* x pixel (ih, iw) lands on (ih*s - p + i*d, iw*s - p + j*d). */
      for (int64_t cl = 0; cl < g.cin_g; cl++) {
        const int64_t c = grp * g.cin_g + cl;
        const float *xc = x + (n * g.cin + c) * g.h * g.w;
        const float *wc = w + (c * g.cout_g + col) * khw;
        for (int64_t i = 0; i < g.kh; i++) {
          for (int64_t j = 0; j < g.kw; j++) {
            const double wv = wc[i * g.kw + j];
            const int64_t off = j * g.dw - g.pw;
            int64_t iw0, iw1;
            tap_range(off, g.sw, g.wo, g.w, &iw0, &iw1);
            for (int64_t ih = 0; ih < g.h; ih++) {
              const int64_t oh = ih * g.sh - g.ph + i * g.dh;
              if (oh < 0 || oh >= g.ho) continue;
              const float *xr = xc + ih * g.w;
              double *ar = acc + oh * g.wo;
              for (int64_t iw = iw0; iw < iw1; iw++) ar[iw * g.sw + off] += (double)xr[iw] * wv;
            }
          }
        }
      }
      float *yc = y + nc * hw_out;
      for (int64_t k = 0; k < hw_out; k++) yc[k] = (float)acc[k];
    }
    free(acc);
  }
}

/* dx is a plain convolution of dy with the same weights. */
static void tconv_backward_data(const sp_op_args *a, const tconv_geom *gp, float *dx) {
  const tconv_geom g = *gp;
  const int64_t work = g.n * g.cin * g.h * g.w * g.cout_g * g.kh * g.kw;
  const float *w = a->param[0]->data, *dy = a->d_out->data;
  const int64_t khw = g.kh * g.kw, hw_out = g.ho * g.wo, hw_in = g.h * g.w;
#pragma omp parallel if (work >= PAR_MIN_WORK)
  {
    double *acc = sp_xmalloc(sizeof(double) * (size_t)hw_in);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < g.n * g.cin; nc++) {
      const int64_t n = nc / g.cin, c = nc % g.cin, grp = c / g.cin_g;
      for (int64_t k = 0; k < hw_in; k++) acc[k] = 0.0;
      for (int64_t col = 0; col < g.cout_g; col++) {
        const float *dyc = dy + (n * g.cout + grp * g.cout_g + col) * hw_out;
        const float *wc = w + (c * g.cout_g + col) * khw;
        for (int64_t i = 0; i < g.kh; i++) {
          for (int64_t j = 0; j < g.kw; j++) {
            const double wv = wc[i * g.kw + j];
            const int64_t off = j * g.dw - g.pw;
            int64_t iw0, iw1;
            tap_range(off, g.sw, g.wo, g.w, &iw0, &iw1);
            for (int64_t ih = 0; ih < g.h; ih++) {
              const int64_t oh = ih * g.sh - g.ph + i * g.dh;
              if (oh < 0 || oh >= g.ho) continue;
              const float *dyr = dyc + oh * g.wo;
              double *ar = acc + ih * g.w;
              for (int64_t iw = iw0; iw < iw1; iw++) ar[iw] += (double)dyr[iw * g.sw + off] * wv;
            }
          }
        }
      }
      float *dxc = dx + nc * hw_in;
      for (int64_t k = 0; k < hw_in; k++) dxc[k] += (float)acc[k];
    }
    free(acc);
  }
}

/* dw[c,col,i,j] = sum over (n, ih, iw) of x[ih,iw] dy[oh,ow], one weight per
 * iteration. */
static void tconv_backward_weight(const sp_op_args *a, const tconv_geom *gp, float *dw) {
  const tconv_geom g = *gp;
  const int64_t work = g.n * g.cin * g.h * g.w * g.cout_g * g.kh * g.kw;
  const float *x = a->in[0]->data, *dy = a->d_out->data;
  const int64_t khw = g.kh * g.kw, hw_out = g.ho * g.wo;
  const int64_t nw = g.cin * g.cout_g * khw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
  for (int64_t e = 0; e < nw; e++) {
    const int64_t j = e % g.kw, i = (e / g.kw) % g.kh, col = (e / khw) % g.cout_g;
    const int64_t c = e / (khw * g.cout_g), co = (c / g.cin_g) * g.cout_g + col;
    double s = 0.0;
    for (int64_t n = 0; n < g.n; n++) {
      const float *xc = x + (n * g.cin + c) * g.h * g.w;
      const float *dyc = dy + (n * g.cout + co) * hw_out;
      for (int64_t ih = 0; ih < g.h; ih++) {
        const int64_t oh = ih * g.sh - g.ph + i * g.dh;
        if (oh < 0 || oh >= g.ho) continue;
        for (int64_t iw = 0; iw < g.w; iw++) {
          const int64_t ow = iw * g.sw - g.pw + j * g.dw;
          if (ow < 0 || ow >= g.wo) continue;
          s += (double)xc[ih * g.w + iw] * dyc[oh * g.wo + ow];
        }
      }
    }
    dw[e] += (float)s;
  }
}

static void tconv_backward(const sp_op_args *a) {
  tconv_geom g;
  geom_of_args(a, &g);
  if (a->d_in[0]) tconv_backward_data(a, &g, a->d_in[0]->data);
  if (a->d_param[0]) tconv_backward_weight(a, &g, a->d_param[0]->data);
  if (a->n_param > 1 && a->d_param[1])
    sp_op_bias_grad_nchw(a->d_out->data, g.n, g.cout, g.ho * g.wo, a->d_param[1]->data);
}

const sp_op_def sp_op_conv_transpose2d = {
    .name = "conv_transpose2d",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = tconv_infer,
    .saved_bytes = NULL,
    .forward = tconv_forward,
    .backward = tconv_backward,
};
