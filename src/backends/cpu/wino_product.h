/* What both Winograd kernels of our own share (conv_wino.c: stride 1,
 * conv_wino_s2.c: stride 2): the matrix product per transformed position
 * (C's rows are tiles, its 16 columns one panel of output channels, in a
 * register block of ROWS x 16), the load of one row of a tile's input
 * window, and F(4, 3)'s line transforms (also conv_wino16.c's). Included by
 * those three files only. */
#ifndef SPRY_BACKENDS_CPU_WINO_PRODUCT_H
#define SPRY_BACKENDS_CPU_WINO_PRODUCT_H

#include <stdint.h>

#include "backends/cpu/vec.h"

enum { ROWS = 6, PANEL = 16 };

/* F(4, 3)'s input and output transforms along one line (B^T: six values
 * from six, A^T: four from six; conv_wino.c writes the matrices out), for
 * vectors of any width (conv_wino.c's 8 lanes, conv_wino16.c's 16). */
#define WINO_B_T(d, r)                         \
  do {                                         \
    r[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];   \
    r[1] = d[3] + d[4] - 4.0f * (d[1] + d[2]); \
    r[2] = d[4] - d[3] + 4.0f * (d[1] - d[2]); \
    r[3] = d[4] - d[2] + 2.0f * (d[3] - d[1]); \
    r[4] = d[4] - d[2] + 2.0f * (d[1] - d[3]); \
    r[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];   \
  } while (0)
#define WINO_A_T(m, o)                                                                                         \
  do {                                                                                                         \
    const __typeof__(m[0]) p12 = m[1] + m[2], m12 = m[1] - m[2], p34 = m[3] + m[4], m34 = m[3] - m[4];         \
    o[0] = m[0] + p12 + p34, o[1] = m12 + 2.0f * m34, o[2] = p12 + 4.0f * p34, o[3] = m12 + 8.0f * m34 + m[5]; \
  } while (0)

/* The N vectors of an 8-channel plane (H x W positions) at row yy, columns
 * x0 .. x0 + N - 1, zero outside the plane; `inside`: the whole window is
 * (no checks). N a constant where inlined: the loop unrolls. */
INLINE void wino_window_row(const float *plane, int64_t yy, int64_t x0, int64_t H, int64_t W, int inside, const int N,
                            vf8 *d) {
  VEC_UNROLL for (int j = 0; j < N; j++) {
    const int64_t xx = x0 + j;
    d[j] = inside || (yy >= 0 && yy < H && xx >= 0 && xx < W) ? vload_f(plane + (yy * W + xx) * 8) : vbcast(0.0f);
  }
}

/* C[R][16] (+)= A[R][K] B[K][16]: A's value (r, k) at a[r ars + k aks], B's
 * row k at b + k ldb, C's rows ldc apart; added onto C where accumulate.
 * R accumulator pairs in registers, one broadcast of A per row and step. */
INLINE void block_product(const int R, int64_t K, const float *a, int64_t ars, int64_t aks, const float *b, int64_t ldb,
                          float *c, int64_t ldc, int accumulate) {
  vf8 acc[ROWS][2];
  VEC_UNROLL for (int r = 0; r < R; r++) {
    acc[r][0] = accumulate ? vload_f(c + r * ldc) : vbcast(0.0f);
    acc[r][1] = accumulate ? vload_f(c + r * ldc + 8) : vbcast(0.0f);
  }
  for (int64_t k = 0; k < K; k++) {
    const vf8 b0 = vload_f(b + k * ldb), b1 = vload_f(b + k * ldb + 8);
    VEC_UNROLL for (int r = 0; r < R; r++) {
      const vf8 av = vbcast(a[r * ars + k * aks]);
      acc[r][0] += av * b0, acc[r][1] += av * b1;
    }
  }
  VEC_UNROLL for (int r = 0; r < R; r++) {
    *(vf8u *)(c + r * ldc) = acc[r][0];
    *(vf8u *)(c + r * ldc + 8) = acc[r][1];
  }
}

/* Rows [0, rows) of C (16 wide) from A and B as block_product reads them: whole
 * register blocks, then the rest (R a constant in each copy). */
static inline void rows_product(int64_t rows, int64_t K, const float *a, int64_t ars, int64_t aks, const float *b,
                                int64_t ldb, float *c, int64_t ldc, int accumulate) {
  int64_t r = 0;
  for (; r + ROWS <= rows; r += ROWS)
    block_product(ROWS, K, a + r * ars, ars, aks, b, ldb, c + r * ldc, ldc, accumulate);
  const float *ar = a + r * ars;
  float *cr = c + r * ldc;
  switch (rows - r) {
    case 5: block_product(5, K, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    case 4: block_product(4, K, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    case 3: block_product(3, K, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    case 2: block_product(2, K, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    case 1: block_product(1, K, ar, ars, aks, b, ldb, cr, ldc, accumulate); break;
    default: break;
  }
}

#endif
