/* Transposed 2-D convolution (PyTorch ConvTranspose2d semantics): the adjoint
 * of conv2d with respect to its input. Input pixel (ih, iw) scatters through
 * tap (i, j) onto output pixel (ih*s - p + i*d, iw*s - p + j*d).
 *
 * The shape rule lives here; the kernels are conv2d's loops (conv_loops.c)
 * run on the direct convolution this one is the adjoint of, so both ops share
 * one deterministic, thread-count-independent implementation. */
#include <stdio.h>
#include <stdlib.h>

#include "ops/ops.h"

typedef struct {
  int64_t n, cin, h, w;        /* input */
  int64_t cout_g, kh, kw;      /* weight [cin, cout_g, kh, kw] */
  int64_t cout, cin_g, ho, wo; /* output */
  int64_t sh, sw, ph, pw, oph, opw, dh, dw, groups;
} tconv_geom;

/* 0 for stride, dilation or groups reads as 1 (their PyTorch default), so a
 * zero-initialised attr struct means a plain stride-1 transposed conv. */
static int64_t or_one(int v) { return v == 0 ? 1 : v; }

static int geom_from(const sp_conv_transpose2d_attr *a, const sp_shape *x, const sp_shape *w, tconv_geom *g, char *err,
                     size_t errlen) {
  char xs[64], ws[64];
  sp_conv_transpose2d_attr def = {1, 1, 0, 0, 0, 0, 1, 1, 1};
  if (!a) a = &def;
  g->sh = or_one(a->stride_h), g->sw = or_one(a->stride_w);
  g->ph = a->pad_h, g->pw = a->pad_w;
  g->oph = a->out_pad_h, g->opw = a->out_pad_w;
  g->dh = or_one(a->dil_h), g->dw = or_one(a->dil_w);
  g->groups = or_one(a->groups);
  if (x->ndim != 4) {
    snprintf(err, errlen, "conv_transpose2d: input must be [N,C,H,W], got %s", sp_shape_str(x, xs, sizeof xs));
    return -1;
  }
  if (w->ndim != 4) {
    snprintf(err, errlen, "conv_transpose2d: weight must be [Cin,Cout/groups,kh,kw], got %s",
             sp_shape_str(w, ws, sizeof ws));
    return -1;
  }
  sp_shape_str(x, xs, sizeof xs);
  sp_shape_str(w, ws, sizeof ws);
  if (g->sh < 0 || g->sw < 0 || g->dh < 0 || g->dw < 0 || g->groups < 0 || g->ph < 0 || g->pw < 0 || g->oph < 0 ||
      g->opw < 0) {
    snprintf(err, errlen,
             "conv_transpose2d: negative attribute (stride %lld,%lld pad %lld,%lld "
             "output_padding %lld,%lld dilation %lld,%lld groups %lld)",
             (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw, (long long)g->oph,
             (long long)g->opw, (long long)g->dh, (long long)g->dw, (long long)g->groups);
    return -1;
  }
  /* PyTorch's rule: output padding only resolves the ambiguity of a strided
   * or dilated shape, so it must stay below one of them. */
  if ((g->oph >= g->sh && g->oph >= g->dh) || (g->opw >= g->sw && g->opw >= g->dw)) {
    snprintf(err, errlen,
             "conv_transpose2d: output_padding %lld,%lld must be smaller than either "
             "stride %lld,%lld or dilation %lld,%lld",
             (long long)g->oph, (long long)g->opw, (long long)g->sh, (long long)g->sw, (long long)g->dh,
             (long long)g->dw);
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
    snprintf(err, errlen,
             "conv_transpose2d: output would be %lldx%lld: padding %lld,%lld is too large "
             "(input %s, weight %s)",
             (long long)g->ho, (long long)g->wo, (long long)g->ph, (long long)g->pw, xs, ws);
    return -1;
  }
  return 0;
}

static int tconv_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                       sp_shape *out, char *err, size_t errlen) {
  if (n_in != 1 || n_param < 1 || n_param > 2) {
    snprintf(err, errlen, "conv_transpose2d: expects 1 input and 1-2 params (weight, bias), got %d and %d", n_in,
             n_param);
    return -1;
  }
  tconv_geom g;
  if (geom_from(attr, &in[0], &param[0], &g, err, errlen)) return -1;
  if (n_param == 2 && (param[1].ndim != 1 || param[1].d[0] != g.cout)) {
    char bs[64], ws[64];
    snprintf(err, errlen, "conv_transpose2d: bias %s must be [%lld] to match weight %s and groups %lld",
             sp_shape_str(&param[1], bs, sizeof bs), (long long)g.cout, sp_shape_str(&param[0], ws, sizeof ws),
             (long long)g.groups);
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

/* The direct convolution this one is the adjoint of: its input is this
 * one's output, its output this one's input, and this one's weight
 * [cin, cout/groups, kh, kw] is its [cout, cin/groups, kh, kw]. */
static sp_conv_geom as_direct(const tconv_geom *t) {
  return (sp_conv_geom){.n = t->n,
                        .cin = t->cout,
                        .h = t->ho,
                        .w = t->wo,
                        .cout = t->cin,
                        .cin_g = t->cout_g,
                        .kh = t->kh,
                        .kw = t->kw,
                        .ho = t->h,
                        .wo = t->w,
                        .sh = t->sh,
                        .sw = t->sw,
                        .ph = t->ph,
                        .pw = t->pw,
                        .dh = t->dh,
                        .dw = t->dw,
                        .groups = t->groups};
}

/* Forward spreads each input pixel through the taps: the direct
 * convolution's input gradient. */
static void tconv_forward(const sp_op_args *a) {
  tconv_geom g;
  geom_of_args(a, &g);
  const sp_conv_geom d = as_direct(&g);
  const float *b = a->n_param > 1 && a->param[1] ? a->param[1]->data : NULL;
  sp_conv_scatter(&d, a->in[0]->data, a->param[0]->data, b, a->out->data, 0);
}

static void tconv_backward(const sp_op_args *a) {
  tconv_geom g;
  geom_of_args(a, &g);
  const sp_conv_geom d = as_direct(&g);
  /* dx is the direct convolution of dy; dW pairs the same terms with x and
   * dy in each other's places. */
  if (a->d_in[0]) sp_conv_gather(&d, a->d_out->data, a->param[0]->data, NULL, a->d_in[0]->data, 1);
  if (a->d_param[0]) sp_conv_weight_grad(&d, a->d_out->data, a->in[0]->data, a->d_param[0]->data);
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
