/* batchnorm in the input's layout (output and gradients share it): our own
 * kernels (bnorm_kernels.c) for every layout they walk (plain, nChw8c,
 * nChw16c, channels-last, [N, C]; f32 and bf16), oneDNN for any other.
 *
 * Training computes batch statistics (biased variance, as PyTorch) and saves
 * mean and variance for backward; the running buffers move here, with the
 * unbiased variance, since oneDNN does not keep running statistics. Eval with
 * running buffers uses them as global statistics. Scale and shift are the
 * graph's gamma and beta (f32) directly.
 *
 * When the output's only consumer is a relu, the node absorbs it (oneDNN's
 * fused BN + ReLU; in training the ReLU mask is a workspace kept in saved),
 * so the activation is written and read once instead of three times.
 * (Our kernels keep no mask: backward recomputes the sign from the input.)
 * With our kernels it also absorbs an add right after it whose other input
 * is ready (in the same layout) and the relu after that add: a ResNet
 * block's last batch norm, residual add and ReLU in one node
 * (cpu_bn_residual; the mask, a bit per value where the lanes are a
 * multiple of 8, else a byte, in saved after the statistics). The add's
 * other input and its gradient are the absorbed add's
 * (sp_op_args.consumer). */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/bf16.h"
#include "ops/ops.h"

/* Tests set it to run oneDNN's batch norm where our kernels would run. */
int cpu_bnorm_use_onednn = 0;

typedef struct {
  cpu_node base;
  int own; /* our kernels (geom) instead of oneDNN's primitives */
  cpu_bn_geom geom;
  float eps;
  char *fs, *bs; /* bound scratch (own kernels) */
  int affine, batch_stats, update_running, run_backward, need_dparam, fused_relu, has_ws;
  int fused_add;         /* add + relu absorbed: y = relu(bn(x) + consumer's in[other]) */
  int other;             /* that input's index in the add */
  int pair;              /* and the batch norm computing that input adopted (bnorm_pair.c) */
  int adopted;           /* this node was adopted: its forward computes the statistics alone, no backward */
  const cpu_node *given; /* the node before it computes its batch statistics (cpu_node.stats) */
  int fused_cat;         /* relu + concat absorbed: y is the first part of the concat's output, the skip copied after */
  int64_t skip_c;        /* the concat's other input's channels */
  size_t mask_off;       /* in saved (training) */
  int64_t c, m;
  float momentum;
  dnnl_memory_desc_t md, stat_md, ws_md;
  size_t ws_off;
  dnnl_primitive_desc_t fwd_pd, bwd_pd, acc_pd;
  dnnl_primitive_t fwd, bwd, acc;
  size_t dsrc_off, dscale_off, dshift_off;
  cpu_exec f, b, b_out;
  float *mean, *var, *dscale, *dshift;
} bn_node;

static const float *param_or_null(const sp_op_args *a, int k) {
  return a->n_param == 2 && a->param[k] ? a->param[k]->data : NULL;
}

/* The absorbed add's other input, its gradient (NULL when not wanted;
 * written when this is its first writer, else added into) and the mask. */
static cpu_bn_residual residual_of(const bn_node *s, const sp_op_args *a) {
  const sp_op_args *add = a->consumer;
  const sp_tensor *dr = s->run_backward ? add->d_in[s->other] : NULL;
  return (cpu_bn_residual){add->in[s->other]->data,
                           s->run_backward ? (uint8_t *)a->saved + s->mask_off : NULL,
                           dr ? dr->data : NULL,
                           !((add->d_in_fresh >> s->other) & 1u),
                           0,
                           NULL};
}

/* The adopted batch norm as the kernels read it (a->adopted its args). */
static cpu_bn_partner partner_of(const sp_op_args *a) {
  const sp_op_args *b = a->adopted;
  const bn_node *q = b->impl;
  const int dparam = q->need_dparam;
  return (cpu_bn_partner){b->in[0]->data,
                          q->mean,
                          q->var,
                          param_or_null(b, 0),
                          param_or_null(b, 1),
                          q->eps,
                          q->batch_stats,
                          q->run_backward && b->d_in[0] ? b->d_in[0]->data : NULL,
                          !(b->d_in_fresh & 1u),
                          dparam && b->d_param[0] ? b->d_param[0]->data : NULL,
                          dparam && b->d_param[1] ? b->d_param[1]->data : NULL};
}

/* The absorbed concat's other input (the skip) into, or its gradient out of,
 * the rest of each image of the concat's output: whole channel blocks, one
 * run per image. Backward writes the skip's gradient where the concat was
 * its first writer, else adds into it. */
static void skip_copy(const bn_node *s, const sp_op_args *a, int backward) {
  const sp_op_args *cat = a->chain[1];
  const int64_t hw = s->geom.hw, mine = s->c * hw, skip = s->skip_c * hw;
  const size_t es = s->geom.bf16 ? 2 : 4;
  char *all = backward ? (char *)a->d_out->data : (char *)a->out->data;
  char *part = backward ? (cat->d_in[1] ? (char *)cat->d_in[1]->data : NULL) : (char *)cat->in[1]->data;
  if (!part) return;
  const int add = backward && !((cat->d_in_fresh >> 1) & 1u);
#pragma omp parallel for num_threads(s->geom.threads) schedule(static)
  for (int64_t img = 0; img < s->geom.n; img++) {
    char *whole = all + (size_t)(img * (mine + skip) + mine) * es, *own = part + (size_t)(img * skip) * es;
    if (!backward)
      memcpy(whole, own, (size_t)skip * es);
    else if (!add)
      memcpy(own, whole, (size_t)skip * es);
    else if (s->geom.bf16)
      sp_bf16_add((uint16_t *)own, (const uint16_t *)whole, skip);
    else
      cpu_add_f32((float *)own, (const float *)whole, (size_t)skip);
  }
}

static void bn_forward(cpu_node *n, const sp_op_args *a) {
  bn_node *s = (bn_node *)n;
  cpu_bn_residual res = s->fused_add ? residual_of(s, a) : (cpu_bn_residual){0};
  const cpu_bn_partner q = s->pair ? partner_of(a) : (cpu_bn_partner){0};
  if (s->pair) res.partner = &q;
  int batch = s->batch_stats;
  if (s->given) { /* statistics computed: no pass of their own, the output from them as from running ones */
    const float *st = s->given->stats;
    memcpy(s->mean, st, sizeof(float) * (size_t)s->c);
    memcpy(s->var, st + s->c, sizeof(float) * (size_t)s->c);
    batch = 0;
  }
  if (s->own && !(s->given && s->adopted))
    cpu_bn_forward(&s->geom, a->in[0]->data, s->adopted ? NULL : a->out->data, s->mean, s->var, param_or_null(a, 0),
                   param_or_null(a, 1), s->eps, batch, s->fused_relu || s->fused_add, s->fused_add ? &res : NULL,
                   s->fs);
  else if (!s->own)
    cpu_exec_run(&s->f);
  if (s->fused_cat) skip_copy(s, a, 0);
  if (!s->update_running) return;
  float *rm = a->state[0]->data, *rv = a->state[1]->data, mom = s->momentum;
  double unbias = s->m > 1 ? (double)s->m / (double)(s->m - 1) : 1.0;
  for (int64_t c = 0; c < s->c; c++) {
    rm[c] = (1 - mom) * rm[c] + mom * s->mean[c];
    rv[c] = (float)((1 - mom) * rv[c] + mom * (s->var[c] * unbias));
  }
}

static void bn_backward(cpu_node *n, const sp_op_args *a) {
  bn_node *s = (bn_node *)n;
  if (s->adopted) return; /* its adopter's backward did it (the plan skips it too) */
  if (s->own) {
    float *dg = s->need_dparam && a->d_param[0] ? a->d_param[0]->data : NULL;
    float *db = s->need_dparam && a->d_param[1] ? a->d_param[1]->data : NULL;
    cpu_bn_residual res = s->fused_add ? residual_of(s, a) : (cpu_bn_residual){0};
    const cpu_bn_partner q = s->pair ? partner_of(a) : (cpu_bn_partner){0};
    if (s->pair) res.partner = &q;
    cpu_bn_backward(&s->geom, a->in[0]->data, a->d_out->data, a->d_in[0] ? a->d_in[0]->data : NULL,
                    !(a->d_in_fresh & 1u), s->mean, s->var, param_or_null(a, 0), param_or_null(a, 1), s->eps,
                    s->batch_stats, s->fused_relu || s->fused_add, s->fused_add ? &res : NULL, dg, db, s->bs);
    if (s->fused_cat) skip_copy(s, a, 1);
    return;
  }
  cpu_exec_run(&s->b);
  cpu_exec_run(&s->b_out);
  if (s->need_dparam) {
    if (a->d_param[0]) cpu_add_f32(a->d_param[0]->data, s->dscale, (size_t)s->c);
    if (a->d_param[1]) cpu_add_f32(a->d_param[1]->data, s->dshift, (size_t)s->c);
  }
}

static int bn_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  bn_node *s = (bn_node *)n;
  if (s->fused_add && !a->consumer) return sp_error_set("batchnorm: the absorbed add is not wired");
  if (s->batch_stats) {
    /* Training: statistics go to saved (read by backward); otherwise scratch. */
    size_t pad = s->own ? cpu_bn_scratch_bytes(&s->geom) : cpu_scratchpad_bytes(s->fwd_pd);
    char *stats = s->run_backward ? (char *)a->saved : fs + pad + 64;
    stats = (char *)(((uintptr_t)stats + 63) & ~(uintptr_t)63);
    s->mean = (float *)stats;
    s->var = s->mean + ((s->c + 15) & ~15);
  } else {
    s->mean = a->state[0]->data;
    s->var = a->state[1]->data;
  }
  if (s->own) {
    s->fs = fs, s->bs = bs;
    return 0;
  }
  cpu_exec_init(&s->f, s->fwd);
  if ((s->has_ws && cpu_exec_arg(&s->f, n, DNNL_ARG_WORKSPACE, &s->ws_md, (char *)a->saved + s->ws_off)) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->md, a->in[0]->data) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->md, a->out->data) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_MEAN, &s->stat_md, s->mean) ||
      cpu_exec_arg(&s->f, n, DNNL_ARG_VARIANCE, &s->stat_md, s->var) ||
      (s->affine && (cpu_exec_arg(&s->f, n, DNNL_ARG_SCALE, &s->stat_md, a->param[0]->data) ||
                     cpu_exec_arg(&s->f, n, DNNL_ARG_SHIFT, &s->stat_md, a->param[1]->data))) ||
      cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs))
    return -1;
  if (!s->run_backward) return 0;
  int fresh = a->d_in[0] && (a->d_in_fresh & 1u);
  void *dsrc = fresh ? a->d_in[0]->data : bs + s->dsrc_off;
  s->dscale = (float *)(bs + s->dscale_off);
  s->dshift = (float *)(bs + s->dshift_off);
  cpu_exec_init(&s->b, s->bwd);
  if ((s->has_ws && cpu_exec_arg(&s->b, n, DNNL_ARG_WORKSPACE, &s->ws_md, (char *)a->saved + s->ws_off)) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_SRC, &s->md, a->in[0]->data) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_DST, &s->md, a->d_out->data) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_MEAN, &s->stat_md, s->mean) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_VARIANCE, &s->stat_md, s->var) ||
      cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_SRC, &s->md, dsrc) ||
      /* oneDNN 2.6 checks that SHIFT is passed to backward too (it is unused). */
      (s->affine && (cpu_exec_arg(&s->b, n, DNNL_ARG_SCALE, &s->stat_md, a->param[0]->data) ||
                     cpu_exec_arg(&s->b, n, DNNL_ARG_SHIFT, &s->stat_md, a->param[1]->data))) ||
      (s->need_dparam && (cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_SCALE, &s->stat_md, s->dscale) ||
                          cpu_exec_arg(&s->b, n, DNNL_ARG_DIFF_SHIFT, &s->stat_md, s->dshift))) ||
      cpu_exec_scratchpad(&s->b, n, s->bwd_pd, bs))
    return -1;
  if (fresh || !a->d_in[0])
    cpu_exec_init(&s->b_out, NULL);
  else if (cpu_bind_reorder(&s->b_out, n, s->acc_pd, s->acc, dsrc, a->d_in[0]->data, bs))
    return -1;
  return 0;
}

static const cpu_vt bn_vt = {bn_forward, bn_backward, bn_bind, NULL};

/* An add right after this node, whose other input is ready in this node's
 * layout, then a relu: absorbed (our kernels only). Not in a training plan
 * where this node's backward does not run (its parameters frozen, no
 * gradient before it): the add's would still be due, for the other input. */
int cpu_bnorm_fuse_add = 1;
static int residual_fits(const sp_op_prep *p, const dnnl_memory_desc_t *md) {
  if (!cpu_bnorm_fuse_add || p->consumer[0].op != &sp_op_add || p->consumer[0].n_in != 2 || p->consumer[0].out_plain ||
      p->consumer[1].op != &sp_op_relu || p->consumer[1].out_plain || (p->training && !p->run_backward))
    return 0;
  dnnl_memory_desc_t other;
  if (p->consumer[0].other_layout)
    other = *(const dnnl_memory_desc_t *)p->consumer[0].other_layout;
  else if (cpu_md_plain(&other, &p->consumer[0].other_shape, cpu_dt(p->consumer[0].other_dtype)))
    return 0;
  return cpu_md_equal(&other, md);
}

/* The batch norm computing the absorbed add's other input, adopted
 * (sp_op_prep.adopt_other): our kernels on the same layout, no ReLU or add
 * of its own, its statistics where this node can read them (saved in
 * training, the running ones otherwise; not its forward scratch), and a
 * geometry the pair kernels walk. Plans without backward take it too
 * (evaluation on running statistics). */
int cpu_bnorm_fuse_pair = 1;
static bn_node *partner_fits(const sp_op_prep *p, const bn_node *s) {
  const sp_op_consumer *c = &p->consumer[0];
  if (!cpu_bnorm_fuse_pair || !s->fused_add || c->other_op != &sp_op_batchnorm || !c->other_state ||
      ((const cpu_node *)c->other_state)->vt != &bn_vt || !cpu_bn_pair_walks(&s->geom))
    return NULL;
  bn_node *q = c->other_state;
  if (!q->own || q->fused_relu || q->fused_add || q->pair || q->adopted || q->run_backward != s->run_backward ||
      (q->batch_stats && !q->run_backward) || !cpu_md_equal(&q->md, &s->md))
    return NULL;
  return q;
}

/* A ReLU, then a concat (along channels) whose first input that is and
 * whose other (U-Net's skip) is in this node's channel blocks, each part
 * whole blocks: the normalised values are written into the concat's output
 * (the kernels' y_img_extra) and the skip copied after them per image;
 * backward reads dy from the concat's gradient and copies the skip's part
 * out. Apart, the concat read and wrote this node's output once more each
 * way (ResUNet-50's decoder: 96 MB of up-layer output a step at batch 16,
 * f32). Our kernels, blocked layouts only (channels-last parts would
 * interleave per position). */
int cpu_bnorm_fuse_concat = 1;
static int concat_fits(const sp_op_prep *p, bn_node *s) {
  const sp_op_consumer *c = &p->consumer[1];
  const sp_shape *x = &p->in_shape[0], *o = &c->other_shape;
  const int64_t lanes = s->geom.lanes;
  /* Not in a training plan where this node's backward does not run: the
   * concat's would still be due, for the skip (as for the residual add). */
  if (!cpu_bnorm_fuse_concat || !s->fused_relu || s->fused_add || (p->training && !p->run_backward) ||
      (lanes != 8 && lanes != 16) || x->ndim != 4 || s->c % lanes || c->op != &sp_op_concat || c->n_in != 2 ||
      c->other != 1 || c->out_plain || !c->other_layout || o->ndim != 4 || o->d[0] != x->d[0] || o->d[2] != x->d[2] ||
      o->d[3] != x->d[3] || o->d[1] % lanes || c->out_shape.d[1] != x->d[1] + o->d[1])
    return 0;
  const dnnl_format_tag_t tag = lanes == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
  const dnnl_data_type_t dt = s->md.data_type;
  const dnnl_dims_t xd = {x->d[0], x->d[1], x->d[2], x->d[3]}, sd = {o->d[0], o->d[1], o->d[2], o->d[3]};
  const dnnl_dims_t cd = {x->d[0], x->d[1] + o->d[1], x->d[2], x->d[3]};
  dnnl_memory_desc_t mine, skip, whole;
  if (dnnl_memory_desc_init_by_tag(&mine, 4, xd, dt, tag) != dnnl_success || !cpu_md_equal(&mine, &s->md) ||
      dnnl_memory_desc_init_by_tag(&skip, 4, sd, dt, tag) != dnnl_success || !cpu_md_equal(&skip, c->other_layout) ||
      dnnl_memory_desc_init_by_tag(&whole, 4, cd, dt, tag) != dnnl_success)
    return 0;
  s->skip_c = o->d[1];
  s->geom.y_img_extra = s->skip_c * s->geom.hw;
  s->base.out_md = whole;
  return 1;
}

/* Our kernels: statistics in saved (training) or forward scratch, as below;
 * scratch for the per-thread sums. */
static int own_setup(sp_op_prep *p, bn_node *s) {
  s->own = 1;
  s->base.out_md = s->md;
  const size_t stats = 2 * sizeof(float) * (size_t)((s->c + 15) & ~15) + 64;
  size_t fwd = cpu_bn_scratch_bytes(&s->geom), saved = s->batch_stats && p->run_backward ? stats : 0;
  if (s->batch_stats && !p->run_backward) fwd += 64 + stats;
  if (s->fused_add && p->run_backward) s->mask_off = cpu_take(&saved, cpu_bn_mask_bytes(&s->geom));
  p->saved_bytes = saved;
  p->fwd_scratch_bytes = fwd;
  p->bwd_scratch_bytes = p->run_backward ? cpu_bn_bwd_scratch_bytes(&s->geom) : 0;
  s->fused_cat = concat_fits(p, s);
  p->absorb_consumer = s->fused_add || s->fused_cat ? 2 : s->fused_relu;
  bn_node *q = partner_fits(p, s);
  if (q) q->adopted = 1, s->pair = 1, p->adopt_other = 1;
  /* Batch statistics from the convolution before it, where it offers them
   * (channels-last, where its columns are the channels). */
  if (s->batch_stats && p->training && s->geom.lanes == s->geom.c && s->geom.blocks == 1 &&
      (p->in0_op == &sp_op_conv2d || p->in0_op == &sp_op_conv_transpose2d) && cpu_node_take_stats(p->in0_state))
    s->given = p->in0_state;
  cpu_report(p, &s->base);
  return 0;
}

static int bn_setup(sp_op_prep *p, bn_node *s) {
  const sp_batchnorm_attr *at = p->attr;
  float eps = at ? at->eps : 1e-5f;
  s->momentum = at ? at->momentum : 0.1f;
  s->affine = p->n_param == 2;
  s->batch_stats = p->training || p->n_state == 0;
  s->update_running = p->training && p->n_state == 2;
  s->run_backward = p->run_backward;
  s->need_dparam = p->run_backward && s->affine && (p->param_grad[0] || p->param_grad[1]);
  s->c = p->in_shape[0].d[1];
  s->m = sp_shape_numel(&p->in_shape[0]) / s->c;
  sp_shape cs = sp_shape1(s->c);
  if (cpu_md_input(&s->md, p, 0) || cpu_md_plain(&s->stat_md, &cs, dnnl_f32)) return -1;
  if (p->out_plain && !(cpu_md_is_plain(&s->md) && s->md.data_type == dnnl_f32))
    return sp_error_set("a blocked batchnorm cannot write a plain graph output");
  s->fused_relu = p->consumer[0].op == &sp_op_relu && !p->consumer[0].out_plain;
  s->eps = eps;
  if (!cpu_bnorm_use_onednn && cpu_bn_geom_of(&s->geom, &s->md, &p->in_shape[0]) == 0) {
    const cpu_bn_geom *g = &s->geom;
    s->geom.stream = g->n * g->img_stride * (g->bf16 ? 2 : 4) >= cpu_stream_threshold_plan(p->run_backward);
    s->fused_add = residual_fits(p, &s->md);
    s->other = p->consumer[0].other;
    return own_setup(p, s);
  }
  unsigned flags = (s->affine ? dnnl_use_scale | dnnl_use_shift : 0) | (s->batch_stats ? 0 : dnnl_use_global_stats) |
                   (s->fused_relu ? dnnl_fuse_norm_relu : 0);
  dnnl_prop_kind_t prop = p->run_backward ? dnnl_forward_training : dnnl_forward_inference;
  dnnl_batch_normalization_desc_t d;
  DNNL_TRY(dnnl_batch_normalization_forward_desc_init(&d, prop, &s->md, eps, flags));
  if (cpu_make(&s->base, &d, NULL, NULL, &s->fwd_pd, &s->fwd)) return -1;
  s->base.out_md = s->md;
  size_t stats = 2 * sizeof(float) * (size_t)((s->c + 15) & ~15) + 64;
  size_t fwd = cpu_scratchpad_bytes(s->fwd_pd), bwd = 0;
  if (s->batch_stats && !p->run_backward) fwd += 64 + stats; /* statistics in scratch after the pad */
  size_t saved = s->batch_stats && p->run_backward ? stats : 0;
  const dnnl_memory_desc_t *ws = cpu_pd_md(s->fwd_pd, dnnl_query_workspace_md, 0);
  s->has_ws = ws && cpu_md_bytes(ws) > 0;
  if (s->has_ws) {
    s->ws_md = *ws;
    s->ws_off = cpu_take(&saved, cpu_md_bytes(ws));
  }
  p->saved_bytes = saved;
  p->absorb_consumer = s->fused_relu;
  if (p->run_backward) {
    DNNL_TRY(dnnl_batch_normalization_backward_desc_init(&d, s->need_dparam ? dnnl_backward : dnnl_backward_data,
                                                         &s->md, &s->md, eps, flags));
    if (cpu_make_backward_acc(&s->base, &d, s->fwd_pd, &s->md, &s->bwd_pd, &s->bwd, &s->acc_pd, &s->acc, &bwd))
      return -1;
    s->dsrc_off = cpu_take(&bwd, cpu_md_bytes(&s->md));
    s->dscale_off = cpu_take(&bwd, sizeof(float) * (size_t)s->c);
    s->dshift_off = cpu_take(&bwd, sizeof(float) * (size_t)s->c);
  }
  return cpu_report_scratch(p, &s->base, fwd, bwd);
}

void cpu_bn_fold(const sp_op_args *bn, int64_t c, float b, float *scale, float *shift) {
  const sp_batchnorm_attr *at = bn->attr;
  const float *gamma = bn->n_param == 2 && bn->param[0] ? bn->param[0]->data : NULL;
  const float *beta = bn->n_param == 2 && bn->param[1] ? bn->param[1]->data : NULL;
  const float *mean = bn->state[0]->data, *var = bn->state[1]->data;
  *scale = (gamma ? gamma[c] : 1.0f) / sqrtf(var[c] + at->eps);
  *shift = (b - mean[c]) * *scale + (beta ? beta[c] : 0.0f);
}

int cpu_bnorm_streams(const void *state) {
  const bn_node *s = state;
  return s->base.vt == &bn_vt && s->own && s->geom.stream;
}

int cpu_bnorm_prepare(sp_op_prep *p) {
  bn_node *s = cpu_node_new(sizeof *s, &bn_vt);
  if (bn_setup(p, s) != 0) return cpu_fallback(p, &s->base);
  return 0;
}
#endif
