/* A frozen f32 plan's last bottleneck block computed inside the heatmap head
 * after it (conv_softargmax.c), band by band, so that neither the block's
 * three intermediate maps nor its output, nor the heatmaps, are ever stored:
 *
 *   x -> conv1 1x1 (C -> 8) -> bn1 -> ReLU -> conv2 3x3 (8 -> 8) -> bn2 -> ReLU
 *     -> conv3 1x1 (8 -> C) -> bn3 -> + x -> ReLU -> head 1x1 (C -> K) -> soft-argmax
 *
 * (ResUNet's decoder.4 at full resolution: C = 32, K = 68). The node is the
 * head's (csam_node) with this block in front of its tile products: a tile
 * is a band of whole image rows, and per band
 *
 *   1. x's rows of the band and one above and below it, from 16-channel
 *      blocks into planes (a 16 x 16 transpose per 16 positions);
 *   2. conv1 with bn1 folded and its ReLU on those rows (zero rows outside
 *      the image: conv2's padding);
 *   3. conv2 on the band's rows, its left and right padding as masked lanes;
 *   4. conv3 with bn3 folded, + x, ReLU;
 *   5. the head's logits from those planes (conv_softargmax.c's sums follow),
 *      the next band's input prefetched meanwhile (3% of the node: 139-141
 *      against 144-146 ms without, alternating runs).
 *
 * Every product keeps a heatmap's (or channel's) positions side by side in a
 * vector, 8 outputs x 32 positions in 16 registers, the weights broadcast:
 * with 8 channels nothing is wasted on padding lanes, which the 16-channel
 * blocks of the apart layers were half of.
 *
 * Why: apart, frozen ResUNet-50 f32 at batch 64 (Xeon with AMX, 2 threads,
 * per-node profile) spent 21 + 36 + 51 ms on the block's three convolutions
 * (the 8-channel maps in half-empty 16-channel blocks, reorders to and from
 * channels-last for oneDNN's 3x3 kernel, the 411 MB output written and read
 * back) and 113 ms on the head: 221 ms of a 2337 ms step. Fused: 127-145 ms
 * (bench/README_train.md, session 55).
 *
 * AVX-512 builds (16 lanes), input in 16-channel blocks, C a multiple of 16
 * up to 64, widths a multiple of 32, no bias on the block's convolutions. */
#ifdef SPRY_HAVE_DNNL
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "backends/cpu/planes.h"
#include "ops/ops.h"

int cpu_conv_use_tail = 1;
/* Positions a band (whole rows of this many at most, one at least):
 * ResUNet-50 f32 batch 64, 2 threads, Xeon with AMX: 1024 (4 rows) 141-145
 * ms for the fused node, 2048 (9 rows) 134-136; the thread's planes and
 * logits then take 1.3 MB of its 2 MB L2. */
int64_t cpu_tail_band_positions = 2048;
long cpu_tail_calls;

/* The links after conv1 (sp_op_prep.consumer, sp_op_args.chain). */
enum { T_BN1, T_RELU1, T_CONV2, T_BN2, T_RELU2, T_CONV3, T_BN3, T_ADD, T_RELU3, T_HEAD, T_SAM, T_LINKS };
enum { MID = 8, MAX_C = 64, PB = 32 /* positions a product block */ };

struct cpu_tail {
  int64_t c, h, w, band; /* band: image rows a tile */
  /* Thread scratch (floats from the region's start): x's planes (band + 2
   * rows), conv1's (the same rows, a vector of slack either side), conv2's
   * and the block output's (band rows). */
  int64_t o_x, o_a, o_b, o_y, ld_x, ld_a, ld_b;
  size_t bytes;
  /* Folded weights: conv1 [8][C], conv2 [8][8][3][3], conv3 [C][8], each
   * output's batch norm scale in; the shifts as biases. */
  float w1[MID * MAX_C], b1[MID], w2[MID * MID * 9], b2[MID], w3[MAX_C * MID], b3[MAX_C];
};

#ifdef __AVX512F__
static int conv_is(const sp_op_consumer *c, int k, int pad, int oc_n, int bias) {
  const sp_conv2d_attr *at = c->attr;
  return c->op == &sp_op_conv2d && at && at->groups == 1 && at->stride_h == 1 && at->stride_w == 1 && at->dil_h == 1 &&
         at->dil_w == 1 && at->pad_h == pad && at->pad_w == pad && c->param_shape[0].d[2] == k &&
         c->param_shape[0].d[3] == k && c->param_shape[0].d[0] == oc_n && (bias || c->n_param == 1) && !c->out_plain;
}

static int bn_is(const sp_op_consumer *c) { return c->op == &sp_op_batchnorm && c->n_state == 2 && !c->out_plain; }
static int relu_is(const sp_op_consumer *c) { return c->op == &sp_op_relu && !c->out_plain; }
#endif

int cpu_tail_match(const sp_op_prep *p, const dnnl_memory_desc_t *x, sp_op_prep *head) {
#ifdef __AVX512F__
  const sp_conv2d_attr *at = p->attr;
  const sp_shape *in = &p->in_shape[0], *w = &p->param_shape[0];
  const sp_op_consumer *c = p->consumer;
  cpu_bn_geom g;
  if (!cpu_conv_use_tail || !p->frozen || p->training || p->run_backward || p->bf16 || p->out_plain || in->ndim != 4 ||
      p->n_param != 1 || at->groups != 1 || at->stride_h != 1 || at->stride_w != 1 || at->pad_h != 0 ||
      at->pad_w != 0 || at->dil_h != 1 || at->dil_w != 1 || w->d[0] != MID || w->d[2] != 1 || w->d[3] != 1 ||
      x->data_type != dnnl_f32 || cpu_bn_geom_of(&g, x, in) != 0 || g.lanes != 16 || in->d[1] % 16 != 0 ||
      in->d[1] > MAX_C || in->d[3] % PB != 0)
    return 0;
  const int64_t ch = in->d[1];
  if (!bn_is(&c[T_BN1]) || !relu_is(&c[T_RELU1]) || !conv_is(&c[T_CONV2], 3, 1, MID, 0) || !bn_is(&c[T_BN2]) ||
      !relu_is(&c[T_RELU2]) || !conv_is(&c[T_CONV3], 1, 0, ch, 0) || !bn_is(&c[T_BN3]) || c[T_ADD].op != &sp_op_add ||
      c[T_ADD].n_in != 2 || !c[T_ADD].other_is_in0 || c[T_ADD].out_plain || !relu_is(&c[T_RELU3]) ||
      !conv_is(&c[T_HEAD], 1, 0, c[T_HEAD].param_shape[0].d[0], 1) || c[T_SAM].op != &sp_op_softargmax)
    return 0;
  /* The head as conv_softargmax.c's prepare sees a head of its own: its
   * attributes and parameters, soft-argmax after it, the block's input
   * shape and layout (the block keeps both). */
  *head = *p;
  head->attr = c[T_HEAD].attr;
  head->n_param = c[T_HEAD].n_param;
  for (int k = 0; k < SP_OP_MAX_PARAM; k++) head->param_shape[k] = c[T_HEAD].param_shape[k], head->param_grad[k] = 0;
  memset(head->consumer, 0, sizeof head->consumer);
  head->consumer[0] = c[T_SAM];
  return 1;
#else
  (void)p, (void)x, (void)head;
  return 0;
#endif
}

const sp_op_args *cpu_tail_head_args(const sp_op_args *a) { return a->chain[T_HEAD]; }
int cpu_tail_links(void) { return T_LINKS; }

cpu_tail *cpu_tail_new(const sp_op_prep *p, int64_t band) {
  cpu_tail *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->c = p->in_shape[0].d[1], t->h = p->in_shape[0].d[2], t->w = p->in_shape[0].d[3], t->band = band;
  const int64_t rows = (band + 2) * t->w; /* the band and a row either side */
  t->ld_x = rows, t->ld_a = rows + 2 * 16, t->ld_b = band * t->w;
  size_t used = 0;
  t->o_x = (int64_t)cpu_take(&used, sizeof(float) * (size_t)(t->c * t->ld_x)) / 4;
  t->o_a = (int64_t)cpu_take(&used, sizeof(float) * (size_t)(MID * t->ld_a)) / 4;
  t->o_b = (int64_t)cpu_take(&used, sizeof(float) * (size_t)(MID * t->ld_b)) / 4;
  t->o_y = (int64_t)cpu_take(&used, sizeof(float) * (size_t)(t->c * t->ld_b)) / 4;
  t->bytes = used;
  return t;
}

size_t cpu_tail_thread_bytes(const cpu_tail *t) { return t->bytes; }

/* The block's weights with their batch norms folded in (frozen plans: once,
 * and again when the parameters change). */
void cpu_tail_fold(cpu_tail *t, const sp_op_args *a) {
  const float *w1 = a->param[0]->data, *w2 = a->chain[T_CONV2]->param[0]->data, *w3 = a->chain[T_CONV3]->param[0]->data;
  float scale;
  for (int64_t m = 0; m < MID; m++) {
    cpu_bn_fold(a->chain[T_BN1], m, 0.0f, &scale, &t->b1[m]);
    for (int64_t c = 0; c < t->c; c++) t->w1[m * t->c + c] = w1[m * t->c + c] * scale;
    cpu_bn_fold(a->chain[T_BN2], m, 0.0f, &scale, &t->b2[m]);
    for (int64_t i = 0; i < MID * 9; i++) t->w2[m * MID * 9 + i] = w2[m * MID * 9 + i] * scale;
  }
  for (int64_t c = 0; c < t->c; c++) {
    cpu_bn_fold(a->chain[T_BN3], c, 0.0f, &scale, &t->b3[c]);
    for (int64_t m = 0; m < MID; m++) t->w3[c * MID + m] = w3[c * MID + m] * scale;
  }
}

#ifdef __AVX512F__
static inline vf16 ld(const float *p) { return *(const vf16u *)p; }
static inline void st(float *p, vf16 v) { *(vf16u *)p = v; }
static inline vf16 relu(vf16 v) { return (vf16)_mm512_max_ps((__m512)v, _mm512_setzero_ps()); }

/* 1. The band's rows y0 - 1 .. y0 + nr of image img (those in the image)
 * from x's 16-channel blocks into planes, row r - (y0 - 1) of each. */
static void load_rows(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t ya, int64_t yb,
                      int64_t y0, float *xp) {
  for (int64_t b = 0; b < t->c / 16; b++) {
    const float *blk = x + img * g->img_stride + b * g->blk_stride;
    for (int64_t y = ya; y < yb; y++)
      for (int64_t x0 = 0; x0 < t->w; x0 += 16)
        planes_transpose16(blk + (y * t->w + x0) * 16, 16, xp + b * 16 * t->ld_x + (y - y0 + 1) * t->w + x0, t->ld_x);
  }
}

/* 2. conv1 + bn1 + ReLU on rows [ra, rb) of the band's planes; the other
 * rows of the band + 2 zero (outside the image). */
static void conv1_rows(const cpu_tail *t, const float *xp, float *a, int64_t ra, int64_t rb, int64_t rows) {
  vf16 acc[MID][2];
  for (int64_t p = ra * t->w; p < rb * t->w; p += PB) {
    PLANES_PRODUCT(acc, MID, t->w1, t->c, t->c, xp, t->ld_x, p);
    VEC_UNROLL for (int m = 0; m < MID; m++) {
      const vf16 b = vbcastw(t->b1[m]);
      st(a + m * t->ld_a + p, relu(acc[m][0] + b));
      st(a + m * t->ld_a + p + 16, relu(acc[m][1] + b));
    }
  }
  for (int m = 0; m < MID; m++) {
    memset(a + m * t->ld_a, 0, sizeof(float) * (size_t)(ra * t->w));
    memset(a + m * t->ld_a + rb * t->w, 0, sizeof(float) * (size_t)((rows - rb) * t->w));
  }
}

/* 3. conv2 + bn2 + ReLU for the band's nr rows: row r reads conv1's rows r,
 * r + 1 and r + 2; lane 0 of a row's first vector at kx = 0 and lane 15 of
 * its last at kx = 2 are the zero padding (they would read the next row). */
static void conv2_rows(const cpu_tail *t, const float *a, float *bo, int64_t nr) {
  const __mmask16 not_first = 0xfffe, not_last = 0x7fff;
  vf16 acc[MID][2];
  for (int64_t r = 0; r < nr; r++)
    for (int64_t x0 = 0; x0 < t->w; x0 += PB) {
      const __mmask16 ml = x0 == 0 ? not_first : 0xffff, mr = x0 + PB == t->w ? not_last : 0xffff;
      VEC_UNROLL for (int m = 0; m < MID; m++) acc[m][0] = acc[m][1] = (vf16){0};
      for (int ic = 0; ic < MID; ic++)
        for (int ky = 0; ky < 3; ky++) {
          const float *row = a + ic * t->ld_a + (r + ky) * t->w + x0;
          const vf16 l0 = (vf16)_mm512_maskz_loadu_ps(ml, row - 1), l1 = ld(row + 15);
          const vf16 c0 = ld(row), c1 = ld(row + 16);
          const vf16 r0 = ld(row + 1), r1 = (vf16)_mm512_maskz_loadu_ps(mr, row + 17);
          const float *wk = t->w2 + ic * 9 + ky * 3;
          VEC_UNROLL for (int m = 0; m < MID; m++) {
            const float *wm = wk + m * MID * 9;
            const vf16 w0 = vbcastw(wm[0]), w1 = vbcastw(wm[1]), w2 = vbcastw(wm[2]);
            acc[m][0] += w0 * l0 + w1 * c0 + w2 * r0;
            acc[m][1] += w0 * l1 + w1 * c1 + w2 * r1;
          }
        }
      VEC_UNROLL for (int m = 0; m < MID; m++) {
        const vf16 b = vbcastw(t->b2[m]);
        st(bo + m * t->ld_b + r * t->w + x0, relu(acc[m][0] + b));
        st(bo + m * t->ld_b + r * t->w + x0 + 16, relu(acc[m][1] + b));
      }
    }
}

/* 4. conv3 + bn3, + x (the band's own rows of its planes), ReLU. */
static void conv3_rows(const cpu_tail *t, const float *bo, const float *xp, float *y, int64_t np) {
  vf16 acc[MID][2];
  const float *xr = xp + t->w; /* the band's first row */
  for (int64_t c0 = 0; c0 < t->c; c0 += MID)
    for (int64_t p = 0; p < np; p += PB) {
      PLANES_PRODUCT(acc, MID, t->w3 + c0 * MID, MID, MID, bo, t->ld_b, p);
      VEC_UNROLL for (int m = 0; m < MID; m++) {
        const int64_t c = c0 + m;
        const vf16 b = vbcastw(t->b3[c]);
        st(y + c * t->ld_b + p, relu(acc[m][0] + b + ld(xr + c * t->ld_x + p)));
        st(y + c * t->ld_b + p + 16, relu(acc[m][1] + b + ld(xr + c * t->ld_x + p + 16)));
      }
    }
}

const float *cpu_tail_band(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t y0, int64_t nr,
                           char *buf) {
  float *f = (float *)buf, *xp = f + t->o_x, *a = f + t->o_a + 16, *bo = f + t->o_b, *y = f + t->o_y;
  const int64_t ya = y0 > 0 ? y0 - 1 : 0, yb = y0 + nr + 1 < t->h ? y0 + nr + 1 : t->h;
  load_rows(t, x, g, img, ya, yb, y0, xp);
  /* conv2 reads one float before conv1's first row and after its last. */
  for (int m = 0; m < MID; m++) a[m * t->ld_a - 1] = a[m * t->ld_a + (nr + 2) * t->w] = 0.0f;
  conv1_rows(t, xp, a, ya - y0 + 1, yb - y0 + 1, nr + 2);
  conv2_rows(t, a, bo, nr);
  conv3_rows(t, bo, xp, y, nr * t->w);
  return y;
}

void cpu_tail_logits(const cpu_tail *t, const float *y, const float *w, float *l, int64_t ldl, int64_t k, int64_t np,
                     const cpu_tail_next *next) {
  cpu_planes_logits(y, t->ld_b, w, t->c, l, ldl, k, np, next);
}

void cpu_tail_next_of(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t y0, int64_t nr,
                      cpu_tail_next *next) {
  const int64_t ya = y0 > 0 ? y0 - 1 : 0, yb = y0 + nr + 1 < t->h ? y0 + nr + 1 : t->h;
  next->blocks = (int)(t->c / 16);
  next->lines = (yb - ya) * t->w; /* a position's 16 channels: one line */
  for (int b = 0; b < next->blocks; b++)
    next->at[b] = (const char *)(x + img * g->img_stride + b * g->blk_stride + ya * t->w * 16);
}
#else
const float *cpu_tail_band(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t y0, int64_t nr,
                           char *buf) {
  (void)t, (void)x, (void)g, (void)img, (void)y0, (void)nr, (void)buf;
  return NULL; /* never matched below AVX-512 */
}
void cpu_tail_logits(const cpu_tail *t, const float *y, const float *w, float *l, int64_t ldl, int64_t k, int64_t np,
                     const cpu_tail_next *next) {
  (void)t, (void)y, (void)w, (void)l, (void)ldl, (void)k, (void)np, (void)next;
}
void cpu_tail_next_of(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t y0, int64_t nr,
                      cpu_tail_next *next) {
  (void)t, (void)x, (void)g, (void)img, (void)y0, (void)nr;
  next->lines = 0, next->blocks = 0;
}
#endif
#endif
