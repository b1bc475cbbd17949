/* BlurPool in the layout the convolutions around it use (see ops/blurpool.c:
 * a binomial filter per channel with reflect padding, then subsampling).
 *
 * oneDNN's depthwise convolution pads with zeros, not by reflection, so this
 * is our own kernel. Before it, BlurPool ran the reference kernel behind
 * reorders to plain and back (forward and backward): 130 ms of a ResUNet-50
 * training step. Here the B channels of a block ([N, C/B, H, W, B], B = 16
 * or 8; B = C for channels-last, 1 for plain) are one vector, and the
 * reflected row and column of each tap are tabulated once per plan. Backward
 * scatters into the input gradient inside one (image, block) unit, so no two
 * threads touch the same cells; a fresh gradient is zeroed first. Padding
 * lanes pass through (zero in, zero out), as every producer keeps them zero. */
#ifdef SPRY_HAVE_DNNL
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "ops/ops.h"

enum { MAX_F = 7 };

typedef struct {
  cpu_node base;
  int64_t n, h, w, ho, wo;
  int64_t lanes, blocks;              /* as in softargmax.c */
  int64_t pos_stride, in_block, out_block, in_image, out_image;
  int f;
  float taps[MAX_F];
  int32_t *row, *col; /* row[oh * f + i]: the input row tap i of output row oh reads (reflected); col alike */
} bp_node;

static void bp_release(cpu_node *n) {
  bp_node *s = (bp_node *)n;
  free(s->row);
  free(s->col);
}

static void bp_forward(cpu_node *n, const sp_op_args *a) {
  const bp_node *s = (const bp_node *)n;
  const float *x = a->in[0]->data;
  float *y = a->out->data;
  const int64_t L = s->lanes, S = s->pos_stride, units = s->n * s->blocks;
  const int f = s->f;
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; u++) {
    const int64_t img = u / s->blocks, blk = u % s->blocks;
    const float *xb = x + img * s->in_image + blk * s->in_block;
    float *yb = y + img * s->out_image + blk * s->out_block;
    for (int64_t oh = 0; oh < s->ho; oh++)
      for (int64_t ow = 0; ow < s->wo; ow++) {
        float *yp = yb + (oh * s->wo + ow) * S;
#pragma omp simd
        for (int64_t l = 0; l < L; l++) yp[l] = 0.0f;
        for (int i = 0; i < f; i++) {
          const float *xr = xb + (int64_t)s->row[oh * f + i] * s->w * S;
          for (int j = 0; j < f; j++) {
            const float t = s->taps[i] * s->taps[j];
            const float *xp = xr + (int64_t)s->col[ow * f + j] * S;
#pragma omp simd
            for (int64_t l = 0; l < L; l++) yp[l] += t * xp[l];
          }
        }
      }
  }
}

static void bp_backward(cpu_node *n, const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const bp_node *s = (const bp_node *)n;
  const float *dy = a->d_out->data;
  float *dx = a->d_in[0]->data;
  const int64_t L = s->lanes, S = s->pos_stride, units = s->n * s->blocks;
  const int f = s->f, fresh = a->d_in_fresh & 1u;
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; u++) {
    const int64_t img = u / s->blocks, blk = u % s->blocks;
    const float *gb = dy + img * s->out_image + blk * s->out_block;
    float *db = dx + img * s->in_image + blk * s->in_block;
    if (fresh) memset(db, 0, sizeof(float) * (size_t)(s->h * s->w * S)); /* the unit's block: contiguous */
    for (int64_t oh = 0; oh < s->ho; oh++)
      for (int64_t ow = 0; ow < s->wo; ow++) {
        const float *gp = gb + (oh * s->wo + ow) * S;
        for (int i = 0; i < f; i++) {
          float *dr = db + (int64_t)s->row[oh * f + i] * s->w * S;
          for (int j = 0; j < f; j++) {
            const float t = s->taps[i] * s->taps[j];
            float *dp = dr + (int64_t)s->col[ow * f + j] * S;
#pragma omp simd
            for (int64_t l = 0; l < L; l++) dp[l] += t * gp[l];
          }
        }
      }
  }
}

static const cpu_vt bp_vt = {bp_forward, bp_backward, NULL, bp_release};

/* Reflect without repeating the edge (F.pad mode="reflect"). */
static int32_t reflect(int64_t i, int64_t n) { return (int32_t)(i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i); }

int cpu_blurpool_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t md;
  const sp_blurpool_attr *at = p->attr;
  if (p->in_shape[0].ndim != 4 || at->filter_size > MAX_F || cpu_md_input(&md, p, 0) != 0 ||
      md.data_type != dnnl_f32)
    return cpu_adapter_prepare(p);
  const int lanes = cpu_md_lanes(&md);
  const int64_t c = p->in_shape[0].d[1];
  if (!lanes || (p->out_plain && lanes != 1)) return cpu_adapter_prepare(p);
  bp_node *s = cpu_node_new(sizeof *s, &bp_vt);
  s->n = p->in_shape[0].d[0], s->h = p->in_shape[0].d[2], s->w = p->in_shape[0].d[3];
  s->ho = p->out_shape.d[2], s->wo = p->out_shape.d[3];
  s->f = at->filter_size;
  /* Binomial taps C(f-1, k) / 2^(f-1): exact in float for f <= 7. */
  for (int t = 0; t < s->f; t++) {
    double b = 1.0;
    for (int j = 1; j <= t; j++) b = b * (s->f - j) / j;
    s->taps[t] = (float)(b / (double)(1 << (s->f - 1)));
  }
  if (lanes == CPU_LANES_NHWC) {
    s->lanes = c, s->blocks = 1, s->pos_stride = c, s->in_block = s->out_block = 0;
  } else {
    s->lanes = lanes, s->blocks = (c + s->lanes - 1) / s->lanes, s->pos_stride = s->lanes;
    s->in_block = s->h * s->w * s->lanes, s->out_block = s->ho * s->wo * s->lanes;
  }
  s->in_image = s->blocks * s->lanes * s->h * s->w;
  s->out_image = s->blocks * s->lanes * s->ho * s->wo;
  const int pad = (s->f - 1) / 2, stride = at->stride;
  s->row = sp_xmalloc(sizeof(int32_t) * (size_t)(s->ho * s->f));
  s->col = sp_xmalloc(sizeof(int32_t) * (size_t)(s->wo * s->f));
  for (int64_t o = 0; o < s->ho; o++)
    for (int i = 0; i < s->f; i++) s->row[o * s->f + i] = reflect(o * stride - pad + i, s->h);
  for (int64_t o = 0; o < s->wo; o++)
    for (int j = 0; j < s->f; j++) s->col[o * s->f + j] = reflect(o * stride - pad + j, s->w);
  dnnl_dims_t od = {p->out_shape.d[0], p->out_shape.d[1], p->out_shape.d[2], p->out_shape.d[3]};
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, dnnl_f32, cpu_lanes_tag(lanes)) != dnnl_success) {
    cpu_node_free(&s->base);
    return sp_error_set("blurpool: no output layout");
  }
  p->saved_bytes = p->fwd_scratch_bytes = p->bwd_scratch_bytes = 0;
  cpu_report(p, &s->base);
  return 0;
}
#endif
