/* Winograd for f32 3x3 convolutions with stride 2 and padding 1, on
 * 8-channel blocks (nChw8c in and out), below AVX-512: forward, and the
 * input gradient as the same construction turned around (dY's tiles in,
 * the input's four phases out).
 *
 * Why, and where: oneDNN 2.6's AVX2 direct kernels ran these layers at
 * 120-160 GFLOP/s (Zen 3, 2 threads, FMA peak ~204). Kernel A/B, batch 64
 * / 16, forward: vgg-face's 64 -> 128 at 14x14 1.17-1.65x oneDNN, ResNet's
 * 128 channels at 56x56 1.28-1.53x; the input gradient 1.10-1.41x and
 * 1.12-1.27x before its weight transform (every step). 256 and 512
 * channels gained 1-15%, less than their weights' transform costs; 8-32
 * input channels lost (0.68-1.13x: the transforms and the 81 values a tile
 * per input channel through L2 cost what the products save). So plans
 * take it for 64-128 input channels, forward from cpu_wino_s2_min_tiles
 * tiles, the input gradient from cpu_wino_s2_min_tiles_dx.
 *
 * Stride 2 splits the input into its four parity phases. Along one axis,
 * output i reads input rows 2i - 1, 2i and 2i + 1 through taps 0, 1, 2:
 * the odd rows O[m] = x[2m - 1] through the two taps (0, 2) at O[i] and
 * O[i + 1], the even rows E[m] = x[2m] through tap 1 alone. So each phase
 * pair is a stride-1 correlation with a 2x2, 2x1, 1x2 or 1x1 kernel, and
 * each runs as Winograd F(4, 2) along each axis: a 5-value input tile, the
 * kernel's two taps turned into five values (a single tap padded with a
 * zero second one, whose value at the point at infinity is zero).
 *
 * In the 5 x 5 transformed tile all four phases meet, so their products add
 * in one matrix product per position xi = (p, q): M[xi] = sum over the
 * phases that reach xi of V_phase[xi] U_phase[xi]. A phase with a single
 * tap along an axis does not reach that axis' point at infinity (p or q =
 * 4): 16 positions take four phases (depth 4 C_in), 8 take two, 1 takes
 * one: 81 C_in C_out products a 4x4 output tile, where the direct
 * convolution makes 144 C_in C_out (1.78x fewer). The output transform is
 * F(4, 2)'s, once for all phases.
 *
 * Each output tile reads a 9 x 9 window of the input (rows 8 ty - 1 ..
 * 8 ty + 7); the phases are its even and odd rows and columns.
 *
 * F(4, 2) with interpolation points 0, 1, -1, 2 and infinity:
 *   B^T [2 -1 -2 1 0; 0 -2 -1 1 0; 0 2 -3 1 0; 0 -1 0 1 0; 0 2 -1 -2 1]
 *   G   [1/2 0; -1/2 -1/2; -1/6 1/6; 1/6 1/3; 0 1]
 *   A^T [1 1 1 1 0; 0 1 -1 2 0; 0 1 1 4 0; 0 1 -1 8 1]
 * (B^T's first four rows read only d0 .. d3: a single-tap phase needs four
 * input values.) */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/shares.h"
#include "backends/cpu/vec.h"
#include "backends/cpu/wino_product.h"

int cpu_wino_s2_on = 1;
int64_t cpu_wino_s2_min_c_in = 64, cpu_wino_s2_max_c_in = 128;
/* ResNet's 128 channels at 56x56 (kernel A/B, caches flushed): batch 1 (49
 * tiles) 0.85x oneDNN forward, batch 4 (196) 1.22x. The input gradient
 * transforms its weights every step, about 54 tiles' worth of products
 * (0.35-1.3 ms), for a 10-25% gain: from 512 tiles (vgg-face's 64 -> 128
 * layer at batch 64 has 256 and came out even). */
int64_t cpu_wino_s2_min_tiles = 192, cpu_wino_s2_min_tiles_dx = 512;

enum { OUT = 4, T = 5, XI = T * T, WIN = 9, PAD = 16 };
enum { PH_OO, PH_OE, PH_EO, PH_EE, PHASES }; /* (row parity, column parity) of the input */

/* The phase's slot in xi's product (its part of the depth, forward, or of
 * the width, backward data: c_in a phase), in the order OO, OE, EO, EE of
 * those that reach xi, or -1 where the phase does not. A single-tap phase
 * has no value at one point along its axis: forward, where its tap comes
 * first, at infinity (index 4); backward data, where it comes second, at
 * point 0. Constant where xi and the phase are (the loops are unrolled). */
INLINE int slot_of(int xi, int phase, int flip) {
  const int none = flip ? 0 : T - 1, p_in = xi / T != none, q_in = xi % T != none;
  switch (phase) {
    case PH_OO: return 0;
    case PH_OE: return q_in ? 1 : -1;
    case PH_EO: return p_in ? 1 + q_in : -1;
    default: return p_in && q_in ? 3 : -1;
  }
}

int cpu_wino_s2_prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int flip,
                        size_t *u_bytes, size_t *work_bytes) {
  memset(m, 0, sizeof *m);
  if (!cpu_wino_own || c_in % (flip ? PANEL : 8) || c_out % (flip ? 8 : PANEL) || c_in < cpu_wino_s2_min_c_in ||
      c_in > cpu_wino_s2_max_c_in || n < 1 || h < 2 || w < 2)
    return 1;
  m->stride = 2, m->flip = flip, m->n = n, m->h = h, m->w = w, m->c_in = c_in, m->c_out = c_out;
  m->ho = (h - 1) / 2 + 1, m->wo = (w - 1) / 2 + 1;
  /* Forward: tiles of the output. Backward data: of each input phase, whose
   * rows run to h / 2 (the odd one: input row 2m - 1). */
  const int64_t rows = flip ? h / 2 + 1 : m->ho, cols = flip ? w / 2 + 1 : m->wo;
  m->th = (rows + OUT - 1) / OUT, m->tw = (cols + OUT - 1) / OUT, m->tiles = n * m->th * m->tw;
  if (m->tiles < (flip ? cpu_wino_s2_min_tiles_dx : cpu_wino_s2_min_tiles)) return 1;
  m->threads = omp_get_max_threads();
  m->chunk = cpu_wino_chunk(m->tiles, m->threads);
  /* Per xi the phases' side of the product is k[xi] wide (V's rows
   * forward, M's backward data); the other side is c_out. */
  int64_t v = 0, mo = 0, u = 0;
  for (int xi = 0; xi < XI; xi++) {
    int phases = 0;
    for (int ph = 0; ph < PHASES; ph++) phases += slot_of(xi, ph, flip) >= 0;
    m->k[xi] = phases * c_in, m->u_off[xi] = u, m->v_off[xi] = v, m->m_off[xi] = mo;
    v += m->chunk * (flip ? c_out : m->k[xi]) + PAD, mo += m->chunk * (flip ? m->k[xi] : c_out) + PAD;
    u += m->k[xi] * c_out;
  }
  m->v_floats = v, m->m_floats = mo;
  *u_bytes = sizeof(float) * (size_t)u;
  *work_bytes = sizeof(float) * (size_t)(m->v_floats + m->m_floats) * (size_t)m->threads + 64;
  return 0;
}

/* G applied to a kernel's two taps: five values. */
#define G_OF(g0, g1, r)                                                                   \
  do {                                                                                    \
    r[0] = (g0)*0.5f, r[1] = ((g0) + (g1)) * -0.5f, r[2] = ((g1) - (g0)) * (1.0f / 6.0f); \
    r[3] = ((g0) + 2.0f * (g1)) * (1.0f / 6.0f), r[4] = (g1);                             \
  } while (0)

/* The taps of the 3x3 kernel a phase reads along one axis, in the order
 * its correlation takes them (-1: none). Forward: the odd input rows
 * through taps 0 and 2 (at O[i], O[i + 1]), the even ones through tap 1.
 * Backward data: input row 2m - 1 (odd) gets dY[m - 1] through tap 2 and
 * dY[m] through tap 0; row 2m (even) dY[m] through tap 1. */
static const int taps[2][2][2] = {{{0, 2}, {1, -1}}, {{2, 0}, {-1, 1}}};

/* U = G f G^T per phase, f the 2x2 part of the kernel the phase reads (a
 * zero where it has a single tap), for 8 channels at once (gl: the nine
 * taps of 8 kernels); each value of xi the phase reaches is handed to put. */
#define PHASE_WEIGHTS(flip, gl, put)                                                            \
  do {                                                                                          \
    for (int ph = 0; ph < PHASES; ph++) {                                                       \
      const int *ry = taps[flip][ph >> 1], *rx = taps[flip][ph & 1];                            \
      vf8 f[2][2], t[T][2], r[T];                                                               \
      for (int a = 0; a < 2; a++)                                                               \
        for (int b = 0; b < 2; b++)                                                             \
          f[a][b] = ry[a] >= 0 && rx[b] >= 0 ? vload_f((gl)[ry[a] * 3 + rx[b]]) : vbcast(0.0f); \
      for (int b = 0; b < 2; b++) { /* G f, column by column */                                 \
        G_OF(f[0][b], f[1][b], r);                                                              \
        for (int i = 0; i < T; i++) t[i][b] = r[i];                                             \
      }                                                                                         \
      for (int i = 0; i < T; i++) { /* (G f) G^T, row by row */                                 \
        G_OF(t[i][0], t[i][1], r);                                                              \
        for (int j = 0; j < T; j++) {                                                           \
          const int xi = i * T + j, slot = slot_of(xi, ph, flip);                               \
          if (slot >= 0) put(xi, slot, r[j]); /* else structurally zero */                      \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  } while (0)

/* Forward: U[xi][panel][slot c_in + k][16] for output channel o = 16 panel
 * + lane, input channel k; both halves of a panel's row in one pass, so
 * each 64-byte line is written whole. */
static void weights_forward(const cpu_wino *m, float *u, const float *w) {
  const int64_t ci = m->c_in, co = m->c_out;
#pragma omp parallel for schedule(static)
  for (int64_t pk = 0; pk < co / PANEL * ci; pk++) {
    const int64_t panel = pk / ci, k = pk % ci;
    float gl[2][9][8];
    for (int lane = 0; lane < PANEL; lane++)
      for (int i = 0; i < 9; i++) gl[lane / 8][i][lane % 8] = w[((panel * PANEL + lane) * ci + k) * 9 + i];
    for (int half = 0; half < 2; half++) {
#define PUT(xi, slot, val) (*(vf8u *)(u + m->u_off[xi] + (panel * m->k[xi] + (slot)*ci + k) * PANEL + 8 * half) = (val))
      PHASE_WEIGHTS(0, gl[half], PUT);
#undef PUT
    }
  }
}

/* Backward data: U'[xi][panel][o][16], the product's column n = 16 panel +
 * lane = slot c_in + input channel, its row o the output channel; 16 input
 * channels (a 64-byte line) a pass. */
static void weights_backward(const cpu_wino *m, float *u, const float *w) {
  const int64_t ci = m->c_in, co = m->c_out, pairs = ci / PANEL;
#pragma omp parallel for schedule(static)
  for (int64_t op = 0; op < co * pairs; op++) {
    const int64_t o = op / pairs, i0 = op % pairs * PANEL;
    float gl[2][9][8];
    for (int lane = 0; lane < PANEL; lane++)
      for (int i = 0; i < 9; i++) gl[lane / 8][i][lane % 8] = w[(o * ci + i0 + lane) * 9 + i];
    for (int half = 0; half < 2; half++) {
#define PUT(xi, slot, val)                                                                \
  do {                                                                                    \
    const int64_t col = (slot)*ci + i0 + 8 * half;                                        \
    *(vf8u *)(u + m->u_off[xi] + ((col / PANEL) * co + o) * PANEL + col % PANEL) = (val); \
  } while (0)
      PHASE_WEIGHTS(1, gl[half], PUT);
#undef PUT
    }
  }
}

void cpu_wino_s2_weights(const cpu_wino *m, float *u, const float *w) {
  if (m->flip)
    weights_backward(m, u, w);
  else
    weights_forward(m, u, w);
}

/* B^T on five values, and its first four rows on four. */
#define B_T5(d, r)                             \
  do {                                         \
    r[0] = 2.0f * (d[0] - d[2]) + d[3] - d[1]; \
    r[1] = d[3] - d[2] - 2.0f * d[1];          \
    r[2] = d[3] - 3.0f * d[2] + 2.0f * d[1];   \
    r[3] = d[3] - d[1];                        \
    r[4] = d[4] - d[2] + 2.0f * (d[1] - d[3]); \
  } while (0)
#define B_T4(d, r)                             \
  do {                                         \
    r[0] = 2.0f * (d[0] - d[2]) + d[3] - d[1]; \
    r[1] = d[3] - d[2] - 2.0f * d[1];          \
    r[2] = d[3] - 3.0f * d[2] + 2.0f * d[1];   \
    r[3] = d[3] - d[1];                        \
  } while (0)
#define A_T(m, o)                                                                                                  \
  do {                                                                                                             \
    const __typeof__(m[0]) p12 = m[1] + m[2], m12 = m[1] - m[2];                                                   \
    o[0] = m[0] + p12 + m[3], o[1] = m12 + 2.0f * m[3], o[2] = p12 + 4.0f * m[3], o[3] = m12 + 8.0f * m[3] + m[4]; \
  } while (0)

/* V for the chunk's tiles: each tile's 9 x 9 window, columns split by
 * parity and transformed along the rows, then each of the nine transformed
 * columns split by row parity and transformed down. */
static void input_tiles(const cpu_wino *m, const float *x, int64_t t0, int64_t rows, float *v) {
  const int64_t ci = m->c_in, cb_n = ci / 8, H = m->h, W = m->w;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = 2 * OUT * ty - 1, x0 = 2 * OUT * tx - 1;
    const int inside = y0 >= 0 && x0 >= 0 && y0 + WIN <= H && x0 + WIN <= W;
    for (int64_t cb = 0; cb < cb_n; cb++) {
      const float *plane = x + (img * cb_n + cb) * H * W * 8;
      /* The next tile's window along the row (what this one does not
       * read): the loads waited on memory otherwise. */
      if (x0 + 2 * WIN < W && y0 >= 0 && y0 + WIN <= H)
        for (int rho = 0; rho < WIN; rho++)
          for (int l = 0; l < 8 * 8; l += 16) __builtin_prefetch(plane + ((y0 + rho) * W + x0 + WIN) * 8 + l);
      vf8 s[WIN][WIN]; /* row rho: the odd columns' five transformed values, then the even columns' four */
      for (int rho = 0; rho < WIN; rho++) {
        const int64_t yy = y0 + rho;
        vf8 d[WIN];
        wino_window_row(plane, yy, x0, H, W, inside, WIN, d);
        const vf8 odd[T] = {d[0], d[2], d[4], d[6], d[8]}, even[OUT] = {d[1], d[3], d[5], d[7]};
        B_T5(odd, s[rho]);
        B_T4(even, (s[rho] + T));
      }
      VEC_UNROLL for (int c = 0; c < WIN; c++) {
        const int col_even = c >= T, q = col_even ? c - T : c;
        const vf8 odd[T] = {s[0][c], s[2][c], s[4][c], s[6][c], s[8][c]},
                  even[OUT] = {s[1][c], s[3][c], s[5][c], s[7][c]};
        vf8 o[T], e[OUT];
        B_T5(odd, o);
        B_T4(even, e);
        VEC_UNROLL for (int p = 0; p < T; p++) {
          const int xi = p * T + q, slot = slot_of(xi, col_even ? PH_OE : PH_OO, 0);
          *(vf8u *)(v + m->v_off[xi] + r * m->k[xi] + slot * ci + cb * 8) = o[p];
        }
        VEC_UNROLL for (int p = 0; p < OUT; p++) {
          const int xi = p * T + q, slot = slot_of(xi, col_even ? PH_EE : PH_EO, 0);
          *(vf8u *)(v + m->v_off[xi] + r * m->k[xi] + slot * ci + cb * 8) = e[p];
        }
      }
    }
  }
}

/* Y's 4x4 tile from M: A^T M A, plus the bias, then ReLU. Tiles past the
 * edge write only their part inside. */
static void output_tiles(const cpu_wino *m, const float *mm, int64_t t0, int64_t rows, float *y, const float *bias,
                         int relu) {
  const int64_t co = m->c_out, ob_n = co / 8, H = m->ho, W = m->wo;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = OUT * ty, x0 = OUT * tx;
    const int64_t ny = H - y0 < OUT ? H - y0 : OUT, nx = W - x0 < OUT ? W - x0 : OUT;
    for (int64_t ob = 0; ob < ob_n; ob++) {
      const float *in = mm + r * co + ob * 8;
      vf8 s[OUT][T]; /* A^T M, column by column */
      VEC_UNROLL for (int j = 0; j < T; j++) {
        vf8 c[T], o[OUT];
        VEC_UNROLL for (int i = 0; i < T; i++) c[i] = vload_f(in + m->m_off[i * T + j]);
        A_T(c, o);
        VEC_UNROLL for (int i = 0; i < OUT; i++) s[i][j] = o[i];
      }
      const vf8 b = bias ? vload_f(bias + ob * 8) : vbcast(0.0f);
      float *plane = y + (img * ob_n + ob) * H * W * 8;
      for (int64_t i = 0; i < ny; i++) {
        vf8 o[OUT];
        A_T(s[i], o);
        for (int64_t j = 0; j < nx; j++) {
          vf8 val = o[j] + b;
          if (relu) val = (vf8)((vi8)val & (vi8)(val > 0.0f));
          *(vf8u *)(plane + ((y0 + i) * W + x0 + j) * 8) = val;
        }
      }
    }
  }
}

/* Backward data: V[xi][r][o] for the chunk's tile r, the 5x5 window of dY
 * at rows 4 ty - 1 .. 4 ty + 3 (zero outside), B^T d B. */
static void dy_tiles(const cpu_wino *m, const float *dy, int64_t t0, int64_t rows, float *v) {
  const int64_t co = m->c_out, ob_n = co / 8, H = m->ho, W = m->wo;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = OUT * ty - 1, x0 = OUT * tx - 1;
    const int inside = y0 >= 0 && x0 >= 0 && y0 + T <= H && x0 + T <= W;
    for (int64_t ob = 0; ob < ob_n; ob++) {
      const float *plane = dy + (img * ob_n + ob) * H * W * 8;
      vf8 s[T][T]; /* d B, row by row */
      for (int i = 0; i < T; i++) {
        const int64_t yy = y0 + i;
        vf8 d[T];
        wino_window_row(plane, yy, x0, H, W, inside, T, d);
        B_T5(d, s[i]);
      }
      VEC_UNROLL for (int j = 0; j < T; j++) { /* columns: B^T (d B) */
        vf8 c[T], o[T];
        VEC_UNROLL for (int i = 0; i < T; i++) c[i] = s[i][j];
        B_T5(c, o);
        VEC_UNROLL for (int i = 0; i < T; i++) * (vf8u *)(v + m->v_off[i * T + j] + r * co + ob * 8) = o[i];
      }
    }
  }
}

/* Backward data: each input phase's 4x4 tile from its part of M, A^T M A
 * (zero where the phase does not reach xi), written or added into dX at
 * rows 2 (4 ty + i) - 1 (odd phase) or 2 (4 ty + i) (even), columns the
 * same; what falls outside the input (row -1, past the end) is dropped. */
static void phase_outputs(const cpu_wino *m, const float *mm, int64_t t0, int64_t rows, float *dx, int accumulate) {
  const int64_t ci = m->c_in, ib_n = ci / 8, H = m->h, W = m->w;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    VEC_UNROLL for (int ph = 0; ph < PHASES; ph++) {
      const int64_t odd_y = (ph >> 1) == 0, odd_x = (ph & 1) == 0;
      for (int64_t ib = 0; ib < ib_n; ib++) {
        vf8 s[OUT][T]; /* A^T M, column by column */
        VEC_UNROLL for (int j = 0; j < T; j++) {
          vf8 c[T], o[OUT];
          VEC_UNROLL for (int i = 0; i < T; i++) {
            const int xi = i * T + j, slot = slot_of(xi, ph, 1);
            c[i] = slot >= 0 ? vload_f(mm + m->m_off[xi] + r * m->k[xi] + slot * ci + ib * 8) : vbcast(0.0f);
          }
          A_T(c, o);
          VEC_UNROLL for (int i = 0; i < OUT; i++) s[i][j] = o[i];
        }
        float *plane = dx + (img * ib_n + ib) * H * W * 8;
        for (int i = 0; i < OUT; i++) {
          const int64_t yy = 2 * (OUT * ty + i) - odd_y;
          if (yy < 0 || yy >= H) continue;
          vf8 o[OUT];
          A_T(s[i], o);
          for (int j = 0; j < OUT; j++) {
            const int64_t xx = 2 * (OUT * tx + j) - odd_x;
            if (xx < 0 || xx >= W) continue;
            float *at = plane + (yy * W + xx) * 8;
            *(vf8u *)at = accumulate ? vload_f(at) + o[j] : o[j];
          }
        }
      }
    }
  }
}

/* Forward: y = the convolution of x with u, + bias, ReLU'd. Backward data
 * (flip): x is dY, y is dX, written or added onto (accumulate). */
void cpu_wino_s2_run(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                     int accumulate, char *work) {
  const int64_t chunks = (m->tiles + m->chunk - 1) / m->chunk, co = m->c_out;
  float *base = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  cpu_wino_calls++;
  int64_t next = 0; /* chunks taken as threads come free (shares.h) */
#pragma omp parallel num_threads(m->threads)
  {
    float *v = base + (size_t)omp_get_thread_num() * (size_t)(m->v_floats + m->m_floats), *mm = v + m->v_floats;
    cpu_share_walk walk = cpu_shares_begin(&next, chunks);
    for (int64_t c; (c = cpu_shares_next(&walk)) >= 0;) {
      const int64_t t0 = c * m->chunk, rows = m->tiles - t0 < m->chunk ? m->tiles - t0 : m->chunk;
      if (m->flip) {
        dy_tiles(m, x, t0, rows, v);
        for (int xi = 0; xi < XI; xi++) /* M[xi] (rows x k) = V[xi] (rows x c_out) U'[xi] */
          for (int64_t p = 0; p < m->k[xi] / PANEL; p++)
            rows_product(rows, co, v + m->v_off[xi], co, 1, u + m->u_off[xi] + p * co * PANEL, PANEL,
                         mm + m->m_off[xi] + p * PANEL, m->k[xi], 0);
        phase_outputs(m, mm, t0, rows, y, accumulate);
      } else {
        input_tiles(m, x, t0, rows, v);
        for (int xi = 0; xi < XI; xi++) { /* M[xi] (rows x c_out) = V[xi] (rows x k) U[xi] */
          const int64_t k = m->k[xi];
          for (int64_t p = 0; p < co / PANEL; p++)
            rows_product(rows, k, v + m->v_off[xi], k, 1, u + m->u_off[xi] + p * k * PANEL, PANEL,
                         mm + m->m_off[xi] + p * PANEL, co, 0);
        }
        output_tiles(m, mm, t0, rows, y, bias, relu);
      }
    }
  }
}
#endif
