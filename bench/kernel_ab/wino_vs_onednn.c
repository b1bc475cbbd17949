/* Our Winograd's forward, input gradient and weight gradient against
 * oneDNN's forward, backward-data and backward-weights primitives (its
 * direct kernels; the weight gradient with its reorder into the plain
 * gradient, as plans run it; at stride 2 ours is conv_s2_dw.c's, up to 64
 * input channels) on the same f32 3x3
 * problem in 8-channel blocks (nChw8c): stride 2 (conv_wino_s2.c), or
 * stride 1 with STRIDE=1 (conv_wino.c). Called alternately, the caches
 * flushed before each call: the median of each (ours without its weight
 * transform, timed apart: a frozen plan runs it once) and the largest
 * difference between the results.
 *
 *   [STRIDE=1] wino_vs_onednn N H C_IN C_OUT [calls]     (ab_wino.sh builds and runs it)
 *
 * Dev-time only: it links build/libspry.a and oneDNN like a test would. */
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "harness.h"

enum { MAX_CALLS = 101, FLUSH_BYTES = 64 << 20 };

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s N H C_IN C_OUT [calls]\n", argv[0]);
    return 2;
  }
  /* STRIDE=1: conv_wino.c's stride-1 kernel (padding 1) on the same terms */
  const int64_t st1 = getenv("STRIDE") && atoi(getenv("STRIDE")) == 1, sv = st1 ? 1 : 2;
  const int64_t n = atol(argv[1]), h = atol(argv[2]), ci = atol(argv[3]), co = atol(argv[4]),
                oh = st1 ? h : (h - 1) / 2 + 1;
  int calls = argc > 5 ? atoi(argv[5]) : 15;
  if (calls < 1 || calls > MAX_CALLS) calls = 15;
  cpu_wino m, mb, md;
  cpu_s2dw s2d;
  size_t u_bytes, work_bytes, ub_bytes, workb_bytes, workd_bytes, works_bytes = 64;
  cpu_wino_min_tiles = 1;
  cpu_wino_s2_min_c_in = 8; /* any width: plans take it from 64 input channels */
  cpu_wino_s2_max_c_in = 1024;
  cpu_wino_s2_min_tiles = cpu_wino_s2_min_tiles_dx = 1;
  cpu_s2dw_max_c_in = 64;
  /* the weight gradient: conv_wino.c's at stride 1, conv_s2_dw.c's at stride 2 (up to 64 input channels) */
  const int have_d = st1 && cpu_wino_dw_prepare(&md, n, h, h, ci, co, &workd_bytes) == 0,
            have_s = !st1 && h % 2 == 0 && cpu_s2dw_prepare(&s2d, n, h, h, ci, co, &works_bytes) == 0;
  /* the input gradient needs input channels in 16s: not timed where not */
  cpu_wino_min_tiles = 1;
  const int have_b = (st1 ? cpu_wino_prepare(&mb, n, h, h, co, ci, 1, 0, &ub_bytes, &workb_bytes)
                          : cpu_wino_s2_prepare(&mb, n, h, h, ci, co, 1, &ub_bytes, &workb_bytes)) == 0;
  if (!have_b) ub_bytes = workb_bytes = 64;
  if (st1 ? cpu_wino_prepare(&m, n, h, h, ci, co, 0, 0, &u_bytes, &work_bytes)
          : cpu_wino_s2_prepare(&m, n, h, h, ci, co, 0, &u_bytes, &work_bytes)) {
    fprintf(stderr, "our Winograd does not take %ld x %ld at %ld -> %ld\n", (long)n, (long)ci, (long)h, (long)co);
    return 1;
  }
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t src, dst, wplain, wany;
  dnnl_dims_t sd = {n, ci, h, h}, dd = {n, co, oh, oh}, wd = {co, ci, 3, 3}, s = {sv, sv}, pl = {1, 1},
              pr = {(oh - 1) * sv + 3 - h - 1, (oh - 1) * sv + 3 - h - 1};
  CK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nChw8c));
  CK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nChw8c));
  CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wd, dnnl_f32, dnnl_oihw));
  CK(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any));
  dnnl_convolution_desc_t fd;
  dnnl_primitive_desc_t fpd, rpd;
  CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_inference, dnnl_convolution_direct, &src, &wany, NULL, &dst,
                                        s, pl, pr));
  CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
  dnnl_convolution_desc_t bd;
  dnnl_primitive_desc_t bpd;
  CK(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src, &wany, &dst, s, pl, pr));
  CK(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
  dnnl_convolution_desc_t bwd;
  dnnl_primitive_desc_t bwpd, rwpd;
  CK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &src, &wany, NULL, &dst, s, pl, pr));
  CK(dnnl_primitive_desc_create(&bwpd, &bwd, NULL, eng, fpd));
  const dnnl_memory_desc_t *dwmd = dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_weights_md, 0);
  CK(dnnl_reorder_primitive_desc_create(&rwpd, dwmd, eng, &wplain, eng, NULL));
  const char *impl, *impl_b;
  CK(dnnl_primitive_desc_query(bpd, dnnl_query_impl_info_str, 0, &impl_b));
  CK(dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl));
  const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
  CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, wmd, eng, NULL));
  /* backward data may want its weights in another layout than forward */
  const dnnl_memory_desc_t *wbmd = dnnl_primitive_desc_query_md(bpd, dnnl_query_weights_md, 0);
  dnnl_primitive_desc_t rbpd;
  CK(dnnl_reorder_primitive_desc_create(&rbpd, &wplain, eng, wbmd, eng, NULL));
  const size_t xs = (size_t)(n * ci * h * h), ys = (size_t)(n * co * oh * oh), ws = (size_t)(9 * ci * co);
  float *x = aligned_alloc(64, xs * 4), *w = malloc(ws * 4), *ours = aligned_alloc(64, ys * 4),
        *theirs = aligned_alloc(64, ys * 4),
        *blocked = aligned_alloc(64, (dnnl_memory_desc_get_size(wmd) + 63) / 64 * 64),
        *u = aligned_alloc(64, (u_bytes + 63) / 64 * 64), *ub = aligned_alloc(64, (ub_bytes + 63) / 64 * 64),
        *dx_ours = aligned_alloc(64, xs * 4), *dx_theirs = aligned_alloc(64, xs * 4);
  float *dw_ours = malloc(ws * 4), *dw_theirs = malloc(ws * 4), *dw_s2dw = malloc(ws * 4),
        *dw_blocked = aligned_alloc(64, (dnnl_memory_desc_get_size(dwmd) + 63) / 64 * 64);
  char *workd = aligned_alloc(64, ((have_d ? workd_bytes : 64) + 63) / 64 * 64),
       *works = aligned_alloc(64, (works_bytes + 63) / 64 * 64);
  char *work = aligned_alloc(64, (work_bytes + 63) / 64 * 64), *flush = malloc(FLUSH_BYTES),
       *workb = aligned_alloc(64, (workb_bytes + 63) / 64 * 64);
  for (size_t i = 0; i < xs; i++) x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
  for (size_t i = 0; i < ws; i++) w[i] = (float)((i * 5) % 11) * 0.02f - 0.1f;
  dnnl_memory_t mx, my, mw, mwp, mdx, mdy, mwb, mdwb, mdwp;
  float *blocked_b = aligned_alloc(64, (dnnl_memory_desc_get_size(wbmd) + 63) / 64 * 64);
  CK(dnnl_memory_create(&mx, &src, eng, x));
  CK(dnnl_memory_create(&my, &dst, eng, theirs));
  CK(dnnl_memory_create(&mw, wmd, eng, blocked));
  CK(dnnl_memory_create(&mwp, &wplain, eng, w));
  CK(dnnl_memory_create(&mdx, &src, eng, dx_theirs));
  CK(dnnl_memory_create(&mwb, wbmd, eng, blocked_b));
  CK(dnnl_memory_create(&mdy, &dst, eng, x)); /* dY: the first values of x */
  CK(dnnl_memory_create(&mdwb, dwmd, eng, dw_blocked));
  CK(dnnl_memory_create(&mdwp, &wplain, eng, dw_theirs));
  dnnl_primitive_t pf, pre, pb, preb, pbw, prw;
  CK(dnnl_primitive_create(&pf, fpd));
  CK(dnnl_primitive_create(&pbw, bwpd));
  CK(dnnl_primitive_create(&prw, rwpd));
  CK(dnnl_primitive_create(&pb, bpd));
  if (have_b) cpu_wino_weights(&mb, ub, w, NULL);
  CK(dnnl_primitive_create(&pre, rpd));
  dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, mwp}, {DNNL_ARG_TO, mw}};
  CK(dnnl_primitive_execute(pre, st, 2, r));
  CK(dnnl_primitive_create(&preb, rbpd));
  dnnl_exec_arg_t rb[2] = {{DNNL_ARG_FROM, mwp}, {DNNL_ARG_TO, mwb}};
  CK(dnnl_primitive_execute(preb, st, 2, rb));
  CK(dnnl_stream_wait(st));
  /* 0 our weights, 1 our forward, 2 oneDNN's, 3 our input gradient, 4
   * oneDNN's, 5 our weight gradient, 6 oneDNN's (+ its reorder), 7 conv_s2_dw.c's */
  const int have[8] = {1, 1, 1, have_b, have_b, have_d, have_d || have_s, have_s};
  double t[8][MAX_CALLS];
  for (int c = 0; c < calls; c++)
    for (int which = 0; which < 8; which++) {
      if (!have[which]) continue;
      memset(flush, c + which, FLUSH_BYTES);
      const double t0 = now();
      if (which == 0) {
        cpu_wino_weights(&m, u, w, NULL);
      } else if (which == 1) {
        cpu_wino_run(&m, u, x, ours, NULL, 0, 0, work);
      } else if (which == 2) {
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
        CK(dnnl_primitive_execute(pf, st, 3, a));
        CK(dnnl_stream_wait(st));
      } else if (which == 3) {
        cpu_wino_run(&mb, ub, x, dx_ours, NULL, 0, 0, workb);
      } else if (which == 4) {
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mwb}, {DNNL_ARG_DIFF_SRC, mdx}};
        CK(dnnl_primitive_execute(pb, st, 3, a));
        CK(dnnl_stream_wait(st));
      } else if (which == 5) {
        cpu_wino_dw_run(&md, x, x, dw_ours, 1, workd);
      } else if (which == 6) {
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mdwb}};
        CK(dnnl_primitive_execute(pbw, st, 3, a));
        dnnl_exec_arg_t rr[2] = {{DNNL_ARG_FROM, mdwb}, {DNNL_ARG_TO, mdwp}};
        CK(dnnl_primitive_execute(prw, st, 2, rr));
        CK(dnnl_stream_wait(st));
      } else {
        cpu_s2dw_run(&s2d, x, x, dw_s2dw, 1, works);
      }
      t[which][c] = now() - t0;
    }
  double worst = 0, scale = 0, worst_b = 0, scale_b = 0;
  for (size_t i = 0; i < ys; i++) worst = fmax(worst, fabs(ours[i] - theirs[i])), scale = fmax(scale, fabs(theirs[i]));
  for (size_t i = 0; have_b && i < xs; i++)
    worst_b = fmax(worst_b, fabs(dx_ours[i] - dx_theirs[i])), scale_b = fmax(scale_b, fabs(dx_theirs[i]));
  for (int k = 0; k < 8; k++)
    if (have[k]) qsort(t[k], (size_t)calls, sizeof(double), by_value);
  const double wt = t[0][calls / 2], a = t[1][calls / 2], b = t[2][calls / 2], da = t[3][calls / 2],
               db = t[4][calls / 2], flops = 2.0 * (double)(n * oh * oh) * (double)(9 * ci * co);
  printf("%ld x %ld at %ld -> %ld, %d calls each (GFLOP/s as direct); weights %.2f ms\n", (long)n, (long)ci, (long)h,
         (long)co, calls, wt * 1e3);
  printf(
      "  forward:     ours %.2f ms (%.0f), oneDNN %s %.2f ms (%.0f), oneDNN / ours %.2f; largest difference %.2g of "
      "%.2g\n",
      a * 1e3, flops / a * 1e-9, impl, b * 1e3, flops / b * 1e-9, b / a, worst, scale);
  if (have_b)
    printf(
        "  input grad:  ours %.2f ms (%.0f), oneDNN %s %.2f ms (%.0f), oneDNN / ours %.2f; largest difference %.2g of "
        "%.2g\n",
        da * 1e3, flops / da * 1e-9, impl_b, db * 1e3, flops / db * 1e-9, db / da, worst_b, scale_b);
  if (have_d || have_s) { /* ours: conv_wino.c's at stride 1, conv_s2_dw.c's at stride 2 */
    const int k = have_s ? 7 : 5;
    const float *mine = have_s ? dw_s2dw : dw_ours;
    double worst_d = 0, scale_d = 0;
    for (size_t i = 0; i < ws; i++)
      worst_d = fmax(worst_d, fabs(mine[i] - dw_theirs[i])), scale_d = fmax(scale_d, fabs(dw_theirs[i]));
    const double ga = t[k][calls / 2], gb = t[6][calls / 2];
    printf(
        "  weight grad: ours (%s) %.2f ms (%.0f), oneDNN %.2f ms (%.0f), oneDNN / ours %.2f; largest difference "
        "%.2g of %.2g\n",
        have_s ? "conv_s2_dw.c" : "conv_wino.c", ga * 1e3, flops / ga * 1e-9, gb * 1e3, flops / gb * 1e-9, gb / ga,
        worst_d, scale_d);
  }
  return 0;
}
