/* The weight gradient of a 1x1 convolution with few channels on one side,
 * bf16 channels-last, added into the plain f32 master gradient:
 *
 *   dW[o][i] += sum over rows r of dY[r][o] X[r][i]      (rows = N H W)
 *
 * Why: ResUNet's 8-channel layers at 224x224 (32 -> 8 and 8 -> 32) make this
 * an [8 or 32] x 800k x [32 or 8] product. oneDNN 2.6's matmul takes its
 * non-AMX kernel for an 8-wide side and ran each in 11-12 ms at batch 16,
 * for a product that is one pass over 64 MB of activations; this runs it
 * in about 3 ms (2 threads). The activations come from memory (written
 * long before, in forward): without software prefetch the two row streams
 * read at 8.5 GB/s (7.5-8 ms a call in the step); PREFETCH_ROWS ahead, at
 * 19-20 GB/s (a 256 MB case: 30 -> 12.7 ms).
 *
 * How: the wider side (V = 16 or 32 channels) is one or two 16-lane vectors
 * per row, each value of the narrow side (B = 8 or 16) is broadcast, and
 * the V x B sums stay in registers (V / 16 * B <= 16 accumulators). f32
 * sums over blocks of BLOCK_ROWS rows go into per-thread doubles; threads
 * take static row shares and are added in thread order, so the result does
 * not depend on timing. Needs 16-lane vectors (AVX-512 builds); elsewhere
 * oneDNN's matmul runs as before. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

int cpu_conv_use_thin_dw = 1;

enum { BLOCK_ROWS = 256, PREFETCH_ROWS = 64 }; /* 4 KB of the wide side ahead: 32 and 128 were slower */

/* Which side is the vector (V) side: 1 dY (output channels), 0 X; -1 when
 * the shape does not fit. */
static int vector_side(int64_t oc, int64_t ic) {
#ifndef __AVX512F__
  return -1;
#endif
  if ((oc == 32 && ic == 8) || (oc == 16 && (ic == 8 || ic == 16))) return 1;
  if ((ic == 32 && oc == 8) || (ic == 16 && oc == 8)) return 0;
  return -1;
}

int cpu_thin_dw_fits(int64_t oc, int64_t ic) { return cpu_conv_use_thin_dw && vector_side(oc, ic) >= 0; }

size_t cpu_thin_dw_scratch_bytes(int64_t oc, int64_t ic, int threads) {
  return sizeof(double) * (size_t)(oc * ic) * (size_t)threads;
}

/* part[b * V + v] += sum over rows [r0, r1) of vec[r][v] bro[r][b]; vec
 * rows are V bf16 values, bro rows B. */
INLINE void thin_rows(const uint16_t *vec, const uint16_t *bro, int64_t r0, int64_t r1, int V, int B, double *part) {
#ifdef __AVX512F__
  enum { MAX_ACC = 16 };
  for (int64_t start = r0; start < r1; start += BLOCK_ROWS) {
    const int64_t end = start + BLOCK_ROWS < r1 ? start + BLOCK_ROWS : r1;
    vfw acc[MAX_ACC];
    /* Unrolled in full, so the accumulators live in registers. */
    VEC_UNROLL
    for (int k = 0; k < B * V / 16; k++) acc[k] = vbcastw(0.0f);
    for (int64_t r = start; r < end; r++) {
      /* The narrow side's values lane by lane out of one register (a
       * permute each): through a stack copy, each broadcast load waited
       * on the vector store before it. */
      __builtin_prefetch(vec + (r + PREFETCH_ROWS) * V);
      if (V == 32) __builtin_prefetch(vec + (r + PREFETCH_ROWS) * V + 32);
      if ((r & 3) == 0) __builtin_prefetch(bro + (r + PREFETCH_ROWS) * B);
      const vfw bb = vldw(bro, r * B, 1, B);
      const vfw v0 = vldw(vec, r * V, 1, 16), v1 = V == 32 ? vldw(vec, r * V + 16, 1, 16) : v0;
      VEC_UNROLL
      for (int b = 0; b < B; b++) {
        const vfw s = (vfw)_mm512_permutexvar_ps(_mm512_set1_epi32(b), (__m512)bb);
        acc[b * (V / 16)] += s * v0;
        if (V == 32) acc[b * 2 + 1] += s * v1;
      }
    }
    for (int b = 0; b < B; b++)
      for (int v = 0; v < V; v++) part[b * V + v] += acc[b * (V / 16) + v / 16][v % 16];
  }
#endif
}

void cpu_thin_dw(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, float *dw,
                 double *scratch, int threads, int fresh) {
  const int dy_is_vec = vector_side(oc, ic);
  const uint16_t *vec = dy_is_vec ? dy : x, *bro = dy_is_vec ? x : dy;
  const int V = (int)(dy_is_vec ? oc : ic), B = (int)(dy_is_vec ? ic : oc);
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t r0 = rows * tid / nt, r1 = rows * (tid + 1) / nt;
    double *part = scratch + tid * V * B;
    memset(part, 0, sizeof(double) * (size_t)(V * B));
    if (V == 32 && B == 8)
      thin_rows(vec, bro, r0, r1, 32, 8, part);
    else if (V == 16 && B == 8)
      thin_rows(vec, bro, r0, r1, 16, 8, part);
    else
      thin_rows(vec, bro, r0, r1, 16, 16, part);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t e = 0; e < (int64_t)V * B; e++) { /* e = b V + v */
      double s = 0.0;
      for (int64_t t = 0; t < nt; t++) s += scratch[t * V * B + e];
      const int64_t b = e / V, v = e % V;
      float *d = &dw[dy_is_vec ? v * ic + b : b * ic + v];
      *d = (fresh ? 0.0f : *d) + (float)s;
    }
  }
}
#endif
