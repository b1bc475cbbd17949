/* The heatmap head's three per-tile products (conv_softargmax.c) on AMX
 * tiles, for bf16 plans on channels-last input with C a multiple of 32:
 *
 *   logits   L[k, p]  = sum_c W[k, c] X[p, c]    (f32, a heatmap's positions side by side)
 *   dW       dW[k, c] += sum_p dL[k, p] X[p, c]  (f32, the thread's sum)
 *   dX       dX[p, c] (=|+=) sum_k dL[k, p] W[k, c]   (bf16, channels-last rows)
 *
 * Why: through oneDNN 2.6's matmul primitive, one call per 1024-position
 * tile, these ran at about 190 GFLOP/s on one thread (the [68 x 32] x
 * [32 x 1024] forward took 23 us; the primitive repacks its B operand on
 * every call): 37 of the head's 57 ms per ResUNet-50 bf16 step at batch 16.
 * With the operands arranged here as the tile instruction reads them, each
 * tile's products are a few microseconds.
 *
 * tdpbf16ps C[16 x 16 f32] += A[16 x 32 bf16] B[32 x 16 bf16] wants B "VNNI":
 * row r holds, per output column, the pair of K values 2r and 2r + 1. So:
 * - logits: A = W's rows as they are; B = X's 16 positions x 32 channels read
 *   as 16 x 16 dwords (channel pairs) and transposed (transpose16);
 * - dW: A = dL's rows as they are (32 positions); B = two positions' rows of
 *   16 channels interleaved value by value (one vpermw a pair);
 * - dX: B = W with heatmap pairs interleaved (made once per step); A = dL^T:
 *   heatmap pairs interleaved, then the dword transpose.
 *
 * Rows of a tile are a multiple of 32; heatmaps come in kp (multiple of 16)
 * rows of W and L, and kp32 (multiple of 32) rows of dL and W's pairs: the
 * caller keeps the rows past the real heatmaps zero (0 x a stale NaN is NaN).
 * AMX state: each call loads the tile configuration (other kernels on the
 * thread, oneDNN's included, load their own) and releases the tiles. */
#ifdef SPRY_HAVE_DNNL
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/cpu/amx.h"
#include "backends/cpu/cpu.h"

/* The CPU has AMX-BF16, oneDNN may use it (ONEDNN_MAX_CPU_ISA caps spry's own
 * AMX kernels too: one switch for all) and the kernel lets this process use
 * the tile state (arch_prctl XTILEDATA, Linux >= 5.16). */
int cpu_amx_usable(void) {
  static int known = -1;
  if (known >= 0) return known;
  known = 0;
#ifdef SYS_arch_prctl
  if ((dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx)
    known = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
  return known;
}

/* B operands of the logits for 16 positions from x (rows of c): per step of
 * 32 channels, 16 rows of 64 bytes. */
AMX_FN static void logits_b(const uint16_t *x, int64_t c, uint16_t *bt) {
  for (int64_t s = 0; s < c / 32; s++) {
    __m512i v[16];
#pragma GCC unroll 16
    for (int n = 0; n < 16; n++) v[n] = _mm512_loadu_si512(x + n * c + 32 * s);
    transpose16(v);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) _mm512_store_si512(bt + s * 512 + r * 32, v[r]);
  }
}

/* One heatmap block x two position blocks per step (tiles 0-1 accumulate,
 * A in 2, B in 3-4). Four accumulators ran no faster: the time goes to
 * storing the f32 logits (80 x 1024 of them, L2-resident), and the
 * transposes. */
AMX_FN void cpu_amx_head_logits(const uint16_t *w, const uint16_t *x, float *l, int64_t ldl, int64_t c, int64_t kp,
                                int64_t rows, uint16_t *bt) {
  tiles_configure();
  const int64_t steps = c / 32;
  uint16_t *bt2 = bt + steps * 512;
  for (int64_t p0 = 0; p0 < rows; p0 += 32) {
    logits_b(x + p0 * c, c, bt);
    logits_b(x + (p0 + 16) * c, c, bt2);
    for (int64_t m = 0; m < kp; m += 16) {
      _tile_zero(0);
      _tile_zero(1);
      for (int64_t s = 0; s < steps; s++) {
        _tile_loadd(2, w + m * c + 32 * s, c * 2);
        _tile_loadd(3, bt + s * 512, 64);
        _tile_loadd(4, bt2 + s * 512, 64);
        _tile_dpbf16ps(0, 2, 3);
        _tile_dpbf16ps(1, 2, 4);
      }
      _tile_stored(0, l + m * ldl + p0, ldl * 4);
      _tile_stored(1, l + m * ldl + p0 + 16, ldl * 4);
    }
  }
  _tile_release();
}

/* Up to six accumulators (tiles 0-5) per pass over the positions; tile 6
 * holds A, tile 7 B. */
#define DW_TILE(i)                                          \
  do {                                                      \
    if (g > i) {                                            \
      _tile_loadd(6, dl + (m + 16 * i) * ldd + p, ldd * 2); \
      _tile_dpbf16ps(i, 6, 7);                              \
    }                                                       \
  } while (0)
#define DW_MOVE(op, i)                                        \
  do {                                                        \
    if (g > i) op(i, dw + (m + 16 * i) * c + cb * 16, c * 4); \
  } while (0)

AMX_FN void cpu_amx_head_dw(const uint16_t *dl, int64_t ldd, const uint16_t *x, float *dw, int64_t c, int64_t kp,
                            int64_t rows, uint16_t *xp) {
  /* xp: per block of 16 channels, per pair of positions, the pair's two rows
   * interleaved (a B row). */
  const int64_t pairs = rows / 2;
  for (int64_t cb = 0; cb < c / 16; cb++)
    for (int64_t q = 0; q < pairs; q++)
      _mm512_store_si512(xp + (cb * pairs + q) * 32,
                         interleave16(x + 2 * q * c + cb * 16, x + (2 * q + 1) * c + cb * 16));
  tiles_configure();
  for (int64_t cb = 0; cb < c / 16; cb++)
    for (int64_t m = 0; m < kp; m += 96) {
      const int64_t g = (kp - m) / 16 < 6 ? (kp - m) / 16 : 6;
      DW_MOVE(_tile_loadd, 0);
      DW_MOVE(_tile_loadd, 1);
      DW_MOVE(_tile_loadd, 2);
      DW_MOVE(_tile_loadd, 3);
      DW_MOVE(_tile_loadd, 4);
      DW_MOVE(_tile_loadd, 5);
      for (int64_t p = 0; p < rows; p += 32) {
        _tile_loadd(7, xp + (cb * pairs + p / 2) * 32, 64);
        DW_TILE(0);
        DW_TILE(1);
        DW_TILE(2);
        DW_TILE(3);
        DW_TILE(4);
        DW_TILE(5);
      }
      DW_MOVE(_tile_stored, 0);
      DW_MOVE(_tile_stored, 1);
      DW_MOVE(_tile_stored, 2);
      DW_MOVE(_tile_stored, 3);
      DW_MOVE(_tile_stored, 4);
      DW_MOVE(_tile_stored, 5);
    }
  _tile_release();
}

void cpu_amx_head_w_pairs(const uint16_t *w, int64_t k, int64_t c, int64_t kp32, uint16_t *wv) {
  for (int64_t j = 0; j < kp32 / 2; j++)
    for (int64_t i = 0; i < c; i++)
      for (int e = 0; e < 2; e++) wv[(j * c + i) * 2 + e] = 2 * j + e < k ? w[(2 * j + e) * c + i] : 0;
}

AMX_FN void cpu_amx_head_dx(const uint16_t *dl, int64_t ldd, const uint16_t *wv, uint16_t *dx, int64_t c, int64_t kp32,
                            int64_t rows, int accumulate, int stream, uint16_t *at, float *ct) {
  tiles_configure();
  const int64_t steps = kp32 / 32;
  for (int64_t p0 = 0; p0 < rows; p0 += 16) {
    for (int64_t s = 0; s < steps; s++) { /* A: 16 positions x heatmaps 32s..32s+31 */
      __m512i v[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++)
        v[j] = interleave16(dl + (32 * s + 2 * j) * ldd + p0, dl + (32 * s + 2 * j + 1) * ldd + p0);
      transpose16(v);
#pragma GCC unroll 16
      for (int n = 0; n < 16; n++) _mm512_store_si512(at + s * 512 + n * 32, v[n]);
    }
    for (int64_t cb = 0; cb < c / 16; cb++) {
      _tile_zero(0);
      for (int64_t s = 0; s < steps; s++) {
        _tile_loadd(1, at + s * 512, 64);
        _tile_loadd(2, wv + (16 * s * c + cb * 16) * 2, c * 4);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, ct + cb * 16, c * 4);
    }
    uint16_t *d = dx + p0 * c;
    for (int64_t i = 0; i < 16 * c; i += 16) {
      __m512 v = _mm512_load_ps(ct + i);
      if (accumulate)
        v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(
                                 _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(d + i))), 16)));
      const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
      if (stream && ((uintptr_t)(d + i) & 31) == 0) /* past the caches (the caller's sfence) */
        _mm256_stream_si256((__m256i *)(d + i), h);
      else
        _mm256_storeu_si256((__m256i *)(d + i), h);
    }
  }
  _tile_release();
}
#endif
