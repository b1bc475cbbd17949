/* A frozen f32 plan's 1x1 stride-1 convolution on 16-channel blocks, of our
 * own (AVX-512 builds): Y = W X + b', the batch norm after it folded into W
 * and b', then the residual add and the ReLU where the plan absorbed them.
 *
 * Why: oneDNN 2.6's 1x1 kernel ran ResUNet-50's 1x1 layers at batch 64 at
 * 200-290 GFLOP/s on a 2-core Xeon (AVX-512, fp32 FMA peak about 350 with
 * both cores), 55-60% of an f32 inference step. The same products in this
 * file's loops ran at 300-320 on the same shapes (bench/README_train.md).
 *
 * The product: per image and tile of positions (the tile's input, about
 * cpu_c1_tile_floats values, stays in L2 while every group of output
 * channels passes over it), a register block of MP positions x NV output
 * vectors (7 x 4, 14 x 2 or 28 x 1: 28 accumulators), over the input
 * channels one at a time: NV weight vectors loaded, one broadcast a
 * position. Weights packed once [OC / (16 NV)][IC / 16][16][16 NV]: a group's
 * weights are one contiguous run read in order. A tile's last positions
 * that do not fill a block take blocks of 8, 4, 2 and 1 positions.
 *
 * Outputs larger than cpu_stream_threshold() are written past the caches
 * (the next layer reads them from memory either way).
 *
 * Threads: items (image, tile, group of output-channel groups) split evenly
 * and contiguously; the groups are split only where images x tiles leave a
 * thread fewer than 4 items (batch 1 on 7x7 maps). */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

int cpu_conv_use_own_1x1 = 1;
/* Input values a tile (1x1 layers of ResUNet-50 f32 at batch 64, 2 threads,
 * Xeon: 64K (256 KB) against 16K-256K, best or within 2%). */
int64_t cpu_c1_tile_floats = 65536;
/* Weight bytes a chunk of input channels (kept in L1 while the chunk runs
 * over a tile's positions). */
int64_t cpu_c1_chunk_bytes = 32768;
long cpu_c1_calls;

#ifdef __AVX512F__
enum { L = 16 };

/* Whether a block starts from Y's partial sums (a later chunk of input
 * channels) and whether it ends them (the last chunk: + res, ReLU). */
enum { PART_FROM_Y = 1, PART_LAST = 2 };

/* MP positions x NV output vectors over cb_n blocks of input channels;
 * after the last chunk + res, ReLU, store (streamed when asked). x: the block's first position in input
 * block 0; w: the group's packed weights; y / r: the first position in the
 * group's first output block; stride: one channel block's values. A macro
 * per (NV, MP), not a function of them: the accumulators must be an array
 * of constant size for GCC to keep them in registers. */
#define DEFINE_BLOCK(NV, MP)                                                                                           \
  static void block_##NV##_##MP(const float *x, const float *w, const float *bias, const float *r, float *y,           \
                                int64_t stride, int64_t cb_n, int relu, int stream, int part) {                        \
    __m512 acc[MP][NV];                                                                                                \
    VEC_UNROLL for (int j = 0; j < MP; j++) {                                                                          \
      VEC_UNROLL for (int v = 0; v < NV; v++) acc[j][v] = part & PART_FROM_Y ? _mm512_loadu_ps(y + v * stride + j * L) \
                                                          : bias             ? _mm512_loadu_ps(bias + v * L)           \
                                                                             : _mm512_setzero_ps();                                \
    }                                                                                                                  \
    for (int64_t cb = 0; cb < cb_n; cb++) {                                                                            \
      const float *xc = x + cb * stride, *wc = w + cb * L * NV * L;                                                    \
      VEC_UNROLL for (int i = 0; i < L; i++) {                                                                         \
        __m512 wv[NV];                                                                                                 \
        VEC_UNROLL for (int v = 0; v < NV; v++) wv[v] = _mm512_loadu_ps(wc + (i * NV + v) * L);                        \
        VEC_UNROLL for (int j = 0; j < MP; j++) {                                                                      \
          const __m512 b = _mm512_set1_ps(xc[j * L + i]);                                                              \
          VEC_UNROLL for (int v = 0; v < NV; v++) acc[j][v] = _mm512_fmadd_ps(b, wv[v], acc[j][v]);                    \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
    VEC_UNROLL for (int v = 0; v < NV; v++) {                                                                          \
      VEC_UNROLL for (int j = 0; j < MP; j++) {                                                                        \
        __m512 o = acc[j][v];                                                                                          \
        if (part & PART_LAST) {                                                                                        \
          if (r) o = _mm512_add_ps(o, _mm512_loadu_ps(r + v * stride + j * L));                                        \
          if (relu) o = _mm512_max_ps(o, _mm512_setzero_ps());                                                         \
        }                                                                                                              \
        if (stream && (part & PART_LAST))                                                                              \
          _mm512_stream_ps(y + v * stride + j * L, o);                                                                 \
        else                                                                                                           \
          _mm512_storeu_ps(y + v * stride + j * L, o);                                                                 \
      }                                                                                                                \
    }                                                                                                                  \
  }
DEFINE_BLOCK(4, 7)
DEFINE_BLOCK(4, 4)
DEFINE_BLOCK(4, 2)
DEFINE_BLOCK(4, 1)
DEFINE_BLOCK(2, 14)
DEFINE_BLOCK(2, 8)
DEFINE_BLOCK(2, 4)
DEFINE_BLOCK(2, 2)
DEFINE_BLOCK(2, 1)
DEFINE_BLOCK(1, 28)
DEFINE_BLOCK(1, 8)
DEFINE_BLOCK(1, 4)
DEFINE_BLOCK(1, 2)
DEFINE_BLOCK(1, 1)

/* Positions [p, p1) of one group: full blocks of MP, then the rest in blocks
 * of 8 (M8: 8 where MP is larger), 4, 2 and 1 (never past the tile). */
#define CALL(NV, MP) block_##NV##_##MP(X(p), w, bias, R(p), Y(p), stride, kc, relu, stream, part)
#define RUN_BLOCKS(NV, MP, M8)                            \
  do {                                                    \
    for (; p + (MP) <= p1; p += (MP)) CALL(NV, MP);       \
    for (; (MP) > 8 && p + 8 <= p1; p += 8) CALL(NV, M8); \
    for (; p + 4 <= p1; p += 4) CALL(NV, 4);              \
    for (; p + 2 <= p1; p += 2) CALL(NV, 2);              \
    for (; p < p1; p++) CALL(NV, 1);                      \
  } while (0)

/* Positions [p0, p1) of image img, output groups [g0, g1): per group, the
 * input channels in chunks whose weights stay in L1 (c->chunk blocks), each
 * chunk over every position of the tile, partial sums kept in Y. */
static void run_item(const cpu_c1 *c, const float *wp, const float *x_img, const float *bias_all, const float *r_img,
                     float *y_img, int64_t p0, int64_t p1, int64_t g0, int64_t g1, int stream) {
  const int64_t stride = c->hw * L, cb_n = c->ic / L, gw = (int64_t)c->nv * L;
  const int relu = c->relu;
#define X(q) (x + (q)*L)
#define R(q) (r ? r + (q)*L : NULL)
#define Y(q) (y + (q)*L)
  for (int64_t g = g0; g < g1; g++) {
    const float *r = r_img ? r_img + g * c->nv * stride : NULL;
    float *y = y_img + g * c->nv * stride;
    for (int64_t cb0 = 0; cb0 < cb_n; cb0 += c->chunk) {
      const int64_t kc = cb_n - cb0 < c->chunk ? cb_n - cb0 : c->chunk;
      const int part = (cb0 > 0 ? PART_FROM_Y : 0) | (cb0 + kc == cb_n ? PART_LAST : 0);
      const float *x = x_img + cb0 * stride, *w = wp + (g * cb_n + cb0) * L * gw;
      const float *bias = bias_all ? bias_all + g * gw : NULL;
      int64_t p = p0;
      if (c->nv == 4)
        RUN_BLOCKS(4, 7, 4); /* (no block of 8: 7 is the largest) */
      else if (c->nv == 2)
        RUN_BLOCKS(2, 14, 8);
      else
        RUN_BLOCKS(1, 28, 8);
    }
  }
#undef X
#undef R
#undef Y
}
#endif

int cpu_c1_prepare(cpu_c1 *c, const cpu_conv_shape *s, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                   int relu, const dnnl_memory_desc_t *add) {
#ifdef __AVX512F__
  memset(c, 0, sizeof *c);
  if (!cpu_conv_use_own_1x1 || !sp_backend_cpu_avx512() || s->kh != 1 || s->kw != 1 || s->sh != 1 || s->sw != 1 ||
      s->pt != 0 || s->pl != 0 || s->oh != s->ih || s->ow != s->iw || s->ic % L != 0 || s->oc % (2 * L) != 0 ||
      src->data_type != dnnl_f32 || dst->data_type != dnnl_f32 || cpu_md_lanes(src) != L || cpu_md_lanes(dst) != L ||
      (add && !cpu_md_equal(add, dst)))
    return 1;
  c->n = s->n, c->hw = s->ih * s->iw, c->ic = s->ic, c->oc = s->oc, c->relu = relu, c->add = add != NULL;
  c->nv = s->oc % (4 * L) == 0 ? 4 : s->oc % (2 * L) == 0 ? 2 : 1;
  const int64_t mp = 28 / c->nv, want = cpu_c1_tile_floats / c->ic;
  c->tile = want < mp ? mp : want / mp * mp;
  if (c->tile > c->hw) c->tile = c->hw;
  c->tiles = (c->hw + c->tile - 1) / c->tile;
  c->chunk = cpu_c1_chunk_bytes / (int64_t)(sizeof(float) * L * L * c->nv);
  if (c->chunk < 1) c->chunk = 1;
  const int64_t groups = c->oc / (c->nv * L), threads = omp_get_max_threads();
  c->group_chunks = 1;
  while (c->group_chunks < groups && c->n * c->tiles * c->group_chunks < 4 * threads) c->group_chunks++;
  c->per_chunk = (groups + c->group_chunks - 1) / c->group_chunks;
  c->stream = (int64_t)sizeof(float) * c->n * c->hw * c->oc >= cpu_stream_threshold();
  return 0;
#else
  (void)c, (void)s, (void)src, (void)dst, (void)relu, (void)add;
  return 1;
#endif
}

size_t cpu_c1_weight_bytes(const cpu_c1 *c) { return sizeof(float) * (size_t)(c->ic * c->oc); }

void cpu_c1_weights(const cpu_c1 *c, float *wp, const float *w) {
  const int64_t gw = (int64_t)c->nv * 16, cb_n = c->ic / 16;
  for (int64_t o = 0; o < c->oc; o++) {
    const int64_t g = o / gw, lane = o % gw;
    for (int64_t i = 0; i < c->ic; i++) wp[((g * cb_n + i / 16) * 16 + i % 16) * gw + lane] = w[o * c->ic + i];
  }
}

void cpu_c1_run(const cpu_c1 *c, const float *wp, const float *x, const float *bias, const float *res, float *y) {
#ifdef __AVX512F__
  __atomic_add_fetch(&cpu_c1_calls, 1, __ATOMIC_RELAXED);
  const int stream = c->stream && ((uintptr_t)y & 63) == 0;
  const int64_t items = c->n * c->tiles * c->group_chunks, groups = c->oc / (c->nv * L);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t i0 = items * t / nt, i1 = items * (t + 1) / nt;
    for (int64_t it = i0; it < i1; it++) {
      const int64_t chunk = it % c->group_chunks, tile = it / c->group_chunks % c->tiles,
                    img = it / c->group_chunks / c->tiles;
      const int64_t p0 = tile * c->tile, p1 = p0 + c->tile < c->hw ? p0 + c->tile : c->hw;
      const int64_t g0 = chunk * c->per_chunk, g1 = g0 + c->per_chunk < groups ? g0 + c->per_chunk : groups;
      run_item(c, wp, x + img * c->ic * c->hw, bias, res ? res + img * c->oc * c->hw : NULL, y + img * c->oc * c->hw,
               p0, p1, g0, g1, stream);
    }
    if (stream) _mm_sfence();
  }
#else
  (void)c, (void)wp, (void)x, (void)bias, (void)res, (void)y;
#endif
}
#endif
