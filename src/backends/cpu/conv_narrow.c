/* A bf16 inference plan's 3x3 convolution (pad 1, stride 1 or 2) from a
 * narrow channels-last input (8 channels) into channels-last output in
 * groups of 16 channels, as a loop of our own; a frozen plan folds the batch
 * norm after it and its ReLU in, as conv.c does. Where: vgg-face's second
 * layer (8 -> 16 channels, 112 -> 56, after the stem), which in a frozen
 * plan the stem now computes with these loops (conv_stem.c); this node
 * runs it where the stem does not (plans not frozen, under the minimum of
 * positions, the fusion switched off).
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
 * The same loops in f32 (an FMA per input channel, the channel broadcast)
 * serve the inference stem, which computes this layer from its own rows
 * while they are in cache (conv_stem.c); on their own they measured no
 * faster than oneDNN in f32 (below), nor on vgg-face's f32 stride-2 layers
 * of 16 and 32 input channels (2.39-2.44 and 2.05-2.10 ms against
 * oneDNN's 1.37-1.82 and 1.60-1.70, the input copied into padded rows).
 *
 * Where AMX is usable the bf16 rows run on the tiles instead
 * (conv_narrow_amx.c, cpu_narrow.amx): there a vdpbf16ps runs at half an
 * FMA's rate, and these loops at that peak (vgg-face bf16 batch 64 on a
 * Xeon with AMX, frozen stem with this layer, per-node profile, 3
 * alternating runs a side: 6.8-7.5 -> 5.2-5.5 ms).
 *
 * Values: the folded weights rounded to bf16 (as oneDNN's reorder rounds
 * them), the products summed in f32, the output rounded once. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/conv_narrow.h"
#include "backends/cpu/rows8.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Output positions (batch x rows x columns) from which the loop is taken. */
#define MIN_POSITIONS_DEFAULT 8192

int cpu_conv_use_narrow = 1;
int cpu_narrow_use_amx = 1;
int64_t cpu_conv_narrow_min_positions = MIN_POSITIONS_DEFAULT;
long cpu_narrow_calls;

enum {
  IC = CPU_NARROW_IC,
  KS = CPU_NARROW_KS,
  MAX_OC = 64,
  PG = 16,    /* output positions per group: one accumulator each */
  OB = 16,    /* output channels per accumulator */
  PF_ROWS = 2 /* output rows ahead whose input and output lines are prefetched */
};

/* The loops this build has: 16 lanes (bf16 and f32, channels-last), and
 * 8 lanes (f32 into 8-channel blocks, for oneDNN below AVX-512). */
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define NARROW_WIDE 1
#endif
#ifdef CPU_ROWS8
#define NARROW_EIGHT 1 /* rows8.h */
#endif

int cpu_narrow_init(cpu_narrow *g, const sp_conv2d_attr *at, const sp_shape *in, const sp_shape *w, const sp_shape *out,
                    int f32, int has_bias) {
  int wide = 0, eight = 0;
#ifdef NARROW_WIDE
  wide = !f32 || sp_backend_cpu_avx512();
#endif
#ifdef NARROW_EIGHT
  eight = !wide && f32 && !sp_backend_cpu_avx512();
#endif
  if ((!wide && !eight) || in->ndim != 4 || at->groups != 1 || in->d[1] != IC || w->d[0] % OB != 0 ||
      w->d[0] > MAX_OC || w->d[2] != KS || w->d[3] != KS || at->pad_h != 1 || at->pad_w != 1 ||
      at->stride_h != at->stride_w || (at->stride_h != 1 && at->stride_h != 2) || at->dil_h != 1 || at->dil_w != 1)
    return 1;
  memset(g, 0, sizeof *g);
  g->n = in->d[0], g->ic = in->d[1], g->ih = in->d[2], g->iw = in->d[3];
  g->oc = w->d[0], g->oh = out->d[2], g->ow = out->d[3], g->sw = at->stride_h;
  g->f32 = f32, g->has_bias = has_bias, g->blocked8 = eight;
  g->amx = !f32 && !eight && cpu_narrow_use_amx && cpu_amx_usable();
  /* Position 0 is the left padding; the last group of PG positions reads
   * up to sw (groups PG - 1) + 2, zeros past the row. */
  const int64_t groups = (g->ow + PG - 1) / PG, reach = g->sw * (groups * PG - 1) + KS;
  g->row_len = eight ? rows8_row_len(g->iw, g->ow, g->sw) : reach > g->iw + 2 ? reach : g->iw + 2;
  if (g->amx && g->row_len < reach + 1) g->row_len = reach + 1; /* the tiles read 4 positions a window row */
  return 0;
}

static size_t elem(const cpu_narrow *g) { return g->f32 ? 4 : 2; }

void cpu_narrow_take(cpu_narrow *g, size_t *bytes) {
  g->wt_off = cpu_take(bytes, elem(g) * (size_t)(KS * KS * g->ic * g->oc));
  g->bias_off = cpu_take(bytes, sizeof(float) * (size_t)g->oc);
  if (g->amx) g->wamx_off = cpu_take(bytes, sizeof(uint16_t) * (size_t)(CPU_NARROW_AMX_K * g->oc));
}

void cpu_narrow_bind(cpu_narrow *g, char *mem) {
  g->wt = mem + g->wt_off, g->bias = (float *)(mem + g->bias_off);
  if (g->amx) g->wamx = (uint16_t *)(mem + g->wamx_off);
}

size_t cpu_narrow_row_bytes(const cpu_narrow *g) { return elem(g) * (size_t)(g->row_len * g->ic); }

size_t cpu_narrow_out_offset(const cpu_narrow *g, int64_t row) {
  if (!g->blocked8) return elem(g) * (size_t)(row * g->ow * g->oc);
  const int64_t n = row / g->oh, oy = row % g->oh;
  return elem(g) * (size_t)(((n * (g->oc / 8)) * g->oh + oy) * g->ow * 8);
}

/* bf16: rounded as oneDNN's reorder rounds them. */
void cpu_narrow_weights(const cpu_narrow *g, const sp_op_args *conv, const sp_op_args *bn) {
  const float *w = conv->param[0]->data, *b = g->has_bias ? conv->param[1]->data : NULL;
  const int64_t ic = g->ic, oc = g->oc;
  for (int64_t o = 0; o < oc; o++) {
    float scale = 1.0f, shift = b ? b[o] : 0.0f;
    if (g->fold) cpu_bn_fold(bn, o, shift, &scale, &shift);
    g->bias[o] = shift;
    for (int64_t t = 0; t < KS * KS; t++)
      for (int64_t i = 0; i < ic; i++) {
        const float v = w[(o * ic + i) * KS * KS + t] * scale;
        if (g->f32)
          ((float *)g->wt)[(t * ic + i) * oc + o] = v;
        else
          ((uint16_t *)g->wt)[((t * (ic / 2) + i / 2) * oc + o) * 2 + i % 2] = sp_bf16_round(v);
      }
  }
  if (!g->amx) return;
  /* The bf16 pairs are already VNNI rows ([tap][ic / 2][oc][2]): per window
   * row its three taps' rows, then a fourth tap of zeros. */
  const size_t tap = sizeof(uint16_t) * (size_t)(ic * oc);
  for (int64_t r = 0; r < KS; r++) {
    char *to = (char *)g->wamx + (size_t)r * (KS + 1) * tap;
    memcpy(to, (const char *)g->wt + (size_t)r * KS * tap, KS * tap);
    memset(to + KS * tap, 0, tap);
  }
}

#ifdef NARROW_WIDE
/* Output positions ox0 .. ox0 + np - 1 (np <= pg), channels ob .. ob + 15,
 * from the taps of the valid input rows. rows: KS padded rows of row_len
 * positions of IC channels; f32, the stride and pg (16, or 8 for a short
 * last group) are constants where called. bf16: a vdpbf16ps per tap and
 * channel pair; f32: an FMA per tap and channel. */
INLINE void group(const cpu_narrow *g, const char *const *rows, const int *valid, char *out, int64_t ox0, int64_t ob,
                  int64_t np, const int f32, const int planar, const int sw, const int pg) {
  const int64_t oc = g->oc;
  /* Where position q's channel (pair) k lies from a tap's first: channels-
   * last, or planar (cpu_narrow.planar). */
  const int64_t at_q = planar ? sw : sw * (f32 ? IC : IC / 2), at_k = planar ? g->row_len : 1;
  const int64_t first = planar ? sw * ox0 : sw * ox0 * (f32 ? IC : IC / 2);
  __m512 acc[PG];
  const __m512 b = _mm512_loadu_ps(g->bias + ob);
  for (int q = 0; q < pg; q++) acc[q] = b;
  for (int r = 0; r < KS; r++) {
    if (!valid[r]) continue;
    for (int c = 0; c < KS; c++) {
      if (f32) {
        const float *x = (const float *)rows[r] + first + c * (at_q / sw), *wt = g->wt;
        for (int k = 0; k < IC; k++) {
          const __m512 wv = _mm512_loadu_ps(wt + ((r * KS + c) * IC + k) * oc + ob);
#pragma GCC unroll 16
          for (int q = 0; q < pg; q++) acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(x[q * at_q + k * at_k]), wv, acc[q]);
        }
      } else {
        const int pairs = IC / 2;
        const uint32_t *x = (const uint32_t *)rows[r] + first + c * (at_q / sw), *wt = g->wt;
        for (int k = 0; k < pairs; k++) {
          const __m512bh wv = (__m512bh)_mm512_loadu_si512(wt + ((r * KS + c) * pairs + k) * oc + ob);
#pragma GCC unroll 16
          for (int q = 0; q < pg; q++)
            acc[q] = _mm512_dpbf16_ps(acc[q], (__m512bh)_mm512_set1_epi32((int)x[q * at_q + k * at_k]), wv);
        }
      }
    }
  }
  for (int64_t q = 0; q < np; q++) {
    const __m512 v = g->relu ? _mm512_max_ps(acc[q], _mm512_setzero_ps()) : acc[q];
    if (f32)
      _mm512_storeu_ps((float *)out + (ox0 + q) * oc + ob, v);
    else
      _mm256_storeu_si256((__m256i *)((uint16_t *)out + (ox0 + q) * oc + ob), (__m256i)_mm512_cvtneps_pbh(v));
  }
}

INLINE void row_of(const cpu_narrow *g, const char *const *rows, const int *valid, char *out, const int f32,
                   const int planar, const int sw) {
  for (int64_t ob = 0; ob < g->oc; ob += OB)
    for (int64_t ox0 = 0; ox0 < g->ow; ox0 += PG) {
      const int64_t np = g->ow - ox0 < PG ? g->ow - ox0 : PG;
      if (np > PG / 2)
        group(g, rows, valid, out, ox0, ob, np, f32, planar, sw, PG);
      else
        group(g, rows, valid, out, ox0, ob, np, f32, planar, sw, PG / 2);
    }
}
#endif

#define ROW_OF(f32, planar) \
  (g->sw == 2 ? row_of(g, rows, valid, out, f32, planar, 2) : row_of(g, rows, valid, out, f32, planar, 1))

/* The specialisations: dtype, layout and stride. */
void cpu_narrow_row(const cpu_narrow *g, const char *const *rows, const int *valid, char *out) {
  if (g->amx) {
    cpu_narrow_row_amx(g, rows, valid, out);
    return;
  }
#ifdef NARROW_EIGHT
  if (g->blocked8) { /* channels-last f32 rows: one block of 8 */
    const rows8_args r8 = {g->wt, g->bias, 1, g->row_len * 8, g->oc, g->ow, g->oh * g->ow * 8, g->relu};
    rows8_row(&r8, (const float *const *)rows, valid, (float *)out, (int)g->sw);
    return;
  }
#endif
#ifdef NARROW_WIDE
  if (g->f32)
    ROW_OF(1, 1); /* f32 rows are planar (conv_narrow.h) */
  else
    g->planar ? ROW_OF(0, 1) : ROW_OF(0, 0);
#else
  (void)g, (void)rows, (void)valid, (void)out;
#endif
}

/* The node of its own: a bf16 plan's layer after oneDNN's or the stem's. */
typedef struct {
  cpu_node base;
  cpu_narrow g;
  int kept, threads;
  size_t rows_off;
  char *rows; /* per thread: KS padded input rows */
} narrow_node;

#if defined(__AVX512F__)
/* The lines of output row `row` + PF_ROWS and of the input rows it reads
 * that the rows before it did not. */
static void prefetch_ahead(const cpu_narrow *g, const char *x, char *y, int64_t row) {
  const int64_t next = row + PF_ROWS;
  if (next >= g->n * g->oh) return;
  const int64_t n = next / g->oh, oy = next % g->oh, es = 2, in_row = es * g->iw * g->ic;
  for (int64_t r = KS - g->sw; r < KS; r++) {
    const int64_t iy = oy * g->sw + r - 1;
    if (iy < 0 || iy >= g->ih) continue;
    const char *p = x + (n * g->ih + iy) * in_row;
    for (int64_t l = 0; l < in_row; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
  }
  const int64_t out_row = es * g->ow * g->oc;
  const char *o = y + next * out_row;
  for (int64_t l = 0; l < out_row; l += 64) _mm_prefetch(o + l, _MM_HINT_ET0);
}
#endif

static void narrow_forward(cpu_node *nd, const sp_op_args *a) {
  narrow_node *s = (narrow_node *)nd;
  const cpu_narrow *g = &s->g;
  __atomic_add_fetch(&cpu_narrow_calls, 1, __ATOMIC_RELAXED);
  if (!s->kept || a->params_stale) cpu_narrow_weights(g, a, a->consumer);
#if defined(__AVX512F__)
  const char *x = a->in[0]->data;
  char *y = a->out->data;
  const int64_t es = 2, in_row = es * g->iw * g->ic, out_row = es * g->ow * g->oc;
  const size_t row_bytes = cpu_narrow_row_bytes(g);
#pragma omp parallel num_threads(s->threads)
  {
    char *buf = s->rows + (size_t)omp_get_thread_num() * KS * row_bytes;
    const char *rows[KS] = {buf, buf + row_bytes, buf + 2 * row_bytes};
    memset(buf, 0, KS * row_bytes); /* the padding: position 0 and the tail past the row */
    cpu_narrow_tiles(g, 1);
#pragma omp for schedule(static)
    for (int64_t row = 0; row < g->n * g->oh; row++) {
      const int64_t n = row / g->oh, oy = row % g->oh;
      prefetch_ahead(g, x, y, row);
      int valid[KS];
      for (int r = 0; r < KS; r++) {
        const int64_t iy = oy * g->sw + r - 1;
        valid[r] = iy >= 0 && iy < g->ih;
        if (valid[r]) memcpy(buf + r * row_bytes + es * g->ic, x + (n * g->ih + iy) * in_row, (size_t)in_row);
      }
      cpu_narrow_row(g, rows, valid, y + row * out_row);
    }
    cpu_narrow_tiles(g, 0);
  }
#else
  (void)a, (void)g;
#endif
}

static int narrow_bind(cpu_node *nd, const sp_op_args *a, char *fs, char *bs) {
  (void)bs;
  narrow_node *s = (narrow_node *)nd;
  s->rows = fs + s->rows_off;
  if (!s->kept) cpu_narrow_bind(&s->g, fs);
  if (s->g.fold && (!a->consumer || a->consumer->n_state < 2))
    return sp_error_set("conv narrow: folded batch norm not wired");
  return 0;
}

static const cpu_vt narrow_vt = {narrow_forward, NULL, narrow_bind, NULL};

/* bf16 inference only: a channels-last bf16 input and at least
 * cpu_conv_narrow_min_positions output positions. */
static int applies(const sp_op_prep *p) {
  const dnnl_memory_desc_t *md = p->in_layout[0];
  const sp_shape *out = &p->out_shape;
  return cpu_conv_use_narrow && p->bf16 && !p->run_backward && !p->training && !p->out_plain && md &&
         md->data_type == dnnl_bf16 && cpu_md_lanes(md) == CPU_LANES_NHWC &&
         out->d[0] * out->d[2] * out->d[3] >= cpu_conv_narrow_min_positions;
}

int cpu_conv_narrow_prepare(sp_op_prep *p) {
  cpu_narrow g;
  if (!applies(p) ||
      cpu_narrow_init(&g, p->attr, &p->in_shape[0], &p->param_shape[0], &p->out_shape, 0, p->n_param > 1))
    return 1;
  narrow_node *s = cpu_node_new(sizeof *s, &narrow_vt);
  s->g = g;
  s->threads = omp_get_max_threads();
  s->g.fold =
      p->frozen && p->consumer[0].op == &sp_op_batchnorm && p->consumer[0].n_state >= 2 && !p->consumer[0].out_plain;
  s->g.relu = s->g.fold && p->consumer[1].op == &sp_op_relu && !p->consumer[1].out_plain;
  dnnl_dims_t od = {g.n, g.oc, g.oh, g.ow};
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, dnnl_bf16, dnnl_acdb) != dnnl_success) {
    cpu_node_free(&s->base);
    return 1;
  }
  size_t fwd = 0, kept = 0;
  cpu_narrow_take(&s->g, (s->kept = p->frozen) ? &kept : &fwd);
  if (s->kept) cpu_narrow_bind(&s->g, cpu_node_keep(&s->base, kept));
  s->rows_off = cpu_take(&fwd, (size_t)s->threads * KS * cpu_narrow_row_bytes(&s->g));
  p->absorb_consumer = s->g.fold + s->g.relu;
  return cpu_report_scratch(p, &s->base, fwd, 0);
}

int cpu_conv_is_narrow(const void *state) { return ((const cpu_node *)state)->vt == &narrow_vt; }
#endif
