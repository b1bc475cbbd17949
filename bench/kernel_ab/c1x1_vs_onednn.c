/* conv_1x1.c's frozen f32 1x1 convolution against oneDNN's forward-inference
 * primitive on the same problem (16-channel blocks in and out, bias, the
 * ReLU and, with ADD, the residual add as post-ops: what a frozen plan
 * gives either), called alternately, the caches flushed before each call
 * unless FLUSH=0: the medians and the largest difference.
 *
 *   c1x1_vs_onednn N HW_SIDE C_IN C_OUT [calls]     (ab_c1x1.sh builds and runs it)
 *
 * Dev-time only: it links build/libspry.a and oneDNN like a test would. */
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "harness.h"

enum { MAX_CALLS = 101, FLUSH_BYTES = 256 << 20 };

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s N HW_SIDE C_IN C_OUT [calls]\n", argv[0]);
    return 2;
  }
  const int64_t n = atol(argv[1]), h = atol(argv[2]), ci = atol(argv[3]), co = atol(argv[4]);
  int calls = argc > 5 ? atoi(argv[5]) : 15;
  if (calls < 1 || calls > MAX_CALLS) calls = 15;
  const int add = getenv("ADD") && atoi(getenv("ADD")), flush_on = !getenv("FLUSH") || atoi(getenv("FLUSH"));
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t src, dst, wplain, wany, bmd;
  dnnl_dims_t sd = {n, ci, h, h}, dd = {n, co, h, h}, wd = {co, ci, 1, 1}, bd = {co}, s = {1, 1}, p0 = {0, 0};
  CK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nChw16c));
  CK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nChw16c));
  CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wd, dnnl_f32, dnnl_oihw));
  CK(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a));
  dnnl_post_ops_t po;
  dnnl_primitive_attr_t attr;
  CK(dnnl_post_ops_create(&po));
  if (add) CK(dnnl_post_ops_append_binary(po, dnnl_binary_add, &dst));
  CK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
  CK(dnnl_primitive_attr_create(&attr));
  CK(dnnl_primitive_attr_set_post_ops(attr, po));
  dnnl_convolution_desc_t fd;
  dnnl_primitive_desc_t fpd, rpd;
  CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_inference, dnnl_convolution_direct, &src, &wany, &bmd, &dst,
                                        s, p0, p0));
  CK(dnnl_primitive_desc_create(&fpd, &fd, attr, eng, NULL));
  const char *impl;
  CK(dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl));
  const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
  CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, wmd, eng, NULL));
  cpu_conv_shape cs = {n, h, h, ci, h, h, co, 1, 1, 1, 1, 0, 0, 1, 1};
  cpu_c1 c;
  if (cpu_c1_prepare(&c, &cs, &src, &dst, 1, add ? &dst : NULL)) {
    fprintf(stderr, "conv_1x1.c does not take %ld x %ld at %ld -> %ld\n", (long)n, (long)ci, (long)h, (long)co);
    return 1;
  }
  const size_t xs = (size_t)(n * ci * h * h), ys = (size_t)(n * co * h * h), ws = (size_t)(ci * co);
  float *x = aligned_alloc(64, xs * 4), *w = malloc(ws * 4), *b = malloc((size_t)co * 4),
        *res = aligned_alloc(64, ys * 4), *ours = aligned_alloc(64, ys * 4), *theirs = aligned_alloc(64, ys * 4),
        *packed = aligned_alloc(64, (cpu_c1_weight_bytes(&c) + 63) / 64 * 64),
        *blocked = aligned_alloc(64, (dnnl_memory_desc_get_size(wmd) + 63) / 64 * 64);
  char *flush = malloc(FLUSH_BYTES);
  for (size_t i = 0; i < xs; i++) x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
  for (size_t i = 0; i < ys; i++) res[i] = (float)((i * 3) % 7) * 0.1f - 0.3f;
  for (size_t i = 0; i < ws; i++) w[i] = (float)((i * 5) % 11) * 0.02f - 0.1f;
  for (int64_t i = 0; i < co; i++) b[i] = 0.01f * (float)(i % 17) - 0.05f;
  cpu_c1_weights(&c, packed, w);
  dnnl_memory_t mx, my, mw, mwp, mb, mr;
  CK(dnnl_memory_create(&mx, &src, eng, x));
  CK(dnnl_memory_create(&my, &dst, eng, theirs));
  CK(dnnl_memory_create(&mr, &dst, eng, res));
  CK(dnnl_memory_create(&mw, wmd, eng, blocked));
  CK(dnnl_memory_create(&mwp, &wplain, eng, w));
  CK(dnnl_memory_create(&mb, &bmd, eng, b));
  dnnl_primitive_t pf, pre;
  CK(dnnl_primitive_create(&pf, fpd));
  CK(dnnl_primitive_create(&pre, rpd));
  dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, mwp}, {DNNL_ARG_TO, mw}};
  CK(dnnl_primitive_execute(pre, st, 2, r));
  CK(dnnl_stream_wait(st));
  double t[2][MAX_CALLS];
  for (int k = 0; k < calls; k++)
    for (int which = 0; which < 2; which++) {
      if (flush_on) memset(flush, k + which, FLUSH_BYTES);
      const double t0 = now();
      if (which == 0) {
        cpu_c1_run(&c, packed, x, b, add ? res : NULL, ours);
      } else {
        dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, mx},
                                {DNNL_ARG_WEIGHTS, mw},
                                {DNNL_ARG_BIAS, mb},
                                {DNNL_ARG_DST, my},
                                {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mr}};
        CK(dnnl_primitive_execute(pf, st, add ? 5 : 4, a));
        CK(dnnl_stream_wait(st));
      }
      t[which][k] = now() - t0;
    }
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ys; i++) worst = fmax(worst, fabs(ours[i] - theirs[i])), scale = fmax(scale, fabs(theirs[i]));
  for (int k = 0; k < 2; k++) qsort(t[k], (size_t)calls, sizeof(double), by_value);
  const double a = t[0][calls / 2], o = t[1][calls / 2], flops = 2.0 * (double)(n * h * h) * (double)(ci * co);
  printf(
      "%3ld x %4ld at %3ld -> %4ld%s: ours %6.2f ms (%3.0f GF/s, nv %d tile %ld chunk %ld%s), oneDNN %s %6.2f ms "
      "(%3.0f), oneDNN / ours %.2f; largest difference %.2g of %.2g\n",
      (long)n, (long)ci, (long)h, (long)co, add ? " +add" : "", a * 1e3, flops / a * 1e-9, c.nv, (long)c.tile,
      (long)c.chunk, c.stream ? " streamed" : "", impl, o * 1e3, flops / o * 1e-9, o / a, worst, scale);
  return 0;
}
