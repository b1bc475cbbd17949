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
 * lanes pass through (zero in, zero out), as every producer keeps them zero.
 * bf16 (bf16 plans): read and written in bf16, summed in f32 (a thread's
 * output row in forward, its unit's input gradient in backward, in scratch),
 * so each value is rounded once. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

enum { MAX_F = 7, MAX_GATHER = 1 << 22 };

/* Which outputs read input index i along one axis: entries start[i] to
 * start[i + 1] - 1 of (out, tap weight); a reflected tap and a direct one
 * may both name the same output (their weights add). */
typedef struct {
  int32_t *start, *out;
  float *wt;
} bp_inverse;

typedef struct {
  cpu_node base;
  int64_t n, h, w, ho, wo;
  int64_t lanes, blocks; /* as in softargmax.c */
  int64_t pos_stride, in_block, out_block, in_image, out_image;
  int f;
  float taps[MAX_F];
  int32_t *row, *col; /* row[oh * f + i]: the input row tap i of output row oh reads (reflected); col alike */
  int nhwc;           /* channels-last, C a multiple of VW: forward_nhwc */
  int gather;         /* nhwc, or blocks of VW lanes: backward_gather */
  bp_inverse pin;     /* gather: per input position (h w of them), the output positions reading it */
  int bf16, threads;  /* bf16: values and gradients in bf16, sums in f32 scratch */
  size_t fwd_thread_bytes, bwd_thread_bytes;
} bp_node;

static void inverse_free(bp_inverse *v) {
  free(v->start);
  free(v->out);
  free(v->wt);
}

static void bp_release(cpu_node *n) {
  bp_node *s = (bp_node *)n;
  free(s->row);
  free(s->col);
  inverse_free(&s->pin);
}

/* Per input position, the products of its row's and its column's entries:
 * the outputs that read it and their weights, listed once per plan. */
static void positions_of(bp_inverse *v, const bp_inverse *ri, const bp_inverse *ci, int64_t h, int64_t w, int64_t wo) {
  const int64_t total = (int64_t)ri->start[h] * ci->start[w];
  v->start = sp_xmalloc(sizeof(int32_t) * (size_t)(h * w + 1));
  v->out = sp_xmalloc(sizeof(int32_t) * (size_t)total);
  v->wt = sp_xmalloc(sizeof(float) * (size_t)total);
  int32_t at = 0;
  for (int64_t ih = 0; ih < h; ih++)
    for (int64_t iw = 0; iw < w; iw++) {
      v->start[ih * w + iw] = at;
      for (int32_t a = ri->start[ih]; a < ri->start[ih + 1]; a++)
        for (int32_t b = ci->start[iw]; b < ci->start[iw + 1]; b++) {
          v->out[at] = (int32_t)(ri->out[a] * wo + ci->out[b]);
          v->wt[at++] = ri->wt[a] * ci->wt[b];
        }
    }
  v->start[h * w] = at;
}

/* The inverse of tab (n_out x f input indices) over n_in inputs. */
static void inverse_of(bp_inverse *v, const int32_t *tab, int64_t n_in, int64_t n_out, int f, const float *taps) {
  v->start = sp_xcalloc((size_t)n_in + 1, sizeof(int32_t));
  v->out = sp_xmalloc(sizeof(int32_t) * (size_t)(n_out * f));
  v->wt = sp_xmalloc(sizeof(float) * (size_t)(n_out * f));
  for (int64_t e = 0; e < n_out * f; e++) v->start[tab[e] + 1]++;
  for (int64_t i = 0; i < n_in; i++) v->start[i + 1] += v->start[i];
  int32_t *fill = sp_xmalloc(sizeof(int32_t) * (size_t)n_in);
  memcpy(fill, v->start, sizeof(int32_t) * (size_t)n_in);
  for (int64_t o = 0; o < n_out; o++)
    for (int i = 0; i < f; i++) {
      const int32_t at = fill[tab[o * f + i]]++;
      v->out[at] = (int32_t)o, v->wt[at] = taps[i];
    }
  free(fill);
}

/* Channels-last, C a multiple of VW. Forward: per output position, each VW
 * channels summed over the f x f taps in one register. Backward (also for
 * blocks of VW lanes) gathers: per input position, the outputs that read it
 * (the inverse tables), so each input gradient is written (or added) once.
 * The scatter below kept an f32 copy of each image in scratch for bf16,
 * 3.2 MB for a 256-channel 56 x 56 image, beyond L2 (ResUNet-50 bf16, batch
 * 16: 8.7 ms forward and 11.2 backward a step over its three BlurPools
 * before, 2.6 and 4.3 after), and for f32 blocks read and wrote each input
 * gradient f x f times. */
INLINE void forward_nhwc(const bp_node *s, const void *x, void *y, int bf16) {
  const int64_t C = s->lanes;
  const int f = s->f;
#pragma omp parallel for schedule(guided) num_threads(s->threads)
  for (int64_t q = 0; q < s->n * s->ho; q++) {
    const int64_t img = q / s->ho, oh = q % s->ho;
    int64_t at[MAX_F * MAX_F];
    float wt[MAX_F * MAX_F];
    for (int64_t ow = 0; ow < s->wo; ow++) {
      for (int i = 0; i < f; i++)
        for (int j = 0; j < f; j++) {
          at[i * f + j] = img * s->in_image + ((int64_t)s->row[oh * f + i] * s->w + s->col[ow * f + j]) * C;
          wt[i * f + j] = s->taps[i] * s->taps[j];
        }
      const int64_t yo = img * s->out_image + (oh * s->wo + ow) * C;
      for (int64_t c = 0; c < C; c += VW) {
        vfw acc = vbcastw(0.0f);
        for (int t = 0; t < f * f; t++) acc += vbcastw(wt[t]) * vldw(x, at[t] + c, bf16, VW);
        vstw(y, yo + c, acc, bf16, VW);
      }
    }
  }
}

INLINE void backward_gather(const bp_node *s, const void *dy, void *dx, int fresh, int bf16) {
  const int64_t C = s->pos_stride; /* lanes at a position: all C channels-last, VW in blocks */
  const bp_inverse *pi = &s->pin;
#pragma omp parallel for schedule(guided) num_threads(s->threads)
  for (int64_t q = 0; q < s->n * s->blocks * s->h; q++) {
    const int64_t u = q / s->h, ih = q % s->h, img = u / s->blocks, blk = u % s->blocks;
    const int64_t in_base = img * s->in_image + blk * s->in_block, out_base = img * s->out_image + blk * s->out_block;
    for (int64_t iw = 0; iw < s->w; iw++) {
      const int64_t pos = ih * s->w + iw, xo = in_base + pos * C;
      const int32_t t0 = pi->start[pos], t1 = pi->start[pos + 1];
      for (int64_t c = 0; c < C; c += VW) {
        vfw acc = fresh ? vbcastw(0.0f) : vldw(dx, xo + c, bf16, VW);
        for (int32_t t = t0; t < t1; t++) acc += vbcastw(pi->wt[t]) * vldw(dy, out_base + pi->out[t] * C + c, bf16, VW);
        vstw(dx, xo + c, acc, bf16, VW);
      }
    }
  }
}

/* One block of VW lanes per position (16-channel blocks with AVX-512): the
 * f x f taps summed in one register, rounded once. The general loop below
 * kept the sum in memory, a read-modify-write per tap (AMD Zen 5, ResUNet-50
 * bf16 batch 16: 38 ms of forward a step). */
INLINE void forward_vector_block(const bp_node *s, const void *x, void *y, int64_t xb, int64_t yb, int bf16) {
  const int f = s->f;
  for (int64_t oh = 0; oh < s->ho; oh++)
    for (int64_t ow = 0; ow < s->wo; ow++) {
      vfw acc = vbcastw(0.0f);
      for (int i = 0; i < f; i++) {
        const int64_t xr = xb + (int64_t)s->row[oh * f + i] * s->w * VW;
        for (int j = 0; j < f; j++)
          acc += vbcastw(s->taps[i] * s->taps[j]) * vldw(x, xr + (int64_t)s->col[ow * f + j] * VW, bf16, VW);
      }
      vstw(y, yb + (oh * s->wo + ow) * VW, acc, bf16, VW);
    }
}

/* Forward: each output position's L lanes are summed in f32 (in y itself
 * for f32; in this thread's row of scratch for bf16, then rounded once). */
INLINE void forward_impl(const bp_node *s, const void *x, void *y, char *scratch, int bf16) {
  const int64_t L = s->lanes, S = s->pos_stride, units = s->n * s->blocks;
  const int f = s->f;
#pragma omp parallel for schedule(guided) num_threads(s->threads)
  for (int64_t u = 0; u < units; u++) {
    const int64_t img = u / s->blocks, blk = u % s->blocks;
    const int64_t xb = img * s->in_image + blk * s->in_block, yb = img * s->out_image + blk * s->out_block;
    if (L == VW && S == VW) {
      forward_vector_block(s, x, y, xb, yb, bf16);
      continue;
    }
    float *row = bf16 ? (float *)(scratch + (size_t)omp_get_thread_num() * s->fwd_thread_bytes) : NULL;
    for (int64_t oh = 0; oh < s->ho; oh++)
      for (int64_t ow = 0; ow < s->wo; ow++) {
        const int64_t yo = yb + (oh * s->wo + ow) * S;
        float *yp = bf16 ? row : (float *)y + yo;
#pragma omp simd
        for (int64_t l = 0; l < L; l++) yp[l] = 0.0f;
        for (int i = 0; i < f; i++) {
          const int64_t xr = xb + (int64_t)s->row[oh * f + i] * s->w * S;
          for (int j = 0; j < f; j++) {
            const float t = s->taps[i] * s->taps[j];
            const int64_t xp = xr + (int64_t)s->col[ow * f + j] * S;
#pragma omp simd
            for (int64_t l = 0; l < L; l++) yp[l] += t * sp_ldf(x, xp + l, bf16);
          }
        }
        if (bf16) {
          uint16_t *yh = (uint16_t *)y + yo;
#pragma omp simd
          for (int64_t l = 0; l < L; l++) yh[l] = sp_bf16_round(row[l]);
        }
      }
  }
}

/* Backward scatters into the unit's input gradient: in dx itself for f32
 * (zeroed first when fresh); for bf16 into an f32 copy of the unit in this
 * thread's scratch, then written (fresh) or added (rounding once). */
INLINE void backward_impl(const bp_node *s, const void *dy, void *dx, int fresh, char *scratch, int bf16) {
  const int64_t L = s->lanes, S = s->pos_stride, units = s->n * s->blocks, cells = s->h * s->w * S;
  const int f = s->f;
#pragma omp parallel for schedule(guided) num_threads(s->threads)
  for (int64_t u = 0; u < units; u++) {
    const int64_t img = u / s->blocks, blk = u % s->blocks;
    const int64_t gb = img * s->out_image + blk * s->out_block, dbo = img * s->in_image + blk * s->in_block;
    float *db = bf16 ? (float *)(scratch + (size_t)omp_get_thread_num() * s->bwd_thread_bytes) : (float *)dx + dbo;
    if (fresh || bf16) memset(db, 0, sizeof(float) * (size_t)cells); /* the unit's block: contiguous */
    for (int64_t oh = 0; oh < s->ho; oh++)
      for (int64_t ow = 0; ow < s->wo; ow++) {
        const int64_t gp = gb + (oh * s->wo + ow) * S;
        for (int i = 0; i < f; i++) {
          float *dr = db + (int64_t)s->row[oh * f + i] * s->w * S;
          for (int j = 0; j < f; j++) {
            const float t = s->taps[i] * s->taps[j];
            float *dp = dr + (int64_t)s->col[ow * f + j] * S;
#pragma omp simd
            for (int64_t l = 0; l < L; l++) dp[l] += t * sp_ldf(dy, gp + l, bf16);
          }
        }
      }
    if (bf16) {
      uint16_t *dh = (uint16_t *)dx + dbo;
      if (fresh) {
#pragma omp simd
        for (int64_t i = 0; i < cells; i++) dh[i] = sp_bf16_round(db[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < cells; i++) dh[i] = sp_bf16_round(sp_bf16_widen(dh[i]) + db[i]);
      }
    }
  }
}

static void bp_forward(cpu_node *n, const sp_op_args *a) {
  const bp_node *s = (const bp_node *)n;
  if (s->nhwc && s->bf16)
    forward_nhwc(s, a->in[0]->data, a->out->data, 1);
  else if (s->nhwc)
    forward_nhwc(s, a->in[0]->data, a->out->data, 0);
  else if (s->bf16)
    forward_impl(s, a->in[0]->data, a->out->data, a->scratch, 1);
  else
    forward_impl(s, a->in[0]->data, a->out->data, a->scratch, 0);
}

static void bp_backward(cpu_node *n, const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const bp_node *s = (const bp_node *)n;
  const int fresh = a->d_in_fresh & 1u;
  if (s->gather && s->bf16)
    backward_gather(s, a->d_out->data, a->d_in[0]->data, fresh, 1);
  else if (s->gather)
    backward_gather(s, a->d_out->data, a->d_in[0]->data, fresh, 0);
  else if (s->bf16)
    backward_impl(s, a->d_out->data, a->d_in[0]->data, fresh, a->scratch, 1);
  else
    backward_impl(s, a->d_out->data, a->d_in[0]->data, fresh, a->scratch, 0);
}

static const cpu_vt bp_vt = {bp_forward, bp_backward, NULL, bp_release};

/* Reflect without repeating the edge (F.pad mode="reflect"). */
static int32_t reflect(int64_t i, int64_t n) { return (int32_t)(i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i); }

int cpu_blurpool_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t md;
  const sp_blurpool_attr *at = p->attr;
  if (p->in_shape[0].ndim != 4 || at->filter_size > MAX_F || cpu_md_input(&md, p, 0) != 0 ||
      (md.data_type != dnnl_f32 && md.data_type != dnnl_bf16))
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
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, md.data_type, cpu_lanes_tag(lanes)) != dnnl_success) {
    cpu_node_free(&s->base);
    return sp_error_set("blurpool: no output layout");
  }
  s->bf16 = md.data_type == dnnl_bf16;
  s->threads = omp_get_max_threads();
  s->nhwc = lanes == CPU_LANES_NHWC && c % VW == 0;
  /* The gather's lists hold (ho f) (wo f) entries: 113 K for a 224 x 224
   * input at stride 2; past MAX_GATHER (a very large image) the scatter. */
  if ((s->nhwc || lanes == VW) && (int64_t)(s->ho * s->f) * (s->wo * s->f) <= MAX_GATHER) {
    bp_inverse rin, cin; /* per input row (column), the output rows (columns) reading it */
    inverse_of(&rin, s->row, s->h, s->ho, s->f, s->taps);
    inverse_of(&cin, s->col, s->w, s->wo, s->f, s->taps);
    positions_of(&s->pin, &rin, &cin, s->h, s->w, s->wo);
    inverse_free(&rin);
    inverse_free(&cin);
    s->gather = 1;
  }
  s->fwd_thread_bytes = s->bf16 && !s->nhwc ? ((sizeof(float) * (size_t)s->lanes + 63) & ~(size_t)63) : 0;
  s->bwd_thread_bytes =
      s->bf16 && !s->gather ? ((sizeof(float) * (size_t)(s->h * s->w * s->pos_stride) + 63) & ~(size_t)63) : 0;
  p->saved_bytes = 0;
  p->fwd_scratch_bytes = (size_t)s->threads * s->fwd_thread_bytes;
  p->bwd_scratch_bytes = p->run_backward ? (size_t)s->threads * s->bwd_thread_bytes : 0;
  cpu_report(p, &s->base);
  return 0;
}
#endif
