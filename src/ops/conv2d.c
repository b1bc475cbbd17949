/* 2-D convolution (PyTorch Conv2d semantics): stride, zero padding, dilation,
 * groups (depthwise when groups == Cin), optional bias.
 *
 * The reference kernels are direct loops, written so that every output element
 * is owned by exactly one loop iteration: forward parallelises over (n, cout),
 * the input gradient over (n, cin) as a gather (each input pixel collects the
 * outputs that read it), the weight gradient over weight elements. No thread
 * ever adds into an element another thread writes, and each sum runs in a fixed
 * order in double, so results do not depend on the thread count. */
#include <stdio.h>
#include <stdlib.h>

#include "ops/ops.h"

/* Below this many multiply-adds a parallel region costs more than it saves
 * (thread wake-up is tens of microseconds; worse on a loaded machine). */
#define PAR_MIN_WORK 32768

/* Attribute values of 0 for stride, dilation or groups are invalid in PyTorch;
 * reading them as 1 lets callers zero-initialise the struct and set only what
 * differs from the default. */
typedef struct {
  int64_t n, cin, h, w;        /* input */
  int64_t cout, cin_g, kh, kw; /* weight [cout, cin_g, kh, kw] */
  int64_t ho, wo;              /* output */
  int64_t sh, sw, ph, pw, dh, dw, groups;
} conv_geom;

static int64_t or_one(int v) { return v == 0 ? 1 : v; }

static int geom_from(const sp_conv2d_attr *a, const sp_shape *x, const sp_shape *w, conv_geom *g,
                     char *err, size_t errlen) {
  char xs[64], ws[64];
  sp_conv2d_attr def = {1, 1, 0, 0, 1, 1, 1};
  if (!a) a = &def;
  g->sh = or_one(a->stride_h), g->sw = or_one(a->stride_w);
  g->ph = a->pad_h, g->pw = a->pad_w;
  g->dh = or_one(a->dil_h), g->dw = or_one(a->dil_w);
  g->groups = or_one(a->groups);
  if (x->ndim != 4) {
    snprintf(err, errlen, "conv2d: input must be [N,C,H,W], got %s", sp_shape_str(x, xs, sizeof xs));
    return -1;
  }
  if (w->ndim != 4) {
    snprintf(err, errlen, "conv2d: weight must be [Cout,Cin/groups,kh,kw], got %s",
             sp_shape_str(w, ws, sizeof ws));
    return -1;
  }
  sp_shape_str(x, xs, sizeof xs);
  sp_shape_str(w, ws, sizeof ws);
  if (g->sh < 0 || g->sw < 0 || g->dh < 0 || g->dw < 0 || g->groups < 0 || g->ph < 0 || g->pw < 0) {
    snprintf(err, errlen,
             "conv2d: negative attribute (stride %lld,%lld pad %lld,%lld dilation %lld,%lld groups %lld)",
             (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw, (long long)g->dh,
             (long long)g->dw, (long long)g->groups);
    return -1;
  }
  g->n = x->d[0], g->cin = x->d[1], g->h = x->d[2], g->w = x->d[3];
  g->cout = w->d[0], g->cin_g = w->d[1], g->kh = w->d[2], g->kw = w->d[3];
  if (g->cin_g * g->groups != g->cin) {
    snprintf(err, errlen, "conv2d: input has %lld channels but weight expects %lld (weight %s, groups %lld)",
             (long long)g->cin, (long long)(g->cin_g * g->groups), ws, (long long)g->groups);
    return -1;
  }
  if (g->cout % g->groups) {
    snprintf(err, errlen, "conv2d: groups %lld must divide the %lld output channels (input %s, weight %s)",
             (long long)g->groups, (long long)g->cout, xs, ws);
    return -1;
  }
  g->ho = (g->h + 2 * g->ph - g->dh * (g->kh - 1) - 1) / g->sh + 1;
  g->wo = (g->w + 2 * g->pw - g->dw * (g->kw - 1) - 1) / g->sw + 1;
  /* The numerator can be negative, and C division truncates towards zero, so
   * test the effective extents directly rather than ho/wo. */
  if (g->kh < 1 || g->kw < 1 || g->h + 2 * g->ph < g->dh * (g->kh - 1) + 1 ||
      g->w + 2 * g->pw < g->dw * (g->kw - 1) + 1) {
    snprintf(err, errlen,
             "conv2d: kernel %lldx%lld (dilation %lld,%lld) is larger than the padded input %lldx%lld (input %s, weight %s, padding %lld,%lld)",
             (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw,
             (long long)(g->h + 2 * g->ph), (long long)(g->w + 2 * g->pw), xs, ws, (long long)g->ph,
             (long long)g->pw);
    return -1;
  }
  if (g->n < 1 || g->cout < 1 || g->cin < 1) {
    snprintf(err, errlen, "conv2d: empty tensor (input %s, weight %s)", xs, ws);
    return -1;
  }
  return 0;
}

static int conv2d_infer(const void *attr, int n_in, const sp_shape *in, int n_param,
                        const sp_shape *param, sp_shape *out, char *err, size_t errlen) {
  if (n_in != 1 || n_param < 1 || n_param > 2) {
    snprintf(err, errlen, "conv2d: expects 1 input and 1-2 params (weight, bias), got %d and %d", n_in,
             n_param);
    return -1;
  }
  conv_geom g;
  if (geom_from(attr, &in[0], &param[0], &g, err, errlen)) return -1;
  if (n_param == 2 && (param[1].ndim != 1 || param[1].d[0] != g.cout)) {
    char bs[64], ws[64];
    snprintf(err, errlen, "conv2d: bias %s must be [%lld] to match weight %s",
             sp_shape_str(&param[1], bs, sizeof bs), (long long)g.cout,
             sp_shape_str(&param[0], ws, sizeof ws));
    return -1;
  }
  *out = sp_shape4(g.n, g.cout, g.ho, g.wo);
  return 0;
}

static void geom_of_args(const sp_op_args *a, conv_geom *g) {
  char err[256];
  /* infer already validated these shapes; a failure here is a graph bug. */
  if (geom_from(a->attr, &a->in[0]->shape, &a->param[0]->shape, g, err, sizeof err))
    sp_panic("%s", err);
}

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

/* Forward and the input gradient walk (channel, tap) in the outer loops and
 * whole rows in the inner ones, accumulating into a per-thread double plane.
 * Each element still receives its terms in (channel, kh, kw) order, exactly
 * as the textbook per-element sum; a float*float product is exact in double,
 * so whether the compiler fuses multiply-add does not change any bit. */
static void conv2d_forward(const sp_op_args *a) {
  conv_geom g;
  geom_of_args(a, &g);
  const int64_t work = g.n * g.cout * g.ho * g.wo * g.cin_g * g.kh * g.kw;
  const float *x = a->in[0]->data, *w = a->param[0]->data;
  const float *b = a->n_param > 1 && a->param[1] ? a->param[1]->data : NULL;
  float *y = a->out->data;
  const int64_t cout_g = g.cout / g.groups, hw_out = g.ho * g.wo;
#pragma omp parallel if (work >= PAR_MIN_WORK)
  {
    double *acc = sp_xmalloc(sizeof(double) * (size_t)hw_out);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < g.n * g.cout; nc++) {
      const int64_t n = nc / g.cout, co = nc % g.cout, grp = co / cout_g;
      const float *xg = x + (n * g.cin + grp * g.cin_g) * g.h * g.w;
      const float *wc = w + co * g.cin_g * g.kh * g.kw;
      const double init = b ? b[co] : 0.0;
      for (int64_t k = 0; k < hw_out; k++) acc[k] = init;
      for (int64_t ci = 0; ci < g.cin_g; ci++) {
        for (int64_t i = 0; i < g.kh; i++) {
          for (int64_t j = 0; j < g.kw; j++) {
            const double wv = wc[(ci * g.kh + i) * g.kw + j];
            const int64_t off = j * g.dw - g.pw;
            int64_t ow0, ow1;
            tap_range(off, g.sw, g.w, g.wo, &ow0, &ow1);
            for (int64_t oh = 0; oh < g.ho; oh++) {
              const int64_t ih = oh * g.sh - g.ph + i * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              const float *xr = xg + (ci * g.h + ih) * g.w;
              double *ar = acc + oh * g.wo;
              for (int64_t ow = ow0; ow < ow1; ow++) ar[ow] += (double)xr[ow * g.sw + off] * wv;
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

/* dx[ih,iw] = sum over (cout in group, kh, kw) of dy[oh,ow] w, where
 * oh*s - p + k*d == ih: scattered from dy rows into one input plane that each
 * iteration alone owns. */
static void conv2d_backward_data(const sp_op_args *a, const conv_geom *gp, float *dx) {
  const conv_geom g = *gp;
  const int64_t work = g.n * g.cout * g.ho * g.wo * g.cin_g * g.kh * g.kw;
  const float *w = a->param[0]->data, *dy = a->d_out->data;
  const int64_t cout_g = g.cout / g.groups, hw_out = g.ho * g.wo, hw_in = g.h * g.w;
#pragma omp parallel if (work >= PAR_MIN_WORK)
  {
    double *acc = sp_xmalloc(sizeof(double) * (size_t)hw_in);
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < g.n * g.cin; nc++) {
      const int64_t n = nc / g.cin, c = nc % g.cin, grp = c / g.cin_g, ci = c % g.cin_g;
      for (int64_t k = 0; k < hw_in; k++) acc[k] = 0.0;
      for (int64_t col = 0; col < cout_g; col++) {
        const int64_t co = grp * cout_g + col;
        const float *dyc = dy + (n * g.cout + co) * hw_out;
        const float *wc = w + (co * g.cin_g + ci) * g.kh * g.kw;
        for (int64_t i = 0; i < g.kh; i++) {
          for (int64_t j = 0; j < g.kw; j++) {
            const double wv = wc[i * g.kw + j];
            const int64_t off = j * g.dw - g.pw;
            int64_t ow0, ow1;
            tap_range(off, g.sw, g.w, g.wo, &ow0, &ow1);
            for (int64_t oh = 0; oh < g.ho; oh++) {
              const int64_t ih = oh * g.sh - g.ph + i * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              double *ar = acc + ih * g.w;
              const float *dyr = dyc + oh * g.wo;
              for (int64_t ow = ow0; ow < ow1; ow++) ar[ow * g.sw + off] += (double)dyr[ow] * wv;
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

/* dw[co,ci,i,j] = sum over (n, oh, ow) of x[ih,iw] dy[oh,ow], one weight per
 * iteration. */
static void conv2d_backward_weight(const sp_op_args *a, const conv_geom *gp, float *dw) {
  const conv_geom g = *gp;
  const int64_t work = g.n * g.cout * g.ho * g.wo * g.cin_g * g.kh * g.kw;
  const float *x = a->in[0]->data, *dy = a->d_out->data;
  const int64_t cout_g = g.cout / g.groups, hw_out = g.ho * g.wo;
  const int64_t nw = g.cout * g.cin_g * g.kh * g.kw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN_WORK)
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

static void conv2d_backward(const sp_op_args *a) {
  conv_geom g;
  geom_of_args(a, &g);
  if (a->d_in[0]) conv2d_backward_data(a, &g, a->d_in[0]->data);
  if (a->d_param[0]) conv2d_backward_weight(a, &g, a->d_param[0]->data);
  if (a->n_param > 1 && a->d_param[1])
    sp_op_bias_grad_nchw(a->d_out->data, g.n, g.cout, g.ho * g.wo, a->d_param[1]->data);
}

const sp_op_def sp_op_conv2d = {
    .name = "conv2d",
    .flags = SP_OP_BWD_NEEDS_INPUT,
    .infer = conv2d_infer,
    .saved_bytes = NULL,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
};
