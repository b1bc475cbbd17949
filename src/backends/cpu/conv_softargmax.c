/* A 1x1 convolution whose only consumer is soft-argmax (ResUNet's heatmap
 * head: a few dozen channels in, one heatmap per keypoint out, at the input's
 * full resolution), fused, in bf16 and f32 plans, on channels-last or
 * channel-blocked activations. The heatmaps are never stored. With X[n] the
 * image's [HW, C] rows:
 *
 *   forward    per tile of P positions: Lt = W X_tile^T (one product,
 *              [K, P] f32 out, L2-resident), then per heatmap (a row of Lt)
 *              the max of Lt + b, the sum of exp(Lt + b - max) and its
 *              column- and row-weighted sums; the tiles' partial sums merge
 *              per heatmap (log-sum-exp).
 *   backward   per tile again: Lt recomputed, p = exp(Lt + b - M) / S and
 *              dLt = scale p (gx (j - ex) + gy (i - ey)) (ops/softargmax.c),
 *              in the plan's precision; dX_tile (=|+=) dLt^T W,
 *              dW += dLt X_tile, db += row sums of dLt.
 *
 * The logits are kept transposed, a heatmap's positions side by side, so
 * the exponentials run a vector of positions at a time (16 with AVX-512, 8
 * with AVX2) with no lanes wasted on
 * padding heatmaps (68 of 80 were real) and the positions' columns and rows
 * come from two per-tile tables instead of a conversion per position. With
 * heatmaps along the vector, the exponential passes took 27 of the head's
 * 62 ms a ResUNet-18 bf16 step (batch 16, 2 threads, Zen 5); transposed, with
 * four running maxima and the hardware bf16 rounding, the head takes 50 ms
 * (71 ms per node before, both in one run's profile).
 *
 * Why: apart, the head wrote N K H W bf16 logits, soft-argmax read them twice
 * and saved N K H W f32 exponentials for backward, which wrote bf16 logit
 * gradients that the convolution's backward read twice: about 1.1 GB of
 * memory traffic per ResUNet-50 step at batch 16 (68 heatmaps of 224x224),
 * 137 of its ~1450 ms (f32: 179 of ~3100). Fused, the traffic is X read
 * twice and dX written; the products are small (K and C below 100).
 *
 * The tiles run in parallel, one thread each, so each oneDNN product is made
 * for one thread (made with omp_set_num_threads(1): oneDNN sizes its work
 * split when a primitive is made, and runs a primitive inside a parallel
 * region on the calling thread alone). Each thread has its own stream and
 * memory objects, whose data handles move from tile to tile. Channels-last
 * rows are a matrix in place; blocked ones (nChw16c, f32 plans) are gathered
 * into the thread's [P, C] buffer and their input gradient scattered back,
 * and so is an image's last tile when it is shorter (zero rows after it).
 *
 * Where AMX is usable (bf16, channels-last, C a multiple of 32) the three
 * products run on tiles of our own instead (softargmax_amx.c): tiles of a
 * multiple of 32 rows, heatmaps padded to kp (16s) and kp32 (32s) with zero
 * rows, and the logits' and dL's rows a cache line past a 4 KB multiple.
 * f32 on 16-channel blocks (AVX-512 builds, C a multiple of 16 up to 128)
 * turns the tile into planes and runs them as loops of our own
 * (softargmax_planes.c): tiles of a multiple of 32 positions, W [kp, C] and
 * W^T [C, kp], dL's rows zero to k4, the weight gradient summed per lane.
 * ResUNet-50 f32 training, batch 16 (Xeon without AMX, 2 threads, the head's
 * node in the per-node profile, 3 alternating pairs): 82.8-84.1 -> 75.8-76.3
 * ms forward + backward. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/conv_softargmax.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/shares.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

int cpu_conv_use_softargmax = 1;
int cpu_conv_use_softargmax_amx = 1;
long cpu_softargmax_streamed;

enum { TILE_ROWS = 1024, MAX_CHANNELS = 512, MAX_HEATMAPS = 1024, MAX_PLANE_CHANNELS = 128 };

/* Elements of the prepared weights: W [K, C]; on AMX W [kp, C] (zero rows
 * past K) and then its heatmap pairs for dX; on planes W [kp, C] and W^T
 * [C, kp]. */
static int64_t w_elems(const csam_node *s) {
  return s->amx ? (s->kp + s->kp32) * s->c : s->planes ? 2 * s->kp * s->c : s->tail ? s->kp * s->c : s->k * s->c;
}

/* W[k, c] in the plan's precision from the f32 master weights [K, C, 1, 1]. */
static void prepare_weights(const csam_node *s, const float *w, void *wk) {
  for (int64_t i = 0; i < s->k * s->c; i++) sp_stf(wk, i, w[i], !s->f32);
  if (s->tail || s->planes) memset((float *)wk + s->k * s->c, 0, sizeof(float) * (size_t)((s->kp - s->k) * s->c));
  if (s->planes) {
    float *wt = (float *)wk + s->kp * s->c;
    for (int64_t c = 0; c < s->c; c++)
      for (int64_t k = 0; k < s->kp; k++) wt[c * s->kp + k] = k < s->k ? w[k * s->c + c] : 0.0f;
  }
  if (!s->amx) return;
  memset((uint16_t *)wk + s->k * s->c, 0, sizeof(uint16_t) * (size_t)((s->kp - s->k) * s->c));
  cpu_amx_head_w_pairs(wk, s->k, s->c, s->kp32, (uint16_t *)wk + s->kp * s->c);
}

/* One product on the calling thread: its memory objects pointed at this
 * tile's buffers (which object serves as what follows from the primitive),
 * the scratchpad one sized for the largest of the three products. */
static void run(const csam_node *s, const tile_exec *te, dnnl_primitive_t prim, const void *src, const void *wei,
                void *dst, void *pad) {
  const int m_src = prim == s->fwd ? M_W : prim == s->dw_prim ? M_DL : M_DLT;
  const int m_wei = prim == s->fwd ? M_XT : prim == s->dw_prim ? M_X : M_W;
  const int m_dst = prim == s->fwd ? M_L : prim == s->dw_prim ? M_DW : M_DX;
  DNNL_RUN(dnnl_memory_set_data_handle(te->m[m_src], (void *)src));
  DNNL_RUN(dnnl_memory_set_data_handle(te->m[m_wei], (void *)wei));
  DNNL_RUN(dnnl_memory_set_data_handle(te->m[m_dst], dst));
  DNNL_RUN(dnnl_memory_set_data_handle(te->m[M_PAD], pad));
  const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, te->m[m_src]},
                                   {DNNL_ARG_WEIGHTS, te->m[m_wei]},
                                   {DNNL_ARG_DST, te->m[m_dst]},
                                   {DNNL_ARG_SCRATCHPAD, te->m[M_PAD]}};
  DNNL_RUN(dnnl_primitive_execute(prim, te->stream, 4, args));
}

/* A tile's logits Lt = W X_tile^T into l ([kp or K, rows] f32). */
static void logits(const csam_node *s, int t, const void *wk, const void *xt, float *l, char *ts) {
  if (s->amx)
    cpu_amx_head_logits(wk, xt, l, s->ldl, s->c, s->kp, s->rows, (uint16_t *)(ts + s->t_amx));
  else
    run(s, &s->te[t], s->fwd, wk, xt, l, ts + s->t_pad);
}

/* Element offset of (image, channel block, position) in the input's layout. */
static int64_t at_of(const csam_node *s, int64_t img, int64_t blk, int64_t pos) {
  return img * s->g.img_stride + blk * s->g.blk_stride + pos * s->g.lanes;
}

/* Tile u's first position in its image and its count (an image's last tile
 * may be shorter). */
static void tile_span(const csam_node *s, int64_t u, int64_t *p0, int64_t *np) {
  *p0 = (u % s->tiles) * s->rows;
  *np = s->hw - *p0 < s->rows ? s->hw - *p0 : s->rows;
}

/* Tile u's rows of X as a [rows, C] matrix: in place (channels-last, a full
 * tile), or gathered into the thread's buffer with zero rows after np. */
static const void *tile_rows(const csam_node *s, const void *x, int64_t u, int64_t *p0, int64_t *np, char *buf) {
  const int64_t img = u / s->tiles, L = s->g.lanes;
  tile_span(s, u, p0, np);
  if (s->in_place && *np == s->rows) return (const char *)x + at_of(s, img, 0, *p0) * s->es;
  for (int64_t b = 0; b < s->g.blocks; b++) {
    const int64_t n = s->c - b * L < L ? s->c - b * L : L; /* a last block's padding lanes stay out */
    const char *src = (const char *)x + at_of(s, img, b, *p0) * s->es;
    char *dst = buf + b * L * s->es;
    const size_t bytes = (size_t)n * s->es, rs = (size_t)(s->c * s->es), ss = (size_t)(L * s->es);
    if (bytes == 32) /* 16 bf16 lanes: one vector a row, no call */
      for (int64_t r = 0; r < *np; r++) *(vh16u *)(dst + r * rs) = *(const vh16u *)(src + r * ss);
    else if (bytes == 64)
      for (int64_t r = 0; r < *np; r++) *(vf16u *)(dst + r * rs) = *(const vf16u *)(src + r * ss);
    else
      for (int64_t r = 0; r < *np; r++) memcpy(dst + r * rs, src + r * ss, bytes);
  }
  memset(buf + *np * s->c * s->es, 0, (size_t)((s->rows - *np) * s->c) * s->es);
  return buf;
}

/* np rounded up to a product step of 32 positions. */
static int64_t np32(int64_t np) { return (np + 31) / 32 * 32; }

/* Tile u's positions of X as planes [C][ldx] in the thread's buffer, zero
 * past np to the next 32. */
static void tile_planes(const csam_node *s, const void *x, int64_t u, int64_t *p0, int64_t *np, float *xp) {
  const int64_t img = u / s->tiles;
  tile_span(s, u, p0, np);
  cpu_planes_gather((const float *)x + at_of(s, img, 0, *p0), s->g.blocks, s->g.blk_stride, *np, np32(*np), xp, s->ldx);
}

static void bias_of(const csam_node *s, const sp_op_args *a, float *b) {
  for (int64_t k = 0; k < s->kp; k++) b[k] = s->has_bias && k < s->k ? ((const float *)a->param[1]->data)[k] : 0.0f;
}

/* 16 lanes stored as f32, or rounded to bf16 as sp_bf16_round does (a
 * 16-lane bf16 block of the input gradient, put_run). */
static inline void st16(void *p, int64_t i, vf16 v, int f32) {
  if (f32) {
    *(vf16u *)((float *)p + i) = v;
    return;
  }
#ifdef __AVX512BF16__
  *(vh16u *)((uint16_t *)p + i) = (vh16)_mm512_cvtneps_pbh((__m512)v); /* the same rounding, one instruction */
  return;
#endif
  const vu16 u = (vu16)v, r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const vu16 nan = (vu16)((u & 0x7fffffffu) > 0x7f800000u);
  *(vh16u *)((uint16_t *)p + i) = __builtin_convertvector((r & ~nan) | (((u >> 16) | 0x40u) & nan), vh16);
}

/* 16 bf16 values widened to f32. */
static inline vf16 ld16h(const void *p) { return (vf16)(__builtin_convertvector(*(const vh16u *)p, vu16) << 16); }

static char *thread_region(const csam_node *s, char *sc, int t) {
  return sc + s->o_threads + (size_t)t * s->thread_bytes;
}

static void csam_forward(cpu_node *nd, const sp_op_args *a) {
  const csam_node *s = (const csam_node *)nd;
  char *sc = a->scratch;
  void *wk = s->w_kept ? s->w_kept : sc + s->o_w;
  float *part = (float *)(sc + s->o_part), fresh[MAX_HEATMAPS], *b = s->b_kept ? s->b_kept : fresh;
  const sp_op_args *ha = s->tail ? cpu_tail_head_args(a) : a; /* the head's parameters */
  if (!s->w_kept || a->params_stale) {
    prepare_weights(s, ha->param[0]->data, wk);
    bias_of(s, ha, b);
    if (s->tail) cpu_tail_fold(s->tail, a);
  }
  const void *x = a->in[0]->data;
  /* Contiguous runs of tiles taken as threads come free (shares.h); each
   * tile's sums are its own (part), merged in tile order. */
  const int64_t units = s->n * s->tiles, shares = cpu_shares_count(units, s->threads);
  int64_t next_share = 0;
#pragma omp parallel num_threads(s->threads)
  {
    const int t = omp_get_thread_num();
    char *ts = thread_region(s, sc, t);
    float *l = (float *)(ts + s->t_l), *jc = (float *)(ts + s->t_ij), *ic = jc + s->rt;
    cpu_share_walk walk = cpu_shares_begin(&next_share, shares);
    for (int64_t sh, u, u1; (sh = cpu_shares_next(&walk)) >= 0;)
      for (cpu_share_range(units, shares, sh, &u, &u1); u < u1; u++) {
        int64_t p0, np;
        if (s->tail) { /* the block's output for a band of rows, then the logits from its planes */
          const int64_t img = u / s->tiles, y0 = u % s->tiles * s->band, nr = s->h - y0 < s->band ? s->h - y0 : s->band;
          p0 = y0 * s->w, np = nr * s->w;
          const float *planes = cpu_tail_band(s->tail, x, &s->g, img, y0, nr, ts + s->t_tail);
          cpu_tail_next next = {.lines = 0};
          if (u + 1 < u1) { /* the share's tiles run in order on this thread */
            const int64_t y1 = (u + 1) % s->tiles * s->band;
            cpu_tail_next_of(s->tail, x, &s->g, (u + 1) / s->tiles, y1, s->h - y1 < s->band ? s->h - y1 : s->band,
                             &next);
          }
          cpu_tail_logits(s->tail, planes, wk, l, s->ldl, s->k, np, &next);
        } else if (s->planes) {
          float *xp = (float *)(ts + s->t_x);
          tile_planes(s, x, u, &p0, &np, xp);
          cpu_planes_logits(xp, s->ldx, wk, s->c, l, s->ldl, s->k, np32(np), NULL);
        } else {
          const void *xt = tile_rows(s, x, u, &p0, &np, ts + s->t_x);
          logits(s, t, wk, xt, l, ts);
        }
        csam_tile_coords(s, p0, jc, ic);
        csam_tile_sums(s, l, b, jc, ic, np, part + u * 4 * s->kp);
      }
  }
  csam_merge_tiles(s, part, a->out->data, a->saved ? a->saved : (void *)(sc + s->o_stats));
  if (s->tail) cpu_tail_calls++;
  if (s->planes) cpu_planes_calls++;
}

/* n values of a tile's input gradient into dx: written, or added on. */
static void put_run(const csam_node *s, char *dst, const char *src, int64_t n, int accumulate) {
  if (n == 16 && !s->f32) { /* a 16-lane bf16 block: one vector, no call */
    vf16 v = ld16h(src);
    if (accumulate) v += ld16h(dst);
    st16(dst, 0, v, 0);
  } else if (!accumulate)
    memcpy(dst, src, (size_t)n * s->es);
  else if (!s->f32)
    sp_bf16_add((uint16_t *)dst, (const uint16_t *)src, n);
  else
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] += ((const float *)src)[i];
}

/* A tile's input gradient made in the thread's [rows, C] buffer: its np rows
 * scattered into dx's layout; a written block's padding lanes get zeros
 * (convolutions reading the gradient expect zero padding). */
static void put_rows(const csam_node *s, void *dx, const char *tmp, int64_t img, int64_t p0, int64_t np,
                     int accumulate) {
  const int64_t L = s->g.lanes;
  for (int64_t b = 0; b < s->g.blocks; b++) {
    const int64_t n = s->c - b * L < L ? s->c - b * L : L;
    char *dst = (char *)dx + at_of(s, img, b, p0) * s->es;
    for (int64_t r = 0; r < np; r++) {
      put_run(s, dst + r * L * s->es, tmp + (r * s->c + b * L) * s->es, n, accumulate);
      if (n < L && !accumulate) memset(dst + (r * L + n) * s->es, 0, (size_t)(L - n) * s->es);
    }
  }
}

/* A tile's input and weight gradients from dL on AMX: dX straight into a
 * full channels-last tile's rows, else through the thread's buffer. */
static void amx_grads(const csam_node *s, const sp_op_args *a, char *ts, const void *wk, const void *xt, int64_t img,
                      int64_t p0, int64_t np, int dx, int dw, int accumulate) {
  const uint16_t *dl = (const uint16_t *)(ts + s->t_dl);
  uint16_t *bufs = (uint16_t *)(ts + s->t_amx);
  if (dx) {
    const int whole = s->in_place && np == s->rows;
    char *to = whole ? (char *)a->d_in[0]->data + at_of(s, img, 0, p0) * s->es : ts + s->t_dx;
    cpu_amx_head_dx(dl, s->ldd, (const uint16_t *)wk + s->kp * s->c, (uint16_t *)to, s->c, s->kp32, s->rows,
                    whole && accumulate, whole && !accumulate && s->stream_dx, bufs,
                    (float *)(bufs + (s->kp32 / 32) * 512));
    if (!whole) put_rows(s, a->d_in[0]->data, ts + s->t_dx, img, p0, np, accumulate);
  }
  if (dw) cpu_amx_head_dw(dl, s->ldd, xt, (float *)(ts + s->t_dw), s->c, s->kp, s->rows, (uint16_t *)(ts + s->t_xp));
}

/* backward_tile on planes: X's planes, the logits again, their gradient,
 * dX's planes scattered into the blocks, the thread's per-lane weight
 * gradient sums. */
static void backward_tile_planes(const csam_node *s, const sp_op_args *a, int t, int64_t u, const float *wk,
                                 const float *b, const float *coef, int dx, int dw, int accumulate) {
  char *ts = thread_region(s, a->scratch, t);
  float *l = (float *)(ts + s->t_l), *jc = (float *)(ts + s->t_ij), *ic = jc + s->rt;
  float *xp = (float *)(ts + s->t_x), *dl = (float *)(ts + s->t_dl), *dxp = (float *)(ts + s->t_dx);
  int64_t p0, np;
  const int64_t img = u / s->tiles;
  tile_planes(s, a->in[0]->data, u, &p0, &np, xp);
  const int64_t n32 = np32(np);
  cpu_planes_logits(xp, s->ldx, wk, s->c, l, s->ldl, s->k, n32, NULL);
  csam_tile_coords(s, p0, jc, ic);
  csam_tile_grad(s, l, b, coef + img * 5 * s->kp, jc, ic, np, dl, (double *)(ts + s->t_db));
  if (dx) {
    cpu_planes_dx(dl, s->ldd, wk + s->kp * s->c, s->kp, s->k, s->c, dxp, s->ldx, n32);
    cpu_planes_scatter(dxp, s->ldx, s->g.blocks, s->g.blk_stride, np, (float *)a->d_in[0]->data + at_of(s, img, 0, p0),
                       accumulate);
  }
  if (dw) cpu_planes_dw(dl, s->ldd, xp, s->ldx, s->k4, s->c, n32, (float *)(ts + s->t_dw));
}

/* One tile of backward: the logits again, their gradient, then the input
 * gradient and the thread's weight gradient. */
static void backward_tile(const csam_node *s, const sp_op_args *a, int t, int64_t u, const void *wk, const float *b,
                          const float *coef, int dx, int dw, int accumulate) {
  if (s->planes) {
    backward_tile_planes(s, a, t, u, wk, b, coef, dx, dw, accumulate);
    return;
  }
  char *ts = thread_region(s, a->scratch, t);
  float *l = (float *)(ts + s->t_l), *jc = (float *)(ts + s->t_ij), *ic = jc + s->rt;
  void *dl = ts + s->t_dl;
  int64_t p0, np;
  const int64_t img = u / s->tiles;
  const void *xt = tile_rows(s, a->in[0]->data, u, &p0, &np, ts + s->t_x);
  logits(s, t, wk, xt, l, ts);
  csam_tile_coords(s, p0, jc, ic);
  csam_tile_grad(s, l, b, coef + img * 5 * s->kp, jc, ic, np, dl, (double *)(ts + s->t_db));
  if (s->amx) {
    amx_grads(s, a, ts, wk, xt, img, p0, np, dx, dw, accumulate);
    return;
  }
  const tile_exec *te = &s->te[t];
  if (dx) {
    if (s->in_place && np == s->rows) {
      char *at = (char *)a->d_in[0]->data + at_of(s, img, 0, p0) * s->es;
      run(s, te, s->dx_prim[accumulate], dl, wk, at, ts + s->t_pad);
    } else {
      run(s, te, s->dx_prim[0], dl, wk, ts + s->t_dx, ts + s->t_pad);
      put_rows(s, a->d_in[0]->data, ts + s->t_dx, img, p0, np, accumulate);
    }
  }
  if (dw) run(s, te, s->dw_prim, dl, xt, ts + s->t_dw, ts + s->t_pad);
}

/* g[i] += the sum of the 16 lanes of v[i] (planes' weight gradient). */
static void add_lanes(float *g, const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double sum = 0.0;
    for (int q = 0; q < 16; q++) sum += v[i * 16 + q];
    g[i] += (float)sum;
  }
}

static void csam_backward(cpu_node *nd, const sp_op_args *a) {
  const csam_node *s = (const csam_node *)nd;
  const int dx = s->need_dx && a->d_in[0] != NULL, dw = s->need_dw && a->d_param[0] != NULL;
  const int db = s->need_dw && s->has_bias && a->d_param[1] != NULL;
  if (!dx && !dw && !db) return;
  const int accumulate = !(a->d_in_fresh & 1u);
  char *sc = a->scratch;
  void *wk = sc + s->o_w;
  float *coef = (float *)(sc + s->o_coef), b[MAX_HEATMAPS];
  prepare_weights(s, a->param[0]->data, wk);
  bias_of(s, a, b);
  csam_backward_coefs(s, a->saved, a->d_out->data, coef);
  const int64_t wn = (s->amx ? s->kp : s->planes ? 16 * s->kp : s->k) * s->c;
#pragma omp parallel num_threads(s->threads)
  {
    const int t = omp_get_thread_num();
    char *ts = thread_region(s, sc, t);
    memset(ts + s->t_dw, 0, sizeof(float) * (size_t)wn);
    if (s->amx) /* dL's rows past the heatmaps: read by the products, never written */
      memset(ts + s->t_dl + s->es * (size_t)(s->k * s->ldd), 0, s->es * (size_t)((s->kp32 - s->k) * s->ldd));
    if (s->planes) /* dL's rows past the heatmaps to the next 4: read by the weight gradient */
      memset(ts + s->t_dl + sizeof(float) * (size_t)(s->k * s->ldd), 0,
             sizeof(float) * (size_t)((s->k4 - s->k) * s->ldd));
    memset(ts + s->t_db, 0, sizeof(double) * (size_t)s->kp);
#pragma omp for schedule(static)
    for (int64_t u = 0; u < s->n * s->tiles; u++) backward_tile(s, a, t, u, wk, b, coef, dx, dw, accumulate);
    if (s->stream_dx) __builtin_ia32_sfence(); /* the streamed lines out before the region's barrier */
  }
  cpu_softargmax_streamed += s->stream_dx && dx;
  if (s->planes) cpu_planes_calls++;
  for (int t = 0; t < s->threads; t++) {
    const char *ts = thread_region(s, sc, t);
    if (dw && s->planes)
      add_lanes(a->d_param[0]->data, (const float *)(ts + s->t_dw), s->k * s->c);
    else if (dw)
      cpu_add_f32(a->d_param[0]->data, (const float *)(ts + s->t_dw), (size_t)(s->k * s->c));
    if (db) {
      const double *d = (const double *)(ts + s->t_db);
      float *g = a->d_param[1]->data;
      for (int64_t k = 0; k < s->k; k++) g[k] += (float)d[k];
    }
  }
}

static void csam_release(cpu_node *nd) {
  csam_node *s = (csam_node *)nd;
  for (int t = 0; s->te && t < s->threads; t++) {
    for (int m = 0; m < N_MEMS; m++)
      if (s->te[t].m[m]) dnnl_memory_destroy(s->te[t].m[m]);
    if (s->te[t].stream) dnnl_stream_destroy(s->te[t].stream);
  }
  free(s->te);
  free(s->tail);
}

static const cpu_vt csam_vt = {csam_forward, csam_backward, NULL, csam_release};

/* The case this file covers, with the input as the plan hands it. */
static int applies(const sp_op_prep *p, const dnnl_memory_desc_t *x) {
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *w = &p->param_shape[0];
  cpu_bn_geom g;
  return cpu_conv_use_softargmax && p->consumer[0].op == &sp_op_softargmax && !p->out_plain && p->consumer[0].attr &&
         p->in_shape[0].ndim == 4 && at->groups == 1 && w->d[2] == 1 && w->d[3] == 1 && at->stride_h == 1 &&
         at->stride_w == 1 && at->pad_h == 0 && at->pad_w == 0 && at->dil_h == 1 && at->dil_w == 1 &&
         p->in_shape[0].d[1] <= MAX_CHANNELS && w->d[0] <= MAX_HEATMAPS - 16 &&
         x->data_type == (p->bf16 ? dnnl_bf16 : dnnl_f32) && cpu_bn_geom_of(&g, x, &p->in_shape[0]) == 0 && g.lanes > 1;
}

static int md2(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, dnnl_data_type_t dt) {
  dnnl_dims_t d = {rows, cols};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(md, 2, d, dt, dnnl_ab));
  return 0;
}

/* The products, each made for one thread (see the top of the file). */
static int make_products(csam_node *s) {
  const dnnl_data_type_t dt = s->f32 ? dnnl_f32 : dnnl_bf16;
  /* Lt and dLt: [K, rows]; X^T: X's [rows, C] read by column; dLt^T: dLt
   * read by column. */
  dnnl_dims_t rk = {s->rows, s->k}, rk_s = {1, s->rows}, cr = {s->c, s->rows}, cr_s = {1, s->c};
  if (md2(&s->x_md, s->rows, s->c, dt) || md2(&s->w_md, s->k, s->c, dt) || md2(&s->dw_md, s->k, s->c, dnnl_f32) ||
      md2(&s->l_md, s->k, s->rows, dnnl_f32) || md2(&s->dl_md, s->k, s->rows, dt))
    return -1;
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&s->xt_md, 2, cr, dt, cr_s));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&s->dlt_md, 2, rk, dt, rk_s));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  int rc = cpu_matmul_make(&s->base, &s->w_md, &s->xt_md, NULL, &s->l_md, 0, &s->fwd_pd, &s->fwd);
  for (int k = 0; rc == 0 && s->need_dx && k < 2; k++)
    rc = cpu_matmul_make(&s->base, &s->dlt_md, &s->w_md, NULL, &s->x_md, k, &s->dx_pd[k], &s->dx_prim[k]);
  if (rc == 0 && s->need_dw)
    rc = cpu_matmul_make(&s->base, &s->dl_md, &s->x_md, NULL, &s->dw_md, 1, &s->dw_pd, &s->dw_prim);
  omp_set_num_threads(threads);
  return rc;
}

/* Per-thread streams and memory objects (handles set per tile). */
static int make_tile_execs(csam_node *s) {
  size_t pad = cpu_scratchpad_bytes(s->fwd_pd);
  for (int k = 0; k < 2; k++)
    if (s->dx_pd[k] && cpu_scratchpad_bytes(s->dx_pd[k]) > pad) pad = cpu_scratchpad_bytes(s->dx_pd[k]);
  if (s->dw_pd && cpu_scratchpad_bytes(s->dw_pd) > pad) pad = cpu_scratchpad_bytes(s->dw_pd);
  dnnl_dims_t pd = {(int64_t)(pad ? pad : 1)};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->pad_md, 1, pd, dnnl_u8, dnnl_a));
  const dnnl_memory_desc_t *mds[N_MEMS] = {&s->x_md, &s->xt_md,  &s->l_md,  &s->dl_md, &s->w_md,
                                           &s->x_md, &s->dlt_md, &s->dw_md, &s->pad_md};
  s->te = sp_xcalloc((size_t)s->threads, sizeof *s->te);
  for (int t = 0; t < s->threads; t++) {
    DNNL_TRY(dnnl_stream_create(&s->te[t].stream, cpu_engine(), dnnl_stream_default_flags));
    for (int m = 0; m < N_MEMS; m++)
      DNNL_TRY(dnnl_memory_create(&s->te[t].m[m], mds[m], cpu_engine(), DNNL_MEMORY_NONE));
  }
  return 0;
}

/* Scratch: W, the tiles' partial sums, the backward coefficients and the
 * forward's statistics (inference), then per thread its logits, padded rows,
 * logit gradient, padded input gradient, weight and bias gradients, the
 * positions' columns and rows, and the products' scratchpad. */
static void place_scratch(csam_node *s) {
  size_t used = 0, t = 0;
  s->o_w = cpu_take(&used, s->es * (size_t)w_elems(s));
  s->o_part = cpu_take(&used, sizeof(float) * (size_t)(s->n * s->tiles * 4 * s->kp));
  s->o_coef = cpu_take(&used, sizeof(float) * (size_t)(s->n * 5 * s->kp));
  s->o_stats = cpu_take(&used, sizeof(csam_stat) * (size_t)(s->n * s->kp));
  s->o_threads = cpu_take(&used, 0);
  /* A row's last vector may read (and dLt's write) up to 15 values into the
   * next row, or past the last one: 16 values of slack. */
  s->t_l = cpu_take(&t, sizeof(float) * (size_t)(s->ldl * (s->amx || s->tail || s->planes ? s->kp : s->k) + 16));
  s->t_x = cpu_take(&t, s->es * (size_t)((s->planes ? s->ldx : s->rows) * s->c));
  s->t_dl = cpu_take(&t, s->es * (size_t)(s->ldd * (s->amx ? s->kp32 : s->planes ? s->kp : s->k) + 16));
  s->t_dx = cpu_take(&t, s->es * (size_t)((s->planes ? s->ldx : s->rows) * s->c));
  s->t_dw = cpu_take(&t, sizeof(float) * (size_t)((s->planes ? 16 : 1) * s->kp * s->c));
  s->t_db = cpu_take(&t, sizeof(double) * (size_t)s->kp);
  s->t_ij = cpu_take(&t, sizeof(float) * (size_t)(2 * s->rt));
  s->t_pad = cpu_take(&t, s->amx || s->planes ? 0 : cpu_md_bytes(&s->pad_md));
  if (s->amx) { /* the logits' B for 32 positions; or dX's A and its C rows */
    const size_t b = 2048 * (size_t)(s->c / 32), adx = 1024 * (size_t)(s->kp32 / 32) + 64 * (size_t)s->c;
    s->t_amx = cpu_take(&t, b > adx ? b : adx);
    s->t_xp = cpu_take(&t, sizeof(uint16_t) * (size_t)(s->rows * s->c));
  }
  if (s->tail) s->t_tail = cpu_take(&t, cpu_tail_thread_bytes(s->tail));
  s->thread_bytes = cpu_take(&t, 0);
}

static int setup(sp_op_prep *p, csam_node *s, const dnnl_memory_desc_t *x) {
  const sp_shape *in = &p->in_shape[0];
  if (cpu_bn_geom_of(&s->g, x, in)) return -1;
  s->f32 = !p->bf16, s->es = s->f32 ? 4 : 2;
  s->in_place = s->g.blocks == 1; /* channels-last */
  s->n = in->d[0], s->c = in->d[1], s->h = in->d[2], s->w = in->d[3], s->hw = s->h * s->w;
  s->k = p->param_shape[0].d[0], s->kp = (s->k + 15) / 16 * 16;
  s->scale = ((const sp_softargmax_attr *)p->consumer[0].attr)->scale;
  s->has_bias = p->n_param > 1;
  s->need_dx = p->run_backward && p->need_d_in[0];
  s->need_dw = p->run_backward && (p->param_grad[0] || (s->has_bias && p->param_grad[1]));
  s->threads = omp_get_max_threads();
  s->tiles = (s->hw + TILE_ROWS - 1) / TILE_ROWS;
  s->rows = (s->hw + s->tiles - 1) / s->tiles; /* as even as the tiles can be */
  s->amx = cpu_conv_use_softargmax_amx && !s->f32 && s->in_place && s->c % 32 == 0 && cpu_amx_usable();
  s->stream_dx = s->amx && cpu_mm_amx_stream &&
                 (int64_t)(s->es * sp_shape_numel(&p->in_shape[0])) >= cpu_stream_threshold_plan(p->run_backward);
  if (s->amx) { /* whole steps of 32 positions; the rounding may leave fewer tiles */
    s->kp32 = (s->k + 31) / 32 * 32;
    s->rows = (s->rows + 31) / 32 * 32;
    s->tiles = (s->hw + s->rows - 1) / s->rows;
  }
  s->planes = !s->amx && !s->tail && cpu_conv_use_softargmax_planes && cpu_planes_built() && s->f32 &&
              s->g.lanes == 16 && s->c % 16 == 0 && s->c <= MAX_PLANE_CHANNELS;
  if (s->planes) { /* whole product steps of 32 positions */
    s->rows = (s->rows + 31) / 32 * 32;
    s->tiles = (s->hw + s->rows - 1) / s->rows;
    s->k4 = (s->k + 3) / 4 * 4;
  }
  if (s->tail) { /* whole rows: the block's 3x3 reads the rows either side */
    s->rows = s->w * s->band;
    s->tiles = (s->h + s->band - 1) / s->band;
  }
  s->rt = s->rows + 16;
  /* The logits' and dL's rows one cache line apart from a multiple of 4 KB:
   * at 1024 positions a tile's 16 rows all fell in one L1 set (the tile
   * stores and loads of a step took 3-4x longer); so X's planes. oneDNN's
   * matmuls want them dense. */
  s->ldl = s->amx || s->planes ? s->rows + 16 : s->rows;
  s->ldd = s->amx ? s->rows + 32 : s->planes ? s->rows + 16 : s->rows;
  s->ldx = s->rows + 16;
  if (!s->amx && !s->tail && !s->planes && (make_products(s) || make_tile_execs(s))) return -1;
  place_scratch(s);
  if (p->frozen && !p->run_backward) {
    size_t used = 0, at_w = cpu_take(&used, s->es * (size_t)w_elems(s)),
           at_b = cpu_take(&used, sizeof(float) * (size_t)s->kp);
    char *kept = cpu_node_keep(&s->base, used);
    s->w_kept = kept + at_w, s->b_kept = (float *)(kept + at_b);
  }
  /* The output is soft-argmax's: [N, K, 2] plain f32. */
  sp_shape os = sp_shape3(s->n, s->k, 2);
  if (cpu_md_plain(&s->base.out_md, &os, dnnl_f32)) return -1;
  p->saved_bytes = p->run_backward ? sizeof(csam_stat) * (size_t)(s->n * s->kp) : 0;
  p->absorb_consumer = 1;
  const size_t bytes = s->o_threads + (size_t)s->threads * s->thread_bytes;
  return cpu_report_scratch(p, &s->base, bytes, p->run_backward ? bytes : 0);
}

int cpu_conv_softargmax_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t x;
  sp_op_prep head; /* a bottleneck block's conv1 (conv_tail.c): the head after it as a prep of its own */
  if (cpu_md_input(&x, p, 0)) return 1;
  const int tail = cpu_tail_match(p, &x, &head);
  sp_op_prep *hp = tail ? &head : p;
  if (!applies(hp, &x)) return 1;
  csam_node *s = cpu_node_new(sizeof *s, &csam_vt);
  if (tail) {
    const int64_t w = hp->in_shape[0].d[3];
    s->band = cpu_tail_band_positions / w > 0 ? cpu_tail_band_positions / w : 1;
    if (s->band > hp->in_shape[0].d[2]) s->band = hp->in_shape[0].d[2];
    if (!(s->tail = cpu_tail_new(p, s->band))) return cpu_node_free(&s->base), 1;
  }
  if (setup(hp, s, &x) != 0) {
    cpu_node_free(&s->base);
    return 1; /* no fast matmul: the two ops apart */
  }
  if (tail) { /* what setup reported, for conv1's node, which absorbs the whole chain */
    p->absorb_consumer = cpu_tail_links();
    p->state = head.state, p->out_layout = head.out_layout, p->out_bytes = head.out_bytes;
    p->saved_bytes = head.saved_bytes, p->param_grad_overwrites = 0;
    p->fwd_scratch_bytes = head.fwd_scratch_bytes, p->bwd_scratch_bytes = head.bwd_scratch_bytes;
  }
  return 0;
}

int cpu_conv_is_tail(const void *state) {
  return cpu_conv_is_softargmax(state) && ((const csam_node *)state)->tail != NULL;
}

int cpu_conv_is_softargmax(const void *state) { return ((const cpu_node *)state)->vt == &csam_vt; }

int cpu_conv_uses_softargmax_planes(const void *state) {
  return cpu_conv_is_softargmax(state) && ((const csam_node *)state)->planes;
}

int cpu_conv_uses_softargmax_amx(const void *state) {
  return cpu_conv_is_softargmax(state) && ((const csam_node *)state)->amx;
}
#endif
