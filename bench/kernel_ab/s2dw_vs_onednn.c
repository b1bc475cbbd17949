/* conv_s2_dw.c's weight gradient against oneDNN's backward-weights
 * primitive on the same f32 3x3 stride-2 problem in 8-channel blocks
 * (nChw8c), called alternately, the caches flushed before each call; the
 * median of each and the largest difference between the two results.
 *
 *   s2dw_vs_onednn N H C_IN C_OUT [calls]     (ab_s2dw.sh builds and runs it)
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
  const int64_t n = atol(argv[1]), h = atol(argv[2]), ci = atol(argv[3]), co = atol(argv[4]), oh = h / 2;
  int calls = argc > 5 ? atoi(argv[5]) : 15;
  if (calls < 1 || calls > MAX_CALLS) calls = 15;
  cpu_s2dw m;
  size_t work_bytes;
  cpu_s2dw_max_c_in = ci; /* any width: plans take it up to 64 input channels */
  if (cpu_s2dw_prepare(&m, n, h, h, ci, co, &work_bytes)) {
    fprintf(stderr, "conv_s2_dw.c does not take %ld x %ld at %ld -> %ld\n", (long)n, (long)ci, (long)h, (long)co);
    return 1;
  }
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t src, dst, wany;
  dnnl_dims_t sd = {n, ci, h, h}, dd = {n, co, oh, oh}, wd = {co, ci, 3, 3}, s = {2, 2}, pl = {1, 1}, pr = {0, 0};
  CK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nChw8c));
  CK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nChw8c));
  CK(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any));
  dnnl_convolution_desc_t fd, bw;
  dnnl_primitive_desc_t fpd, bwpd, rpd;
  CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src, &wany, NULL, &dst, s,
                                        pl, pr));
  CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
  CK(dnnl_convolution_backward_weights_desc_init(&bw, dnnl_convolution_direct, &src, &wany, NULL, &dst, s, pl, pr));
  CK(dnnl_primitive_desc_create(&bwpd, &bw, NULL, eng, fpd));
  const char *impl;
  CK(dnnl_primitive_desc_query(bwpd, dnnl_query_impl_info_str, 0, &impl));
  const dnnl_memory_desc_t *dwmd = dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_weights_md, 0);
  dnnl_memory_desc_t plain;
  CK(dnnl_memory_desc_init_by_tag(&plain, 4, wd, dnnl_f32, dnnl_oihw));
  CK(dnnl_reorder_primitive_desc_create(&rpd, dwmd, eng, &plain, eng, NULL));
  const size_t xs = (size_t)(n * ci * h * h), ys = (size_t)(n * co * oh * oh), ws = (size_t)(9 * ci * co);
  float *x = aligned_alloc(64, xs * 4), *dy = aligned_alloc(64, ys * 4), *ours = malloc(ws * 4),
        *theirs = malloc(ws * 4), *blocked = aligned_alloc(64, (dnnl_memory_desc_get_size(dwmd) + 63) / 64 * 64);
  char *work = aligned_alloc(64, (work_bytes + 63) / 64 * 64), *flush = malloc(FLUSH_BYTES);
  for (size_t i = 0; i < xs; i++) x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
  for (size_t i = 0; i < ys; i++) dy[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
  dnnl_memory_t mx, mdy, mdw, mplain;
  CK(dnnl_memory_create(&mx, &src, eng, x));
  CK(dnnl_memory_create(&mdy, &dst, eng, dy));
  CK(dnnl_memory_create(&mdw, dwmd, eng, blocked));
  CK(dnnl_memory_create(&mplain, &plain, eng, theirs));
  dnnl_primitive_t pbw, pre;
  CK(dnnl_primitive_create(&pbw, bwpd));
  CK(dnnl_primitive_create(&pre, rpd));
  double t[2][MAX_CALLS];
  for (int c = 0; c < calls; c++)
    for (int which = 0; which < 2; which++) {
      memset(flush, c + which, FLUSH_BYTES);
      const double t0 = now();
      if (which == 0) {
        cpu_s2dw_run(&m, x, dy, ours, 1, work);
      } else { /* oneDNN's kernel and its reorder into the plain gradient, as the plan runs them */
        dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mdw}};
        CK(dnnl_primitive_execute(pbw, st, 3, a));
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, mdw}, {DNNL_ARG_TO, mplain}};
        CK(dnnl_primitive_execute(pre, st, 2, r));
        CK(dnnl_stream_wait(st));
      }
      t[which][c] = now() - t0;
    }
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ws; i++) worst = fmax(worst, fabs(ours[i] - theirs[i])), scale = fmax(scale, fabs(theirs[i]));
  qsort(t[0], (size_t)calls, sizeof(double), by_value);
  qsort(t[1], (size_t)calls, sizeof(double), by_value);
  const double a = t[0][calls / 2], b = t[1][calls / 2], flops = 2.0 * (double)(n * oh * oh) * (double)(9 * ci * co);
  printf(
      "%ld x %ld at %ld -> %ld (oneDNN: %s), %d calls each: ours %.2f ms (%.0f GFLOP/s), oneDNN %.2f ms (%.0f), "
      "oneDNN / ours %.2f; largest difference %.2g of %.2g\n",
      (long)n, (long)ci, (long)h, (long)co, impl, calls, a * 1e3, flops / a * 1e-9, b * 1e3, flops / b * 1e-9, b / a,
      worst, scale);
  return 0;
}
