/* The f32 weight gradient of a linear layer with few rows (the batch):
 * dW[n][k] (+)= sum_m dy[m][n] x[m][k], for linear_gemm.c.
 *
 * Why not sgemm: with 32-128 rows, dW is one big output written once for
 * few products per value (2m flops per 4 bytes), and oneDNN 2.6's sgemm
 * ('T', 'N') ran vgg-face's fc1 (batch 64, 6272 -> 1024, 2 threads) at
 * 4.6-5.3 ms, 150 GFLOP/s. Here each block of 6 dW rows x 64 columns is
 * summed over all m in 24 registers (x's 4 vectors loaded once a row, dy's 6
 * values broadcast), then stored once; a fresh gradient goes out with
 * streaming stores, so its 25 MB are not read first. Same layer: 2.9 ms
 * (about 290 GFLOP/s, 70% of the FMA peak). From about 256 rows sgemm's
 * blocking wins (11.5 against 13.7 ms): linear_gemm.c keeps it there.
 * Threads split the 64-column panels. Below AVX-512 the blocks are 6 x 16
 * from a packed copy of dy (the AVX2 section says why). */
#ifdef SPRY_HAVE_DNNL
#include <stdint.h>

#include "backends/cpu/cpu.h"

int cpu_linear_dw_max_rows = 128;

/* The kernels below exist from AVX2 + FMA on; without, sgemm. */
int cpu_linear_dw_applies(int64_t rows) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  return rows >= 1 && rows <= cpu_linear_dw_max_rows;
#else
  (void)rows;
  return 0;
#endif
}

#ifdef __AVX512F__
#include <immintrin.h>

enum { ROWS = 6, VECS = 4, PANEL = VECS * 16 };

#ifdef __OPTIMIZE__
#define UNROLL _Pragma("GCC unroll 8")
#else
#define UNROLL
#endif

/* One block: dW rows n0 .. n0 + nb - 1 (dy's columns), columns k0 .. k0 +
 * 16 kv - 1, the last vector masked by `last`. Inlined with constant nb and
 * kv for the full blocks, so the 24 sums stay in registers. */
static inline __attribute__((always_inline)) void dw_block(const float *dy, int64_t ldy, const float *x, int64_t m,
                                                           int64_t k, int nb, int kv, __mmask16 last, float *dw,
                                                           int accumulate) {
  __m512 c[ROWS][VECS];
  UNROLL for (int j = 0; j < ROWS; j++) UNROLL for (int i = 0; i < VECS; i++) c[j][i] = _mm512_setzero_ps();
  for (int64_t t = 0; t < m; t++) {
    const float *xr = x + t * k;
    __m512 xv[VECS];
    UNROLL for (int i = 0; i < VECS; i++) xv[i] =
        i < kv ? _mm512_maskz_loadu_ps(i == kv - 1 ? last : 0xffff, xr + i * 16) : _mm512_setzero_ps();
    UNROLL for (int j = 0; j < ROWS; j++) {
      if (j >= nb) break;
      const __m512 d = _mm512_set1_ps(dy[t * ldy + j]);
      UNROLL for (int i = 0; i < VECS; i++) if (i < kv) c[j][i] = _mm512_fmadd_ps(d, xv[i], c[j][i]);
    }
  }
  UNROLL for (int j = 0; j < ROWS; j++) {
    if (j >= nb) break;
    UNROLL for (int i = 0; i < VECS; i++) {
      if (i >= kv) break;
      const __mmask16 mk = i == kv - 1 ? last : 0xffff;
      float *o = dw + j * k + i * 16;
      if (accumulate)
        _mm512_mask_storeu_ps(o, mk, _mm512_add_ps(c[j][i], _mm512_maskz_loadu_ps(mk, o)));
      else if (mk == 0xffff && !((uintptr_t)o & 63))
        _mm512_stream_ps(o, c[j][i]); /* written once, not read: no fetch of the old line */
      else
        _mm512_mask_storeu_ps(o, mk, c[j][i]);
    }
  }
}

size_t cpu_linear_dw_pack_bytes(int64_t m, int64_t n) {
  (void)m, (void)n;
  return 0; /* reads dy in place */
}

void cpu_linear_dw_f32(const float *dy, const float *x, float *dw, int64_t m, int64_t n, int64_t k, int accumulate,
                       int threads, float *pack) {
  (void)pack;
  const int64_t panels = (k + PANEL - 1) / PANEL;
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < panels; p++) {
      const int64_t k0 = p * PANEL, left = k - k0;
      const int kv = left >= PANEL ? VECS : (int)((left + 15) / 16);
      const int64_t tail = left - (int64_t)(kv - 1) * 16;
      const __mmask16 last = tail >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1u);
      for (int64_t n0 = 0; n0 < n; n0 += ROWS) {
        const int nb = n - n0 < ROWS ? (int)(n - n0) : ROWS;
        float *o = dw + n0 * k + k0;
        if (nb == ROWS && kv == VECS && last == 0xffff)
          dw_block(dy + n0, n, x + k0, m, k, ROWS, VECS, 0xffff, o, accumulate);
        else
          dw_block(dy + n0, n, x + k0, m, k, nb, kv, last, o, accumulate);
      }
    }
    _mm_sfence(); /* each thread's streaming stores are out before the region ends */
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* Below AVX-512: blocks of 6 dW rows x 16 columns, 12 sums in the 16 ymm
 * registers. Read straight from dy, the block's 6 broadcasts a row touched a
 * new cache line every row (dy's rows are n floats apart) and the kernel ran
 * at sgemm's speed or below (Zen 3, 2 threads, vgg-face's fc1 at batch 64:
 * 7.9 against 5.9 ms). So dy is first packed, 6 of its columns at a time,
 * into runs of 6 values a row (256 KB there; scratch the plan provides):
 * 4.8-4.9 against sgemm's 5.9-6.0 ms, about 170 GFLOP/s. */
enum { ROWS = 6, VECS = 2, PANEL = VECS * 8 };

#ifdef __OPTIMIZE__
#define UNROLL _Pragma("GCC unroll 8")
#else
#define UNROLL
#endif

size_t cpu_linear_dw_pack_bytes(int64_t m, int64_t n) {
  return sizeof(float) * (size_t)(m * ((n + ROWS - 1) / ROWS * ROWS));
}

/* Group g holds dy's columns 6g .. 6g + 5 (zeros past n) as pk[g][t][j]. */
static void pack_group(const float *dy, float *pk, int64_t m, int64_t n, int64_t g) {
  float *o = pk + g * m * ROWS;
  for (int64_t t = 0; t < m; t++)
    for (int j = 0; j < ROWS; j++) {
      const int64_t c = g * ROWS + j;
      o[t * ROWS + j] = c < n ? dy[t * n + c] : 0.0f;
    }
}

/* One block: dW rows n0 .. n0 + nb - 1 from the packed group pk, columns
 * k0 .. k0 + 8 kv - 1, of which the last vector holds `tail` (1..8).
 * Inlined with constant nb, kv and tail for the full blocks. */
static inline __attribute__((always_inline)) void dw_block(const float *pk, const float *x, int64_t m, int64_t k,
                                                           int nb, int kv, int tail, float *dw, int accumulate) {
  const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 c[ROWS][VECS];
  UNROLL for (int j = 0; j < ROWS; j++) UNROLL for (int i = 0; i < VECS; i++) c[j][i] = _mm256_setzero_ps();
  for (int64_t t = 0; t < m; t++) {
    const float *xr = x + t * k;
    __m256 xv[VECS];
    UNROLL for (int i = 0; i < VECS; i++) xv[i] = i >= kv ? _mm256_setzero_ps()
                                                  : i < kv - 1 || tail == 8 ? _mm256_loadu_ps(xr + i * 8)
                                                                            : _mm256_maskload_ps(xr + i * 8, last);
    UNROLL for (int j = 0; j < ROWS; j++) {
      const __m256 d = _mm256_broadcast_ss(pk + t * ROWS + j);
      UNROLL for (int i = 0; i < VECS; i++) if (i < kv) c[j][i] = _mm256_fmadd_ps(d, xv[i], c[j][i]);
    }
  }
  UNROLL for (int j = 0; j < ROWS; j++) {
    if (j >= nb) break;
    UNROLL for (int i = 0; i < VECS; i++) {
      if (i >= kv) break;
      float *o = dw + j * k + i * 8;
      if (i == kv - 1 && tail < 8)
        _mm256_maskstore_ps(o, last, accumulate ? _mm256_add_ps(c[j][i], _mm256_maskload_ps(o, last)) : c[j][i]);
      else if (accumulate)
        _mm256_storeu_ps(o, _mm256_add_ps(c[j][i], _mm256_loadu_ps(o)));
      else if (!((uintptr_t)o & 31))
        _mm256_stream_ps(o, c[j][i]); /* written once, not read: no fetch of the old line */
      else
        _mm256_storeu_ps(o, c[j][i]);
    }
  }
}

void cpu_linear_dw_f32(const float *dy, const float *x, float *dw, int64_t m, int64_t n, int64_t k, int accumulate,
                       int threads, float *pack) {
  const int64_t panels = (k + PANEL - 1) / PANEL, groups = (n + ROWS - 1) / ROWS;
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; g++) pack_group(dy, pack, m, n, g);
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < panels; p++) {
      const int64_t k0 = p * PANEL, left = k - k0;
      const int kv = left >= PANEL ? VECS : (int)((left + 7) / 8);
      const int tail = (int)(left - (int64_t)(kv - 1) * 8 >= 8 ? 8 : left - (int64_t)(kv - 1) * 8);
      for (int64_t g = 0; g < groups; g++) {
        const int nb = n - g * ROWS < ROWS ? (int)(n - g * ROWS) : ROWS;
        const float *pk = pack + g * m * ROWS;
        float *o = dw + g * ROWS * k + k0;
        if (nb == ROWS && kv == VECS && tail == 8)
          dw_block(pk, x + k0, m, k, ROWS, VECS, 8, o, accumulate);
        else
          dw_block(pk, x + k0, m, k, nb, kv, tail, o, accumulate);
      }
    }
    _mm_sfence(); /* each thread's streaming stores are out before the region ends */
  }
}
#else

size_t cpu_linear_dw_pack_bytes(int64_t m, int64_t n) {
  (void)m, (void)n;
  return 0;
}

void cpu_linear_dw_f32(const float *dy, const float *x, float *dw, int64_t m, int64_t n, int64_t k, int accumulate,
                       int threads, float *pack) {
  (void)threads, (void)pack;
  for (int64_t j = 0; j < n; j++)
    for (int64_t c = 0; c < k; c++) {
      float s = 0.0f;
      for (int64_t t = 0; t < m; t++) s += dy[t * n + j] * x[t * k + c];
      dw[j * k + c] = accumulate ? dw[j * k + c] + s : s;
    }
}
#endif
#endif
