/* The weight gradient of a bf16 1x1 convolution on AMX tiles, for conv_mm.c:
 *
 *   dW[OC, IC] (=|+=) sum_p dY[p, OC]^T X[p, IC]     (channels-last rows p)
 *
 * when it is long and thin: many positions, and a gradient of at most 256 K
 * values (ResUNet-50's layers at 56x56 and up, its decoder).
 *
 * Why: through oneDNN 2.6's brgemm matmul (dY^T as a transposed stride) these
 * ran at 120-1300 GFLOP/s, 2-3.4 times the time it takes to read dY and X
 * once (resunet50 bf16 b16: 76 ms a step against 28). The primitive
 * transposes its A operand block by block as it goes. Here each thread takes
 * a share of the positions and, per chunk of them, arranges both operands
 * once in L2 (the transposed one with transpose16, the other with pairs of
 * positions interleaved), then runs every 32 x 32 block of the gradient
 * over the chunk in four accumulator tiles, kept in the thread's own f32
 * sums between chunks; the threads' sums are added at the end.
 *
 * The operand that is transposed is the one with fewer channels (the work
 * is per value): with OC <= IC, A = dY^T and the sums are dW; else A = X^T
 * and the sums are dW^T, transposed when they are added.
 *
 * The wide form (cpu_dw_amx_wide: few rows, a large gradient, vgg-face's
 * fc1 at batch 64, 1024 x 6272 from 64 rows) splits the gradient's columns
 * instead: each thread arranges all of dY^T and its columns of X once, and
 * every 32 x 32 block of its columns goes from the tiles into dW (or onto
 * it) directly. oneDNN's matmul took 4.2 ms for that product
 * (ONEDNN_VERBOSE), about 1.6 times what writing the 25.7 MB gradient and
 * reading it back take at this machine's copy rate; fc1's backward with
 * this one is 3.4-4.7 ms, its input gradient (oneDNN) 1.75-2.66 of it. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>

#include "backends/cpu/amx.h"
#include "backends/cpu/cpu.h"

int cpu_conv_use_dw_amx = 1;
int cpu_dw_amx_min_rows = 2048; /* below, oneDNN's matmul (tests take 1) */
long cpu_dw_amx_wide_calls;     /* cpu_dw_amx_wide runs (tests) */

enum { MAX_SUMS = 512 * 1024, PANEL_BYTES = 512 * 1024, WIDE_MAX_ROWS = 256 };

static int64_t chunk_rows(int64_t m, int64_t n) {
  int64_t kc = PANEL_BYTES / (2 * (m + n)) / 32 * 32;
  return kc < 32 ? 32 : kc > 2048 ? 2048 : kc;
}

int cpu_dw_amx_fits(int64_t rows, int64_t oc, int64_t ic) {
  return cpu_conv_use_dw_amx && cpu_amx_usable() && oc % 16 == 0 && ic % 16 == 0 && oc * ic <= MAX_SUMS &&
         rows >= cpu_dw_amx_min_rows;
}

size_t cpu_dw_amx_scratch_bytes(int64_t oc, int64_t ic, int threads) {
  const int64_t kc = chunk_rows(oc, ic);
  const size_t per = sizeof(float) * (size_t)(oc * ic) + sizeof(uint16_t) * (size_t)(kc * (oc + ic)) + 64;
  return per * (size_t)threads;
}

static const uint16_t zero_row[16] __attribute__((aligned(64)));

/* Row p of a [rows, c] matrix from column c0, or zeros past the end. */
static inline const uint16_t *row_at(const uint16_t *a, int64_t ld, int64_t p, int64_t end, int64_t c0) {
  return p < end ? a + p * ld + c0 : zero_row;
}

/* A panel: per block of 16 channels mb and step of 32 positions s, the tile
 * A[mb][s] (16 channels x 32 positions, as pairs) at (mb * steps + s) * 512;
 * steps s0 .. s1 - 1 of it here (positions p0 + 32 s on). */
AMX_FN static void arrange_a_steps(const uint16_t *a, int64_t ld, int64_t p0, int64_t end, int64_t m, int64_t s0,
                                   int64_t s1, int64_t steps, uint16_t *panel) {
  for (int64_t s = s0; s < s1; s++)
    for (int64_t mb = 0; mb < m / 16; mb++) {
      __m512i v[16];
      const int64_t p = p0 + 32 * s;
#pragma GCC unroll 16
      for (int q = 0; q < 16; q++)
        v[q] = interleave16(row_at(a, ld, p + 2 * q, end, 16 * mb), row_at(a, ld, p + 2 * q + 1, end, 16 * mb));
      transpose16(v);
      uint16_t *t = panel + (mb * steps + s) * 512;
#pragma GCC unroll 16
      for (int r = 0; r < 16; r++) _mm512_store_si512(t + r * 32, v[r]);
    }
}

AMX_FN static void arrange_a(const uint16_t *a, int64_t ld, int64_t p0, int64_t end, int64_t m, int64_t steps,
                             uint16_t *panel) {
  arrange_a_steps(a, ld, p0, end, m, 0, steps, steps, panel);
}

/* B panel: per block of 16 channels nb and step s, the tile B[nb][s] (16
 * pairs of positions x 16 channels, each pair interleaved). */
AMX_FN static void arrange_b(const uint16_t *b, int64_t ld, int64_t p0, int64_t end, int64_t n, int64_t steps,
                             uint16_t *panel) {
  for (int64_t s = 0; s < steps; s++)
    for (int64_t nb = 0; nb < n / 16; nb++) {
      uint16_t *t = panel + (nb * steps + s) * 512;
      const int64_t p = p0 + 32 * s;
#pragma GCC unroll 16
      for (int q = 0; q < 16; q++)
        _mm512_store_si512(t + q * 32, interleave16(row_at(b, ld, p + 2 * q, end, 16 * nb),
                                                    row_at(b, ld, p + 2 * q + 1, end, 16 * nb)));
    }
}

/* Tiles 0-3 hold a 32 x 32 block of sums (tile 2i + j: rows 16i, columns
 * 16j; fewer at an edge: gm, gn of 1 or 2 tiles), 4-5 A, 6-7 B. The tile
 * number is a literal: the intrinsics paste it into the instruction. */
#define C_MOVE(op, t, i, j)                                                      \
  do {                                                                           \
    if (gm > i && gn > j) op(t, c + (mb + 16 * i) * ldc + nb + 16 * j, ldc * 4); \
  } while (0)

/* Where B's tiles lie: tile (16-column block j, step s) at base + s * step +
 * (j / 4) * blk64 + (j % 4) * in64, rows `row_bytes` apart. arrange_b's
 * panel and conv_bww_mm.c's packed im2col (32-row blocks of 64 columns, row
 * pairs interleaved: a tile is 16 of its 256-byte rows) both fit. */
typedef struct {
  const uint16_t *base;
  int64_t step, blk64, in64, row_bytes;
} b_tiles;

static inline const uint16_t *b_tile(const b_tiles *b, int64_t j, int64_t s) {
  return b->base + s * b->step + j / 4 * b->blk64 + j % 4 * b->in64;
}

AMX_FN static void products(const uint16_t *ap, const b_tiles *bt, int64_t m, int64_t n, int64_t steps, float *c,
                            int64_t ldc, int first) {
  const int64_t rb = bt->row_bytes;
  for (int64_t mb = 0; mb < m; mb += 32)
    for (int64_t nb = 0; nb < n; nb += 32) {
      const int64_t gm = m - mb >= 32 ? 2 : 1, gn = n - nb >= 32 ? 2 : 1;
      if (first) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      } else {
        C_MOVE(_tile_loadd, 0, 0, 0);
        C_MOVE(_tile_loadd, 1, 0, 1);
        C_MOVE(_tile_loadd, 2, 1, 0);
        C_MOVE(_tile_loadd, 3, 1, 1);
      }
      const uint16_t *a0 = ap + (mb / 16) * steps * 512;
      for (int64_t s = 0; s < steps; s++) {
        _tile_loadd(4, a0 + s * 512, 64);
        _tile_loadd(6, b_tile(bt, nb / 16, s), rb);
        _tile_dpbf16ps(0, 4, 6);
        if (gn > 1) {
          _tile_loadd(7, b_tile(bt, nb / 16 + 1, s), rb);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (gm > 1) {
          _tile_loadd(5, a0 + (steps + s) * 512, 64);
          _tile_dpbf16ps(2, 5, 6);
          if (gn > 1) _tile_dpbf16ps(3, 5, 7);
        }
      }
      C_MOVE(_tile_stored, 0, 0, 0);
      C_MOVE(_tile_stored, 1, 0, 1);
      C_MOVE(_tile_stored, 2, 1, 0);
      C_MOVE(_tile_stored, 3, 1, 1);
    }
}

/* One thread's positions [p0, p1): sums[m][n] = sum_p a[p]^T b[p]. */
AMX_FN static void thread_sums(const uint16_t *a, int64_t lda, int64_t m, const uint16_t *b, int64_t ldb, int64_t n,
                               int64_t p0, int64_t p1, float *sums, uint16_t *ap) {
  const int64_t kc = chunk_rows(m, n);
  uint16_t *bp = ap + kc * m;
  tiles_configure();
  if (p0 >= p1) { memset(sums, 0, sizeof(float) * (size_t)(m * n)); }
  for (int64_t pc = p0; pc < p1; pc += kc) {
    const int64_t end = pc + kc < p1 ? pc + kc : p1, steps = (end - pc + 31) / 32;
    arrange_a(a, lda, pc, end, m, steps, ap);
    arrange_b(b, ldb, pc, end, n, steps, bp);
    const b_tiles bt = {bp, 512, 4 * steps * 512, steps * 512, 64};
    products(ap, &bt, m, n, steps, sums, n, pc == p0);
  }
  _tile_release();
}

void cpu_dw_amx(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, float *dw, int accumulate,
                char *scratch, int threads) {
  const int swap = oc > ic; /* transpose the narrower side */
  const uint16_t *a = swap ? x : dy, *b = swap ? dy : x;
  const int64_t m = swap ? ic : oc, n = swap ? oc : ic, kc = chunk_rows(m, n);
  const size_t per = (sizeof(float) * (size_t)(m * n) + sizeof(uint16_t) * (size_t)(kc * (m + n)) + 64) / 64 * 64;
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    /* Shares in whole steps of 32 positions. */
    const int64_t steps = (rows + 31) / 32, p0 = steps * t / nt * 32, p1e = steps * (t + 1) / nt * 32;
    const int64_t p1 = p1e < rows ? p1e : rows;
    float *sums = (float *)(scratch + per * (size_t)t);
    thread_sums(a, m, m, b, n, n, p0, p1, sums, (uint16_t *)(sums + m * n));
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t o = 0; o < oc; o++)
      for (int64_t i = 0; i < ic; i++) {
        float s = accumulate ? dw[o * ic + i] : 0.0f;
        for (int u = 0; u < nt; u++) {
          const float *su = (const float *)(scratch + per * (size_t)u);
          s += swap ? su[i * oc + o] : su[o * ic + i];
        }
        dw[o * ic + i] = s;
      }
  }
}
int cpu_dw_amx_wide_fits(int64_t rows, int64_t oc, int64_t ic) {
  return cpu_conv_use_dw_amx && cpu_amx_usable() && oc % 16 == 0 && ic % 16 == 0 && rows <= WIDE_MAX_ROWS &&
         oc * ic > MAX_SUMS;
}

/* Per thread: dY^T and X arranged, each whole (the columns are shared
 * unevenly only by a block of 16). */
static size_t wide_slice(int64_t rows, int64_t oc, int64_t ic) {
  const int64_t k = (rows + 31) / 32 * 32;
  return (sizeof(uint16_t) * (size_t)(k * (oc + ic)) + 63) / 64 * 64;
}

size_t cpu_dw_amx_wide_scratch_bytes(int64_t rows, int64_t oc, int64_t ic, int threads) {
  return wide_slice(rows, oc, ic) * (size_t)threads;
}

/* One thread's columns [i0, i1) of dW (multiples of 16). */
AMX_FN static void wide_columns(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, int64_t i0,
                                int64_t i1, float *dw, int accumulate, uint16_t *ap) {
  const int64_t steps = (rows + 31) / 32, n = i1 - i0;
  uint16_t *bp = ap + steps * 32 * oc;
  tiles_configure();
  arrange_a(dy, oc, 0, rows, oc, steps, ap);
  arrange_b(x + i0, ic, 0, rows, n, steps, bp);
  const b_tiles bt = {bp, 512, 4 * steps * 512, steps * 512, 64};
  products(ap, &bt, oc, n, steps, dw + i0, ic, !accumulate);
  _tile_release();
}

void cpu_dw_amx_wide(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, float *dw,
                     int accumulate, char *scratch, int threads) {
  const size_t per = wide_slice(rows, oc, ic);
  __atomic_add_fetch(&cpu_dw_amx_wide_calls, 1, __ATOMIC_RELAXED);
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num(), blocks = ic / 16;
    const int64_t i0 = blocks * t / nt * 16, i1 = blocks * (t + 1) / nt * 16;
    if (i0 < i1) wide_columns(dy, x, rows, oc, ic, i0, i1, dw, accumulate, (uint16_t *)(scratch + per * (size_t)t));
  }
}

AMX_FN void cpu_dw_amx_packed_chunk(const uint16_t *dy, int64_t oc, int64_t count, const uint16_t *col,
                                    int64_t kblk_stride, int64_t nblk_stride, int64_t k, float *t, uint16_t *ap) {
  const int64_t steps = (count + 31) / 32;
  tiles_configure();
  arrange_a(dy, oc, 0, count, oc, steps, ap);
  const b_tiles bt = {col, kblk_stride, nblk_stride, 32, 256};
  products(ap, &bt, oc, k, steps, t, k, 0);
  _tile_release();
}
AMX_FN void cpu_dw_amx_arrange_dy(const uint16_t *dy, int64_t oc, int64_t rows, int64_t s0, int64_t s1, int64_t steps,
                                  uint16_t *ap) {
  arrange_a_steps(dy, oc, 0, rows, oc, s0, s1, steps, ap);
}

AMX_FN void cpu_dw_amx_col_panel(const uint16_t *ap, int64_t oc, int64_t steps, const uint16_t *col,
                                 int64_t kblk_stride, int64_t nblk_stride, int64_t c0, int64_t ncols, float *t,
                                 int64_t ldt) {
  tiles_configure();
  const b_tiles bt = {col + c0 / 64 * nblk_stride, kblk_stride, nblk_stride, 32, 256};
  products(ap, &bt, oc, ncols, steps, t + c0, ldt, 1);
  _tile_release();
}
#endif
