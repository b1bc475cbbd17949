/* Matrix products C[M][N] (=|+=) A[M][K] B[K][N] in bf16 on AMX tiles of
 * our own, with what happens to each block of C on its way out (the
 * epilogue, cpu_mm_epilogue): a bias, C's old values added, the batch
 * statistics of C's columns, C's rows scattered to an up-layer's pixels.
 * A is the activation rows as they lie (channels-last: a row per
 * position), B the layer's weights packed once a step.
 *
 * Where: bf16 training plans on AMX. A 1x1 convolution whose batch norm
 * takes the statistics (conv.c): the batch norm then skips its statistics
 * pass, a read of the whole activation. A transposed convolution with
 * kernel = stride (deconv_mm.c): its output pixels written from the rows,
 * where oneDNN's matmul wrote a [M, k k OC] matrix and a copy pass moved it
 * (and the statistics of the batch norm after it too). Input gradients only
 * with cpu_mm_amx_dx.
 *
 * Why not every product: against oneDNN 2.6's brgemm matmul on ResUNet-50's
 * 1x1 shapes (one process alternating the two, 15 runs each, Xeon with AMX,
 * 2 threads) the tiles' sum over a step's products was 1.24-1.31x faster
 * while the host was quiet and 0.90-0.96x while it was loaded (medians;
 * shapes with K <= 256 and N >= 4K lost most: 0.62-0.74x). Alone they are
 * no gain; with the statistics or the scattered rows they save a pass.
 *
 * How: B is packed the way tdpbf16ps reads it: per 16 columns and per 32
 * rows (16 row pairs), a 1 KB tile of 16 pairs x 16 columns, the pair's two
 * values side by side. The work items are (panel of columns, block of 32
 * rows), panel-major, cut into 8 contiguous shares a thread that the
 * threads take as they come free (shares.h), so a thread keeps one panel of
 * B (at most cpu_mm_amx_panel_bytes: 512 KB) in its L2 while A streams
 * past. Per block, 32 rows x 32 columns accumulate in four tiles
 * over all of K (A's two tiles loaded from the rows where they lie, a row
 * stride of K), then go through an f32 buffer into bf16 rows; a block's
 * conversion is issued after the next block's products, so the vector work
 * runs while the tiles compute (the sum over the step's shapes 1.04 -> 1.16x
 * oneDNN's on a quiet host). A last block of 16 rows uses two tiles.
 *
 * Statistics: per block and column, sums of the stored (rounded) values
 * shifted by the block's first row, merged per share in double (Chan et
 * al.'s pairwise update), then across shares in share order: the mean
 * and biased variance a batch norm reading C computes, in another order.
 *
 * Conversions are vcvtne2ps2bf16's: round to nearest even, as
 * sp_bf16_round, except that it reads f32 denormals as zero. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/amx.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/shares.h"

int cpu_use_mm_amx = 1;
int cpu_mm_amx_dx = 0;
int cpu_mm_amx_stream = 1;
long cpu_mm_amx_streamed;
long cpu_mm_amx_calls, cpu_mm_amx_stats_calls;

/* K in steps of 32 (one A tile row: 64 bytes), or one shorter step for K
 * of 8 or 16 (the narrow layers of ResUNet's last decoder block): A tiles
 * of K values a row, B tiles of K / 2 pair rows. */
static int64_t step_of(int64_t k) { return k < 32 ? k : 32; }

/* Accumulators 0-3 and A tiles 4-5 of 16 rows, B tiles 6-7 of kstep / 2. */
AMX_FN static void configure(int64_t kstep) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  cfg.colsb[4] = cfg.colsb[5] = (uint16_t)(2 * kstep);
  cfg.rows[6] = cfg.rows[7] = (uint8_t)(kstep / 2);
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg)); /* as amx.h's tiles_configure */
}

int cpu_mm_amx_fits(int64_t m, int64_t k, int64_t n) {
  return cpu_use_mm_amx && m > 0 && m % 16 == 0 && (k == 8 || k == 16 || (k > 0 && k % 32 == 0)) && n > 0 &&
         n % 32 == 0 && cpu_amx_usable();
}

size_t cpu_mm_amx_packed_bytes(int64_t k, int64_t n) { return sizeof(uint16_t) * (size_t)(k * n); }

/* 32 f32 (two vectors) as 32 bf16 in order: lo's 16, then hi's. */
AMX_FN static inline __m512i to_bf16(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

/* 32 consecutive values of w from element i, as bf16 (rounded from f32). */
AMX_FN static inline __m512i load32(const void *w, int bf16, int64_t i) {
  if (bf16) return _mm512_loadu_si512((const uint16_t *)w + i);
  const float *f = (const float *)w + i;
  return to_bf16(_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16));
}

/* A step of w's values from element i (32, or 8 or 16 and zeros), as bf16. */
AMX_FN static inline __m512i load_step(const void *w, int bf16, int64_t i, int64_t kstep) {
  if (kstep == 32) return load32(w, bf16, i);
  if (bf16) return _mm512_maskz_loadu_epi16((__mmask32)((1u << kstep) - 1), (const uint16_t *)w + i);
  return to_bf16(_mm512_maskz_loadu_ps((__mmask16)((1u << kstep) - 1), (const float *)w + i), _mm512_setzero_ps());
}

/* 16 values from element i0 then 16 from i1, as bf16. */
AMX_FN static inline __m512i load16x2(const void *w, int bf16, int64_t i0, int64_t i1) {
  if (bf16) {
    const uint16_t *h = w;
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(h + i0))),
                              _mm256_loadu_si256((const __m256i *)(h + i1)), 1);
  }
  const float *f = w;
  return to_bf16(_mm512_loadu_ps(f + i0), _mm512_loadu_ps(f + i1));
}

static void pack(const void *w, int bf16, int64_t k, int64_t n, int transposed, uint16_t *bp, int threads);

void cpu_mm_amx_pack(const float *w, int64_t k, int64_t n, int transposed, uint16_t *bp, int threads) {
  pack(w, 0, k, n, transposed, bp, threads);
}

void cpu_mm_amx_pack_bf16(const uint16_t *w, int64_t k, int64_t n, int transposed, uint16_t *bp, int threads) {
  pack(w, 1, k, n, transposed, bp, threads);
}

AMX_FN static void pack(const void *w, int bf16, int64_t k, int64_t n, int transposed, uint16_t *bp, int threads) {
  const int64_t kstep = step_of(k), steps = k / kstep, blocks = n / 16, te = 16 * kstep;
  static const int16_t pairs[32]
      __attribute__((aligned(64))) = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t nb = 0; nb < blocks; nb++)
    for (int64_t s = 0; s < steps; s++) {
      uint16_t *tile = bp + (nb * steps + s) * te;
      if (transposed) {
        /* w is [n][k]: column c of B is row 16 nb + c of w, its 32 values of
         * this step contiguous (16 pairs); a dword transpose puts pair p of
         * every column in tile row p. */
        __m512i v[16];
        for (int c = 0; c < 16; c++) v[c] = load_step(w, bf16, (16 * nb + c) * k + kstep * s, kstep);
        transpose16(v);
        for (int p = 0; p < kstep / 2; p++) _mm512_store_si512(tile + p * 32, v[p]);
      } else {
        /* w is [k][n]: tile row p interleaves rows 32 s + 2p and + 1. */
        for (int p = 0; p < kstep / 2; p++) {
          const int64_t i0 = (kstep * s + 2 * p) * n + 16 * nb;
          _mm512_store_si512(tile + p * 32,
                             _mm512_permutexvar_epi16(_mm512_load_si512(pairs), load16x2(w, bf16, i0, i0 + n)));
        }
      }
    }
}

/* The per-thread sums of the statistics (cpu_mm_epilogue.stats): per column,
 * the count, mean and sum of squared deviations so far (Chan et al.'s
 * pairwise update, in double, a block at a time). */
typedef struct {
  double *count, *mean, *m2;
} col_stats;

/* A block's 32 columns into the thread's sums: per column, the block's own
 * sums shifted by its first row (s1, s2 over `rows` values), merged. */
static void merge_block(const col_stats *st, int64_t n0, int rows, const float *first, const float *s1,
                        const float *s2) {
  for (int j = 0; j < 32; j++) {
    const double nb = rows, mb = first[j] + (double)s1[j] / nb, m2b = (double)s2[j] - (double)s1[j] * s1[j] / nb;
    cpu_moments_merge(st->count + n0 + j, st->mean + n0 + j, st->m2 + n0 + j, nb, mb, m2b > 0 ? m2b : 0);
  }
}

AMX_FN static inline __m512 widen_lo(__m512i v) {
  return (__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16);
}
AMX_FN static inline __m512 widen_hi(__m512i v) {
  return (__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16);
}

/* Where C's rows go, from row m0 on, columns n0 .. n0 + 32: C's own rows,
 * or with up_k the output pixels of a transposed convolution
 * (cpu_mm_epilogue). The divisions once a block; then a step a row (the
 * next input pixel is k output pixels on) and a jump at the end of an
 * input row (past the other k - 1 output rows its pixels fill). */
typedef struct {
  uint16_t *at;
  int64_t step, j, w, jump;
} rows_out;

static rows_out rows_from(const cpu_mm_epilogue *e, uint16_t *c, int64_t n, int64_t m0, int64_t n0) {
  if (!e->up_k) return (rows_out){c + m0 * n + n0, n, 0, INT64_MAX, 0};
  const int64_t k = e->up_k, oc = e->up_oc, run = k * oc, a = n0 / run;
  const int64_t j = m0 % e->up_w, i = (m0 / e->up_w) % e->up_h, img = m0 / (e->up_w * e->up_h);
  uint16_t *at = c + ((img * k * e->up_h + k * i + a) * k * e->up_w + k * j) * oc + (n0 - a * run);
  return (rows_out){at, k * oc, j, e->up_w, (k - 1) * k * e->up_w * oc};
}

static inline void rows_next(rows_out *o) {
  o->at += o->step;
  if (++o->j == o->w) o->j = 0, o->at += o->jump;
}

/* One 64-byte run of C's bf16 row: past the caches with stream where the
 * line is whole (cpu_mm_epilogue.stream). */
AMX_FN static inline void put_row(uint16_t *out, __m512i v, int stream) {
  if (stream && ((uintptr_t)out & 63) == 0)
    _mm512_stream_si512((__m512i *)out, v);
  else
    _mm512_storeu_si512(out, v);
}

/* The body, with what it does known to the compiler: with_bias and add
 * (the bias or C's old values, where e has them), stats (st non-NULL). */
AMX_FN static inline __attribute__((always_inline)) void store_rows_with(const float *buf, int rows,
                                                                         const cpu_mm_epilogue *e, uint16_t *c,
                                                                         int64_t n, int64_t m0, const col_stats *st,
                                                                         int64_t n0, const int with_bias, const int add,
                                                                         const int stats) {
  const float *bias = with_bias && e->bias ? e->bias + n0 : NULL;
  const __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps(),
               b1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
  /* The sums' shift: the first row's values (before rounding: any value
   * near the column's serves). */
  const __m512 k0 = _mm512_add_ps(_mm512_load_ps(buf), b0), k1 = _mm512_add_ps(_mm512_load_ps(buf + 16), b1);
  __m512 s10 = _mm512_setzero_ps(), s11 = s10, s20 = s10, s21 = s10;
  rows_out o = rows_from(e, c, n, m0, n0);
  for (int r = 0; r < rows; r++, rows_next(&o)) {
    __m512 lo = _mm512_load_ps(buf + r * 32), hi = _mm512_load_ps(buf + r * 32 + 16);
    if (with_bias) lo = _mm512_add_ps(lo, b0), hi = _mm512_add_ps(hi, b1);
    uint16_t *out = o.at;
    if (add && e->accumulate) {
      const __m512i old = _mm512_loadu_si512(out);
      lo = _mm512_add_ps(lo, widen_lo(old));
      hi = _mm512_add_ps(hi, widen_hi(old));
    }
    const __m512i v = to_bf16(lo, hi);
    put_row(out, v, e->stream && !(add && e->accumulate));
    if (stats) {
      /* The values as stored (rounded), as a batch norm reading C sees them. */
      const __m512 d0 = _mm512_sub_ps(widen_lo(v), k0), d1 = _mm512_sub_ps(widen_hi(v), k1);
      s10 = _mm512_add_ps(s10, d0), s11 = _mm512_add_ps(s11, d1);
      s20 = _mm512_fmadd_ps(d0, d0, s20), s21 = _mm512_fmadd_ps(d1, d1, s21);
    }
  }
  if (stats) {
    float first[32], s1[32], s2[32];
    _mm512_storeu_ps(first, k0), _mm512_storeu_ps(first + 16, k1);
    _mm512_storeu_ps(s1, s10), _mm512_storeu_ps(s1 + 16, s11);
    _mm512_storeu_ps(s2, s20), _mm512_storeu_ps(s2 + 16, s21);
    merge_block(st, n0, rows, first, s1, s2);
  }
}

/* buf's rows (32 f32 each) into C's bf16 rows at column n0, with the bias
 * added or C's old values; with st, the written values' sums. */
AMX_FN static void store_rows(const float *buf, int rows, const cpu_mm_epilogue *e, uint16_t *c, int64_t n, int64_t m0,
                              const col_stats *st, int64_t n0) {
  if (e->c32) { /* f32 C: the sums as they are (a gradient summed further) */
    float *out = e->c32 + m0 * n + n0;
    for (int r = 0; r < rows; r++, out += n) {
      __m512 lo = _mm512_load_ps(buf + r * 32), hi = _mm512_load_ps(buf + r * 32 + 16);
      if (e->accumulate)
        lo = _mm512_add_ps(lo, _mm512_loadu_ps(out)), hi = _mm512_add_ps(hi, _mm512_loadu_ps(out + 16));
      _mm512_storeu_ps(out, lo), _mm512_storeu_ps(out + 16, hi);
    }
    return;
  }
  const int plain = !e->bias && !e->accumulate;
  if (plain && !st && !e->up_k) { /* the common case in as few instructions as it takes */
    uint16_t *out = c + m0 * n + n0;
    for (int r = 0; r < rows; r++)
      put_row(out + r * n, to_bf16(_mm512_load_ps(buf + r * 32), _mm512_load_ps(buf + r * 32 + 16)), e->stream);
  } else if (plain && st) {
    store_rows_with(buf, rows, e, c, n, m0, st, n0, 0, 0, 1); /* a batch norm's input */
  } else if (st) {
    store_rows_with(buf, rows, e, c, n, m0, st, n0, 1, 1, 1);
  } else {
    store_rows_with(buf, rows, e, c, n, m0, st, n0, 1, 1, 0);
  }
}

/* A block of C waiting in an f32 buffer for its bf16 rows. */
typedef struct {
  int64_t m0, n0;
  int rows;
  float *buf;
} pending;

/* The tiles of one block: rows m0 .. m0 + 16 or 32 of C, columns n0 ..
 * n0 + 32, summed over all of K (tiles 0-3 accumulate, A in 4-5, B in 6-7).
 * The previous block's rows are converted after this block's products were
 * issued, so the vector work runs while the tiles compute. */
AMX_FN static void block(const uint16_t *a, int64_t k, const uint16_t *bp, int64_t m0, int rows, int64_t n0,
                         float *buf) {
  const int64_t kstep = step_of(k), steps = k / kstep, te = 16 * kstep;
  const uint16_t *b0 = bp + (n0 / 16) * steps * te, *b1 = b0 + steps * te, *a0 = a + m0 * k;
  _tile_zero(0);
  _tile_zero(1);
  if (rows == 32) {
    const uint16_t *a1 = a0 + 16 * k;
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t s = 0; s < steps; s++) {
      _tile_loadd(4, a0 + kstep * s, k * 2);
      _tile_loadd(5, a1 + kstep * s, k * 2);
      _tile_loadd(6, b0 + s * te, 64);
      _tile_loadd(7, b1 + s * te, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  } else {
    for (int64_t s = 0; s < steps; s++) {
      _tile_loadd(4, a0 + kstep * s, k * 2);
      _tile_loadd(6, b0 + s * te, 64);
      _tile_loadd(7, b1 + s * te, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
    }
  }
}

AMX_FN static void store_tiles(int rows, float *buf) {
  _tile_stored(0, buf, 128);
  _tile_stored(1, buf + 16, 128);
  if (rows == 32) {
    _tile_stored(2, buf + 16 * 32, 128);
    _tile_stored(3, buf + 16 * 32 + 16, 128);
  }
}

int64_t cpu_mm_amx_panel_bytes = 512 * 1024;

size_t cpu_mm_amx_stats_bytes(int64_t n, int threads) {
  return sizeof(double) * 3 * (size_t)(n * threads * CPU_SHARES_PER_THREAD);
}

/* The shares' sums of each channel's columns merged, in share then column
 * order. */
static void finish_stats(const cpu_mm_epilogue *e, int64_t n, int64_t shares) {
  const int64_t channels = e->channels ? e->channels : n;
  for (int64_t ch = 0; ch < channels; ch++) {
    double cnt = 0, mean = 0, m2 = 0;
    for (int64_t t = 0; t < shares; t++)
      for (int64_t j = ch; j < n; j += channels) {
        const double *w = e->stats + 3 * n * t, nb = w[j];
        if (nb > 0) cpu_moments_merge(&cnt, &mean, &m2, nb, w[n + j], w[2 * n + j]);
      }
    e->mean[ch] = (float)mean;
    e->var[ch] = (float)(cnt > 0 ? m2 / cnt : 0);
  }
}

AMX_FN void cpu_mm_amx(const uint16_t *a, int64_t m, int64_t k, const uint16_t *bp, int64_t n, uint16_t *c,
                       const cpu_mm_epilogue *e, int threads) {
  static const cpu_mm_epilogue plain;
  if (!e) e = &plain;
  cpu_mm_amx_calls++, cpu_mm_amx_stats_calls += e->mean != NULL, cpu_mm_amx_streamed += e->stream != 0;
  /* Panels as wide as fit the budget (at least 32 columns): A is read once a panel. */
  int64_t np = cpu_mm_amx_panel_bytes / (2 * k) / 32 * 32;
  np = np < 32 ? 32 : np > n ? n : np;
  const int64_t mblocks = (m + 31) / 32, panels = (n + np - 1) / np, items = mblocks * panels;
  /* Contiguous ranges of items (panel-major: a share keeps to one or two
   * panels of B), each with its own statistics, cleared by the thread that
   * takes it. */
  const int64_t shares = cpu_shares_count(items, threads);
  int64_t next = 0;
#pragma omp parallel num_threads(threads)
  {
    float bufs[2][32 * 32] __attribute__((aligned(64)));
    pending prev = {0, 0, 0, NULL};
    int cur = 0, configured = 0;
    cpu_share_walk walk = cpu_shares_begin(&next, shares);
    for (int64_t sh; (sh = cpu_shares_next(&walk)) >= 0;) {
      int64_t i0, i1;
      cpu_share_range(items, shares, sh, &i0, &i1);
      col_stats sums = {NULL, NULL, NULL};
      if (e->mean) {
        double *w = e->stats + 3 * n * sh;
        memset(w, 0, sizeof(double) * 3 * (size_t)n);
        sums = (col_stats){w, w + n, w + 2 * n};
      }
      const col_stats *st = e->mean ? &sums : NULL;
      if (!configured) configure(step_of(k)), configured = 1;
      for (int64_t i = i0; i < i1; i++) {
        const int64_t panel = i / mblocks, m0 = (i % mblocks) * 32;
        const int64_t n0 = panel * np, n1 = n0 + np < n ? n0 + np : n;
        const int rows = m - m0 < 32 ? 16 : 32;
        for (int64_t j = n0; j < n1; j += 32) {
          block(a, k, bp, m0, rows, j, bufs[cur]);
          if (prev.buf) store_rows(prev.buf, prev.rows, e, c, n, prev.m0, st, prev.n0);
          store_tiles(rows, bufs[cur]);
          prev = (pending){m0, j, rows, bufs[cur]};
          cur ^= 1;
        }
      }
      /* The share's last block out with its statistics. */
      store_rows(prev.buf, prev.rows, e, c, n, prev.m0, st, prev.n0);
      prev.buf = NULL;
    }
    if (configured) tiles_release();
    if (e->stream) _mm_sfence(); /* the streamed lines out before the region's barrier */
  }
  if (e->mean) finish_stats(e, n, shares);
}
#endif
