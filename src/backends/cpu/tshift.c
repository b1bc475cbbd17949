/* The fused temporal shift in the layout the convolutions around it use.
 *
 * TSM puts the shift between blocked-layout convolutions: [N*T, C/B, H, W, B]
 * with B = 16 or 8 channels per block (oneDNN's aBcd16b / aBcd8b), f32 or
 * bf16; the plain layout is the same with B = 1. For each frame and channel
 * block, every lane (channel) comes from the same position of frame t+1 (the
 * back fold), t-1 (the forward fold), t (the rest) or is zero (past the
 * clip's ends, or a padding lane). Blocks whose lanes share one source are
 * one contiguous copy; only the (at most two) blocks that straddle a fold
 * boundary go lane by lane. No intermediate buffers: one read and one write
 * in forward, and in backward one write (a fresh gradient) or a read-add-write
 * (the residual's shortcut wrote it first); large fresh outputs are
 * written with non-temporal stores. Channels-last (NHWC, what oneDNN
 * picks for inference convolutions here) is the other case: at each position
 * the C channels are contiguous, so the three folds are three short copies.
 * Other layouts take the adapter. */
#ifdef SPRY_HAVE_DNNL
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/bf16.h"
#include "ops/ops.h"

/* Outputs this large are written with non-temporal stores. Well past the
 * L2 caches, so the next op finds none of it in cache anyway; the stores
 * then skip reading each destination line first (a third of a copy's memory
 * traffic): on TSM-R50's layer-1 shape (205 MB) `spry bench op tshift`
 * runs 1.5x faster, forward and a fresh backward. In training the backward
 * adds onto the shortcut's gradient and is not streamed. Smaller tensors keep
 * plain stores, which leave the output in cache for the convolution that
 * reads it next. */
size_t cpu_tshift_stream_min_bytes = (size_t)16 << 20;

typedef struct {
  cpu_node base;
  int64_t frames, segments, c, blocks, block, hw; /* block: lanes per channel block (1: plain) */
  int64_t back, fwd;                              /* channels in the back / forward fold */
  int nhwc;                                       /* channels-last instead of channel blocks */
  size_t elem;                                    /* 4 (f32) or 2 (bf16) */
  int stream;                                     /* fresh outputs bypass the cache */
} tshift_node;

enum { FROM_ZERO, FROM_NEXT, FROM_PREV, FROM_SAME };

/* Forward: where channel ch of frame t reads from (backward mirrors NEXT and
 * PREV: the gradient flows back to the frame the value came from). */
static int source(const tshift_node *s, int64_t ch, int64_t t, int backward) {
  if (ch >= s->c) return FROM_ZERO;
  int next = backward ? FROM_PREV : FROM_NEXT, prev = backward ? FROM_NEXT : FROM_PREV;
  if (ch < s->back) return (backward ? t > 0 : t + 1 < s->segments) ? next : FROM_ZERO;
  if (ch < s->back + s->fwd) return (backward ? t + 1 < s->segments : t > 0) ? prev : FROM_ZERO;
  return FROM_SAME;
}

/* Frames between a source and the frame it is read for. */
static int64_t step_of(int from) { return (from == FROM_NEXT) - (from == FROM_PREV); }

static void add_f32(float *restrict d, const float *restrict g, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] += g[i];
}

/* Copies (or zeroes, src NULL) whole cache lines with non-temporal stores:
 * no read of the destination's lines first, and no eviction of what the
 * next op will read. Falls back to memcpy / memset when unaligned. */
static void stream_put(char *dst, const char *src, size_t bytes) {
#ifdef __AVX512F__
  if (((uintptr_t)dst & 63) == 0 && (bytes & 63) == 0) {
    for (size_t i = 0; i < bytes; i += 64)
      _mm512_stream_si512((__m512i *)(dst + i), src ? _mm512_loadu_si512(src + i) : _mm512_setzero_si512());
    _mm_sfence();
    return;
  }
#endif
  if (src)
    memcpy(dst, src, bytes);
  else
    memset(dst, 0, bytes);
}

/* n contiguous elements of one source: copied (zeros when in is NULL), or
 * added when accumulating (nothing to add for zeros). */
static void put_run(char *out, const char *in, int64_t n, size_t es, int accumulate, int stream) {
  if (stream && !accumulate) {
    stream_put(out, in, (size_t)n * es);
  } else if (!in) {
    if (!accumulate) memset(out, 0, (size_t)n * es);
  } else if (!accumulate) {
    memcpy(out, in, (size_t)n * es);
  } else if (es == 4) {
    add_f32((float *)out, (const float *)in, n);
  } else {
    sp_bf16_add((uint16_t *)out, (const uint16_t *)in, n);
  }
}

/* A channel block whose lanes come from different frames: at every
 * position, each lane is selected bitwise from the block of the next, the
 * previous or the same frame (an all-zero mask gives 0, and a source no lane
 * uses is not read). Branch-free over the lanes, so it vectorises: a blend
 * of at most three loads. */
typedef union {
  uint32_t u;
  float f;
} bits32;
/* The f32 data are read and written as 32-bit patterns: an aliasing type. */
typedef uint32_t __attribute__((may_alias)) word32;

/* B lanes at a time, B a constant so the lane loop is one vector blend. */
#define MIXED_F32(B)                                                                                      \
  static void mixed_f32_##B(word32 *restrict y, const word32 *a, const word32 *b, const word32 *c,        \
                            const uint32_t mask[3][16], int64_t n, int accumulate) {                      \
    for (int64_t i = 0; i < n; i++, y += B, a += B, b += B, c += B) {                                     \
      uint32_t v[B];                                                                                      \
      for (int l = 0; l < B; l++) v[l] = (a[l] & mask[0][l]) | (b[l] & mask[1][l]) | (c[l] & mask[2][l]); \
      if (!accumulate) {                                                                                  \
        for (int l = 0; l < B; l++) y[l] = v[l];                                                          \
      } else {                                                                                            \
        for (int l = 0; l < B; l++) {                                                                     \
          bits32 d = {.u = y[l]}, e = {.u = v[l]};                                                        \
          d.f += e.f;                                                                                     \
          y[l] = d.u;                                                                                     \
        }                                                                                                 \
      }                                                                                                   \
    }                                                                                                     \
  }
MIXED_F32(16)
MIXED_F32(8)

#ifdef __AVX512F__
/* The 16-lane blend written with non-temporal stores (y 64-byte aligned). */
static void mixed_f32_16_stream(word32 *y, const word32 *a, const word32 *b, const word32 *c,
                                const uint32_t mask[3][16], int64_t n) {
  const __m512i ma = _mm512_loadu_si512(mask[0]), mb = _mm512_loadu_si512(mask[1]), mc = _mm512_loadu_si512(mask[2]);
  for (int64_t i = 0; i < n; i++, y += 16, a += 16, b += 16, c += 16) {
    __m512i v =
        _mm512_or_si512(_mm512_and_si512(_mm512_loadu_si512(a), ma), _mm512_and_si512(_mm512_loadu_si512(b), mb));
    _mm512_stream_si512((__m512i *)y, _mm512_or_si512(v, _mm512_and_si512(_mm512_loadu_si512(c), mc)));
  }
  _mm_sfence();
}
#endif

static void mixed_f32(const tshift_node *s, void *y, const char *const src[3], const uint32_t mask[3][16],
                      int accumulate) {
  /* A source no lane uses reads another one under a zero mask. */
  const char *any = src[2] ? src[2] : src[0] ? src[0] : src[1];
  const word32 *a = (const word32 *)(src[0] ? src[0] : any), *b = (const word32 *)(src[1] ? src[1] : any),
               *c = (const word32 *)(src[2] ? src[2] : any);
#ifdef __AVX512F__
  if (s->block == 16 && s->stream && !accumulate && ((uintptr_t)y & 63) == 0)
    return mixed_f32_16_stream(y, a, b, c, mask, s->hw);
#endif
  if (s->block == 16)
    mixed_f32_16(y, a, b, c, mask, s->hw, accumulate);
  else
    mixed_f32_8(y, a, b, c, mask, s->hw, accumulate);
}

static void mixed_bf16(const tshift_node *s, uint16_t *y, const char *const src_bytes[3], const uint32_t mask[3][16],
                       int accumulate) {
  const int64_t B = s->block, n = s->hw;
  const uint16_t *src[3];
  for (int k = 0; k < 3; k++) src[k] = (const uint16_t *)src_bytes[k];
  for (int64_t i = 0; i < n; i++)
    for (int64_t l = 0; l < B; l++) {
      uint16_t v = 0;
      for (int k = 0; k < 3; k++)
        if (src[k]) v |= (uint16_t)(src[k][i * B + l] & mask[k][l]);
      y[i * B + l] = accumulate ? sp_f32_to_bf16(sp_bf16_to_f32(y[i * B + l]) + sp_bf16_to_f32(v)) : v;
    }
}

/* y = shift(x) (forward) or dx (+)= shift^T(dy) (backward). */
static void run(const tshift_node *s, const char *x, char *y, int backward, int accumulate) {
  const int64_t B = s->block, run_elems = s->hw * B, frame = s->blocks * run_elems;
  const size_t es = s->elem;
#pragma omp parallel for collapse(2) schedule(static) if (s->frames * frame > (1 << 15))
  for (int64_t f = 0; f < s->frames; f++)
    for (int64_t cb = 0; cb < s->blocks; cb++) {
      const int64_t t = f % s->segments, at = (f * frame + cb * run_elems) * (int64_t)es;
      char *out = y + at;
      int from[16] = {0}, same = 1;
      for (int64_t l = 0; l < B; l++) {
        from[l] = source(s, cb * B + l, t, backward);
        same &= from[l] == from[0];
      }
      if (same) {
        const char *in = x + at + step_of(from[0]) * frame * (int64_t)es;
        put_run(out, from[0] == FROM_ZERO ? NULL : in, run_elems, es, accumulate, s->stream);
        continue;
      }
      /* A block across a fold boundary. */
      static const int kinds[3] = {FROM_NEXT, FROM_PREV, FROM_SAME};
      uint32_t mask[3][16] = {{0}};
      const char *src[3] = {NULL, NULL, NULL};
      for (int k = 0; k < 3; k++)
        for (int64_t l = 0; l < B; l++)
          if (from[l] == kinds[k]) {
            mask[k][l] = ~0u;
            src[k] = x + at + step_of(kinds[k]) * frame * (int64_t)es;
          }
      if (es == 4)
        mixed_f32(s, out, src, mask, accumulate);
      else
        mixed_bf16(s, (uint16_t *)out, src, mask, accumulate);
    }
}

/* Channels-last: [N*T, H, W, C]; each position's channels split into the
 * back fold, the forward fold and the rest, each one contiguous run. */
static void run_nhwc(const tshift_node *s, const char *x, char *y, int backward, int accumulate) {
  const int64_t C = s->c, frame = s->hw * C, es = (int64_t)s->elem;
  const int64_t cut[4] = {0, s->back, s->back + s->fwd, C};
#pragma omp parallel for collapse(2) schedule(static) if (s->frames * frame > (1 << 15))
  for (int64_t f = 0; f < s->frames; f++)
    for (int64_t i = 0; i < s->hw; i++) {
      const int64_t t = f % s->segments, at = (f * frame + i * C) * es;
      for (int r = 0; r < 3; r++) {
        const int64_t n = cut[r + 1] - cut[r];
        if (n <= 0) continue;
        int from = source(s, cut[r], t, backward);
        char *out = y + at + cut[r] * es;
        const char *in = x + at + cut[r] * es + step_of(from) * frame * es;
        put_run(out, from == FROM_ZERO ? NULL : in, n, (size_t)es, accumulate, 0);
      }
    }
}

static void tshift_forward(cpu_node *n, const sp_op_args *a) {
  tshift_node *s = (tshift_node *)n;
  if (s->nhwc)
    run_nhwc(s, a->in[0]->data, a->out->data, 0, 0);
  else
    run(s, a->in[0]->data, a->out->data, 0, 0);
}

static void tshift_backward(cpu_node *n, const sp_op_args *a) {
  if (!a->d_in[0]) return;
  tshift_node *s = (tshift_node *)n;
  int accumulate = !(a->d_in_fresh & 1u);
  if (s->nhwc)
    run_nhwc(s, a->d_out->data, a->d_in[0]->data, 1, accumulate);
  else
    run(s, a->d_out->data, a->d_in[0]->data, 1, accumulate);
}

static const cpu_vt tshift_vt = {tshift_forward, tshift_backward, NULL, NULL};

int cpu_tshift_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t md;
  if (p->in_shape[0].ndim != 4 || cpu_md_input(&md, p, 0) != 0) return cpu_adapter_prepare(p);
  int block = cpu_md_lanes(&md);
  if (!block || (md.data_type != dnnl_f32 && md.data_type != dnnl_bf16) ||
      (p->out_plain && !(block == 1 && md.data_type == dnnl_f32)))
    return cpu_adapter_prepare(p);
  const sp_tshift_attr *at = p->attr;
  tshift_node *s = cpu_node_new(sizeof *s, &tshift_vt);
  s->frames = p->in_shape[0].d[0];
  s->segments = at->segments;
  s->c = p->in_shape[0].d[1];
  s->nhwc = block == CPU_LANES_NHWC;
  s->block = s->nhwc ? 1 : block;
  s->blocks = (s->c + s->block - 1) / s->block;
  s->hw = p->in_shape[0].d[2] * p->in_shape[0].d[3];
  s->back = sp_tshift_fold(s->c, at->ratio_back);
  s->fwd = sp_tshift_fold(s->c, at->ratio_fwd);
  s->elem = md.data_type == dnnl_f32 ? 4 : 2;
  s->stream = (size_t)(s->frames * s->blocks * s->block * s->hw) * s->elem >= cpu_tshift_stream_min_bytes;
  s->base.out_md = md; /* the gradients share it (a value's gradient has its layout) */
  p->saved_bytes = p->fwd_scratch_bytes = p->bwd_scratch_bytes = 0;
  cpu_report(p, &s->base);
  return 0;
}
#endif
