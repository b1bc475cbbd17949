/* The backward pass of an f32 transposed convolution with kernel = stride =
 * 2 and no padding (U-Net's up-layers) in 1x1 form, the counterpart of
 * deconv_1x1.c's forward. With dY' the space-to-depth copy of dY,
 *
 *   dY'[n, 4 oc + t, h, w]   = dY[n, oc, 2 h + ky, 2 w + kx]          (t = 2 ky + kx)
 *   dX[n, ic, h, w]          = sum over j of dY'[n, j, h, w] W[ic][j]
 *   dW[ic][j]                = sum over n, h, w of X[n, ic, h, w] dY'[n, j, h, w]
 *
 * where W [IC, OC, 2, 2] read as [IC][4 OC] is the weights as they lie: dX
 * is a 1x1 forward convolution of dY' (4 OC channels in, IC out) with W as
 * its [O = IC][I = 4 OC] weights, and dW is the weight gradient of the 1x1
 * convolution X -> dY' ([O = 4 OC][I = IC]), which is dW's memory read in
 * iohw order. One copy of dY feeds both products.
 *
 * Channel j = 4 oc + t (not t OC + oc, deconv_1x1.c's order) keeps W and dW
 * as they lie; the copy then moves each dY block's channel groups (4 of 4
 * channels with AVX-512's 16-channel blocks, 4 of 2 with AVX2's 8) from
 * four positions into one block of dY' (a transpose of values in
 * registers) instead of whole blocks.
 *
 * Why: oneDNN 2.6's f32 deconvolution backward kernels run these layers at
 * 170-250 GFLOP/s (data) and 200-340 (weights) on Zen 5, its 1x1 kernels
 * the same products at up to twice that; bench/README_train.md, session 41.
 * On Zen 3 (AVX2, 8-channel blocks) ResUNet-50 f32 training spent 517 ms of
 * a 6.1 s batch-16 step in oneDNN's deconvolution backward.
 *
 * Accumulating input gradients (a value read by another layer too) take the
 * forward convolution with a sum post-op, so dX is written once either way.
 * dW goes through the primitive's blocks and a reorder into the plain
 * gradient, writing or adding as the plan says. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

int cpu_deconv_1x1_bwd = 1;
long cpu_dcb_calls;

/* f32 in channel blocks (what f32 plans use: 16 channels with AVX-512, 8
 * with AVX2): dY exactly nChw16c or nChw8c, which the copy walks; X as its
 * products accept it. */
static int fits(const cpu_conv_shape *c, const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *dy) {
  const int lanes = cpu_md_lanes(dy);
  return cpu_deconv_1x1_bwd && (lanes == 16 || lanes == 8) && x->data_type == dnnl_f32 && dy->data_type == dnnl_f32 &&
         c->ic % lanes == 0 && c->oc % lanes == 0 && c->kh == 2 && c->kw == 2 && c->sh == 2 && c->sw == 2 &&
         c->pt == 0 && c->pl == 0 && c->oh == 2 * c->ih && c->ow == 2 * c->iw;
}

/* Only a real kernel on exactly the given layouts. */
static int keeps_layouts(const_dnnl_primitive_desc_t pd, dnnl_query_t q0, const dnnl_memory_desc_t *m0, dnnl_query_t q1,
                         const dnnl_memory_desc_t *m1) {
  return !cpu_pd_is_ref(pd) && cpu_md_equal(cpu_pd_md(pd, q0, 0), m0) && cpu_md_equal(cpu_pd_md(pd, q1, 0), m1);
}

static size_t larger(size_t a, size_t b) { return a > b ? a : b; }

/* dX = conv1x1(dY', W): written (sum = 0) or added (sum = 1). */
static int prepare_dx(cpu_dcb *m, cpu_node *n, int sum, size_t *scratch) {
  const dnnl_dims_t w = {m->ic, 4 * m->oc, 1, 1}, one = {1, 1}, zero = {0, 0};
  dnnl_memory_desc_t w_any;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, 4, w, dnnl_f32, dnnl_format_tag_any));
  dnnl_convolution_desc_t d;
  DNNL_TRY(dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct, &m->dy2_md, &w_any,
                                              NULL, &m->x_md, one, zero, zero));
  dnnl_post_ops_t po = NULL;
  if (cpu_sum_post_ops(sum, &po)) return -1;
  const int made = cpu_pd(&d, NULL, po, &m->dx_pd[sum]) == 0;
  if (po) dnnl_post_ops_destroy(po);
  if (!made) return sp_error_clear(), 1;
  if (!keeps_layouts(m->dx_pd[sum], dnnl_query_src_md, &m->dy2_md, dnnl_query_dst_md, &m->x_md) ||
      (sum && !cpu_md_equal(cpu_pd_md(m->dx_pd[sum], dnnl_query_weights_md, 0), &m->wt_md)))
    return cpu_pd_decline(&m->dx_pd[sum]);
  if (sum) {
    if (cpu_adopt(n, m->dx_pd[1], &m->dx_prim[1])) return -1;
  } else {
    size_t used;
    if (cpu_adopt_with_weights(n, m->dx_pd[0], &m->dx_prim[0], &m->w_plain_md, &m->wt_md, &m->wt_re_pd, &m->wt_re_prim,
                               &used))
      return -1;
    *scratch = larger(*scratch, used);
  }
  *scratch = larger(*scratch, cpu_scratchpad_bytes(m->dx_pd[sum]));
  return 0;
}

/* dW' = the weight gradient of the 1x1 convolution X -> dY', then reordered
 * into dW read as iohw: written (set) or added. */
static int prepare_dw(cpu_dcb *m, cpu_node *n, size_t *scratch) {
  const dnnl_dims_t w = {4 * m->oc, m->ic, 1, 1}, one = {1, 1}, zero = {0, 0};
  dnnl_memory_desc_t w_any;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, 4, w, dnnl_f32, dnnl_format_tag_any));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dw_plain_md, 4, w, dnnl_f32, dnnl_iohw));
  dnnl_convolution_desc_t fd, bd;
  DNNL_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &m->x_md, &w_any,
                                              NULL, &m->dy2_md, one, zero, zero));
  DNNL_TRY(dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &m->x_md, &w_any, NULL, &m->dy2_md,
                                                       one, zero, zero));
  dnnl_primitive_desc_t hint;
  if (cpu_pd(&fd, NULL, NULL, &hint)) return sp_error_clear(), 1;
  const int made = cpu_pd(&bd, hint, NULL, &m->dw_pd) == 0;
  dnnl_primitive_desc_destroy(hint);
  if (!made) return sp_error_clear(), 1;
  if (!keeps_layouts(m->dw_pd, dnnl_query_src_md, &m->x_md, dnnl_query_diff_dst_md, &m->dy2_md))
    return cpu_pd_decline(&m->dw_pd);
  if (cpu_adopt(n, m->dw_pd, &m->dw_prim)) return -1;
  m->dw2_md = *cpu_pd_md(m->dw_pd, dnnl_query_diff_weights_md, 0);
  for (int acc = 0; acc < 2; acc++) {
    if (cpu_make_reorder(n, &m->dw2_md, &m->dw_plain_md, acc, &m->dw_re_pd[acc], &m->dw_re_prim[acc])) return -1;
    *scratch = larger(*scratch, cpu_scratchpad_bytes(m->dw_re_pd[acc]));
  }
  *scratch = larger(*scratch, cpu_scratchpad_bytes(m->dw_pd));
  return 0;
}

int cpu_dcb_prepare(cpu_dcb *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *x,
                    const dnnl_memory_desc_t *dy, int need_dx, int need_dw, size_t *bwd_scratch) {
  memset(m, 0, sizeof *m);
  if ((!need_dx && !need_dw) || !fits(c, x, dy)) return 1;
  m->n = c->n, m->ic = c->ic, m->oc = c->oc, m->h = c->ih, m->w = c->iw, m->lanes = cpu_md_lanes(dy);
  m->x_md = *x;
  const dnnl_dims_t dy2 = {c->n, 4 * c->oc, c->ih, c->iw}, w = {c->ic, 4 * c->oc, 1, 1};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->dy2_md, 4, dy2, dnnl_f32, cpu_lanes_tag((int)m->lanes)));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&m->w_plain_md, 4, w, dnnl_f32, dnnl_oihw));
  size_t used = 0;
  int r;
  if (need_dx && ((r = prepare_dx(m, n, 0, &used)) != 0 || (r = prepare_dx(m, n, 1, &used)) != 0)) return r;
  if (need_dw && (r = prepare_dw(m, n, &used)) != 0) return r;
  m->dx = need_dx, m->dw = need_dw;
  /* The primitives' scratchpads from 0, then dY', W in the dX product's
   * blocks, dW' in the weight gradient's. */
  m->dy2_off = cpu_take(&used, cpu_md_bytes(&m->dy2_md));
  m->wt_off = cpu_take(&used, need_dx ? cpu_md_bytes(&m->wt_md) : 0);
  m->dw2_off = cpu_take(&used, need_dw ? cpu_md_bytes(&m->dw2_md) : 0);
  *bwd_scratch = used;
  return 0;
}

int cpu_dcb_bind(cpu_dcb *m, cpu_node *n, const float *w, const void *x, const void *dy, void *dx, float *dw,
                 char *bs) {
  m->dy = dy, m->dy2 = (float *)(bs + m->dy2_off);
  m->run_dx = m->dx && dx, m->run_dw = m->dw && dw;
  if (m->run_dx) {
    void *wt = bs + m->wt_off;
    if (cpu_bind_reorder(&m->wt_re, n, m->wt_re_pd, m->wt_re_prim, (void *)w, wt, bs)) return -1;
    for (int sum = 0; sum < 2; sum++) {
      cpu_exec_init(&m->dx_run[sum], m->dx_prim[sum]);
      if (cpu_exec_arg(&m->dx_run[sum], n, DNNL_ARG_SRC, &m->dy2_md, m->dy2) ||
          cpu_exec_arg(&m->dx_run[sum], n, DNNL_ARG_WEIGHTS, &m->wt_md, wt) ||
          cpu_exec_arg(&m->dx_run[sum], n, DNNL_ARG_DST, &m->x_md, dx) ||
          cpu_exec_scratchpad(&m->dx_run[sum], n, m->dx_pd[sum], bs))
        return -1;
    }
  }
  if (m->run_dw) {
    void *dw2 = bs + m->dw2_off;
    cpu_exec_init(&m->dw_run, m->dw_prim);
    if (cpu_exec_arg(&m->dw_run, n, DNNL_ARG_SRC, &m->x_md, (void *)x) ||
        cpu_exec_arg(&m->dw_run, n, DNNL_ARG_DIFF_DST, &m->dy2_md, m->dy2) ||
        cpu_exec_arg(&m->dw_run, n, DNNL_ARG_DIFF_WEIGHTS, &m->dw2_md, dw2) ||
        cpu_exec_scratchpad(&m->dw_run, n, m->dw_pd, bs))
      return -1;
    for (int acc = 0; acc < 2; acc++)
      if (cpu_bind_reorder(&m->dw_out[acc], n, m->dw_re_pd[acc], m->dw_re_prim[acc], dw2, dw, bs)) return -1;
  }
  return 0;
}

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

/* From one dY block of 16 channels at the four positions t (v[t]), the four
 * dY' blocks: block k lane 4 i + t = v[t][4 k + i]. Two rounds of pair
 * shuffles: first pairs of positions per channel, then the pairs joined. */
INLINE void transpose_groups16(const v16 v[4], v16 out[4]) {
  /* lo: channel groups k = 0, 1; hi: k = 2, 3; lane 8 k' + 2 i + t' = v[t'][4 k' + i] */
  const v16 lo01 = __builtin_shufflevector(v[0], v[1], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const v16 hi01 = __builtin_shufflevector(v[0], v[1], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const v16 lo23 = __builtin_shufflevector(v[2], v[3], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const v16 hi23 = __builtin_shufflevector(v[2], v[3], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  /* block k' lane 4 i + t: t < 2 from the 01 pair at 8 k' + 2 i + t, else the 23 pair at 8 k' + 2 i + t - 2 */
  out[0] = __builtin_shufflevector(lo01, lo23, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
  out[1] = __builtin_shufflevector(lo01, lo23, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
  out[2] = __builtin_shufflevector(hi01, hi23, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
  out[3] = __builtin_shufflevector(hi01, hi23, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
}

/* The same for 8-channel blocks: block k lane 4 i + t = v[t][2 k + i]. */
INLINE void transpose_groups8(const v8 v[4], v8 out[4]) {
  /* lo: channels 0-3, hi: 4-7; lane 2 c + t' = v[t'][c (+ 4)] */
  const v8 lo01 = __builtin_shufflevector(v[0], v[1], 0, 8, 1, 9, 2, 10, 3, 11);
  const v8 hi01 = __builtin_shufflevector(v[0], v[1], 4, 12, 5, 13, 6, 14, 7, 15);
  const v8 lo23 = __builtin_shufflevector(v[2], v[3], 0, 8, 1, 9, 2, 10, 3, 11);
  const v8 hi23 = __builtin_shufflevector(v[2], v[3], 4, 12, 5, 13, 6, 14, 7, 15);
  out[0] = __builtin_shufflevector(lo01, lo23, 0, 1, 8, 9, 2, 3, 10, 11);
  out[1] = __builtin_shufflevector(lo01, lo23, 4, 5, 12, 13, 6, 7, 14, 15);
  out[2] = __builtin_shufflevector(hi01, hi23, 0, 1, 8, 9, 2, 3, 10, 11);
  out[3] = __builtin_shufflevector(hi01, hi23, 4, 5, 12, 13, 6, 7, 14, 15);
}

/* dY' from dY, both in blocks of L channels: dY block ob at the four
 * positions of (h, w) gives dY' blocks 4 ob .. 4 ob + 3 at (h, w). One copy
 * per block width, so each takes the machine's own vector moves. */
#define SPACE_TO_DEPTH(NAME, L, VT, VTU, TRANSPOSE)                                                         \
  static void NAME(const cpu_dcb *m) {                                                                      \
    const int64_t ob_n = m->oc / L, h_n = m->h, w_n = m->w, ow = 2 * w_n, plane2 = h_n * w_n * L;           \
    const float *dy = m->dy;                                                                                \
    _Pragma("omp parallel for schedule(static)") for (int64_t r = 0; r < m->n * ob_n * h_n; r++) {          \
      const int64_t img = r / (ob_n * h_n), ob = r / h_n % ob_n, h = r % h_n;                               \
      const float *row0 = dy + ((img * ob_n + ob) * 4 * h_n * w_n + 2 * h * ow) * L, *row1 = row0 + ow * L; \
      float *out0 = m->dy2 + (img * 4 * ob_n + 4 * ob) * plane2 + h * w_n * L;                              \
      for (int64_t x = 0; x < w_n; x++) {                                                                   \
        VT v[4], o[4];                                                                                      \
        v[0] = *(const VTU *)(row0 + 2 * x * L), v[1] = *(const VTU *)(row0 + (2 * x + 1) * L);             \
        v[2] = *(const VTU *)(row1 + 2 * x * L), v[3] = *(const VTU *)(row1 + (2 * x + 1) * L);             \
        TRANSPOSE(v, o);                                                                                    \
        for (int k = 0; k < 4; k++) *(VTU *)(out0 + k * plane2 + x * L) = o[k];                             \
      }                                                                                                     \
    }                                                                                                       \
  }
SPACE_TO_DEPTH(space_to_depth16, 16, v16, v16u, transpose_groups16)
SPACE_TO_DEPTH(space_to_depth8, 8, v8, v8u, transpose_groups8)

void cpu_dcb_run(const cpu_dcb *m, int dx_fresh, int dw_fresh) {
  if (!m->run_dx && !m->run_dw) return;
  cpu_dcb_calls++;
  if (m->lanes == 16)
    space_to_depth16(m);
  else
    space_to_depth8(m);
  if (m->run_dx) {
    cpu_exec_run(&m->wt_re);
    cpu_exec_run(&m->dx_run[!dx_fresh]);
  }
  if (m->run_dw) {
    cpu_exec_run(&m->dw_run);
    cpu_exec_run(&m->dw_out[!dw_fresh]);
  }
}
#endif
