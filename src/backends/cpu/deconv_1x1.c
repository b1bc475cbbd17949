/* The forward pass of an f32 transposed convolution with kernel = stride =
 * 2 and no padding (U-Net's up-layers) as a 1x1 convolution into 4 OC
 * channels, then a shuffle:
 *
 *   Y'[n, t OC + oc, h, w]          = sum over ic of X[n, ic, h, w] W[ic, oc, ky, kx]   (t = 2 ky + kx)
 *   Y[n, oc, 2 h + ky, 2 w + kx]    = Y'[n, t OC + oc, h, w]
 *
 * In channel blocks (what f32 plans use: 16 channels with AVX-512, 8 with
 * AVX2) a block of Y' at (h, w) is the block of Y at one of its four
 * positions: the shuffle moves a block (64 or 32 bytes) at a time.
 *
 * Why: oneDNN 2.6's f32 deconvolution kernel runs these layers at 170-240
 * GFLOP/s, its 1x1 kernel the same products at 300-390. Per call (Xeon with
 * AMX, 2 threads, caches flushed, ms; deconvolution -> 1x1 + shuffle):
 *
 *   batch 16, 2048 -> 512 at 7x7      28.9 -> 20.8 + 0.7
 *   batch 16, 512 -> 256 at 14x14     13.7 -> 10.1 + 1.2
 *   batch 16, 256 -> 128 at 28x28     13.7 -> 10.1 + 2.4
 *   batch 16, 128 -> 64 at 56x56      15.7 -> 10.6 + 4.9   (not taken)
 *   batch 1, 2048 -> 512 at 7x7       2.80 -> 1.83 + 0.10
 *
 * From 256 input channels (cpu_deconv_1x1_min_channels): below that the
 * shuffle of the larger output costs what the product saves. W' ([4 OC, IC],
 * then the primitive's blocks) is rebuilt each training step and kept by
 * frozen plans; backward keeps oneDNN's deconvolution kernels.
 *
 * Frozen plans fold the batch norm after it (and the ReLU after that) into
 * the 1x1 convolution: W' scaled per output channel, a bias, ReLU as a
 * post-op, so the batch norm's pass over Y disappears (oneDNN's
 * deconvolution runs bias and post-ops as a generic pass: conv.c). There it
 * is taken at every width, since the shuffle costs what that pass did.
 * Frozen ResUNet-50 f32, batch 64, ms (deconvolution + batch norm -> 1x1 +
 * shuffle, one run each): 2048 -> 512 at 7x7 138.6 -> 107.9, 64 -> 32 at
 * 112x112 128.3 -> 93.6; the five up-layers 494 -> 373 of a 2986 ms step.
 *
 * The direct form (frozen plans that fold the batch norm after it, and
 * plans that fold nothing, training's forward among them; 16-channel
 * blocks, AVX-512 builds, up to cpu_deconv_direct_max_ic input channels):
 * no Y', no shuffle. Each output
 * row 2 h + ky of a block comes straight from input row h: 8 positions x 2
 * taps (kx) x 16 output channels in registers, per input channel 8
 * broadcasts and 2 weight loads for 16 FMAs, the bias as the start and ReLU
 * before the store, streamed past the caches when the output is large.
 * Y' was written, read and written again by the shuffle; this writes Y
 * once. Frozen ResUNet-50 f32, batch 64 (Xeon with AMX, 2 threads,
 * per-node profile, ms, 1x1 form -> direct): 64 -> 32 at 112x112 77.8 ->
 * 40.9, 128 -> 64 at 56x56 56.5 -> 42.2; at 256 channels 45.4 -> 41.6 (in
 * the noise), at 512 and 2048 the direct form lost (40 -> 53, 81 -> 133:
 * its weights no longer stay in L1), hence 128.
 *
 * Frozen plans in either form also write into the U-Net concat after the
 * ReLU (its first channels) and copy the skip in after them, streamed when
 * the concat is larger than half the last-level cache: the concat's own pass
 * read and wrote both again. Frozen ResUNet-50 f32, batch 64 (Xeon without
 * AMX, 2 threads, profile, the same binary with the 1x1 form's concat on and
 * off, 3 alternating pairs): up-layers + concat 351-383 -> 318-362 ms. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <stdint.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include "backends/cpu/cpu.h"
#include "ops/ops.h"

int64_t cpu_deconv_1x1_min_channels = 256;
long cpu_dc1_calls;
int64_t cpu_deconv_direct_max_ic = 128;
/* The direct form where nothing folds too (training plans' forward, frozen
 * plans without a batch norm after the layer): no bias, W'' built every
 * call (kept by frozen plans). ResUNet-50 f32 training, batch 16 (Xeon
 * without AMX, 2 threads, per-node profile), oneDNN's deconvolution ->
 * direct: 64 -> 32 at 112x112 20.8 -> 14.6 ms, 128 -> 64 at 56x56 13.8 ->
 * 12.1. */
int cpu_deconv_direct_unfolded = 1;
long cpu_dc1_direct_calls, cpu_dc1_cat_calls;
int cpu_dc1_use_concat = 1;

/* The shapes the direct form takes: 16-channel blocks (AVX-512 builds), up
 * to cpu_deconv_direct_max_ic input channels in whole blocks. */
static int direct_shape(const cpu_conv_shape *c, int64_t lanes) {
#ifdef __AVX512F__
  return lanes == 16 && c->ic <= cpu_deconv_direct_max_ic && c->ic % 16 == 0;
#else
  (void)c, (void)lanes;
  return 0;
#endif
}

/* Where it is taken: frozen plans that fold the batch norm after it, and
 * (the switch on) plans that fold nothing. */
static int direct_wanted(const cpu_conv_shape *c, int64_t lanes, int keep, int fold) {
  return direct_shape(c, lanes) && ((keep && fold) || (!fold && cpu_deconv_direct_unfolded));
}

/* The direct form: frozen plans keep W'' and its bias (the folded batch
 * norm's shift, or zero where nothing folds), nothing in scratch; other
 * plans (training: nothing folded, a zero bias) build W'' in forward
 * scratch every call, as the 1x1 form builds W'. */
static int direct_prepare(cpu_dc1 *m, const cpu_conv_shape *c, int keep, size_t *fwd_scratch, size_t *kept_bytes) {
#ifdef __AVX512F__
  if (!direct_wanted(c, m->lanes, keep, m->fold)) return 1;
  m->direct = 1;
  size_t kept = 0;
  m->w2_off = cpu_take(&kept, sizeof(float) * (size_t)(4 * c->ic * c->oc));
  m->b2_off = cpu_take(&kept, sizeof(float) * (size_t)c->oc);
  *kept_bytes = keep ? kept : 0;
  *fwd_scratch = keep ? 0 : kept;
  /* Outputs past the caches where larger than half the last level. */
  m->stream = (int64_t)sizeof(float) * c->n * c->oc * c->oh * c->ow >= cpu_stream_threshold();
  return 0;
#else
  (void)m, (void)c, (void)keep, (void)fwd_scratch, (void)kept_bytes;
  return 1;
#endif
}

static int fits(const cpu_conv_shape *c, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int fold) {
  const int lanes = cpu_md_lanes(src);
  return cpu_deconv_1x1_min_channels > 0 &&
         (fold || c->ic >= cpu_deconv_1x1_min_channels || direct_wanted(c, lanes, 0, fold)) &&
         (lanes == 16 || lanes == 8) && c->oc % lanes == 0 && src->data_type == dnnl_f32 &&
         dst->data_type == dnnl_f32 && cpu_md_lanes(dst) == lanes && c->kh == 2 && c->kw == 2 && c->sh == 2 &&
         c->sw == 2 && c->pt == 0 && c->pl == 0 && c->oh == 2 * c->ih && c->ow == 2 * c->iw;
}

int cpu_dc1_concat_prepare(cpu_dc1 *m, const sp_op_prep *p, dnnl_memory_desc_t *out_md) {
  const sp_op_consumer *cat = &p->consumer[2];
  if (!cpu_dc1_use_concat || m->fold != 2 || cat->op != &sp_op_concat || cat->n_in != 2 || cat->other != 1 ||
      cat->out_plain || cat->other_dtype != SP_F32 || !cat->other_layout || cat->other_shape.ndim != 4 ||
      cat->other_shape.d[1] % m->lanes)
    return 1;
  const sp_shape *o = &cat->other_shape;
  const int64_t oh = 2 * m->h, ow = 2 * m->w;
  const dnnl_format_tag_t tag = cpu_lanes_tag((int)m->lanes);
  dnnl_memory_desc_t skip_md;
  const dnnl_dims_t sd = {o->d[0], o->d[1], o->d[2], o->d[3]}, cd = {m->n, m->oc + o->d[1], oh, ow};
  if (o->d[0] != m->n || o->d[2] != oh || o->d[3] != ow ||
      dnnl_memory_desc_init_by_tag(&skip_md, 4, sd, dnnl_f32, tag) != dnnl_success ||
      !cpu_md_equal(&skip_md, cat->other_layout) ||
      dnnl_memory_desc_init_by_tag(out_md, 4, cd, dnnl_f32, tag) != dnnl_success)
    return 1;
  m->skip_c = o->d[1], m->out_c = m->oc + o->d[1];
  /* The concat's output past the caches where larger than half the last
   * level (the 1x1 form's shuffle and the skip's copy stream it too). */
  m->stream = (int64_t)sizeof(float) * m->n * m->out_c * oh * ow >= cpu_stream_threshold();
  return 0;
}

void cpu_dc1_bind_skip(cpu_dc1 *m, const void *skip) { m->skip = skip; }

int cpu_dc1_prepare(cpu_dc1 *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *src,
                    const dnnl_memory_desc_t *dst, int keep, int fold, size_t *fwd_scratch, size_t *kept_bytes) {
  memset(m, 0, sizeof *m);
  if (!fits(c, src, dst, fold)) return 1;
  m->n = c->n, m->ic = c->ic, m->oc = c->oc, m->h = c->ih, m->w = c->iw, m->fold = fold, m->lanes = cpu_md_lanes(src);
  if (direct_prepare(m, c, keep, fwd_scratch, kept_bytes) == 0) return 0;
  const dnnl_dims_t y2 = {c->n, 4 * c->oc, c->ih, c->iw}, w2 = {4 * c->oc, c->ic, 1, 1}, one = {1, 1}, zero = {0, 0};
  const dnnl_dims_t b2 = {4 * c->oc};
  dnnl_memory_desc_t w_any;
  m->x_md = *src;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->b2_md, 1, b2, dnnl_f32, dnnl_a));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->y2_md, 4, y2, dnnl_f32, cpu_lanes_tag((int)m->lanes)));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->w2_plain_md, 4, w2, dnnl_f32, dnnl_oihw));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, 4, w2, dnnl_f32, dnnl_format_tag_any));
  dnnl_convolution_desc_t d;
  DNNL_TRY(dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct, &m->x_md, &w_any,
                                              fold ? &m->b2_md : NULL, &m->y2_md, one, zero, zero));
  dnnl_post_ops_t po = NULL;
  if (fold == 2) {
    DNNL_TRY(dnnl_post_ops_create(&po));
    if (dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success) {
      dnnl_post_ops_destroy(po);
      return sp_error_set("deconv as 1x1: no ReLU post-op"), -1;
    }
  }
  const int made = cpu_pd(&d, NULL, po, &m->pd) == 0;
  if (po) dnnl_post_ops_destroy(po);
  if (!made) return sp_error_clear(), 1;
  if (cpu_pd_is_ref(m->pd) || !cpu_md_equal(cpu_pd_md(m->pd, dnnl_query_src_md, 0), src) ||
      !cpu_md_equal(cpu_pd_md(m->pd, dnnl_query_dst_md, 0), &m->y2_md))
    return cpu_pd_decline(&m->pd);
  size_t used;
  if (cpu_adopt_with_weights(n, m->pd, &m->prim, &m->w2_plain_md, &m->w2_md, &m->re_pd, &m->re, &used)) return -1;
  /* Frozen plans keep W' with the node (cpu_dc1_keep) and rebuild it only
   * when the weights change; training builds it in scratch every step. */
  size_t kept = 0;
  m->w2_plain_off = cpu_take(keep ? &kept : &used, cpu_md_bytes(&m->w2_plain_md));
  m->w2_off = cpu_take(keep ? &kept : &used, cpu_md_bytes(&m->w2_md));
  m->b2_off = cpu_take(keep ? &kept : &used, fold ? sizeof(float) * 4 * (size_t)c->oc : 0);
  m->y2_off = cpu_take(&used, cpu_md_bytes(&m->y2_md));
  *fwd_scratch = used;
  *kept_bytes = kept;
  return 0;
}

void cpu_dc1_keep(cpu_dc1 *m, char *kept) { m->kept = kept; }

int cpu_dc1_bind(cpu_dc1 *m, cpu_node *n, const void *x, void *y, char *fs) {
  if (m->direct) {
    char *w2 = m->kept ? m->kept : fs;
    m->w2 = w2 + m->w2_off, m->b2 = (float *)(w2 + m->b2_off);
    m->x = x, m->y = y;
    if ((uintptr_t)y & 63) m->stream = 0; /* streaming stores want whole aligned vectors */
    return 0;
  }
  char *w2 = m->kept ? m->kept : fs;
  m->w2_plain = (float *)(w2 + m->w2_plain_off), m->w2 = w2 + m->w2_off, m->b2 = (float *)(w2 + m->b2_off);
  m->y2 = (float *)(fs + m->y2_off);
  m->y = (float *)y;
  if ((uintptr_t)y & 63) m->stream = 0;
  if (cpu_bind_reorder(&m->w_re, n, m->re_pd, m->re, m->w2_plain, m->w2, fs)) return -1;
  cpu_exec_init(&m->conv, m->prim);
  return cpu_exec_arg(&m->conv, n, DNNL_ARG_SRC, &m->x_md, (void *)x) ||
         cpu_exec_arg(&m->conv, n, DNNL_ARG_WEIGHTS, &m->w2_md, m->w2) ||
         cpu_exec_arg(&m->conv, n, DNNL_ARG_DST, &m->y2_md, m->y2) ||
         (m->fold && cpu_exec_arg(&m->conv, n, DNNL_ARG_BIAS, &m->b2_md, m->b2)) ||
         cpu_exec_scratchpad(&m->conv, n, m->pd, fs);
}

/* W'[t OC + oc][ic] = W[ic][oc][t] scale[oc]: per output channel, its four
 * taps of every input channel (16 bytes each) into four rows of W'. With a
 * batch norm folded (bn: its args), scale = gamma / sqrt(var + eps) and the
 * bias b'[t OC + oc] = beta - mean scale; else scale = 1. */
static void build_w2(const cpu_dc1 *m, const float *w, const sp_op_args *bn) {
  const int64_t ic_n = m->ic, oc_n = m->oc;
#pragma omp parallel for schedule(static)
  for (int64_t oc = 0; oc < oc_n; oc++) {
    float scale = 1.0f, shift;
    if (bn) {
      cpu_bn_fold(bn, oc, 0.0f, &scale, &shift);
      for (int t = 0; t < 4; t++) m->b2[t * oc_n + oc] = shift;
    }
    float *r0 = m->w2_plain + oc * ic_n, *r1 = r0 + oc_n * ic_n, *r2 = r1 + oc_n * ic_n, *r3 = r2 + oc_n * ic_n;
    for (int64_t ic = 0; ic < ic_n; ic++) {
      const float *k = w + (ic * oc_n + oc) * 4;
      r0[ic] = k[0] * scale, r1[ic] = k[1] * scale, r2[ic] = k[2] * scale, r3[ic] = k[3] * scale;
    }
  }
}

/* n floats (a multiple of L) from src to dst, streamed past the caches
 * (dst aligned to 64 bytes: cpu_dc1_bind) or copied. */
static inline __attribute__((always_inline)) void put_floats(float *dst, const float *src, int64_t n, int stream,
                                                             const int64_t L) {
#if defined(__AVX512F__)
  if (stream && L == 16) {
    for (int64_t i = 0; i < n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
    return;
  }
#endif
#if defined(__AVX__)
  if (stream) {
    for (int64_t i = 0; i < n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    return;
  }
#endif
  (void)stream, (void)L;
  memcpy(dst, src, sizeof(float) * (size_t)n);
}

/* Y's row 2h + ky, block b: position 2w + kx is Y' block t OC / L + b at (h,
 * w). Y's images are YB blocks apart: its own, then an absorbed concat's
 * skip. */
static inline __attribute__((always_inline)) void shuffle_lanes(const cpu_dc1 *m, const int64_t L) {
  const int64_t blocks = m->oc / L, h_n = m->h, w_n = m->w, plane = h_n * w_n * L, ow = 2 * w_n;
  const int64_t YB = (m->out_c ? m->out_c : m->oc) / L;
#pragma omp parallel for schedule(guided)
  for (int64_t r = 0; r < m->n * blocks * 2 * h_n; r++) {
    const int64_t img = r / (blocks * 2 * h_n), b = r / (2 * h_n) % blocks, oy = r % (2 * h_n), h = oy / 2, ky = oy % 2;
    float *dst = m->y + ((img * YB + b) * 2 * h_n + oy) * ow * L;
    const float *src0 = m->y2 + (img * 4 * blocks + 2 * ky * blocks + b) * plane + h * w_n * L;
    const float *src1 = src0 + blocks * plane;
    for (int64_t x = 0; x < w_n; x++) {
      put_floats(dst + 2 * x * L, src0 + x * L, L, m->stream, L);
      put_floats(dst + (2 * x + 1) * L, src1 + x * L, L, m->stream, L);
    }
  }
}

/* The block width a constant in each copy: one vector move each, no call. */
static void shuffle(const cpu_dc1 *m) {
  if (m->lanes == 16)
    shuffle_lanes(m, 16);
  else
    shuffle_lanes(m, 8);
}

/* An absorbed concat's skip into each image of Y after Y's own blocks: one
 * run an image, in pieces for the threads. */
static void copy_skip(const cpu_dc1 *m) {
  const int64_t OH = 2 * m->h, OW = 2 * m->w, L = m->lanes, YB = m->out_c / L, OB = m->oc / L;
  const int64_t run = m->skip_c * OH * OW, piece = 1 << 16, pieces = (run + piece - 1) / piece;
#pragma omp parallel for schedule(guided)
  for (int64_t t = 0; t < m->n * pieces; t++) {
    const int64_t img = t / pieces, at = t % pieces * piece, len = run - at < piece ? run - at : piece;
    put_floats(m->y + (img * YB + OB) * OH * OW * L + at, m->skip + img * run + at, len, m->stream, L);
  }
}

#ifdef __AVX512F__
/* W''[ob][ky][ic][kx][16 oc] = W[ic][oc][ky][kx] scale[oc] and the bias:
 * what one output row's products read in order. */
static void build_direct(const cpu_dc1 *m, const float *w, const sp_op_args *bn) {
  float *wd = m->w2;
#pragma omp parallel for schedule(static)
  for (int64_t oc = 0; oc < m->oc; oc++) {
    float scale = 1.0f, shift = 0.0f; /* training: nothing folded */
    if (bn) cpu_bn_fold(bn, oc, 0.0f, &scale, &shift);
    m->b2[oc] = shift;
    const int64_t ob = oc / 16, l = oc % 16;
    for (int64_t ic = 0; ic < m->ic; ic++)
      for (int t = 0; t < 4; t++) /* t = 2 ky + kx */
        wd[(((ob * 2 + t / 2) * m->ic + ic) * 2 + t % 2) * 16 + l] = w[(ic * m->oc + oc) * 4 + t] * scale;
  }
}

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* NX input positions from x0 of one input row into the 2 NX output
 * positions from 2 x0 of output row 2 y + ky, one 16-channel block: NX x 2
 * (kx) accumulators, per input channel NX broadcasts and the two taps'
 * weights. */
static inline __attribute__((always_inline)) void direct_run(const cpu_dc1 *m, const float *xr, const float *wk,
                                                             const v16 b, float *yr, int64_t x0, const int nx) {
  const int64_t plane = m->h * m->w * 16;
  v16 acc[8][2];
#pragma GCC unroll 8
  for (int i = 0; i < nx; i++) acc[i][0] = acc[i][1] = b;
  for (int64_t ib = 0; ib < m->ic / 16; ib++) {
    const float *xb = xr + ib * plane + x0 * 16, *wb = wk + ib * 16 * 32;
    for (int l = 0; l < 16; l++) {
      const v16 w0 = *(const v16 *)(wb + l * 32), w1 = *(const v16 *)(wb + l * 32 + 16);
#pragma GCC unroll 8
      for (int i = 0; i < nx; i++) {
        const float v = xb[i * 16 + l];
        const v16 xv = {v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v};
        acc[i][0] += xv * w0, acc[i][1] += xv * w1;
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < nx; i++)
    for (int kx = 0; kx < 2; kx++) {
      __m512 v = (__m512)acc[i][kx];
      if (m->fold == 2) v = _mm512_max_ps(v, zero);
      float *at = yr + (2 * (x0 + i) + kx) * 16;
      if (m->stream)
        _mm512_stream_ps(at, v);
      else
        _mm512_storeu_ps(at, v);
    }
}

static void direct(const cpu_dc1 *m) {
  const int64_t W = m->w, OW = 2 * W, OH = 2 * m->h, IB = m->ic / 16, OB = m->oc / 16, full = W / 8 * 8;
  const int64_t YB = (m->out_c ? m->out_c : m->oc) / 16; /* Y's image: its blocks, then a concat's skip */
#pragma omp parallel for schedule(guided)
  for (int64_t r = 0; r < m->n * m->h; r++) {
    const int64_t img = r / m->h, y = r % m->h;
    const float *xr = m->x + (img * IB * m->h + y) * W * 16;
    for (int64_t ob = 0; ob < OB; ob++)
      for (int ky = 0; ky < 2; ky++) {
        const float *wk = (const float *)m->w2 + (ob * 2 + ky) * m->ic * 32;
        float *yr = m->y + ((img * YB + ob) * OH + 2 * y + ky) * OW * 16;
        const v16 b = *(const v16u *)(m->b2 + ob * 16);
        for (int64_t x0 = 0; x0 < full; x0 += 8) direct_run(m, xr, wk, b, yr, x0, 8);
        switch (W - full) { /* the row's last positions: the count a constant in each */
          case 7: direct_run(m, xr, wk, b, yr, full, 7); break;
          case 6: direct_run(m, xr, wk, b, yr, full, 6); break;
          case 5: direct_run(m, xr, wk, b, yr, full, 5); break;
          case 4: direct_run(m, xr, wk, b, yr, full, 4); break;
          case 3: direct_run(m, xr, wk, b, yr, full, 3); break;
          case 2: direct_run(m, xr, wk, b, yr, full, 2); break;
          case 1: direct_run(m, xr, wk, b, yr, full, 1); break;
          default: break;
        }
      }
  }
  if (m->skip) copy_skip(m);
  if (m->stream) _mm_sfence();
}
#endif

void cpu_dc1_run(const cpu_dc1 *m, const float *w, const sp_op_args *bn, int weights_changed) {
#ifdef __AVX512F__
  if (m->direct) {
    if (!m->kept || weights_changed) build_direct(m, w, m->fold ? bn : NULL); /* a frozen plan's first forward too */
    direct(m);
    cpu_dc1_calls++, cpu_dc1_direct_calls++, cpu_dc1_cat_calls += m->skip != NULL;
    return;
  }
#endif
  if (!m->kept || weights_changed) {
    build_w2(m, w, m->fold ? bn : NULL);
    cpu_exec_run(&m->w_re);
  }
  cpu_exec_run(&m->conv);
  shuffle(m);
  if (m->skip) copy_skip(m);
#if defined(__AVX__)
  if (m->stream) _mm_sfence();
#endif
  cpu_dc1_calls++, cpu_dc1_cat_calls += m->skip != NULL;
}
#endif
