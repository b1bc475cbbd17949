/* Batch-norm kernels of our own, in the layout the convolutions chose (plain,
 * nChw8c / nChw16c blocks, channels-last; f32 or bf16), with the ReLU after
 * it fused in.
 *
 * Why: oneDNN 2.6's batch norm on bf16 channels-last falls back to its
 * generic `nspc_bnorm:any` for narrow layers; the seed's ResUNet has two of
 * 8 channels at 224x224 that took 39% of a bf16 training step (100-125 ms a
 * call at batch 4). These kernels are memory bound and do the passes the
 * maths needs and no more:
 *   forward (batch statistics):  read x (sums), read x + write y;
 *   backward:                    read x, dy (sums), read x, dy + write dx.
 * The ReLU mask is not stored: backward recomputes y > 0 from x with the
 * same expression forward used, so fused BN + ReLU costs nothing extra.
 * A residual add absorbed with its ReLU (y = max(bn(x) + r, 0), the end of a
 * ResNet block; cpu_bn_residual) reads r in the normalising pass and keeps a
 * mask of a bit a value (a byte in the plain and scalar walks); backward's
 * sums pass writes the masked dy into r's gradient on the way. Against batch norm, then add + ReLU apart, that
 * saves writing and reading bn(x) in forward and the gradient in between
 * in backward.
 * In bf16 they were instruction bound at 8 lanes (15-18 GB/s against a
 * 30-40 GB/s copy, 2 cores, cache-resident); 16-lane vectors and the
 * hardware bf16 rounding (vec.h) brought them to 25-45 GB/s. From memory
 * (100 MB), walking wide channels-last rows 4 or 8 groups at a time took a
 * further 15-30% off (see the walk below).
 *
 * Outputs larger than half the last-level cache (y; dx and a residual's
 * gradient when written fresh) bypass the caches (see cpu_bn_stream_bytes below): the next layer
 * finds them in memory either way, and a plain store first reads each line.
 *
 * Statistics are one pass of shifted sums: per channel K = its first value,
 * sums of (x - K) and (x - K)^2 in f32 over a tile (~2048 elements, at least
 * 16 positions), added into per-thread double sums, reduced in
 * thread order. The shift keeps the variance exact to f32 rounding when
 * |mean| >> std (where a plain sum of squares loses everything), and the
 * fixed static split makes results independent of timing for a given
 * thread count.
 *
 * A tile is one block of one image over a run of positions: `lanes` channels
 * side by side at each position (16 or 8 for blocked layouts, C for
 * channels-last and [N, C], 1 for plain NCHW, where the run is contiguous in
 * one channel). Padding channels of a blocked layout get scale = shift = 0,
 * so they stay zero in y and dx. */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

/* Outputs (y; dx and a residual gradient written fresh) of at least this many bytes bypass the
 * caches (vstw_nt): too large to be in cache when the next layer reads
 * them, their lines would only be read in first for the store. Measured
 * (AMD Zen 5, 32 MB L3, 2 threads; nChw16c, the pass then a read of its
 * output as the next layer's, ms plain -> streamed): bf16 [16, 256, 56, 56]
 * (25.7 MB) forward 2.76 -> 2.51, backward 3.38 -> 3.23; [16, 32, 224, 224]
 * 5.31 -> 4.89, 7.71 -> 7.01; f32 [16, 32, 224, 224] 7.99 -> 6.88,
 * 12.23 -> 10.67. Below half the cache it loses: bf16 [16, 512, 28, 28]
 * (12.8 MB) 1.19 -> 1.30, 1.64 -> 1.83; [16, 1024, 14, 14] 0.39 -> 0.60.
 * -1: half the last-level cache, 16 MB where it is not known. */
int64_t cpu_bn_stream_bytes = -1;

/* The last-level cache one core shares, as sysfs gives it ("32768K"); 0
 * where unknown. Not sysconf: in a VM it can report the host's whole L3
 * (384 MB on the Zen 5 machine above, where sysfs and lscpu say 32 MB). */
static int64_t llc_bytes(void) {
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (!f) return 0;
  long long v = 0;
  char unit = 0;
  const int got = fscanf(f, "%lld%c", &v, &unit);
  fclose(f);
  if (got < 1 || v <= 0) return 0;
  return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
}

/* A training plan's outputs stream from 16 MB whatever the cache (the batch
 * norms', mm_amx.c's bf16 products', channels-last concats', the heatmap
 * head's input gradient, the f32 stem and 8-channel nodes'): they are read
 * once by the next layer and again only in backward, long after the rest of
 * the forward pass went through the cache, and a VM's sysfs can give the
 * host's whole L3. Measured on the Xeon with AMX (sysfs:
 * 300 MB, so half of it streamed nothing), ResUNet-50 bf16 batch 16, the
 * same binary alternating 5 runs a side (`bench/kernel_ab/ab_switch.sh
 * cpu_bn_stream_bytes -1 16777216`), fwd + bwd ms a step: the residual
 * ends of [16, 32, 224, 224] 27.4 -> 22.6, [16, 64, 112, 112] 21.4 -> 18.2,
 * [16, 256, 56, 56] 16.3 -> 13.1, 16.0 -> 12.7, 23.3 -> 21.2 (a pair), the
 * up-layer's 21.1 -> 19.2; 32 MB kept the 25.7 MB ones at their old times.
 * Inference plans keep half the cache (frozen ResUNet-50 f32 batch 64 lost
 * with 16 MB: the next layer reads a 25.7 MB output from the cache there). */
int64_t cpu_train_stream_cap = (int64_t)16 << 20;

int64_t cpu_stream_threshold_plan(int training) {
  const int64_t t = cpu_stream_threshold();
  return training && cpu_bn_stream_bytes < 0 && cpu_train_stream_cap < t ? cpu_train_stream_cap : t;
}

int64_t cpu_stream_threshold(void) {
  if (cpu_bn_stream_bytes >= 0) return cpu_bn_stream_bytes;
  static int64_t half_llc = -1; /* read once (two first callers store the same value) */
  int64_t h = __atomic_load_n(&half_llc, __ATOMIC_RELAXED);
  if (h < 0) {
    const int64_t l3 = llc_bytes();
    h = l3 > 0 ? l3 / 2 : (int64_t)16 << 20;
    __atomic_store_n(&half_llc, h, __ATOMIC_RELAXED);
  }
  return h;
}

#include "backends/cpu/bnorm_walk.h"

int cpu_bn_geom_of(cpu_bn_geom *g, const dnnl_memory_desc_t *md, const sp_shape *s) {
  memset(g, 0, sizeof *g);
  if (md->data_type != dnnl_f32 && md->data_type != dnnl_bf16) return -1;
  g->bf16 = md->data_type == dnnl_bf16;
  g->n = s->d[0], g->c = s->d[1];
  if (s->ndim == 2) {
    if (!cpu_md_is_plain(md)) return -1;
    g->hw = 1, g->lanes = g->c, g->blocks = 1;
  } else if (s->ndim == 4) {
    g->hw = s->d[2] * s->d[3];
    const int lanes = cpu_md_lanes(md);
    if (lanes == CPU_LANES_NHWC)
      g->lanes = g->c, g->blocks = 1;
    else if (lanes == 1)
      g->lanes = 1, g->blocks = g->c;
    else if (lanes == 8 || lanes == 16)
      g->lanes = lanes, g->blocks = (g->c + lanes - 1) / lanes;
    else
      return -1;
  } else {
    return -1;
  }
  g->blk_stride = g->hw * g->lanes;
  g->img_stride = g->blocks * g->blk_stride;
  g->threads = omp_get_max_threads();
  g->stream = g->n * g->img_stride * (g->bf16 ? 2 : 4) >= cpu_stream_threshold();
  return 0;
}

size_t cpu_bn_mask_bytes(const cpu_bn_geom *g) {
  const int64_t values = g->n * g->img_stride;
  return (size_t)(walk_of(g->lanes) == WALK_VEC ? (values + 7) / 8 : values);
}

size_t cpu_bn_scratch_bytes(const cpu_bn_geom *g) {
  const size_t cp = channels_padded(g);
  return BN_ARRAYS * round64(cp * sizeof(float)) + BN_COUNTER_BYTES +
         (size_t)shares_of(g) * round64(BN_SHARE_SUMS * cp * sizeof(double)) + 64;
}

/* Backward of the absorbed add + ReLU: dy masked, and written (or added)
 * into r's gradient. bits: the vector walk's mask, a bit a value (else a
 * byte: bnorm.h). */
INLINE vfw residual_grad(const cpu_bn_residual *res, int64_t i, vfw gv, int bf16, int w, int bits) {
  gv = bits ? vbits_select(gv, res->mask, i, w) : mask_apply(gv, res->mask, i, w);
  if (res->dr && res->dr_add)
    vstw(res->dr, i, gv + vldw(res->dr, i, bf16, w), bf16, w);
  else if (res->dr && res->dr_stream)
    vstw_nt(res->dr, i, gv, bf16, w);
  else if (res->dr)
    vstw(res->dr, i, gv, bf16, w);
  return gv;
}
INLINE float residual_grad1(const cpu_bn_residual *res, int64_t i, float gv, int bf16) {
  gv = res->mask[i] ? gv : 0.0f;
  if (res->dr) sp_stf(res->dr, i, (res->dr_add ? sp_ldf(res->dr, i, bf16) : 0.0f) + gv, bf16);
  return gv;
}
/* One vector's contribution to a lane group's sums (s1, s2). */
INLINE void sum_step(const void *x, const void *dy, int64_t i, int w, vfw kk, vfw scc, vfw shc, vfw *s1, vfw *s2,
                     int bf16, int backward, int relu, const cpu_bn_residual *res) {
  const vfw xv = vldw(x, i, bf16, w);
  if (!backward) {
    const vfw d = xv - kk;
    *s1 += d, *s2 += d * d;
  } else {
    vfw gv = vldw(dy, i, bf16, w);
    if (relu == MODE_RELU) gv = vmask(gv, vaffine(xv, kk, scc, shc));
    if (relu == MODE_ADD_RELU) gv = residual_grad(res, i, gv, bf16, w, 1);
    *s1 += gv, *s2 += gv * (xv - kk);
  }
}

/* Two sets of sums over alternate positions: one set is a chain of
 * dependent adds (4 cycles each) that left the loads idle. */
INLINE void sum_group(const void *x, const void *dy, int64_t at, int64_t L, int64_t j, int w, int G, int64_t p0,
                      int64_t p1, const float *K, const float *sc, const float *sh, double *a1, double *a2, int bf16,
                      int backward, int relu, const cpu_bn_residual *res) {
  vfw kk[GMAX], scc[GMAX], shc[GMAX], s1[GMAX], s2[GMAX], t1[GMAX], t2[GMAX];
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    kk[g] = vconst(K, j + g * w, w, L), scc[g] = vconst(sc, j + g * w, w, L), shc[g] = vconst(sh, j + g * w, w, L);
    s1[g] = s2[g] = t1[g] = t2[g] = vbcastw(0.0f);
  }
  const int64_t step = positions_per_vector(w, L);
  int64_t p = p0;
  for (; p + step < p1; p += 2 * step) {
    VEC_UNROLL
    for (int g = 0; g < G; g++) {
      const int64_t i = at + p * L + j + g * w;
      sum_step(x, dy, i, w, kk[g], scc[g], shc[g], &s1[g], &s2[g], bf16, backward, relu, res);
      sum_step(x, dy, i + step * L, w, kk[g], scc[g], shc[g], &t1[g], &t2[g], bf16, backward, relu, res);
    }
  }
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    if (p < p1)
      sum_step(x, dy, at + p * L + j + g * w, w, kk[g], scc[g], shc[g], &s1[g], &s2[g], bf16, backward, relu, res);
    add_into_doubles(a1 + j + g * w, s1[g] + t1[g], w, L);
    add_into_doubles(a2 + j + g * w, s2[g] + t2[g], w, L);
  }
}

/* Sums over the tiles of the shares this thread takes, into each share's doubles acc[0..cp) and acc[cp..2cp):
 * forward: x - K and (x - K)^2; backward: g and g (x - mean), g = dy masked
 * by the fused ReLU (s->k holds K or the mean, s->a / s->b the mask's scale
 * and shift). L is a constant in the specialised callers. */
INLINE void sum_tiles(const cpu_bn_geom *g, const tiling *t, const bn_scratch *s, const void *x, const void *dy_all,
                      int64_t L, int bf16, int backward, int relu, const cpu_bn_residual *res) {
  const int64_t cp = g->blocks * L;
  tile_walk walk = tiles_begin(s, PASS_SUMS, t, 2 * cp);
  for (int64_t k; tiles_next(&walk, &k);) {
    double *acc = walk.acc;
    int64_t blk, np;
    const int64_t at = tile_at(g, t, k, &blk, &np), c0 = blk * L;
    const float *K = s->k + c0, *sc = s->a + c0, *sh = s->b + c0;
    const void *dy = tile_y(g, t, k, dy_all);
    if (walk_of(L) == WALK_VEC) {
#define SUM_GROUP(j, w, G, p0, p1) \
  sum_group(x, dy, at, L, j, w, G, p0, p1, K, sc, sh, acc + c0, acc + cp + c0, bf16, backward, relu, res)
      FOR_EACH_GROUP(L, np, SUM_GROUP);
#undef SUM_GROUP
      continue;
    }
    if (walk_of(L) == WALK_PLAIN) { /* one channel, contiguous positions */
      const vfw kk = vbcastw(K[0]), scc = vbcastw(sc[0]), shc = vbcastw(sh[0]);
      vfw s1 = vbcastw(0.0f), s2 = s1;
      int64_t p = 0;
      for (; p + VW <= np; p += VW) {
        const vfw xv = vldw(x, at + p, bf16, VW);
        if (!backward) {
          const vfw d = xv - kk;
          s1 += d, s2 += d * d;
        } else {
          vfw gv = vldw(dy, at + p, bf16, VW);
          if (relu == MODE_RELU) gv = vmask(gv, vaffine(xv, kk, scc, shc));
          if (relu == MODE_ADD_RELU) gv = residual_grad(res, at + p, gv, bf16, VW, 0);
          s1 += gv, s2 += gv * (xv - kk);
        }
      }
      double t1 = 0.0, t2 = 0.0;
      for (int l = 0; l < VW; l++) t1 += s1[l], t2 += s2[l];
      for (; p < np; p++) { /* the tail, scalar */
        const float xv = sp_ldf(x, at + p, bf16);
        if (!backward) {
          t1 += xv - K[0], t2 += (double)(xv - K[0]) * (xv - K[0]);
        } else {
          float gv = sp_ldf(dy, at + p, bf16);
          if (relu == MODE_RELU) gv = affine(xv, K[0], sc[0], sh[0]) > 0.0f ? gv : 0.0f;
          if (relu == MODE_ADD_RELU) gv = residual_grad1(res, at + p, gv, bf16);
          t1 += gv, t2 += (double)gv * (xv - K[0]);
        }
      }
      acc[c0] += t1, acc[cp + c0] += t2;
      continue;
    }
    for (int64_t l = 0; l < L; l++) { /* lanes not a multiple of 8: scalar */
      float s1 = 0.0f, s2 = 0.0f;
      for (int64_t p = 0; p < np; p++) {
        const float xv = sp_ldf(x, at + p * L + l, bf16);
        if (!backward) {
          const float d = xv - K[l];
          s1 += d, s2 += d * d;
        } else {
          float gv = sp_ldf(dy, at + p * L + l, bf16);
          if (relu == MODE_RELU) gv = affine(xv, K[l], sc[l], sh[l]) > 0.0f ? gv : 0.0f;
          if (relu == MODE_ADD_RELU) gv = residual_grad1(res, at + p * L + l, gv, bf16);
          s1 += gv, s2 += gv * (xv - K[l]);
        }
      }
      acc[c0 + l] += s1, acc[cp + c0 + l] += s2;
    }
  }
}

/* The normalised v, then as `relu` says: stored, ReLU'd, or added to the
 * residual, ReLU'd and its mask kept (bits: as residual_grad). */
INLINE void store_y(void *y, int64_t i, vfw v, int bf16, int relu, const cpu_bn_residual *res, int w, int nt,
                    int bits) {
  if (relu == MODE_ADD_RELU) {
    v += vldw(res->r, i, bf16, w);
    if (res->mask && bits) vbits_gt0(res->mask, i, v, w);
    if (res->mask && !bits) mask_store(res->mask, i, v, w);
  }
  if (nt)
    vstw_nt(y, i, relu ? vrelu(v) : v, bf16, w);
  else
    vstw(y, i, relu ? vrelu(v) : v, bf16, w);
}
INLINE void store_y1(void *y, int64_t i, float v, int bf16, int relu, const cpu_bn_residual *res) {
  if (relu == MODE_ADD_RELU) {
    v += sp_ldf(res->r, i, bf16);
    if (res->mask) res->mask[i] = v > 0.0f;
  }
  sp_stf(y, i, relu && !(v > 0.0f) ? 0.0f : v, bf16);
}

INLINE void normalize_group(const void *x, void *y, int64_t at, int64_t L, int64_t j, int w, int G, int64_t p0,
                            int64_t p1, const float *m, const float *sc, const float *sh, int bf16, int relu,
                            const cpu_bn_residual *res, int nt) {
  vfw mm[GMAX], scc[GMAX], shc[GMAX];
  VEC_UNROLL
  for (int g = 0; g < G; g++)
    mm[g] = vconst(m, j + g * w, w, L), scc[g] = vconst(sc, j + g * w, w, L), shc[g] = vconst(sh, j + g * w, w, L);
  for (int64_t p = p0; p < p1; p += positions_per_vector(w, L)) {
    VEC_UNROLL
    for (int g = 0; g < G; g++) {
      const int64_t i = at + p * L + j + g * w;
      store_y(y, i, vaffine(vldw(x, i, bf16, w), mm[g], scc[g], shc[g]), bf16, relu, res, w, nt, 1);
    }
  }
}

/* y = affine(x) (+ ReLU) over the tiles of the shares this thread takes. */
INLINE void normalize_tiles(const cpu_bn_geom *g, const tiling *t, const bn_scratch *s, const void *x, void *y_all,
                            int64_t L, int bf16, int relu, const cpu_bn_residual *res) {
  tile_walk walk = tiles_begin(s, PASS_APPLY, t, 0);
  for (int64_t k; tiles_next(&walk, &k);) {
    int64_t blk, np;
    const int64_t at = tile_at(g, t, k, &blk, &np), c0 = blk * L;
    void *y = tile_y(g, t, k, y_all);
    const float *m = s->k + c0, *sc = s->a + c0, *sh = s->b + c0;
    if (walk_of(L) == WALK_VEC) {
#define NORMALIZE_GROUP(j, w, G, p0, p1) \
  normalize_group(x, y, at, L, j, w, G, p0, p1, m, sc, sh, bf16, relu, res, g->stream)
      FOR_EACH_GROUP(L, np, NORMALIZE_GROUP);
#undef NORMALIZE_GROUP
      continue;
    }
    const int plain = walk_of(L) == WALK_PLAIN;
    int64_t p = 0;
    if (plain) {
      const vfw mm = vbcastw(m[0]), scc = vbcastw(sc[0]), shc = vbcastw(sh[0]);
      for (; p + VW <= np; p += VW)
        store_y(y, at + p, vaffine(vldw(x, at + p, bf16, VW), mm, scc, shc), bf16, relu, res, VW, g->stream, 0);
    }
    for (; p < np; p++)
      for (int64_t l = 0; l < L; l++) {
        const int64_t i = at + p * L + l;
        store_y1(y, i, affine(sp_ldf(x, i, bf16), m[l], sc[l], sh[l]), bf16, relu, res);
      }
  }
}

/* dx (=|+=) a g + b (x - mean) + d over the tiles of the shares this thread takes, g the dy masked
 * by the fused ReLU (mask: its scale, then its shift, per channel). */
INLINE vfw vdx(vfw xv, vfw gv, vfw m, vfw msc, vfw msh, vfw a, vfw b, vfw d, int relu) {
  if (relu) gv = vmask(gv, vaffine(xv, m, msc, msh));
  return b * (xv - m) + (a * gv + d);
}

INLINE void dx_group(const void *x, const void *dy, void *dx, int64_t at, int64_t L, int64_t j, int w, int G,
                     int64_t p0, int64_t p1, const float *m, const float *ca, const float *cb, const float *cd,
                     const float *sc, const float *sh, int accumulate, int bf16, int relu, const cpu_bn_residual *res,
                     int nt) {
  vfw mm[GMAX], a[GMAX], b[GMAX], d[GMAX], msc[GMAX], msh[GMAX];
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    const int64_t jg = j + g * w;
    mm[g] = vconst(m, jg, w, L), a[g] = vconst(ca, jg, w, L), b[g] = vconst(cb, jg, w, L), d[g] = vconst(cd, jg, w, L);
    msc[g] = vconst(sc, jg, w, L), msh[g] = vconst(sh, jg, w, L);
  }
  for (int64_t p = p0; p < p1; p += positions_per_vector(w, L)) {
    VEC_UNROLL
    for (int g = 0; g < G; g++) {
      const int64_t i = at + p * L + j + g * w;
      vfw gv = vldw(dy, i, bf16, w);
      if (relu == MODE_ADD_RELU) gv = vbits_select(gv, res->mask, i, w);
      vfw v = vdx(vldw(x, i, bf16, w), gv, mm[g], msc[g], msh[g], a[g], b[g], d[g], relu == MODE_RELU);
      if (accumulate)
        vstw(dx, i, v + vldw(dx, i, bf16, w), bf16, w);
      else if (nt)
        vstw_nt(dx, i, v, bf16, w);
      else
        vstw(dx, i, v, bf16, w);
    }
  }
}

INLINE void dx_tiles(const cpu_bn_geom *g, const tiling *t, const bn_scratch *s, const float *mask, const void *x,
                     const void *dy_all, void *dx, int accumulate, int64_t L, int bf16, int relu,
                     const cpu_bn_residual *res) {
  const int64_t cp = (int64_t)channels_padded(g);
  tile_walk walk = tiles_begin(s, PASS_APPLY, t, 0);
  for (int64_t k; tiles_next(&walk, &k);) {
    int64_t blk, np;
    const int64_t at = tile_at(g, t, k, &blk, &np), c0 = blk * L;
    const void *dy = tile_y(g, t, k, dy_all);
    const float *m = s->k + c0, *ca = s->a + c0, *cb = s->b + c0, *cd = s->d + c0;
    const float *sc = mask + c0, *sh = mask + cp + c0;
    if (walk_of(L) == WALK_VEC) {
#define DX_GROUP(j, w, G, p0, p1) \
  dx_group(x, dy, dx, at, L, j, w, G, p0, p1, m, ca, cb, cd, sc, sh, accumulate, bf16, relu, res, g->stream)
      FOR_EACH_GROUP(L, np, DX_GROUP);
#undef DX_GROUP
      continue;
    }
    int64_t p = 0;
    if (walk_of(L) == WALK_PLAIN) {
      const vfw mm = vbcastw(m[0]), a = vbcastw(ca[0]), b = vbcastw(cb[0]), d = vbcastw(cd[0]);
      const vfw msc = vbcastw(sc[0]), msh = vbcastw(sh[0]);
      for (; p + VW <= np; p += VW) {
        vfw gv = vldw(dy, at + p, bf16, VW);
        if (relu == MODE_ADD_RELU) gv = mask_apply(gv, res->mask, at + p, VW);
        vfw v = vdx(vldw(x, at + p, bf16, VW), gv, mm, msc, msh, a, b, d, relu == MODE_RELU);
        if (accumulate) v += vldw(dx, at + p, bf16, VW);
        vstw(dx, at + p, v, bf16, VW);
      }
    }
    for (; p < np; p++)
      for (int64_t l = 0; l < L; l++) {
        const int64_t i = at + p * L + l;
        const float xv = sp_ldf(x, i, bf16);
        float gv = sp_ldf(dy, i, bf16);
        if (relu == MODE_RELU) gv = affine(xv, m[l], sc[l], sh[l]) > 0.0f ? gv : 0.0f;
        if (relu == MODE_ADD_RELU) gv = res->mask[i] ? gv : 0.0f;
        float v = cb[l] * (xv - m[l]) + (ca[l] * gv + cd[l]);
        if (accumulate) v += sp_ldf(dx, i, bf16);
        sp_stf(dx, i, v, bf16);
      }
  }
}

/* ---- forward ---- */

typedef struct {
  const cpu_bn_geom *g;
  const void *x;
  void *y;
  float *mean, *var; /* batch statistics out, or running statistics in */
  const float *gamma, *beta;
  float eps;
  int batch;
  const cpu_bn_residual *res;
  char *scratch;
} fwd_args;

/* Per channel: mean and variance from the shares' sums (batch), then scale
 * and shift; padding channels get zeros. Runs on one thread. */
static void finish_forward(const fwd_args *f, const bn_scratch *s) {
  const cpu_bn_geom *g = f->g;
  const int64_t cp = (int64_t)channels_padded(g);
  const double m = (double)(g->n * g->hw);
  for (int64_t c = 0; c < cp; c++) {
    if (c >= g->c) {
      s->k[c] = s->a[c] = s->b[c] = 0.0f;
      continue;
    }
    if (f->batch) {
      double s1 = 0.0, s2 = 0.0;
      for (int64_t i = 0; i < s->shares; i++) s1 += share_acc(s, i)[c], s2 += share_acc(s, i)[cp + c];
      const double d = s1 / m, var = s2 / m - d * d;
      f->mean[c] = (float)(s->k[c] + d);
      f->var[c] = (float)(var > 0.0 ? var : 0.0);
    }
    const double inv_std = 1.0 / sqrt((double)f->var[c] + f->eps);
    s->k[c] = f->mean[c];
    s->a[c] = (float)(inv_std * (f->gamma ? f->gamma[c] : 1.0f));
    s->b[c] = f->beta ? f->beta[c] : 0.0f;
  }
}

INLINE void forward_body(const fwd_args *f, int64_t L, int bf16, int relu) {
  const cpu_bn_geom *g = f->g;
  const tiling t = tiles_of(g);
  const bn_scratch s = scratch_of(g, f->scratch);
  shares_reset(&s);
#pragma omp parallel num_threads(g->threads)
  {
    if (f->batch) {
#pragma omp single
      for (int64_t c = 0; c < (int64_t)channels_padded(g); c++) /* shift: the channel's first value */
        s.k[c] = c < g->c ? sp_ldf(f->x, c / L * g->blk_stride + c % L, bf16) : 0.0f;
      sum_tiles(g, &t, &s, f->x, NULL, L, bf16, 0, 0, NULL);
#pragma omp barrier
    }
    const cpu_bn_partner *q = relu == MODE_ADD_RELU ? f->res->partner : NULL;
#pragma omp single
    {
      finish_forward(f, &s);
      if (q) cpu_bn_pair_constants(g, &s, q);
    }
    if (q && f->y)
      cpu_bn_pair_normalize(g, &s, f->x, f->y, f->res);
    else if (f->y)
      normalize_tiles(g, &t, &s, f->x, f->y, L, bf16, relu, f->res);
    if (g->stream) __builtin_ia32_sfence(); /* the streamed lines out before the region's barrier */
  }
}

/* One specialisation per (lanes, dtype, mode): L constant lets the
 * compiler keep a block's sums in registers. */
#define DISPATCH_MODE(BODY, ARGS, L, b, r)                \
  ((r) == MODE_ADD_RELU ? BODY(ARGS, L, b, MODE_ADD_RELU) \
   : (r)                ? BODY(ARGS, L, b, MODE_RELU)     \
                        : BODY(ARGS, L, b, MODE_PLAIN))
#define DISPATCH(BODY, ARGS, g, mode)                                                   \
  do {                                                                                  \
    const int b_ = (g)->bf16, r_ = (mode);                                              \
    const int64_t L_ = (g)->lanes;                                                      \
    if (L_ == 16)                                                                       \
      b_ ? DISPATCH_MODE(BODY, ARGS, 16, 1, r_) : DISPATCH_MODE(BODY, ARGS, 16, 0, r_); \
    else if (L_ == 8)                                                                   \
      b_ ? DISPATCH_MODE(BODY, ARGS, 8, 1, r_) : DISPATCH_MODE(BODY, ARGS, 8, 0, r_);   \
    else if (L_ == 1)                                                                   \
      b_ ? DISPATCH_MODE(BODY, ARGS, 1, 1, r_) : DISPATCH_MODE(BODY, ARGS, 1, 0, r_);   \
    else                                                                                \
      b_ ? DISPATCH_MODE(BODY, ARGS, L_, 1, r_) : DISPATCH_MODE(BODY, ARGS, L_, 0, r_); \
  } while (0)

void cpu_bn_forward(const cpu_bn_geom *g, const void *x, void *y, float *mean, float *var, const float *gamma,
                    const float *beta, float eps, int batch, int relu, const cpu_bn_residual *res, char *scratch) {
  const fwd_args f = {g, x, y, mean, var, gamma, beta, eps, batch, res, scratch};
  DISPATCH(forward_body, &f, g, res ? MODE_ADD_RELU : relu ? MODE_RELU : MODE_PLAIN);
}

/* ---- backward ---- */

typedef struct {
  const cpu_bn_geom *g;
  const void *x, *dy;
  void *dx; /* NULL: only the parameter gradients */
  int accumulate;
  const float *mean, *var, *gamma, *beta;
  float eps;
  int batch;
  float *dgamma, *dbeta; /* added into; NULL when not wanted */
  const cpu_bn_residual *res;
  char *scratch;
} bwd_args;

/* Per channel, from the shares' sums: the parameter gradients and dx's
 * coefficients (bn_backward_channel). The mask's scale and shift go to
 * `mask` (2 x cp floats). */
static void finish_backward(const bwd_args *b, const bn_scratch *s, float *mask) {
  const cpu_bn_geom *g = b->g;
  const int64_t cp = (int64_t)channels_padded(g);
  const double m = (double)(g->n * g->hw);
  for (int64_t c = 0; c < cp; c++) {
    if (c >= g->c) {
      s->k[c] = s->a[c] = s->b[c] = s->d[c] = mask[c] = mask[cp + c] = 0.0f;
      continue;
    }
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < s->shares; i++) s1 += share_acc(s, i)[c], s2 += share_acc(s, i)[cp + c];
    bn_backward_channel(s1, s2, m, b->var[c], b->eps, b->gamma ? b->gamma[c] : 1.0f, b->batch,
                        b->dgamma ? b->dgamma + c : NULL, b->dbeta ? b->dbeta + c : NULL, &s->a[c], &s->b[c], &s->d[c]);
  }
}

INLINE void backward_body(const bwd_args *b, int64_t L, int bf16, int relu) {
  const cpu_bn_geom *g = b->g;
  const tiling t = tiles_of(g);
  const bn_scratch s = scratch_of(g, b->scratch);
  const int64_t cp = (int64_t)channels_padded(g);
  /* The ReLU mask's mean / scale / shift, kept apart from the dx coefficients. */
  float *mask = (float *)shares_end(&s);
  /* A residual gradient written fresh streams as dx does (read back by the
   * second pass below from memory either way). */
  cpu_bn_residual rs = {0};
  if (b->res) rs = *b->res, rs.dr_stream = g->stream && !b->res->dr_add;
  const cpu_bn_residual *res = b->res ? &rs : NULL;
  const cpu_bn_partner *q = relu == MODE_ADD_RELU ? b->res->partner : NULL; /* bnorm_pair.c */
  shares_reset(&s);
#pragma omp parallel num_threads(g->threads)
  {
#pragma omp single
    for (int64_t c = 0; c < cp; c++) {
      const int real = c < g->c;
      const double inv_std = real ? 1.0 / sqrt((double)b->var[c] + b->eps) : 0.0;
      s.k[c] = real ? b->mean[c] : 0.0f;
      s.a[c] = mask[c] = real ? (float)(inv_std * (b->gamma ? b->gamma[c] : 1.0f)) : 0.0f;
      s.b[c] = mask[cp + c] = real && b->beta ? b->beta[c] : 0.0f;
      if (q) s.k2[c] = real ? q->mean[c] : 0.0f;
    }
    if (q)
      cpu_bn_pair_sums(g, &s, b->x, b->dy, res);
    else
      sum_tiles(g, &t, &s, b->x, b->dy, L, bf16, 1, relu, res);
    if (rs.dr_stream) __builtin_ia32_sfence();
#pragma omp barrier
#pragma omp single
    {
      finish_backward(b, &s, mask);
      if (q) cpu_bn_pair_finish(g, &s, q);
    }
    /* With a residual whose gradient the sums pass wrote (not added), that
     * gradient is the masked dy: read it instead of dy and the mask. */
    if (q)
      cpu_bn_pair_dx(g, &s, b->x, b->dy, b->dx, b->accumulate, res);
    else if (b->dx && relu == MODE_ADD_RELU && res->dr && !res->dr_add)
      dx_tiles(g, &t, &s, mask, b->x, res->dr, b->dx, b->accumulate, L, bf16, MODE_PLAIN, NULL);
    else if (b->dx)
      dx_tiles(g, &t, &s, mask, b->x, b->dy, b->dx, b->accumulate, L, bf16, relu, res);
    if (g->stream) __builtin_ia32_sfence();
  }
}

size_t cpu_bn_bwd_scratch_bytes(const cpu_bn_geom *g) {
  return cpu_bn_scratch_bytes(g) + 2 * channels_padded(g) * sizeof(float) + 64;
}

void cpu_bn_backward(const cpu_bn_geom *g, const void *x, const void *dy, void *dx, int accumulate, const float *mean,
                     const float *var, const float *gamma, const float *beta, float eps, int batch, int relu,
                     const cpu_bn_residual *res, float *dgamma, float *dbeta, char *scratch) {
  const bwd_args b = {g, x, dy, dx, accumulate, mean, var, gamma, beta, eps, batch, dgamma, dbeta, res, scratch};
  DISPATCH(backward_body, &b, g, res ? MODE_ADD_RELU : relu ? MODE_RELU : MODE_PLAIN);
}
#endif
