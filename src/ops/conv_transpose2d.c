/* Transposed 2-D convolution (PyTorch ConvTranspose2d semantics): the adjoint
 * of conv2d with respect to its input. Input pixel (ih, iw) scatters through
 * tap (i, j) onto output pixel (ih*s - p + i*d, iw*s - p + j*d).
 *
 * As in conv2d.c, each kernel is written as a gather so that one loop
 * iteration owns each element it writes: forward over (n, cout), input
 * gradient over (n, cin), weight gradient over weight elements. Sums run in
 * double in a fixed order, so results do not depend on the thread count. */
#include <stdio.h>

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

/* Input index i that reaches output index o through tap k, or -1 when none:
 * i*s - p + k*d == o with 0 <= i < n_in. */
static int64_t tap_source(int64_t o, int64_t k, int64_t s, int64_t p, int64_t d, int64_t n_in) {
  const int64_t t = o + p - k * d;
  if (t < 0 || t % s) return -1;
  return t / s < n_in ? t / s : -1;
}

static void tconv_forward(const sp_op_args *a) {
  tconv_geom g;
  geom_of_args(a, &g);
  const int64_t work = g.n * g.cin * g.h * g.w * g.cout_g * g.kh * g.kw;
  const float *x = a->in[0]->data, *w = a->param[0]->data;
  const float *b = a->n_param > 1 && a->param[1] ? a->param[1]->data : NULL;
  float *y = a->out->data;
  const int64_t khw = g.kh * g.kw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
  for (int64_t nc = 0; nc < g.n * g.cout; nc++) {
    const int64_t n = nc / g.cout, co = nc % g.cout, grp = co / g.cout_g, col = co % g.cout_g;
    float *yc = y + nc * g.ho * g.wo;
    for (int64_t oh = 0; oh < g.ho; oh++) {
      for (int64_t ow = 0; ow < g.wo; ow++) {
        double s = b ? b[co] : 0.0;
        for (int64_t cl = 0; cl < g.cin_g; cl++) {
          const int64_t c = grp * g.cin_g + cl;
          const float *xc = x + (n * g.cin + c) * g.h * g.w;
          const float *wc = w + (c * g.cout_g + col) * khw;
          for (int64_t i = 0; i < g.kh; i++) {
            const int64_t ih = tap_source(oh, i, g.sh, g.ph, g.dh, g.h);
            if (ih < 0) continue;
            for (int64_t j = 0; j < g.kw; j++) {
              const int64_t iw = tap_source(ow, j, g.sw, g.pw, g.dw, g.w);
              if (iw < 0) continue;
              s += (double)xc[ih * g.w + iw] * wc[i * g.kw + j];
            }
          }
        }
        yc[oh * g.wo + ow] = (float)s;
      }
    }
  }
}

static void tconv_backward(const sp_op_args *a) {
  tconv_geom g;
  geom_of_args(a, &g);
  const int64_t work = g.n * g.cin * g.h * g.w * g.cout_g * g.kh * g.kw;
  const float *x = a->in[0]->data, *w = a->param[0]->data, *dy = a->d_out->data;
  float *dx = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dw = a->d_param[0] ? a->d_param[0]->data : NULL;
  float *db = a->n_param > 1 && a->d_param[1] ? a->d_param[1]->data : NULL;
  const int64_t khw = g.kh * g.kw, hw_out = g.ho * g.wo;

  /* dx is a plain convolution of dy with the same weights. */
  if (dx) {
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
    for (int64_t nc = 0; nc < g.n * g.cin; nc++) {
      const int64_t n = nc / g.cin, c = nc % g.cin, grp = c / g.cin_g;
      float *dxc = dx + nc * g.h * g.w;
      for (int64_t ih = 0; ih < g.h; ih++) {
        for (int64_t iw = 0; iw < g.w; iw++) {
          double s = 0.0;
          for (int64_t col = 0; col < g.cout_g; col++) {
            const float *dyc = dy + (n * g.cout + grp * g.cout_g + col) * hw_out;
            const float *wc = w + (c * g.cout_g + col) * khw;
            for (int64_t i = 0; i < g.kh; i++) {
              const int64_t oh = ih * g.sh - g.ph + i * g.dh;
              if (oh < 0 || oh >= g.ho) continue;
              for (int64_t j = 0; j < g.kw; j++) {
                const int64_t ow = iw * g.sw - g.pw + j * g.dw;
                if (ow < 0 || ow >= g.wo) continue;
                s += (double)dyc[oh * g.wo + ow] * wc[i * g.kw + j];
              }
            }
          }
          dxc[ih * g.w + iw] += (float)s;
        }
      }
    }
  }

  if (dw) {
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

  if (db) {
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
    for (int64_t co = 0; co < g.cout; co++) {
      double s = 0.0;
      for (int64_t n = 0; n < g.n; n++) {
        const float *dyc = dy + (n * g.cout + co) * hw_out;
        for (int64_t k = 0; k < hw_out; k++) s += dyc[k];
      }
      db[co] += (float)s;
    }
  }
}

const sp_op_def sp_op_conv_transpose2d = {
    .name = "conv_transpose2d",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = tconv_infer,
    .saved_bytes = NULL,
    .forward = tconv_forward,
    .backward = tconv_backward,
};
