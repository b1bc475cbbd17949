/* conv_wino.c's Winograd F(4x4, 3x3) on 16-channel blocks (nChw16c in and
 * out): the tile transforms and the products at 16 lanes, for the narrow
 * stride-1 layers of AVX-512 builds. conv_wino.c keeps the plan (chunks of
 * tiles, thread split, the transformed weights U[xi][panel][k][16], which
 * do not depend on the blocking) and calls these three steps.
 *
 * Why: oneDNN 2.6's AVX-512 Winograd kernel (conv_winograd.c) ran
 * ResUNet-50's 32- to 256-channel 3x3 layers at 450-750 GFLOP/s counted as
 * direct products (2 threads, Xeon without AMX, FMA peak 345). Here the
 * products run on a 12-tile x 32-channel register block (24 accumulators)
 * at about a thread's FMA peak, in chunks of at most 48 tiles whose
 * transformed input and products stay in the 2 MB L2 (96: even to 35%
 * slower), and the output is streamed past the caches (its write-allocate
 * reads had made the output transform 2.5x slower than with Y in cache).
 * Frozen batch 64, per layer, 3 alternating pairs (ms, oneDNN -> ours):
 * conv1.3 (32 ch, 112x112) 28.3-32.4 -> 20.8-21.9, layer1's 64 ch 20.4-26.6
 * -> 16.5-19.4, layer2's 128 ch 16.7-20.6 -> 16.3-17.4, layer3's 256 ch
 * 23.7-29.8 -> 19.8-20.7, decoder.3's 16 ch (direct there) 12.1-17.3 ->
 * 8.4-8.9; all 3x3 stride-1 layers 356-400 -> 299-315 ms. Left to oneDNN: 512
 * channels (layer4 at 7x7: 24-31 against 24-27 ms), fewer than 64 tiles
 * (batch 1's 14x14: 0.64 against 0.50 ms; its 56x56 layers gain, 0.45 ->
 * 0.33), and the weight gradient. Training batch 16 transforms the weights
 * every call: up to 128 channels there (256 came out even), forward and input
 * gradient, some 13 ms a step. */
#ifdef SPRY_HAVE_DNNL
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "backends/cpu/wino_product.h"

enum { L = 16, OUT = 4, T = OUT + 2, ROWS16 = CPU_WINO16_ROWS };

int cpu_wino16_on = 1;
int64_t cpu_wino16_min_c = 16, cpu_wino16_max_c = 256, cpu_wino16_max_c_train = 128, cpu_wino16_min_tiles = 64;
int cpu_wino16_stream = 1;
int cpu_wino16_dx = 1;
long cpu_wino16_calls;

INLINE vf16 bcast16(float f) { return (vf16){f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f}; }
INLINE vf16 load16(const float *p) { return *(const vf16u *)p; }

/* The 6x6 input tile of tile t (rows 4 ty - 1 .. 4 ty + 4, the same
 * columns, zero outside) of input block cb, as B^T d B: its 36 vectors at
 * out + xi stride_xi. */
static void input_tile(const cpu_wino *m, const float *plane, int64_t ty, int64_t tx, float *out, int64_t stride_xi) {
  const int64_t H = m->h, W = m->w, y0 = OUT * ty - 1, x0 = OUT * tx - 1;
  const int inside = y0 >= 0 && x0 >= 0 && y0 + T <= H && x0 + T <= W;
  vf16 s[T][T]; /* d B, row by row */
  VEC_UNROLL for (int i = 0; i < T; i++) {
    const int64_t yy = y0 + i;
    vf16 d[T];
    VEC_UNROLL for (int j = 0; j < T; j++) {
      const int64_t xx = x0 + j;
      d[j] = inside || (yy >= 0 && yy < H && xx >= 0 && xx < W) ? load16(plane + (yy * W + xx) * L) : bcast16(0.0f);
    }
    WINO_B_T(d, s[i]);
  }
  VEC_UNROLL for (int j = 0; j < T; j++) { /* columns: B^T (d B) */
    vf16 c[T], o[T];
    VEC_UNROLL for (int i = 0; i < T; i++) c[i] = s[i][j];
    WINO_B_T(c, o);
    VEC_UNROLL for (int i = 0; i < T; i++) * (vf16u *)(out + (i * T + j) * stride_xi) = o[i];
  }
}

static void input_tiles(const cpu_wino *m, const float *x, int64_t t0, int64_t rows, float *v, int64_t stride_xi) {
  const int64_t ci = m->c_in, cb_n = ci / L, HW = m->h * m->w;
  for (int64_t cb = 0; cb < cb_n; cb++)
    for (int64_t r = 0; r < rows; r++) {
      const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
      input_tile(m, x + (img * cb_n + cb) * HW * L, ty, tx, v + r * ci + cb * L, stride_xi);
    }
}

/* C[R][16 P] = A[R][K] B[K][16 P]: A's row r at a + r ars (K contiguous
 * values), B's P panels of K x 16 panel_apart floats apart, C's rows ldc
 * apart. R x P accumulators in registers, one broadcast of A a row and k. */
INLINE void block16(const int R, const int P, int64_t K, const float *a, int64_t ars, const float *b,
                    int64_t panel_apart, float *c, int64_t ldc) {
  vf16 acc[ROWS16][2];
  VEC_UNROLL for (int r = 0; r < R; r++) VEC_UNROLL for (int p = 0; p < P; p++) acc[r][p] = bcast16(0.0f);
  for (int64_t k = 0; k < K; k++) {
    vf16 bv[2];
    VEC_UNROLL for (int p = 0; p < P; p++) bv[p] = load16(b + p * panel_apart + k * L);
    VEC_UNROLL for (int r = 0; r < R; r++) {
      const vf16 av = bcast16(a[r * ars + k]);
      VEC_UNROLL for (int p = 0; p < P; p++) acc[r][p] += av * bv[p];
    }
  }
  VEC_UNROLL for (int r = 0; r < R; r++) VEC_UNROLL for (int p = 0; p < P; p++) * (vf16u *)(c + r * ldc + p * L) =
      acc[r][p];
}

/* Rows [0, rows) of one or two panels: whole register blocks, then the
 * rest (R a constant in each copy). */
#define ROWS_OF(P)                                                                                           \
  static void rows_of_##P(int64_t rows, int64_t K, const float *a, const float *b, int64_t apart, float *c,  \
                          int64_t ldc) {                                                                     \
    int64_t r = 0;                                                                                           \
    for (; r + ROWS16 <= rows; r += ROWS16) block16(ROWS16, P, K, a + r * K, K, b, apart, c + r * ldc, ldc); \
    const float *ar = a + r * K;                                                                             \
    float *cr = c + r * ldc;                                                                                 \
    switch (rows - r) {                                                                                      \
      case 11: block16(11, P, K, ar, K, b, apart, cr, ldc); break;                                           \
      case 10: block16(10, P, K, ar, K, b, apart, cr, ldc); break;                                           \
      case 9: block16(9, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 8: block16(8, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 7: block16(7, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 6: block16(6, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 5: block16(5, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 4: block16(4, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 3: block16(3, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 2: block16(2, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      case 1: block16(1, P, K, ar, K, b, apart, cr, ldc); break;                                             \
      default: break;                                                                                        \
    }                                                                                                        \
  }
ROWS_OF(1)
ROWS_OF(2)

/* M[xi] = V[xi] U[xi] for the chunk's rows and output panels [p0, p1):
 * two panels at a time (their 2 x K x 16 of U stay in L1 while the rows
 * pass), an odd last one alone. */
static void products(const cpu_wino *m, const float *u, const float *v, float *mm, int64_t rows, int64_t p0,
                     int64_t p1) {
  const int64_t ci = m->c_in, co = m->c_out, panels = co / PANEL;
  for (int xi = 0; xi < T * T; xi++) {
    const float *vx = v + xi * m->v_plane, *ux = u + xi * panels * ci * PANEL;
    float *mx = mm + xi * m->m_plane;
    int64_t p = p0;
    for (; p + 2 <= p1; p += 2) rows_of_2(rows, ci, vx, ux + p * ci * PANEL, ci * PANEL, mx + p * PANEL, co);
    if (p < p1) rows_of_1(rows, ci, vx, ux + p * ci * PANEL, 0, mx + p * PANEL, co);
  }
}

/* Y's 4x4 tiles from M for output blocks [ob0, ob1): A^T M A, plus the
 * bias, then ReLU; written, or added onto what Y holds (accumulate). Tiles
 * past the edge write only their part inside. */
static void output_tiles(const cpu_wino *m, const float *mm, int64_t t0, int64_t rows, int64_t ob0, int64_t ob1,
                         float *y, const float *bias, int relu, int accumulate) {
  const int64_t co = m->c_out, ob_n = co / L, H = m->h, W = m->w, stride_xi = m->m_plane;
  /* Streamed where written fresh (an added gradient reads Y) and Y's
   * vectors are whole cache lines (the store needs 64-byte alignment). */
  const int stream = cpu_wino16_stream && !accumulate && ((uintptr_t)y & 63) == 0;
  (void)stream; /* (builds below AVX-512 store through the caches) */
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = OUT * ty, x0 = OUT * tx;
    const int64_t ny = H - y0 < OUT ? H - y0 : OUT, nx = W - x0 < OUT ? W - x0 : OUT;
    for (int64_t ob = ob0; ob < ob1; ob++) {
      const float *in = mm + r * co + ob * L;
      vf16 s[OUT][T]; /* A^T M, column by column */
      VEC_UNROLL for (int j = 0; j < T; j++) {
        vf16 c[T], o[OUT];
        VEC_UNROLL for (int i = 0; i < T; i++) c[i] = load16(in + (i * T + j) * stride_xi);
        WINO_A_T(c, o);
        VEC_UNROLL for (int i = 0; i < OUT; i++) s[i][j] = o[i];
      }
      const vf16 b = bias ? load16(bias + ob * L) : bcast16(0.0f);
      float *plane = y + (img * ob_n + ob) * H * W * L;
      for (int64_t i = 0; i < ny; i++) {
        vf16 o[OUT];
        WINO_A_T(s[i], o);
        for (int64_t j = 0; j < nx; j++) {
          float *at = plane + ((y0 + i) * W + x0 + j) * L;
          vf16 val = o[j] + b;
          if (accumulate) val += load16(at);
          if (relu) val = (vf16)((vi16)val & (vi16)(val > 0.0f));
#ifdef __AVX512F__
          if (stream) {
            _mm512_stream_ps(at, (__m512)val);
            continue;
          }
#endif
          *(vf16u *)at = val;
        }
      }
    }
  }
#ifdef __AVX512F__
  if (stream) _mm_sfence(); /* the streamed lines out before the next layer reads them */
#endif
}
void cpu_wino16_chunk(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                      int accumulate, float *v, float *mm, int64_t t0, int64_t rows, int64_t p0, int64_t p1) {
  input_tiles(m, x, t0, rows, v, m->v_plane);
  products(m, u, v, mm, rows, p0, p1);
  output_tiles(m, mm, t0, rows, p0, p1, y, bias, relu, accumulate);
}
#endif
