/* The f32 forward product of a linear layer below AVX-512: y[m][n] = b[n] +
 * sum_k x[m][k] W[n][k], with W the plain master weights ([out][in]) as
 * they lie, for linear_gemm.c (training and frozen plans).
 *
 * Why: oneDNN 2.6 runs vgg-face's fc1 (batch 64, 6272 -> 1024, 2 threads,
 * AMD Zen 3) at about 135 GFLOP/s, two thirds of the FMA peak, on its
 * matmul and its inner product alike (about 6 ms of a 28 ms inference
 * step). Few rows (the batch) meet a large weight matrix that streams from
 * memory once, so the product is worth arranging around W: x is packed
 * transposed (xT[k][m], 1.6 MB there) and W is read in place, six rows at a
 * time, each value broadcast against two vectors of 8 rows of xT. The
 * 6 x 16 block of y^T sums in 12 registers over a chunk of KC inputs (xT's
 * chunk stays in L2; the six W rows' chunk in L1 for the other blocks of
 * rows), into a y^T scratch that the last chunk's pass turns into y.
 * Threads take whole six-row blocks of W. Figures: bench/kernel_ab. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

/* 1: taken where it applies (below AVX-512, enough rows); 0: never (oneDNN);
 * tests set 2 to take it on AVX-512 machines too. */
int cpu_linear_fwd_on = 1;
/* Fewer rows leave most of a 16-row block empty; fewer weights do not
 * stream from memory, where oneDNN's blocking is as good (vgg-face's fc2,
 * batch 64, 1024 -> 136: 0.21 ms here against its 0.13-0.14): oneDNN's
 * there. */
int64_t cpu_linear_fwd_min_rows = 16, cpu_linear_fwd_min_weights = 1 << 20;
/* More rows than this and xT's chunk (KC x rows x 4 bytes) outgrows the
 * half of L2 the blocking assumes: oneDNN's there (not measured beyond). */
int64_t cpu_linear_fwd_max_rows = 128;
long cpu_linear_fwd_calls;

enum {
  NR = 6,  /* W rows (y columns) per block */
  MR = 16, /* x rows (y rows) per block: two vectors */
  KC = 512 /* inputs per chunk: xT's chunk, KC x 64 rows x 4 bytes = 128 KB, in L2 */
};

static int64_t padded_rows(int64_t m) { return (m + 7) / 8 * 8; }

int cpu_linear_fwd_applies(int64_t m, int64_t k, int64_t n) {
#if defined(__AVX2__) && defined(__FMA__)
  if (!cpu_linear_fwd_on || (cpu_linear_fwd_on == 1 && sp_backend_cpu_avx512())) return 0;
  return m >= cpu_linear_fwd_min_rows && m <= cpu_linear_fwd_max_rows && k >= 1 && n >= 1 &&
         k * n >= cpu_linear_fwd_min_weights;
#else
  (void)m, (void)k, (void)n;
  return 0;
#endif
}

size_t cpu_linear_fwd_scratch_bytes(int64_t m, int64_t k, int64_t n) {
  const int64_t mp = padded_rows(m);
  return sizeof(float) * (size_t)(mp * k + n * mp) + 64;
}

#if defined(__AVX2__) && defined(__FMA__)
/* y^T rows n0 .. n0 + nr - 1, rows m0 .. m0 + 8 mv - 1 of x, over inputs
 * k0 .. k1 - 1: into yt (its row stride mp), from the bias (first chunk)
 * or what the chunks before left. nr and mv are constants where called. */
INLINE void block(const float *xt, int64_t mp, const float *w, int64_t k, const float *bias, float *yt, int64_t n0,
                  int64_t m0, int64_t k0, int64_t k1, const int nr, const int mv) {
  vf8 acc[NR][2];
  VEC_UNROLL
  for (int i = 0; i < nr; i++)
    for (int v = 0; v < mv; v++)
      acc[i][v] = k0 ? vload_f(yt + (n0 + i) * mp + m0 + 8 * v) : vbcast(bias ? bias[n0 + i] : 0.0f);
  const float *wr = w + n0 * k;
#pragma GCC unroll 4
  for (int64_t t = k0; t < k1; t++) {
    const float *xr = xt + t * mp + m0;
    const vf8 x0 = vload_f(xr), x1 = mv > 1 ? vload_f(xr + 8) : x0;
    VEC_UNROLL
    for (int i = 0; i < nr; i++) {
      const vf8 b = vbcast(wr[i * k + t]);
      acc[i][0] += b * x0;
      if (mv > 1) acc[i][1] += b * x1;
    }
  }
  VEC_UNROLL
  for (int i = 0; i < nr; i++)
    for (int v = 0; v < mv; v++) *(vf8u *)(yt + (n0 + i) * mp + m0 + 8 * v) = acc[i][v];
}

/* Every block of rows for W rows n0 .. n0 + nr - 1 over one chunk. */
INLINE void rows_of(const float *xt, int64_t mp, const float *w, int64_t k, const float *bias, float *yt, int64_t n0,
                    int64_t k0, int64_t k1, const int nr) {
  int64_t m0 = 0;
  for (; m0 + MR <= mp; m0 += MR) block(xt, mp, w, k, bias, yt, n0, m0, k0, k1, nr, 2);
  if (m0 < mp) block(xt, mp, w, k, bias, yt, n0, m0, k0, k1, nr, 1);
}

static void rows_any(const float *xt, int64_t mp, const float *w, int64_t k, const float *bias, float *yt, int64_t n0,
                     int nr, int64_t k0, int64_t k1) {
  switch (nr) {
    case 6: rows_of(xt, mp, w, k, bias, yt, n0, k0, k1, 6); break;
    case 5: rows_of(xt, mp, w, k, bias, yt, n0, k0, k1, 5); break;
    case 4: rows_of(xt, mp, w, k, bias, yt, n0, k0, k1, 4); break;
    case 3: rows_of(xt, mp, w, k, bias, yt, n0, k0, k1, 3); break;
    case 2: rows_of(xt, mp, w, k, bias, yt, n0, k0, k1, 2); break;
    default: rows_of(xt, mp, w, k, bias, yt, n0, k0, k1, 1); break;
  }
}
#endif

void cpu_linear_fwd_f32(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t k, int64_t n,
                        int threads, void *scratch) {
#if defined(__AVX2__) && defined(__FMA__)
  __atomic_add_fetch(&cpu_linear_fwd_calls, 1, __ATOMIC_RELAXED);
  const int64_t mp = padded_rows(m), blocks = (n + NR - 1) / NR;
  float *xt = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), *yt = xt + mp * k;
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    /* xT[t][r] = x[r][t], rows past m zero: each thread a share of the inputs. */
    for (int64_t t = k * tid / nt; t < k * (tid + 1) / nt; t++) {
      float *d = xt + t * mp;
      for (int64_t r = 0; r < m; r++) d[r] = x[r * k + t];
      for (int64_t r = m; r < mp; r++) d[r] = 0.0f; /* never read back into y, but defined */
    }
#pragma omp barrier
    const int64_t b0 = blocks * tid / nt, b1 = blocks * (tid + 1) / nt;
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
      const int64_t k1 = k - k0 < KC ? k : k0 + KC;
      for (int64_t b = b0; b < b1; b++) {
        const int64_t n0 = b * NR;
        rows_any(xt, mp, w, k, bias, yt, n0, (int)(n - n0 < NR ? n - n0 : NR), k0, k1);
      }
    }
    /* y from y^T, this thread's columns. */
    const int64_t c0 = b0 * NR, c1 = b1 * NR < n ? b1 * NR : n;
    for (int64_t r = 0; r < m; r++)
      for (int64_t c = c0; c < c1; c++) y[r * n + c] = yt[c * mp + r];
  }
#else
  (void)x, (void)w, (void)bias, (void)y, (void)m, (void)k, (void)n, (void)threads, (void)scratch;
#endif
}
#endif
