/* Winograd F(4x4, 3x3) of our own for f32 3x3 convolutions with stride 1
 * and padding 1, on 8-channel blocks (nChw8c in and out): what f32 plans use
 * below AVX-512, where oneDNN 2.6 has no Winograd kernel (its jit_wino
 * kernels need AVX-512; conv_winograd.c picks them there).
 *
 * Each 4x4 output tile comes from a 6x6 input tile d and the 3x3 kernel g:
 *
 *   V = B^T d B,   U = G g G^T,   M[xi] = sum over input channels U[xi] V[xi],   Y = A^T M A
 *
 * with xi the 36 positions of the 6x6 transformed tile. Per xi the sum over
 * channels is a matrix product: M[xi] [tiles][C_out] = V[xi] [tiles][C_in]
 * U[xi] [C_in][C_out]. 36 products replace 16 outputs' 144: 4x fewer
 * multiplications, for transforms of a few additions and scalings per value.
 *
 * Work goes in chunks of tiles, one chunk per thread at a time: its V
 * (36 x chunk x C_in) and M (36 x chunk x C_out) stay in that thread's
 * scratch, near the core, so the transformed tiles never travel through
 * memory as a whole. The product runs on a 6-row x 16-column register block
 * (12 accumulators), U packed in 16-column panels.
 *
 * Backward data is the same product: dX = conv(dY, g') with g'[ic][oc] the
 * kernel turned by 180 degrees (`flip`), written or added into dX.
 *
 * Why: on Zen 3 (AVX2, 2 threads) oneDNN's direct f32 kernels ran ResNet's
 * 3x3 layers at 102-200 GFLOP/s against a 165-177 FMA peak, 31% of a
 * ResUNet-50 training step. Per call here (batch 16, C in = C out, ms, as
 * GFLOP/s of the direct product): 64 channels at 56x56 12.7 (292), 128 at
 * 28x28 12.1 (306), 256 at 14x14 12.5 + 2.0 to transform the weights (295),
 * 512 at 7x7 18.8 + 6.6 (197: 8x8 of tiles for 7x7). F(2x2, 3x3), tried
 * first, reached 190-260: its transforms took 40% of the time for 2.25x. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/shares.h"
#include "backends/cpu/vec.h"
#include "backends/cpu/wino_product.h"

int cpu_wino_own = 1;
long cpu_wino_calls;
/* Below this many output tiles the chunks cannot keep two threads busy and
 * the weights' transform costs what the products save (Zen 3, 2 threads,
 * ms a call against oneDNN's direct kernel: 512 channels at 7x7, 64 tiles,
 * 18.8 + 6.6 for the weights against 31-33; 16 tiles 10.1 + 10.8). */
int64_t cpu_wino_min_tiles = 48;
/* A frozen (inference) plan transforms its weights once, so only the
 * products count: from 16 tiles (14x14 at batch 1) they beat the direct
 * kernel (Zen 3, 2 threads, per call in ResUNet-50 at batch 1: 256 channels
 * at 14x14 0.89-1.01 against 1.27-1.35 ms; vgg-face's 64 at 14x14 0.055-0.058
 * against 0.082-0.083). Not below: at 7x7 (4 tiles) the 512-channel layers
 * took 2.6-3.0 against 1.5-1.7 ms, U (37.7 MB, four times the kernel) read
 * from memory. */
int64_t cpu_wino_min_tiles_frozen = 16;

/* F(4x4, 3x3): OUT x OUT output tiles from T x T input tiles, XI = T^2
 * products a tile. */
enum { OUT = 4, T = OUT + 2, XI = T * T, MAX_CHUNK = 96, PAD = 16 };

/* The most tiles one thread gets when `tiles` go in chunks of `chunk`,
 * split between the threads as schedule(static) does (contiguous runs, the
 * first chunks % threads threads one chunk more; the last chunk partial). */
static int64_t thread_load(int64_t tiles, int64_t chunk, int threads) {
  const int64_t chunks = (tiles + chunk - 1) / chunk, q = chunks / threads, r = chunks % threads;
  int64_t most = 0;
  for (int t = 0; t < threads; t++) {
    const int64_t c0 = t * q + (t < r ? t : r), c1 = c0 + q + (t < r);
    const int64_t t0 = c0 * chunk < tiles ? c0 * chunk : tiles, t1 = c1 * chunk < tiles ? c1 * chunk : tiles;
    if (t1 - t0 > most) most = t1 - t0;
  }
  return most;
}

/* Tiles a chunk: the same number of chunks for every thread, up to four
 * where each keeps two register blocks, none over max_chunk; whole register
 * blocks where that loads no thread more. Why: rounded to whole blocks
 * first, as before, 256 tiles (vgg-face's 7x7 layers at batch 64) went in
 * 8 chunks of 36 and 4: 144 tiles for one thread, 112 for the other; 49
 * (28x28 at batch 1) 36 against 13. */
static int64_t chunk_of(int64_t tiles, int threads, int64_t block, int64_t max_chunk) {
  int64_t per = (tiles + (int64_t)threads * max_chunk - 1) / ((int64_t)threads * max_chunk);
  int64_t want = tiles / ((int64_t)threads * 2 * block);
  if (want > 4) want = 4;
  if (per < want) per = want;
  if (per < 1) per = 1;
  const int64_t chunk = (tiles + threads * per - 1) / (threads * per), whole = (chunk + block - 1) / block * block;
  return whole <= max_chunk && thread_load(tiles, whole, threads) <= thread_load(tiles, chunk, threads) ? whole : chunk;
}

int64_t cpu_wino_chunk(int64_t tiles, int threads) { return chunk_of(tiles, threads, ROWS, MAX_CHUNK); }

/* Up to this many tiles, forward and backward data split the output
 * channels between the threads instead of the tiles (see cpu_wino_run).
 * ResUNet-50 inference at batch 1 (Zen 3, 2 threads, per-node profile,
 * alternating runs, ms a layer): 256 channels at 14x14 (16 tiles)
 * 0.67-0.74 against 0.91-1.03; 128 at 28x28 (49 tiles) 0.46-0.62 against
 * 0.53-0.68. The next size, 56x56 at batch 1, has 196 tiles. */
int64_t cpu_wino_by_panels_max_tiles = 64;

static int prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int flip, int frozen,
                   int lanes, int by_panels_allowed, size_t *u_bytes, size_t *work_bytes) {
  memset(m, 0, sizeof *m);
  if (!cpu_wino_own || (lanes != 8 && lanes != 16) || c_in % lanes || c_out % PANEL || c_in < lanes || n < 1 || h < 1 ||
      w < 1)
    return 1;
  m->n = n, m->h = h, m->w = w, m->c_in = c_in, m->c_out = c_out, m->flip = flip, m->lanes = lanes;
  m->th = (h + OUT - 1) / OUT, m->tw = (w + OUT - 1) / OUT, m->tiles = n * m->th * m->tw;
  /* (16 lanes: conv.c holds those layers to cpu_wino16_min_tiles) */
  if (lanes == 8 && m->tiles < (frozen ? cpu_wino_min_tiles_frozen : cpu_wino_min_tiles)) return 1;
  m->threads = omp_get_max_threads();
  m->by_panels = by_panels_allowed && m->threads > 1 && m->tiles <= cpu_wino_by_panels_max_tiles &&
                 m->tiles <= MAX_CHUNK && c_out / PANEL >= m->threads;
  m->chunk = m->by_panels  ? m->tiles
             : lanes == 16 ? chunk_of(m->tiles, m->threads, CPU_WINO16_ROWS, CPU_WINO16_MAX_CHUNK)
                           : chunk_of(m->tiles, m->threads, ROWS, MAX_CHUNK);
  /* Planes of one xi a cache line more than a whole chunk apart: at
   * multiples of 4 KiB the 36 planes a tile writes (and the output
   * transform reads) would share one L1 set of 8 ways. (No difference
   * measured at 64 channels; it keeps any channel count off that case.) */
  m->v_plane = m->chunk * c_in + PAD, m->m_plane = m->chunk * c_out + PAD;
  m->v_floats = XI * m->v_plane;
  m->m_floats = XI * m->m_plane;
  *u_bytes = sizeof(float) * XI * (size_t)(c_in * c_out);
  *work_bytes = sizeof(float) * (size_t)(m->v_floats + m->m_floats) * (size_t)m->threads + 64;
  return 0;
}

int cpu_wino_prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int flip, int frozen,
                     int lanes, size_t *u_bytes, size_t *work_bytes) {
  return prepare(m, n, h, w, c_in, c_out, flip, frozen, lanes, 1, u_bytes, work_bytes);
}

/* The three 1-D transforms of F(4, 3) (interpolation points 0, 1, -1, 2,
 * -2 and infinity), applied along rows, then columns
 * (B^T and A^T: wino_product.h):
 *   B^T  [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
 *   G    [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
 *   A^T  [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1] */
/* G applied to three values: six. */
#define G_OF(g0, g1, g2, r)                                                                                        \
  do {                                                                                                             \
    r[0] = (g0)*0.25f, r[1] = ((g0) + (g1) + (g2)) * (-1.0f / 6.0f), r[2] = ((g0) - (g1) + (g2)) * (-1.0f / 6.0f); \
    r[3] = (g0) * (1.0f / 24.0f) + (g1) * (1.0f / 12.0f) + (g2) * (1.0f / 6.0f);                                   \
    r[4] = (g0) * (1.0f / 24.0f) - (g1) * (1.0f / 12.0f) + (g2) * (1.0f / 6.0f), r[5] = (g2);                      \
  } while (0)

/* U[xi][panel][k][16]: the product's output channel o = 16 panel + lane,
 * input channel k. w: the convolution's plain weights [OC][IC][3][3]; the
 * product reads g(o, k) = w[o][k] (forward) or w[k][o] turned (flip). One
 * (panel, k) at a time, U = G g G^T over 8 lanes at once, so each xi gets a
 * whole 64-byte row. */
void cpu_wino_weights(const cpu_wino *m, float *u, const float *w, const float *scale) {
  if (m->stride == 2) {
    cpu_wino_s2_weights(m, u, w);
    return;
  }
  const int64_t ci = m->c_in, co = m->c_out, panels = co / PANEL;
#pragma omp parallel for schedule(static)
  for (int64_t pk = 0; pk < panels * ci; pk++) {
    const int64_t panel = pk / ci, k = pk % ci;
    float gl[9][PANEL], sl[PANEL];
    for (int lane = 0; lane < PANEL; lane++) {
      const int64_t o = panel * PANEL + lane;
      for (int i = 0; i < 9; i++) gl[i][lane] = m->flip ? w[(k * co + o) * 9 + 8 - i] : w[(o * ci + k) * 9 + i];
      sl[lane] = scale ? scale[o] : 1.0f;
    }
    for (int half = 0; half < PANEL / 8; half++) {
      vf8 g[9], t[T][3], r[T];
      for (int i = 0; i < 9; i++) g[i] = vload_f(gl[i] + 8 * half);
      for (int j = 0; j < 3; j++) { /* G g, column by column */
        G_OF(g[j], g[3 + j], g[6 + j], r);
        for (int i = 0; i < T; i++) t[i][j] = r[i];
      }
      const vf8 sc = vload_f(sl + 8 * half);
      for (int i = 0; i < T; i++) { /* (G g) G^T, row by row */
        G_OF(t[i][0], t[i][1], t[i][2], r);
        for (int j = 0; j < T; j++)
          *(vf8u *)(u + (((i * T + j) * panels + panel) * ci + k) * PANEL + 8 * half) = r[j] * sc;
      }
    }
  }
}

/* V[xi][r][k .. k + 7] for the chunk's tile r and input block cb: the 6x6
 * input tile from rows 4 ty - 1 .. 4 ty + 4 and the same columns (zero
 * outside), V = B^T d B. */
static void input_tiles(const cpu_wino *m, const float *x, int64_t t0, int64_t rows, float *v, int64_t stride_xi) {
  const int64_t ci = m->c_in, cb_n = ci / 8, H = m->h, W = m->w;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = OUT * ty - 1, x0 = OUT * tx - 1;
    const int inside = y0 >= 0 && x0 >= 0 && y0 + T <= H && x0 + T <= W;
    for (int64_t cb = 0; cb < cb_n; cb++) {
      const float *plane = x + (img * cb_n + cb) * H * W * 8;
      vf8 s[T][T]; /* d B, row by row */
      for (int i = 0; i < T; i++) {
        const int64_t yy = y0 + i;
        vf8 d[T];
        wino_window_row(plane, yy, x0, H, W, inside, T, d);
        WINO_B_T(d, s[i]);
      }
      float *out = v + r * ci + cb * 8;
      VEC_UNROLL for (int j = 0; j < T; j++) { /* columns: B^T (d B) */
        vf8 c[T], o[T];
        VEC_UNROLL for (int i = 0; i < T; i++) c[i] = s[i][j];
        WINO_B_T(c, o);
        VEC_UNROLL for (int i = 0; i < T; i++) * (vf8u *)(out + (i * T + j) * stride_xi) = o[i];
      }
    }
  }
}

/* M[xi] = V[xi] U[xi] for the chunk's rows: panel by panel (U's K x 16
 * panel stays in L1 while the rows pass). */
static void products(const cpu_wino *m, const float *u, const float *v, float *mm, int64_t rows, int64_t p0,
                     int64_t p1) {
  const int64_t ci = m->c_in, co = m->c_out, panels = co / PANEL;
  for (int xi = 0; xi < XI; xi++) {
    const float *vx = v + xi * m->v_plane;
    float *mx = mm + xi * m->m_plane;
    for (int64_t p = p0; p < p1; p++)
      rows_product(rows, ci, vx, ci, 1, u + (xi * panels + p) * ci * PANEL, PANEL, mx + p * PANEL, co, 0);
  }
}

int cpu_wino_stream = 1;
long cpu_wino_streamed;

/* Y's 4x4 tile from M: A^T M A, plus the bias, then ReLU; written, or added
 * onto what Y holds (accumulate). Tiles past the edge write only their
 * part inside. stream: stored past the caches (stream_output). */
static void output_tiles(const cpu_wino *m, const float *mm, int64_t t0, int64_t rows, int64_t ob0, int64_t ob1,
                         float *y, const float *bias, int relu, int accumulate, int stream) {
  const int64_t co = m->c_out, ob_n = co / 8, H = m->h, W = m->w, stride_xi = m->m_plane;
  (void)stream; /* (builds without AVX store through the caches) */
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = OUT * ty, x0 = OUT * tx;
    const int64_t ny = H - y0 < OUT ? H - y0 : OUT, nx = W - x0 < OUT ? W - x0 : OUT;
    for (int64_t ob = ob0; ob < ob1; ob++) {
      const float *in = mm + r * co + ob * 8;
      vf8 s[OUT][T]; /* A^T M, column by column */
      VEC_UNROLL for (int j = 0; j < T; j++) {
        vf8 c[T], o[OUT];
        VEC_UNROLL for (int i = 0; i < T; i++) c[i] = vload_f(in + (i * T + j) * stride_xi);
        WINO_A_T(c, o);
        VEC_UNROLL for (int i = 0; i < OUT; i++) s[i][j] = o[i];
      }
      const vf8 b = bias ? vload_f(bias + ob * 8) : vbcast(0.0f);
      float *plane = y + (img * ob_n + ob) * H * W * 8;
      for (int64_t i = 0; i < ny; i++) {
        vf8 o[OUT];
        WINO_A_T(s[i], o);
        for (int64_t j = 0; j < nx; j++) {
          float *at = plane + ((y0 + i) * W + x0 + j) * 8;
          vf8 val = o[j] + b;
          if (accumulate) val += vload_f(at);
          if (relu) val = (vf8)((vi8)val & (vi8)(val > 0.0f));
#ifdef __AVX__
          if (stream) {
            _mm256_stream_ps(at, (__m256)val);
            continue;
          }
#endif
          *(vf8u *)at = val;
        }
      }
    }
  }
#ifdef __AVX__
  if (stream) _mm_sfence(); /* the streamed lines out before the next layer reads them */
#endif
}

/* Whether an 8-lane output goes past the caches: written fresh, larger than
 * half the last-level cache, and every store a whole line (Y 64-byte
 * aligned, an even width: a tile row's 4 or 2 positions are 2 or 1 lines).
 * The stores' write-allocate reads made conv_wino16.c's output transform
 * 2.5x slower. Zen 3 (32 MB L3), frozen ResUNet-50 at batch 64, 4
 * alternating pairs, per node medians: the layers streaming 7-30% faster
 * (conv1.3 71.7 -> 56.2 ms, layer1's 45-47 -> 38-39), the 1x1 layers
 * reading them -7% to +7%; about 50 ms of a 4.2 s step. */
static int stream_output(const cpu_wino *m, const float *y, int accumulate) {
  return cpu_wino_stream && m->lanes == 8 && !accumulate && ((uintptr_t)y & 63) == 0 && m->w % 2 == 0 &&
         (int64_t)sizeof(float) * m->n * m->c_out * m->h * m->w > cpu_stream_threshold();
}

/* One chunk (tiles t0 .. t0 + rows - 1) through the three steps, for output
 * panels [p0, p1): at 8 lanes here, at 16 in conv_wino16.c. */
static void steps(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                  int accumulate, int stream, float *v, float *mm, int64_t t0, int64_t rows, int64_t p0, int64_t p1) {
  if (m->lanes == 16) {
    cpu_wino16_chunk(m, u, x, y, bias, relu, accumulate, v, mm, t0, rows, p0, p1);
    return;
  }
  input_tiles(m, x, t0, rows, v, m->v_plane);
  products(m, u, v, mm, rows, p0, p1);
  output_tiles(m, mm, t0, rows, 2 * p0, 2 * p1, y, bias, relu, accumulate, stream);
}

void cpu_wino_run(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                  int accumulate, char *work) {
  const int64_t chunks = (m->tiles + m->chunk - 1) / m->chunk;
  float *base = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  const int64_t panels = m->c_out / PANEL;
  if (m->stride == 2) {
    cpu_wino_s2_run(m, u, x, y, bias, relu, accumulate, work);
    return;
  }
  cpu_wino_calls++;
  if (m->lanes == 16) cpu_wino16_calls++;
  const int stream = stream_output(m, y, accumulate);
  cpu_wino_streamed += stream;
  if (m->by_panels) {
    /* Few tiles (14x14 at batch 1 has 16): chunks of them left a thread
     * idle or waiting, and each thread read all of U (9.4 MB at 256
     * channels) for a few rows. Here every thread transforms all the
     * tiles (a small part of the work at these sizes) and makes its share
     * of the output channels: U is read once in all. */
#pragma omp parallel num_threads(m->threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      float *v = base + (size_t)t * (size_t)(m->v_floats + m->m_floats), *mm = v + m->v_floats;
      const int64_t p0 = panels * t / nt, p1 = panels * (t + 1) / nt;
      steps(m, u, x, y, bias, relu, accumulate, stream, v, mm, 0, m->tiles, p0, p1);
    }
    return;
  }
  /* Chunks taken as threads come free (shares.h): each writes its own tiles. */
  int64_t next = 0;
#pragma omp parallel num_threads(m->threads)
  {
    float *v = base + (size_t)omp_get_thread_num() * (size_t)(m->v_floats + m->m_floats), *mm = v + m->v_floats;
    cpu_share_walk walk = cpu_shares_begin(&next, chunks);
    for (int64_t c; (c = cpu_shares_next(&walk)) >= 0;) {
      const int64_t t0 = c * m->chunk, rows = m->tiles - t0 < m->chunk ? m->tiles - t0 : m->chunk;
      steps(m, u, x, y, bias, relu, accumulate, stream, v, mm, t0, rows, 0, panels);
    }
  }
}

/* ---- The weight gradient: dU[xi] = sum over tiles of V[xi]^T dM[xi], with
 * dM = A dY A^T the output gradient's tiles, then dW = G^T dU G. ----
 *
 * Why: oneDNN 2.6's AVX2 weight-gradient kernel ran these layers 3-5x
 * slower than its forward kernel (Zen 3, ResUNet-50 f32 batch 16: 64
 * channels at 56x56 50-70 ms a call against 13-14 forward). */

/* A applied to four values: six. A = (A^T)^T, A^T above. */
#define A_OF(y, r)                                                                                                \
  do {                                                                                                            \
    const __typeof__(y[0]) p02 = y[0] + y[2], p13 = y[1] + y[3];                                                  \
    r[0] = y[0], r[1] = p02 + p13, r[2] = p02 - p13;                                                              \
    r[3] = y[0] + 2.0f * y[1] + 4.0f * y[2] + 8.0f * y[3], r[4] = y[0] - 2.0f * y[1] + 4.0f * y[2] - 8.0f * y[3]; \
    r[5] = y[3];                                                                                                  \
  } while (0)

/* G^T applied to six values: three. */
#define GT_OF(z, r)                                                                                    \
  do {                                                                                                 \
    const __typeof__(z[0]) p12 = z[1] + z[2], m12 = z[2] - z[1], p34 = z[3] + z[4], m34 = z[3] - z[4]; \
    r[0] = z[0] * 0.25f - p12 * (1.0f / 6.0f) + p34 * (1.0f / 24.0f);                                  \
    r[1] = m12 * (1.0f / 6.0f) + m34 * (1.0f / 12.0f);                                                 \
    r[2] = (p34 - p12) * (1.0f / 6.0f) + z[5];                                                         \
  } while (0)

enum { KC = 256 }; /* tiles a block of the weight-gradient products: B's 16 KiB stay in L1 */

/* Narrow layers (dU of at most this many bytes) sum dU per thread, chunk by
 * chunk, with V and dM of a chunk in cache, and add the threads' sums at the
 * end; wider ones transform every tile first and give each thread whole xi
 * (a dU per thread would be 38 MB at 512 channels). vgg-face's 32- and
 * 64-channel layers at batch 64 (Zen 3, backward ms, three alternating
 * pairs): 9.9-10.0 against 12.1-14.0 over all tiles, 8.2-9.1 against
 * 10.5-12.4. At 8 MB instead of 1 (128 channels per thread too) no
 * difference showed. */
size_t cpu_wino_dw_per_thread_max = (size_t)1 << 20;

int cpu_wino_dw_prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, size_t *work_bytes) {
  size_t unused;
  const int r = prepare(m, n, h, w, c_in, c_out, 0, 0, 8, 0, &unused, work_bytes);
  if (r) return r;
  m->du_floats = XI * c_in * c_out;
  m->dw_per_thread = sizeof(float) * (size_t)m->du_floats <= cpu_wino_dw_per_thread_max;
  if (m->dw_per_thread) {
    *work_bytes = sizeof(float) * (size_t)(m->v_floats + m->m_floats + m->du_floats) * (size_t)m->threads + 64;
    return 0;
  }
  m->v_plane = m->tiles * c_in + PAD, m->m_plane = m->tiles * c_out + PAD;
  *work_bytes = sizeof(float) * (size_t)(XI * (m->v_plane + m->m_plane) + m->du_floats) + 64;
  return 0;
}

/* dM[xi][r][oc .. oc + 7] for tile r and output block ob: the 4x4 tile of
 * dY at rows 4 ty .. 4 ty + 3 (zero past the edge), A dY A^T. */
static void dy_tiles(const cpu_wino *m, const float *dy, int64_t t0, int64_t rows, float *dm, int64_t stride_xi) {
  const int64_t co = m->c_out, ob_n = co / 8, H = m->h, W = m->w;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = t0 + r, img = t / (m->th * m->tw), ty = t / m->tw % m->th, tx = t % m->tw;
    const int64_t y0 = OUT * ty, x0 = OUT * tx;
    const int64_t ny = H - y0 < OUT ? H - y0 : OUT, nx = W - x0 < OUT ? W - x0 : OUT;
    for (int64_t ob = 0; ob < ob_n; ob++) {
      const float *plane = dy + (img * ob_n + ob) * H * W * 8;
      vf8 s[OUT][T]; /* dY A^T, row by row */
      VEC_UNROLL for (int i = 0; i < OUT; i++) {
        vf8 d[OUT];
        VEC_UNROLL for (int j = 0; j < OUT; j++) d[j] =
            i < ny && j < nx ? vload_f(plane + ((y0 + i) * W + x0 + j) * 8) : vbcast(0.0f);
        A_OF(d, s[i]);
      }
      float *out = dm + r * co + ob * 8;
      VEC_UNROLL for (int j = 0; j < T; j++) { /* columns: A (dY A^T) */
        vf8 c[OUT], o[T];
        VEC_UNROLL for (int i = 0; i < OUT; i++) c[i] = s[i][j];
        A_OF(c, o);
        VEC_UNROLL for (int i = 0; i < T; i++) * (vf8u *)(out + (i * T + j) * stride_xi) = o[i];
      }
    }
  }
}

/* dW[oc][ic] = G^T dU G for 8 output channels at a time (dU's rows hold
 * them side by side), written or added; dU the sum of `copies` copies
 * `apart` floats apart. */
static void weight_gradient_back(const cpu_wino *m, const float *du, int copies, int64_t apart, float *dw, int fresh) {
  const int64_t ci = m->c_in, co = m->c_out, ob_n = co / 8;
#pragma omp for schedule(static)
  for (int64_t job = 0; job < ci * ob_n; job++) {
    const int64_t ic = job / ob_n, ob = job % ob_n;
    vf8 z[T][T], s[3][T];
    VEC_UNROLL for (int i = 0; i < T; i++) VEC_UNROLL for (int j = 0; j < T; j++) {
      const float *at = du + ((int64_t)(i * T + j) * ci + ic) * co + ob * 8;
      z[i][j] = vload_f(at);
      for (int c = 1; c < copies; c++) z[i][j] += vload_f(at + c * apart);
    }
    VEC_UNROLL for (int j = 0; j < T; j++) { /* columns: G^T dU */
      vf8 c[T], o[3];
      VEC_UNROLL for (int i = 0; i < T; i++) c[i] = z[i][j];
      GT_OF(c, o);
      VEC_UNROLL for (int a = 0; a < 3; a++) s[a][j] = o[a];
    }
    float g[3][3][8];
    VEC_UNROLL for (int a = 0; a < 3; a++) { /* rows: (G^T dU) G */
      vf8 o[3];
      GT_OF(s[a], o);
      VEC_UNROLL for (int b = 0; b < 3; b++) * (vf8u *)g[a][b] = o[b];
    }
    for (int lane = 0; lane < 8; lane++) {
      float *k = dw + ((ob * 8 + lane) * ci + ic) * 9;
      for (int i = 0; i < 9; i++) k[i] = fresh ? g[i / 3][i % 3][lane] : k[i] + g[i / 3][i % 3][lane];
    }
  }
}

/* Narrow layers: each thread sums its chunks' products into its own dU. */
static void dw_per_thread(const cpu_wino *m, const float *x, const float *dy, float *dw, int fresh, float *base) {
  const int64_t ci = m->c_in, co = m->c_out, panels = co / PANEL, tiles = m->tiles;
  const int64_t chunks = (tiles + m->chunk - 1) / m->chunk, per = m->v_floats + m->m_floats + m->du_floats;
#pragma omp parallel num_threads(m->threads)
  {
    float *v = base + (size_t)omp_get_thread_num() * (size_t)per, *dm = v + m->v_floats, *du = dm + m->m_floats;
    memset(du, 0, sizeof(float) * (size_t)m->du_floats);
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
      const int64_t t0 = c * m->chunk, rows = tiles - t0 < m->chunk ? tiles - t0 : m->chunk;
      input_tiles(m, x, t0, rows, v, m->v_plane);
      dy_tiles(m, dy, t0, rows, dm, m->m_plane);
      for (int xi = 0; xi < XI; xi++)
        for (int64_t p = 0; p < panels; p++)
          rows_product(ci, rows, v + xi * m->v_plane, 1, ci, dm + xi * m->m_plane + p * PANEL, co,
                       du + xi * ci * co + p * PANEL, co, 1);
    }
    /* Past the loop's barrier every thread's dU is complete; the team may be
     * smaller than asked for (inside another parallel region): its copies only. */
    weight_gradient_back(m, base + m->v_floats + m->m_floats, omp_get_num_threads(), per, dw, fresh);
  }
}

void cpu_wino_dw_run(const cpu_wino *m, const float *x, const float *dy, float *dw, int fresh, char *work) {
  const int64_t ci = m->c_in, co = m->c_out, panels = co / PANEL, tiles = m->tiles;
  const int64_t chunks = (tiles + m->chunk - 1) / m->chunk;
  float *v = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63), *dm = v + XI * m->v_plane, *du = dm + XI * m->m_plane;
  cpu_wino_calls++;
  if (m->dw_per_thread) {
    dw_per_thread(m, x, dy, dw, fresh, v);
    return;
  }
#pragma omp parallel num_threads(m->threads)
  {
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
      const int64_t t0 = c * m->chunk, rows = tiles - t0 < m->chunk ? tiles - t0 : m->chunk;
      input_tiles(m, x, t0, rows, v + t0 * ci, m->v_plane);
      dy_tiles(m, dy, t0, rows, dm + t0 * co, m->m_plane);
    }
    /* dU[xi][ic][panel's 16 oc] over all tiles, KC at a time. */
#pragma omp for schedule(dynamic)
    for (int64_t job = 0; job < XI * panels; job++) {
      const int64_t xi = job / panels, p = job % panels;
      for (int64_t k0 = 0; k0 < tiles; k0 += KC)
        rows_product(ci, tiles - k0 < KC ? tiles - k0 : KC, v + xi * m->v_plane + k0 * ci, 1, ci,
                     dm + xi * m->m_plane + k0 * co + p * PANEL, co, du + xi * ci * co + p * PANEL, co, k0 > 0);
    }
    weight_gradient_back(m, du, 1, 0, dw, fresh);
  }
}
#endif
