/* The first convolution of a bf16 training plan, or of an inference plan
 * (bf16, or f32: alone in AVX-512 builds, cpu_conv_stem_f32_infer, and
 * below them where it computes the next layer; with 8 output channels:
 * cpu_conv_stem_infer_max_oc), when
 * it reads the plain f32 image with few channels (grey or colour) and has
 * a small window: forward and weight gradient as loops of our own, from a
 * padded copy of the image (bf16 in training, which backward reuses) into
 * channels-last output of the plan's type. A frozen inference plan folds
 * the batch norm after it and its ReLU in, as conv.c does; inference pads
 * only the rows an output row reads, per thread.
 *
 * Why: oneDNN 2.6 has no AMX kernel for one input channel; vgg-face's stem
 * (1 -> 8 channels, 3x3, stride 2, 224x224, batch 64) took 3.0 ms forward on
 * its avx512 brgconv, 8.3 ms for the weight gradient and 1.7 ms to reorder
 * the image: 13 of a 65 ms bf16 step, for 58 M multiply-adds a pass. The
 * first version here (8 lanes) took 4.4 ms forward (copy included) and 4.7
 * ms for the weight gradient; at 16 lanes 2.3 and 2.0 ms, and vgg-face bf16
 * trains 6-10% faster (a stem-only graph, per-node profile, 2 threads).
 * Inference, the same stem at batch 64 (AMD Zen 5, 2 threads, per-node
 * profile, 3 alternating runs, oneDNN -> here): f32 2.45-2.69 -> 1.8-2.35
 * ms; bf16 1.84-2.05 ms plus a 0.5 ms image reorder -> 1.23-2.25 ms. The
 * f32 output (25.7 MB) streams past the caches.
 *
 * A frozen inference plan's stem also computes the 3x3 convolution after
 * its batch norm and ReLU where conv_narrow.h's loops take it (8 -> 16..64
 * channels; that one's batch norm and ReLU folded in too): per output row
 * of that layer, the stem rows it reads that a ring of three per thread
 * does not hold yet, written as the stem's vectors of positions lie
 * (planar in f32, channel pairs in bf16; below AVX-512 channels-last on
 * 8 lanes, for rows8.h) and read from there by the
 * layer's loops. The stem's output (vgg-face batch 64: 25.7 MB in f32) is
 * never stored, nor transposed (the transposes were most of the f32
 * stem's time). vgg-face batch 64, AMD Zen 5, 2 threads, stem and layer
 * together, per-node profile, alternating runs: f32 4.3-5.3 -> 2.9-3.5 ms,
 * bf16 2.0-2.5 -> 1.7-2.4 ms.
 *
 * Forward: per PG output positions (the vector width: 16 with AVX-512) and 8
 * output channels, eight vectors of positions summed over the window's taps
 * (one broadcast FMA each), then transposed into channel vectors (word
 * permutes of the bf16 results with AVX-512). The copy splits each padded
 * row by column phase (stride), so a tap's consecutive positions are
 * consecutive values; strides 1 and 2 copy a vector at a time.
 * Weight gradient: conv_stem_dw.c.
 *
 * Values are what the oneDNN path computes: in bf16 the image and the
 * weights are rounded to bf16, products summed in f32, the output rounded to
 * bf16 (the tests find the outputs bit-identical; f32 differs by summation
 * order). */
#ifdef SPRY_HAVE_DNNL
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/cpu/conv_narrow.h"
#include "backends/cpu/conv_stem.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

int cpu_conv_use_stem = 1;
/* bf16 training: 0 leaves a stem whose weight gradient the AMX tiles take
 * (cpu_bww_small_applies) to oneDNN's forward and those tiles. ResUNet-50's
 * 3 -> 32 3x3 stride-2 stem at batch 16 on the Xeon with AMX, the same
 * binary alternating (gdb): forward + backward 2.8-4.6 + 2.7-7.8 ms against
 * the loops here 4.5 + 11.5-11.7 (their weight gradient runs on bf16 dot
 * products, at half an FMA's rate on that machine). Tests set 1 to keep
 * covering these loops there. */
int cpu_conv_stem_train_amx = 0;
/* Inference takes the stem up to this many output channels: where it was
 * measured faster. Batch 64, AMD Zen 5, 2 threads, oneDNN -> here, ms:
 * vgg-face's grey 1 -> 8 f32 2.45-2.69 -> 1.8-2.35, bf16 (with the image
 * reorder it saves) 2.3-2.5 -> 1.2-2.3; ResUNet-50's colour 3 -> 32 f32
 * 11.3-11.8 -> 14.7-16.6, bf16 7.4-7.6 -> 12.2-13.3 (there four groups of
 * 8 channels each walk the taps again, against oneDNN's kernel at its
 * best). Tests raise it to cover every case. */
int64_t cpu_conv_stem_infer_max_oc = 8;
/* f32 inference plans take the stem alone only in AVX-512 builds (below
 * them, only where it computes the next layer: cpu_conv_stem_prepare).
 * On 8 lanes, alone, oneDNN's AVX2 kernel was faster: vgg-face's grey 1 -> 8 at batch
 * 64, AMD Zen 3, 2 threads, per-node profile, alternating runs: 1.98-2.29
 * ms against the stem's 2.79-2.95 (batch 1: 0.031-0.040 against
 * 0.051-0.080). Tests switch it on to cover the loops on any machine. */
#ifdef __AVX512F__
int cpu_conv_stem_f32_infer = 1;
#else
int cpu_conv_stem_f32_infer = 0;
#endif
int cpu_conv_stem_fuse_next = 1;
long cpu_stem_fused_calls;

/* The image in bf16, zero-padded and split by column phase: padded row
 * (n, i, y) is sw rows of wq values, phase p holding padded columns
 * m sw + p. Position ox of tap column c then reads phase (c dw) % sw at
 * m = ox + (c dw) / sw: consecutive positions are consecutive values,
 * whatever the stride. Rows run long enough that the last group of PG
 * positions reads zeros, not the next row. Forward and backward read it;
 * it is what oneDNN's reorder gives its convolution, rearranged. */
INLINE void copy_phase(void *d, const float *from, int64_t n, const int64_t sw, int bf16) {
  if (bf16)
    for (int64_t m = 0; m < n; m++) ((uint16_t *)d)[m] = sp_bf16_round(from[m * sw]);
  else
    for (int64_t m = 0; m < n; m++) ((float *)d)[m] = from[m * sw];
}

/* Positions per forward group and values per weight-gradient vector: the
 * machine's vector width (16 with AVX-512: one group of 16 positions, or
 * two positions of 8 channels). */
enum {
  PG = VW,
  RING8_PG = 8 /* forward_row_ring8's positions per group: 8 chains of FMAs cover their latency (12 measured slower) */
};

/* n values from[0, sw, 2 sw, ...] into d (rounded to bf16 where bf16);
 * `avail` values may be read from `from`. Strides 1 and 2 a vector at a
 * time (vgg-face's 224x224 grey stem: the copy took 1.5-2 ms of a 48 ms
 * step element by element). */
static void copy_phase_any(void *d, const float *from, int64_t n, int64_t sw, int64_t avail, int bf16) {
  int64_t m = 0;
  if (sw == 1)
    for (; m + VW <= n; m += VW) vstw(d, m, vldw(from, m, 0, VW), bf16, VW);
  else if (sw == 2)
    for (; 2 * (m + VW) <= avail && m + VW <= n; m += VW) {
      const vfw a = vldw(from, 2 * m, 0, VW), b = vldw(from, 2 * m + VW, 0, VW);
#ifdef __AVX512F__
      vstw(d, m, __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), bf16, VW);
#else
      vstw(d, m, __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14), bf16, VW);
#endif
    }
  char *rest = (char *)d + (bf16 ? 2 : 4) * (size_t)m;
  if (sw == 1)
    copy_phase(rest, from + m, n - m, 1, bf16); /* the stride a constant: vectorised */
  else if (sw == 2)
    copy_phase(rest, from + 2 * m, n - m, 2, bf16);
  else
    copy_phase(rest, from + m * sw, n - m, sw, bf16);
}

/* Padded row yp of image plane `plane` (n ic + i) into dst: sw wq values. */
static void pad_row(const stem_node *s, const float *x, int64_t plane, int64_t yp, void *dst) {
  const int64_t sw = s->sw, wq = s->wq, y = yp - s->ph;
  const size_t es = s->bf16 ? 2 : 4;
  if (y < 0 || y >= s->ih) {
    memset(dst, 0, es * (size_t)(sw * wq));
    return;
  }
  const float *src = x + (plane * s->ih + y) * s->iw;
  for (int64_t p = 0; p < sw; p++) {
    /* m sw + p - pw in [0, iw) */
    const int64_t m0 = p >= s->pw ? 0 : (s->pw - p + sw - 1) / sw, m1 = (s->iw + s->pw - p + sw - 1) / sw;
    const int64_t end = m1 < wq ? m1 : wq, n = end > m0 ? end - m0 : 0; /* m0 < wq: wq > ow + PG */
    const int64_t first = m0 * sw + p - s->pw;                          /* >= 0 by the choice of m0 */
    char *phase = (char *)dst + es * (size_t)(p * wq);
    /* Zeros around the copy only (the whole row first took 1-2% of a
     * vgg-face inference step). */
    memset(phase, 0, es * (size_t)m0);
    memset(phase + es * (size_t)(m0 + n), 0, es * (size_t)(wq - m0 - n));
    copy_phase_any(phase + es * (size_t)m0, src + first, n, sw, s->iw - first, s->bf16);
  }
}

void cpu_stem_pad_image(const stem_node *s, const float *x, void *img) {
  const size_t row_bytes = (s->bf16 ? 2 : 4) * (size_t)(s->sw * s->wq);
#pragma omp parallel for schedule(static) num_threads(s->threads)
  for (int64_t r = 0; r < s->n * s->ic * s->hp; r++) pad_row(s, x, r / s->hp, r % s->hp, (char *)img + r * row_bytes);
}

/* Where tap (r, c, i) of output row `row` (image n, row oy) reads position
 * 0; position ox is ox values on. Taps in order t = (r kw + c) ic + i. The
 * padded rows are those of the whole image (img: [n ic + i][y], training),
 * or where `slot` is set, those this output row reads, window row r's in
 * slot[r] ([slot][i], built by the caller: inference). */
void cpu_stem_tap_rows(const stem_node *s, const void *img, int64_t row, const int64_t *slot, const void **src) {
  const int64_t n = row / s->oh, oy = row % s->oh;
  const size_t es = s->bf16 ? 2 : 4;
  int64_t t = 0;
  for (int64_t r = 0; r < s->kh; r++)
    for (int64_t c = 0; c < s->kw; c++)
      for (int64_t i = 0; i < s->ic; i++) {
        const int64_t y = oy * s->sh + r * s->dh, off = c * s->dw;
        const int64_t at = slot ? slot[r] * s->ic + i : (n * s->ic + i) * s->hp + y;
        src[t++] = (const char *)img + es * (size_t)((at * s->sw + off % s->sw) * s->wq + off / s->sw);
      }
}

/* Rows of a[] become columns: o[q][l] = a[l][q] (8 x 8, three shuffle stages). */
INLINE void transpose8(const vf8 *a, vf8 *o) {
  vf8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(a[i], a[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(a[i], a[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; h++) {
      u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int q = 0; q < 4; q++) {
    o[q] = __builtin_shufflevector(u[q], u[q + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    o[q + 4] = __builtin_shufflevector(u[q], u[q + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

/* Half h of v (positions 8h .. 8h + 7): v itself where VW is 8. */
INLINE vf8 half8(vfw v, int h) {
#ifdef __AVX512F__
  return h ? __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15) : __builtin_shufflevector(v, v, VW_LO8);
#else
  (void)h;
  return v;
#endif
}

/* store_positions (below) in f32: position q's 8 channels at out + q oc
 * (streamed past the caches where `stream` and aligned). */
INLINE void store_positions_f32(const vfw *a, float *out, int64_t np, int64_t oc, int stream) {
  VEC_UNROLL
  for (int h = 0; h < VW / 8; h++) {
    vf8 in[8], o[8];
    VEC_UNROLL
    for (int l = 0; l < 8; l++) in[l] = half8(a[l], h);
    transpose8(in, o);
    for (int q = 0; q < 8 && 8 * h + q < np; q++) {
      float *at = out + (8 * h + q) * oc;
#ifdef __AVX2__
      if (stream && ((uintptr_t)at & 31) == 0) {
        _mm256_stream_ps(at, (__m256)o[q]);
        continue;
      }
#endif
      *(vf8u *)at = o[q];
    }
  }
}

#ifdef __AVX512F__
typedef uint16_t vw32 __attribute__((vector_size(64)));
typedef uint16_t vw32u __attribute__((vector_size(64), aligned(2)));

/* bf16 of v in a register (vstw's rounding). */
INLINE vh16 to_bf16(vfw v) {
  vh16 h;
  vstw(&h, 0, v, 1, VW);
  return h;
}

/* a[l] holds channel l at 16 positions; out gets position q's 8 channels
 * (bf16) at out + q oc, for the first np positions. Channel pairs are
 * joined, then two word permutes (vpermt2w) make 4 vectors of 4 positions. */
INLINE void store_positions(const vfw *a, uint16_t *out, int64_t np, int64_t oc, int stream) {
  vw32 u[4], v[4], o[4];
  VEC_UNROLL
  for (int m = 0; m < 4; m++) {
    const vh16 lo = to_bf16(a[2 * m]), hi = to_bf16(a[2 * m + 1]);
    u[m] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                   22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  /* v[2g + h]: positions 8h..8h+7 of channels 4g..4g+3, position-major. */
#define Q4(q) (q), 16 + (q), 32 + (q), 48 + (q)
#define Q8(b) Q4(b), Q4(b + 1), Q4(b + 2), Q4(b + 3), Q4(b + 4), Q4(b + 5), Q4(b + 6), Q4(b + 7)
  v[0] = __builtin_shufflevector(u[0], u[1], Q8(0));
  v[1] = __builtin_shufflevector(u[0], u[1], Q8(8));
  v[2] = __builtin_shufflevector(u[2], u[3], Q8(0));
  v[3] = __builtin_shufflevector(u[2], u[3], Q8(8));
#undef Q8
#undef Q4
  /* o[k]: positions 4k..4k+3, channels 0..7. */
#define P8(q) 4 * (q), 4 * (q) + 1, 4 * (q) + 2, 4 * (q) + 3, 32 + 4 * (q), 33 + 4 * (q), 34 + 4 * (q), 35 + 4 * (q)
#define P32(b) P8(b), P8(b + 1), P8(b + 2), P8(b + 3)
  o[0] = __builtin_shufflevector(v[0], v[2], P32(0));
  o[1] = __builtin_shufflevector(v[0], v[2], P32(4));
  o[2] = __builtin_shufflevector(v[1], v[3], P32(0));
  o[3] = __builtin_shufflevector(v[1], v[3], P32(4));
#undef P32
#undef P8
  if (oc == 8 && np == 16) {
    if (stream && ((uintptr_t)out & 63) == 0) {
      VEC_UNROLL
      for (int k = 0; k < 4; k++) _mm512_stream_si512((__m512i *)(out + 32 * k), (__m512i)o[k]);
      return;
    }
    VEC_UNROLL
    for (int k = 0; k < 4; k++) *(vw32u *)(out + 32 * k) = o[k];
    return;
  }
  uint16_t rows[16 * 8]; /* position q's 8 channels at rows + 8 q */
  VEC_UNROLL
  for (int k = 0; k < 4; k++) *(vw32u *)(rows + 32 * k) = o[k];
  for (int64_t q = 0; q < np; q++) memcpy(out + q * oc, rows + 8 * q, 8 * sizeof(uint16_t));
}
#else
INLINE void store_positions(const vfw *a, uint16_t *out, int64_t np, int64_t oc, int stream) {
  (void)stream;
  vf8 o[8];
  transpose8(a, o);
  for (int64_t q = 0; q < np; q++) vst(out, q * oc, o[q], 1);
}
#endif

/* One output row, channels-last: for every PG positions and group of 8
 * output channels, 8 vectors of PG positions (one per channel) summed over
 * the taps (one broadcast FMA each), then turned into PG vectors of 8
 * channels, one per position. bf16: the image and the output's type, a
 * constant where called. */
/* a[l] += the taps' products for channel c + l at positions j.., one FMA a
 * tap (inlined with a[] in registers: every loop over it unrolled). */
INLINE void tap_sums(const stem_node *s, const void *const *src, int64_t j, int64_t c, vfw *a, const int bf16) {
  for (int64_t t = 0; t < s->k; t++) {
    const vfw x = vldw(src[t], j, bf16, VW);
    const float *w = s->wt + t * s->oc + c;
    VEC_UNROLL
    for (int l = 0; l < 8; l++) a[l] += x * w[l];
  }
}

/* a[l] from the bias of channel c + l; then, after the sums, the ReLU
 * where absorbed (unrolled, or a[] goes through the stack). */
INLINE void start_sums(const float *bias, int64_t c, vfw *a) {
  VEC_UNROLL
  for (int l = 0; l < 8; l++) a[l] = vbcastw(bias ? bias[c + l] : 0.0f);
}
INLINE void finish_sums(const stem_node *s, vfw *a) {
  if (!s->relu) return;
  VEC_UNROLL
  for (int l = 0; l < 8; l++) a[l] = vrelu(a[l]);
}

INLINE void forward_row(const stem_node *s, const void *const *src, const float *bias, void *out, const int bf16) {
  const int64_t oc = s->oc;
  for (int64_t j = 0; j < s->ow; j += PG) {
    const int64_t np = s->ow - j < PG ? s->ow - j : PG;
    for (int64_t c = 0; c < oc; c += 8) {
      vfw a[8];
      start_sums(bias, c, a);
      tap_sums(s, src, j, c, a, bf16);
      finish_sums(s, a);
      if (bf16)
        store_positions(a, (uint16_t *)out + j * oc + c, np, oc, s->stream);
      else
        store_positions_f32(a, (float *)out + j * oc + c, np, oc, s->stream);
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* forward_row for the fused conv (stem_node.fused; 8 channels): the eight
 * vectors of positions go into conv_narrow.h's planar padded row as they
 * are, from position 1 (0 is the padding), instead of being transposed to
 * channels-last (in f32 the transposes took most of the stem's time); a
 * short last group is stored masked, so the tail stays zero. bf16: each
 * channel pair rounded and interleaved word by word. */
INLINE void forward_row_planar(const stem_node *s, const void *const *src, const float *bias, char *out,
                               int64_t row_len, const int bf16) {
  const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t j = 0; j < s->ow; j += PG) {
    const int64_t np = s->ow - j < PG ? s->ow - j : PG;
    const __mmask16 m = (__mmask16)((1u << np) - 1u);
    vfw a[8];
    start_sums(bias, 0, a);
    if (bf16) {
      /* Two taps a vdpbf16ps: it adds its high pair's product, then its low
       * one's, each exact (bf16 x bf16) and rounded once, as the FMA per tap
       * below does in tap order: the same bits, 40 dot products for 72 FMAs
       * (a 3x3 grey stem). An odd last tap pairs with zeros. vgg-face bf16
       * batch 64, the fused node interleaved call by call with the FMAs:
       * 1.61-1.77 against 1.68-1.84 ms (its image rows' reads dominate). */
      for (int64_t t = 0; t < s->k; t += 2) {
        const __m256i hi = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src[t] + j));
        const __m256i lo = t + 1 < s->k ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)src[t + 1] + j))
                                        : _mm256_setzero_si256();
        const __m512bh x =
            (__m512bh)_mm512_permutexvar_epi16(pairs, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
        const uint32_t *w = s->wpair + 8 * (t / 2);
        VEC_UNROLL
        for (int l = 0; l < 8; l++)
          a[l] = (vfw)_mm512_dpbf16_ps((__m512)a[l], x, (__m512bh)_mm512_set1_epi32((int)w[l]));
      }
    } else {
      tap_sums(s, src, j, 0, a, 0); /* 8 channels: the fused stem's */
    }
    finish_sums(s, a);
    if (bf16) {
      VEC_UNROLL
      for (int p = 0; p < 4; p++) {
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh((__m512)a[2 * p + 1], (__m512)a[2 * p]);
        _mm512_mask_storeu_epi32((uint32_t *)out + p * row_len + 1 + j, m, _mm512_permutexvar_epi16(pairs, both));
      }
    } else {
      VEC_UNROLL
      for (int l = 0; l < 8; l++) _mm512_mask_storeu_ps((float *)out + l * row_len + 1 + j, m, (__m512)a[l]);
    }
  }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)

/* The stem's row for the fused conv on 8 lanes (conv_narrow.h's blocked8,
 * f32): channels-last, position ox's 8 channels at out + 8 ox, as it reads
 * them. Per RING8_PG positions one accumulator each, the 8 channels across
 * its lanes: per tap, the tap's 8 weights as one vector against each
 * position's value broadcast, so nothing is transposed. A short last group
 * stores only its own positions (a padded row's tail stays zero). The ReLU
 * where `relu`. k (taps) and relu are constants where called: the loops
 * unrolled, a[] in registers. */
INLINE void ring8_row(const stem_node *s, const void *const *src, const float *bias, float *out, const int64_t k,
                      const int relu) {
  const vf8 b = bias ? vload_f(bias) : vbcast(0.0f);
  for (int64_t j = 0; j < s->ow; j += RING8_PG) {
    vf8 a[RING8_PG];
    VEC_UNROLL
    for (int q = 0; q < RING8_PG; q++) a[q] = b;
    VEC_UNROLL
    for (int64_t t = 0; t < k; t++) { /* the rows run past ow + RING8_PG: the tail reads zeros */
      const float *x = (const float *)src[t] + j;
      const vf8 w = vload_f(s->wt + t * 8);
      VEC_UNROLL
      for (int q = 0; q < RING8_PG; q++) a[q] += vbcast(x[q]) * w;
    }
    if (relu) {
      VEC_UNROLL
      for (int q = 0; q < RING8_PG; q++) a[q] = vrelu8(a[q]);
    }
    float *at = out + j * 8;
    if (j + RING8_PG <= s->ow) {
      VEC_UNROLL
      for (int q = 0; q < RING8_PG; q++) *(vf8u *)(at + q * 8) = a[q];
    } else {
      for (int64_t q = 0; q < s->ow - j; q++) *(vf8u *)(at + q * 8) = a[q];
    }
  }
}

static void forward_row_ring8(const stem_node *s, const void *const *src, const float *bias, float *out) {
  out += 8;      /* position 0 of the ring's padded row is the padding */
  if (s->k == 9) /* a 3x3 grey stem */
    s->relu ? ring8_row(s, src, bias, out, 9, 1) : ring8_row(s, src, bias, out, 9, 0);
  else
    s->relu ? ring8_row(s, src, bias, out, s->k, 1) : ring8_row(s, src, bias, out, s->k, 0);
}

#endif

/* The image rows output row `row` reads, padded into `pad` (this thread's:
 * a ring of kh padded rows, pad_held[k] the image row, n hp + y, in slot k;
 * -1 at first), and where each tap reads position 0 (src). Padded row y
 * sits in slot y % kh, so the next output row finds the rows it shares with
 * this one (kh - sh at stride sh) padded already; with dilation every row
 * is padded again into slot r. */
void cpu_stem_window(const stem_node *s, const float *x, int64_t row, char *pad, int64_t *pad_held, const void **src) {
  const int64_t n = row / s->oh, oy = row % s->oh;
  const size_t pad_row_bytes = (s->bf16 ? 2 : 4) * (size_t)(s->sw * s->wq);
  int64_t slot[STEM_MAX_K];
  for (int64_t r = 0; r < s->kh; r++) {
    const int64_t y = oy * s->sh + r * s->dh, k = s->dh == 1 ? y % s->kh : r, key = s->dh == 1 ? n * s->hp + y : -1;
    slot[r] = k;
    if (key >= 0 && pad_held[k] == key) continue;
    for (int64_t i = 0; i < s->ic; i++) pad_row(s, x, n * s->ic + i, y, pad + (k * s->ic + i) * pad_row_bytes);
    pad_held[k] = key;
  }
  cpu_stem_tap_rows(s, pad, row, slot, src);
}

/* Inference: output row `row` into out, from the image rows it reads
 * (cpu_stem_window); planar_len > 0: into the fused conv's planar rows of that
 * length (forward_row_planar). */
static void infer_row(const stem_node *s, const float *x, const float *bias, int64_t row, char *pad, int64_t *pad_held,
                      void *out, int64_t planar_len) {
  const void *src[STEM_MAX_K];
  cpu_stem_window(s, x, row, pad, pad_held, src);
  if (planar_len) { /* the fused conv's row: what conv_narrow.h's loops this build has read */
#if defined(__AVX2__) && defined(__FMA__)
    if (s->next.blocked8) {
      forward_row_ring8(s, src, bias, out);
      return;
    }
#endif
    if (s->next.amx) { /* bf16 channels-last from position 1 (0: the padding) */
      forward_row(s, src, bias, (uint16_t *)out + CPU_NARROW_IC, 1);
      return;
    }
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    s->bf16 ? forward_row_planar(s, src, bias, out, planar_len, 1)
            : forward_row_planar(s, src, bias, out, planar_len, 0);
#endif
    return;
  }
  if (s->bf16)
    forward_row(s, src, bias, out, 1);
  else
    forward_row(s, src, bias, out, 0);
}

/* Per-thread slices in whole cache lines, so threads never share one. */
static size_t line_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }
static size_t ring_slice(const stem_node *s) { return line_up(CPU_NARROW_KS * cpu_narrow_row_bytes(&s->next)); }

/* The stem and the convolution after it (stem_node.fused): per output row
 * of that one, the stem rows it reads that the ring does not hold yet (the
 * next row reads one of them again at stride 2, two at stride 1), then the
 * row. */
static void fused_forward(const stem_node *s, const sp_op_args *a, const float *bias) {
  const cpu_narrow *g = &s->next;
  const float *x = a->in[0]->data;
  char *y = a->out->data;
  const size_t ring_row = cpu_narrow_row_bytes(g);
#pragma omp parallel num_threads(s->threads)
  {
    const int t = omp_get_thread_num();
    char *pad = (char *)s->img + (size_t)t * s->pad_slice, *ring = s->ring + (size_t)t * ring_slice(s);
    int64_t held[CPU_NARROW_KS] = {-1, -1, -1}; /* the stem row (n oh + y) in each slot */
    int64_t pad_held[STEM_MAX_K];               /* infer_row's ring */
    for (int k = 0; k < STEM_MAX_K; k++) pad_held[k] = -1;
    memset(ring, 0, CPU_NARROW_KS * ring_row); /* the padding: position 0 and the tail past the row */
    cpu_narrow_tiles(g, 1);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < g->n * g->oh; row++) {
      const int64_t n = row / g->oh, oy = row % g->oh;
      const char *rows[CPU_NARROW_KS];
      int valid[CPU_NARROW_KS];
      for (int r = 0; r < CPU_NARROW_KS; r++) {
        const int64_t iy = oy * g->sw + r - 1, slot = (iy + CPU_NARROW_KS) % CPU_NARROW_KS; /* 3 rows: 3 slots */
        char *at = ring + slot * ring_row;
        rows[r] = at;
        valid[r] = iy >= 0 && iy < g->ih;
        if (valid[r] && held[slot] != n * s->oh + iy) {
          infer_row(s, x, bias, n * s->oh + iy, pad, pad_held, at, g->row_len);
          held[slot] = n * s->oh + iy;
        }
      }
      cpu_narrow_row(g, rows, valid, y + cpu_narrow_out_offset(g, row));
    }
    cpu_narrow_tiles(g, 0);
  }
}

void cpu_stem_weights(const stem_node *s, const float *w, const float *b, const sp_op_args *fold) {
  const int64_t oc = s->oc;
  for (int64_t o = 0; o < oc; o++) {
    float scale = 1.0f, shift = b ? b[o] : 0.0f;
    if (fold) cpu_bn_fold(fold, o, shift, &scale, &shift);
    s->bias[o] = shift;
    for (int64_t i = 0; i < s->ic; i++)
      for (int64_t r = 0; r < s->kh; r++)
        for (int64_t c = 0; c < s->kw; c++) {
          float v = w[((o * s->ic + i) * s->kh + r) * s->kw + c];
          if (fold) v *= scale;
          s->wt[((r * s->kw + c) * s->ic + i) * oc + o] = s->bf16 ? sp_bf16_widen(sp_bf16_round(v)) : v;
        }
  }
}

static void stem_forward(cpu_node *n, const sp_op_args *a) {
  const stem_node *s = (const stem_node *)n;
  const int64_t oc = s->oc;
  const float *w = a->param[0]->data, *b = s->has_bias ? a->param[1]->data : NULL;
  /* [oc][ic][kh][kw] -> [tap][oc], tap = (r kw + c) ic + i, with the batch
   * norm folded in where absorbed (as conv.c folds it), in bf16 values in a
   * bf16 plan; a frozen plan keeps them until its parameters change. */
  if (!s->kept || a->params_stale) cpu_stem_weights(s, w, b, s->fold ? a->consumer : NULL);
  if (s->wpair && (!s->kept || a->params_stale))
    for (int64_t t = 0; t < s->k; t += 2)
      for (int l = 0; l < 8; l++) {
        const uint32_t hi = sp_bf16_round(s->wt[t * 8 + l]),
                       lo = t + 1 < s->k ? sp_bf16_round(s->wt[(t + 1) * 8 + l]) : 0;
        s->wpair[8 * (t / 2) + l] = hi << 16 | lo;
      }
  /* Training keeps the padded image for backward; inference pads only the
   * rows each output row reads, into a buffer per thread that stays in
   * cache (vgg-face's f32 grey stem, batch 64: 6.2 ms with the whole
   * image padded first, which was out of cache by the time it was read). */
  const float *bias = b || s->fold ? s->bias : NULL, *x = a->in[0]->data;
  if (s->fused) {
    __atomic_add_fetch(&cpu_stem_fused_calls, 1, __ATOMIC_RELAXED);
    if (!s->kept || a->params_stale) cpu_narrow_weights(&s->next, a->chain[2], a->chain[3]);
    fused_forward(s, a, bias);
    return;
  }
  if (!s->infer) cpu_stem_pad_image(s, a->in[0]->data, s->img);
  char *y = a->out->data;
  const size_t es = s->bf16 ? 2 : 4, out_row = es * (size_t)(s->ow * oc);
#pragma omp parallel num_threads(s->threads)
  {
    char *rows = (char *)s->img + (size_t)omp_get_thread_num() * s->pad_slice;
    int64_t pad_held[STEM_MAX_K]; /* infer_row's ring */
    for (int k = 0; k < STEM_MAX_K; k++) pad_held[k] = -1;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < s->n * s->oh; row++) {
      if (s->infer) {
        infer_row(s, x, bias, row, rows, pad_held, y + row * out_row, 0);
        continue;
      }
      const void *src[STEM_MAX_K];
      cpu_stem_tap_rows(s, s->img, row, NULL, src);
      if (s->bf16)
        forward_row(s, src, bias, y + row * out_row, 1);
      else
        forward_row(s, src, bias, y + row * out_row, 0);
    }
#ifdef __SSE2__
    if (s->stream) _mm_sfence(); /* the streamed lines out before the next layer reads them */
#endif
  }
}

static int stem_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  stem_node *s = (stem_node *)n;
  s->img = s->infer ? (void *)(fs + s->img_off) : a->saved;
  if (!s->kept) s->wt = (float *)(fs + s->wt_off), s->bias = (float *)(fs + s->bias_off);
  if (s->fold && (!a->consumer || a->consumer->n_state < 2))
    return sp_error_set("conv stem: folded batch norm not wired");
  if (s->fused) {
    s->ring = fs + s->ring_off;
    if (!a->chain[2] || (s->next.fold && (!a->chain[3] || a->chain[3]->n_state < 2)))
      return sp_error_set("conv stem: the fused convolution not wired");
  }
  s->acc = (double *)(bs + s->acc_off);
  return 0;
}

static const cpu_vt stem_vt = {stem_forward, cpu_stem_backward, stem_bind, NULL};

/* A conv on the plain f32 image, output channels-last: in a bf16 training
 * plan, whose input gradient nobody needs, or in an inference plan (f32 or
 * bf16). */
static int applies(const sp_op_prep *p) {
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  const int train = p->bf16 && p->run_backward && !p->need_d_in[0] &&
                    (cpu_conv_stem_train_amx || !cpu_bww_small_applies(in->d[1], w->d[0], w->d[2], w->d[3]));
  /* f32 where cpu_conv_stem_f32_infer, or where it fuses the next layer
   * (cpu_conv_stem_prepare decides). */
  const int infer = !p->run_backward && !p->training && w->d[0] <= cpu_conv_stem_infer_max_oc;
  return (train || infer) && !p->out_plain && p->in_layout[0] == NULL && p->in_dtype[0] == SP_F32 && in->ndim == 4 &&
         at->groups == 1 && in->d[1] <= STEM_MAX_IC && in->d[1] * w->d[2] * w->d[3] <= STEM_MAX_K && w->d[0] % 8 == 0 &&
         w->d[0] <= STEM_MAX_OC;
}

/* An inference stem with its batch norm and ReLU folded in, then a 3x3
 * convolution that conv_narrow.h's loops take (and its batch norm and ReLU,
 * folded in where they follow): the stem computes it (stem_node.fused).
 * vgg-face's 1 -> 8 -> 16 channels, 224 -> 112 -> 56, batch 64, where the
 * stem's output (25.7 MB in f32) went to memory and back. */
static int fuse_next(stem_node *s, const sp_op_prep *p) {
  const sp_op_consumer *c = &p->consumer[2], *bn = &p->consumer[3], *relu = &p->consumer[4];
  /* Frozen (the stem's ReLU implies it): the fused weights live with the node. */
  if (!cpu_conv_stem_fuse_next || !cpu_conv_use_narrow || !p->frozen || !s->relu || c->op != &sp_op_conv2d ||
      c->out_plain || c->n_param < 1 || c->out_shape.ndim != 4 ||
      c->out_shape.d[0] * c->out_shape.d[2] * c->out_shape.d[3] < cpu_conv_narrow_min_positions)
    return 0;
  const sp_shape in = sp_shape4(s->n, s->oc, s->oh, s->ow);
  if (cpu_narrow_init(&s->next, c->attr, &in, &c->param_shape[0], &c->out_shape, !s->bf16, c->n_param > 1)) return 0;
  /* forward_row_planar writes its rows; forward_row_ring8 (8 lanes) and
   * forward_row (for the AMX tiles) channels-last. */
  s->next.planar = !s->next.blocked8 && !s->next.amx;
  s->next.fold = bn->op == &sp_op_batchnorm && bn->n_state >= 2 && !bn->out_plain;
  s->next.relu = s->next.fold && relu->op == &sp_op_relu && !relu->out_plain;
  return 1;
}

void cpu_stem_geometry(stem_node *s, const sp_op_prep *p) {
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  s->n = in->d[0], s->ic = in->d[1], s->ih = in->d[2], s->iw = in->d[3];
  s->oc = w->d[0], s->oh = p->out_shape.d[2], s->ow = p->out_shape.d[3], s->kh = w->d[2], s->kw = w->d[3];
  s->sh = at->stride_h, s->sw = at->stride_w, s->ph = at->pad_h, s->pw = at->pad_w, s->dh = at->dil_h,
  s->dw = at->dil_w;
  s->k = s->ic * s->kh * s->kw;
  s->has_bias = p->n_param > 1;
  s->threads = omp_get_max_threads();
  s->bf16 = p->bf16;
  s->hp = s->ih + 2 * s->ph;
  s->wq = s->ow + (PG > RING8_PG ? PG : RING8_PG) +
          (s->kw - 1) * s->dw / s->sw; /* the last group and the widest tap offset */
}

size_t cpu_stem_pad_slice(const stem_node *s) {
  return line_up((s->bf16 ? 2 : 4) * (size_t)(s->kh * s->ic * s->sw * s->wq));
}

int cpu_conv_stem_prepare(sp_op_prep *p) {
  if (!cpu_conv_use_stem || !applies(p)) return 1;
  stem_node *s = cpu_node_new(sizeof *s, &stem_vt);
  cpu_stem_geometry(s, p);
  s->infer = !p->run_backward;
  /* A frozen inference plan folds the batch norm after it (and the ReLU
   * after that), as conv.c does. */
  s->fold = s->infer && p->frozen && p->consumer[0].op == &sp_op_batchnorm && p->consumer[0].n_state >= 2 &&
            !p->consumer[0].out_plain;
  s->relu = s->fold && p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain;
  s->fused = s->infer && fuse_next(s, p);
  /* f32: alone where cpu_conv_stem_f32_infer says so (oneDNN's was faster
   * on 8 lanes); fused on 16 lanes likewise, on 8 lanes always. */
  if (s->infer && !s->bf16 && !cpu_conv_stem_f32_infer && !(s->fused && s->next.blocked8)) {
    cpu_node_free(&s->base);
    return 1;
  }
  dnnl_dims_t od = {s->n, s->oc, s->oh, s->ow};
  if (s->fused) od[1] = s->next.oc, od[2] = s->next.oh, od[3] = s->next.ow;
  /* 16 channels channels-last are the same bytes as one 16-channel block:
   * said so in f32, the next layer takes oneDNN's blocked kernels and its
   * output needs no reorder for the Winograd layer after it (vgg-face f32
   * batch 64: a 0.41 ms reorder a step gone; that layer 1.46-1.71 ms on
   * brgconv, 1.49-1.68 on the blocked kernel). */
  dnnl_format_tag_t tag = s->fused && !s->bf16 && s->next.oc == 16 ? dnnl_aBcd16b : dnnl_acdb;
  if (s->fused && s->next.blocked8) tag = dnnl_aBcd8b; /* below AVX-512: oneDNN's 8-channel blocks */
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, s->bf16 ? dnnl_bf16 : dnnl_f32, tag) != dnnl_success) {
    cpu_node_free(&s->base);
    return 1;
  }
  size_t fwd = 0, bwd = 0;
  const size_t es = s->bf16 ? 2 : 4, img = es * (size_t)(s->n * s->ic * s->hp * s->sw * s->wq);
  size_t kept = 0, *w_in = (s->kept = s->infer && p->frozen) ? &kept : &fwd;
  s->wt_off = cpu_take(w_in, sizeof(float) * (size_t)(s->k * s->oc));
  s->bias_off = cpu_take(w_in, sizeof(float) * (size_t)s->oc);
  if (s->fused) cpu_narrow_take(&s->next, w_in);
  if (s->fused && s->bf16) s->wpair_off = cpu_take(w_in, sizeof(uint32_t) * 8 * (size_t)((s->k + 1) / 2));
  if (s->kept) {
    char *mem = cpu_node_keep(&s->base, kept);
    s->wt = (float *)(mem + s->wt_off), s->bias = (float *)(mem + s->bias_off);
    if (s->fused) cpu_narrow_bind(&s->next, mem);
    if (s->fused && s->bf16) s->wpair = (uint32_t *)(mem + s->wpair_off);
  }
  if (s->infer) {
    s->pad_slice = cpu_stem_pad_slice(s);
    s->img_off = cpu_take(&fwd, (size_t)s->threads * s->pad_slice); /* rows per thread */
    s->stream = !s->fused && (int64_t)es * s->n * s->oh * s->ow * s->oc >= cpu_stream_threshold();
    if (s->fused) s->ring_off = cpu_take(&fwd, (size_t)s->threads * ring_slice(s));
  } else {
    s->acc_off = cpu_take(&bwd, sizeof(double) * (size_t)((s->k + 1) * s->oc * s->threads));
    p->saved_bytes = img;
    p->param_grad_overwrites = s->has_bias ? 3u : 1u;
  }
  p->absorb_consumer = s->fold + s->relu + (s->fused ? 1 + s->next.fold + s->next.relu : 0);
  return cpu_report_scratch(p, &s->base, fwd, bwd);
}

int cpu_conv_is_stem(const void *state) { return ((const cpu_node *)state)->vt == &stem_vt; }
#endif
