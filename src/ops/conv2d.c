/* 2-D convolution (PyTorch Conv2d semantics): stride, zero padding, dilation,
 * groups (depthwise when groups == Cin), optional bias.
 *
 * The shape rule lives here; the reference kernels are the direct loops of
 * conv_loops.c (shared with conv_transpose2d.c): deterministic, each sum in a
 * fixed order in double, whatever the thread count. */
#include <stdio.h>
#include <stdlib.h>

#include "ops/ops.h"

/* Attribute values of 0 for stride, dilation or groups are invalid in PyTorch;
 * reading them as 1 lets callers zero-initialise the struct and set only what
 * differs from the default. */
static int64_t or_one(int v) { return v == 0 ? 1 : v; }

static int geom_from(const sp_conv2d_attr *a, const sp_shape *x, const sp_shape *w, sp_conv_geom *g, char *err,
                     size_t errlen) {
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
    snprintf(err, errlen, "conv2d: weight must be [Cout,Cin/groups,kh,kw], got %s", sp_shape_str(w, ws, sizeof ws));
    return -1;
  }
  sp_shape_str(x, xs, sizeof xs);
  sp_shape_str(w, ws, sizeof ws);
  if (g->sh < 0 || g->sw < 0 || g->dh < 0 || g->dw < 0 || g->groups < 0 || g->ph < 0 || g->pw < 0) {
    snprintf(err, errlen, "conv2d: negative attribute (stride %lld,%lld pad %lld,%lld dilation %lld,%lld groups %lld)",
             (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw, (long long)g->dh, (long long)g->dw,
             (long long)g->groups);
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
             "conv2d: kernel %lldx%lld (dilation %lld,%lld) is larger than the padded input %lldx%lld (input %s, "
             "weight %s, padding %lld,%lld)",
             (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw, (long long)(g->h + 2 * g->ph),
             (long long)(g->w + 2 * g->pw), xs, ws, (long long)g->ph, (long long)g->pw);
    return -1;
  }
  if (g->n < 1 || g->cout < 1 || g->cin < 1) {
    snprintf(err, errlen, "conv2d: empty tensor (input %s, weight %s)", xs, ws);
    return -1;
  }
  return 0;
}

static int conv2d_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                        sp_shape *out, char *err, size_t errlen) {
  if (n_in != 1 || n_param < 1 || n_param > 2) {
    snprintf(err, errlen, "conv2d: expects 1 input and 1-2 params (weight, bias), got %d and %d", n_in, n_param);
    return -1;
  }
  sp_conv_geom g;
  if (geom_from(attr, &in[0], &param[0], &g, err, errlen)) return -1;
  if (n_param == 2 && (param[1].ndim != 1 || param[1].d[0] != g.cout)) {
    char bs[64], ws[64];
    snprintf(err, errlen, "conv2d: bias %s must be [%lld] to match weight %s", sp_shape_str(&param[1], bs, sizeof bs),
             (long long)g.cout, sp_shape_str(&param[0], ws, sizeof ws));
    return -1;
  }
  *out = sp_shape4(g.n, g.cout, g.ho, g.wo);
  return 0;
}

static void geom_of_args(const sp_op_args *a, sp_conv_geom *g) {
  char err[256];
  /* infer already validated these shapes; a failure here is a graph bug. */
  if (geom_from(a->attr, &a->in[0]->shape, &a->param[0]->shape, g, err, sizeof err)) sp_panic("%s", err);
}

static void conv2d_forward(const sp_op_args *a) {
  sp_conv_geom g;
  geom_of_args(a, &g);
  const float *b = a->n_param > 1 && a->param[1] ? a->param[1]->data : NULL;
  sp_conv_gather(&g, a->in[0]->data, a->param[0]->data, b, a->out->data, 0);
}

static void conv2d_backward(const sp_op_args *a) {
  sp_conv_geom g;
  geom_of_args(a, &g);
  if (a->d_in[0]) sp_conv_scatter(&g, a->d_out->data, a->param[0]->data, NULL, a->d_in[0]->data, 1);
  if (a->d_param[0]) sp_conv_weight_grad(&g, a->in[0]->data, a->d_out->data, a->d_param[0]->data);
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
