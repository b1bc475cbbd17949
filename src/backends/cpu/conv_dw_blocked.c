/* The weight gradient of a 1x1, stride-1 bf16 convolution whose activations
 * are in oneDNN's 16-channel blocked layout (aBcd16b: [N][C/16][H W][16]),
 * written straight into the plain f32 master gradient:
 *
 *   dW[o][i] (+)= sum over positions p of dY[p][o] X[p][i]
 *
 * Why: on a machine without AMX (AMD Zen 5: AVX512-BF16 only), oneDNN 2.6
 * picks that layout for bf16 training and runs this product in its
 * jit_bf16_1x1 backward-weights kernel at less than half the rate of the same
 * layer's forward (ResUNet-50, batch 16: 268 ms a step against 120 ms), then
 * reorders its blocked f32 result to the plain gradient (another 19 ms). The
 * AMX machines' channels-last layouts never reach this file.
 *
 * How: vdpbf16ps multiplies pairs. Two neighbouring positions of a 16-channel
 * block are one 64-byte load; one word permute interleaves them so that each
 * 32-bit lane holds one channel at both positions. A chunk of positions is
 * turned into such pairs once (X for all input blocks, dY for this thread's
 * output rows), then tiles of R output channels x 32 input channels stay in
 * registers: per pair of positions, two X vectors and R broadcast dY pairs
 * make 2R dot products. An image's odd last position pairs with zero.
 * Threads own disjoint rows of dW (no reduction, no dependence on timing);
 * each chunk's sums are added to f32 dW, as oneDNN does. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

int cpu_conv_use_dw_blocked = 1;

enum {
  R = 8,                     /* output channels per tile (broadcasts) */
  CHUNK_X_BYTES = 256 << 10, /* X of one chunk: L2-resident while the tiles walk it */
  MAX_CHUNK = 512,           /* positions per chunk */
  MIN_CHUNK = 32,
  BLOCK = 16,                      /* channels per block of the layout */
  SPLIT_POSITIONS_MAX = 128 << 10, /* dW values up to which threads split positions (512 KB each) */
  PREFETCH = 64                    /* positions ahead in the transform: activations come from memory */
};

static int64_t chunk_positions(int64_t ic) {
  int64_t c = CHUNK_X_BYTES / (2 * ic);
  c = c > MAX_CHUNK ? MAX_CHUNK : c < MIN_CHUNK ? MIN_CHUNK : c;
  return c & ~(int64_t)1;
}

int cpu_dw_blocked_fits(int64_t oc, int64_t ic) {
#ifdef __AVX512BF16__
  return cpu_conv_use_dw_blocked && oc > 0 && ic > 0 && oc % BLOCK == 0 && ic % (2 * BLOCK) == 0;
#else
  (void)oc, (void)ic;
  return 0;
#endif
}

/* A thread's pairs: a chunk of c positions makes at most c pairs (each
 * holds one or two), for every input and output block. */
static size_t pair_bytes(int64_t oc, int64_t ic) { return (size_t)((ic + oc) / BLOCK * chunk_positions(ic) * 64 + 64); }
static int split_positions(int64_t oc, int64_t ic);

/* The pairs of each thread, then (split by positions) the other threads' dW. */
size_t cpu_dw_blocked_scratch_bytes(int64_t oc, int64_t ic, int threads) {
  size_t b = (size_t)threads * pair_bytes(oc, ic) + 64;
  if (split_positions(oc, ic)) b += (size_t)(threads - 1) * (size_t)(oc * ic) * sizeof(float);
  return b;
}

#ifdef __AVX512BF16__
/* out[k] = positions p, p + 1 of one channel block interleaved (lane c holds
 * channel c at both), for the positions [g0, g1) of an N x hw tensor with
 * nb blocks. Returns the number of pairs. */
static int64_t pairs_of_block(const uint16_t *t, int64_t nb, int64_t b, int64_t hw, int64_t g0, int64_t g1,
                              __m512i *out) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  int64_t k = 0;
  for (int64_t g = g0; g < g1;) {
    const int64_t n = g / hw, p = g % hw, end = (n + 1) * hw < g1 ? (n + 1) * hw : g1, len = end - g;
    const uint16_t *row = t + ((n * nb + b) * hw + p) * BLOCK;
    for (int64_t q = 0; q + 1 < len; q += 2) {
      _mm_prefetch((const char *)(row + (q + PREFETCH) * BLOCK), _MM_HINT_T0);
      out[k++] = _mm512_permutexvar_epi16(interleave, _mm512_loadu_si512(row + q * BLOCK));
    }
    if (len & 1)
      out[k++] = _mm512_permutexvar_epi16(
          interleave, _mm512_zextsi256_si512(_mm256_loadu_si256((const void *)(row + (len - 1) * BLOCK))));
    g = end;
  }
  return k;
}

/* dW rows o0 .. o0 + R - 1, columns i0 .. i0 + 31, over kp pairs: dy holds
 * the pairs of o0's block (lane o % 16 of each), x0 / x1 the two input blocks.
 * first: start from zero instead of dW. */
INLINE void tile(const __m512i *dy, int lane0, const __m512i *x0, const __m512i *x1, int64_t kp, float *dw, int64_t ic,
                 int first) {
  __m512 acc[R][2];
  VEC_UNROLL
  for (int r = 0; r < R; r++)
    for (int j = 0; j < 2; j++) acc[r][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(dw + r * ic + j * BLOCK);
  for (int64_t k = 0; k < kp; k++) {
    const __m512bh a0 = (__m512bh)x0[k], a1 = (__m512bh)x1[k];
    const int32_t *pair = (const int32_t *)&dy[k] + lane0;
    VEC_UNROLL
    for (int r = 0; r < R; r++) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32(pair[r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a0, b);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a1, b);
    }
  }
  VEC_UNROLL
  for (int r = 0; r < R; r++)
    for (int j = 0; j < 2; j++) _mm512_storeu_ps(dw + r * ic + j * BLOCK, acc[r][j]);
}

/* The chunks [c_lo, c_hi) of positions for the output rows of tile groups
 * [g0, g1), added into (or, first: written to) t, a plain oc x ic array. */
static void run_chunks(const uint16_t *dy, const uint16_t *x, int64_t hw, int64_t total, int64_t oc, int64_t ic,
                       int64_t c_lo, int64_t c_hi, int64_t g0, int64_t g1, float *t, __m512i *xt, int first) {
  const int64_t chunk = chunk_positions(ic), nib = ic / BLOCK, nob = oc / BLOCK;
  __m512i *dyt = xt + nib * chunk;
  for (int64_t c = c_lo; c < c_hi; c++) {
    const int64_t p0 = c * chunk, p1 = p0 + chunk < total ? p0 + chunk : total;
    int64_t kp = 0;
    for (int64_t b = 0; b < nib; b++) kp = pairs_of_block(x, nib, b, hw, p0, p1, xt + b * chunk);
    for (int64_t b = g0 * R / BLOCK; b <= (g1 * R - 1) / BLOCK; b++)
      pairs_of_block(dy, nob, b, hw, p0, p1, dyt + b * chunk);
    for (int64_t g = g0; g < g1; g++) {
      const int64_t o = g * R, b = o / BLOCK;
      for (int64_t i = 0; i < ic; i += 2 * BLOCK)
        tile(dyt + b * chunk, (int)(o % BLOCK), xt + (i / BLOCK) * chunk, xt + (i / BLOCK + 1) * chunk, kp,
             t + o * ic + i, ic, first && c == c_lo);
    }
  }
}
#endif

/* Threads split the positions when dW is small (each sums its share into its
 * own copy, added in thread order at the end): then each reads only its part
 * of X and dY. A large dW (deep layers, few positions) is split by rows
 * instead, and each thread reads all of X. */
static int split_positions(int64_t oc, int64_t ic) { return oc * ic <= SPLIT_POSITIONS_MAX; }

void cpu_dw_blocked(const uint16_t *dy, const uint16_t *x, int64_t n, int64_t hw, int64_t oc, int64_t ic, float *dw,
                    char *scratch, int threads, int fresh) {
#ifdef __AVX512BF16__
  const int64_t chunk = chunk_positions(ic), total = n * hw, chunks = (total + chunk - 1) / chunk, groups = oc / R;
  const size_t share = pair_bytes(oc, ic);
  float *partial = (float *)(((uintptr_t)scratch + (size_t)threads * share + 63) & ~(uintptr_t)63);
  const int by_positions = split_positions(oc, ic);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    __m512i *xt = (__m512i *)(((uintptr_t)scratch + (size_t)t * share + 63) & ~(uintptr_t)63);
    if (by_positions) {
      const int64_t c_lo = chunks * t / nt, c_hi = chunks * (t + 1) / nt;
      float *mine = t == 0 ? dw : partial + (size_t)(t - 1) * (size_t)(oc * ic);
      run_chunks(dy, x, hw, total, oc, ic, c_lo, c_hi, 0, groups, mine, xt, t > 0 || fresh);
#pragma omp barrier
      /* dW = (thread 0's sums, or zero where it had none and dW is fresh) + the others', in thread order. */
      const int64_t r0 = oc * t / nt, r1 = oc * (t + 1) / nt;
      for (int64_t o = r0; o < r1; o++)
        for (int64_t i = 0; i < ic; i++) {
          float v = chunks * 1 / nt > 0 || !fresh ? dw[o * ic + i] : 0.0f;
          for (int u = 1; u < nt; u++)
            if (chunks * (u + 1) / nt > chunks * u / nt) v += partial[(size_t)(u - 1) * (size_t)(oc * ic) + o * ic + i];
          dw[o * ic + i] = v;
        }
    } else {
      const int64_t g0 = groups * t / nt, g1 = groups * (t + 1) / nt;
      run_chunks(dy, x, hw, total, oc, ic, 0, chunks, g0, g1, dw, xt, fresh);
      if (chunks == 0 && fresh)
        for (int64_t o = g0 * R; o < g1 * R; o++)
          for (int64_t i = 0; i < ic; i++) dw[o * ic + i] = 0.0f;
    }
  }
#else
  (void)dy, (void)x, (void)n, (void)hw, (void)oc, (void)ic, (void)dw, (void)scratch, (void)threads, (void)fresh;
#endif
}
#endif
