/* Soft-argmax in the layout the last convolution writes (see ops/softargmax.c
 * for the maths).
 *
 * The reference kernel sat behind the adapter's reorder to plain and called
 * expf once per pixel with double sums: 290 of ResUNet-50's ~4000 ms per
 * training step (68 heatmaps of 224x224, batch 16). Here the heatmaps stay
 * blocked ([N, K/B, H, W, B], B = 16 or 8) or channels-last, the B lanes of a
 * position are one vector, and exp is a branch-free polynomial the compiler
 * vectorises. Forward reads the logits twice (max, then exp with the three
 * sums) and saves the unnormalised exponentials plus, per heatmap, 1/sum and
 * the expected column and row, so backward normalises on the fly instead of
 * forward spending a pass on it. Plain layout vectorises along the row.
 * Sums: a row's in float (at most a few hundred terms), rows in double. */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/exp_nonpos.h"
#include "core/bf16.h"
#include "ops/ops.h"

#define INLINE static inline __attribute__((always_inline))

typedef struct {
  cpu_node base;
  int64_t n, k, h, w;
  int64_t lanes;        /* channels per block: 1 plain, 8 or 16 blocked, k channels-last */
  int64_t blocks;       /* blocks per image */
  int64_t pos_stride;   /* elements from one position to the next */
  int64_t block_stride; /* from one block to the next (0: one block) */
  int64_t image_stride; /* from one image to the next */
  size_t exp_bytes;     /* saved: the exponentials in the input's layout, then per-heatmap stats */
  float scale;
  int bf16; /* logits and their gradient in bf16 (saved exponentials stay f32) */
} sam_node;

/* Per heatmap, after the exponentials in saved. */
typedef struct {
  float inv_sum, ex, ey, pad;
} sam_stat;

/* Lanes kernels: one unit is one block of one image, its `lanes` heatmaps
 * side by side. */
enum { MAX_LANES = 1024 };

INLINE void forward_lanes(const sam_node *s, const void *x, float *y, float *saved, int bf16) {
  const int64_t L = s->lanes, S = s->pos_stride, units = s->n * s->blocks;
  sam_stat *stat = saved ? (sam_stat *)((char *)saved + s->exp_bytes) : NULL;
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; u++) {
    const int64_t img = u / s->blocks, blk = u % s->blocks, c0 = blk * L;
    const int64_t xb = img * s->image_stride + blk * s->block_stride; /* element offset of the unit */
    float *eb = saved ? saved + img * s->image_stride + blk * s->block_stride : NULL;
    float m[MAX_LANES], rs[MAX_LANES], rc[MAX_LANES];
    int32_t real[MAX_LANES]; /* 0 for a padding lane: its saved exponentials are 0, whatever it holds */
    double sum[MAX_LANES], sx[MAX_LANES], sy[MAX_LANES];
    for (int64_t l = 0; l < L; l++) m[l] = -INFINITY, sum[l] = sx[l] = sy[l] = 0.0, real[l] = c0 + l < s->k;
    for (int64_t q = 0; q < s->h * s->w; q++) {
      const int64_t xp = xb + q * S;
#pragma omp simd
      for (int64_t l = 0; l < L; l++) {
        const float v = sp_ldf(x, xp + l, bf16);
        m[l] = v > m[l] ? v : m[l];
      }
    }
    for (int64_t i = 0; i < s->h; i++) {
      for (int64_t l = 0; l < L; l++) rs[l] = rc[l] = 0.0f;
      for (int64_t j = 0; j < s->w; j++) {
        const int64_t at = (i * s->w + j) * S;
        const float fj = (float)j;
        if (eb) {
#pragma omp simd
          for (int64_t l = 0; l < L; l++) {
            const float e = exp_nonpos(sp_ldf(x, xb + at + l, bf16) - m[l]);
            eb[at + l] = real[l] ? e : 0.0f;
            rs[l] += e;
            rc[l] += e * fj;
          }
        } else {
#pragma omp simd
          for (int64_t l = 0; l < L; l++) {
            const float e = exp_nonpos(sp_ldf(x, xb + at + l, bf16) - m[l]);
            rs[l] += e;
            rc[l] += e * fj;
          }
        }
      }
      for (int64_t l = 0; l < L; l++) sum[l] += rs[l], sx[l] += rc[l], sy[l] += (double)rs[l] * (double)i;
    }
    for (int64_t l = 0; l < L && c0 + l < s->k; l++) {
      const int64_t plane = img * s->k + c0 + l;
      const double ex = sx[l] / sum[l], ey = sy[l] / sum[l];
      y[2 * plane] = (float)(ex * s->scale);
      y[2 * plane + 1] = (float)(ey * s->scale);
      if (stat) stat[plane] = (sam_stat){(float)(1.0 / sum[l]), (float)ex, (float)ey, 0.0f};
    }
  }
}

/* d logit = scale p (gx (j - ex) + gy (i - ey)) = p (a j + b i + c). Padding
 * lanes (past the last heatmap) saved 0 and have a = b = c = 0: they get 0
 * (convolutions reading the gradient expect zero padding). */
INLINE void backward_lanes(const sam_node *s, const float *saved, const float *dy, void *dx, int accumulate, int bf16) {
  const int64_t L = s->lanes, S = s->pos_stride, units = s->n * s->blocks;
  const sam_stat *stat = (const sam_stat *)((const char *)saved + s->exp_bytes);
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; u++) {
    const int64_t img = u / s->blocks, blk = u % s->blocks, c0 = blk * L;
    const float *eb = saved + img * s->image_stride + blk * s->block_stride;
    const int64_t db = img * s->image_stride + blk * s->block_stride;
    float ca[MAX_LANES], cb[MAX_LANES], cc[MAX_LANES], inv[MAX_LANES];
    for (int64_t l = 0; l < L; l++) {
      if (c0 + l >= s->k) {
        ca[l] = cb[l] = cc[l] = inv[l] = 0.0f;
        continue;
      }
      const int64_t plane = img * s->k + c0 + l;
      const sam_stat st = stat[plane];
      ca[l] = s->scale * dy[2 * plane], cb[l] = s->scale * dy[2 * plane + 1];
      cc[l] = -(ca[l] * st.ex + cb[l] * st.ey);
      inv[l] = st.inv_sum;
    }
    for (int64_t i = 0; i < s->h; i++)
      for (int64_t j = 0; j < s->w; j++) {
        const int64_t at = (i * s->w + j) * S;
        const float fi = (float)i, fj = (float)j;
        if (accumulate) {
#pragma omp simd
          for (int64_t l = 0; l < L; l++)
            sp_stf(dx, db + at + l,
                   sp_ldf(dx, db + at + l, bf16) + eb[at + l] * inv[l] * (ca[l] * fj + cb[l] * fi + cc[l]), bf16);
        } else {
#pragma omp simd
          for (int64_t l = 0; l < L; l++)
            sp_stf(dx, db + at + l, eb[at + l] * inv[l] * (ca[l] * fj + cb[l] * fi + cc[l]), bf16);
        }
      }
  }
}

/* Plain layout: one heatmap per unit, vectorised along each row. */
INLINE void forward_plain(const sam_node *s, const void *x, float *y, float *saved, int bf16) {
  const int64_t hw = s->h * s->w, w = s->w, planes = s->n * s->k;
  sam_stat *stat = saved ? (sam_stat *)((char *)saved + s->exp_bytes) : NULL;
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < planes; q++) {
    const int64_t xq = q * hw;
    float *eq = saved ? saved + q * hw : NULL;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t t = 0; t < hw; t++) {
      const float v = sp_ldf(x, xq + t, bf16);
      m = v > m ? v : m;
    }
    double sum = 0.0, sx = 0.0, sy = 0.0;
    for (int64_t i = 0; i < s->h; i++) {
      float rs = 0.0f, rc = 0.0f;
      if (eq) {
#pragma omp simd reduction(+ : rs, rc)
        for (int64_t j = 0; j < w; j++) {
          const float e = exp_nonpos(sp_ldf(x, xq + i * w + j, bf16) - m);
          eq[i * w + j] = e;
          rs += e;
          rc += e * (float)j;
        }
      } else {
#pragma omp simd reduction(+ : rs, rc)
        for (int64_t j = 0; j < w; j++) {
          const float e = exp_nonpos(sp_ldf(x, xq + i * w + j, bf16) - m);
          rs += e;
          rc += e * (float)j;
        }
      }
      sum += rs, sx += rc, sy += (double)rs * (double)i;
    }
    const double ex = sx / sum, ey = sy / sum;
    y[2 * q] = (float)(ex * s->scale);
    y[2 * q + 1] = (float)(ey * s->scale);
    if (stat) stat[q] = (sam_stat){(float)(1.0 / sum), (float)ex, (float)ey, 0.0f};
  }
}

INLINE void backward_plain(const sam_node *s, const float *saved, const float *dy, void *dx, int accumulate, int bf16) {
  const int64_t hw = s->h * s->w, w = s->w, planes = s->n * s->k;
  const sam_stat *stat = (const sam_stat *)((const char *)saved + s->exp_bytes);
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < planes; q++) {
    const float *eq = saved + q * hw;
    const int64_t d = q * hw;
    const float a = s->scale * dy[2 * q], b = s->scale * dy[2 * q + 1], inv = stat[q].inv_sum;
    const float c = -(a * stat[q].ex + b * stat[q].ey);
    for (int64_t i = 0; i < s->h; i++) {
      const float row = b * (float)i + c;
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < w; j++)
          sp_stf(dx, d + i * w + j, sp_ldf(dx, d + i * w + j, bf16) + eq[i * w + j] * inv * (a * (float)j + row), bf16);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < w; j++) sp_stf(dx, d + i * w + j, eq[i * w + j] * inv * (a * (float)j + row), bf16);
      }
    }
  }
}

static void sam_forward(cpu_node *n, const sp_op_args *a) {
  const sam_node *s = (const sam_node *)n;
  const void *x = a->in[0]->data;
  float *y = a->out->data, *saved = a->saved;
  if (s->lanes == 1)
    s->bf16 ? forward_plain(s, x, y, saved, 1) : forward_plain(s, x, y, saved, 0);
  else
    s->bf16 ? forward_lanes(s, x, y, saved, 1) : forward_lanes(s, x, y, saved, 0);
}

static void sam_backward(cpu_node *n, const sp_op_args *a) {
  if (!a->d_in[0]) return;
  const sam_node *s = (const sam_node *)n;
  const int accumulate = !(a->d_in_fresh & 1u);
  const float *saved = a->saved, *dy = a->d_out->data;
  void *dx = a->d_in[0]->data;
  if (s->lanes == 1)
    s->bf16 ? backward_plain(s, saved, dy, dx, accumulate, 1) : backward_plain(s, saved, dy, dx, accumulate, 0);
  else
    s->bf16 ? backward_lanes(s, saved, dy, dx, accumulate, 1) : backward_lanes(s, saved, dy, dx, accumulate, 0);
}

static const cpu_vt sam_vt = {sam_forward, sam_backward, NULL, NULL};

int cpu_softargmax_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t md;
  if (p->in_shape[0].ndim != 4 || cpu_md_input(&md, p, 0) != 0 ||
      (md.data_type != dnnl_f32 && md.data_type != dnnl_bf16))
    return cpu_adapter_prepare(p);
  const int64_t n = p->in_shape[0].d[0], k = p->in_shape[0].d[1], h = p->in_shape[0].d[2], w = p->in_shape[0].d[3];
  const int lanes = cpu_md_lanes(&md);
  if (!lanes || (lanes == CPU_LANES_NHWC && k > MAX_LANES)) return cpu_adapter_prepare(p);
  sam_node *s = cpu_node_new(sizeof *s, &sam_vt);
  s->n = n, s->k = k, s->h = h, s->w = w;
  s->scale = ((const sp_softargmax_attr *)p->attr)->scale;
  if (lanes == CPU_LANES_NHWC) { /* one block of k lanes, k apart */
    s->lanes = k, s->blocks = 1, s->pos_stride = k, s->block_stride = 0;
  } else {
    s->lanes = lanes, s->blocks = (k + lanes - 1) / lanes, s->pos_stride = lanes, s->block_stride = h * w * lanes;
  }
  s->image_stride = s->blocks * s->lanes * h * w;
  s->bf16 = md.data_type == dnnl_bf16;
  s->exp_bytes = cpu_md_bytes(&md) * (s->bf16 ? 2 : 1); /* f32 exponentials */
  p->saved_bytes = p->run_backward ? s->exp_bytes + sizeof(sam_stat) * (size_t)(n * k) : 0;
  p->fwd_scratch_bytes = p->bwd_scratch_bytes = 0;
  if (cpu_md_plain(&s->base.out_md, &p->out_shape, dnnl_f32) != 0) {
    cpu_node_free(&s->base);
    return -1;
  }
  cpu_report(p, &s->base);
  return 0;
}
#endif
