/* The weight gradient of a bf16 channels-last convolution (any kernel size,
 * stride, padding, dilation; one group) as matrix products over chunks of
 * output positions:
 *
 *   col[r, (kh, kw, ic)] = x[n, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw, ic]   (0 outside)
 *   T[OC, (kh, kw, ic)] += dY^T[OC, rows of the chunk] col[rows, (kh, kw, ic)]
 *
 * then dW[o][i][kh][kw] += T[o][kh][kw][i] into the plain f32 master gradient.
 * Why: oneDNN 2.6's AMX backward-weights convolution ran 3x3 layers at
 * 270-930 GFLOP/s here against up to 1-2 TFLOP/s for its brgemm matmul, and its
 * result is blocked f32 that a reorder then sums into the plain gradient.
 *
 * col is written straight in the layout oneDNN's AMX matmul packs its
 * second operand into (BA16a64b2a: 32-row blocks of 64 columns, row pairs
 * interleaved) when it picks that layout and ic is a multiple of 16: the
 * matmul then skips its own packing pass over col (bww matmuls 27 ms less
 * per ResNet-50 bf16 step at batch 16; the packed im2col costs ~3 ms more
 * than the plain one, ~8-10 ms net), else plain [rows, k]. Where AMX is
 * usable and OC is in 16s, the products run on the tiles instead
 * (dw_amx.c): dY^T arranged once per chunk, col's tiles read where they lie
 * (oneDNN's matmul transposed its dY^T operand block by block). Chunks of
 * 1 MB stay best there too: 0.25, 0.5, 2, 4 and 8 MB were slower.
 *
 * Threads: one parallel region per step. Each thread takes a static share of
 * the chunks, builds each chunk's im2col rows in its own buffer (about 1 MB,
 * so it stays in cache for the product that reads it) and runs the matmul
 * sequentially (oneDNN runs a primitive on the calling thread inside a
 * parallel region) into its own T, with its own scratchpad; the threads' T
 * are then added in thread order. Per-chunk parallel regions were tried
 * first: on a shared machine each region can wait a time slice for a
 * descheduled thread, and a large layer has hundreds of chunks. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

enum { CHUNK_BYTES = 1 << 20, MAX_THREADS = 256 };
/* The whole-layer form (see cpu_bww_mm_prepare). */
enum { WHOLE_MAX_L2 = 3 << 19, WHOLE_MAX_COL = 32 << 20, WHOLE_PANEL = 256 };
int64_t cpu_bww_whole_min_t = 2 << 20; /* bytes of T from which (tests take 0) */

/* The packed layout this file writes: [k / 32][n / 64] blocks (outer
 * strides from the descriptor), each [16 row pairs][64 columns][2 rows]. */
enum { PACK_ROWS = 32, PACK_COLS = 64 };

int cpu_bww_use_packed = 1;
int cpu_bww_use_small = 1;
long cpu_bww_small_calls;

/* Few input channels: a stem on the image (1 or 3 channels), where col's
 * columns are (kh, kw, ic) runs shorter than a vector. Its own packed
 * layout, k rounded up to 64 columns; col at most 1024 columns.
 * Not from 5 input channels: vgg-face's second layer (3x3 stride 2, 8 -> 16
 * at 112x112, batch 64) took it in sessions 66-67 and ran its forward +
 * backward in 16.6-20.1 ms a step against oneDNN's 8.5-10.7 (the same
 * binary, 3 alternating runs a side: the step 96.0 -> 82.9 ms): 72 columns
 * padded to 128 and 16 outputs leave the copy with little product to pay
 * for. ResNet's 7x7 stem (3 -> 64) keeps it (21 against 41 ms), ResUNet's
 * 3x3 stem (3 -> 32) about even (15.1 against 16.0). */
enum { SMALL_MAX_IC = 4, SMALL_MAX_COLS = 1024 };

int cpu_bww_small_applies(int64_t ic, int64_t oc, int64_t kh, int64_t kw) {
  const int64_t cols = (kh * kw * ic + PACK_COLS - 1) / PACK_COLS * PACK_COLS;
  return cpu_bww_use_small && ic <= SMALL_MAX_IC && oc % 16 == 0 && cols <= SMALL_MAX_COLS && cpu_conv_use_dw_amx &&
         cpu_amx_usable();
}

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

/* 1 when oneDNN chose that layout for col (md from a `format_tag_any`
 * request), with its two block strides in elements. */
static int is_packed_layout(const dnnl_memory_desc_t *md, int64_t *kblk_stride, int64_t *nblk_stride) {
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  if (md->format_kind != dnnl_blocked || md->ndims != 2 || b->inner_nblks != 3 || b->inner_blks[0] != 16 ||
      b->inner_idxs[0] != 0 || b->inner_blks[1] != PACK_COLS || b->inner_idxs[1] != 1 || b->inner_blks[2] != 2 ||
      b->inner_idxs[2] != 0 || md->offset0 != 0)
    return 0;
  *kblk_stride = b->strides[0], *nblk_stride = b->strides[1];
  return 1;
}

/* The product for a chunk of r rows (t: 0 full, 1 tail), col packed or
 * plain. adopt 0: only a probe of the layout oneDNN picks for col (1 when it
 * is ours), nothing kept. */
static int make_product(cpu_bww_mm *m, cpu_node *n, int t, int64_t r, int packed, int adopt) {
  const cpu_conv_shape *c = &m->c;
  dnnl_dims_t a_d = {c->oc, r}, a_s = {1, c->oc}, b_d = {r, m->k};
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&m->a_md[t], 2, a_d, dnnl_bf16, a_s));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->b_md[t], 2, b_d, dnnl_bf16, packed ? dnnl_format_tag_any : dnnl_ab));
  if (!adopt) {
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    DNNL_TRY(dnnl_matmul_desc_init(&d, &m->a_md[t], &m->b_md[t], NULL, &m->t_md));
    dnnl_post_ops_t po;
    if (cpu_sum_post_ops(1, &po)) return -1;
    const int rc = cpu_pd(&d, NULL, po, &pd);
    dnnl_post_ops_destroy(po);
    if (rc) return -1;
    const int ours = is_packed_layout(cpu_pd_md(pd, dnnl_query_weights_md, 0), &m->kblk_stride[t], &m->nblk_stride[t]);
    dnnl_primitive_desc_destroy(pd);
    return ours;
  }
  if (cpu_matmul_make(n, &m->a_md[t], &m->b_md[t], NULL, &m->t_md, 1, &m->pd[t], &m->prim[t])) return -1;
  if (!packed) return 0;
  m->b_md[t] = *cpu_pd_md(m->pd[t], dnnl_query_weights_md, 0);
  if (!is_packed_layout(&m->b_md[t], &m->kblk_stride[t], &m->nblk_stride[t]))
    return sp_error_set("conv weight gradient: oneDNN packed col differently from its probe");
  return 0;
}

/* Few input channels: col packed by our own im2col (small_rows below) in
 * blocks of our own strides, the products on the tiles; T's columns k
 * rounded up to 16 (col's past k are zero). No oneDNN primitive. */
static int prepare_small(cpu_bww_mm *m, size_t *bwd_scratch) {
  const cpu_conv_shape *c = &m->c;
  const int64_t cols = (m->k + PACK_COLS - 1) / PACK_COLS * PACK_COLS;
  int64_t chunk = CHUNK_BYTES / (2 * cols);
  chunk = chunk < 32 ? 32 : chunk & ~(int64_t)31;
  if (chunk > m->rows) chunk = m->rows;
  const int64_t chunk32 = (chunk + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS;
  m->chunk = chunk;
  m->small = m->packed = m->amx = 1;
  m->kt = (m->k + 15) / 16 * 16;
  m->kblk_stride[0] = m->kblk_stride[1] = cols / PACK_COLS * (PACK_ROWS * PACK_COLS);
  m->nblk_stride[0] = m->nblk_stride[1] = PACK_ROWS * PACK_COLS;
  /* A padded row: pl zero positions, the input row, zeros; long enough for
   * a 32-lane load from the last window. */
  const int64_t last = (c->ow - 1) * c->sw * c->ic + 32, whole = (c->pl + c->iw) * c->ic;
  m->row_len = ((last > whole ? last : whole) + 31) / 32 * 32;
  m->pad_bytes = 0;
  m->col_bytes = round64(sizeof(uint16_t) * (size_t)(chunk32 * cols));
  m->t_bytes = round64(sizeof(float) * (size_t)(c->oc * m->kt));
  m->a_bytes = round64(sizeof(uint16_t) * (size_t)(c->oc * chunk32));
  m->rows_bytes = round64(sizeof(uint16_t) * (size_t)(c->kh * m->row_len));
  m->thread_bytes = m->col_bytes + m->t_bytes + m->a_bytes + m->rows_bytes;
  *bwd_scratch = (size_t)m->threads * m->thread_bytes + 64;
  return 0;
}

int cpu_bww_mm_prepare(cpu_bww_mm *m, cpu_node *n, const cpu_conv_shape *c, size_t *bwd_scratch) {
  memset(m, 0, sizeof *m);
  m->c = *c;
  const int64_t k = c->kh * c->kw * c->ic, rows = c->n * c->oh * c->ow;
  m->rows = rows, m->k = m->kt = k;
  m->threads = omp_get_max_threads();
  if (m->threads > MAX_THREADS) m->threads = MAX_THREADS;
  if (c->ic % 16 && cpu_bww_small_applies(c->ic, c->oc, c->kh, c->kw)) return prepare_small(m, bwd_scratch);
  int64_t chunk = CHUNK_BYTES / (2 * k);
  chunk = chunk < 32 ? 32 : chunk & ~(int64_t)31;
  if (chunk > rows) chunk = rows;
  m->chunk = chunk;
  const int64_t tail = rows % chunk;
  size_t pad = 0;
  dnnl_dims_t t_d = {c->oc, k};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->t_md, 2, t_d, dnnl_f32, dnnl_ab));
  /* Packed when oneDNN packs both chunk sizes our way; 16-column runs of
   * channels then never straddle a 64-column block. */
  m->packed = cpu_bww_use_packed && c->ic % 16 == 0;
  for (int t = 0; t < 2 && m->packed; t++) {
    const int64_t r = t ? tail : chunk;
    if (r == 0) continue;
    const int ours = make_product(m, n, t, r, 1, 0);
    if (ours < 0) return -1;
    m->packed = ours;
  }
  for (int t = 0; t < 2; t++) {
    const int64_t r = t ? tail : chunk;
    if (r > 0 && make_product(m, n, t, r, m->packed, 1)) return -1;
  }
  size_t col = sizeof(uint16_t) * (size_t)(chunk * k);
  for (int t = 0; t < 2; t++) {
    if (!m->prim[t]) continue;
    if (cpu_scratchpad_bytes(m->pd[t]) > pad) pad = cpu_scratchpad_bytes(m->pd[t]);
    if (cpu_md_bytes(&m->b_md[t]) > col) col = cpu_md_bytes(&m->b_md[t]);
  }
  m->pad_bytes = round64(pad);
  m->col_bytes = round64(col);
  m->t_bytes = round64(sizeof(float) * (size_t)(c->oc * k));
  m->amx = m->packed && cpu_conv_use_dw_amx && cpu_amx_usable() && c->oc % 16 == 0;
  m->a_bytes = m->amx ? round64(sizeof(uint16_t) * (size_t)(c->oc * ((chunk + 31) / 32 * 32))) : 0;
  m->thread_bytes = m->pad_bytes + m->col_bytes + m->t_bytes + m->a_bytes;
  *bwd_scratch = (size_t)m->threads * m->thread_bytes + 64;
  /* Few rows and a large T (ResNet-50's 512-channel 3x3 layers at 7x7: 9.4 MB
   * of sums a thread, stored and loaded again for each of its chunks): col
   * and dY^T of all rows at once, and each 32 x 32 block of T in tiles over
   * every row, threads splitting T's columns. Where dY^T and a panel of col
   * stay in L2 together. */
  const int64_t steps = (rows + 31) / 32, cols_pad = (k + PACK_COLS - 1) / PACK_COLS * PACK_COLS;
  const size_t a_all = sizeof(uint16_t) * (size_t)(c->oc * steps * 32),
               col_all = sizeof(uint16_t) * (size_t)(steps * 32 * cols_pad);
  m->whole = m->amx && (int64_t)sizeof(float) * c->oc * k > cpu_bww_whole_min_t &&
             a_all + sizeof(uint16_t) * (size_t)(steps * 32 * WHOLE_PANEL) <= WHOLE_MAX_L2 && col_all <= WHOLE_MAX_COL;
  if (m->whole) {
    m->whole_kblk = cols_pad / PACK_COLS * (PACK_ROWS * PACK_COLS);
    m->whole_off = round64(*bwd_scratch);
    *bwd_scratch = m->whole_off + col_all + a_all + sizeof(float) * (size_t)(c->oc * k) + 64;
  }
  m->mems = sp_xcalloc((size_t)m->threads * 2 * 4, sizeof(dnnl_memory_t));
  m->streams = sp_xcalloc((size_t)m->threads, sizeof(dnnl_stream_t));
  for (int t = 0; t < m->threads; t++)
    DNNL_TRY(dnnl_stream_create(&m->streams[t], cpu_engine(), dnnl_stream_default_flags));
  return 0;
}

void cpu_bww_mm_release(cpu_bww_mm *m) {
  if (m->mems)
    for (int i = 0; i < m->threads * 2 * 4; i++)
      if (m->mems[i]) dnnl_memory_destroy(m->mems[i]);
  if (m->streams)
    for (int t = 0; t < m->threads; t++)
      if (m->streams[t]) dnnl_stream_destroy(m->streams[t]);
  free(m->mems);
  free(m->streams);
  m->mems = NULL;
  m->streams = NULL;
}

static dnnl_memory_t *mems_of(const cpu_bww_mm *m, int thread, int t) { return m->mems + (thread * 2 + t) * 4; }

static char *thread_scratch(const cpu_bww_mm *m, int thread) { return m->base + (size_t)thread * m->thread_bytes; }

int cpu_bww_mm_bind(cpu_bww_mm *m, const void *x, const void *dy, float *dw, char *bs) {
  m->x = x, m->dy = dy, m->dw = dw;
  m->base = (char *)(((uintptr_t)bs + 63) & ~(uintptr_t)63);
  for (int th = 0; th < m->threads; th++) {
    char *sc = thread_scratch(m, th);
    for (int t = 0; t < 2; t++) {
      if (!m->prim[t]) continue;
      dnnl_memory_t *mm = mems_of(m, th, t);
      const dnnl_memory_desc_t *sp = cpu_pd_md(m->pd[t], dnnl_query_scratchpad_md, 0);
      for (int i = 0; i < 4; i++)
        if (mm[i]) dnnl_memory_destroy(mm[i]), mm[i] = NULL;
      DNNL_TRY(dnnl_memory_create(&mm[0], &m->a_md[t], cpu_engine(), (void *)dy));
      DNNL_TRY(dnnl_memory_create(&mm[1], &m->b_md[t], cpu_engine(), sc + m->pad_bytes));
      DNNL_TRY(dnnl_memory_create(&mm[2], &m->t_md, cpu_engine(), sc + m->pad_bytes + m->col_bytes));
      if (sp && cpu_md_bytes(sp) > 0) DNNL_TRY(dnnl_memory_create(&mm[3], sp, cpu_engine(), sc));
    }
  }
  return 0;
}

void cpu_im2col_rows(const cpu_conv_shape *c, const void *x_in, uint16_t *col, int64_t r0, int64_t count) {
  const uint16_t *x = x_in;
  const size_t row_bytes = sizeof(uint16_t) * (size_t)c->ic;
  for (int64_t q = 0; q < count; q++) {
    const int64_t r = r0 + q, ow = r % c->ow, oh = r / c->ow % c->oh, img = r / (c->ow * c->oh);
    uint16_t *dst = col + q * c->kh * c->kw * c->ic;
    for (int64_t kh = 0; kh < c->kh; kh++) {
      const int64_t ih = oh * c->sh - c->pt + kh * c->dh;
      for (int64_t kw = 0; kw < c->kw; kw++, dst += c->ic) {
        const int64_t iw = ow * c->sw - c->pl + kw * c->dw;
        if (ih < 0 || ih >= c->ih || iw < 0 || iw >= c->iw)
          memset(dst, 0, row_bytes);
        else
          memcpy(dst, x + ((img * c->ih + ih) * c->iw + iw) * c->ic, row_bytes);
      }
    }
  }
}

/* An output row's image and its window's top-left input position. */
typedef struct {
  int64_t img, ih0, iw0;
  int valid; /* 0: past the chunk (zeros) */
} out_row;

static out_row out_row_of(const cpu_bww_mm *m, int64_t r, int valid) {
  const cpu_conv_shape *c = &m->c;
  const int64_t ow = r % c->ow, oh = r / c->ow % c->oh;
  const out_row o = {r / (c->ow * c->oh), oh * c->sh - c->pt, ow * c->sw - c->pl, valid};
  return o;
}

/* The ic input values under kernel tap (kh, kw) of row o, or NULL in the
 * padding or past the chunk. */
static const uint16_t *tap(const cpu_bww_mm *m, const out_row *o, int64_t kh, int64_t kw) {
  const cpu_conv_shape *c = &m->c;
  const int64_t ih = o->ih0 + kh * c->dh, iw = o->iw0 + kw * c->dw;
  if (!o->valid || ih < 0 || ih >= c->ih || iw < 0 || iw >= c->iw) return NULL;
  return (const uint16_t *)m->x + ((o->img * c->ih + ih) * c->iw + iw) * c->ic;
}

/* 16 bf16 values zero-extended to 32 bits (one widening move with AVX-512;
 * GCC 12 splits the generic conversion in halves). */
static inline vu16 widen16(const uint16_t *p) {
#ifdef __AVX512F__
  return (vu16)_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
#else
  return __builtin_convertvector(*(const vh16u *)p, vu16);
#endif
}

/* Rows [r0, r0 + count) into col in the packed layout of primitive t: each
 * row pair (q, q + 1) is one 32-bit word per column, q's value in the low
 * half. Rows from count to the next multiple of 32 and columns from k to
 * the next multiple of 64 are written as zeros (the product reads them).
 * kblk, nblk: element strides of a 32-row and of a 64-column block. */
static void im2col_packed(const cpu_bww_mm *m, uint16_t *col, int64_t r0, int64_t count, int64_t kblk, int64_t nblk) {
  const cpu_conv_shape *c = &m->c;
  const int64_t rows_padded = (count + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS;
  const int64_t cols_padded = (m->k + PACK_COLS - 1) / PACK_COLS * PACK_COLS;
  for (int64_t q = 0; q < rows_padded; q += 2) {
    uint16_t *pair = col + q / PACK_ROWS * kblk + q % PACK_ROWS / 2 * (2 * PACK_COLS);
    const out_row o0 = out_row_of(m, r0 + q, q < count), o1 = out_row_of(m, r0 + q + 1, q + 1 < count);
    for (int64_t kh = 0; kh < c->kh; kh++)
      for (int64_t kw = 0; kw < c->kw; kw++) {
        const uint16_t *s0 = tap(m, &o0, kh, kw), *s1 = tap(m, &o1, kh, kw);
        const int64_t n0 = (kh * c->kw + kw) * c->ic;
        for (int64_t i = 0; i < c->ic; i += 16) {
          const int64_t nn = n0 + i;
          vu16 w = {0};
          if (s0) w = widen16(s0 + i);
          if (s1) w |= widen16(s1 + i) << 16;
          *(vu16 *)((uint32_t *)(pair + nn / PACK_COLS * nblk) + nn % PACK_COLS) = w;
        }
      }
    for (int64_t nn = m->k; nn < cols_padded; nn++) ((uint32_t *)(pair + nn / PACK_COLS * nblk))[nn % PACK_COLS] = 0;
  }
}

/* The kh input rows under output row (img, ih0) into rows, each
 * row_len values: pl zero positions, the input row, zeros (rows outside the
 * image all zero). */
static void pad_rows(const cpu_bww_mm *m, int64_t img, int64_t ih0, uint16_t *rows) {
  const cpu_conv_shape *c = &m->c;
  const int64_t ic = c->ic, head = c->pl * ic, body = c->iw * ic;
  for (int64_t kh = 0; kh < c->kh; kh++) {
    uint16_t *r = rows + kh * m->row_len;
    const int64_t ih = ih0 + kh * c->dh;
    if (ih < 0 || ih >= c->ih) {
      memset(r, 0, sizeof(uint16_t) * (size_t)m->row_len);
      continue;
    }
    memset(r, 0, sizeof(uint16_t) * (size_t)head);
    memcpy(r + head, (const uint16_t *)m->x + (img * c->ih + ih) * body, sizeof(uint16_t) * (size_t)body);
    memset(r + head + body, 0, sizeof(uint16_t) * (size_t)(m->row_len - head - body));
  }
}

/* A pair's words (stage[0 .. k), zeros to the last 64-column block) into
 * its place in each block. */
static void stage_to_pair(const cpu_bww_mm *m, uint32_t *stage, uint16_t *pair) {
  const int64_t cols = (m->k + PACK_COLS - 1) / PACK_COLS * PACK_COLS;
  memset(stage + m->k, 0, sizeof(uint32_t) * (size_t)(cols - m->k));
  for (int64_t b = 0; b < cols / PACK_COLS; b++)
    memcpy(pair + b * (PACK_ROWS * PACK_COLS), stage + b * PACK_COLS, sizeof(uint32_t) * PACK_COLS);
}

#if defined(__AVX512BW__)
/* A vector's first n (<= 16) words into the pair's columns n0 .. n0 + n:
 * a masked store into each 64-column block they fall in (the second one
 * from `here` words before that block's start, those lanes masked off). */
static inline void put_words(uint16_t *pair, int64_t n0, __m512i w, int n) {
  const int64_t in = n0 % PACK_COLS, here = PACK_COLS - in < n ? PACK_COLS - in : n;
  uint32_t *blk = (uint32_t *)(pair + n0 / PACK_COLS * (PACK_ROWS * PACK_COLS));
  _mm512_mask_storeu_epi32(blk + in, (__mmask16)((1u << here) - 1), w);
  if (here < n)
    _mm512_mask_storeu_epi32(blk + PACK_ROWS * PACK_COLS / 2 - here, (__mmask16)(((1u << n) - 1) & ~((1u << here) - 1)),
                             w);
}
#endif

/* A pair of rows of one output row, their windows starting `at` values into
 * the padded rows, into the pair's place in col: per kernel row, a run of kw
 * ic values (dilation 1) and the second row's `apart` values on, both in one
 * 32-lane load, interleaved into `run` words (first row low) by a permute
 * per 16 words, stored where the columns kh run .. lie (no staging copy).
 * ResNet-50's stem at batch 16: 2.1-2.8 ms a thread and call, bound by the
 * 77 MB of packed columns a step writes (0.5 ms without the stores). */
typedef struct {
#if defined(__AVX512BW__)
  __m512i lo, hi; /* the permutes' lane indices: word j takes lanes j and j + apart */
#endif
  int64_t run, apart;
} window_walk;

static window_walk window_walk_of(int64_t run, int64_t apart) {
  window_walk w = {.run = run, .apart = apart};
#if defined(__AVX512BW__)
  uint16_t lo[32], hi[32];
  for (int j = 0; j < 16; j++) {
    lo[2 * j] = (uint16_t)j, lo[2 * j + 1] = (uint16_t)((j + apart) & 31);
    hi[2 * j] = (uint16_t)(16 + j), hi[2 * j + 1] = (uint16_t)((16 + j + apart) & 31);
  }
  w.lo = _mm512_loadu_si512(lo), w.hi = _mm512_loadu_si512(hi);
#endif
  return w;
}

static inline void window_pair(const cpu_bww_mm *m, const uint16_t *rows, int64_t at, const window_walk *ww,
                               uint16_t *pair, uint32_t *stage) {
  const int64_t run = ww->run, apart = ww->apart;
#if defined(__AVX512BW__)
  (void)stage;
  const __m512i ilo = ww->lo, ihi = ww->hi;
  const int64_t lanes = run + apart;
  const __mmask32 load = lanes >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << lanes) - 1);
  const int first = run >= 16 ? 16 : (int)run, second = (int)run - first;
  for (int64_t kh = 0; kh < m->c.kh; kh++) {
    const __m512i v = _mm512_maskz_loadu_epi16(load, rows + kh * m->row_len + at);
    put_words(pair, kh * run, _mm512_permutexvar_epi16(ilo, v), first);
    if (second) put_words(pair, kh * run + 16, _mm512_permutexvar_epi16(ihi, v), second);
  }
  const int64_t cols = (m->k + PACK_COLS - 1) / PACK_COLS * PACK_COLS;
  for (int64_t n0 = m->k; n0 < cols; n0 += 16)
    put_words(pair, n0, _mm512_setzero_si512(), cols - n0 < 16 ? (int)(cols - n0) : 16);
#else
  for (int64_t kh = 0; kh < m->c.kh; kh++) {
    const uint16_t *r = rows + kh * m->row_len + at;
    for (int64_t j = 0; j < run; j++) stage[kh * run + j] = r[j] | (uint32_t)r[j + apart] << 16;
  }
  stage_to_pair(m, stage, pair);
#endif
}

/* Rows [r0, r0 + count) into col in the small layout (blocks of 32 rows x
 * 64 columns, row pairs interleaved); rows past count and columns past k
 * zero. Pairs of one output row read their windows from padded copies of
 * the input rows (window_pair); others (a pair across two output rows, at
 * odd widths; dilation; runs longer than a vector; rows past count) tap by
 * tap into `stage`, then copied a 64-column block at a time. */
static void small_rows(const cpu_bww_mm *m, uint16_t *col, int64_t r0, int64_t count, uint16_t *rows) {
  const cpu_conv_shape *c = &m->c;
  const int64_t rows_padded = (count + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS;
  const int64_t kblk = m->kblk_stride[0], run = c->kw * c->ic, apart = c->sw * c->ic;
  const int windows = c->dw == 1 && run + apart <= 32;
  uint32_t stage[SMALL_MAX_COLS] __attribute__((aligned(64)));
  int64_t held_img = -1, held_ih0 = 0;
  /* Row r0 + q's output position, advanced a row at a time (no divisions). */
  int64_t ow = r0 % c->ow, oh = r0 / c->ow % c->oh, img = r0 / (c->ow * c->oh);
  const window_walk ww = window_walk_of(run, apart);
  for (int64_t q = 0; q < rows_padded; q += 2) {
    const out_row o0 = {img, oh * c->sh - c->pt, ow * c->sw - c->pl, q < count};
    if (++ow == c->ow) {
      ow = 0;
      if (++oh == c->oh) oh = 0, img++;
    }
    const out_row o1 = {img, oh * c->sh - c->pt, ow * c->sw - c->pl, q + 1 < count};
    if (++ow == c->ow) {
      ow = 0;
      if (++oh == c->oh) oh = 0, img++;
    }
    uint16_t *pair = col + q / PACK_ROWS * kblk + q % PACK_ROWS / 2 * (2 * PACK_COLS);
    if (windows && o0.valid && o1.valid && o1.img == o0.img && o1.ih0 == o0.ih0) {
      if (o0.img != held_img || o0.ih0 != held_ih0) {
        pad_rows(m, o0.img, o0.ih0, rows);
        held_img = o0.img, held_ih0 = o0.ih0;
      }
      window_pair(m, rows, (o0.iw0 + c->pl) * c->ic, &ww, pair, stage);
    } else {
      for (int64_t kh = 0; kh < c->kh; kh++)
        for (int64_t kw = 0; kw < c->kw; kw++) {
          const uint16_t *s0 = tap(m, &o0, kh, kw), *s1 = tap(m, &o1, kh, kw);
          uint32_t *w = stage + (kh * c->kw + kw) * c->ic;
          for (int64_t i = 0; i < c->ic; i++) w[i] = (s0 ? s0[i] : 0u) | (uint32_t)(s1 ? s1[i] : 0u) << 16;
        }
      stage_to_pair(m, stage, pair);
    }
  }
}

/* dW[o][i][kh][kw] (=|+=) T[o][(kh, kw, i)], rows split among the team. */
static void t_to_weights(const cpu_bww_mm *m, const float *t, int fresh) {
  const cpu_conv_shape *c = &m->c;
  const int64_t khw = c->kh * c->kw;
#pragma omp for schedule(static)
  for (int64_t o = 0; o < c->oc; o++)
    for (int64_t i = 0; i < c->ic; i++)
      for (int64_t k = 0; k < khw; k++) {
        float *d = &m->dw[(o * c->ic + i) * khw + k];
        *d = (fresh ? 0.0f : *d) + t[o * m->kt + k * c->ic + i];
      }
}

static void run_whole(const cpu_bww_mm *m, int fresh) {
  const cpu_conv_shape *c = &m->c;
  const int64_t steps = (m->rows + 31) / 32, panels = (m->k + WHOLE_PANEL - 1) / WHOLE_PANEL;
  uint16_t *col = (uint16_t *)(m->base + m->whole_off), *ap = col + steps * m->whole_kblk;
  float *t = (float *)(ap + c->oc * steps * 32);
#pragma omp parallel num_threads(m->threads)
  {
    const int nt = omp_get_num_threads(), th = omp_get_thread_num();
    const int64_t s0 = steps * th / nt, s1 = steps * (th + 1) / nt;
    if (s1 > s0) {
      const int64_t r0 = s0 * 32, end = s1 * 32 < m->rows ? s1 * 32 : m->rows;
      im2col_packed(m, col + s0 * m->whole_kblk, r0, end - r0, m->whole_kblk, PACK_ROWS * PACK_COLS);
      cpu_dw_amx_arrange_dy((const uint16_t *)m->dy, c->oc, m->rows, s0, s1, steps, ap);
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
      const int64_t c0 = p * WHOLE_PANEL, n = m->k - c0 < WHOLE_PANEL ? m->k - c0 : WHOLE_PANEL;
      cpu_dw_amx_col_panel(ap, c->oc, steps, col, m->whole_kblk, PACK_ROWS * PACK_COLS, c0, n, t, m->k);
    }
    t_to_weights(m, t, fresh);
  }
}

void cpu_bww_mm_run(const cpu_bww_mm *m, int fresh) {
  if (m->whole) {
    run_whole(m, fresh);
    return;
  }
  const cpu_conv_shape *c = &m->c;
  const int64_t chunks = (m->rows + m->chunk - 1) / m->chunk, tsize = c->oc * m->kt;
  if (m->small) cpu_bww_small_calls++;
#pragma omp parallel num_threads(m->threads)
  {
    const int nt = omp_get_num_threads(), th = omp_get_thread_num();
    char *sc = thread_scratch(m, th);
    uint16_t *col = (uint16_t *)(sc + m->pad_bytes);
    float *t_acc = (float *)(sc + m->pad_bytes + m->col_bytes);
    memset(t_acc, 0, sizeof(float) * (size_t)tsize);
    for (int64_t ch = chunks * th / nt; ch < chunks * (th + 1) / nt; ch++) {
      const int64_t r0 = ch * m->chunk, count = m->rows - r0 < m->chunk ? m->rows - r0 : m->chunk;
      const int t = count == m->chunk ? 0 : 1;
      dnnl_memory_t *mm = mems_of(m, th, t);
      if (m->small)
        small_rows(m, col, r0, count, (uint16_t *)(sc + m->col_bytes + m->t_bytes + m->a_bytes));
      else if (m->packed)
        im2col_packed(m, col, r0, count, m->kblk_stride[t], m->nblk_stride[t]);
      else
        cpu_im2col_rows(c, m->x, col, r0, count);
      if (m->amx) {
        cpu_dw_amx_packed_chunk((const uint16_t *)m->dy + r0 * c->oc, c->oc, count, col, m->kblk_stride[t],
                                m->nblk_stride[t], m->kt, t_acc, (uint16_t *)((char *)t_acc + m->t_bytes));
        continue;
      }
      DNNL_RUN(dnnl_memory_set_data_handle(mm[0], (uint16_t *)m->dy + r0 * c->oc));
      dnnl_exec_arg_t args[4] = {
          {DNNL_ARG_SRC, mm[0]}, {DNNL_ARG_WEIGHTS, mm[1]}, {DNNL_ARG_DST, mm[2]}, {DNNL_ARG_SCRATCHPAD, mm[3]}};
      DNNL_RUN(dnnl_primitive_execute(m->prim[t], m->streams[th], mm[3] ? 4 : 3, args));
    }
#pragma omp barrier
    /* dW[o][i][kh][kw] (=|+=) sum over threads of T[o][(kh, kw, i)], in
     * thread order (written where sp_plan_zero_grad marked it). */
    const int64_t khw = c->kh * c->kw;
#pragma omp for schedule(static)
    for (int64_t o = 0; o < c->oc; o++)
      for (int64_t i = 0; i < c->ic; i++)
        for (int64_t k = 0; k < khw; k++) {
          float s = 0.0f;
          for (int t = 0; t < nt; t++)
            s += ((const float *)(thread_scratch(m, t) + m->pad_bytes + m->col_bytes))[o * m->kt + k * c->ic + i];
          float *d = &m->dw[(o * c->ic + i) * khw + k];
          *d = (fresh ? 0.0f : *d) + s;
        }
  }
}
#endif
