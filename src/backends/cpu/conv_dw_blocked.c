/* Weight gradients of bf16 convolutions and kernel = stride transposed
 * convolutions whose activations are in oneDNN's 16-channel blocked layout
 * (aBcd16b: [N][C/16][H W][16]), written straight into the plain f32 master
 * gradient. Over a grid of positions q and taps t:
 *
 *   dW[r][c][t] (+)= sum over q of B[r](q, t) A[c](q, t)
 *
 * conv:    grid = output positions, A = X at the tap's input position (zero
 *          in the padding), B = dY; r = output, c = input channel.
 * deconv:  grid = input positions, A = dY at the tap's output position,
 *          B = X; r = input, c = output channel (weights [IC][OC][k][k]).
 *
 * Why: on a machine without AMX (AMD Zen 5: AVX512-BF16 only), oneDNN 2.6
 * picks that layout for bf16 training, and its jit_bf16 backward-weights
 * kernels run at under half their forward's rate (ResUNet-50, batch 16: the
 * 1x1 layers 268 ms a step against 120 ms forward), then reorder their
 * blocked f32 result to the plain gradient. The AMX machines' channels-last
 * layouts never reach this file.
 *
 * How: vdpbf16ps multiplies pairs. Two grid positions of a 16-channel block
 * are one 64-byte load where they are neighbours in memory (else two 32-byte
 * halves, zero where a tap falls in the padding); one word permute
 * interleaves them so that each 32-bit lane holds one channel at both. A
 * chunk of positions is turned into such pairs once per tap (A for every
 * block, B for this thread's rows), then tiles of R rows x 32 columns stay
 * in registers: per pair, two A vectors and R broadcast B pairs make 2R dot
 * products (a last 16 columns alone: 16-channel layers). Sums go into f32
 * per tap (dW itself for a 1x1 convolution), as oneDNN's do. Threads split
 * the positions when dW is small (each its own sums, added in thread order
 * at the end: no dependence on timing), else dW's rows or its columns,
 * whichever halves more pair building (by_columns). */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

int cpu_conv_use_dw_blocked = 1;

enum {
  R = 8,                     /* rows per tile (broadcasts) */
  BLOCK = 16,                /* channels per block of the layout */
  CHUNK_A_BYTES = 512 << 10, /* A's pairs of one chunk (256 KB: 3x3 512 at 7x7 9.5-12.5 ms, here 6.4-9.2) */
  MAX_CHUNK = 1024,          /* positions per chunk */
  MIN_CHUNK = 32,
  SPLIT_POSITIONS_MAX = 128 << 10, /* dW values up to which threads split positions (512 KB each) */
  PREFETCH = 64,                   /* positions ahead: activations come from memory */
  GATHER = 32                      /* pairs whose offsets gather_pairs works out at a time */
};

static int64_t chunk_positions(int64_t cols) {
  int64_t c = CHUNK_A_BYTES / (2 * cols);
  c = c > MAX_CHUNK ? MAX_CHUNK : c < MIN_CHUNK ? MIN_CHUNK : c;
  return c & ~(int64_t)1;
}

/* Rows come 8 at a time from a block's lanes (an 8-channel layer's block
 * is half padding, never read); columns are whole blocks. */
int cpu_dw_blocked_fits(int64_t rows, int64_t cols) {
#ifdef __AVX512BF16__
  return cpu_conv_use_dw_blocked && rows > 0 && cols > 0 && rows % R == 0 && cols % BLOCK == 0;
#else
  (void)rows, (void)cols;
  return 0;
#endif
}

static int64_t taps_of(const cpu_dwb_shape *s) { return s->kh * s->kw; }
/* Blocks of a side: 8 channels still take a whole (padded) block. */
static int64_t blocks_of(const cpu_dwb_side *d) { return (d->c + BLOCK - 1) / BLOCK; }
static int64_t values_of(const cpu_dwb_shape *s) { return s->b.c * s->a.c * taps_of(s); }
static int split_positions(const cpu_dwb_shape *s) { return values_of(s) <= SPLIT_POSITIONS_MAX; }
/* A 1x1 convolution's sums go straight into dW (rows of columns). */
static int direct(const cpu_dwb_shape *s) { return taps_of(s) == 1 && s->col_stride == 1 && s->row_stride == s->a.c; }
/* A thread's pairs: a chunk of c positions makes at most c pairs (each
 * holds one or two), for every block of both sides. */
static size_t pair_bytes(const cpu_dwb_shape *s) {
  const int64_t chunk = chunk_positions(s->a.c);
  return (size_t)((blocks_of(&s->a) + blocks_of(&s->b)) * chunk * 64 + 64);
}
/* Sum arrays (taps x rows x columns f32): one per thread when threads split
 * the positions (the first is dW where direct), else one shared. */
static int64_t sum_arrays(const cpu_dwb_shape *s, int threads) {
  const int64_t n = split_positions(s) ? threads : 1;
  return direct(s) ? n - 1 : n;
}

size_t cpu_dw_blocked_scratch_bytes(const cpu_dwb_shape *s, int threads) {
  return (size_t)threads * pair_bytes(s) + 64 + (size_t)sum_arrays(s, threads) * (size_t)values_of(s) * sizeof(float);
}

#ifdef __AVX512BF16__
INLINE __m512i interleave(__m512i v) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, v);
}

/* The side reads grid position (y, x) itself (same size, stride 1, no tap
 * offset): consecutive positions are neighbours in memory. */
static int identity(const cpu_dwb_side *d, const cpu_dwb_shape *s) {
  return d->h == s->gh && d->w == s->gw && d->sy == 1 && d->sx == 1 && (d->dy == 0 || s->kh == 1) &&
         (d->dx == 0 || s->kw == 1) && d->oy == 0 && d->ox == 0;
}

/* Where side d reads grid position g at tap (i, j): an offset into block 0
 * of its tensor (n nb plane + y w + x, to which a block adds b plane), or -1
 * in the padding. (n, y, x): g's image and grid coordinates. */
INLINE int64_t tap_offset(const cpu_dwb_side *d, int64_t nb_plane, int64_t cy, int64_t cx, int64_t n, int64_t y,
                          int64_t x) {
  const int64_t ty = y * d->sy + cy, tx = x * d->sx + cx;
  return ty >= 0 && ty < d->h && tx >= 0 && tx < d->w ? n * nb_plane + ty * d->w + tx : -1;
}

/* Pairs k0 .. k0 + m - 1 of blocks [b0, b1) of side d from their
 * positions' offsets (at[2 q], at[2 q + 1] for pair k0 + q, -1 in the
 * padding): one load where the two are neighbours, else two halves. */
static void pairs_at(const cpu_dwb_side *d, const int64_t *at, int64_t m, int64_t k0, int64_t b0, int64_t b1,
                     int64_t chunk, __m512i *out) {
  const int64_t plane = d->h * d->w;
  for (int64_t b = b0; b < b1; b++) {
    const uint16_t *base = d->t + b * plane * BLOCK;
    __m512i *o = out + b * chunk + k0;
    for (int64_t q = 0; q < m; q++) {
      const int64_t o0 = at[2 * q], o1 = at[2 * q + 1];
      __m512i v;
      if (o0 >= 0 && o1 == o0 + 1) {
        v = _mm512_loadu_si512(base + o0 * BLOCK);
      } else {
        const __m256i lo = o0 >= 0 ? _mm256_loadu_si256((const void *)(base + o0 * BLOCK)) : _mm256_setzero_si256();
        const __m256i hi = o1 >= 0 ? _mm256_loadu_si256((const void *)(base + o1 * BLOCK)) : _mm256_setzero_si256();
        v = _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
      }
      o[q] = interleave(v);
    }
  }
}

/* Blocks [b0, b1) of side d at tap (i, j) over grid positions [g0, g1), in
 * pairs: out[b chunk + k] holds pair k, positions g and g + 1 of an image
 * (pairs restart at each image; an image's odd last position pairs with
 * zero), channel by channel (interleave); zero where a tap reads the
 * padding. Returns the pair count. The positions' offsets are worked out
 * for GATHER pairs at a time, once for every block: where both positions of
 * a pair lie in one grid row and inside the tensor, the second is the first
 * plus sx, with no per-position bounds or coordinates. The table stays in
 * L1 (one pair for every block at a time, no table, measured even). On
 * vgg-face's 32 -> 32 3x3 at batch 64 a whole chunk's table per tap, worked
 * out position by position, then a pass per block over it, took 46% of the
 * kernel's time. */
static int64_t gather_pairs(const cpu_dwb_side *d, const cpu_dwb_shape *s, int64_t i, int64_t j, int64_t g0, int64_t g1,
                            int64_t b0, int64_t b1, int64_t chunk, __m512i *out) {
  const int64_t hw = s->gh * s->gw, plane = d->h * d->w, nb_plane = blocks_of(d) * plane, cy = i * d->dy + d->oy,
                cx = j * d->dx + d->ox;
  int64_t at[2 * GATHER];
  int64_t k = 0, k_done = 0, n = g0 / hw;
  for (int64_t g = g0; g < g1; n++) {
    const int64_t end = (n + 1) * hw < g1 ? (n + 1) * hw : g1;
    int64_t y = g % hw / s->gw, x = g % s->gw;
    for (; g < end; g += 2, k++) {
      const int two = g + 1 < end;
      const int64_t ty = y * d->sy + cy, tx = x * d->sx + cx, q = k - k_done;
      if (two && x + 1 < s->gw && ty >= 0 && ty < d->h && tx >= 0 && tx + d->sx < d->w) {
        at[2 * q] = n * nb_plane + ty * d->w + tx;
        at[2 * q + 1] = at[2 * q] + d->sx;
      } else { /* a row's edge or the padding: each position on its own */
        const int next_row = x + 1 == s->gw;
        at[2 * q] = tap_offset(d, nb_plane, cy, cx, n, y, x);
        at[2 * q + 1] = two ? tap_offset(d, nb_plane, cy, cx, n, next_row ? y + 1 : y, next_row ? 0 : x + 1) : -1;
      }
      if (q + 1 == GATHER) pairs_at(d, at, GATHER, k_done, b0, b1, chunk, out), k_done = k + 1;
      for (x += 2; x >= s->gw; x -= s->gw) y++;
    }
    g = end; /* past an odd image's last pair */
  }
  if (k > k_done) pairs_at(d, at, k - k_done, k_done, b0, b1, chunk, out);
  return k;
}

/* out[k]: block b of side d at grid positions [g0, g1) read in place (the
 * identity case: consecutive positions are neighbours in memory), in pairs
 * as gather_pairs makes them. Returns the count. */
static int64_t pairs_in_place(const cpu_dwb_side *d, const cpu_dwb_shape *s, int64_t b, int64_t g0, int64_t g1,
                              __m512i *out) {
  const int64_t nb = blocks_of(d), hw = s->gh * s->gw, plane = d->h * d->w;
  int64_t k = 0;
  for (int64_t g = g0; g < g1;) {
    const int64_t n = g / hw, p = g % hw, end = (n + 1) * hw < g1 ? (n + 1) * hw : g1, len = end - g;
    const uint16_t *row = d->t + ((n * nb + b) * plane + p) * BLOCK;
    for (int64_t q = 0; q + 1 < len; q += 2) {
      _mm_prefetch((const char *)(row + (q + PREFETCH) * BLOCK), _MM_HINT_T0);
      out[k++] = interleave(_mm512_loadu_si512(row + q * BLOCK));
    }
    if (len & 1)
      out[k++] = interleave(_mm512_zextsi256_si512(_mm256_loadu_si256((const void *)(row + (len - 1) * BLOCK))));
    g = end;
  }
  return k;
}

/* t[r][c] over rows r0 .. r0 + R - 1, columns c0 .. c0 + 16 nc - 1, over kp
 * pairs: b holds the pairs of r0's block (lane r % 16 of each), a0 / a1 the
 * column blocks (a1 unread where nc is 1). first: start from zero instead
 * of t. nc is a constant where called. */
INLINE void tile(const __m512i *b, int lane0, const __m512i *a0, const __m512i *a1, int64_t kp, float *t,
                 int64_t row_stride, int first, const int nc) {
  __m512 acc[R][2];
  VEC_UNROLL
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nc; j++)
      acc[r][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(t + r * row_stride + j * BLOCK);
  for (int64_t k = 0; k < kp; k++) {
    const __m512bh x0 = (__m512bh)a0[k], x1 = nc == 2 ? (__m512bh)a1[k] : x0;
    const int32_t *pair = (const int32_t *)&b[k] + lane0;
    VEC_UNROLL
    for (int r = 0; r < R; r++) {
      const __m512bh v = (__m512bh)_mm512_set1_epi32(pair[r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x0, v);
      if (nc == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x1, v);
    }
  }
  VEC_UNROLL
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nc; j++) _mm512_storeu_ps(t + r * row_stride + j * BLOCK, acc[r][j]);
}

/* The chunks [c_lo, c_hi) for the tile rows [g0, g1) (R rows each) and the
 * column blocks [k0, k1), into sums (taps x rows x cols, or dW where
 * direct); first: the first chunk writes instead of adding. Only the pairs
 * of those rows and columns are built. */
static void run_chunks(const cpu_dwb_shape *s, int64_t c_lo, int64_t c_hi, int64_t g0, int64_t g1, int64_t k0,
                       int64_t k1, float *sums, __m512i *pairs, int first) {
  const int64_t rows = s->b.c, cols = s->a.c, chunk = chunk_positions(cols), nab = cols / BLOCK,
                total = s->n * s->gh * s->gw;
  const int a_in_place = identity(&s->a, s), b_in_place = identity(&s->b, s); /* the latter: the same at every tap */
  __m512i *ap = pairs, *bp = pairs + nab * chunk;
  const int64_t rb0 = g0 * R / BLOCK, rb1 = (g1 * R - 1) / BLOCK + 1; /* B's blocks that these rows read */
  for (int64_t c = c_lo; c < c_hi; c++) {
    const int64_t p0 = c * chunk, p1 = p0 + chunk < total ? p0 + chunk : total;
    for (int64_t i = 0; i < s->kh; i++)
      for (int64_t j = 0; j < s->kw; j++) {
        int64_t kp = 0;
        if (a_in_place)
          for (int64_t blk = k0; blk < k1; blk++) kp = pairs_in_place(&s->a, s, blk, p0, p1, ap + blk * chunk);
        else
          kp = gather_pairs(&s->a, s, i, j, p0, p1, k0, k1, chunk, ap);
        if (b_in_place && i == 0 && j == 0)
          for (int64_t blk = rb0; blk < rb1; blk++) pairs_in_place(&s->b, s, blk, p0, p1, bp + blk * chunk);
        else if (!b_in_place)
          gather_pairs(&s->b, s, i, j, p0, p1, rb0, rb1, chunk, bp);
        float *t = sums + (i * s->kw + j) * rows * cols;
        for (int64_t g = g0; g < g1; g++) {
          const int64_t r = g * R, blk = r / BLOCK;
          const __m512i *b_blk = bp + blk * chunk;
          const int lane0 = (int)(r % BLOCK), fst = first && c == c_lo;
          int64_t col = k0 * BLOCK;
          for (; col + 2 * BLOCK <= k1 * BLOCK; col += 2 * BLOCK)
            tile(b_blk, lane0, ap + (col / BLOCK) * chunk, ap + (col / BLOCK + 1) * chunk, kp, t + r * cols + col, cols,
                 fst, 2);
          if (col < k1 * BLOCK)
            tile(b_blk, lane0, ap + (col / BLOCK) * chunk, NULL, kp, t + r * cols + col, cols, fst, 1);
        }
      }
  }
}

/* dW rows [r0, r1) = (dW where keep, else zero) + the sum arrays add[0 ..
 * n_add - 1] (taps x rows x cols), in that order. Scalar on purpose: with
 * -fvect-cost-model=dynamic GCC vectorised the taps with gathers from sums
 * a rows x cols array apart, which took twice the time of the scalar loop
 * (ResNet-50's 512 -> 512 3x3: 8% of the kernel's time against 4%, Zen 4). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void
add_sums(const cpu_dwb_shape *s, float *dw, const float *const *add, int n_add, int keep, int64_t r0, int64_t r1) {
  const int64_t rows = s->b.c, cols = s->a.c, taps = taps_of(s);
  for (int64_t r = r0; r < r1; r++)
    for (int64_t c = 0; c < cols; c++)
      for (int64_t tap = 0; tap < taps; tap++) {
        float *w = dw + r * s->row_stride + c * s->col_stride + tap * s->tap_stride;
        const size_t at = (size_t)((tap * rows + r) * cols + c);
        float v = keep ? *w : 0.0f;
        for (int u = 0; u < n_add; u++) v += add[u][at];
        *w = v;
      }
}

/* When threads split dW rather than positions: by columns or by rows. Each
 * thread builds the pairs of its own share of one side and all of the
 * other's, A's at every tap (B's once, where it reads the grid in place).
 * Split the side whose building costs more: a 3x3 layer's columns
 * (ResNet-50's 256 -> 256 at 14x14: 88 blocks built per chunk against 152
 * split by rows), a 1x1 layer's wider side. */
static int by_columns(const cpu_dwb_shape *s, int nt) {
  const int64_t ka = taps_of(s) * blocks_of(&s->a), kb = (identity(&s->b, s) ? 1 : taps_of(s)) * blocks_of(&s->b);
  return nt > 1 && (blocks_of(&s->a) + 1) / 2 >= nt && ka / nt + kb < ka + kb / nt;
}
#endif

void cpu_dw_blocked(const cpu_dwb_shape *s, float *dw, char *scratch, int threads, int fresh) {
#ifdef __AVX512BF16__
  const int64_t rows = s->b.c, cols = s->a.c, chunk = chunk_positions(cols), total = s->n * s->gh * s->gw,
                chunks = (total + chunk - 1) / chunk, groups = rows / R, col_blocks = cols / BLOCK;
  const size_t share = pair_bytes(s), values = (size_t)values_of(s);
  const int by_positions = split_positions(s), dir = direct(s);
  float *arrays = (float *)(((uintptr_t)scratch + (size_t)threads * share + 63) & ~(uintptr_t)63);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    __m512i *pairs = (__m512i *)(((uintptr_t)scratch + (size_t)t * share + 63) & ~(uintptr_t)63);
    /* Sum array u: dW itself for u = 0 where direct. */
#define SUMS(u) (dir ? ((u) == 0 ? dw : arrays + (size_t)((u)-1) * values) : arrays + (size_t)(u)*values)
    if (by_positions) {
      const int64_t c_lo = chunks * t / nt, c_hi = chunks * (t + 1) / nt;
      run_chunks(s, c_lo, c_hi, 0, groups, 0, col_blocks, SUMS(t), pairs, !(dir && t == 0) || fresh);
    } else if (by_columns(s, nt)) {
      /* In whole 32-column tiles where the blocks pair up. */
      const int64_t units = (col_blocks + 1) / 2, k0 = 2 * (units * t / nt), k1 = 2 * (units * (t + 1) / nt);
      run_chunks(s, 0, chunks, 0, groups, k0, k1 < col_blocks ? k1 : col_blocks, SUMS(0), pairs, !dir || fresh);
    } else {
      run_chunks(s, 0, chunks, groups * t / nt, groups * (t + 1) / nt, 0, col_blocks, SUMS(0), pairs, !dir || fresh);
    }
    const int n_sums = by_positions ? nt : 1;
    if (!(dir && n_sums == 1)) {
#pragma omp barrier
      /* dW = (dW, or zero where fresh) + each sum array that has sums, in
       * thread order; where direct the first array is dW. Which arrays
       * those are is settled once, not per value. */
      const float *add[n_sums];
      int n_add = 0;
      for (int u = dir ? 1 : 0; u < n_sums; u++)
        if (by_positions ? chunks * (u + 1) / nt > chunks * u / nt : chunks > 0) add[n_add++] = SUMS(u);
      const int keep = !fresh || (dir && by_positions && chunks / nt > 0);
      add_sums(s, dw, add, n_add, keep, rows * t / nt, rows * (t + 1) / nt);
    } else if (chunks == 0 && fresh) {
      for (int64_t r = groups * t / nt * R; r < groups * (t + 1) / nt * R; r++)
        for (int64_t c = 0; c < cols; c++) dw[r * cols + c] = 0.0f;
    }
#undef SUMS
  }
#else
  (void)s, (void)dw, (void)scratch, (void)threads, (void)fresh;
#endif
}
#endif
