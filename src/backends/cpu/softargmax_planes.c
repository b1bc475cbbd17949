/* The heatmap head's per-tile products (conv_softargmax.c) on planes for
 * f32 plans on 16-channel blocks (AVX-512 builds): the tile's input turned
 * into planes (a channel's positions side by side, planes.h), then
 *
 *   logits   L[k][p]  = sum over c of W[k][c] X[c][p]      (8 heatmaps x 32 positions a step)
 *   dX       dX[c][p] = sum over k of W[k][c] dL[k][p]     (8 channels x 32 positions a step)
 *   dW       dW[k][c] += sum over p of dL[k][p] X[c][p]    (4 x 4 sums of 16 lanes a step)
 *
 * and dX's planes turned back into the blocks. The logits and dL already
 * have a heatmap's positions side by side (the exponentials want them so),
 * so with X in planes every product is a sum of vectors against broadcast
 * weights, and no operand is transposed per product.
 *
 * Why: there oneDNN's matmuls ran each tile's three products as [68 x 32] x
 * [32 x 1024]-sized calls on one thread, 3136 calls in a ResUNet-50 f32
 * training step at batch 16 (four products a tile, the logits again in
 * backward), 100 ms a step at 140 GFLOP/s for the two threads (verbose
 * timing, Xeon without AMX, fp32 FMA peak 331): products with 32 or 68
 * terms and 68 x 1024 outputs are too short for its blocking. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/planes.h"
#include "backends/cpu/vec.h"

int cpu_conv_use_softargmax_planes = 1;
long cpu_planes_calls;

#ifdef __AVX512F__
enum { PB = 32 /* positions a product step */, DW_CHUNK = 256 /* positions whose X and dL rows stay in L1 */ };

static inline vf16 ld(const float *p) { return *(const vf16u *)p; }
static inline void st(float *p, vf16 v) { *(vf16u *)p = v; }

void cpu_planes_gather(const float *x, int64_t blocks, int64_t blk_stride, int64_t np, int64_t np32, float *xp,
                       int64_t ldx) {
  const int64_t full = np / 16 * 16, np16 = (np + 15) / 16 * 16;
  for (int64_t b = 0; b < blocks; b++) {
    const float *src = x + b * blk_stride;
    float *dst = xp + b * 16 * ldx;
    for (int64_t q = 0; q < full; q += 16) planes_transpose16(src + q * 16, 16, dst + q, ldx);
    if (full < np) { /* a short last group: through a zeroed block */
      float tmp[256] __attribute__((aligned(64))) = {0};
      memcpy(tmp, src + full * 16, sizeof(float) * (size_t)((np - full) * 16));
      planes_transpose16(tmp, 16, dst + full, ldx);
    }
    for (int i = 0; i < 16 && np16 < np32; i++) memset(dst + i * ldx + np16, 0, sizeof(float) * (size_t)(np32 - np16));
  }
}

void cpu_planes_scatter(const float *xp, int64_t ldx, int64_t blocks, int64_t blk_stride, int64_t np, float *x,
                        int accumulate) {
  for (int64_t b = 0; b < blocks; b++) {
    const float *src = xp + b * 16 * ldx;
    float *dst = x + b * blk_stride;
    for (int64_t q = 0; q < np; q += 16) {
      const int64_t n = np - q < 16 ? np - q : 16;
      if (n == 16 && !accumulate) {
        planes_transpose16(src + q, ldx, dst + q * 16, 16);
        continue;
      }
      float tmp[256] __attribute__((aligned(64)));
      planes_transpose16(src + q, ldx, tmp, 16);
      for (int64_t i = 0; i < n; i++)
        st(dst + (q + i) * 16, accumulate ? ld(dst + (q + i) * 16) + ld(tmp + i * 16) : ld(tmp + i * 16));
    }
  }
}

/* Heatmaps k0 .. k0 + kb of the logits, all positions, and a share of the
 * lines to prefetch at each step. */
static inline __attribute__((always_inline)) void logits_group(const float *xp, int64_t ldx, const float *w, int64_t c,
                                                               float *l, int64_t ldl, int64_t k0, const int kb,
                                                               int64_t np32, const cpu_tail_next *next, int64_t share,
                                                               int64_t *line) {
  vf16 acc[8][2];
  for (int64_t p = 0; p < np32; p += PB) {
    for (int64_t i = 0; i < share && *line < next->lines; i++, ++*line)
      for (int b = 0; b < next->blocks; b++) _mm_prefetch(next->at[b] + 64 * *line, _MM_HINT_T1);
    PLANES_PRODUCT(acc, kb, w + k0 * c, c, c, xp, ldx, p);
    VEC_UNROLL for (int i = 0; i < kb; i++) {
      st(l + (k0 + i) * ldl + p, acc[i][0]);
      st(l + (k0 + i) * ldl + p + 16, acc[i][1]);
    }
  }
}

void cpu_planes_logits(const float *xp, int64_t ldx, const float *w, int64_t c, float *l, int64_t ldl, int64_t k,
                       int64_t np32, const cpu_tail_next *next) {
  /* Groups of 8 heatmaps, the last of 4 where that covers it (68 = 8 x 8 +
   * 4: no products for 4 rows nobody reads). Groups outer: in the tail the
   * other order (all groups at each 32 positions) took 130-136 ms for the
   * node against 123-127 (3 alternating pairs); in training even. */
  const int64_t full = k / 8, last = k % 8 == 0 ? 0 : k % 8 <= 4 ? 4 : 8, groups = full + (last > 0);
  /* The tail's next band's input lines, a share each step: they arrive from
   * memory while these products run, not while its transposes wait. */
  const cpu_tail_next none = {.lines = 0};
  if (!next) next = &none;
  const int64_t steps = groups * (np32 / PB), share = (next->lines + steps - 1) / steps;
  int64_t line = 0;
  for (int64_t g = 0; g < full; g++) logits_group(xp, ldx, w, c, l, ldl, 8 * g, 8, np32, next, share, &line);
  if (last == 4) logits_group(xp, ldx, w, c, l, ldl, 8 * full, 4, np32, next, share, &line);
  if (last == 8) logits_group(xp, ldx, w, c, l, ldl, 8 * full, 8, np32, next, share, &line);
}

void cpu_planes_dx(const float *dl, int64_t ldd, const float *wt, int64_t kp, int64_t k, int64_t c, float *dxp,
                   int64_t ldx, int64_t np32) {
  vf16 acc[8][2];
  for (int64_t p = 0; p < np32; p += PB) /* the step's dL (k x 128 bytes) stays in L1 across the channel groups */
    for (int64_t c0 = 0; c0 < c; c0 += 8) {
      PLANES_PRODUCT(acc, 8, wt + c0 * kp, kp, k, dl, ldd, p);
      VEC_UNROLL for (int i = 0; i < 8; i++) {
        st(dxp + (c0 + i) * ldx + p, acc[i][0]);
        st(dxp + (c0 + i) * ldx + p + 16, acc[i][1]);
      }
    }
}

void cpu_planes_dw(const float *dl, int64_t ldd, const float *xp, int64_t ldx, int64_t k4, int64_t c, int64_t np32,
                   float *dwv) {
  for (int64_t p0 = 0; p0 < np32; p0 += DW_CHUNK) {
    const int64_t pe = np32 - p0 < DW_CHUNK ? np32 : p0 + DW_CHUNK;
    for (int64_t k0 = 0; k0 < k4; k0 += 4)
      for (int64_t c0 = 0; c0 < c; c0 += 4) {
        vf16 acc[4][4];
        VEC_UNROLL for (int i = 0; i < 4; i++) VEC_UNROLL for (int j = 0; j < 4; j++) acc[i][j] = (vf16){0};
        for (int64_t p = p0; p < pe; p += 16) {
          vf16 d[4], xv[4];
          VEC_UNROLL for (int i = 0; i < 4; i++) {
            d[i] = ld(dl + (k0 + i) * ldd + p);
            xv[i] = ld(xp + (c0 + i) * ldx + p);
          }
          VEC_UNROLL for (int i = 0; i < 4; i++) VEC_UNROLL for (int j = 0; j < 4; j++) acc[i][j] += d[i] * xv[j];
        }
        VEC_UNROLL for (int i = 0; i < 4; i++) VEC_UNROLL for (int j = 0; j < 4; j++) {
          float *at = dwv + ((k0 + i) * c + c0 + j) * 16;
          st(at, ld(at) + acc[i][j]);
        }
      }
  }
}
#else /* never taken below AVX-512 (cpu_planes_built) */
void cpu_planes_gather(const float *x, int64_t blocks, int64_t blk_stride, int64_t np, int64_t np32, float *xp,
                       int64_t ldx) {
  (void)x, (void)blocks, (void)blk_stride, (void)np, (void)np32, (void)xp, (void)ldx;
}
void cpu_planes_scatter(const float *xp, int64_t ldx, int64_t blocks, int64_t blk_stride, int64_t np, float *x,
                        int accumulate) {
  (void)xp, (void)ldx, (void)blocks, (void)blk_stride, (void)np, (void)x, (void)accumulate;
}
void cpu_planes_logits(const float *xp, int64_t ldx, const float *w, int64_t c, float *l, int64_t ldl, int64_t k,
                       int64_t np32, const cpu_tail_next *next) {
  (void)xp, (void)ldx, (void)w, (void)c, (void)l, (void)ldl, (void)k, (void)np32, (void)next;
}
void cpu_planes_dx(const float *dl, int64_t ldd, const float *wt, int64_t kp, int64_t k, int64_t c, float *dxp,
                   int64_t ldx, int64_t np32) {
  (void)dl, (void)ldd, (void)wt, (void)kp, (void)k, (void)c, (void)dxp, (void)ldx, (void)np32;
}
void cpu_planes_dw(const float *dl, int64_t ldd, const float *xp, int64_t ldx, int64_t k4, int64_t c, int64_t np32,
                   float *dwv) {
  (void)dl, (void)ldd, (void)xp, (void)ldx, (void)k4, (void)c, (void)np32, (void)dwv;
}
#endif

int cpu_planes_built(void) {
#ifdef __AVX512F__
  return 1;
#else
  return 0;
#endif
}
#endif
