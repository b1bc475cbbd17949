/* Weight reorders of our own where oneDNN 2.6 runs them on its generic
 * `jit:uni` kernel: f32 between a layout blocked 16 x 16 over the first two
 * dims (ABcd16b16a, ABcd16a16b, BAcd16a16b, ...) and a plain one, written
 * or added, and plain f32 into the bf16 kernels' pair-blocked tiles
 * (ABcd8b16a2b, ...), rounded. Plain layouts with one of the two dims
 * innermost (1x1 kernels, linear layers, channels-last kernels) move as
 * 16 x 16 tiles of 16 vectors, transposed in registers where the plain side
 * runs the other way; kernels of up to 3x3 in oihw / iohw as runs of 16
 * kernel-size values (pair_runs). Block pairs go in the blocked side's
 * memory order.
 *
 * Why: oneDNN ran a 1x1 weight gradient back to the plain master gradient at
 * 6-9 GB/s (2048x1024: 2.1-3.7 ms; ours 0.54-0.74), and 3x3 weights into
 * oihw and plain f32 into bf16 tiles at 15-25 GB/s. Standalone, 2 threads,
 * Zen 5, best of 6 over 8 weights, several runs (ms, oneDNN -> ours):
 * 512x512x3x3 into oihw 0.62-0.70 -> 0.46-0.57, added 1.17-1.21 ->
 * 0.47-0.77, into bf16 tiles 0.50-0.64 -> 0.32-0.52; 256x256x3x3 into bf16
 * tiles 0.11-0.14 -> 0.03-0.06; 512x2048x2x2 (a transposed convolution's)
 * into bf16 tiles 0.86-1.50 -> 0.75-1.14. In an f32 ResUNet-50 step at
 * batch 16 these were 32 ms of weight reorders (ONEDNN_VERBOSE). */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

int cpu_reorder_use_w16 = 1;

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* Where the 16 x 16 blocking is, as the plan's descriptor says: the tile's
 * row dim and column dim (inner_idxs); 0 if md is not such a layout. The
 * bf16 kernels' layouts (ABcd8b16a2b, BAcd8a16b2a, ...) are tiles whose rows
 * go in pairs, two values of the row dim side by side (*pairs). */
static int tiled(const dnnl_memory_desc_t *md, int *row, int *col, int *pairs) {
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  if (md->format_kind != dnnl_blocked) return 0;
  *pairs = b->inner_nblks == 3;
  if (*pairs && (b->inner_blks[0] != 8 || b->inner_blks[1] != 16 || b->inner_blks[2] != 2 ||
                 b->inner_idxs[2] != b->inner_idxs[0]))
    return 0;
  if (!*pairs && (b->inner_nblks != 2 || b->inner_blks[0] != 16 || b->inner_blks[1] != 16)) return 0;
  *row = (int)b->inner_idxs[0], *col = (int)b->inner_idxs[1];
  return *row + *col == 1; /* the two blocked dims are dims 0 and 1 */
}

static int plain(const dnnl_memory_desc_t *md) {
  return md->format_kind == dnnl_blocked && md->format_desc.blocking.inner_nblks == 0;
}

/* Both descriptors describe the same weights with nothing padded. */
static int same_dense(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
  if (a->ndims != b->ndims || a->ndims < 2 || a->ndims > 4 || a->offset0 != 0 || b->offset0 != 0 ||
      a->extra.flags != 0 || b->extra.flags != 0)
    return 0;
  for (int d = 0; d < a->ndims; d++)
    if (a->dims[d] != b->dims[d] || a->padded_dims[d] != a->dims[d] || b->padded_dims[d] != b->dims[d]) return 0;
  return a->dims[0] % 16 == 0 && a->dims[1] % 16 == 0;
}

int cpu_w16_of(cpu_w16 *t, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate) {
  memset(t, 0, sizeof *t);
  if (!cpu_reorder_use_w16 || !same_dense(src, dst) || src->data_type != dnnl_f32) return 0;
  int row, col, pairs;
  const dnnl_memory_desc_t *blk, *pl;
  if (tiled(src, &row, &col, &pairs) && !pairs && plain(dst) && dst->data_type == dnnl_f32)
    blk = src, pl = dst, t->to_plain = 1;
  else if (tiled(dst, &row, &col, &pairs) && plain(src) && dst->data_type == (pairs ? dnnl_bf16 : dnnl_f32))
    blk = dst, pl = src;
  else
    return 0;
  if (pairs && accumulate) return 0; /* bf16 weights are written, never added to */
  t->pairs = pairs;
  const dnnl_dims_t *bs = &blk->format_desc.blocking.strides, *ps = &pl->format_desc.blocking.strides;
  t->nb[0] = blk->dims[row] / 16, t->nb[1] = blk->dims[col] / 16;
  t->bstride[0] = (*bs)[row], t->bstride[1] = (*bs)[col];
  t->pstride[0] = (*ps)[row], t->pstride[1] = (*ps)[col];
  t->spatial = 1;
  for (int d = 2; d < blk->ndims; d++) t->spatial *= blk->dims[d];
  /* The kernel positions as one index: dense, in the same order, on both
   * sides (oihw's h, w and the blocked layouts' c, d are). */
  if (blk->ndims == 4 && ((*bs)[2] != (*bs)[3] * blk->dims[3] || (*ps)[2] != (*ps)[3] * pl->dims[3])) return 0;
  t->bsp = blk->ndims > 2 ? (*bs)[blk->ndims - 1] : 0;
  t->psp = pl->ndims > 2 ? (*ps)[pl->ndims - 1] : 0;
  t->accumulate = accumulate;
  /* One of the two dims innermost on the plain side (1x1 kernels, linear
   * layers, channels-last kernels): whole tiles. */
  if (t->pstride[0] == 1 || t->pstride[1] == 1) {
    t->transpose = t->pstride[1] != 1;
    return t->on = W16_TILES;
  }
  /* Kernels of up to 3x3 in oihw / iohw: the kernel positions innermost,
   * then one of the two dims (mid), as 16 runs of 16 x spatial values per
   * block pair, one per value of the other (far) dim: f32 gradients into
   * them (written or added), and plain f32 into bf16 tiles. Larger kernels
   * stay oneDNN's. Two simpler ways were slower than oneDNN at 3x3: lines of 16
   * gathered across a block pair's tiles (512x512x3x3 into oihw: 1.7
   * against 0.8 ms) and a block pair staged through a buffer with scalar
   * moves (from oihw: 1.45 against 0.58 ms). */
  const int64_t sp = t->spatial;
  const int mid_row = t->pstride[0] == sp, mid_col = t->pstride[1] == sp;
  if (sp > W16_MAX_RUN || t->psp != 1 || t->bsp != 256 || !(mid_row || mid_col)) return 0;
  /* f32 from oihw into f32 blocks: oneDNN's was as fast or faster
   * (512x512x3x3: 0.49-0.52 ms against 0.54-0.56). */
  if (!t->to_plain && !t->pairs) return 0;
  t->mid_is_row = mid_row;
  return t->on = W16_RUNS;
}

/* The 16 x 16 transpose: vtranspose16 (vec.h). */
static inline void transpose16(v16 *r) { vtranspose16(r); }

typedef uint16_t h16 __attribute__((vector_size(32)));
typedef uint16_t h16u __attribute__((vector_size(32), aligned(2)));
typedef uint32_t u16v __attribute__((vector_size(64)));

/* 16 values rounded to bf16 as sp_bf16_round does (nearest even, NaN stays
 * a quiet NaN): AVX512-BF16's instruction where the build has it. */
static inline h16 bf16_of(v16 v) {
#ifdef __AVX512BF16__
  return (h16)_mm512_cvtneps_pbh((__m512)v);
#else
  const u16v u = (u16v)v, r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const u16v nan = (u16v)((u & 0x7fffffffu) > 0x7f800000u);
  return __builtin_convertvector((r & ~nan) | (((u >> 16) | 0x40u) & nan), h16);
#endif
}

/* A tile's rows r[x] (over the column dim) into a pair-blocked bf16 tile:
 * its row k holds rows 2k and 2k + 1 interleaved. */
static inline void put_pairs(uint16_t *bt, const v16 *r) {
  VEC_UNROLL for (int k = 0; k < 8; k++) {
    const v16 a = r[2 * k], b = r[2 * k + 1];
    *(h16u *)(bt + 32 * k) =
        bf16_of(__builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23));
    *(h16u *)(bt + 32 * k + 16) =
        bf16_of(__builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31));
  }
}

static inline void put(float *p, v16 v, int accumulate) {
  if (accumulate) v += *(const v16u *)p;
  *(v16u *)p = v;
}

/* One tile: bt is its 16 x 16 block (row-major, rows along the row dim), pt
 * the plain origin. The plain side's lines of 16 run along the column dim
 * (no transpose; line y at y * pstride[0]) or along the row dim (line y at
 * y * pstride[1]). */
static inline void tile(const cpu_w16 *t, void *bt, float *pt) {
  const int64_t line = t->transpose ? t->pstride[1] : t->pstride[0];
  v16 r[16];
  if (t->to_plain) {
    VEC_UNROLL for (int y = 0; y < 16; y++) r[y] = *(const v16u *)((float *)bt + 16 * y);
    if (t->transpose) transpose16(r);
    VEC_UNROLL for (int y = 0; y < 16; y++) put(pt + y * line, r[y], t->accumulate);
    return;
  }
  VEC_UNROLL for (int y = 0; y < 16; y++) r[y] = *(const v16u *)(pt + y * line);
  if (t->transpose) transpose16(r);
  if (t->pairs)
    put_pairs(bt, r);
  else
    VEC_UNROLL for (int y = 0; y < 16; y++) put((float *)bt + 16 * y, r[y], t->accumulate);
}

/* One block pair of a kernel of sp positions (bp its sp tiles, pt its
 * plain origin) through tv, 16 sp vectors over the far dim, one per run
 * position f = sp m + s (mid index m, kernel position s): the 16 runs are a
 * 16 x 16 sp matrix, transposed 16 columns at a time into tv, and
 * tv[sp m + s] for m = 0..15 is tile s's rows (mid dim = row dim) or
 * columns (else: one more transpose). A permute network per run instead
 * (3x3: each output vector from up to 9 inputs) was slower than oneDNN's
 * reorder. */
static inline __attribute__((always_inline)) void pair_runs_of(const cpu_w16 *t, char *bp, float *pt, v16 *tv,
                                                               const int sp) {
  const int es = t->pairs ? 2 : 4;
  const int64_t far = t->mid_is_row ? t->pstride[1] : t->pstride[0];
  v16 r[16];
  if (t->to_plain) {
    for (int s = 0; s < sp; s++) {
      VEC_UNROLL for (int x = 0; x < 16; x++) r[x] = *(const v16u *)((float *)(bp + es * 256 * s) + 16 * x);
      if (!t->mid_is_row) transpose16(r); /* r[m]: over the far (row) dim */
      VEC_UNROLL for (int m = 0; m < 16; m++) tv[sp * m + s] = r[m];
    }
    for (int k = 0; k < sp; k++) {
      VEC_UNROLL for (int j = 0; j < 16; j++) r[j] = tv[16 * k + j];
      transpose16(r); /* r[u]: run u's values 16 k .. 16 k + 15 */
      VEC_UNROLL for (int u = 0; u < 16; u++) put(pt + u * far + 16 * k, r[u], t->accumulate);
    }
    return;
  }
  for (int k = 0; k < sp; k++) {
    VEC_UNROLL for (int u = 0; u < 16; u++) r[u] = *(const v16u *)(pt + u * far + 16 * k);
    transpose16(r);
    VEC_UNROLL for (int j = 0; j < 16; j++) tv[16 * k + j] = r[j];
  }
  for (int s = 0; s < sp; s++) {
    VEC_UNROLL for (int m = 0; m < 16; m++) r[m] = tv[sp * m + s];
    if (!t->mid_is_row) transpose16(r); /* columns -> rows */
    void *bt = bp + es * 256 * s;
    if (t->pairs)
      put_pairs(bt, r);
    else
      VEC_UNROLL for (int x = 0; x < 16; x++) put((float *)bt + 16 * x, r[x], t->accumulate);
  }
}

/* The common kernel sizes with the size a constant (the loops unrolled:
 * 3x3 from oihw took 0.53 ms against 0.43 with a variable size). */
static void pair_runs(const cpu_w16 *t, char *bp, float *pt, v16 *tv) {
  if (t->spatial == 9)
    pair_runs_of(t, bp, pt, tv, 9);
  else if (t->spatial == 4)
    pair_runs_of(t, bp, pt, tv, 4);
  else
    pair_runs_of(t, bp, pt, tv, (int)t->spatial);
}

/* Block pair u in the blocked side's memory order (the dim of the larger
 * block stride outer): both sides then stream, the plain one as 16 lines.
 * Inner-first order (a column strip down the plain matrix) made the 1x1
 * weights' reorder slower than oneDNN's. */
static void pair_of(const cpu_w16 *t, int64_t u, int64_t *b0, int64_t *b1) {
  if (t->bstride[0] >= t->bstride[1])
    *b0 = u / t->nb[1], *b1 = u % t->nb[1];
  else
    *b1 = u / t->nb[0], *b0 = u % t->nb[0];
}

void cpu_w16_run(const cpu_w16 *t, const void *src, void *dst, int serial) {
  char *blk = (char *)(t->to_plain ? src : dst);
  float *pl = (float *)(t->to_plain ? dst : src);
  const int64_t sp = t->spatial, es = t->pairs ? 2 : 4; /* the blocked side's bytes per value */
  if (t->on == W16_RUNS) {
#pragma omp parallel if (!serial)
    {
      v16 tv[16 * W16_MAX_RUN];
#pragma omp for schedule(static)
      for (int64_t u = 0; u < t->nb[0] * t->nb[1]; u++) {
        int64_t b0, b1;
        pair_of(t, u, &b0, &b1);
        pair_runs(t, blk + es * (b0 * t->bstride[0] + b1 * t->bstride[1]),
                  pl + 16 * (b0 * t->pstride[0] + b1 * t->pstride[1]), tv);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static) if (!serial)
  for (int64_t u = 0; u < t->nb[0] * t->nb[1] * sp; u++) {
    int64_t b0, b1;
    pair_of(t, u / sp, &b0, &b1);
    tile(t, blk + es * (b0 * t->bstride[0] + b1 * t->bstride[1] + u % sp * t->bsp),
         pl + 16 * (b0 * t->pstride[0] + b1 * t->pstride[1]) + u % sp * t->psp);
  }
}
#endif
