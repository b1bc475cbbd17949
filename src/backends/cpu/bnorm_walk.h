/* What the batch-norm kernels share (bnorm_kernels.c, bnorm_pair.c): how a
 * tensor is cut into tiles and a tile walked a lane group at a time, the
 * per-channel scratch and per-thread sums, and the small vector helpers
 * (the ReLU mask, the affine map). Static inline: each kernel file
 * specialises them for its own loops. */
#ifndef SPRY_BACKENDS_CPU_BNORM_WALK_H
#define SPRY_BACKENDS_CPU_BNORM_WALK_H

#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/shares.h"
#include "backends/cpu/vec.h"

/* Elements per tile: the f32 partial sums run over this many values. */
enum { TILE_ELEMS = 2048 };

/* y before the ReLU; forward and the ReLU mask in backward use this one
 * expression, so the mask matches the sign forward saw bit for bit. */
INLINE float affine(float x, float mean, float scale, float shift) { return fmaf(x - mean, scale, shift); }

/* ---- tiles ---- */

typedef struct {
  int64_t chunk;    /* positions per tile */
  int64_t per_unit; /* tiles per (image, block) */
  int64_t count;
} tiling;

static inline tiling tiles_of(const cpu_bn_geom *g) {
  tiling t;
  t.chunk = TILE_ELEMS / g->lanes;
  if (t.chunk < 16) t.chunk = 16; /* wide channels-last rows: flush the sums less often */
  if (t.chunk > g->hw) t.chunk = g->hw;
  t.per_unit = (g->hw + t.chunk - 1) / t.chunk;
  t.count = g->n * g->blocks * t.per_unit;
  return t;
}

/* Element offset of tile k, its block and its number of positions. */
INLINE int64_t tile_at(const cpu_bn_geom *g, const tiling *t, int64_t k, int64_t *blk, int64_t *np) {
  const int64_t unit = k / t->per_unit, p0 = (k % t->per_unit) * t->chunk;
  *blk = unit % g->blocks;
  *np = g->hw - p0 < t->chunk ? g->hw - p0 : t->chunk;
  return (unit / g->blocks) * g->img_stride + *blk * g->blk_stride + p0 * g->lanes;
}

/* y (or dy) as tile k of x finds it: shifted by the tile's image's extra
 * elements where y is part of a wider concat output (y_img_extra), so the
 * kernels index both with the same offsets. */
INLINE void *tile_y(const cpu_bn_geom *g, const tiling *t, int64_t k, const void *y) {
  if (!g->y_img_extra || !y) return (void *)y;
  const int64_t img = k / t->per_unit / g->blocks;
  return (char *)y + img * g->y_img_extra * (g->bf16 ? 2 : 4);
}

/* ---- work shares (shares.h) ----
 *
 * A pass cuts its tiles into shares_of(g) contiguous shares, taken by the
 * threads as they come free. Sums are kept per share and added in share
 * order: the bits depend neither on which thread took which share nor on
 * the team's size. */
enum { BN_SHARE_MIN_POSITIONS = 512, BN_PASSES = 2 };
enum { PASS_SUMS = 0, PASS_APPLY = 1 }; /* the statistics' or gradient sums; then y or dx */

/* Fewer shares for few positions: each share's sums cost 3 doubles a
 * channel to clear and to add, against 2-4 bytes a position and channel. */
static inline int64_t shares_of(const cpu_bn_geom *g) {
  int64_t per = g->n * g->hw / BN_SHARE_MIN_POSITIONS;
  per = per < 1 ? 1 : per > CPU_SHARES_PER_THREAD ? CPU_SHARES_PER_THREAD : per;
  return (int64_t)g->threads * per;
}

/* The tiles of the shares this thread takes, one at a time:
 *   for (tile_walk w = tiles_begin(s, pass, t, z); tiles_next(&w, &k);)
 * with w.acc the share's sums, its first z doubles cleared as it is taken
 * (z = 0: a pass without sums). */
typedef struct bn_scratch bn_scratch;
typedef struct {
  cpu_share_walk walk;
  const tiling *t;
  const bn_scratch *s;
  int64_t k, k1, zero;
  double *acc;
} tile_walk;

/* Scratch: shared per-channel arrays, the passes' counters (a cache line
 * each), then per share 3 x cp doubles (two sums a channel; a third for an
 * adopted batch norm, bnorm_pair.c). */
struct bn_scratch {
  float *k, *a, *b, *d;     /* shift; then forward scale/shift or backward coefficients */
  float *k2, *a2, *b2, *d2; /* the same for an adopted batch norm */
  int64_t *next;            /* BN_PASSES counters, 8 apart */
  char *per_share;
  size_t share_bytes;
  int64_t shares;
};

enum { BN_ARRAYS = 8, BN_SHARE_SUMS = 3, BN_COUNTER_BYTES = 64 * BN_PASSES };

static inline size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

static inline size_t channels_padded(const cpu_bn_geom *g) { return (size_t)(g->blocks * g->lanes); }

static inline bn_scratch scratch_of(const cpu_bn_geom *g, char *base) {
  base = (char *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
  const size_t cp = channels_padded(g), arr = round64(cp * sizeof(float));
  float *f[BN_ARRAYS];
  for (int k = 0; k < BN_ARRAYS; k++) f[k] = (float *)(base + (size_t)k * arr);
  bn_scratch s = {f[0],
                  f[1],
                  f[2],
                  f[3],
                  f[4],
                  f[5],
                  f[6],
                  f[7],
                  (int64_t *)(base + BN_ARRAYS * arr),
                  base + BN_ARRAYS * arr + BN_COUNTER_BYTES,
                  round64(BN_SHARE_SUMS * cp * sizeof(double)),
                  shares_of(g)};
  return s;
}

/* The counters back to zero: before the parallel region that runs the passes. */
static inline void shares_reset(const bn_scratch *s) {
  for (int p = 0; p < BN_PASSES; p++) s->next[8 * p] = 0;
}

INLINE int64_t *pass_counter(const bn_scratch *s, int pass) { return s->next + 8 * pass; }

INLINE double *share_acc(const bn_scratch *s, int64_t share) {
  return (double *)(s->per_share + (size_t)share * s->share_bytes);
}

INLINE tile_walk tiles_begin(const bn_scratch *s, int pass, const tiling *t, int64_t zero) {
  const tile_walk w = {cpu_shares_begin(pass_counter(s, pass), s->shares), t, s, 0, 0, zero, NULL};
  return w;
}

INLINE int tiles_next(tile_walk *w, int64_t *k) {
  while (w->k >= w->k1) {
    const int64_t share = cpu_shares_next(&w->walk);
    if (share < 0) return 0;
    cpu_share_range(w->t->count, w->walk.count, share, &w->k, &w->k1);
    if (w->zero) {
      w->acc = share_acc(w->s, share);
      for (int64_t c = 0; c < w->zero; c++) w->acc[c] = 0.0;
    }
  }
  *k = w->k++;
  return 1;
}

/* The end of the per-share region (what backward keeps after it). */
INLINE char *shares_end(const bn_scratch *s) { return s->per_share + (size_t)s->shares * s->share_bytes; }

/* Layouts whose lanes are a multiple of 8 walk a tile one lane group (vfw,
 * vec.h: 16 channels with AVX-512, else 8; a last group of 8 when the lanes
 * are 16k + 8) at a time, positions inside, so a group's sums and
 * coefficients stay in registers and the tile (a few KB) stays in L1 across
 * the groups. With 8 lanes in all and 16-lane vectors, one vector holds two
 * positions (the ResUNet's 8-channel layers at full resolution).
 *
 * Each *_group function walks positions [p0, p1) of G lane groups side by
 * side, lanes [j, j + G w): w is VW or 8, or 16 over two positions of 8
 * lanes; w and G are constants where called. Wide channels-last rows go G =
 * 4 groups (64 channels, 128 bytes of bf16) at a time: one group at a time,
 * each position's row was read 32 bytes at a time with a jump of the row
 * width between reads, 25-35% slower from memory than a contiguous layout.
 * Rows of 128 channels and more go 8 groups at a time (256 channels: 13%
 * faster than 4), and 32-channel rows 2 (ResUNet's decoder at 224x224,
 * bf16 b16, from memory: with the residual add forward 13.8 -> 10.3 ms,
 * backward 14.6 -> 12.4; with the ReLU 8.6 -> 7.5 and 10.5 -> 9.4). */
enum { GMAX = 8 };

/* What follows the normalisation (the kernels' `relu`, a constant in each
 * specialisation): nothing, a ReLU, or a residual add and a ReLU. */
enum { MODE_PLAIN = 0, MODE_RELU = 1, MODE_ADD_RELU = 2 };

typedef uint8_t vbw __attribute__((vector_size(VW)));
typedef uint8_t vbwu __attribute__((vector_size(VW), aligned(1)));
typedef uint8_t vb8 __attribute__((vector_size(8)));
typedef uint8_t vb8u __attribute__((vector_size(8), aligned(1)));

/* mask[i..i+w) = v > 0, a byte a lane. */
INLINE void mask_store(uint8_t *m, int64_t i, vfw v, int w) {
  const viw pos = (viw)(v > 0.0f) & 1;
#ifdef __AVX512F__
  if (w == 8) {
    *(vb8u *)(m + i) = __builtin_convertvector(__builtin_shufflevector(pos, pos, VW_LO8), vb8);
    return;
  }
#endif
  *(vbwu *)(m + i) = __builtin_convertvector(pos, vbw);
}

/* g where mask[i..i+w) is set, else 0. */
INLINE vfw mask_apply(vfw g, const uint8_t *m, int64_t i, int w) { return (vfw)((viw)g & vmask32(m, i, w)); }

INLINE vfw vmask(vfw g, vfw y) { return (vfw)((viw)g & (viw)(y > 0.0f)); }
INLINE vfw vaffine(vfw x, vfw m, vfw sc, vfw sh) { return (x - m) * sc + sh; }

/* Positions one vector of w lanes covers. */
INLINE int64_t positions_per_vector(int w, int64_t L) { return w > L ? w / L : 1; }

/* A per-channel constant for lanes [j, j + w): repeated when the vector
 * holds two positions. */
INLINE vfw vconst(const float *c, int64_t j, int w, int64_t L) {
  return positions_per_vector(w, L) == 2 ? vtwice8(c + j) : vldw(c + j, 0, 0, w);
}

/* Calls GROUP(j, w, G, p0, p1) over a tile's np positions and L lanes. */
#define FOR_EACH_GROUP(L, np, GROUP)                                    \
  do {                                                                  \
    if (VW == 16 && (L) == 8) {                                         \
      const int64_t even_ = (np) & ~(int64_t)1;                         \
      GROUP(0, 16, 1, 0, even_);                                        \
      if (even_ < (np)) GROUP(0, 8, 1, even_, np);                      \
    } else {                                                            \
      int64_t j_ = 0;                                                   \
      for (; j_ + 8 * VW <= (L); j_ += 8 * VW) GROUP(j_, VW, 8, 0, np); \
      for (; j_ + 4 * VW <= (L); j_ += 4 * VW) GROUP(j_, VW, 4, 0, np); \
      for (; j_ + 2 * VW <= (L); j_ += 2 * VW) GROUP(j_, VW, 2, 0, np); \
      for (; j_ + VW <= (L); j_ += VW) GROUP(j_, VW, 1, 0, np);         \
      if (j_ < (L)) GROUP(j_, 8, 1, 0, np);                             \
    }                                                                   \
  } while (0)

/* Which walk a geometry takes. */
enum { WALK_PLAIN, WALK_VEC, WALK_SCALAR };
INLINE int walk_of(int64_t L) { return L == 1 ? WALK_PLAIN : L % 8 == 0 ? WALK_VEC : WALK_SCALAR; }

/* One lane group's sums, added into a1, a2 (indexed by lane). */
typedef double vd8u __attribute__((vector_size(64), aligned(8)));

/* a[0..8) (w = 8, or 16 over two positions of 8 lanes) or a[0..16) += s,
 * 8 lanes at a time in double vectors: lane by lane, this cost as much as
 * the 32 positions of a wide channels-last tile it followed. */
INLINE void add_into_doubles(double *a, vfw s, int w, int64_t L) {
#if defined(__AVX512F__)
  const vd8u lo = __builtin_convertvector(__builtin_shufflevector(s, s, 0, 1, 2, 3, 4, 5, 6, 7), vd8u);
  const vd8u hi = __builtin_convertvector(__builtin_shufflevector(s, s, 8, 9, 10, 11, 12, 13, 14, 15), vd8u);
  if (w == 8) {
    *(vd8u *)a += lo;
  } else if (positions_per_vector(w, L) == 2) {
    *(vd8u *)a += lo + hi;
  } else {
    *(vd8u *)a += lo;
    *(vd8u *)(a + 8) += hi;
  }
#else
  (void)L;
  *(vd8u *)a += __builtin_convertvector(s, vd8u);
#endif
}

/* One channel's backward from its sums over m values, s1 = sum of g and
 * s2 = sum of g (x - mean) (g: dy after the fused ReLU): the parameter
 * gradients added in (where wanted), and dx = a g + b (x - mean) + d with
 *   a = gamma inv_std, b = -a inv_std^2 s2 / m, d = -a s1 / m
 * under batch statistics (b = d = 0 with running statistics). */
INLINE void bn_backward_channel(double s1, double s2, double m, float var, float eps, float gamma, int batch,
                                float *dgamma, float *dbeta, float *a, float *b, float *d) {
  const double inv_std = 1.0 / sqrt((double)var + eps), ga = gamma * inv_std;
  if (dgamma) *dgamma += (float)(s2 * inv_std);
  if (dbeta) *dbeta += (float)s1;
  *a = (float)ga;
  *b = batch ? (float)(-ga * inv_std * inv_std * s2 / m) : 0.0f;
  *d = batch ? (float)(-ga * s1 / m) : 0.0f;
}

/* bnorm_pair.c: an absorbed add whose other input is an adopted batch norm
 * (cpu_bn_residual.partner); bnorm_kernels.c's bodies call these inside
 * their parallel regions, on the shares each thread takes. The
 * partner's constants (one thread): its mean, scale and shift into k2, a2,
 * b2 for forward; after backward's sums, its parameter gradients and dx2
 * coefficients into a2, b2, d2 (k2 its mean, set before). */
void cpu_bn_pair_constants(const cpu_bn_geom *g, const bn_scratch *s, const cpu_bn_partner *q);
void cpu_bn_pair_normalize(const cpu_bn_geom *g, const bn_scratch *s, const void *x, void *y,
                           const cpu_bn_residual *res);
void cpu_bn_pair_sums(const cpu_bn_geom *g, const bn_scratch *s, const void *x, const void *dy,
                      const cpu_bn_residual *res);
void cpu_bn_pair_finish(const cpu_bn_geom *g, const bn_scratch *s, const cpu_bn_partner *q);
void cpu_bn_pair_dx(const cpu_bn_geom *g, const bn_scratch *s, const void *x, const void *dy, void *dx, int add,
                    const cpu_bn_residual *res);

#endif
