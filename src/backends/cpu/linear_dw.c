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
 * Threads split the 64-column panels. */
#ifdef SPRY_HAVE_DNNL
#include <stdint.h>

#include "backends/cpu/cpu.h"

int cpu_linear_dw_max_rows = 128;

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

int cpu_linear_dw_applies(int64_t rows) { return rows >= 1 && rows <= cpu_linear_dw_max_rows; }

void cpu_linear_dw_f32(const float *dy, const float *x, float *dw, int64_t m, int64_t n, int64_t k, int accumulate,
                       int threads) {
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
#else
int cpu_linear_dw_applies(int64_t rows) {
  (void)rows;
  return 0; /* no AVX-512 in this build: sgemm */
}

void cpu_linear_dw_f32(const float *dy, const float *x, float *dw, int64_t m, int64_t n, int64_t k, int accumulate,
                       int threads) {
  (void)threads;
  for (int64_t j = 0; j < n; j++)
    for (int64_t c = 0; c < k; c++) {
      float s = 0.0f;
      for (int64_t t = 0; t < m; t++) s += dy[t * n + j] * x[t * k + c];
      dw[j * k + c] = accumulate ? dw[j * k + c] + s : s;
    }
}
#endif
#endif
