/* A bf16 inference plan's 3x3 convolution (pad 1, stride 1 or 2) from a
 * narrow channels-last input (8 channels) into channels-last output in
 * groups of 16 channels, as a loop of our own; a frozen plan folds the batch
 * norm after it and its ReLU in, as conv.c does. Where: vgg-face's second
 * layer (8 -> 16 channels, 112 -> 56, after the stem).
 *
 * Why: oneDNN 2.6 runs it on brgconv at a fifth to a tenth of the
 * `vdpbf16ps` peak. Batch 64, AMD Zen 5, 2 threads, in one process:
 * caches flushed before each call, oneDNN 1.82-1.90 ms, here 0.74-0.76 ms
 * (1.04-1.10 without the prefetches below); input warm, 0.92-1.11 against
 * 0.75-0.85. In the model (per-node profile, alternating runs) 1.46-1.62
 * -> 0.90-1.08 ms, and 2.0 ms for oneDNN on a slower hour.
 *
 * Not taken where it measured slower: from 16 channels (vgg-face's third
 * layer, 16 -> 32, stride 2: 0.84-0.87 ms against oneDNN's 0.63-0.68); in
 * f32 (the same loop with an FMA per input channel: 3.2 ms against
 * oneDNN's 2.9-3.6 in the model; batch 1 0.043-0.062 against 0.027-0.032);
 * under cpu_conv_narrow_min_positions output positions (vgg-face at batch
 * 1, 3136 positions: 0.017-0.018 ms against 0.013-0.016).
 *
 * How: per output row, the KS = 3 input rows it reads are copied into a
 * zero-padded buffer per thread (L1-resident: a 112-wide row of 8 bf16
 * channels is 1.8 KB). Per 16 output positions and 16 output channels, 16
 * accumulators (one per position, the channels across its lanes) take, for
 * every tap and input channel pair, the pair broadcast from the buffer
 * against that tap's 16-channel weight pairs: a vdpbf16ps each. A
 * position's accumulator is then its output, stored as it is (no
 * transpose). A last group of at most 8 positions runs 8 accumulators.
 *
 * The first version matched oneDNN only with the input warm: from memory
 * the broadcasts stalled on it. The input rows and the output row PF_ROWS
 * rows ahead are now prefetched (the output for writing).
 *
 * Values: the folded weights rounded to bf16 (as oneDNN's reorder rounds
 * them), the products summed in f32, the output rounded once. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Output positions (batch x rows x columns) from which the loop is taken. */
#define MIN_POSITIONS_DEFAULT 8192

int cpu_conv_use_narrow = 1;
int64_t cpu_conv_narrow_min_positions = MIN_POSITIONS_DEFAULT;
long cpu_narrow_calls;

enum {
  IC = 8, /* input channels: 4 pairs */
  MAX_OC = 64,
  PG = 16,     /* output positions per group: one accumulator each */
  OB = 16,     /* output channels per accumulator */
  PF_ROWS = 2, /* output rows ahead whose input and output lines are prefetched */
  KS = 3       /* the window */
};

typedef struct {
  cpu_node base;
  int64_t n, ic, ih, iw, oc, oh, ow, sw; /* sw: the stride (both ways) */
  int64_t row_len;                       /* positions of a padded input row */
  int has_bias, fold, relu, kept, threads;
  size_t wt_off, bias_off, rows_off;
  uint16_t *wt; /* bf16 pairs: [tap][ic / 2][oc][2] */
  float *bias;  /* the bias, or the folded batch norm's shift */
  char *rows;   /* per thread: KS padded input rows */
} narrow_node;

/* The weights as the loops read them, the batch norm folded in where it
 * is absorbed, rounded to bf16 as oneDNN's reorder rounds them. */
static void prepare_weights(narrow_node *s, const sp_op_args *a) {
  const float *w = a->param[0]->data, *b = s->has_bias ? a->param[1]->data : NULL;
  const int64_t ic = s->ic, oc = s->oc;
  for (int64_t o = 0; o < oc; o++) {
    float scale = 1.0f, shift = b ? b[o] : 0.0f;
    if (s->fold) cpu_bn_fold(a->consumer, o, shift, &scale, &shift);
    s->bias[o] = shift;
    for (int64_t t = 0; t < KS * KS; t++)
      for (int64_t i = 0; i < ic; i++) {
        const float v = w[(o * ic + i) * KS * KS + t] * scale;
        s->wt[((t * (ic / 2) + i / 2) * oc + o) * 2 + i % 2] = sp_bf16_round(v);
      }
  }
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* Output positions ox0 .. ox0 + np - 1 (np <= pg), channels ob .. ob + 15,
 * from the taps of the valid input rows. rows: KS padded rows of row_len
 * positions of IC channels; the stride and pg (16, or 8 for a short last
 * group) are constants where called. */
INLINE void group_bf16(const narrow_node *s, const char *rows, const int *valid, uint16_t *out, int64_t ox0, int64_t ob,
                       int64_t np, const int sw, const int pg) {
  const int64_t oc = s->oc, pairs = IC / 2;
  const uint32_t *wt = (const uint32_t *)s->wt;
  const size_t row_bytes = 2 * (size_t)(s->row_len * IC);
  __m512 acc[PG];
  const __m512 b = _mm512_loadu_ps(s->bias + ob);
  for (int q = 0; q < pg; q++) acc[q] = b;
  for (int r = 0; r < KS; r++) {
    if (!valid[r]) continue;
    for (int c = 0; c < KS; c++) {
      const uint32_t *x = (const uint32_t *)(rows + r * row_bytes) + (sw * ox0 + c) * pairs;
      for (int k = 0; k < pairs; k++) {
        const __m512bh wv = (__m512bh)_mm512_loadu_si512(wt + ((r * KS + c) * pairs + k) * oc + ob);
#pragma GCC unroll 16
        for (int q = 0; q < pg; q++)
          acc[q] = _mm512_dpbf16_ps(acc[q], (__m512bh)_mm512_set1_epi32((int)x[q * sw * pairs + k]), wv);
      }
    }
  }
  for (int64_t q = 0; q < np; q++) {
    const __m512 v = s->relu ? _mm512_max_ps(acc[q], _mm512_setzero_ps()) : acc[q];
    _mm256_storeu_si256((__m256i *)(out + (ox0 + q) * oc + ob), (__m256i)_mm512_cvtneps_pbh(v));
  }
}

INLINE void row_bf16(const narrow_node *s, const char *rows, const int *valid, uint16_t *out, const int sw) {
  for (int64_t ob = 0; ob < s->oc; ob += OB)
    for (int64_t ox0 = 0; ox0 < s->ow; ox0 += PG) {
      const int64_t np = s->ow - ox0 < PG ? s->ow - ox0 : PG;
      if (np > PG / 2)
        group_bf16(s, rows, valid, out, ox0, ob, np, sw, PG);
      else
        group_bf16(s, rows, valid, out, ox0, ob, np, sw, PG / 2);
    }
}

/* The lines of output row `row` + PF_ROWS and of the input rows it reads
 * that the rows before it did not. */
static void prefetch_ahead(const narrow_node *s, const char *x, char *y, int64_t row) {
  const int64_t next = row + PF_ROWS;
  if (next >= s->n * s->oh) return;
  const int64_t n = next / s->oh, oy = next % s->oh, es = 2, in_row = es * s->iw * s->ic;
  for (int64_t r = KS - s->sw; r < KS; r++) {
    const int64_t iy = oy * s->sw + r - 1;
    if (iy < 0 || iy >= s->ih) continue;
    const char *p = x + (n * s->ih + iy) * in_row;
    for (int64_t l = 0; l < in_row; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
  }
  const int64_t out_row = es * s->ow * s->oc;
  const char *o = y + next * out_row;
  for (int64_t l = 0; l < out_row; l += 64) _mm_prefetch(o + l, _MM_HINT_ET0);
}

/* One output row's specialisation: the stride. */
static void run_row(const narrow_node *s, const char *rows, const int *valid, char *out) {
  uint16_t *o = (uint16_t *)out;
  s->sw == 2 ? row_bf16(s, rows, valid, o, 2) : row_bf16(s, rows, valid, o, 1);
}
#endif

static void narrow_forward(cpu_node *nd, const sp_op_args *a) {
  narrow_node *s = (narrow_node *)nd;
  __atomic_add_fetch(&cpu_narrow_calls, 1, __ATOMIC_RELAXED);
  if (!s->kept || a->params_stale) prepare_weights(s, a);
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const char *x = a->in[0]->data;
  char *y = a->out->data;
  const int64_t es = 2, in_row = es * s->iw * s->ic, out_row = es * s->ow * s->oc;
  const size_t row_bytes = (size_t)(es * s->row_len * s->ic);
#pragma omp parallel num_threads(s->threads)
  {
    char *rows = s->rows + (size_t)omp_get_thread_num() * KS * row_bytes;
    memset(rows, 0, KS * row_bytes); /* the padding: position 0 and the tail past the row */
#pragma omp for schedule(static)
    for (int64_t row = 0; row < s->n * s->oh; row++) {
      const int64_t n = row / s->oh, oy = row % s->oh;
      prefetch_ahead(s, x, y, row);
      int valid[KS];
      for (int r = 0; r < KS; r++) {
        const int64_t iy = oy * s->sw + r - 1;
        valid[r] = iy >= 0 && iy < s->ih;
        if (valid[r]) memcpy(rows + r * row_bytes + es * s->ic, x + (n * s->ih + iy) * in_row, (size_t)in_row);
      }
      run_row(s, rows, valid, y + row * out_row);
    }
  }
#else
  (void)a;
#endif
}

static int narrow_bind(cpu_node *nd, const sp_op_args *a, char *fs, char *bs) {
  (void)bs;
  narrow_node *s = (narrow_node *)nd;
  s->rows = fs + s->rows_off;
  if (!s->kept) s->wt = (uint16_t *)(fs + s->wt_off), s->bias = (float *)(fs + s->bias_off);
  if (s->fold && (!a->consumer || a->consumer->n_state < 2))
    return sp_error_set("conv narrow: folded batch norm not wired");
  return 0;
}

static const cpu_vt narrow_vt = {narrow_forward, NULL, narrow_bind, NULL};

/* bf16 inference only, where the build has AVX512-BF16: a channels-last
 * bf16 input with 8 channels, 16 to 64 output channels in groups of
 * 16, a 3x3 window with pad 1 and stride 1 or 2, and at least
 * cpu_conv_narrow_min_positions output positions. */
static int applies(const sp_op_prep *p) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0], *out = &p->out_shape;
  const dnnl_memory_desc_t *md = p->in_layout[0];
  return cpu_conv_use_narrow && p->bf16 && !p->run_backward && !p->training && !p->out_plain && md && in->ndim == 4 &&
         md->data_type == dnnl_bf16 && cpu_md_lanes(md) == CPU_LANES_NHWC && at->groups == 1 && in->d[1] == IC &&
         w->d[0] % OB == 0 && w->d[0] <= MAX_OC && w->d[2] == KS && w->d[3] == KS && at->pad_h == 1 && at->pad_w == 1 &&
         at->stride_h == at->stride_w && (at->stride_h == 1 || at->stride_h == 2) && at->dil_h == 1 && at->dil_w == 1 &&
         out->d[0] * out->d[2] * out->d[3] >= cpu_conv_narrow_min_positions;
#else
  (void)p;
  return 0;
#endif
}

int cpu_conv_narrow_prepare(sp_op_prep *p) {
  if (!applies(p)) return 1;
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  narrow_node *s = cpu_node_new(sizeof *s, &narrow_vt);
  s->n = in->d[0], s->ic = in->d[1], s->ih = in->d[2], s->iw = in->d[3];
  s->oc = w->d[0], s->oh = p->out_shape.d[2], s->ow = p->out_shape.d[3], s->sw = at->stride_h;
  s->has_bias = p->n_param > 1;
  s->threads = omp_get_max_threads();
  s->fold =
      p->frozen && p->consumer[0].op == &sp_op_batchnorm && p->consumer[0].n_state >= 2 && !p->consumer[0].out_plain;
  s->relu = s->fold && p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain;
  dnnl_dims_t od = {s->n, s->oc, s->oh, s->ow};
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, dnnl_bf16, dnnl_acdb) != dnnl_success) {
    cpu_node_free(&s->base);
    return 1;
  }
  /* Position 0 is the left padding; the last group of PG positions reads
   * up to sw (groups PG - 1) + 2, zeros past the row. */
  const int64_t groups = (s->ow + PG - 1) / PG, reach = s->sw * (groups * PG - 1) + KS;
  s->row_len = reach > s->iw + 2 ? reach : s->iw + 2;
  const size_t es = 2;
  size_t fwd = 0, kept = 0, *w_in = (s->kept = p->frozen) ? &kept : &fwd;
  s->wt_off = cpu_take(w_in, es * (size_t)(KS * KS * s->ic * s->oc));
  s->bias_off = cpu_take(w_in, sizeof(float) * (size_t)s->oc);
  if (s->kept) {
    char *mem = cpu_node_keep(&s->base, kept);
    s->wt = (uint16_t *)(mem + s->wt_off), s->bias = (float *)(mem + s->bias_off);
  }
  s->rows_off = cpu_take(&fwd, (size_t)s->threads * KS * es * (size_t)(s->row_len * s->ic));
  p->absorb_consumer = s->fold + s->relu;
  return cpu_report_scratch(p, &s->base, fwd, 0);
}

int cpu_conv_is_narrow(const void *state) { return ((const cpu_node *)state)->vt == &narrow_vt; }
#endif
